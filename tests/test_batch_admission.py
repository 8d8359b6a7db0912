"""A `batch_start` cut by a kill -9 of the daemon at each point of its admission: the retry
with the same request_id, or the next daemon alone, completes it (never a batch `queued` with
no runs), and `batch clean` then finds and removes every worktree and branch it made.

The kill lands at a moment observed from outside: the daemon's `git` is a wrapper that stops
at the N-th `git worktree add` (before or after the real git ran) and says so; the test then
kills the daemon and the wrapper. The same wrapper fails a `worktree add` as git would."""

import json
import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from agent_run.system.home import Home
from tests.batch_harness import BatchProject, git, make_repo, runs_of, wait_batch
from tests.harness import DaemonProcess, cli, short_tmpdir, wait_for

RUNS = 2
ANSWER = "answer: admitted"


def _git_wrapper(marks: Path, mode: str) -> str:
    """A PATH whose `git` acts on the N-th `worktree add` as `mode` says: "before-N" / "after-N"
    stop there (before or after the real git ran), writing the wrapper's pid to `marks/paused`,
    until killed; "fail-N" fails it as git would ("fail-all": every one). "planning" stops at
    the `worktree list` that plans the runs, before anything is committed."""
    real_git = shutil.which("git")
    wrappers = marks / "bin"
    wrappers.mkdir()
    hold = (
        f'echo $$ > "{marks}/paused.tmp" && mv "{marks}/paused.tmp" "{marks}/paused"; '
        "i=0; while [ $i -lt 6000 ]; do sleep 0.1; i=$((i+1)); done; exit 1"
    )
    fail = 'echo "fatal: could not create work tree dir (injected)" >&2; exit 128'
    (wrappers / "git").write_text(
        "#!/bin/sh\n"
        f'case "{mode} $*" in "planning "*"worktree list"*) {hold};; esac\n'
        'case "$*" in *"worktree add"*)\n'
        f'  n=$(($(cat "{marks}/adds" 2>/dev/null || echo 0) + 1)); echo $n > "{marks}/adds"\n'
        f'  case "{mode}" in "before-$n") {hold};; "fail-$n"|fail-all) {fail};; esac\n'
        f'  "{real_git}" "$@"; rc=$?\n'
        f'  if [ "after-$n" = "{mode}" ]; then {hold}; fi\n'
        "  exit $rc;;\n"
        "esac\n"
        f'exec "{real_git}" "$@"\n'
    )
    (wrappers / "git").chmod(0o755)
    return f"{wrappers}:{os.environ['PATH']}"


def _start_params(repo: Path) -> dict[str, Any]:
    return {
        "runtime": "demo",
        "workflow": "repeated",
        "project": str(repo),
        "runs": RUNS,
        "prompt": ANSWER,
        "request_id": "admission-cut-by-a-kill",
    }


def _cut_admission(home: Home, repo: Path, pause: str, **params: Any) -> None:
    """batch_start on a daemon killed -9 at `pause`; the paused git is killed too."""
    marks = short_tmpdir("arb-")
    try:
        daemon = DaemonProcess(home, env={"PATH": _git_wrapper(marks, pause)}).start()
        replies: list[Any] = []

        def start() -> None:
            try:
                replies.append(daemon.call("batch_start", {**_start_params(repo), **params}))
            except Exception as exc:  # the daemon dies under the call
                replies.append(exc)

        caller = threading.Thread(target=start)
        caller.start()
        wait_for((marks / "paused").exists, timeout=60, what=f"git to stop {pause}")
        daemon.kill9()
        os.kill(int((marks / "paused").read_text()), signal.SIGKILL)
        caller.join(timeout=60)
        assert replies and isinstance(replies[0], Exception), replies  # no reply: it was cut
    finally:
        shutil.rmtree(marks, ignore_errors=True)


def _made_by_agent_run(repo: Path) -> tuple[list[str], list[str], list[str]]:
    """The linked worktrees, the agent-run branches, and the folders beside the project."""
    trees = [
        line.removeprefix("worktree ")
        for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ") and Path(line.removeprefix("worktree ")) != repo
    ]
    branches = git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/agent-run/").split()
    folders = sorted(p.name for p in repo.parent.iterdir() if p != repo)
    return trees, branches, folders


def _completed_then_cleaned(daemon: DaemonProcess, repo: Path, batch_id: str) -> None:
    done = wait_batch(daemon, batch_id, timeout=120)
    workers = runs_of(done, "worker")
    assert done["state"] == "completed", done
    assert [(w["index"], w["state"]) for w in workers] == [(1, "succeeded"), (2, "succeeded")]
    trees, branches, _ = _made_by_agent_run(repo)
    assert sorted(trees) == sorted(w["worktree"] for w in workers), (trees, workers)
    assert sorted(branches) == sorted(f"refs/heads/{w['branch']}" for w in workers)
    cleaned = daemon.call("batch_clean", {"batch_id": batch_id, "confirm": True})
    assert {i["action"] for i in cleaned["items"]} == {"removed"}, cleaned
    assert _made_by_agent_run(repo) == ([], [], []), cleaned


POINTS = ["planning", "before-1", "after-1", f"after-{RUNS}"]


@pytest.mark.parametrize("pause", POINTS)
def test_a_retry_with_the_same_request_id_completes_a_cut_admission(home: Home, pause: str):
    """Killed at `pause`; a new daemon and the caller's retry with the same request_id: the same
    batch, its worktrees all there when the retry returns, every run run."""
    repo = make_repo()
    try:
        _cut_admission(home, repo, pause)
        daemon = DaemonProcess(home).start()
        try:
            first = daemon.call("list_batches")["items"]
            retried = daemon.call("batch_start", _start_params(repo))
            assert [b["id"] for b in first] == ([] if pause == "planning" else [retried["id"]])
            workers = runs_of(retried, "worker")
            assert len(workers) == RUNS, retried
            assert all((Path(w["worktree"]) / ".git").exists() for w in workers), workers
            _completed_then_cleaned(daemon, repo, retried["id"])
        finally:
            daemon.stop()
    finally:
        shutil.rmtree(repo.parent, ignore_errors=True)


@pytest.mark.parametrize("pause", POINTS)
def test_the_next_daemon_completes_a_cut_admission_without_a_retry(home: Home, pause: str):
    """Killed at `pause`; a new daemon, no retry: the batch is completed (its runs made and run),
    never left `queued` with no runs; killed while planning, there is no batch and nothing made."""
    repo = make_repo()
    try:
        _cut_admission(home, repo, pause)
        daemon = DaemonProcess(home).start()
        try:
            batches = daemon.call("list_batches")["items"]
            if pause == "planning":
                assert batches == [] and _made_by_agent_run(repo) == ([], [], [])
                return
            [batch] = batches
            _completed_then_cleaned(daemon, repo, batch["id"])
        finally:
            daemon.stop()
    finally:
        shutil.rmtree(repo.parent, ignore_errors=True)


def _older_versions_cut_admission(daemon: DaemonProcess, repo: Path, *, ended: bool) -> str:
    """What an older agent-run left when a kill cut `batch_start` after its git work: the batch
    row, no run rows, worker 1's worktree on its branch and worker 2's branch alone (its
    `worktree add` made the branch, then died). Written with the daemon stopped; `ended`: the
    user cancelled that batch since."""
    from agent_run.store import batches as batches_q
    from agent_run.store.db import connect, write

    model = daemon.call("batch_start", {**_start_params(repo), "runs": 1, "request_id": None})
    model = wait_batch(daemon, model["id"])
    daemon.call("batch_clean", {"batch_id": model["id"], "confirm": True})
    daemon.kill9()
    conn = connect(daemon.home.db_path)
    row = dict(batches_q.get_batch(conn, model["id"]))
    cut = "bt_cutbyakillbeforerows"
    copied = ("workflow", "project_root", "project_subdir", "base_ref", "base_sha", "base_branch")
    config = {**json.loads(row["config_json"]), "runs": RUNS}
    with write(conn):
        batches_q.insert_batch(
            conn,
            {key: row[key] for key in copied}
            | {
                "id": cut,
                "request_id": None,
                "request_hash": "h",
                "config_json": json.dumps(config),
                "worktree_root": row["worktree_root"],
            },
        )
        if ended:
            batches_q.move_batch(conn, cut, expect="queued", to="cancelled", ended_at=1.0)
    conn.close()
    base = row["base_sha"]
    git(
        repo,
        "worktree",
        "add",
        "-q",
        "-b",
        f"agent-run/{cut}/worker-1",
        str(repo.parent / f"proj-main-{cut[-8:]}-1"),
        base,
    )
    git(repo, "branch", f"agent-run/{cut}/worker-2", base)
    daemon.start()
    return cut


def test_a_batch_an_older_version_left_without_runs_takes_the_worktrees_it_made(
    batch_project: BatchProject,
) -> None:
    """Its runs are made in the worktree and on the branches that cut admission made (git would
    refuse a new folder the branch checked out elsewhere: the batch stayed `queued`)."""
    daemon, repo = batch_project.daemon, batch_project.repo
    cut = _older_versions_cut_admission(daemon, repo, ended=False)
    done = wait_batch(daemon, cut, timeout=120)
    assert done["state"] == "completed", done
    workers = runs_of(done, "worker")
    assert [w["state"] for w in workers] == ["succeeded", "succeeded"]
    assert workers[0]["worktree"] == str(repo.parent / f"proj-main-{cut[-8:]}-1")
    cleaned = daemon.call("batch_clean", {"batch_id": cut, "confirm": True})
    assert [i["action"] for i in cleaned["items"]] == ["removed", "removed"], cleaned
    assert _made_by_agent_run(repo) == ([], [], []), cleaned


def test_batch_clean_finds_worktrees_and_branches_no_run_points_at(
    batch_project: BatchProject,
) -> None:
    """A cancelled batch with no runs: its worktree and branches are found by its branch prefix,
    previewed, then removed."""
    daemon, repo = batch_project.daemon, batch_project.repo
    cut = _older_versions_cut_admission(daemon, repo, ended=True)
    tree = str(repo.parent / f"proj-main-{cut[-8:]}-1")
    preview = daemon.call("batch_clean", {"batch_id": cut})
    assert [(i["run_id"], i["worktree"], i["branch"], i["action"]) for i in preview["items"]] == [
        (None, tree, f"agent-run/{cut}/worker-1", "remove"),
        (None, None, f"agent-run/{cut}/worker-2", "remove"),
    ], preview
    text = cli(daemon.home, "--format", "text", "batch", "clean", cut).stdout
    assert tree in text and f"agent-run/{cut}/worker-2" in text, text
    cleaned = daemon.call("batch_clean", {"batch_id": cut, "confirm": True})
    assert [i["action"] for i in cleaned["items"]] == ["removed", "removed"], cleaned
    assert _made_by_agent_run(repo) == ([], [], []), cleaned


def test_a_new_batch_git_cannot_make_a_worktree_for_fails_and_leaves_nothing(home: Home):
    """The second `worktree add` fails: the batch is `failed` saying why, its runs cancelled
    (none left queued), and `batch clean` removes the first run's worktree and branch."""
    repo, marks = make_repo(), short_tmpdir("arb-")
    daemon = DaemonProcess(home, env={"PATH": _git_wrapper(marks, "fail-2")}).start()
    try:
        view = daemon.call("batch_start", _start_params(repo))
        assert view["state"] == "failed", view
        assert view["state_reason"].startswith("could not create the worktrees: git worktree add")
        assert [r["state"] for r in runs_of(view, "worker")] == ["cancelled", "cancelled"]
        cleaned = daemon.call("batch_clean", {"batch_id": view["id"], "confirm": True})
        assert [i["action"] for i in cleaned["items"]] == ["removed", "already_gone"], cleaned
        assert _made_by_agent_run(repo) == ([], [], []), cleaned
    finally:
        daemon.stop()
        shutil.rmtree(marks, ignore_errors=True)
        shutil.rmtree(repo.parent, ignore_errors=True)


def test_a_retry_git_cannot_finish_says_why_and_the_batch_finishes_once_it_can(home: Home):
    """Cut before its first worktree; the next daemon's git fails every `worktree add` (the
    killed daemon's git may still be at work on one): the retry returns the same batch, not
    failed, saying why; a daemon whose git works finishes it."""
    repo, marks = make_repo(), short_tmpdir("arb-")
    try:
        _cut_admission(home, repo, "before-1")
        daemon = DaemonProcess(home, env={"PATH": _git_wrapper(marks, "fail-all")}).start()
        try:
            view = daemon.call("batch_start", _start_params(repo))
            assert view["state"] == "queued", view
            assert "cannot advance, retrying: git worktree add" in view["state_reason"], view
            assert [r["state"] for r in runs_of(view, "worker")] == ["queued", "queued"]
        finally:
            daemon.stop()
        daemon = DaemonProcess(home).start()
        try:
            _completed_then_cleaned(daemon, repo, view["id"])
        finally:
            daemon.stop()
    finally:
        shutil.rmtree(marks, ignore_errors=True)
        shutil.rmtree(repo.parent, ignore_errors=True)
