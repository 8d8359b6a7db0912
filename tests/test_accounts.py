"""Accounts, `models` and `usage` with the demo engine: config faults by dotted path, the
account chosen per run and recorded on every view (resume keeps it, batches pass it on), the
`accounts` tool (signed in or not, display email, never a token), and usage from what the
engine reported (a cost only when one was reported)."""

import base64
import json
import os
from pathlib import Path

import pytest

from agent_run.config.model import parse_config
from agent_run.domain.errors import ConfigInvalid, InvalidRequest
from tests.batch_harness import make_repo, wait_batch
from tests.harness import TEST_CONFIG, DaemonProcess, cli, db_rows, make_home, remove_home

ACCOUNTS = """
[runtimes.keyed]
engine = "demo"
models = ["demo-1", "demo-2"]
default_model = "demo-1"
default_account = "work"
auth = { env = "ART_OWN_KEY" }
[runtimes.keyed.accounts.work]
auth = { env = "ART_WORK_KEY" }
[runtimes.keyed.accounts.personal]
auth = { env = "ART_PERSONAL_KEY" }
[runtimes.keyed.accounts.spare]
auth = { file = "/nonexistent/art-spare-key" }
"""
WORK_KEY, PERSONAL_KEY = "work-key-0a1b2c3d4e5f", "personal-key-9f8e7d6c5b4a"

BASE = TEST_CONFIG + '[runtimes.codex]\nengine = "codex"\nmodels = ["gpt-5.5"]\n'
INVALID = [
    (
        "label-with-capitals",
        BASE + '[runtimes.codex.accounts.Work]\nauth = { env = "K" }\n',
        "runtimes.codex.accounts.Work",
    ),
    (
        "label-too-long",
        BASE + f'[runtimes.codex.accounts.{"a" * 33}]\nauth = {{ env = "K" }}\n',
        f"runtimes.codex.accounts.{'a' * 33}",
    ),
    (
        "default-account-not-an-account",
        BASE.replace('engine = "codex"', 'engine = "codex"\ndefault_account = "x"')
        + '[runtimes.codex.accounts.work]\nauth = { env = "K" }\n',
        "runtimes.codex.default_account",
    ),
    (
        "unknown-key-in-account",
        BASE + '[runtimes.codex.accounts.work]\nauth = { env = "K" }\nkey = "sk-1"\n',
        "runtimes.codex.accounts.work.key",
    ),
    (
        "account-without-auth",
        BASE + "[runtimes.codex.accounts.work]\n",
        "runtimes.codex.accounts.work.auth",
    ),
    (
        "account-auth-two-sources",
        BASE + '[runtimes.codex.accounts.work]\nauth = { env = "K", file = "/k" }\n',
        "runtimes.codex.accounts.work.auth",
    ),
    (
        "native-account-on-an-engine-without-sign-in",
        TEST_CONFIG + '[runtimes.demo.accounts.work]\nauth = { login = "native" }\n',
        "runtimes.demo.accounts.work.auth.login",
    ),
]


@pytest.mark.parametrize("case_id,text,field", INVALID, ids=[c[0] for c in INVALID])
def test_account_config_faults_are_refused_naming_the_dotted_path(case_id, text, field):
    with pytest.raises(ConfigInvalid) as caught:
        parse_config(text)
    assert caught.value.field == field, caught.value.message


def test_a_daemon_with_a_bad_account_config_refuses_to_start_and_writes_nothing():
    home = make_home(INVALID[2][1])
    try:
        result = cli(home, "api", "serve", timeout=30)
        assert result.returncode != 0 and "runtimes.codex.default_account" in result.stderr
        assert not home.db_path.exists() and not (home.root / "accounts").exists()
    finally:
        remove_home(home)


@pytest.fixture
def keyed(workdir):
    home = make_home(TEST_CONFIG + ACCOUNTS)
    env = {
        "ART_WORK_KEY": WORK_KEY,
        "ART_PERSONAL_KEY": PERSONAL_KEY,
        "ART_OWN_KEY": "own-key-1234567",
    }
    daemon = DaemonProcess(home, env=env).start()
    try:
        yield home, daemon
    finally:
        daemon.stop()
        remove_home(home)


def run(daemon, workdir: Path, task: str, **params) -> dict:
    agent = daemon.call(
        "start", {"task": task, "workdir": str(workdir), "runtime": "keyed", **params}
    )
    view = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
    assert view["state"] == "succeeded", view
    return view


def test_each_run_gets_its_accounts_own_key_and_the_account_is_on_every_view(keyed, workdir):
    home, daemon = keyed
    task = "echo_env: ART_WORK_KEY\necho_env: ART_PERSONAL_KEY\necho_env: ART_OWN_KEY"
    work = run(daemon, workdir, task)  # no --account: the default account
    personal = run(daemon, workdir, task, account="personal")
    assert (work["account"], work["execution"]["account"]) == ("work", "work")
    assert personal["account"] == "personal"
    # The engine saw only its account's variable (a value is redacted; an unset one is empty).
    assert daemon.call("answer", {"agent_id": work["id"]})["text"].splitlines()[-3:] == [
        "ART_WORK_KEY=[REDACTED]",
        "ART_PERSONAL_KEY=",
        "ART_OWN_KEY=",
    ]
    assert daemon.call("answer", {"agent_id": personal["id"]})["text"].splitlines()[-3:] == [
        "ART_WORK_KEY=",
        "ART_PERSONAL_KEY=[REDACTED]",
        "ART_OWN_KEY=",
    ]
    listed = {a["id"]: a["account"] for a in daemon.call("list_agents", {})["items"]}
    assert listed == {work["id"]: "work", personal["id"]: "personal"}
    rows = db_rows(home, "SELECT agent_id, account FROM executions")
    assert {r["agent_id"]: r["account"] for r in rows} == listed
    text = cli(home, "--format", "text", "agent", personal["id"]).stdout
    assert "account personal" in text


def test_resume_keeps_the_account_of_the_run_it_continues(keyed, workdir):
    _home, daemon = keyed
    first = run(daemon, workdir, "answer: one", account="personal")
    daemon.call(
        "resume", {"agent_id": first["id"], "prompt": "echo_env: ART_PERSONAL_KEY\nrecall: yes"}
    )
    view = daemon.call("wait", {"agent_id": first["id"], "timeout_seconds": 60})["agent"]
    assert view["state"] == "succeeded" and view["execution"]["number"] == 2
    assert view["account"] == view["execution"]["account"] == "personal"
    assert "ART_PERSONAL_KEY=[REDACTED]" in daemon.call("answer", {"agent_id": first["id"]})["text"]


def test_an_unknown_account_is_refused_naming_the_field_and_the_accounts(keyed, workdir):
    _home, daemon = keyed
    with pytest.raises(InvalidRequest) as caught:
        with daemon.client() as client:
            client.call(
                "start",
                {"task": "x", "workdir": str(workdir), "runtime": "keyed", "account": "nope"},
            )
    assert caught.value.field == "account"
    assert "personal, spare, work" in caught.value.message
    with pytest.raises(InvalidRequest) as caught:  # a runtime with no accounts at all
        with daemon.client() as client:
            client.call(
                "start",
                {"task": "x", "workdir": str(workdir), "runtime": "demo", "account": "work"},
            )
    assert caught.value.field == "account" and "none is configured" in caught.value.message
    assert daemon.call("list_agents", {})["total"] == 0


def test_batch_start_passes_its_account_to_every_run_and_refuses_an_unknown_one(keyed):
    _home, daemon = keyed
    repo = make_repo()
    with pytest.raises(InvalidRequest) as caught:
        with daemon.client() as client:
            client.call(
                "batch_start",
                {
                    "workflow": "repeated",
                    "project": str(repo),
                    "prompt": "answer: hi",
                    "runs": 1,
                    "runtime": "keyed",
                    "account": "nope",
                },
            )
    assert caught.value.field == "account" and daemon.call("list_batches", {})["total"] == 0
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(repo),
            "prompt": "answer: hi",
            "runs": 2,
            "runtime": "keyed",
            "account": "personal",
        },
    )
    batch = wait_batch(daemon, batch["id"])
    assert batch["state"] == "completed" and batch["config"]["account"] == "personal"
    assert [r["account"] for r in batch["runs"]] == ["personal", "personal"]  # on the batch view
    agents = [daemon.call("agent", {"agent_id": r["agent_id"]}) for r in batch["runs"]]
    assert [a["account"] for a in agents] == ["personal", "personal"]


def _jwt(claims: dict) -> str:
    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part(claims)}.c2ln"


def test_accounts_lists_signed_in_or_not_with_the_email_and_never_a_token(workdir):
    config = (
        TEST_CONFIG
        + '[runtimes.cx]\nengine = "codex"\nmodels = ["gpt-5.5"]\ndefault_account = "work"\n'
        '[runtimes.cx.accounts.work]\nauth = { login = "native" }\n'
        '[runtimes.cx.accounts.home]\nauth = { login = "native" }\n'
        '[runtimes.cx.accounts.ci]\nauth = { env = "ART_CI_KEY" }\n'
    )
    home = make_home(config)
    folder = home.root / "accounts" / "cx" / "work"
    folder.mkdir(parents=True, mode=0o700)
    id_token = _jwt({"email": "dev@example.com", "exp": 4102444800})
    secrets = [id_token, "access-tok-5d6e7f8a9b", "refresh-tok-1a2b3c4d5e"]
    (folder / "auth.json").write_text(
        json.dumps(
            {
                "auth_mode": "chatgpt",
                "tokens": {
                    "id_token": secrets[0],
                    "access_token": secrets[1],
                    "refresh_token": secrets[2],
                },
            }
        )
    )
    daemon = DaemonProcess(home).start()
    try:
        found = daemon.call("accounts", {"runtime": "cx"})["accounts"]
        by_label = {a["account"]: a for a in found}
        assert set(by_label) == {"ci", "home", "work"}
        assert by_label["work"] | {"detail": ""} == {
            "runtime": "cx",
            "account": "work",
            "is_default": True,
            "auth": "login",
            "signed_in": True,
            "email": "dev@example.com",
            "detail": "",
        }
        assert not by_label["home"]["signed_in"]
        assert "agent-run login cx --account home" in by_label["home"]["detail"]
        assert str(home.root / "accounts" / "cx" / "home") in by_label["home"]["detail"]
        assert (by_label["ci"]["auth"], by_label["ci"]["signed_in"]) == ("env", False)
        text = cli(home, "--format", "text", "accounts").stdout
        assert "dev@example.com" in text and "NOT signed in" in text
        for secret in secrets:
            assert secret not in json.dumps(found) and secret not in text
        with pytest.raises(Exception) as caught:
            daemon.call("accounts", {"runtime": "nope"})
        assert "nope" in str(caught.value)
    finally:
        daemon.stop()
        remove_home(home)


def test_models_lists_each_enabled_runtime_and_start_refuses_a_model_not_listed(keyed, workdir):
    _home, daemon = keyed
    result = daemon.call("models", {})
    assert result["default_runtime"] == "demo"
    by_name = {r["runtime"]: r for r in result["runtimes"]}
    assert by_name["keyed"] == {
        "runtime": "keyed",
        "engine": "demo",
        "models": ["demo-1", "demo-2"],
        "default_model": "demo-1",
        "accounts": ["personal", "spare", "work"],
        "default_account": "work",
        "roster": None,  # the demo engine lists no models of its own
        "roster_observed_at": None,
        "available": ["demo-1", "demo-2"],
    }
    assert daemon.call("models", {"runtime": "demo"})["runtimes"][0]["models"] == ["demo-1"]
    with pytest.raises(InvalidRequest) as caught:
        with daemon.client() as client:
            client.call(
                "start",
                {"task": "x", "workdir": str(workdir), "runtime": "keyed", "model": "demo-9"},
            )
    assert caught.value.field == "model" and "demo-1, demo-2" in caught.value.message


def test_usage_groups_reported_tokens_and_never_invents_a_cost(keyed, workdir):
    home, daemon = keyed
    run(daemon, workdir, "tokens: 100\ncost: 0.25", account="work")
    run(daemon, workdir, "tokens: 50\ncost: 0.5", account="work", model="demo-2")
    run(daemon, workdir, "tokens: 7\ncost: none", account="personal")
    result = daemon.call("usage", {"by": ["account"]})
    rows = {r["key"]["account"]: r for r in result["rows"]}
    assert (rows["work"]["input_tokens"], rows["work"]["output_tokens"]) == (150, 150)
    assert rows["work"]["cost_usd"] == 0.75 and rows["work"]["cost_reported_by"] == 2
    assert rows["personal"]["total_tokens"] == 14
    assert rows["personal"]["cost_usd"] is None, "no engine reported a cost: null, not 0"
    assert result["total"]["executions"] == 3 and result["total"]["cost_usd"] == 0.75
    by_model = daemon.call("usage", {"by": ["runtime", "model", "day"]})["rows"]
    assert {(r["key"]["runtime"], r["key"]["model"], r["executions"]) for r in by_model} == {
        ("keyed", "demo-1", 2),
        ("keyed", "demo-2", 1),
    }
    none = db_rows(home, "SELECT cost_usd FROM executions WHERE account = 'personal'")
    assert none[0]["cost_usd"] is None
    text = cli(home, "--format", "text", "usage", "--by", "account").stdout
    assert "account=personal" in text and "cost not reported" in text


def test_usage_per_batch_totals_its_runs(keyed):
    _home, daemon = keyed
    repo = make_repo()
    batch = daemon.call(
        "batch_start",
        {
            "workflow": "repeated",
            "project": str(repo),
            "prompt": "tokens: 10\ncost: 0.125",
            "runs": 2,
            "runtime": "keyed",
        },
    )
    wait_batch(daemon, batch["id"])
    result = daemon.call("usage", {"by": ["batch"], "batch_id": batch["id"]})
    assert [r["key"] for r in result["rows"]] == [{"batch": batch["id"]}]
    assert (
        result["total"]["executions"],
        result["total"]["total_tokens"],
        result["total"]["cost_usd"],
    ) == (2, 40, 0.25)
    assert os.environ.get("ART_WORK_KEY") is None  # the keys lived in the daemon only


def test_the_web_ui_shows_each_runs_account(keyed, workdir):
    from tests.web_harness import WebProcess

    home, daemon = keyed
    view = run(daemon, workdir, "answer: hi", account="personal")
    web = WebProcess(home).start()
    try:
        client = web.client()
        assert "account personal" in client.get(f"/agents/{view['id']}").text
        assert "demo-1 · personal" in client.get("/").text
    finally:
        web.stop()
