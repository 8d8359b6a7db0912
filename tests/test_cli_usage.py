"""The CLI's usage contract, run as a user runs it: exit statuses (usage errors are 64, never a
wait's status) listed in every verb's help, `--home` after the verb, relative folders, flag
aliases, defaults in `--help`, and `doc` as a human verb that needs no daemon."""

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import click
import pytest

from agent_run.cli.exits import EXIT_USAGE
from agent_run.cli.main import cli as root_command
from agent_run.system.home import Home
from tests.batch_harness import make_repo, wait_batch
from tests.harness import TEST_CONFIG, DaemonProcess, cli, cli_json, make_home, remove_home


def bare_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`agent-run ARGS` exactly as given (no `--home` put first), in `cwd`."""
    env = {k: v for k, v in os.environ.items() if k != "AGENT_RUN_HOME"}
    return subprocess.run(
        [sys.executable, "-m", "agent_run", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )


def leaf_verbs(group: click.Group, prefix: str = "") -> list[str]:
    verbs = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            verbs += leaf_verbs(command, f"{prefix}{name} ")
        else:
            verbs.append(prefix + name)
    return verbs


@pytest.mark.parametrize(
    "args, field",
    [
        (["start", "--bogus", "x"], None),
        (["start", "--profile", "sometimes", "--task", "t"], "profile"),
        (["agent"], "agent_id"),
        (["wait", "ag_x", "--timeout", "soon"], "timeout_seconds"),
    ],
)
def test_a_usage_error_exits_64_not_a_wait_status(home: Home, args, field) -> None:
    result = cli(home, *args, env={"AGENT_RUN_NO_AUTOSTART": "1"})
    assert result.returncode == EXIT_USAGE == 64, result.stdout + result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "InvalidParams"
    assert error.get("field") == field
    text = cli(home, "--format", "text", *args, env={"AGENT_RUN_NO_AUTOSTART": "1"})
    assert text.returncode == 64 and "Usage:" in text.stderr and not text.stdout


def test_every_verb_help_lists_its_exit_statuses() -> None:
    verbs = leaf_verbs(root_command)
    assert len(verbs) > 30
    for verb in verbs:
        ctx = click.Context(root_command)
        command: click.Command = root_command
        for word in verb.split():
            assert isinstance(command, click.Group)
            command = command.commands[word]
        helptext = command.get_help(click.Context(command, parent=ctx, info_name=verb))
        assert "Exit status:" in helptext, verb
        assert "64  usage error" in helptext, verb
        assert "1   " in helptext, verb


def help_statuses(*verb: str) -> dict[int, str]:
    """The `Exit status:` table of a verb's --help: status -> what it means."""
    helptext = bare_cli(*verb, "--help").stdout
    table = helptext.split("Exit status:", 1)[1]
    statuses = {}
    for line in table.splitlines():
        words = line.split(maxsplit=1)
        if words and words[0].isdigit():
            statuses[int(words[0])] = words[1] if len(words) > 1 else ""
    return statuses


def test_api_serve_on_a_bad_config_exits_with_a_status_its_help_lists(home: Home) -> None:
    home.config_path.write_text("schema_version = [\n")
    result = cli(home, "api", "serve", timeout=60)
    statuses = help_statuses("api", "serve")
    assert result.returncode == 1 and result.returncode in statuses, result
    assert "config.toml is invalid" in statuses[1] and "a line on stderr" in statuses[1]
    assert result.stderr.startswith("error: ConfigInvalid")


def test_login_without_a_terminal_is_a_usage_error_its_help_lists(home: Home) -> None:
    home.config_path.write_text(
        TEST_CONFIG + '[runtimes.cx]\nengine = "codex"\nauth = { login = "native" }\n'
    )
    result = cli(home, "login", "cx", input="", env={"AGENT_RUN_NO_AUTOSTART": "1"})
    statuses = help_statuses("login")
    assert result.returncode == EXIT_USAGE and result.returncode in statuses, result
    assert "no terminal" in statuses[EXIT_USAGE]
    error = json.loads(result.stdout)["error"]
    assert (
        error["code"] == "InvalidParams"
        and "`agent-run login cx` in a terminal" in error["message"]
    ), error
    assert "--with-api-key" in error["message"]


@pytest.mark.parametrize(
    "form",
    [
        ["--format=text", "start", "--bogus"],
        ["--format", "text", "start", "--bogus"],
        ["start", "--bogus", "--format=text"],
    ],
)
def test_format_text_with_an_equals_sign_is_read_like_two_words(home: Home, form) -> None:
    result = cli(home, *form, env={"AGENT_RUN_NO_AUTOSTART": "1"})
    assert result.returncode == 64
    assert not result.stdout and "Usage:" in result.stderr, result
    assert "No such option '--bogus'" in result.stderr


def test_a_waiting_verb_help_lists_each_end_state_status() -> None:
    wait = bare_cli("wait", "--help")
    assert wait.returncode == 0
    for line in ("0   succeeded", "2   ", "failed, lost", "3   cancelled", "4   timed out"):
        assert line in wait.stdout, (line, wait.stdout)
    start = bare_cli("start", "--help")
    assert "with --wait: failed, lost" in start.stdout
    follow = bare_cli("batch", "show", "--help")
    assert "with --follow: completed" in follow.stdout
    assert "with --follow: failed, blocked" in follow.stdout


def test_start_help_shows_the_defaults_the_daemon_applies() -> None:
    result = bare_cli("start", "--help")
    assert "[default: write]" in " ".join(result.stdout.split()), result.stdout
    batch = " ".join(bare_cli("batch", "start", "--help").stdout.split())
    assert "[default: HEAD]" in batch and "[default: 4]" in batch


def test_home_is_accepted_after_the_verb(daemon: DaemonProcess, home: Home) -> None:
    before = bare_cli("--home", str(home.root), "agents")
    after = bare_cli("agents", "--home", str(home.root))
    nested = bare_cli("batch", "list", "--home", str(home.root))
    admin = bare_cli("api", "status", "--home", str(home.root))
    for result in (before, after, nested, admin):
        assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(after.stdout) == json.loads(before.stdout)
    assert json.loads(admin.stdout)["home"] == str(home.root)


def test_a_relative_workdir_is_resolved_against_the_current_directory(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    (workdir / "sub").mkdir()
    result = bare_cli(
        "--home",
        str(home.root),
        "start",
        "--task",
        "answer: here",
        "--workdir",
        "sub",
        "--wait",
        cwd=workdir,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [waited] = [json.loads(line) for line in result.stdout.splitlines()]
    assert waited["agent"]["workdir"] == str(workdir / "sub")


def test_a_relative_project_is_resolved_against_the_current_directory(
    daemon: DaemonProcess, home: Home
) -> None:
    repo = make_repo()
    (repo / "services").mkdir()
    result = bare_cli(
        "--home",
        str(home.root),
        "batch",
        "start",
        "--workflow",
        "repeated",
        "--runs",
        "1",
        "--prompt",
        "answer: here",
        "--project",
        "services",
        cwd=repo,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    batch = json.loads(result.stdout)
    assert (batch["project_root"], batch["project_subdir"]) == (str(repo), "services"), batch
    wait_batch(daemon, batch["id"])


def test_folder_params_say_in_the_help_that_a_relative_path_is_taken_from_here() -> None:
    start = " ".join(bare_cli("start", "--help").stdout.split())
    assert "--workdir TEXT path (absolute, or relative to the current directory) of an" in start
    batch = " ".join(bare_cli("batch", "start", "--help").stdout.split())
    assert "--project TEXT path (absolute, or relative to the current directory) of a git" in batch
    assert "--worktree-root TEXT where worktrees go" in batch
    assert "absolute path of" not in start + batch
    assert "(absolute paths)" in start  # --read-roots: the CLI leaves those as given


def test_resume_takes_text_like_steer_and_keeps_prompt_as_an_alias(
    daemon: DaemonProcess, home: Home, workdir: Path
) -> None:
    started = cli(home, "start", "--task", "answer: one", "--workdir", str(workdir), "--wait")
    agent_id = json.loads(started.stdout.splitlines()[0])["agent"]["id"]
    by_text = cli(home, "resume", agent_id, "--text", "answer: two")
    assert by_text.returncode == 0, by_text.stdout + by_text.stderr
    cli(home, "wait", agent_id)
    by_prompt = cli(home, "resume", agent_id, "--prompt", "answer: three")
    assert by_prompt.returncode == 0, by_prompt.stdout + by_prompt.stderr
    assert cli(home, "wait", agent_id).returncode == 0
    assert cli_json(home, "answer", agent_id)["text"] == "three"
    assert cli_json(home, "agent", agent_id)["execution"]["number"] == 3


def _on_a_terminal(home: Home, *args: str) -> tuple[int, str]:
    """Run the CLI with its stdout on a pseudo-terminal; (exit status, what it printed)."""
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "AGENT_RUN_HOME"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_run", "--home", str(home.root), *args],
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) is not None
    return proc.returncode, b"".join(chunks).decode().replace("\r\n", "\n")


def test_doc_help_says_its_default_is_text_on_a_terminal() -> None:
    doc = " ".join(bare_cli("doc", "--help").stdout.split())
    assert "--format [json|text] text for people (default on a terminal), or json" in doc, doc
    assert "json (default)" not in doc
    assert "json (default): one object per line" in bare_cli("agents", "--help").stdout


def test_doc_is_text_on_a_terminal_and_never_starts_a_daemon() -> None:
    home = make_home()  # autostart on: any verb that needed the daemon would start one
    try:
        status, shown = _on_a_terminal(home, "doc", "states")
        assert status == 0
        assert shown.startswith("Execution states and allowed transitions"), shown
        piped = cli(home, "doc", "failures")
        assert piped.returncode == 0
        assert json.loads(piped.stdout)["topic"] == "failures"
        forced = _on_a_terminal(home, "doc", "--format", "json")[1]
        assert json.loads(forced)["topic"] == "overview"
        unknown = cli(home, "doc", "nope")
        assert unknown.returncode == 1
        assert json.loads(unknown.stdout)["error"]["field"] == "topic"
        assert not home.socket_path.exists()
        assert "started one" not in piped.stderr + unknown.stderr
    finally:
        remove_home(home)


def test_an_option_of_another_workflow_is_refused_naming_the_field(
    daemon: DaemonProcess, home: Home
) -> None:
    from tests.batch_harness import make_repo

    repo = make_repo()
    common = ["batch", "start", "--project", str(repo), "--prompt", "answer: x", "--runs", "1"]
    for workflow, option, value, owner in (
        ("repeated", "--reviewers", "3", "ranked"),
        ("generated", "--verify-command", "true", "ranked"),
        ("ranked", "--validator-prompt", "check", "validated"),
        ("validated", "--review-prompt", "score", "ranked"),
    ):
        result = cli(home, *common, "--workflow", workflow, option, value)
        assert result.returncode == 1, result.stdout + result.stderr
        error = json.loads(result.stdout)["error"]
        assert error["field"] == option.removeprefix("--").replace("-", "_")
        assert f"applies to {owner} batches, not {workflow}" in error["message"]
    assert cli_json(home, "batch", "list")["total"] == 0  # nothing was made
    fits = cli(home, *common, "--workflow", "ranked", "--reviewers", "1", "--review-prompt", "s")
    assert fits.returncode == 0, fits.stdout + fits.stderr
