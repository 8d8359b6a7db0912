"""Native sign-in without the engine CLIs: config, credential files, the link keeper, a missing
sign-in ending `auth_failed` before any model request, and doctor's report (never a token)."""

import base64
import json
import os
import time
from pathlib import Path

import pytest

from agent_run.config.model import parse_config
from agent_run.domain.errors import ConfigInvalid
from agent_run.engines.registry import sign_in_for
from agent_run.engines.signin import SignInMissing, read_credential, share_credential
from agent_run.supervisor.redact import Redactor
from agent_run.supervisor.signin_keeper import SignInKeeper
from tests.harness import TEST_CONFIG, DaemonProcess, cli, db_rows, make_home, remove_home
from tests.support.mock_provider import MockProvider

BASE = 'schema_version = 1\n[runtimes.demo]\nengine = "demo"\n[runtimes.r]\nengine = "{engine}"\nauth = {auth}\n'


def config_for(engine: str, auth: str):
    return parse_config(BASE.format(engine=engine, auth=auth))


def jwt(exp: float) -> str:
    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part({'exp': exp, 'sub': 'user'})}.sig"


def write_json(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    return path


def claude_credentials(access: str, refresh: str | None, expires_at: float) -> dict:
    oauth = {
        "accessToken": access,
        "expiresAt": int(expires_at * 1000),
        "scopes": ["user:inference"],
    }
    if refresh:
        oauth["refreshToken"] = refresh
    return {"claudeAiOauth": oauth}


def test_config_takes_a_native_login_for_codex_and_claude_only():
    assert config_for("codex", '{ login = "native" }').runtimes["r"].auth.login == "native"
    assert (
        config_for("claude", '{ login = "native", dir = "~/other" }').runtimes["r"].auth.dir
        == "~/other"
    )
    refusals = {
        ("qwen", '{ login = "native" }'): ("runtimes.r.auth.login", "discontinued"),
        ("glm", '{ login = "native" }'): ("runtimes.r.auth.login", "no native sign-in"),
        ("codex", '{ login = "native", env = "K" }'): ("runtimes.r.auth", "exactly one"),
        ("codex", '{ env = "K", dir = "/d" }'): ("runtimes.r.auth.dir", "login"),
        ("codex", '{ login = "browser" }'): ("runtimes.r.auth.login", "native"),
    }
    for (engine, auth), (field, words) in refusals.items():
        with pytest.raises(ConfigInvalid) as caught:
            config_for(engine, auth)
        assert caught.value.field == field and words in caught.value.message, (
            engine,
            auth,
            caught.value,
        )


def test_credential_files_are_read_for_presence_expiry_and_token_values(tmp_path):
    codex, claude = sign_in_for("codex"), sign_in_for("claude")
    auth = {"login": "native", "dir": str(tmp_path)}
    write_json(tmp_path / "auth.json", {"auth_mode": "apikey", "OPENAI_API_KEY": "key-value-1"})
    cred = read_credential(codex, auth, "cx")
    assert (cred.mode, cred.usable, cred.secrets, cred.expires_at) == (
        "apikey",
        True,
        ["key-value-1"],
        None,
    )
    access = jwt(time.time() - 60)  # aged out: the engine refreshes it; the refresh token counts
    write_json(
        tmp_path / "auth.json",
        {
            "auth_mode": "chatgpt",
            "tokens": {
                "id_token": "id-tok",
                "access_token": access,
                "refresh_token": "refresh-tok",
                "account_id": "acct",
            },
        },
    )
    cred = read_credential(codex, auth, "cx")
    assert (
        cred.mode == "chatgpt"
        and cred.usable
        and set(cred.secrets) == {"id-tok", access, "refresh-tok"}
    )
    assert cred.expires_at == pytest.approx(time.time() - 60, abs=5)
    write_json(tmp_path / "auth.json", {"auth_mode": "chatgpt", "tokens": {"access_token": access}})
    with pytest.raises(SignInMissing, match="agent-run login cx"):
        read_credential(codex, auth, "cx")

    soon = time.time() + 3600
    write_json(tmp_path / ".credentials.json", claude_credentials("acc-1", "ref-1", soon))
    cred = read_credential(claude, auth, "cl")
    assert (
        cred.usable
        and set(cred.secrets) == {"acc-1", "ref-1"}
        and cred.expires_at == pytest.approx(soon, abs=1)
    )
    write_json(tmp_path / ".credentials.json", claude_credentials("acc-1", None, time.time() - 1))
    with pytest.raises(SignInMissing, match="signed out or expired.*agent-run login cl"):
        read_credential(claude, auth, "cl")
    with pytest.raises(SignInMissing, match="macOS .* login keychain"):
        read_credential(claude, auth, "cl", platform="darwin")
    (tmp_path / ".credentials.json").unlink()
    with pytest.raises(
        SignInMissing, match=r"no Claude Code sign-in at .*\.credentials\.json.*agent-run login cl"
    ):
        read_credential(claude, auth, "cl")


def test_keeper_publishes_an_engine_write_that_replaced_the_link_and_redacts_its_tokens(tmp_path):
    """A guard: Codex 0.171.0 writes through its link, but an atomic write that did not follow
    it (temp file + rename onto the link's name) would fork the credential; the keeper puts
    such a file into the real one and restores the link."""
    real = write_json(
        tmp_path / "user" / "auth.json", {"auth_mode": "apikey", "OPENAI_API_KEY": "old-key"}
    )
    redact = Redactor(["old-key"])
    keeper = SignInKeeper.start(
        "codex", {"login": "native", "dir": str(real.parent)}, str(tmp_path / "gen"), redact
    )
    link = tmp_path / "gen" / ".codex" / "auth.json"
    assert link.is_symlink() and link.resolve() == real.resolve()
    keeper.check()
    assert link.is_symlink(), "nothing to publish"

    refreshed = {
        "auth_mode": "chatgpt",
        "tokens": {"access_token": "new-access-token", "refresh_token": "new-refresh-token"},
    }
    temp = link.with_name(".auth-1234")
    temp.write_text(json.dumps(refreshed))
    os.replace(temp, link)
    assert not link.is_symlink()
    keeper.check()
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert json.loads(real.read_text()) == refreshed and real.stat().st_mode & 0o777 == 0o600
    assert redact("x new-access-token y new-refresh-token") == "x [REDACTED] y [REDACTED]"


def test_codex_gets_a_link_and_claude_code_its_store_variable(tmp_path):
    real = write_json(tmp_path / "u" / "auth.json", {"OPENAI_API_KEY": "k-123"})
    stale = write_json(tmp_path / "g" / ".codex" / "auth.json", {"OPENAI_API_KEY": "stale"})
    shared = share_credential(
        sign_in_for("codex"), {"login": "native", "dir": str(real.parent)}, tmp_path / "g"
    )
    assert (
        shared is not None
        and stale.is_symlink()
        and json.loads(stale.read_text())["OPENAI_API_KEY"] == "k-123"
    )
    assert share_credential(sign_in_for("codex"), {"env": "K"}, tmp_path / "g") is None
    auth = {"login": "native", "dir": str(tmp_path / "c")}
    shared = share_credential(sign_in_for("claude"), auth, tmp_path / "g")
    assert shared is not None and shared.link is None and not (tmp_path / "g" / ".claude").exists()
    assert sign_in_for("claude").engine_env(auth) == {
        "CLAUDE_SECURESTORAGE_CONFIG_DIR": str(tmp_path / "c")
    }
    assert sign_in_for("codex").engine_env(auth) == {}


def native_runtime(name: str, engine: str, base_url: str, folder: Path) -> str:
    return (
        f'[runtimes.{name}]\nengine = "{engine}"\nmodels = ["m-1"]\ndefault_model = "m-1"\n'
        f'allow_plain_http_loopback = true\nbase_url = "{base_url}"\n'
        f'auth = {{ login = "native", dir = "{folder}" }}\n'
    )


@pytest.mark.parametrize("engine", ["codex", "claude"])
def test_missing_sign_in_ends_auth_failed_naming_login_with_no_model_request(
    engine, workdir, tmp_path
):
    with MockProvider() as provider:
        home = make_home(
            TEST_CONFIG + native_runtime("mine", engine, provider.url, tmp_path / "nobody")
        )
        daemon = DaemonProcess(home).start()
        try:
            agent = daemon.call("start", {"task": "hi", "workdir": str(workdir), "runtime": "mine"})
            view = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
            assert view["state"] == "failed", view
            assert view["execution"]["failure_kind"] == "auth_failed"
            assert "agent-run login mine" in view["execution"]["failure_message"]
            assert provider.requests == [], "no model request without a sign-in"
            rows = db_rows(
                home, "SELECT engine_pid FROM executions WHERE agent_id = ?", (agent["id"],)
            )
            assert rows[0]["engine_pid"] is None, "the engine was never started"
        finally:
            daemon.stop()
            remove_home(home)


def test_doctor_reports_each_sign_in_and_its_expiry_never_a_token(tmp_path):
    present, absent = tmp_path / "present", tmp_path / "absent"
    expires = time.time() + 7200
    write_json(
        present / ".credentials.json",
        claude_credentials("doctor-access-tok", "doctor-refresh-tok", expires),
    )
    home = make_home(
        TEST_CONFIG
        + native_runtime("cl", "claude", "http://127.0.0.1:9", present)
        + native_runtime("cx", "codex", "http://127.0.0.1:9", absent)
    )
    try:
        result = cli(home, "doctor", "--format", "json")
        checks = {c["check"]: c for c in json.loads(result.stdout)["checks"]}
        assert checks["sign-in cl"]["ok"], checks
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires))
        assert str(present / ".credentials.json") in checks["sign-in cl"]["detail"]
        assert f"expires {stamp}" in checks["sign-in cl"]["detail"]
        assert (
            not checks["sign-in cx"]["ok"]
            and "agent-run login cx" in checks["sign-in cx"]["detail"]
        )
        assert result.returncode == 1
        assert "doctor-access-tok" not in result.stdout + result.stderr
        assert "doctor-refresh-tok" not in result.stdout + result.stderr
    finally:
        remove_home(home)


ACCOUNT_ONE = '[runtimes.cx.accounts.one]\nauth = { login = "native" }\n'


@pytest.mark.parametrize("daemon_answers", [True, False])
def test_doctor_names_the_login_command_of_each_missing_sign_in(tmp_path, daemon_answers):
    """An account's advice is a command that works (`login RUNTIME --account LABEL`, never
    `login RUNTIME/LABEL`); with no daemon to ask, the sign-in checks are run by the CLI rather
    than dropped."""
    home = make_home(
        TEST_CONFIG + native_runtime("cx", "codex", "http://127.0.0.1:9", tmp_path) + ACCOUNT_ONE
    )
    env = None if daemon_answers else {"AGENT_RUN_NO_AUTOSTART": "1"}
    try:
        result = cli(home, "doctor", "--format", "json", env=env, timeout=120)
        checks = {c["check"]: c for c in json.loads(result.stdout)["checks"]}
        assert ("pid" in checks["daemon"]["detail"]) is daemon_answers, checks["daemon"]
        assert checks["sign-in cx"]["fix"] == "agent-run login cx"
        account = checks["sign-in cx/one"]
        assert account["fix"] == "agent-run login cx --account one", account
        assert "`agent-run login cx --account one`" in account["detail"], account
        assert "cx/one`" not in account["detail"]
        if not daemon_answers:
            assert "checked by this CLI" in account["detail"]
    finally:
        if daemon_answers:
            cli(home, "api", "stop")
        remove_home(home)


def test_login_refuses_a_runtime_without_native_login_and_a_browser_flow_without_a_terminal(
    tmp_path,
):
    home = make_home(TEST_CONFIG + native_runtime("cl", "claude", "http://127.0.0.1:9", tmp_path))
    try:
        refused = cli(home, "login", "demo")
        assert (
            refused.returncode != 0
            and "native" in refused.stdout
            and '"field": "runtime"' in refused.stdout
        )
        no_tty = cli(home, "login", "cl", input="")
        # a usage error (exit 64), as JSON on stdout like every usage error of the default format
        assert no_tty.returncode == 64 and "agent-run login cl` in a terminal" in no_tty.stdout
        key_flag = cli(home, "login", "cl", "--with-api-key", input="k\n")
        assert key_flag.returncode != 0 and "with_api_key" in key_flag.stdout
    finally:
        remove_home(home)


@pytest.mark.parametrize("base_url", [None, "http://127.0.0.1:9/v1"])
def test_codex_native_login_has_no_key_variable_and_codex_reads_its_auth_json(base_url, tmp_path):
    import json
    import tomllib

    from agent_run.engines.base import WorkerMcp
    from agent_run.engines.codex import KEY_VARIABLE, CodexEngine
    from agent_run.engines.plan import load_plan

    runtime_config = {
        "engine": "codex",
        "auth": {"login": "native", "dir": str(tmp_path)},
        "base_url": base_url,
        "allow_plain_http_loopback": base_url is not None,
    }
    plan = load_plan(
        json.dumps(
            {
                "plan_version": 2,
                "agent_id": "ag",
                "execution_id": "ex",
                "runtime": "r",
                "engine": "codex",
                "model": "m",
                "workdir": str(tmp_path),
                "profile": "write",
                "runtime_config": runtime_config,
                "stall_seconds": 1.0,
                "wall_seconds": None,
                "cancel_grace_seconds": 1.0,
                "engine_home": str(tmp_path / "home"),
            }
        )
    )
    worker = WorkerMcp(name="w", command="true", args=[], env={}, tools=["finish"])
    spec = CodexEngine().launch(plan, {}, worker, tmp_path)
    config = tomllib.loads((tmp_path / "home" / ".codex" / "config.toml").read_text())
    assert KEY_VARIABLE not in spec.env
    if base_url is None:  # Codex's own provider: the endpoint follows the sign-in's mode
        assert config["model_provider"] == "openai" and "model_providers" not in config
    else:
        provider = config["model_providers"][config["model_provider"]]
        assert provider["requires_openai_auth"] is True and "env_key" not in provider
        assert provider["base_url"] == base_url
