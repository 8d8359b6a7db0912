"""Races found in review: slow actions outside the scheduler's lock, clean against rerun, git
off the event loop, durable reply files."""

import json
import os
import shutil
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from agent_run.domain.errors import DomainError
from agent_run.store import batches as batches_q
from agent_run.store.db import connect, write
from agent_run.system import git as git_ops
from agent_run.system.home import Home
from tests.batch_harness import BatchProject, git, make_repo, runs_of, wait_batch
from tests.harness import (
    DaemonProcess,
    db_rows,
    make_home,
    remove_home,
    short_tmpdir,
    wait_for,
)


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


def _refused(daemon: DaemonProcess, tool: str, params: dict[str, Any], says: str) -> None:
    """`tool` answers `Conflict` on `run_id`, its message saying `says`."""
    with pytest.raises(DomainError) as refused:
        with daemon.client() as client:
            client.call(tool, params)
    assert refused.value.code == "Conflict" and refused.value.field == "run_id", (tool, refused)
    assert says in refused.value.message, refused.value.message


def _reviewer_running(daemon: DaemonProcess, batch_id: str) -> dict[str, Any]:
    """The batch once its first reviewer has an agent."""

    def running() -> dict[str, Any] | None:
        view = daemon.call("batch", {"batch_id": batch_id})
        reviewers = runs_of(view, "reviewer")
        return view if reviewers and reviewers[0]["agent_id"] else None

    return wait_for(running, timeout=90, what="the reviewer's agent")


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


def test_a_commit_whose_supervisor_dies_before_recording_it_keeps_its_intent() -> None:
    """create_commit records its intent before it commits: kill -9 the process serving it (the
    candidate's supervisor, which serves its worker tools) right after the commit lands on the
    run's branch, and the commit is not left without its report.

    agent-run's git runs no hook (core.hooksPath=/dev/null: a hook is a program the repository
    names), so the kill comes from a `git` first on the daemon's PATH: the real git, then, once
    its `update-ref` of the run's branch (create_commit's last step) succeeded, kill -9 of the
    supervisor that ran it. The execution ends `lost` on proof (its supervisor is gone) and the
    batch ends; the report stays the intent, naming the commit's message and files, beside the
    commit on the branch."""
    marks = short_tmpdir("arm-")
    wrapper = marks / "bin" / "git"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        f'{shutil.which("git")} "$@"; status=$?\n'
        'case "$*" in *update-ref*refs/heads/agent-run/*)\n'
        f'  if [ $status = 0 ] && [ ! -f "{marks}/killed" ] &&'
        ' grep -q agent_run.supervisor "/proc/$PPID/cmdline"; then\n'
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
        assert (marks / "killed").exists(), "the candidate's supervisor was never killed"
        candidate = runs_of(done, "candidate")[0]
        execution = daemon.call("agent", {"agent_id": candidate["agent_id"]})["execution"]
        assert execution["state"] == "lost", execution
        assert candidate["state"] == "failed", candidate
        reports = db_rows(
            home,
            "SELECT payload FROM tool_reports WHERE agent_id = ? AND tool = 'create_commit'",
            (candidate["agent_id"],),
        )
        assert [json.loads(r["payload"])["state"] for r in reports] == ["intent"]
        branch = candidate["branch"]
        subject = git(project.repo, "log", "-1", "--format=%s", branch).strip()
        assert subject == json.loads(reports[0]["payload"])["message"]
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
        "from pathlib import Path; from agent_run.system.home import write_private_file; "
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


def test_a_cancelled_batchs_runs_are_not_redone(batch_project: BatchProject) -> None:
    """Cancelled is final: the scheduler no longer looks at the batch, so a rerun, resume or
    follow-up of one of its runs would run an agent nobody judges or stops."""
    daemon = batch_project.daemon
    batch = batch_project.start(
        "repeated", runs=2, concurrency=1, prompt="steps: 400\nstep_seconds: 0.05\nanswer: x"
    )
    wait_for(
        lambda: any(
            r["agent_id"]
            for r in runs_of(daemon.call("batch", {"batch_id": batch["id"]}), "worker")
        ),
        timeout=60,
        what="the first worker's agent",
    )
    daemon.call("batch_cancel", {"batch_id": batch["id"]})
    done = wait_batch(daemon, batch["id"], ("cancelled",), timeout=60)
    agents_before = daemon.call("list_agents", {})["total"]
    for tool, params in (
        ("run_rerun", {}),
        ("run_resume", {"prompt": "answer: again"}),
        ("run_followup", {"text": "answer: again", "reopen": True}),
    ):
        for run in runs_of(done, "worker"):
            _refused(daemon, tool, {"run_id": run["id"], **params}, "cancelled")
    after = daemon.call("batch", {"batch_id": batch["id"]})
    assert after["state"] == "cancelled"
    assert [r["state"] for r in runs_of(after, "worker")] == [
        r["state"] for r in runs_of(done, "worker")
    ]
    assert daemon.call("list_agents", {})["total"] == agents_before  # no agent was started


def test_a_rerun_never_drops_reviewers_whose_agents_still_run(batch_project: BatchProject) -> None:
    """Rerunning a ranked candidate drops its reviews; while a reviewer runs that is refused, or
    its agent would run on, unowned, spending the batch's budget."""
    daemon = batch_project.daemon
    batch = batch_project.start_ranked_pair("steps: 400\nstep_seconds: 0.05\nscore: 50")

    view = _reviewer_running(daemon, batch["id"])
    candidate, reviewer = runs_of(view, "candidate")[0], runs_of(view, "reviewer")[0]
    _refused(daemon, "run_rerun", {"run_id": candidate["id"]}, "review 1 of candidate 1")
    after = daemon.call("batch", {"batch_id": batch["id"]})
    assert [r["id"] for r in runs_of(after, "reviewer")] == [reviewer["id"]]
    assert runs_of(after, "candidate")[0]["attempts"] == candidate["attempts"]
    daemon.call("run_stop", {"run_id": reviewer["id"]})
    wait_for(
        lambda: (
            runs_of(daemon.call("batch", {"batch_id": batch["id"]}), "reviewer")[0]["state"]
            == "cancelled"
        ),
        timeout=60,
        what="the reviewer stopped",
    )
    blocked = wait_batch(daemon, batch["id"], ("blocked",), timeout=60)  # no ranking without it
    assert (
        blocked["state_reason"]
        == "review 1 of candidate 1 was stopped; rerun or resume it to continue"
    )
    result = daemon.call("run_rerun", {"run_id": candidate["id"]})  # now it may
    assert result["run"]["state"] == "running"


def test_a_batch_that_cannot_advance_says_why_and_stalls_no_other(
    batch_project: BatchProject,
) -> None:
    """A generated batch whose workers' worktrees git cannot add (its worktree root became a
    file) fails every decision about it: the batch says why and is retried (its workers'
    rows wait, never started), and the batches after it are still scheduled; once the fault is
    gone it goes on to the end."""
    daemon = batch_project.daemon
    root = Path(short_tmpdir()) / "worktrees"
    root.mkdir()
    try:
        stuck = batch_project.start(
            "generated",
            runs=1,
            prompt="steps: 20\nstep_seconds: 0.05\ntasks: auto",
            worktree_root=str(root),
        )
        root.rmdir()
        root.write_text("not a folder\n")  # git cannot add a worktree under it

        def says_why() -> dict[str, Any] | None:
            view = daemon.call("batch", {"batch_id": stuck["id"]})
            return view if "cannot advance, retrying" in (view["state_reason"] or "") else None

        view = wait_for(says_why, timeout=90, what="the stuck batch to say why")
        [worker] = runs_of(view, "worker")  # its row names the worktree git cannot make yet
        assert view["state"] == "running", view
        assert (worker["state"], worker["attempt"], worker["agent_id"]) == ("queued", 0, None)
        assert not Path(worker["worktree"]).exists()
        other = batch_project.finish("repeated", runs=1, prompt="answer: after", timeout=90)
        assert other["state"] == "completed", other  # scheduled though the first one stalls
        root.unlink()
        root.mkdir()  # the fault is gone
        done = wait_batch(daemon, stuck["id"], timeout=90)
        assert done["state"] == "completed" and done["state_reason"] is None, done
        assert [r["state"] for r in runs_of(done, "worker")] == ["succeeded"]
    finally:
        if root.is_file():
            root.unlink()
        shutil.rmtree(root.parent, ignore_errors=True)


def test_a_worktree_add_that_failed_after_making_its_branch_is_retried_and_a_moved_one_refused(
    tmp_path: Path,
) -> None:
    repo = make_repo()
    base = git(repo, "rev-parse", "HEAD").strip()
    blocker = tmp_path / "root"
    blocker.write_text("not a folder\n")
    with_branch = "agent-run/bt_x/worker-1"
    with pytest.raises(DomainError):  # git cannot add a worktree under a file
        git_ops.add_worktree(repo, blocker / "w1", with_branch, base)
    assert with_branch in git(repo, "branch", "--list")  # what git leaves behind
    folder = tmp_path / "w1"
    git_ops.add_worktree(repo, folder, with_branch, base)
    assert git(folder, "symbolic-ref", "HEAD").strip() == f"refs/heads/{with_branch}"
    git(folder, "commit", "-q", "--allow-empty", "-m", "moved on")
    shutil.rmtree(folder)
    with pytest.raises(DomainError) as moved:  # a branch that moved on is never reused
        git_ops.add_worktree(repo, tmp_path / "w2", with_branch, base)
    assert "already exists" in moved.value.message and "refusing" in moved.value.message
    shutil.rmtree(repo.parent, ignore_errors=True)


def test_a_batch_admitted_without_its_runs_gets_them_after_a_restart(
    batch_project: BatchProject,
) -> None:
    """An older agent-run committed the batch, then made its runs (git work): a daemon killed
    between the two left a live batch with no runs, which settled `completed` (repeated) or got
    a validator over no workers (validated). The restarted daemon makes its first runs instead
    (with worktrees that kill had made: tests/test_batch_admission.py)."""
    daemon = batch_project.daemon
    model = batch_project.finish(
        "validated",
        runs=2,
        prompt="write: answer.txt = 42\nresult: auto",
        validator_prompt="verdict: auto",
    )
    assert model["state"] == "completed", model
    daemon.kill9()
    conn = connect(daemon.home.db_path)
    row = dict(batches_q.get_batch(conn, model["id"]))
    orphan = "bt_admittedwithoutruns"
    with write(conn):  # exactly what `admit` commits, and nothing after it
        batches_q.insert_batch(
            conn,
            {
                key: row[key]
                for key in (
                    "workflow",
                    "config_json",
                    "project_root",
                    "project_subdir",
                    "base_ref",
                    "base_sha",
                    "base_branch",
                    "worktree_root",
                )
            }
            | {"id": orphan, "request_id": None, "request_hash": "h"},
        )
    conn.close()
    daemon.start()
    done = wait_batch(daemon, orphan, timeout=120)
    assert done["state"] == "completed", done
    assert [r["state"] for r in runs_of(done, "worker")] == ["succeeded", "succeeded"]
    assert [r["state"] for r in runs_of(done, "validator")] == ["succeeded"]


def test_clean_keeps_a_worktree_a_running_reviewer_works_in(batch_project: BatchProject) -> None:
    """A succeeded candidate's worktree is where its reviewers run: a forced clean while they
    run keeps it (kept_running), or the reviewers fail and the batch blocks for good."""
    daemon = batch_project.daemon
    batch = batch_project.start_ranked_pair("steps: 400\nstep_seconds: 0.05\nscore: 50")

    view = _reviewer_running(daemon, batch["id"])
    candidate = runs_of(view, "candidate")[0]
    cleaned = daemon.call("batch_clean", {"batch_id": batch["id"], "confirm": True, "force": True})
    assert [(i["run_id"], i["action"]) for i in cleaned["items"]] == [
        (candidate["id"], "kept_running")
    ]
    assert Path(candidate["worktree"]).is_dir()
    reviewer = runs_of(view, "reviewer")[0]
    after = daemon.call("batch", {"batch_id": batch["id"]})
    assert runs_of(after, "reviewer")[0]["state"] == "running"  # still at work in the folder
    daemon.call("run_stop", {"run_id": reviewer["id"]})  # not 20 s of steps: it ran on, untouched
    wait_batch(daemon, batch["id"], ("blocked",), timeout=60)


def test_a_generator_whose_workers_exist_is_not_redone(batch_project: BatchProject) -> None:
    """Its workers were made from its task list: a rerun or follow-up of the generator would
    make a new list that nothing uses, while the batch looked regenerated."""
    daemon = batch_project.daemon
    done = batch_project.finish("generated", runs=2, prompt="tasks: auto")
    assert done["state"] == "completed", done
    generator = runs_of(done, "generator")[0]
    for tool, params in (("run_rerun", {}), ("run_followup", {"text": "tasks: auto"})):
        _refused(
            daemon, tool, {"run_id": generator["id"], **params}, "were made from its task list"
        )
    after = daemon.call("batch", {"batch_id": done["id"]})
    assert after["state"] == "completed"
    assert runs_of(after, "generator")[0]["attempts"] == generator["attempts"]
