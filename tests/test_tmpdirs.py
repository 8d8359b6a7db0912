"""The suite's own checks, each run in a child pytest session (one process, so xdist cannot
split what belongs together, and a failure of the child is what is checked): the folders a test
makes are removed when it ends; a folder left behind fails the session, naming who made it; a
missing golden file fails instead of being written, unless AGENT_RUN_UPDATE_SNAPSHOTS=1."""

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.harness import SNAPSHOTS_DIR_ENV, UPDATE_SNAPSHOTS_ENV, short_tmpdir

REPO = Path(__file__).resolve().parent.parent
CASES = Path("tests") / "fixtures" / "tmpdirs"


def child_pytest(case: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`pytest CASE` in its own process, without xdist, as a developer runs one file."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "AGENT_RUN_"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "-s"]
        + [str(CASES / case)],
        cwd=REPO,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )


def test_a_tests_folders_are_gone_when_it_ends() -> None:
    done = child_pytest("clean_cases.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    checked = re.search(r"checked (/tmp/\S+)", done.stdout)
    assert checked and not Path(checked.group(1)).exists()


def test_a_folder_left_behind_fails_the_session_and_names_who_made_it() -> None:
    done = child_pytest("leaky_cases.py")
    made = re.search(r"made (/tmp/arleak-\S+)", done.stdout)
    assert made, done.stdout + done.stderr
    assert done.returncode == 1, done.stdout
    assert "1 passed, 1 error" in done.stdout
    assert "temporary folders left behind (now removed):" in done.stdout
    assert f"{made.group(1)}  (made by {CASES}/leaky_cases.py::" in done.stdout
    assert not Path(made.group(1)).exists()


def test_a_missing_golden_file_fails_and_is_written_only_when_asked() -> None:
    folder = short_tmpdir("argold-")
    done = child_pytest("golden_cases.py", **{SNAPSHOTS_DIR_ENV: str(folder)})
    assert done.returncode == 1 and f"golden file {folder}/case.txt is missing" in done.stdout
    assert os.listdir(folder) == []
    updated = child_pytest(
        "golden_cases.py", **{SNAPSHOTS_DIR_ENV: str(folder), UPDATE_SNAPSHOTS_ENV: "1"}
    )
    assert updated.returncode == 0, updated.stdout
    assert (folder / "case.txt").read_text() == "the text as it is today\n"
    again = child_pytest("golden_cases.py", **{SNAPSHOTS_DIR_ENV: str(folder)})
    assert again.returncode == 0, again.stdout
