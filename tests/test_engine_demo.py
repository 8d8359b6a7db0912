"""The demo engine keeps the promises every engine makes (profiles, the workdir boundary), and
the supervisor keeps a completed answer when the turn it waits for never begins."""

import os
from pathlib import Path

import pytest

from tests.harness import db_rows, short_tmpdir, wait_for


def start(daemon, workdir, task, **extra):
    return daemon.call("start", {"task": task, "workdir": str(workdir), **extra})


def wait_terminal(daemon, agent_id, timeout=60):
    result = daemon.call("wait", {"agent_id": agent_id, "timeout_seconds": timeout})
    assert not result["timed_out"], result
    return result["agent"]


def tool_results(daemon, agent_id):
    items = daemon.call("transcript", {"agent_id": agent_id})["items"]
    return [i["content"] for i in items if i["role"] == "tool"]


@pytest.fixture
def outside():
    """A directory outside the workdir, with a file a write must not change."""
    path = short_tmpdir("aro-")
    (path / "keep.txt").write_text("untouched\n")
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def test_read_only_profile_refuses_a_write_and_writes_nothing(daemon, workdir):
    agent = start(
        daemon, workdir, "write: out.txt = should not exist\nanswer: wrote it", profile="read_only"
    )
    view = wait_terminal(daemon, agent["id"])
    assert view["state"] == "succeeded", view  # a refused tool call, as a real engine sees one
    assert not (workdir / "out.txt").exists()
    assert any(
        "read_only profile does not allow" in text for text in tool_results(daemon, agent["id"])
    )


def escape_paths(workdir: Path, outside: Path) -> dict[str, tuple[str, Path]]:
    """Task path -> the outside file that a successful escape would have written."""
    os.symlink(outside, workdir / "link-dir")
    os.symlink(outside / "keep.txt", workdir / "link-file")
    relative_up = os.path.relpath(outside / "keep.txt", workdir)
    return {
        "dotdot": (relative_up, outside / "keep.txt"),
        "absolute": (str(outside / "keep.txt"), outside / "keep.txt"),
        "symlinked_dir": ("link-dir/keep.txt", outside / "keep.txt"),
        "symlinked_file": ("link-file", outside / "keep.txt"),
        "dangling_symlink": ("link-dir/new.txt", outside / "new.txt"),
    }


@pytest.mark.parametrize(
    "how", ["dotdot", "absolute", "symlinked_dir", "symlinked_file", "dangling_symlink"]
)
def test_a_write_that_leads_outside_the_workdir_is_refused(daemon, workdir, outside, how):
    path, victim = escape_paths(workdir, outside)[how]
    agent = start(daemon, workdir, f"write: {path} = escaped\nanswer: wrote it")
    view = wait_terminal(daemon, agent["id"])
    assert view["state"] == "succeeded", view
    assert (outside / "keep.txt").read_text() == "untouched\n"
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"], (
        f"{victim} must not be written"
    )
    assert any(
        "outside the working directory" in text for text in tool_results(daemon, agent["id"])
    )


def test_an_absolute_path_inside_the_workdir_is_written(daemon, workdir):
    agent = start(daemon, workdir, f"write: {workdir / 'in.txt'} = inside\nanswer: wrote it")
    assert wait_terminal(daemon, agent["id"])["state"] == "succeeded"
    assert (workdir / "in.txt").read_text() == "inside\n"


def test_a_completed_answer_stands_when_the_awaited_turn_never_begins(daemon, home, workdir):
    """The engine takes the steer into the running turn (as Claude Code does mid-tool) and says
    nothing that shows it: the supervisor waits for a second turn, and after stall_seconds of
    silence the completed answer wins instead of a `stalled` failure."""
    agent = start(
        daemon,
        workdir,
        "steps: 50\nstep_seconds: 0.1\nfold_steers: silent\nanswer: first turn",
        stall_seconds=2,
    )
    wait_for(lambda: daemon.call("agent", {"agent_id": agent["id"]})["state"] == "running")
    assert (
        daemon.call("steer", {"agent_id": agent["id"], "text": "and the steer"})["state"]
        == "delivered"
    )
    view = wait_terminal(daemon, agent["id"])
    assert view["state"] == "succeeded", view
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "first turn; and the steer"
    kinds = [
        r["kind"]
        for r in db_rows(home, "SELECT kind FROM events WHERE agent_id = ?", (agent["id"],))
    ]
    assert "idle_after_completion" in kinds


def test_a_steer_the_running_turn_takes_in_ends_the_agent_with_that_turn(daemon, home, workdir):
    """`fold_steers: yes` says it took the steer in (an echoed user message, as Claude Code's
    --replay-user-messages): the supervisor expects no second turn, and the agent ends with its
    turn, not after the stall window (10 minutes here) of waiting for one."""
    agent = start(
        daemon,
        workdir,
        "steps: 100\nstep_seconds: 0.1\nfold_steers: yes\nanswer: first turn",
        stall_seconds=600,
    )
    wait_for(lambda: daemon.call("agent", {"agent_id": agent["id"]})["state"] == "running")
    steered = daemon.call("steer", {"agent_id": agent["id"], "text": "and the steer"})
    assert steered["state"] == "delivered"
    # the reply cannot know yet which turn answers it, and says so
    assert "running turn" in steered["message"] and "next turn" in steered["message"]
    view = wait_terminal(daemon, agent["id"], timeout=120)
    assert view["state"] == "succeeded", view
    assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "first turn; and the steer"
    kinds = [
        r["kind"]
        for r in db_rows(home, "SELECT kind FROM events WHERE agent_id = ?", (agent["id"],))
    ]
    assert "steer_joined" in kinds and "idle_after_completion" not in kinds
