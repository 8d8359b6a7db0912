"""Races found in review: slow actions outside the scheduler's lock, clean against rerun, git
off the event loop, durable reply files."""

import os
import shutil
import stat
import threading
from pathlib import Path
from typing import Any

from agent_run.domain.errors import DomainError
from agent_run.home import Home
from tests.batch_harness import BatchProject, make_repo, runs_of, wait_batch
from tests.harness import DaemonProcess, make_home, remove_home, short_tmpdir, wait_for


def _wait_for_file(path: Path, limit_tenths: int = 3000) -> str:
    """Shell that waits (bounded) until `path` exists: a condition, not a fixed sleep."""
    return (
        f'i=0; while [ ! -f "{path}" ] && [ $i -lt {limit_tenths} ]; do sleep 0.1; i=$((i+1)); done'
    )


def test_a_slow_verify_command_does_not_freeze_starting_and_cancelling_other_batches(
    batch_project: BatchProject,
) -> None:
    daemon = batch_project.daemon
    # The verify_command runs sandboxed (a private /tmp, its workdir writable): its marks live in
    # the candidate's worktree, named relative to it.
    slow = batch_project.start_ranked_pair(
        verify_command=f"touch verify-started; {_wait_for_file(Path('release'))}; touch verify-done"
    )
    view = daemon.call("batch", {"batch_id": slow["id"]})
    marks = Path(runs_of(view, "candidate")[0]["workdir"])
    started, release, finished = marks / "verify-started", marks / "release", marks / "verify-done"
    try:
        wait_for(started.exists, timeout=90, what="the verify_command to start")
        other = batch_project.start(
            "repeated", runs=1, prompt="steps: 400\nstep_seconds: 0.05\nanswer: x"
        )
        assert other["state"] in ("queued", "running")
        daemon.call("batch_cancel", {"batch_id": other["id"]})
        assert wait_batch(daemon, other["id"], ("cancelled",), timeout=60)["state"] == "cancelled"
        assert (
            runs_of(daemon.call("batch", {"batch_id": other["id"]}), "worker")[0]["state"]
            == "cancelled"
        )
        assert not finished.exists(), "the other batch waited for the verify_command"
        assert (
            runs_of(daemon.call("batch", {"batch_id": slow["id"]}), "candidate")[0]["state"]
            == "running"
        )
    finally:
        release.touch()
    done = wait_batch(daemon, slow["id"], timeout=120)
    assert done["state"] == "completed", done
    candidate = runs_of(done, "candidate")[0]
    assert candidate["verify_passed"] is True and finished.exists()


def _race(calls: list[Any]) -> list[Any]:
    """Run the calls at once from threads; each result is its return value or its exception."""
    results: list[Any] = [None] * len(calls)
    gate = threading.Barrier(len(calls))

    def run(i: int) -> None:
        gate.wait()
        try:
            results[i] = calls[i]()
        except DomainError as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def test_clean_and_rerun_of_the_same_run_never_both_happen(batch_project: BatchProject) -> None:
    daemon = batch_project.daemon
    for _ in range(4):
        batch = batch_project.finish("repeated", runs=1, prompt="answer: nothing changed")
        run = runs_of(batch, "worker")[0]
        rerun, clean = _race(
            [
                lambda run=run: daemon.call("run_rerun", {"run_id": run["id"]}),
                lambda batch=batch: daemon.call(
                    "batch_clean", {"batch_id": batch["id"], "confirm": True, "force": True}
                ),
            ]
        )
        assert not isinstance(clean, Exception), clean
        [item] = clean["items"]
        if item["action"] == "removed":
            assert isinstance(rerun, DomainError) and rerun.code == "Conflict", rerun
            assert not Path(run["worktree"]).exists()
        else:
            assert item["action"] == "kept_running" and not isinstance(rerun, Exception), (
                item,
                rerun,
            )
            assert Path(run["worktree"]).is_dir()
            after = wait_batch(daemon, batch["id"])
            assert runs_of(after, "worker")[0]["state"] == "succeeded", after


def test_git_of_batch_start_runs_off_the_event_loop(home: Home) -> None:
    marks = short_tmpdir("arm-")
    wrappers = marks / "bin"
    wrappers.mkdir()
    real_git = shutil.which("git")
    (wrappers / "git").write_text(
        "#!/bin/sh\n"
        f'case "$*" in *--show-toplevel*) touch "{marks}/git-started"; '
        f"{_wait_for_file(marks / 'release', 600)};; esac\n"
        f'exec "{real_git}" "$@"\n'
    )
    (wrappers / "git").chmod(0o755)
    daemon = DaemonProcess(home, env={"PATH": f"{wrappers}:{os.environ['PATH']}"}).start()
    repo = make_repo()
    result: list[Any] = []
    starter = threading.Thread(
        target=lambda: result.append(
            BatchProject(daemon, repo).start("repeated", runs=1, prompt="answer: x")
        )
    )
    try:
        starter.start()
        wait_for((marks / "git-started").exists, timeout=30, what="git rev-parse to run")
        with daemon.client(timeout=20) as client:  # the event loop answers while git runs
            assert client.call("ping")["pong"] is True
            assert client.call("list_batches")["total"] == 0
    finally:
        (marks / "release").touch()
        starter.join(timeout=60)
        daemon.stop()
        shutil.rmtree(marks, ignore_errors=True)
        shutil.rmtree(repo.parent, ignore_errors=True)
    assert result and result[0]["state"] in ("queued", "running", "completed")


def test_a_failed_executions_reply_is_a_private_file_written_atomically(
    daemon: DaemonProcess, workdir: Path
) -> None:
    agent = daemon.call("start", {"task": "fail: server", "workdir": str(workdir)})
    done = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
    assert done["state"] == "failed"
    directory = daemon.home.execution_dir(agent["id"], done["execution"]["id"])
    reply = directory / "reply.md"
    assert "API Error: 500" in reply.read_text()
    assert stat.S_IMODE(reply.stat().st_mode) == 0o600
    assert not [p.name for p in directory.iterdir() if ".tmp-" in p.name]


def test_a_commit_whose_worker_server_dies_before_recording_it_still_counts() -> None:
    """create_commit records its intent before it commits: kill -9 the worker-tools server right
    after the commit lands on the run's branch and the candidate is still judged by its commit.

    agent-run's git runs no hook (core.hooksPath=/dev/null: a hook is a program the repository
    names), so the kill comes from a `git` first on the daemon's PATH: the real git, then, once
    its `update-ref` of the run's branch (create_commit's last step) succeeded, kill -9 of the
    worker-tools server that ran it."""
    marks = short_tmpdir("arm-")
    wrapper = marks / "bin" / "git"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        f'{shutil.which("git")} "$@"; status=$?\n'
        'case "$*" in *update-ref*refs/heads/agent-run/*)\n'
        f'  if [ $status = 0 ] && [ ! -f "{marks}/killed" ] &&'
        ' grep -q worker_tools "/proc/$PPID/cmdline"; then\n'
        f'    touch "{marks}/killed"; kill -9 "$PPID"\n'
        "  fi;;\n"
        "esac\n"
        "exit $status\n"
    )
    wrapper.chmod(0o755)
    home = make_home()
    daemon = DaemonProcess(home, env={"PATH": f"{wrapper.parent}:{os.environ['PATH']}"}).start()
    project = BatchProject(daemon, make_repo())
    try:
        done = wait_batch(daemon, project.start_ranked_pair()["id"])
        assert (marks / "killed").exists(), "the worker-tools server was never killed"
        candidate = runs_of(done, "candidate")[0]
        assert candidate["state"] == "succeeded", candidate
        assert len(candidate["result"]["commits"]) == 1 and done["state"] == "completed"
    finally:
        daemon.stop()
        remove_home(home)
        shutil.rmtree(project.repo.parent, ignore_errors=True)
        shutil.rmtree(marks, ignore_errors=True)


def test_write_private_file_fsyncs_the_directory_after_the_rename(workdir: Path) -> None:
    """Traced for real (strace): the rename is made durable by an fsync of its directory."""
    import re
    import subprocess
    import sys

    import pytest

    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    trace = workdir / "trace.txt"
    code = (
        "from pathlib import Path; from agent_run.home import write_private_file; "
        f"write_private_file(Path({str(workdir)!r}) / 'reply.md', b'x' * 100000)"
    )
    subprocess.run(
        [
            "strace",
            "-f",
            "-s",
            "4096",
            "-o",
            str(trace),
            "-e",
            "trace=openat,fsync,rename,renameat,renameat2",
            sys.executable,
            "-c",
            code,
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    lines = trace.read_text().splitlines()
    renamed = next(i for i, line in enumerate(lines) if "rename" in line and "reply.md" in line)
    dir_fds = {
        m.group(1)
        for line in lines[renamed:]
        if (
            m := re.search(
                rf'openat\(AT_FDCWD, "{re.escape(str(workdir))}", [^)]*O_DIRECTORY[^)]*\) += (\d+)',
                line,
            )
        )
    }
    assert dir_fds, lines[renamed:]
    assert any(
        re.search(rf"fsync\({fd}\) += 0", line) for fd in dir_fds for line in lines[renamed:]
    )
    assert (workdir / "reply.md").read_bytes() == b"x" * 100000
