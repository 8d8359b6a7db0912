"""`--format text` of every verb, run as a user runs it against a real daemon (demo engine),
each in a state where it succeeds (exit 0: the read-only verbs side by side on a settled agent
and batch, the changing ones one by one on what they can change; `init` in a fresh home, `login`
refused without a terminal, `api restart` and `api stop`): no verb falls back to a Python repr,
`None` or a JSON dump, and the batch views say what a user needs (the validator's verdict, each
run's agent and worktree, the marks' legend, whole reasons)."""

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agent_run.system.home import Home
from agent_run.text.render import RENDERERS
from agent_run.tools.table import ALL_TOOLS, TOOLS
from tests.batch_harness import git, make_repo, runs_of, wait_batch
from tests.harness import (
    TEST_CONFIG,
    DaemonProcess,
    cli,
    cli_json,
    make_home,
    remove_home,
    short_tmpdir,
    wait_for,
)

REPR = re.compile(r"\{'|\bNone\b|<[\w.]+ object at 0x|\bRecord\(|'_data'|^\{\"|^\[\{|^\{$", re.M)
VALUES = {  # a value for each required param a verb of the table has
    "task": "answer: hello text",
    "text": "more please",
    "prompt": "answer: again",
    "workflow": "repeated",
    "runs": "1",
    "after_revision": "0",
}
ADMIN = [["api", "systemd"], ["api", "launchd"]]  # `doctor` is the table's; `init`, `login`,
# `api restart` and `api stop` are in test_the_admin_verbs_render_text_where_they_succeed
# Verbs that change what they act on run one by one, each in a state where it succeeds; the
# read-only ones then run side by side. No verb may exit 1 (an error) here.
# `abandon` succeeds only on an agent of an unreachable host (an sshd test): its text is
# checked there (tests/test_remote_failures.py).
MUTATING = {name for name, tool in TOOLS.items() if not tool.read_only} - {"abandon"}


def _args(tool_name: str, ids: dict[str, str]) -> list[str]:
    """The verb with its positional ids and a value for each required option."""
    tool = TOOLS[tool_name]
    args = tool.cli_verb.split()
    for name, field in tool.params.model_fields.items():
        value = ids.get(name) or VALUES.get(name)
        if value is None or not (field.is_required() or name in tool.positional):
            continue
        if isinstance(value, list):  # a positional list: `batch compare BATCH RUN RUN`
            args += value
            continue
        args += [value] if name in tool.positional else [f"--{name.replace('_', '-')}", value]
    return args


def test_every_result_model_has_a_text_renderer() -> None:
    results = {tool.result.__name__ for tool in ALL_TOOLS.values()}
    assert results <= set(RENDERERS), results - set(RENDERERS)


def _shown(args: list[str], result) -> str:
    """What the verb printed, which must be text: no Python repr, no JSON dump, no None."""
    shown = result.stdout + result.stderr
    assert not REPR.search(shown), (args, shown)
    assert result.returncode == 0, (args, result.returncode, shown)
    assert result.stdout.strip(), args
    return result.stdout


def test_every_verb_renders_text_without_a_python_repr(workdir: Path) -> None:
    repo = make_repo()  # under the allowed roots: `folders list/inspect` render, not refuse
    home = make_home(TEST_CONFIG + f'[web]\nroots = ["{repo.parent}"]\n')
    daemon = DaemonProcess(home).start()
    try:
        _every_verb(daemon, home, workdir, repo)
    finally:
        daemon.stop()
        cli(home, "api", "stop")
        remove_home(home)


def _text(home: Home, *args: str) -> str:
    return _shown(list(args), cli(home, "--format", "text", *args))


def _every_verb(daemon: DaemonProcess, home: Home, workdir: Path, repo: Path) -> None:
    done = cli_json(home, "start", "--task", "answer: hi", "--workdir", str(workdir), "--wait")
    batch = daemon.call(
        "batch_start",
        {"workflow": "repeated", "project": str(repo), "runs": 2, "prompt": "answer: run"},
    )
    run, other = wait_batch(daemon, batch["id"])["runs"]
    ids: dict[str, Any] = {
        "agent_id": done["agent"]["id"],
        "batch_id": batch["id"],
        "run_id": run["id"],
        "workdir": str(workdir),
        "project": str(repo),
        "path": str(repo),
        "run_ids": [run["id"], other["id"]],
        "remote": "origin",
    }
    reads = [_args(name, ids) for name in TOOLS if name not in MUTATING] + ADMIN
    with ThreadPoolExecutor(4) as pool:  # settled agent and batch: nothing they read moves
        results = list(pool.map(lambda args: cli(home, "--format", "text", *args), reads))
    for args, result in zip(reads, results, strict=True):
        _shown(args, result)
    folders = results[reads.index(["folders", "list", str(repo)])]
    assert str(repo) in folders.stdout, folders.stdout
    _every_change(daemon, home, ids, repo)
    assert set(_CHANGES_RUN) == MUTATING, MUTATING ^ set(_CHANGES_RUN)


_CHANGES_RUN: list[str] = []


def _change(home: Home, name: str, ids: dict[str, str]) -> str:
    _CHANGES_RUN.append(name)
    return _text(home, *_args(name, ids))


def _every_change(daemon: DaemonProcess, home: Home, ids: dict[str, str], repo: Path) -> None:
    """Each changing verb, in a state where it succeeds."""
    _CHANGES_RUN.clear()
    busy = daemon.call("start", {"task": "sleep: 60\nanswer: late", "workdir": ids["workdir"]})
    running = {**ids, "agent_id": busy["id"]}
    wait_for(lambda: daemon.call("agent", {"agent_id": busy["id"]})["state"] == "running")
    _change(home, "steer", running)  # a running agent takes a steer
    _change(home, "cancel", running)
    _change(home, "resume", ids)  # a settled agent resumes
    daemon.call("wait", {"agent_id": ids["agent_id"], "timeout_seconds": 60})
    _change(home, "start", ids)
    slow = daemon.call(
        "batch_start",
        {"workflow": "repeated", "project": str(repo), "runs": 1, "prompt": "sleep: 60"},
    )
    slow_run = wait_for(lambda: _running_run(daemon, slow["id"]), what="a running run")
    stopped = {**ids, "run_id": slow_run, "batch_id": slow["id"]}
    _change(home, "run_stop", stopped)
    wait_for(lambda: _run_state(daemon, slow["id"]) == "cancelled", what="the run to stop")
    _change(home, "run_resume", stopped)  # a stopped run resumes
    _change(home, "batch_cancel", stopped)
    for name in ("run_rerun", "run_followup"):  # each on the settled run, which it restarts
        _change(home, name, ids)
        wait_batch(daemon, ids["batch_id"])
    worktree = Path(daemon.call("run_show", {"run_id": ids["run_id"]})["run"]["worktree"])
    (worktree / "made.txt").write_text("made\n")  # a commit to merge and to push
    git(worktree, "add", "made.txt")
    git(worktree, "commit", "-q", "-m", "make it")
    git(repo.parent, "init", "-q", "--bare", "remote.git")
    git(repo, "remote", "add", "origin", str(repo.parent / "remote.git"))
    _change(home, "run_merge", ids)
    _change(home, "run_push", ids)
    _change(home, "batch_clean", ids)
    _change(home, "batch_archive", ids)
    _change(home, "batch_start", ids)
    _change(home, "capacity_collect", ids)
    _change(home, "prune", ids)


def _running_run(daemon: DaemonProcess, batch_id: str) -> str | None:
    run = daemon.call("batch", {"batch_id": batch_id})["runs"][0]
    return run["id"] if run["state"] == "running" else None


def _run_state(daemon: DaemonProcess, batch_id: str) -> str:
    return daemon.call("batch", {"batch_id": batch_id})["runs"][0]["state"]


def test_the_admin_verbs_render_text_where_they_succeed(daemon: DaemonProcess, home: Home) -> None:
    fresh = Home(short_tmpdir() / "h")
    said = _text(fresh, "init")  # a fresh home: no error
    assert said.startswith(f"wrote {fresh.config_path}\nenabled runtime(s): demo\n"), said
    native = make_home(
        TEST_CONFIG + '[runtimes.cx]\nengine = "codex"\nauth = { login = "native" }\n'
    )
    refused = cli(native, "--format", "text", "login", "cx", input="")  # no terminal
    assert refused.returncode == 64 and not REPR.search(refused.stdout + refused.stderr)
    assert "run `agent-run login cx` in a terminal" in refused.stderr, refused.stderr
    restarted = _text(home, "api", "restart")
    assert re.fullmatch(
        r"stopped the daemon \(pid \d+\); 0 live agent\(s\) keep running under their own "
        rf"supervisors; daemon pid \d+ serves {re.escape(str(home.root))}\n",
        restarted,
    ), restarted
    stopped = _text(home, "api", "stop")
    assert stopped.startswith("stopped the daemon (pid ") and "stays stopped" in stopped, stopped
    assert _text(home, "api", "stop").startswith("no daemon was running; it stays stopped")


def test_batch_show_text_has_the_verdict_agents_worktrees_and_a_legend(
    daemon: DaemonProcess, home: Home
) -> None:
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "validated",
            "project": str(repo),
            "runs": 2,
            "runtime": "demo",
            "prompt": "write: answer.txt = 42\nresult: auto",
            "validator_prompt": "verdict: auto",
        },
    )
    done = wait_batch(daemon, batch["id"])
    shown = cli(home, "--format", "text", "batch", "show", batch["id"]).stdout
    assert "verdict: winner worker 1" in shown, shown
    assert re.search(r"^    worker 1  pass ", shown, re.M), shown
    assert re.search(r"^    worker 2  pass ", shown, re.M), shown
    for run in done["runs"]:
        assert f"agent {run['agent_id']}" in shown
        if run["worktree"]:
            assert f"worktree {run['worktree']}" in shown
    assert "marks: . queued  > running  + succeeded  x failed  - cancelled; aN: attempt N" in shown


def test_a_long_failure_reason_is_shown_whole_and_wrapped_at_words(
    daemon: DaemonProcess, home: Home
) -> None:
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "validated",
            "project": str(repo),
            "runs": 1,
            "runtime": "demo",
            "prompt": "answer: no result submitted",
            "validator_prompt": "verdict: auto",
        },
    )
    done = wait_batch(daemon, batch["id"])
    failure = runs_of(done, "worker")[0]["failure"]
    assert failure and len(failure) > 40
    shown = cli(home, "--format", "text", "batch", "show", batch["id"]).stdout
    lines = shown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("      failure "))
    block = [lines[start].removeprefix("      failure ")]
    block += [line.strip() for line in lines[start + 1 :] if line.startswith(" " * 14)]
    assert " ".join(block) == " ".join(failure.split())
    assert all(len(line) <= 100 for line in lines[start : start + len(block)])


def test_a_running_run_shows_its_elapsed_time_and_what_it_is_doing(
    daemon: DaemonProcess, home: Home
) -> None:
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(repo),
            "runs": 1,
            "runtime": "demo",
            "prompt": "steps: 400\nstep_seconds: 0.1\nanswer: slow",
        },
    )
    try:
        from tests.harness import wait_for

        def running_with_a_message() -> str | None:
            text = cli(home, "--format", "text", "batch", "show", batch["id"]).stdout
            return (
                text
                if re.search(r"^      doing \(message, \d+s ago\) step \d+/400$", text, re.M)
                else None
            )

        shown = wait_for(running_with_a_message, timeout=60, what="what it is doing")
        assert re.search(r"> rn_\w+ .* running\s+a1 .*running \d+(s|m\d\ds)$", shown, re.M), shown
    finally:
        daemon.call("batch_cancel", {"batch_id": batch["id"]})


def test_run_show_and_run_answer_find_a_run_by_its_id(daemon: DaemonProcess, home: Home) -> None:
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(repo),
            "runs": 2,
            "concurrency": 1,
            "prompt": "steps: 10\nstep_seconds: 0.5\nanswer: from the run",
        },
    )
    first, second = batch["runs"]
    assert second["state"] == "queued"  # concurrency 1: it waits for the first
    queued = cli(home, "run", "answer", second["id"])
    assert queued.returncode == 1
    error = json.loads(queued.stdout)["error"]
    assert error["code"] == "AnswerNotReady", error
    assert error["field"] == ("run_id" if "no agent yet" in error["message"] else "agent_id")
    done = wait_batch(daemon, batch["id"])
    run = next(r for r in done["runs"] if r["id"] == first["id"])
    shown = cli(home, "--format", "text", "run", "show", run["id"]).stdout
    assert shown.startswith(
        f"{run['id']}  run 1  succeeded  (worker of repeated batch {batch['id']}"
    )
    assert f"agent    {run['agent_id']} (succeeded)" in shown
    assert f"worktree {run['worktree']}  branch {run['branch']}" in shown
    detail = cli_json(home, "run", "show", run["id"])
    assert detail["batch_id"] == batch["id"] and detail["run"]["agent_id"] == run["agent_id"]
    assert detail["base_sha"] == done["base_sha"] and detail["revision"] >= done["revision"]
    by_run = cli_json(home, "run", "answer", run["id"])
    assert by_run == cli_json(home, "answer", run["agent_id"])
    assert by_run["text"] == "from the run"
    missing = cli_json(home, "run", "show", "rn_nope")["error"]
    assert missing["code"] == "RunNotFound" and missing["field"] == "run_id"


def test_capacity_order_text_names_the_account_of_every_route() -> None:
    """Two accounts of one runtime are two routes: a deferred or omitted one says which."""
    from agent_run.domain.views import CapacityOrderResult, SetAsideRoute

    aside = {"runtime": "codex", "lane": "gpt-5-codex"}
    result = CapacityOrderResult(
        observed_at=0.0,
        routes=[],
        omitted=[SetAsideRoute(**aside, account="work", label="exhausted", reason="5h reads 0 %")],
        deferred=[
            SetAsideRoute(**aside, account="ci", label="missing_sample", reason="no reading"),
            SetAsideRoute(**aside, label="missing_sample", reason="no reading"),
        ],
        unavailable_runtimes=[],
        insufficient_diversity=True,
    )
    lines = RENDERERS["CapacityOrderResult"](result).splitlines()
    assert lines[:3] == [
        "omitted  codex/work  gpt-5-codex  [exhausted] 5h reads 0 %",
        "deferred codex/ci  gpt-5-codex  [missing_sample] no reading",
        "deferred codex  gpt-5-codex  [missing_sample] no reading",
    ]
