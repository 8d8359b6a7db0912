"""The model roster cache: the capacity collector caches Codex's own model list (`model/list`
through a fake app-server, as the codex_appserver source is tested); `models` intersects the
configured models with it; `start` refuses a model absent from the config, then one absent
from the roster, naming both lists, without starting any engine process."""

import sys
from pathlib import Path

import pytest

from agent_run.domain import errors
from agent_run.services.capacity_sources import roster_models
from tests.harness import DaemonProcess, db_rows, make_home, remove_home, short_tmpdir

FAKES = Path(__file__).parent / "support" / "fake_collectors.py"


def test_roster_models_reads_codex_model_list_and_skips_bad_entries() -> None:
    result = {"data": [{"id": "a", "model": "a-slug"}, {"id": "b"}, {"model": 3}, "junk"]}
    assert roster_models(result) == ["a-slug", "b"]
    assert roster_models({"data": "nope"}) is None and roster_models(None) is None


def test_models_intersects_the_cached_roster_and_start_refuses_unlisted(workdir) -> None:
    tmp = short_tmpdir()
    calls = tmp / "calls.txt"
    binary = tmp / "fake-codex"
    binary.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\nexec {sys.executable} {FAKES} appserver ok "$@"\n'
    )
    binary.chmod(0o755)
    (tmp / "codex-home").mkdir()
    config = f"""schema_version = 1
default_runtime = "cx"
[capacity]
collect_interval_seconds = 3600
[runtimes.cx]
engine = "codex"
models = ["gpt-test", "gpt-gone"]
binary = "{binary}"
limits_source = "codex_appserver"
auth = {{ login = "native", dir = "{tmp / "codex-home"}" }}
"""
    home = make_home(config)
    daemon = DaemonProcess(home).start()
    try:
        before = daemon.call("models", {"runtime": "cx"})["runtimes"][0]
        assert before["roster"] is None and before["available"] == ["gpt-test", "gpt-gone"]
        (source,) = daemon.call("capacity_collect", {})["sources"]
        assert source["models"] == 2 and source["error"] is None
        shown = daemon.call("models", {"runtime": "cx"})["runtimes"][0]
        assert shown["roster"] == ["gpt-test", "gpt-other"] and shown["available"] == ["gpt-test"]
        asked = calls.read_text()
        with pytest.raises(errors.InvalidRequest) as unlisted:
            daemon.call("start", {"task": "t", "workdir": str(workdir), "model": "gpt-gone"})
        message = unlisted.value.message
        assert unlisted.value.field == "model"
        assert "configured: gpt-test, gpt-gone" in message
        assert "roster: gpt-test, gpt-other" in message
        with pytest.raises(errors.InvalidRequest) as unconfigured:  # the config is checked first
            daemon.call("start", {"task": "t", "workdir": str(workdir), "model": "gpt-other"})
        assert (
            "is not one of runtime 'cx''s models: gpt-test, gpt-gone" in unconfigured.value.message
        )
        with pytest.raises(errors.InvalidRequest) as routed:  # --route auto skips it too
            daemon.call(
                "start",
                {"task": "t", "workdir": str(workdir), "route": "auto", "model": "gpt-gone"},
            )
        assert routed.value.field == "model" and "lists the model" in routed.value.message
        assert calls.read_text() == asked, "the start path never starts an engine process"
        assert db_rows(home, "SELECT id FROM agents") == []
    finally:
        daemon.stop()
        remove_home(home)


@pytest.mark.engines
def test_the_real_codex_app_server_fills_the_roster_and_refuses_limits_without_a_sign_in(
    workdir,
) -> None:
    """The real `codex app-server` 0.171.0 (node_modules) with a throwaway CODEX_HOME whose
    provider is the loopback mock: `model/list` answers from Codex's own catalog, which becomes
    the roster. `account/rateLimits/read` needs a real ChatGPT sign-in, which no test has: it is
    refused ("authentication required"), the roster is kept all the same."""
    from tests.engine_harness import node_bin
    from tests.support.mock_provider import MockProvider

    tmp = short_tmpdir()
    codex_home = tmp / "codex-home"
    codex_home.mkdir(mode=0o700)
    with MockProvider() as provider:
        (codex_home / "config.toml").write_text(
            'model_provider = "mock"\n[model_providers.mock]\nname = "mock"\n'
            f'base_url = "{provider.url}/v1"\nwire_api = "responses"\n'
        )
        config = f"""schema_version = 1
default_runtime = "cx"
[capacity]
collect_interval_seconds = 3600
[runtimes.cx]
engine = "codex"
models = ["gpt-5.5", "gpt-not-in-codex"]
binary = "{node_bin() / "codex"}"
limits_source = "codex_appserver"
auth = {{ login = "native", dir = "{codex_home}" }}
"""
        home = make_home(config)
        daemon = DaemonProcess(home).start()
        try:
            (source,) = daemon.call("capacity_collect", {})["sources"]
            assert "authentication required" in source["error"], source
            assert source["windows"] == 0 and source["models"] and source["models"] > 1, source
            (shown,) = daemon.call("models", {"runtime": "cx"})["runtimes"]
            assert "gpt-5.5" in shown["roster"] and shown["available"] == ["gpt-5.5"], shown
            with pytest.raises(errors.InvalidRequest) as unlisted:
                daemon.call(
                    "start", {"task": "t", "workdir": str(workdir), "model": "gpt-not-in-codex"}
                )
            assert "roster:" in unlisted.value.message and "gpt-5.5" in unlisted.value.message
            assert provider.main_requests() == []  # nothing was sent to a model
        finally:
            daemon.stop()
            remove_home(home)
