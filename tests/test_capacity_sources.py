"""Capacity sources and tools end to end: recorded Claude Code and Codex quota lines, the samples
table, the `command` collector (ok, timeout, oversize, garbage, backoff) and `codex_appserver`
through a fake app-server, all through a real daemon and the CLI."""

import json
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from agent_run.engines.codex import CodexEngine
from agent_run.engines.quota import (
    QuotaEvent,
    QuotaWindow,
    codex_windows,
    header_windows,
    reset_credits,
)
from agent_run.engines.stream_json import parse_stream_json_line
from agent_run.services.capacity_sources import appserver_windows, backoff_delay
from agent_run.store.db import connect, write
from agent_run.store.samples import Sample, append_samples, sample_count, samples_since
from tests.harness import (
    cli_json,
    db_rows,
    short_tmpdir,
    wait_for,
)

FAKES = Path(__file__).parent / "support" / "fake_collectors.py"

# Recorded from Claude Code 2.1.332 (subscription login) and an older build (`unifiedWindows`).
CLAUDE_NEW = (
    '{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1900000000,'
    '"rateLimitType":"five_hour","utilization":0.82,"overageStatus":"rejected",'
    '"isUsingOverage":false},"uuid":"76258cfb","session_id":"1ae0af5b"}'
)
CLAUDE_OLD = (
    '{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","unifiedWindows":{'
    '"five_hour":{"utilization":0.25,"resetsAt":1900000000,"status":"allowed"},'
    '"seven_day":{"utilization":0.5,"resetsAt":1900500000},'
    '"seven_day_overage_included":{"utilization":"bad","resetsAt":1}}},"uuid":"u","session_id":"s"}'
)
CLAUDE_REJECTED = (
    '{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1900000000,'
    '"rateLimitType":"seven_day_opus"},"uuid":"u","session_id":"s"}'
)


def test_claude_rate_limit_event_of_both_shapes() -> None:
    assert parse_stream_json_line(CLAUDE_NEW) == [
        QuotaEvent((QuotaWindow("default", "5h", pytest.approx(18.0), 1900000000.0),))
    ]
    (old,) = parse_stream_json_line(CLAUDE_OLD)
    assert isinstance(old, QuotaEvent)
    assert {(w.lane, w.window): w.remaining_percent for w in old.windows} == {
        ("default", "5h"): 75.0,
        ("default", "7d"): 50.0,
        ("overage_included", "7d"): None,
    }
    assert parse_stream_json_line(CLAUDE_REJECTED) == [
        QuotaEvent((QuotaWindow("opus", "7d", 0.0, 1900000000.0),))
    ]
    assert parse_stream_json_line('{"type":"rate_limit_event","rate_limit_info":"nonsense"}') == []


def test_codex_rate_limits_notification_and_token_count_shape() -> None:
    line = json.dumps(
        {
            "method": "account/rateLimits/updated",
            "params": {
                "rateLimits": {
                    "limitId": "codex",
                    "primary": {
                        "usedPercent": 25,
                        "windowDurationMins": 300,
                        "resetsAt": 1900000000,
                    },
                    "secondary": {
                        "usedPercent": 110,
                        "windowDurationMins": 10080,
                        "resetsAt": 1900500000,
                    },
                }
            },
        }
    )
    assert CodexEngine().parse_line(line) == [  # `codex` is Codex's account-wide limit
        QuotaEvent(
            (
                QuotaWindow("default", "5h", 75.0, 1900000000.0),
                QuotaWindow("default", "7d", 0.0, 1900500000.0),
            )
        )
    ]
    spark = line.replace('"limitId": "codex"', '"limitId": "codex_bengalfox"')
    (model_specific,) = CodexEngine().parse_line(spark)
    assert isinstance(model_specific, QuotaEvent)
    assert {w.lane for w in model_specific.windows} == {"codex_bengalfox"}
    snake = {
        "primary": {"used_percent": 10.0, "window_minutes": 45, "resets_at": 5},
        "secondary": {"window_minutes": 60},
    }  # no used percent: skipped
    assert codex_windows(snake) == (QuotaWindow("default", "45m", 90.0, 5.0),)


def test_codex_reset_credits_are_read_with_the_windows() -> None:
    line = {
        "method": "account/rateLimits/updated",
        "params": {
            "rateLimits": {"limitId": "codex", "primary": {"usedPercent": 25}},
            "rateLimitResetCredits": {"availableCount": 3, "credits": None},
        },
    }
    assert CodexEngine().parse_line(json.dumps(line)) == [
        QuotaEvent((QuotaWindow("default", "primary", 75.0, None, 3),))
    ]
    # Codex 0.171.0's notification carries none: the windows say nothing of credits
    del line["params"]["rateLimitResetCredits"]
    (event,) = CodexEngine().parse_line(json.dumps(line))
    assert isinstance(event, QuotaEvent) and event.windows[0].reset_credits is None
    for junk in ({"availableCount": -1}, {"availableCount": 1.5}, {"availableCount": True}, 7):
        assert reset_credits(junk) is None
    assert reset_credits({"availableCount": 2.0}) == 2


def test_appserver_prefers_limits_by_id_and_skips_a_bad_window() -> None:
    result = {
        "rateLimits": {"primary": {"usedPercent": 99, "windowDurationMins": 300}},
        "rateLimitsByLimitId": {
            "codex": {
                "primary": {"usedPercent": 40, "windowDurationMins": 300},
                "secondary": {"usedPercent": "x"},
            }
        },
    }
    assert appserver_windows(result) == [("default", "5h", 60.0, None)]
    legacy = {"rateLimits": {"primary": {"usedPercent": 99, "windowDurationMins": 300}}}
    assert appserver_windows(legacy) == [("default", "5h", 1.0, None)]


def test_samples_are_trimmed_to_the_retention_newest_first(tmp_path: Path) -> None:
    conn = connect(tmp_path / "state.db")
    with write(conn):
        append_samples(
            conn,
            [
                Sample(
                    "r", None, "default", "5h", float(i), None, 1000.0 + i, 2000.0 + i, "command"
                )
                for i in range(10)
            ],
            retention=4,
        )
    assert sample_count(conn) == 4
    assert [s.remaining_percent for s in samples_since(conn, 0)] == [6.0, 7.0, 8.0, 9.0]
    with pytest.raises(sqlite3.IntegrityError):
        with write(conn):
            append_samples(
                conn, [Sample("r", None, "l", "w", 101.0, None, 1.0, 2.0, "native")], None
            )
    conn.close()


def _collector_config(mode: str, runs: Path, *, deadline: float = 30.0, extra: str = "") -> str:
    argv = json.dumps([sys.executable, str(FAKES), "collector", mode, str(runs)])
    return f"""schema_version = 1
default_runtime = "alpha"
[daemon]
reconcile_interval_seconds = 0.2
[capacity]
collect_interval_seconds = 3600
[capacity.command]
argv = {argv}
deadline_seconds = {deadline}
[runtimes.alpha]
engine = "demo"
models = ["demo-1"]
limits_source = "command"
auth = {{ env = "ALPHA_KEY" }}
[runtimes.beta]
engine = "demo"
models = ["demo-1"]
limits_source = "command"
auth = {{ env = "BETA_KEY" }}
priority_multiplier = 3.0
{extra}"""


def test_command_collector_feeds_limits_and_capacity_order(daemon_for, tmp_path: Path) -> None:
    home, daemon = daemon_for(_collector_config("ok", tmp_path / "runs.txt"))
    collected = daemon.call("capacity_collect", {})
    assert [(s["runtime"], s["windows"], s["error"]) for s in collected["sources"]] == [
        ("alpha", 2, None),
        ("beta", 2, None),
    ]
    limits = {(w["runtime"], w["window"]): w for w in daemon.call("limits", {})["windows"]}
    assert (
        limits[("alpha", "5h")]["remaining_percent"] == 80.0
        and limits[("alpha", "5h")]["risk"] == "low"
    )
    assert limits[("beta", "5h")]["risk"] == "medium" and limits[("beta", "5h")]["known"] is True
    assert limits[("beta", "7d")]["source"] == "command"
    # alpha: slack 0.6 -> 1.6; beta: slack -0.4 -> 0.6, x 3.0 = 1.8: beta first
    order = cli_json(home, "capacity", "order")
    assert [(r["runtime"], round(r["priority"], 6)) for r in order["routes"]] == [
        ("beta", 1.8),
        ("alpha", 1.6),
    ]
    assert order["insufficient_diversity"] is False
    assert order["deferred"] == [] and order["omitted"] == []
    only_alpha = cli_json(home, "limits", "--runtime", "alpha")
    assert {w["runtime"] for w in only_alpha["windows"]} == {"alpha"}


@pytest.mark.parametrize(
    "mode,reason",
    [
        ("slow", "no answer within 10 s"),
        ("huge", "output over"),
        ("garbage", "invalid collector output"),
        ("wrong", "windows.0.remaining_percent"),
    ],
)
def test_failing_collector_is_no_evidence_and_backs_off(
    daemon_for, tmp_path: Path, mode: str, reason: str
) -> None:
    runs = tmp_path / "runs.txt"
    # only `slow` is about the deadline: 10 s, far below its 60 s sleep, yet long enough for a
    # loaded machine to start the collector (it notes its run first); the others get a generous
    # one (a loaded machine may take more than a second to start Python and write 3 MiB)
    deadline = 10.0 if mode == "slow" else 30.0
    home, daemon = daemon_for(_collector_config(mode, runs, deadline=deadline))
    started = time.monotonic()
    first = daemon.call("capacity_collect", {})
    assert time.monotonic() - started < 50  # the deadline, not the collector's 60 s sleep
    for source in first["sources"]:
        assert reason in source["error"] and source["windows"] == 0
        assert source["next_attempt_at"] == pytest.approx(first["observed_at"] + 60, abs=1)
    again = daemon.call("capacity_collect", {})
    assert {s["error"] for s in again["sources"]} == {"backing off after a failure"}
    assert len(runs.read_text().splitlines()) == 2  # not run while backing off
    order = daemon.call("capacity_order", {})
    assert order["routes"] == [] and order["unavailable_runtimes"] == ["alpha", "beta"]


def test_backoff_doubles_from_60_to_900_seconds() -> None:
    assert [backoff_delay(n) for n in range(1, 7)] == [60.0, 120.0, 240.0, 480.0, 900.0, 900.0]


def _fake_appserver(tmp: Path, mode: str) -> Path:
    script = tmp / f"fake-codex-{mode}"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKES} appserver {mode} "$@"\n')
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("mode", ["ok", "refuse"])
def test_codex_appserver_source_through_a_fake_app_server(daemon_for, mode: str) -> None:
    """The fake answers only after a moment and exits at end of input, as the real app-server
    does: the collector keeps its input open until the replies arrive."""
    tmp = short_tmpdir()
    ok, refusing = _fake_appserver(tmp, "ok"), _fake_appserver(tmp, mode)
    (tmp / "codex-home").mkdir()
    block = "\n".join(
        f"""[runtimes.{name}]
engine = "codex"
models = ["gpt-test"]
binary = "{binary}"
limits_source = "codex_appserver"
auth = {{ login = "native", dir = "{tmp / "codex-home"}" }}
"""
        for name, binary in (("cx1", ok), ("cx2", refusing))
    )
    block += '[runtimes.cx1.accounts.work]\nauth = { login = "native" }\n'
    head = (
        'schema_version = 1\ndefault_runtime = "cx1"\n[capacity]\ncollect_interval_seconds = 3600\n'
    )
    home, daemon = daemon_for(head + block)
    work_home = home.root / "accounts" / "cx1" / "work"  # the account's own CODEX_HOME
    work_home.mkdir(mode=0o700, parents=True)
    (work_home / "used.txt").write_text("70")
    sources = {
        (s["runtime"], s["account"]): s for s in daemon.call("capacity_collect", {})["sources"]
    }
    assert sources[("cx1", None)]["windows"] == 2 and sources[("cx1", None)]["error"] is None
    assert sources[("cx1", "work")]["windows"] == 2 and sources[("cx1", None)]["models"] == 2
    if mode == "refuse":  # one account's failure keeps the other's evidence, and its roster
        refused = sources[("cx2", None)]
        assert "refused" in refused["error"] and refused["windows"] == 0
        assert refused["models"] == 2
    lanes = {
        (w["runtime"], w["account"], w["lane"], w["window"]): w["remaining_percent"]
        for w in daemon.call("limits", {})["windows"]
    }
    assert lanes[("cx1", None, "default", "5h")] == 60.0  # limit id `codex`: account-wide
    assert lanes[("cx1", None, "codex_other", "5h")] == 90.0
    assert lanes[("cx1", "work", "default", "5h")] == 30.0  # read from the account's own home
    credits = {w["reset_credits"] for w in daemon.call("limits", {"runtime": "cx1"})["windows"]}
    assert credits == {2}  # rateLimitResetCredits.availableCount, stored with every window
    assert ("cx1", None, "default", "7d") not in lanes  # the bad window was skipped
    rosters = {r["runtime"]: r["roster"] for r in daemon.call("models", {})["runtimes"]}
    assert rosters["cx2"] == ["gpt-test", "gpt-other"]


def test_the_daemon_collects_every_interval(daemon_for, tmp_path: Path) -> None:
    runs = tmp_path / "runs.txt"
    config = _collector_config("ok", runs).replace(
        "collect_interval_seconds = 3600", "collect_interval_seconds = 1"
    )
    home, daemon = daemon_for(config)
    wait_for(
        lambda: runs.exists() and len(runs.read_text().splitlines()) >= 4,
        timeout=60,
        what="two collection passes of two runtimes",
    )
    assert len(db_rows(home, "SELECT id FROM capacity_samples WHERE source = 'command'")) >= 4


def test_unified_headers_parse_and_bad_ones_are_skipped() -> None:
    headers = {
        "Anthropic-Ratelimit-Unified-5h-Utilization": "0.25",
        "anthropic-ratelimit-unified-5h-reset": "100",
        "anthropic-ratelimit-unified-7d-utilization": "nan",
        "anthropic-ratelimit-unified-7d_opus-utilization": "1.2",
        "anthropic-ratelimit-unified-7d_sonnet-utilization": "lots",
        "x-ratelimit-remaining-requests": "5",
        "x-ratelimit-limit-requests": "10",
    }
    assert header_windows(headers) == (
        QuotaWindow("default", "5h", 75.0, 100.0),
        QuotaWindow("opus", "7d", 0.0, None),
    )


def test_capacity_text_renderers_match_their_snapshots(daemon_for, tmp_path: Path) -> None:
    from agent_run.rpc.client import Client
    from tests.test_cli_snapshots import check, cli_text, same_as_the_model

    home, daemon = daemon_for(_collector_config("ok", tmp_path / "runs.txt"))
    collected = cli_text(home, "capacity", "collect")
    check("capacity_collect", collected)
    for name, args, tool in (
        ("limits", ("limits",), "limits"),
        ("capacity_order", ("capacity", "order"), "capacity_order"),
    ):
        text = cli_text(home, *args)
        check(name, text)
        with Client(home.socket_path) as client:
            same_as_the_model(client, tool, {}, text)


EXPLAINED_RUNTIMES = """[runtimes.gamma]
engine = "demo"
models = ["demo-1"]
limits_source = "command"
auth = { env = "ALPHA_KEY" }
priority_multiplier = 2.0
[runtimes.delta]
engine = "demo"
models = ["demo-1"]
limits_source = "command"
auth = { env = "DELTA_KEY" }
[runtimes.broken]
engine = "claude"
binary = "/nonexistent/claude"
models = ["demo-1"]
limits_source = "command"
auth = { env = "BROKEN_KEY" }
priority_multiplier = 9.0
"""


def test_capacity_order_text_shows_credits_aliases_markers_and_labels(
    daemon_for, tmp_path: Path
) -> None:
    from agent_run.rpc.client import Client
    from tests.test_cli_snapshots import check, cli_text, same_as_the_model

    config = _collector_config("explained", tmp_path / "runs.txt", extra=EXPLAINED_RUNTIMES)
    home, daemon = daemon_for(config)
    daemon.call("capacity_collect", {})
    for name, args, tool in (
        ("capacity_order_explained", ("capacity", "order"), "capacity_order"),
        ("limits_explained", ("limits",), "limits"),
    ):
        text = cli_text(home, *args)
        check(name, text)
        with Client(home.socket_path) as client:
            same_as_the_model(client, tool, {}, text)


def test_command_collector_asks_per_account_and_account_multipliers_apply(
    daemon_for, tmp_path: Path
) -> None:
    extra = (
        "priority_account_multipliers = { abc = 4.0 }\n"
        '[runtimes.gamma.accounts.abc]\nauth = { env = "ABC_KEY" }\n'
        '[runtimes.gamma.accounts.abcdefg]\nauth = { env = "ABCDEFG_KEY" }\n'
    )
    gamma = (
        '[runtimes.gamma]\nengine = "demo"\nmodels = ["demo-1"]\nlimits_source = "command"\n'
        'default_account = "abc"\n' + extra
    )
    home, daemon = daemon_for(_collector_config("ok", tmp_path / "runs.txt", extra=gamma))
    sources = daemon.call("capacity_collect", {})["sources"]
    assert [(s["runtime"], s["account"], s["windows"]) for s in sources] == [
        ("alpha", None, 2),
        ("beta", None, 2),
        ("gamma", "abc", 2),
        ("gamma", "abcdefg", 2),
    ]  # gamma's own auth is replaced by its default account: not a route of its own
    limits = {
        (w["runtime"], w["account"], w["window"]): w["remaining_percent"]
        for w in daemon.call("limits", {"runtime": "gamma"})["windows"]
    }
    assert limits[("gamma", "abc", "5h")] == 30.0 and limits[("gamma", "abcdefg", "5h")] == 70.0
    order = daemon.call("capacity_order", {})
    ranked = [(r["runtime"], r["account"], round(r["priority"], 6)) for r in order["routes"]]
    # abc: 30 % -> slack -0.4 -> score 0.6, x 4.0 (account) = 2.4; abcdefg: 70 % -> 1.4 x 1.0
    assert ranked == [
        ("gamma", "abc", 2.4),
        ("beta", None, 1.8),
        ("alpha", None, 1.6),
        ("gamma", "abcdefg", 1.4),
    ]


def test_claude_rate_limit_types_the_table_does_not_know_are_lanes_of_their_own() -> None:
    def event(rate_type: object, **info: object) -> list:
        line = {"type": "rate_limit_event", "rate_limit_info": {"rateLimitType": rate_type, **info}}
        return parse_stream_json_line(json.dumps(line))

    # in Claude Code 2.1.332's binary, not in the table: a rejection still reads 0 %
    assert event("seven_day_oauth_apps", status="rejected", resetsAt=1900000000) == [
        QuotaEvent((QuotaWindow("oauth_apps", "7d", 0.0, 1900000000.0),))
    ]
    assert event("five_hour_cowork", utilization=0.25) == [
        QuotaEvent((QuotaWindow("cowork", "5h", 75.0, None),))
    ]
    assert event("omelette", utilization=0.5) == [
        QuotaEvent((QuotaWindow("omelette", "period", 50.0, None),))
    ]
    for junk in ("Seven Day", "", 7, None, "x" * 65):  # not a type name: no window
        assert event(junk, utilization=0.5) == []


def test_one_sources_unexpected_fault_keeps_the_others_samples(daemon_for) -> None:
    """A binary whose path holds a NUL byte makes starting it raise ValueError, which no source
    expects: that source reports it; the other source's samples are still written."""
    tmp = short_tmpdir()
    ok = _fake_appserver(tmp, "ok")
    (tmp / "codex-home").mkdir()
    block = "\n".join(
        f"""[runtimes.{name}]
engine = "codex"
models = ["gpt-test"]
binary = "{binary}"
limits_source = "codex_appserver"
auth = {{ login = "native", dir = "{tmp / "codex-home"}" }}
"""
        for name, binary in (("cx1", ok), ("cx2", f"{ok}\\u0000"))
    )
    head = (
        'schema_version = 1\ndefault_runtime = "cx1"\n[capacity]\ncollect_interval_seconds = 3600\n'
    )
    home, daemon = daemon_for(head + block)
    sources = {s["runtime"]: s for s in daemon.call("capacity_collect", {})["sources"]}
    assert sources["cx1"]["windows"] == 2 and sources["cx1"]["error"] is None
    assert sources["cx2"]["error"].startswith("unexpected ValueError"), sources["cx2"]
    assert sources["cx2"]["next_attempt_at"] is not None  # it backs off like any failure
    assert {w["runtime"] for w in daemon.call("limits", {})["windows"]} == {"cx1"}
