"""config.toml is fail-closed: a bad file stops the daemon and doctor, names the dotted path,
and writes nothing. `init` writes a private, commented, loadable config."""

import json
import os
import re
import shutil
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_run.config.model import SCHEMA_VERSION, Config, parse_config
from agent_run.domain.errors import ConfigInvalid
from agent_run.system.home import Home
from tests.harness import TEST_CONFIG, cli, make_home, remove_home, short_tmpdir

VALID = """schema_version = 1
default_runtime = "demo"
[runtimes.demo]
engine = "demo"
models = ["demo-1"]
default_model = "demo-1"
"""

# (id, config text, the dotted field ConfigInvalid must name)
INVALID: list[tuple[str, str, str | None]] = [
    # A top-level key must come before the first table header to be top level.
    ("unknown-top-level-key", 'colour = "red"\n' + VALID, "colour"),
    ("unknown-nested-key", VALID + 'modelz = ["demo-2"]\n', "runtimes.demo.modelz"),
    ("wrong-type", VALID.replace('models = ["demo-1"]', 'models = "x"'), "runtimes.demo.models"),
    ("missing-schema-version", VALID.replace("schema_version = 1\n", ""), "schema_version"),
    (
        "future-schema-version",
        VALID.replace("schema_version = 1", "schema_version = 2"),
        "schema_version",
    ),
    (
        "default-runtime-not-configured",
        VALID.replace('default_runtime = "demo"', 'default_runtime = "claude"'),
        "default_runtime",
    ),
    ("unknown-engine", VALID + '[runtimes.gpt]\nengine = "gpt"\n', "runtimes.gpt.engine"),
    (
        "unknown-key-in-section",
        VALID + "[daemon]\nreconcile_interval = 1\n",
        "daemon.reconcile_interval",
    ),
    ("out-of-range", VALID + "[supervisor]\nstall_seconds = -1\n", "supervisor.stall_seconds"),
    (
        "secret-value-as-auth-env",
        VALID + '[runtimes.demo.auth]\nenv = "sk-live-abc123"\n',
        "runtimes.demo.auth.env",
    ),
    (
        "auth-with-env-and-file",
        VALID + '[runtimes.demo.auth]\nenv = "KEY"\nfile = "/k"\n',
        "runtimes.demo.auth",
    ),
    ("invalid-toml", VALID + "[runtimes.demo\n", None),
    # capacity (docs/capacity.md)
    ("limits-source-unknown", VALID + 'limits_source = "psychic"\n', "runtimes.demo.limits_source"),
    (
        "limits-source-appserver-not-codex",
        VALID + 'limits_source = "codex_appserver"\n',
        "runtimes.demo.limits_source",
    ),
    (
        "limits-source-command-without-collector",
        VALID + 'limits_source = "command"\n',
        "runtimes.demo.limits_source",
    ),
    ("weight-bool", VALID + "priority_multiplier = true\n", "runtimes.demo.priority_multiplier"),
    ("weight-zero", VALID + "priority_multiplier = 0\n", "runtimes.demo.priority_multiplier"),
    ("weight-infinite", VALID + "priority_multiplier = inf\n", "runtimes.demo.priority_multiplier"),
    (
        "lane-weight-negative",
        VALID + "priority_lane_multipliers = { opus = -1.0 }\n",
        "runtimes.demo.priority_lane_multipliers.opus",
    ),
    ("capacity-unknown-key", VALID + "[capacity]\ninterval = 5\n", "capacity.interval"),
    (
        "capacity-deadline-too-long",
        VALID + '[capacity.command]\nargv = ["x"]\ndeadline_seconds = 301\n',
        "capacity.command.deadline_seconds",
    ),
    (
        "capacity-command-empty-argv",
        VALID + "[capacity.command]\nargv = []\n",
        "capacity.command.argv",
    ),
    (
        "account-weight-for-no-such-account",
        VALID + "priority_account_multipliers = { work = 2.0 }\n"
        '[runtimes.demo.accounts.home]\nauth = { env = "HOME_KEY" }\n',
        "runtimes.demo.priority_account_multipliers.work",
    ),
    (
        "model-lane-for-no-such-model",
        VALID + 'model_lanes = { "demo-9" = "fast" }\n',
        "runtimes.demo.model_lanes.demo-9",
    ),
    # [model_classes]: each pair a configured runtime and one of its models
    (
        "model-class-unknown-runtime",
        VALID + '[model_classes]\nfast = ["gpt:demo-1"]\n',
        "model_classes.fast.0",
    ),
    (
        "model-class-unknown-model",
        VALID + '[model_classes]\nfast = ["demo:demo-1", "demo:demo-9"]\n',
        "model_classes.fast.1",
    ),
    ("model-class-empty", VALID + "[model_classes]\nfast = []\n", "model_classes.fast"),
    (
        "model-class-not-a-pair",
        VALID + '[model_classes]\nfast = ["demo"]\n',
        "model_classes.fast.0",
    ),
    (
        "model-class-bad-name",
        VALID + '[model_classes]\nFast = ["demo:demo-1"]\n',
        "model_classes.Fast.[key]",
    ),
]


def _ids(cases: list[tuple[str, str, str | None]]) -> list[str]:
    return [c[0] for c in cases]


# -- parse_config, table-driven ---------------------------------------------------------------


@pytest.mark.parametrize("case_id,text,field", INVALID, ids=_ids(INVALID))
def test_parse_config_refuses_and_names_the_dotted_field(
    case_id: str, text: str, field: str | None
) -> None:
    with pytest.raises(ConfigInvalid) as caught:
        parse_config(text, source="/x/config.toml")
    err = caught.value
    assert err.code == "ConfigInvalid"
    assert err.field == field
    assert "/x/config.toml" in err.message
    if field is not None:
        assert f"`{field}`" in err.message
    else:
        assert re.search(r"line \d+", err.message), err.message


def test_parse_config_accepts_the_test_config_and_an_int_where_a_float_is_expected() -> None:
    config = parse_config(TEST_CONFIG)
    assert isinstance(config, Config)
    assert config.schema_version == SCHEMA_VERSION
    assert config.runtimes["demo"].engine == "demo"
    loose = parse_config(VALID + "[supervisor]\nstall_seconds = 600\n")
    assert loose.supervisor.stall_seconds == 600


def test_parse_config_minimal_file_gets_the_demo_runtime_by_default() -> None:
    config = parse_config("schema_version = 1\n")
    assert config.default_runtime == "demo"
    assert config.runtimes["demo"].default_model == "demo-1"


def test_parse_config_refuses_a_default_model_outside_the_runtimes_models() -> None:
    with pytest.raises(ConfigInvalid) as caught:
        parse_config(VALID.replace('default_model = "demo-1"', 'default_model = "demo-9"'))
    assert caught.value.field == "runtimes.demo.default_model"


def test_parse_config_refuses_a_default_runtime_that_is_disabled() -> None:
    with pytest.raises(ConfigInvalid) as caught:
        parse_config(VALID + "enabled = false\n")
    assert caught.value.field == "default_runtime"


# -- the daemon and doctor fail closed --------------------------------------------------------


@pytest.fixture
def bad_home(request: pytest.FixtureRequest) -> Iterator[tuple[Home, str | None, bytes]]:
    _case_id, text, field = request.param
    home = make_home(text)
    yield home, field, home.config_path.read_bytes()
    remove_home(home)


def _assert_nothing_written(home: Home, original: bytes) -> None:
    assert not home.db_path.exists(), "state.db must not be created under an invalid config"
    assert not home.socket_path.exists(), "api.sock must not be bound under an invalid config"
    assert not home.lock_path.exists(), "the daemon lock must not be taken under an invalid config"
    assert home.config_path.read_bytes() == original


@pytest.mark.parametrize("bad_home", INVALID, ids=_ids(INVALID), indirect=True)
def test_api_serve_refuses_an_invalid_config_naming_the_field_and_writes_nothing(
    bad_home: tuple[Home, str | None, bytes],
) -> None:
    home, field, original = bad_home
    result = cli(home, "api", "serve", timeout=30)
    assert result.returncode != 0
    assert "ConfigInvalid" in result.stderr
    assert str(home.config_path) in result.stderr
    if field is not None:
        assert f"`{field}`" in result.stderr, result.stderr
    else:
        assert "not valid TOML" in result.stderr
    _assert_nothing_written(home, original)


@pytest.mark.parametrize("bad_home", INVALID, ids=_ids(INVALID), indirect=True)
def test_doctor_reports_an_invalid_config_naming_the_field_and_writes_nothing(
    bad_home: tuple[Home, str | None, bytes],
) -> None:
    home, field, original = bad_home
    result = cli(home, "doctor", timeout=30)
    assert result.returncode != 0
    report = json.loads(result.stdout)
    assert report["ok"] is False
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["config"]["ok"] is False
    assert "ConfigInvalid" in checks["config"]["detail"]
    if field is not None:
        assert f"`{field}`" in checks["config"]["detail"]
    _assert_nothing_written(home, original)


def test_doctor_text_output_marks_the_config_bad() -> None:
    home = make_home('schema_version = 1\ncolour = "red"\n')
    try:
        result = cli(home, "doctor", "--format", "text", timeout=30)
        assert result.returncode == 1
        config_line = next(line for line in result.stdout.splitlines() if " config " in f" {line} ")
        assert config_line.startswith("BAD")
        assert "`colour`" in config_line
    finally:
        remove_home(home)


# -- init -------------------------------------------------------------------------------------


@pytest.fixture
def fresh_home() -> Iterator[Home]:
    """A home path that does not exist yet."""
    parent = short_tmpdir()
    home = Home(parent / "h")
    yield home
    remove_home(home)


def _path_without_engines() -> str:
    return os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])


def test_init_in_an_empty_home_writes_a_private_config_that_loads(fresh_home: Home) -> None:
    result = cli(fresh_home, "init", env={"PATH": _path_without_engines()})
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["config"] == str(fresh_home.config_path)
    assert stat.S_IMODE(fresh_home.root.stat().st_mode) == 0o700
    assert stat.S_IMODE(fresh_home.config_path.stat().st_mode) == 0o600
    text = fresh_home.config_path.read_text()
    assert re.search(r"^schema_version = 1$", text, re.M)
    assert re.search(r"^\[runtimes\.demo\]$", text, re.M)
    config = parse_config(text)
    assert config.default_runtime == "demo"
    assert config.runtimes["demo"].engine == "demo"
    # Only the demo runtime is live, and nothing looks like a secret value.
    assert set(config.runtimes) == {"demo"}
    assert not re.search(r"(sk-|api_key\s*=|token\s*=|password)", text, re.I)
    # The freshly written config lets the daemon-side checks pass.
    doctor = cli(fresh_home, "doctor", env={"PATH": _path_without_engines()}, timeout=30)
    checks = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["config"]["ok"] is True, checks["config"]


def test_second_init_refuses_without_force_and_leaves_the_file_unchanged(fresh_home: Home) -> None:
    assert cli(fresh_home, "init").returncode == 0
    fresh_home.config_path.write_text(fresh_home.config_path.read_text() + "# my own edit\n")
    before = fresh_home.config_path.read_bytes()
    again = cli(fresh_home, "init")
    assert again.returncode == 1
    error = json.loads(again.stdout)["error"]
    assert error["code"] == "ConfigInvalid"
    assert "--force" in error["message"]
    assert fresh_home.config_path.read_bytes() == before
    forced = cli(fresh_home, "init", "--force")
    assert forced.returncode == 0, forced.stderr
    assert b"# my own edit" not in fresh_home.config_path.read_bytes()
    assert stat.S_IMODE(fresh_home.config_path.stat().st_mode) == 0o600


def test_init_with_claude_on_path_adds_a_commented_claude_runtime_naming_only_a_variable(
    fresh_home: Home,
) -> None:
    bindir = short_tmpdir("arbin-")
    try:
        fake = bindir / "claude"
        fake.write_text("#!/bin/sh\necho 'fake claude 0.0.0'\n")
        fake.chmod(0o755)
        result = cli(
            fresh_home, "init", env={"PATH": f"{bindir}{os.pathsep}{_path_without_engines()}"}
        )
        assert result.returncode == 0, result.stderr
        text = fresh_home.config_path.read_text()
        assert re.search(r"^# \[runtimes\.claude\]$", text, re.M), text
        assert f'# binary = "{fake}"' in text
        # Commented out: the live config still has only the demo runtime.
        assert set(parse_config(text).runtimes) == {"demo"}
        # Uncommented, the block is a valid runtime on the user's own sign-in (no value in it).
        lines = text.splitlines()
        start = lines.index("# [runtimes.claude]")
        block = []
        for line in lines[start:]:
            if not line.startswith("#"):
                break
            block.append(line[2:] if line.startswith("# ") else "")
        enabled = parse_config(text + "\n" + "\n".join(block) + "\n")
        claude = enabled.runtimes["claude"]
        assert claude.engine == "claude"
        assert claude.binary == str(fake)
        assert claude.auth is not None and claude.auth.login == "native"
        assert claude.auth.env is None and claude.auth.file is None
        assert '# API key instead: auth = { env = "ANTHROPIC_API_KEY" }' in text
    finally:
        shutil.rmtree(bindir, ignore_errors=True)


def test_init_without_engines_on_path_adds_no_engine_block(fresh_home: Home) -> None:
    assert cli(fresh_home, "init", env={"PATH": _path_without_engines()}).returncode == 0
    text = fresh_home.config_path.read_text()
    for engine in ("claude", "codex", "qwen", "glm"):
        assert f"[runtimes.{engine}]" not in text
