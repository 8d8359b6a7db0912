"""`[hosts.NAME]` is validated fail-closed like the rest of config.toml: every fault names its
dotted field, through the parser and through a real CLI call (which starts no daemon)."""

import json

import pytest

from agent_run.config.model import parse_config
from agent_run.domain.errors import ConfigInvalid
from tests.harness import TEST_CONFIG, cli, make_home, remove_home

HOST = '[hosts.box]\nssh = "me@box.example:2222"\n'

# (id, the [hosts] text, the dotted field ConfigInvalid must name)
FAULTS = [
    ("option-injection", '[hosts.box]\nssh = "-oProxyCommand=touch /tmp/x"\n', "hosts.box.ssh"),
    ("space", '[hosts.box]\nssh = "me@box example"\n', "hosts.box.ssh"),
    ("port-out-of-range", '[hosts.box]\nssh = "me@box:70000"\n', "hosts.box.ssh"),
    ("port-not-a-number", '[hosts.box]\nssh = "me@box:ssh"\n', "hosts.box.ssh"),
    ("missing-ssh", '[hosts.box]\nhome = "~/.ar"\n', "hosts.box.ssh"),
    ("unknown-key", HOST + 'password = "hunter2"\n', "hosts.box.password"),
    (
        "ssh-config-missing",
        HOST + 'ssh_config = "/nonexistent/ssh_config"\n',
        "hosts.box.ssh_config",
    ),
    ("ssh-config-relative", HOST + 'ssh_config = "ssh_config"\n', "hosts.box.ssh_config"),
    ("empty-agent-run", HOST + "agent_run = []\n", "hosts.box.agent_run"),
    ("workspace-shell", HOST + 'workspace = "w$(id)"\n', "hosts.box.workspace"),
    ("timeout", HOST + "connect_timeout_seconds = 0\n", "hosts.box.connect_timeout_seconds"),
]


@pytest.mark.parametrize(("text", "field"), [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS])
def test_a_host_fault_names_its_dotted_field(text: str, field: str) -> None:
    with pytest.raises(ConfigInvalid) as caught:
        parse_config(TEST_CONFIG + text)
    assert caught.value.field == field, caught.value.message


def test_a_bad_host_name_is_refused() -> None:
    with pytest.raises(ConfigInvalid) as caught:
        parse_config(TEST_CONFIG + '[hosts."-box"]\nssh = "me@box"\n')
    assert caught.value.field is not None and caught.value.field.startswith("hosts.")


def test_a_valid_host_gives_ssh_a_quoted_command_and_no_prompt() -> None:
    config = parse_config(TEST_CONFIG + HOST + 'home = "~/my home"\n')
    argv = config.hosts["box"].ssh_argv(config.hosts["box"].agent_run_argv("api", "bridge"))
    assert argv[:4] == ["ssh", "-T", "-o", "BatchMode=yes"]
    assert "-p" in argv and argv[argv.index("-p") + 1] == "2222"
    assert argv[-3:-1] == ["me@box.example", "--"]
    assert argv[-1] == "agent-run --home '~/my home' api bridge"  # one word for the host's shell
    assert "-F" not in argv  # by default ssh reads the user's own ~/.ssh/config


def test_the_cli_reports_a_host_fault_with_its_field_and_starts_no_daemon() -> None:
    home = make_home(TEST_CONFIG + '[hosts.box]\nssh = "me@box:0"\n')
    try:
        done = cli(home, "hosts")
        assert done.returncode == 1, done.stdout + done.stderr
        error = json.loads(done.stdout.strip().splitlines()[-1])["error"]
        assert error["code"] == "ConfigInvalid" and error["field"] == "hosts.box.ssh"
        assert not home.socket_path.exists() and not home.db_path.exists()
    finally:
        remove_home(home)


def test_the_worker_tools_start_accepts_are_the_catalogs() -> None:
    from typing import get_args

    from agent_run.domain.requests import WorkerToolName
    from agent_run.worker_tools.catalog import WORKER_TOOLS

    assert set(get_args(WorkerToolName)) == set(WORKER_TOOLS)


def test_start_on_an_unknown_host_is_refused_naming_host_and_admits_nothing(
    daemon, workdir
) -> None:
    from tests.harness import db_rows

    for params, field in (
        ({"host": "nope"}, "host"),
        ({"host": "Bad Name"}, "host"),
    ):
        done = cli(
            daemon.home,
            "start",
            "--task",
            "answer: x",
            "--workdir",
            str(workdir),
            *(arg for k, v in params.items() for arg in (f"--{k}", v)),
        )
        assert done.returncode == 1, done.stdout
        error = json.loads(done.stdout.strip().splitlines()[-1])["error"]
        assert error["field"] == field, error
    batch = cli(
        daemon.home,
        "batch",
        "start",
        "--workflow",
        "repeated",
        "--project",
        str(workdir),
        "--prompt",
        "x",
        "--runs",
        "1",
        "--host",
        "nope",
    )
    assert json.loads(batch.stdout.strip().splitlines()[-1])["error"]["field"] == "host"
    assert db_rows(daemon.home, "SELECT count(*) AS n FROM agents")[0]["n"] == 0
