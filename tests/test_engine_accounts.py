"""Accounts with the real engine CLIs against the mock provider: two accounts of one runtime,
each with its own key, and the provider sees each run's own account's key (through the
credential broker); a Codex account signed in by `agent-run login RUNTIME --account LABEL`
into its own folder under the home, used by the runs that name it."""

import json
import stat

import pytest

from tests.engine_harness import node_bin, run_agent
from tests.harness import TEST_CONFIG, DaemonProcess, cli, make_home, remove_home
from tests.support.mock_provider import MockProvider, Text

pytestmark = pytest.mark.engines  # the real engine CLIs from node_modules

WORK_KEY, HOME_KEY = "sk-work-account-3c9d1e7f2a", "sk-home-account-8b4f6a0c5d"


@pytest.fixture
def provider():
    with MockProvider() as mp:
        yield mp


def claude_block(base_url: str) -> str:
    return (
        f'[runtimes.cc]\nengine = "claude"\nbinary = "{node_bin() / "claude"}"\n'
        'models = ["claude-sonnet-4-5"]\nallow_plain_http_loopback = true\n'
        f'base_url = "{base_url}"\nmax_retries = 0\nrequest_timeout_seconds = 4.0\nstall_seconds = 30.0\n'
        'default_account = "work"\n'
        '[runtimes.cc.accounts.work]\nauth = { env = "ART_WORK_KEY" }\n'
        '[runtimes.cc.accounts.home]\nauth = { env = "ART_HOME_KEY" }\n'
    )


def test_two_accounts_each_reach_the_provider_with_their_own_key(provider, workdir):
    home = make_home(TEST_CONFIG + claude_block(provider.url))
    daemon = DaemonProcess(home, env={"ART_WORK_KEY": WORK_KEY, "ART_HOME_KEY": HOME_KEY}).start()
    try:
        provider.add(Text("from work"))
        work = run_agent(daemon, "cc", "Say hi.", workdir)  # the default account
        assert work["state"] == "succeeded" and work["account"] == "work", work
        sent = [r.headers.get("x-api-key", "") for r in provider.main_requests()]
        assert sent and all(WORK_KEY == key for key in sent), "the work account's key"
        provider.add(Text("from home"))
        count = len(provider.main_requests())
        personal = run_agent(daemon, "cc", "Say hi.", workdir, account="home")
        assert personal["state"] == "succeeded" and personal["account"] == "home", personal
        sent = [r.headers.get("x-api-key", "") for r in provider.main_requests()[count:]]
        assert sent and all(HOME_KEY == key for key in sent), "the home account's key"
        accounts = daemon.call("accounts", {"runtime": "cc"})["accounts"]
        assert [(a["account"], a["signed_in"]) for a in accounts] == [
            ("home", True),
            ("work", True),
        ]
        assert WORK_KEY not in json.dumps(accounts) and HOME_KEY not in json.dumps(accounts)
    finally:
        daemon.stop()
        remove_home(home)


def test_codex_account_signed_in_by_login_account_runs_on_its_own_folder(provider, workdir):
    block = (
        f'[runtimes.cx]\nengine = "codex"\nbinary = "{node_bin() / "codex"}"\nmodels = ["gpt-5.5"]\n'
        f'allow_plain_http_loopback = true\nbase_url = "{provider.url}/v1"\nmax_retries = 0\n'
        "request_timeout_seconds = 4.0\nstall_seconds = 30.0\n"
        '[runtimes.cx.accounts.work]\nauth = { login = "native" }\n'
        '[runtimes.cx.accounts.spare]\nauth = { login = "native" }\n'
    )
    home = make_home(TEST_CONFIG + block)
    daemon = DaemonProcess(home).start()
    try:
        login = cli(
            home,
            "login",
            "cx",
            "--account",
            "work",
            "--with-api-key",
            input=WORK_KEY + "\n",
            timeout=90,
        )
        assert login.returncode == 0, login.stderr
        assert (
            json.loads(login.stdout)["account"] == "work"
            and WORK_KEY not in login.stdout + login.stderr
        )
        folder = home.root / "accounts" / "cx" / "work"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert json.loads((folder / "auth.json").read_text())["OPENAI_API_KEY"] == WORK_KEY
        signed = {
            a["account"]: a["signed_in"]
            for a in daemon.call("accounts", {"runtime": "cx"})["accounts"]
        }
        assert signed == {"spare": False, "work": True}

        provider.add(Text("on the work account"))
        view = run_agent(daemon, "cx", "Say hi.", workdir, account="work")
        assert view["state"] == "succeeded" and view["account"] == "work", view
        assert provider.main_requests()[0].headers["authorization"] == f"Bearer {WORK_KEY}"

        spare = run_agent(daemon, "cx", "Say hi.", workdir, account="spare")  # never signed in
        assert (spare["state"], spare["failure_kind"]) == ("failed", "auth_failed"), spare
        assert "agent-run login cx --account spare" in spare["execution"]["failure_message"]
    finally:
        daemon.stop()
        remove_home(home)


def test_a_runs_quota_samples_carry_its_account_and_rank_as_its_route(provider, workdir):
    """Real Codex on account `spare`: the x-codex-* headers become samples of (cx, spare), and
    capacity_order ranks that account's route with its account multiplier."""
    from tests.engine_harness import runtime_block

    block = runtime_block("cx", "codex", provider.url + "/v1", "gpt-5.5") + (
        "priority_account_multipliers = { spare = 2.0 }\n"
        '[runtimes.cx.accounts.spare]\nauth = { env = "ART_HOME_KEY" }\n'
    )
    home = make_home(TEST_CONFIG + block)
    daemon = DaemonProcess(home, env={"ART_HOME_KEY": HOME_KEY}).start()
    try:
        provider.response_headers = {
            "x-codex-primary-used-percent": "25",
            "x-codex-primary-window-minutes": "300",
            "x-codex-primary-reset-at": str(int(__import__("time").time()) + 3 * 3600),
        }
        provider.add(Text("done"))
        view = run_agent(daemon, "cx", "Say done.", workdir, account="spare")
        assert view["state"] == "succeeded" and view["account"] == "spare", view
        shown = daemon.call("limits", {"runtime": "cx"})["windows"]
        assert [(w["account"], w["window"], w["remaining_percent"]) for w in shown] == [
            ("spare", "5h", 75.0)
        ]
        order = daemon.call("capacity_order", {})
        assert [(r["runtime"], r["account"], r["weight"]) for r in order["routes"]] == [
            ("cx", "spare", 2.0)
        ]
        assert [(d["runtime"], d["account"]) for d in order["deferred"]] == [("cx", None)]
    finally:
        daemon.stop()
        remove_home(home)
