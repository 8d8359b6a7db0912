"""docs/api.md stays true: its Python client runs, and every tool and error code is documented."""

import os
import re
import subprocess
import sys
from pathlib import Path

from agent_run.domain.errors import ERRORS_BY_CODE
from agent_run.tools.table import SOCKET_ONLY, TOOLS

API_DOC = Path(__file__).parent.parent / "docs" / "api.md"


def test_every_tool_and_domain_error_code_is_documented():
    text = API_DOC.read_text()
    for name in TOOLS:
        assert f"### {name}" in text, name
    for name in SOCKET_ONLY:
        assert name in text
    for code in ERRORS_BY_CODE:
        if code not in ("DomainError", "DaemonUnavailable"):  # client-side only
            assert f"`{code}`" in text, code


def test_copy_paste_python_client_runs_against_a_real_daemon(daemon, home, workdir):
    block = re.search(r"```python\n(.*?)```", API_DOC.read_text(), re.S).group(1)
    env = {**os.environ, "AGENT_RUN_HOME": str(home.root)}
    result = subprocess.run(
        [sys.executable, "-c", block],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "succeeded hello from the socket"


def test_the_generated_parameter_lists_are_current():
    """docs/api.md's per-method parameter lists are the tool table's schemas, regenerated."""
    from agent_run.tools.api_reference import BEGIN, rewrite

    text = API_DOC.read_text()
    assert text.count(BEGIN) == len(TOOLS)
    assert rewrite(text) == text, (
        "docs/api.md is stale: run `python -m agent_run.tools.api_reference`"
    )
