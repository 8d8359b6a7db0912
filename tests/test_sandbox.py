"""The sandbox, for real (bubblewrap, as root too): the model's shell cannot reach the home, the
socket, other processes' environments, files outside its workdir; the same run still works.

Every probe prints ESCAPED-<what> only if the forbidden thing succeeded. The same probes run
under `sandbox = "none"` escape, which proves each probe can fail.
"""

import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest

from agent_run.engines.plan import load_plan
from agent_run.engines.sandbox import (
    Bind,
    bwrap_argv,
    git_binds,
    home_masks,
    sandbox_argv,
    sandbox_binds,
)
from tests.harness import TEST_CONFIG, DaemonProcess, cli, make_home, remove_home, short_tmpdir

PLANTED = "sk-sandbox-planted-7f3a9c2e51d04b"
OPEN_RUNTIME = """[runtimes.demo_open]
engine = "demo"
models = ["demo-1"]
sandbox = "none"
"""


@pytest.fixture
def setting():
    home = make_home(TEST_CONFIG + OPEN_RUNTIME)
    auth = home.root / "secrets" / "key"
    auth.parent.mkdir(mode=0o700)
    auth.write_text(PLANTED)
    auth.chmod(0o600)
    outside, other = short_tmpdir("aro-"), short_tmpdir("aro-other-")
    (other / "secret.txt").write_text("another agent's work\n")
    # Places that are mounted, or would be by a bind too wide (not only the private /tmp): a
    # secret file in the user's real home directory, a mark to write in agent-run's virtualenv.
    token = uuid.uuid4().hex
    user_secret = Path.home() / f".arun-sandbox-probe-{token}"
    user_secret.write_text(f"user-home-secret-{token}\n")
    venv_mark = Path(sys.prefix) / f".arun-sandbox-probe-{token}"
    # A PYTHON* variable makes it a fresh exec (not a zygote fork): the key is in its
    # /proc/PID/environ, where a same-uid model would look for it.
    env = {"ARUN_PLANTED_KEY": PLANTED, "PYTHONDONTWRITEBYTECODE": "1"}
    daemon = DaemonProcess(home, env=env).start()
    paths = {"outside": outside, "other": other, "auth": auth, "user_secret": user_secret}
    yield home, daemon, paths | {"venv_mark": venv_mark}
    daemon.stop()
    remove_home(home)

    for path in (outside, other):
        shutil.rmtree(path, ignore_errors=True)
    user_secret.unlink(missing_ok=True)
    venv_mark.unlink(missing_ok=True)


def probes(home, paths) -> list[str]:
    connect = f"import socket; socket.socket(socket.AF_UNIX).connect('{home.socket_path}')"
    return [
        f"cat {home.db_path} >/dev/null 2>&1 && echo ESCAPED-db",
        f'{sys.executable} -c "{connect}" 2>/dev/null && echo ESCAPED-socket',
        f"grep -a -q {PLANTED} /proc/*/environ 2>/dev/null && echo ESCAPED-environ",
        f"cat {home.root / 'config.toml'} >/dev/null 2>&1 && echo ESCAPED-config",
        f"cat {paths['auth']} >/dev/null 2>&1 && echo ESCAPED-auth",
        f"touch {paths['outside'] / 'x'} 2>/dev/null && echo ESCAPED-outside",
        f"cat {paths['other'] / 'secret.txt'} >/dev/null 2>&1 && echo ESCAPED-other",
        f"grep -q user-home-secret {paths['user_secret']} 2>/dev/null && echo ESCAPED-user-home",
        f"touch {paths['venv_mark']} 2>/dev/null && echo ESCAPED-venv",
        '[ "$(id -u)" = 0 ] && echo ESCAPED-root',
    ]


def run(daemon, workdir, lines, **extra):
    task = "\n".join(lines)
    agent = daemon.call("start", {"task": task, "workdir": str(workdir), **extra})
    result = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 90})
    assert not result["timed_out"], result
    items = daemon.call("transcript", {"agent_id": agent["id"]})["items"]
    return result["agent"], "\n".join(i["content"] for i in items if i["role"] == "tool")


def escapes(results: str) -> set[str]:
    return {word for word in results.split() if word.startswith("ESCAPED-")}


def test_the_model_shell_reaches_nothing_but_its_workdir_and_still_finishes(setting, workdir):
    home, daemon, paths = setting
    lines = [f"shell: {p}" for p in probes(home, paths)]
    lines += ["shell: echo mine > mine.txt && echo WROTE", "finish: done in the sandbox"]
    view, results = run(daemon, workdir, lines)
    assert view["state"] == "succeeded", view
    assert escapes(results) == set(), results
    assert "WROTE" in results and (workdir / "mine.txt").read_text() == "mine\n"
    assert "recorded (finish" in results  # the worker tools, through the gate
    assert PLANTED not in results
    assert not (paths["outside"] / "x").exists() and not paths["venv_mark"].exists()


def test_read_only_writes_nothing_even_through_the_shell(setting, workdir):
    home, daemon, _ = setting
    (workdir / "given.txt").write_text("readable\n")
    lines = [
        "shell: touch ro.txt 2>/dev/null && echo ESCAPED-write",
        "shell: cat given.txt",
        "finish: looked",
    ]
    view, results = run(daemon, workdir, lines, profile="read_only")
    assert view["state"] == "succeeded", view
    assert escapes(results) == set(), results
    assert "readable" in results and "recorded (finish" in results
    assert not (workdir / "ro.txt").exists()


def test_without_the_sandbox_the_same_probes_escape(setting, workdir):
    home, daemon, paths = setting
    lines = [f"shell: {p}" for p in probes(home, paths)]
    view, results = run(daemon, workdir, lines, runtime="demo_open")
    assert view["state"] == "succeeded", view
    assert view["sandbox"] == "none"
    assert escapes(results) == {
        "ESCAPED-db",
        "ESCAPED-socket",
        "ESCAPED-environ",
        "ESCAPED-config",
        "ESCAPED-auth",
        "ESCAPED-outside",
        "ESCAPED-other",
        "ESCAPED-user-home",
        "ESCAPED-venv",
    } | ({"ESCAPED-root"} if os.getuid() == 0 else set())


def test_a_ranked_batchs_verify_command_sees_no_key_of_the_daemon_nor_the_home(setting):
    """Through a real ranked demo batch: `env` and the probes in its verify_command, run by
    the daemon (whose environment holds the planted key) in the candidate's worktree."""
    from tests.batch_harness import CANDIDATE, make_repo, runs_of, wait_batch

    home, daemon, paths = setting
    repo = make_repo()
    probes = [
        f"cat {home.db_path} >/dev/null 2>&1 && echo ESCAPED-db",
        f"grep -a -q {PLANTED} /proc/*/environ 2>/dev/null && echo ESCAPED-environ",
        f"ls {home.root} >/dev/null 2>&1 && echo ESCAPED-home",
        f"touch {paths['outside'] / 'x'} 2>/dev/null && echo ESCAPED-outside",
        'ls "$HOME" >/dev/null && touch "$HOME/.cache-probe" && echo HOME-WRITABLE',
    ]
    batch = daemon.call(
        "batch_start",
        {
            "runtime": "demo",
            "workflow": "ranked",
            "project": str(repo),
            "runs": 1,
            "reviewers": 1,
            "prompt": CANDIDATE,
            "review_prompt": "score: 70",
            "verify_command": "env; " + "; ".join(probes) + "; test -f feature.txt",
        },
    )
    done = wait_batch(daemon, batch["id"])
    candidate = runs_of(done, "candidate")[0]
    output = candidate["verify_output"]
    assert "PATH=" in output and "HOME-WRITABLE" in output, output
    assert escapes(output) == set(), output
    assert PLANTED not in output and "ARUN_PLANTED_KEY" not in output, output
    assert str(home.root) not in output and "AGENT_RUN_HOME" not in output, output
    assert f"HOME={os.path.expanduser('~')}\n" not in output and "HOME=/tmp\n" in output
    assert done["state"] == "completed", done


def test_an_unsandboxed_runtime_is_flagged_in_agent_agents_and_doctor(setting, workdir):
    home, daemon, _ = setting
    open_view, _ = run(daemon, workdir, ["answer: open"], runtime="demo_open")
    boxed_view, _ = run(daemon, workdir, ["answer: boxed"])
    assert (open_view["sandbox"], boxed_view["sandbox"]) == ("none", "bubblewrap")
    listed = {a["id"]: a["sandbox"] for a in daemon.call("list_agents", {})["items"]}
    assert listed == {open_view["id"]: "none", boxed_view["id"]: "bubblewrap"}
    assert "sandbox none" in cli(home, "--format", "text", "agent", open_view["id"]).stdout
    assert "sandbox" not in cli(home, "--format", "text", "agent", boxed_view["id"]).stdout
    rows = cli(home, "--format", "text", "agents").stdout.splitlines()
    assert [open_view["id"] in r for r in rows if "[sandbox: none]" in r] == [True]
    checks = {c["check"]: c for c in daemon.call("doctor", {})["checks"]}
    assert checks["sandbox demo_open"]["level"] == "warn"
    assert "sees everything" in checks["sandbox demo_open"]["detail"]
    assert checks["sandbox demo"]["level"] == "ok"


@pytest.fixture
def broken_bwrap():
    """A PATH whose first `bwrap` fails as bubblewrap does without user namespaces."""
    folder = short_tmpdir("arb-")
    fake = folder / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    yield folder

    shutil.rmtree(folder, ignore_errors=True)


def test_a_run_is_refused_when_no_sandbox_can_start_unless_sandbox_is_none(workdir, broken_bwrap):
    home = make_home(TEST_CONFIG + OPEN_RUNTIME)
    env = {"PATH": f"{broken_bwrap}:{os.environ['PATH']}", "PYTHONDONTWRITEBYTECODE": "1"}
    daemon = DaemonProcess(home, env=env).start()
    try:
        refused, _ = run(daemon, workdir, ["write: never.txt = x"])
        assert refused["state"] == "failed" and refused["failure_kind"] == "config_error"
        message = refused["execution"]["failure_message"]
        assert "No permissions to create new namespace" in message
        assert 'sandbox = "none"' in message
        assert not (workdir / "never.txt").exists()
        opened, _ = run(daemon, workdir, ["write: open.txt = x"], runtime="demo_open")
        assert opened["state"] == "succeeded" and (workdir / "open.txt").exists()
        checks = {c["check"]: c for c in daemon.call("doctor", {})["checks"]}
        assert checks["sandbox demo"]["level"] == "bad"
    finally:
        daemon.stop()
        remove_home(home)


def test_a_sandboxed_start_runs_bubblewrap_once_the_engines_own(workdir):
    """No probe per start: bwrap runs once, for the engine; it is only asked whether it can
    start a sandbox at all when an engine ends without a word (the test above)."""
    folder = short_tmpdir("arb-")
    calls = folder / "calls"
    real = shutil.which("bwrap")
    (folder / "bwrap").write_text(f'#!/bin/sh\necho run >> {calls}\nexec {real} "$@"\n')
    (folder / "bwrap").chmod(0o755)
    home = make_home(TEST_CONFIG)
    env = {"PATH": f"{folder}:{os.environ['PATH']}", "PYTHONDONTWRITEBYTECODE": "1"}
    daemon = DaemonProcess(home, env=env).start()
    try:
        for n in range(2):
            agent, _ = run(daemon, workdir, [f"answer: {n}"])
            assert agent["state"] == "succeeded"
        assert calls.read_text().splitlines() == ["run", "run"]
    finally:
        daemon.stop()
        remove_home(home)
        shutil.rmtree(folder, ignore_errors=True)


def plan(**fields):
    base = {
        "agent_id": "ag_1",
        "execution_id": "ex_1",
        "runtime": "demo",
        "engine": "demo",
        "model": "demo-1",
        "workdir": "/w/agent",
        "profile": "write",
        "runtime_config": {"engine": "demo"},
        "stall_seconds": 60.0,
        "cancel_grace_seconds": 1.0,
        "engine_home": "/h/homes/demo/ag_1",
        "read_roots": ["/w/reviewed"],
    }
    import json

    return load_plan(json.dumps(base | fields))


def test_the_binds_are_exactly_what_the_run_needs_parents_first():
    binds = sandbox_binds(
        plan(), "/nowhere/engine", {}, Path("/h/agents/ag_1/ex_1/sandbox"), Path("/h")
    )
    by_target = {b.target: b for b in binds}
    assert by_target["/w/agent"].writable and not by_target["/w/reviewed"].writable
    assert by_target["/h/homes/demo/ag_1"].writable
    assert by_target["/h/agents/ag_1/ex_1/sandbox"].writable
    assert not any(t == "/h" or t.endswith(("state.db", "config.toml")) for t in by_target)
    depths = [len(Path(b.target).parts) for b in binds]
    assert depths == sorted(depths)
    read_only = sandbox_binds(
        plan(profile="read_only"), "/nowhere/engine", {}, Path("/s"), Path("/h")
    )
    assert not {b.target: b for b in read_only}["/w/agent"].writable


def test_the_bwrap_argv_drops_every_capability_in_private_namespaces():
    argv = bwrap_argv([Bind("/a", "/b", writable=True), Bind("/c", "/c")], ["engine", "-x"], "/b")
    assert argv[0] == "bwrap" and argv[-3:] == ["--", "engine", "-x"]
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[argv.index("--uid") + 1] != "0" and argv[argv.index("--gid") + 1] != "0"
    assert argv.index("--tmpfs") < argv.index("--bind")  # the workdir is bound over /tmp
    assert ["--bind", "/a", "/b"] == argv[argv.index("--bind") : argv.index("--bind") + 3]
    assert ["--ro-bind", "/c", "/c"] == argv[argv.index("/c") - 1 : argv.index("/c") + 2]
    assert argv[argv.index("--chdir") + 1] == "/b"
    assert "--unshare-net" not in argv  # the engine reaches its provider (SECURITY.md)


def test_a_git_worktree_gets_its_repository_and_git_works_inside(tmp_path):
    import subprocess

    repo, tree, box = tmp_path / "repo", tmp_path / "tree", tmp_path / "box"
    box.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "i"], check=True)
    subprocess.run([*git, "-C", str(repo), "worktree", "add", "-q", str(tree)], check=True)
    binds = git_binds(str(tree), writable=False)
    assert binds[0] == Bind(str(repo / ".git"), str(repo / ".git"), False)
    argv = sandbox_argv(
        plan(workdir=str(tree), engine_home=str(box), read_roots=[]),
        ["git", "log", "--oneline"],
        {},
        box,
        tmp_path / "home",
    )
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip().endswith(" i"), done


def test_a_read_root_that_does_not_exist_is_refused_at_admission_naming_it(setting, workdir):
    """At `start` (no agent admitted, no sandbox tried) and at `resume` when a read root has
    gone since: a typed error naming `read_roots.N`, never a bubblewrap launch failure."""
    from agent_run.domain.errors import InvalidRequest

    home, daemon, paths = setting
    missing = paths["other"] / "gone"
    with pytest.raises(InvalidRequest) as refused:
        daemon.call(
            "start",
            {
                "task": "answer: x",
                "workdir": str(workdir),
                "read_roots": [str(workdir), str(missing)],
            },
        )
    assert refused.value.field == "read_roots.1" and str(missing) in refused.value.message
    assert daemon.call("list_agents", {})["items"] == []
    root = paths["other"] / "reviewed"
    root.mkdir()
    agent = daemon.call(
        "start", {"task": "answer: first", "workdir": str(workdir), "read_roots": [str(root)]}
    )
    first = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
    assert first["state"] == "succeeded", first
    root.rmdir()
    with pytest.raises(InvalidRequest) as refused:
        daemon.call("resume", {"agent_id": agent["id"], "prompt": "answer: again"})
    assert refused.value.field == "read_roots.0" and str(root) in refused.value.message
    assert daemon.call("agent", {"agent_id": agent["id"]})["execution"]["number"] == 1


def home_probes(home, other_agent: str) -> list[str]:
    """What a run whose folder contains agent-run's home must not reach, by the home's real
    paths: the database, the socket, the config, a key file, another agent's folder."""
    connect = f"import socket; socket.socket(socket.AF_UNIX).connect('{home.socket_path}')"
    return [
        f"cat {home.db_path} >/dev/null 2>&1 && echo ESCAPED-db",
        f'{sys.executable} -c "{connect}" 2>/dev/null && echo ESCAPED-socket',
        f"cat {home.root / 'config.toml'} >/dev/null 2>&1 && echo ESCAPED-config",
        f"cat {home.root / 'secrets' / 'key'} >/dev/null 2>&1 && echo ESCAPED-auth",
        f"ls {home.agents_dir / other_agent} >/dev/null 2>&1 && echo ESCAPED-other-agent",
        f"ls {home.homes_dir / 'demo' / other_agent} >/dev/null 2>&1 && echo ESCAPED-other-home",
    ]


def test_a_workdir_or_read_root_the_system_cannot_look_up_is_refused_naming_it(setting, workdir):
    """A name longer than the system allows (ENAMETOOLONG, which `Path.is_dir` raises for): the
    caller's bad input on its field, not the daemon's internal error; nothing admitted."""
    from agent_run.domain.errors import InvalidRequest

    _home, daemon, _paths = setting
    too_long = str(workdir / ("x" * 300))
    for params, field in (
        ({"workdir": too_long}, "workdir"),
        ({"workdir": str(workdir), "read_roots": [too_long]}, "read_roots.0"),
    ):
        with pytest.raises(InvalidRequest) as refused:
            daemon.call("start", {"task": "answer: x", **params})
        assert refused.value.field == field
    assert daemon.call("list_agents", {})["items"] == []


def test_a_workdir_or_read_root_that_contains_the_home_shows_nothing_of_it(setting, workdir):
    """`--workdir ~` with the home at `~/.agent-run`: the home is masked inside (an empty tmpfs),
    the run's own engine home and sandbox folder bound again on top, so the run still works
    (writes its file, calls `finish` through its worker socket in the home)."""
    home, daemon, _ = setting
    other, _ = run(daemon, workdir, ["answer: another agent"])
    around = home.root.parent  # the folder that holds the home
    lines = [f"shell: {p}" for p in home_probes(home, other["id"])]
    lines += ["shell: echo mine > mine.txt && echo WROTE", "finish: done around the home"]
    view, results = run(daemon, around, lines)
    assert view["state"] == "succeeded", view
    assert escapes(results) == set(), results
    assert "WROTE" in results and (around / "mine.txt").read_text() == "mine\n"
    assert "recorded (finish" in results
    read_view, read_results = run(daemon, workdir, lines[:-2], read_roots=[str(around)])
    assert read_view["state"] == "succeeded" and escapes(read_results) == set(), read_results
    open_view, open_results = run(daemon, around, lines[:-2], runtime="demo_open")
    assert escapes(open_results) == {  # each probe names a real path
        "ESCAPED-db",
        "ESCAPED-socket",
        "ESCAPED-config",
        "ESCAPED-auth",
        "ESCAPED-other-agent",
        "ESCAPED-other-home",
    }, open_results


def test_a_command_run_for_an_agent_in_a_folder_containing_the_home_sees_none_of_it(setting):
    """verify_command's sandbox (`command_argv`) masks the home the same way."""
    import subprocess

    from agent_run.engines.environment import command_environment
    from agent_run.engines.sandbox import command_argv

    home, _, _ = setting
    around = home.root.parent
    script = f"ls -A {home.root}; cat {home.db_path} >/dev/null 2>&1 && echo ESCAPED-db; echo ran"
    done = subprocess.run(
        command_argv(script, str(around), home.root),
        capture_output=True,
        text=True,
        env=command_environment(),
        timeout=60,
    )
    assert done.stdout.split() == ["ran"], done


def test_the_home_is_masked_under_a_bind_that_contains_it_and_the_runs_folders_are_on_top():
    binds = sandbox_binds(
        plan(workdir="/u", engine_home="/u/h/homes/demo/ag_1", read_roots=[]),
        "/nowhere/engine",
        {},
        Path("/u/h/agents/ag_1/ex_1/sandbox"),
        Path("/u/h"),
    )
    targets = [(b.target, b.tmpfs) for b in binds]
    mask = targets.index(("/u/h", True))
    assert targets.index(("/u", False)) < mask
    assert mask < targets.index(("/u/h/homes/demo/ag_1", False))
    assert mask < targets.index(("/u/h/agents/ag_1/ex_1/sandbox", False))


def test_a_bind_that_reaches_the_home_through_a_symlink_masks_it(tmp_path):
    """Masks go by what a bind's source is on disk: a symlink to the home's parent shows the
    home as surely as the parent itself."""
    (tmp_path / "u" / "h").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "u")
    (tmp_path / "other").mkdir()
    binds = [Bind(str(tmp_path / "link"), "/w"), Bind(str(tmp_path / "other"), "/o")]
    masks = home_masks(binds, tmp_path / "u" / "h")
    assert [(m.target, m.tmpfs) for m in masks] == [("/w/h", True)]
    assert home_masks([Bind(str(tmp_path / "u" / "h"), "/x")], tmp_path / "link" / "h") == [
        Bind("", "/x", tmpfs=True)
    ]


def test_a_workdir_or_read_root_inside_the_home_is_refused_naming_the_field(setting, workdir):
    from agent_run.domain.errors import InvalidRequest

    home, daemon, _ = setting
    for folder in (home.root, home.agents_dir):
        with pytest.raises(InvalidRequest) as refused:
            daemon.call("start", {"task": "answer: x", "workdir": str(folder)})
        assert refused.value.field == "workdir", refused.value
        assert "inside agent-run's home" in refused.value.message
    with pytest.raises(InvalidRequest) as refused:
        daemon.call(
            "start",
            {"task": "answer: x", "workdir": str(workdir), "read_roots": [str(home.logs_dir)]},
        )
    assert refused.value.field == "read_roots.0", refused.value
    assert daemon.call("list_agents", {})["items"] == []


def test_the_homes_demos_folder_is_a_workdir_like_any_other_and_shows_nothing_else(setting):
    """`<home>/demos` holds the quick start's repositories (nothing secret): a workdir there is
    admitted, and its agent still sees none of the home's own files."""
    home, daemon, _ = setting
    folder = home.demos_dir / "demo-x" / "project"
    folder.mkdir(parents=True)
    lines = [
        f"shell: cat {home.db_path} >/dev/null 2>&1 && echo ESCAPED-db",
        f"shell: cat {home.logs_dir / 'daemon.log'} >/dev/null 2>&1 && echo ESCAPED-logs",
        f"shell: cat {home.config_path} >/dev/null 2>&1 && echo ESCAPED-config",
        "shell: echo here > here.txt && echo WROTE",
    ]
    view, results = run(daemon, folder, lines)
    assert view["state"] == "succeeded", view
    assert escapes(results) == set(), results
    assert "WROTE" in results and (folder / "here.txt").read_text() == "here\n"
    with pytest.raises(Exception) as refused:  # the demos folder itself holds every demo
        daemon.call("start", {"task": "answer: x", "workdir": str(home.demos_dir)})
    assert getattr(refused.value, "field", None) == "workdir"


def test_a_batch_whose_worktrees_would_go_inside_the_home_is_refused_at_once(setting, workdir):
    from agent_run.domain.errors import InvalidRequest
    from tests.batch_harness import make_repo

    home, daemon, _ = setting
    repo = make_repo()
    with pytest.raises(InvalidRequest) as refused:
        daemon.call(
            "batch_start",
            {
                "runtime": "demo",
                "workflow": "repeated",
                "project": str(repo),
                "runs": 1,
                "prompt": "answer: x",
                "worktree_root": str(home.logs_dir),
            },
        )
    assert refused.value.field == "worktree_root", refused.value
    assert daemon.call("list_batches", {})["items"] == []


def test_tmpdir_inside_is_the_private_tmp_whatever_the_daemons_is(workdir):
    """The daemon's TMPDIR (here a folder of its own) is passed to engines; inside the sandbox it
    would not exist: TMPDIR is /tmp there, and a temp file can be made."""
    home = make_home()
    own_tmp = short_tmpdir("art-tmp-")
    daemon = DaemonProcess(home, env={"TMPDIR": str(own_tmp)}).start()
    try:
        lines = ['shell: echo "TMPDIR=$TMPDIR"', "shell: mktemp >/dev/null && echo MKTEMP-OK"]
        view, results = run(daemon, workdir, lines)
        assert view["state"] == "succeeded", view
        assert "TMPDIR=/tmp\n" in results and "MKTEMP-OK" in results, results
    finally:
        daemon.stop()
        remove_home(home)


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def test_a_timed_out_verify_command_leaves_no_process_behind(setting):
    """The verify_command's timeout kills bwrap; the sandbox (its processes) dies with it."""
    import signal

    from tests.batch_harness import CANDIDATE, make_repo, runs_of, wait_batch
    from tests.harness import wait_for

    _, daemon, _ = setting
    marker = "4321.123"
    repo = make_repo()
    try:
        batch = daemon.call(
            "batch_start",
            {
                "runtime": "demo",
                "workflow": "ranked",
                "project": str(repo),
                "runs": 1,
                "reviewers": 1,
                "prompt": CANDIDATE,
                "review_prompt": "score: 70",
                "verify_command": f"sleep {marker}",
                "verify_timeout_seconds": 2,
            },
        )
        done = wait_batch(daemon, batch["id"])
        output = runs_of(done, "candidate")[0]["verify_output"]
        assert "timed out after 2s" in output, output
        wait_for(lambda: not processes_with(marker), timeout=30, what="the sandbox to die")
    finally:
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)

        shutil.rmtree(repo.parent, ignore_errors=True)


def test_a_resolv_conf_link_out_of_the_system_dirs_has_its_target_inside(tmp_path):
    """systemd-resolved makes /etc/resolv.conf a link to /run/systemd/resolve/stub-resolv.conf,
    and /run is not mounted: the target is bound (here a link and target of the test's own,
    through the same function, in a real sandbox)."""
    import subprocess

    from agent_run.engines.sandbox import resolver_binds, system_binds

    etc, run_dir = tmp_path / "etc", tmp_path / "run" / "systemd" / "resolve"
    etc.mkdir()
    run_dir.mkdir(parents=True)
    (run_dir / "stub-resolv.conf").write_text("nameserver 127.0.0.53\n")
    (etc / "resolv.conf").symlink_to(run_dir / "stub-resolv.conf")
    binds = system_binds() + [Bind(str(etc), str(etc))] + resolver_binds(str(etc / "resolv.conf"))
    argv = bwrap_argv(binds, ["cat", str(etc / "resolv.conf")], "/")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.stdout == "nameserver 127.0.0.53\n", done
    assert resolver_binds("/etc/hostname") == []  # a plain file: nothing more to bind


def test_a_scripts_interpreter_outside_the_system_dirs_is_bound_with_its_install_tree(tmp_path):
    """An engine that is a `#!/usr/bin/env mynode` script, its interpreter only in its own
    install tree (as nvm installs node): the tree is bound read-only, so the engine starts."""
    import subprocess

    prefix, app = tmp_path / "node-v1", tmp_path / "app"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib" / "marker").parent.mkdir()
    (prefix / "lib" / "marker").write_text("from its tree\n")
    try:
        os.link("/usr/bin/node", prefix / "bin" / "mynode")
    except OSError:
        shutil.copy2("/usr/bin/node", prefix / "bin" / "mynode")
    app.mkdir()
    engine = app / "engine"
    engine.write_text(
        "#!/usr/bin/env mynode\n"
        f"const fs = require('fs'); console.log('NODE-OK', fs.readFileSync('{prefix}/lib/marker',"
        " 'utf8').trim())\n"
    )
    engine.chmod(0o755)
    box = tmp_path / "box"
    box.mkdir()
    env = {"PATH": f"{prefix / 'bin'}:/usr/bin:/bin"}
    argv = sandbox_argv(
        plan(workdir=str(box), engine_home=str(box), read_roots=[]),
        [str(engine)],
        env,
        box,
        tmp_path / "home",
    )
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.strip() == "NODE-OK from its tree", done
