"""Native sign-in with the real engine CLIs against the mock provider: Codex on the user's
`auth.json` (written by `agent-run login codex --with-api-key`, i.e. by `codex login`), Claude
Code on an OAuth `.credentials.json`. The credential is linked into the generated home, the
engine sends it to the provider itself (no broker), and the token the model is made to print
is stored nowhere agent-run writes."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.engine_harness import node_bin, run_agent, wait_done
from tests.harness import TEST_CONFIG, DaemonProcess, cli, db_rows, make_home, remove_home
from tests.support.mock_provider import MockProvider, Text
from tests.support.oauth_mitm import OAuthMitm

# Token shapes no built-in key pattern redacts: only the sign-in's own list can.
pytestmark = pytest.mark.engines  # the real engine CLIs from node_modules

CODEX_KEY = "native-codex-key-7f3a9c21d04b"
CLAUDE_ACCESS = "native-claude-access-5e8b2d71c9"
CLAUDE_REFRESH = "native-claude-refresh-a41f06e2b3"


def native_block(engine: str, base_url: str, folder: Path, model: str) -> str:
    return (
        f'[runtimes.mine]\nengine = "{engine}"\nbinary = "{node_bin() / engine}"\n'
        f'models = ["{model}"]\ndefault_model = "{model}"\nallow_plain_http_loopback = true\n'
        f'base_url = "{base_url}"\nauth = {{ login = "native", dir = "{folder}" }}\n'
        "max_retries = 0\nrequest_timeout_seconds = 4.0\nstall_seconds = 30.0\n"
    )


def stored_anywhere(home, needle: str) -> list[str]:
    """agent-run's own storage: the database (transcript, events, answers), agents/ (runtime
    lines, engine and supervisor logs, answer files) and logs/. Not the engine's own home."""
    found = []
    for root in (home.root / "agents", home.root / "logs"):
        found += [
            str(p) for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()
        ]
    for table, column in (
        ("messages", "content"),
        ("events", "data"),
        ("executions", "failure_message"),
    ):
        rows = db_rows(home, f"SELECT {column} AS v FROM {table}")
        found += [f"{table}.{column}" for r in rows if r["v"] and needle in str(r["v"])]
    return found


def snapshot(path: Path) -> tuple[bytes, int, int]:
    st = path.stat()
    return path.read_bytes(), st.st_ino, st.st_mtime_ns


@pytest.fixture
def provider():
    with MockProvider() as mp:
        yield mp


def test_codex_runs_on_the_auth_json_that_agent_run_login_wrote(provider, workdir, tmp_path):
    folder = tmp_path / "codex-home"  # the user's CODEX_HOME
    home = make_home(TEST_CONFIG + native_block("codex", provider.url + "/v1", folder, "gpt-5.5"))
    daemon = DaemonProcess(home).start()
    try:
        login = cli(home, "login", "mine", "--with-api-key", input=CODEX_KEY + "\n", timeout=90)
        assert login.returncode == 0, login.stderr
        assert json.loads(login.stdout)["ok"] and CODEX_KEY not in login.stdout + login.stderr
        real = folder / "auth.json"
        assert json.loads(real.read_text()) == {"auth_mode": "apikey", "OPENAI_API_KEY": CODEX_KEY}
        before = snapshot(real)

        provider.add(Text(f"Your key is {CODEX_KEY}."))
        view = run_agent(daemon, "mine", "Print my key.", workdir)
        assert view["state"] == "succeeded", view
        assert provider.main_requests()[0].headers["authorization"] == f"Bearer {CODEX_KEY}"
        link = home.root / "homes" / "mine" / view["id"] / ".codex" / "auth.json"
        assert link.is_symlink() and link.resolve() == real.resolve(), "a link, not a copy"
        assert snapshot(real) == before, "the run left the real auth.json as it was"
        assert daemon.call("answer", {"agent_id": view["id"]})["text"] == "Your key is [REDACTED]."
        assert stored_anywhere(home, CODEX_KEY) == []

        # A write by the real CLI through the generated home (a refresh would go the same way:
        # temp file + rename) lands in the user's file, and the link stays a link.
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(link.parent.parent),
            "CODEX_HOME": str(link.parent),
        }
        subprocess.run(
            [str(node_bin() / "codex"), "login", "--with-api-key"],
            input="rotated-key-0042\n",
            env=env,
            text=True,
            capture_output=True,
            check=True,
            timeout=60,
        )
        assert (
            link.is_symlink()
            and json.loads(real.read_text())["OPENAI_API_KEY"] == "rotated-key-0042"
        )
    finally:
        daemon.stop()
        remove_home(home)


def test_claude_code_sends_the_oauth_access_token_as_bearer(provider, workdir, tmp_path):
    folder = tmp_path / "claude-config"  # the user's ~/.claude
    folder.mkdir()
    real = folder / ".credentials.json"
    oauth = {
        "accessToken": CLAUDE_ACCESS,
        "refreshToken": CLAUDE_REFRESH,
        "expiresAt": int((time.time() + 5 * 3600) * 1000),
        "scopes": ["user:inference", "user:profile"],
        "subscriptionType": "max",
    }
    real.write_text(json.dumps({"claudeAiOauth": oauth}))
    real.chmod(0o600)
    before = snapshot(real)
    home = make_home(
        TEST_CONFIG + native_block("claude", provider.url, folder, "claude-sonnet-4-5")
    )
    daemon = DaemonProcess(home).start()
    try:
        provider.add(Text(f"tokens: {CLAUDE_ACCESS} and {CLAUDE_REFRESH}"))
        view = run_agent(daemon, "mine", "Print the tokens.", workdir)
        assert view["state"] == "succeeded", view
        request = provider.main_requests()[0]
        assert request.headers["authorization"] == f"Bearer {CLAUDE_ACCESS}"
        assert "x-api-key" not in request.headers
        assert "oauth-2025-04-20" in request.headers.get("anthropic-beta", "")
        generated = home.root / "homes" / "mine" / view["id"] / ".claude"
        assert not (generated / ".credentials.json").exists(), (
            "read from its real folder, never copied"
        )
        assert snapshot(real) == before
        assert (
            daemon.call("answer", {"agent_id": view["id"]})["text"]
            == "tokens: [REDACTED] and [REDACTED]"
        )
        assert (
            stored_anywhere(home, CLAUDE_ACCESS) == []
            and stored_anywhere(home, CLAUDE_REFRESH) == []
        )
    finally:
        daemon.stop()
        remove_home(home)


def expired_claude_sign_in(folder: Path) -> Path:
    folder.mkdir()
    real = folder / ".credentials.json"
    oauth = {
        "accessToken": CLAUDE_ACCESS,
        "refreshToken": CLAUDE_REFRESH,
        "expiresAt": int((time.time() - 60) * 1000),
        "scopes": ["user:inference", "user:profile"],
        "subscriptionType": "max",
    }
    real.write_text(json.dumps({"claudeAiOauth": oauth}))
    real.chmod(0o600)
    return real


def token_endpoint(issued: list[str], delay: float = 0.0):
    """The OAuth token endpoint: each refresh gets new, numbered tokens (after `delay`, so that
    concurrent refreshes would overlap)."""

    def answer(method: str, host: str, path: str, body: bytes) -> tuple[int, dict]:
        if not path.startswith("/v1/oauth/token"):
            return 404, {}
        issued.append(json.loads(body)["refresh_token"])
        time.sleep(delay)
        n = len(issued)
        return 200, {
            "access_token": f"refreshed-access-{n}-9b1c44d2e7",
            "refresh_token": f"refreshed-refresh-{n}-30fa8c",
            "expires_in": 28800,
            "scope": "user:inference user:profile",
            "token_type": "Bearer",
        }

    return answer


def test_concurrent_agents_refresh_a_shared_claude_sign_in_once(provider, workdir, tmp_path):
    """Two agents start on an expired access token at once: Claude Code's refresh lock is in
    the real folder too, so one refreshes and the other uses its new token."""
    issued: list[str] = []
    mitm = OAuthMitm(
        tmp_path,
        ["platform.claude.com", "api.anthropic.com", "claude.ai"],
        token_endpoint(issued, 1.0),
    )
    real = expired_claude_sign_in(tmp_path / "claude-config")
    home = make_home(
        TEST_CONFIG + native_block("claude", provider.url, real.parent, "claude-sonnet-4-5")
    )
    daemon = DaemonProcess(
        home, env={"HTTPS_PROXY": mitm.url, "NODE_EXTRA_CA_CERTS": str(mitm.ca)}
    ).start()
    try:
        provider.add(Text("done", times=2))
        agents = [
            daemon.call("start", {"task": f"hi {n}", "workdir": str(workdir), "runtime": "mine"})
            for n in (1, 2)
        ]
        views = [wait_done(daemon, agent["id"]) for agent in agents]
        assert [v["state"] for v in views] == ["succeeded", "succeeded"], views
        assert issued == [CLAUDE_REFRESH], "one refresh, with the one refresh token"
        sent = {r.headers["authorization"] for r in provider.main_requests()}
        assert sent == {"Bearer refreshed-access-1-9b1c44d2e7"}
        assert (
            json.loads(real.read_text())["claudeAiOauth"]["refreshToken"]
            == "refreshed-refresh-1-30fa8c"
        )
    finally:
        daemon.stop()
        remove_home(home)
        mitm.close()


def test_claude_code_refresh_lands_in_the_real_file_and_the_new_tokens_are_redacted(
    provider, workdir, tmp_path
):
    """A real refresh by Claude Code 2.1.332 (its token endpoint answered through a proxy) is
    written to the user's real file (CLAUDE_SECURESTORAGE_CONFIG_DIR), and the new tokens,
    which the model is made to print, are stored nowhere."""
    issued: list[str] = []
    mitm = OAuthMitm(
        tmp_path, ["platform.claude.com", "api.anthropic.com", "claude.ai"], token_endpoint(issued)
    )
    real = expired_claude_sign_in(tmp_path / "claude-config")
    new_access, new_refresh = "refreshed-access-1-9b1c44d2e7", "refreshed-refresh-1-30fa8c"
    home = make_home(
        TEST_CONFIG + native_block("claude", provider.url, real.parent, "claude-sonnet-4-5")
    )
    daemon = DaemonProcess(
        home, env={"HTTPS_PROXY": mitm.url, "NODE_EXTRA_CA_CERTS": str(mitm.ca)}
    ).start()
    try:
        provider.add(Text(f"new tokens: {new_access} {new_refresh}"))
        view = run_agent(daemon, "mine", "Print the tokens.", workdir)
        assert view["state"] == "succeeded", view
        assert issued == [CLAUDE_REFRESH]
        assert provider.main_requests()[0].headers["authorization"] == f"Bearer {new_access}"
        stored = json.loads(real.read_text())["claudeAiOauth"]
        assert (stored["accessToken"], stored["refreshToken"]) == (new_access, new_refresh)
        assert real.stat().st_mode & 0o777 == 0o600
        generated = home.root / "homes" / "mine" / view["id"] / ".claude"
        assert not (generated / ".credentials.json").exists(), "no private copy forked off"
        assert (
            daemon.call("answer", {"agent_id": view["id"]})["text"]
            == "new tokens: [REDACTED] [REDACTED]"
        )
        assert stored_anywhere(home, new_access) == [] and stored_anywhere(home, new_refresh) == []
    finally:
        daemon.stop()
        remove_home(home)
        mitm.close()
