"""A release: one version, printed by `agent-run --version` (with the commit from a checkout);
`scripts/release` builds the wheel, the sdist and the hashed closure of the locked
dependencies, and that closure installs with `pip --require-hashes` on a fresh machine, where the
installed command runs an agent (tests marked `fresh` download from PyPI)."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agent_run import __version__
from tests.harness import short_tmpdir
from tests.test_fresh_machine import LIKE_DEBIAN, SYSTEM_PYTHON, _fresh_env

REPO = Path(__file__).resolve().parent.parent


def test_the_version_is_written_once_and_printed_with_the_checkouts_commit() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|rc\d+)?", __version__)
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "\nversion =" not in pyproject
    sha = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    done = subprocess.run(
        [str(REPO / ".venv" / "bin" / "agent-run"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.startswith(f"agent-run {__version__} (commit {sha}"), done.stdout


@pytest.fixture
def release_dir():
    out = short_tmpdir("arr-")
    yield out
    shutil.rmtree(out, ignore_errors=True)


def _release(out: Path) -> dict[str, Path]:
    subprocess.run(
        [str(REPO / "scripts" / "release"), str(out)],
        capture_output=True,
        text=True,
        timeout=110,
        check=True,
    )
    files = {p.name: p for p in out.iterdir() if not p.name.startswith(".")}
    wheel = out / f"agent_run-{__version__}-py3-none-any.whl"
    assert set(files) == {
        wheel.name,
        f"agent_run-{__version__}.tar.gz",
        "requirements.txt",
        "SHA256SUMS",
    }
    return {"wheel": wheel, "requirements": out / "requirements.txt"}


@pytest.mark.fresh  # builds with hatchling and installs the closure from PyPI
@LIKE_DEBIAN
def test_the_release_installs_with_hashes_on_a_fresh_machine_and_runs_an_agent(
    release_dir: Path,
) -> None:
    built = _release(release_dir / "dist")
    closure = built["requirements"].read_text()
    pins = re.findall(r"^([a-z0-9_.-]+)==", closure, re.M)
    assert {"click", "pydantic", "mcp"} <= set(pins) and "agent-run" not in pins
    assert "pytest" not in pins and "ruff" not in pins  # no dev tools
    hashed = re.findall(r"^[a-z0-9_.-]+==[^\n]*\\\n\s+--hash=sha256:[0-9a-f]{64}", closure, re.M)
    assert len(hashed) == len(pins)  # every pin carries its hashes
    user = release_dir / "user"
    user.mkdir()
    env = _fresh_env(user)
    venv = release_dir / "venv"
    subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", str(venv)], env=env, check=True)
    pip = [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check"]
    # A closure whose hash does not match is refused before anything is installed.
    tampered = release_dir / "tampered.txt"
    tampered.write_text(re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "0" * 64, closure))
    refused = subprocess.run(
        [*pip, "--require-hashes", "-r", str(tampered)], env=env, capture_output=True, text=True
    )
    assert refused.returncode != 0 and "HASH" in refused.stderr.upper(), refused.stderr[-2000:]
    subprocess.run(
        [*pip, "--require-hashes", "-r", str(built["requirements"])], env=env, check=True
    )
    subprocess.run([*pip, "--no-deps", str(built["wheel"])], env=env, check=True)
    agent_run = str(venv / "bin" / "agent-run")
    shown = subprocess.run([agent_run, "--version"], env=env, capture_output=True, text=True)
    assert shown.stdout.strip() == f"agent-run {__version__}"  # not a checkout: no commit
    home, workdir = user / ".agent-run", user / "work"
    workdir.mkdir()
    try:
        started = subprocess.run(
            [agent_run, "start", "--task", "answer: installed", "--workdir", str(workdir)]
            + ["--format", "text", "--wait"],
            env=env,
            capture_output=True,
            text=True,
            timeout=110,
        )
        assert started.returncode == 0, started.stdout + started.stderr
        assert "succeeded" in started.stdout and "installed" in started.stdout, started.stdout
    finally:
        subprocess.run([agent_run, "--home", str(home), "api", "stop"], env=env, timeout=60)
