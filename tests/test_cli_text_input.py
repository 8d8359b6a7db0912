"""Every text option of the CLI (`--task`, `--prompt`, `--text`, review and validator prompts,
a merge message) takes `@FILE` and `-` (stdin), with `@@` for a text that starts with `@`: a
task longer than the kernel lets one argument be reaches the agent whole."""

import json
import subprocess

import click
import pytest

from agent_run.cli import spec as cli_spec
from agent_run.cli.main import cli as root_command
from agent_run.cli.main import command_for
from tests.harness import cli, cli_json, wait_for

ARG_MAX_ONE = 128 * 1024  # Linux's MAX_ARG_STRLEN: the longest one argument can be


def _long_task(size: int) -> str:
    """A demo task of `size` bytes: its answer first, then lines the demo engine ignores."""
    head = "answer: the long task arrived whole\n"
    filler = "# context line the agent reads, not a directive of the demo engine\n"
    return head + filler * ((size - len(head)) // len(filler) + 1)


def test_a_task_longer_than_one_argument_may_be_runs_from_a_file(daemon, workdir, tmp_path):
    task = _long_task(600_000)
    assert len(task.encode()) > 4 * ARG_MAX_ONE
    with pytest.raises(OSError):  # inline, the kernel refuses it before agent-run runs
        subprocess.run(["/bin/true", "--task", task], check=False)
    path = tmp_path / "task.md"
    path.write_text(task)
    started = cli_json(daemon.home, "start", "--task", f"@{path}", "--workdir", str(workdir))
    assert "error" not in started, started
    waited = cli_json(daemon.home, "wait", started["id"], "--timeout", "120", timeout=150)
    assert waited["agent"]["state"] == "succeeded", waited
    agent = cli_json(daemon.home, "agent", started["id"])
    assert agent["task"] == task
    answer = cli_json(daemon.home, "answer", started["id"])
    assert answer["text"] == "the long task arrived whole"


def test_a_text_from_stdin_and_one_that_starts_with_an_at(daemon, workdir):
    task = "answer: from standard input\nsteps: 600\nstep_seconds: 0.1\n"
    started = cli_json(daemon.home, "start", "--task", "-", "--workdir", str(workdir), input=task)
    agent_id = started["id"]
    try:
        assert cli_json(daemon.home, "agent", agent_id)["task"] == task
        steered = cli_json(daemon.home, "steer", agent_id, "--text", "@@team: also add tests")
        assert "error" not in steered, steered
        events = wait_for(
            lambda: [
                e
                for e in cli_json(daemon.home, "transcript", agent_id, "--limit", "500")["items"]
                if "@team: also add tests" in json.dumps(e)
            ],
            timeout=60,
            what="the steer in the transcript",
        )
        assert not any("@@team" in json.dumps(e) for e in events)
    finally:
        cli(daemon.home, "cancel", agent_id)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("@{missing}", "cannot read {missing}: No such file or directory"),
        ("@{folder}", "cannot read {folder}: Is a directory"),
        ("@{latin1}", "{latin1} is not UTF-8 text (byte 3)"),
        ("@", "@ needs a file name"),
    ],
)
def test_a_text_file_that_cannot_be_used_is_a_usage_error_naming_the_option(
    home, tmp_path, value, said
):
    names = {
        "missing": tmp_path / "missing.md",
        "folder": tmp_path,
        "latin1": tmp_path / "latin1.md",
    }
    names["latin1"].write_bytes("caf\xe9 \xe9t\xe9".encode("latin-1"))
    value, said = value.format(**names), said.format(**names)
    done = cli(home, "batch", "start", "--workflow", "ranked", "--project", str(tmp_path),
               "--runs", "1", "--prompt", "x", "--review-prompt", value)  # fmt: skip
    assert done.returncode == 64, done
    error = json.loads(done.stdout)["error"]
    assert (error["code"], error["field"]) == ("InvalidParams", "review_prompt")
    assert "'--review-prompt'" in error["message"] and said in error["message"], error
    assert not (home.root / "state.db").exists()  # refused before any daemon was asked


def test_stdin_can_be_the_value_of_one_option_only(home, tmp_path):
    done = cli(home, "batch", "start", "--workflow", "validated", "--project", str(tmp_path),
               "--runs", "1", "--prompt", "-", "--validator-prompt", "-", input="x")  # fmt: skip
    assert done.returncode == 64
    error = json.loads(done.stdout)["error"]
    assert error["field"] == "validator_prompt"
    assert "standard input (-) is already the value of --prompt" in error["message"]


TEXT_PARAMS = [
    (tool["verb"], p["name"])
    for tool in cli_spec.load()
    for p in tool["params"]
    if p["type"] == "text"
]


def test_every_prose_param_of_the_table_is_a_text_option_that_says_so():
    assert {
        ("start", "task"),
        ("resume", "prompt"),
        ("steer", "text"),
        ("batch start", "prompt"),
        ("batch start", "review_prompt"),
        ("batch start", "validator_prompt"),
        ("run resume", "prompt"),
        ("run followup", "text"),
        ("run merge", "message"),
    } == set(TEXT_PARAMS)
    for verb, name in TEXT_PARAMS:
        command = command_for(root_command, verb)
        assert command is not None
        option = next(p for p in command.params if p.name == name)
        assert isinstance(option, click.Option)
        assert "@FILE" in (option.help or "") and "- for stdin" in (option.help or ""), verb
