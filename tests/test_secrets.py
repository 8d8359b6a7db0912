"""Secrets are never stored: the redactor's forms, engine.log, the demo engine end to end."""

import json
from pathlib import Path

import pytest

from agent_run.supervisor.redact import REDACTED, Redactor, StreamRedactor, secret_forms
from tests.harness import DaemonProcess, db_rows

# A secret an engine's JSON must escape: a quote, a backslash, a newline, non-ASCII, a slash.
HOSTILE = 'k3y"with\\back\nline-é/ß-7f3a9c'


def stored_forms(value: str) -> list[bytes]:
    return sorted({form.encode() for form in secret_forms(value)}, key=len)


REDACTION_TABLE = [
    ("raw", "plain-secret-value", lambda v: f"key={v}!"),
    ("json default (ensure_ascii)", HOSTILE, lambda v: json.dumps({"t": f"key={v}"})),
    ("json utf-8 (JS JSON.stringify)", HOSTILE, lambda v: json.dumps({"t": v}, ensure_ascii=False)),
    ("json uppercase hex escapes", HOSTILE,
     lambda v: json.dumps({"t": v}).replace("\\u00e9", "\\u00E9").replace("\\u00df", "\\u00DF")),
    ("json with escaped slashes", HOSTILE, lambda v: json.dumps({"t": v}).replace("/", "\\/")),
    ("json inside json (a tool result)", HOSTILE, lambda v: json.dumps({"out": json.dumps({"t": v})})),
    ("utf-8 json inside ascii json", HOSTILE,
     lambda v: json.dumps({"out": json.dumps({"t": v}, ensure_ascii=False)})),
    ("raw with a newline", HOSTILE, lambda v: f"stderr says {v} then more"),
]


@pytest.mark.parametrize(("secret", "render"), [(s, r) for _, s, r in REDACTION_TABLE],
                         ids=[name for name, _, _ in REDACTION_TABLE])
def test_redactor_matches_every_encoded_form_before_decoding(secret, render):
    text = render(secret)
    assert any(form in text for form in secret_forms(secret)), "the table must embed the secret"
    redacted = Redactor([secret])(text)
    assert REDACTED in redacted
    for form in secret_forms(secret):
        assert form not in redacted, (form, redacted)
    try:  # what a parser would decode from it holds no secret either
        decoded = json.dumps(json.loads(redacted), ensure_ascii=False)
    except ValueError:
        decoded = redacted
    assert secret not in decoded


def test_redactor_keeps_other_text_and_short_values():
    redact = Redactor(["hunter2-secret", "abc"])  # too-short values are ignored
    assert redact("abc and nothing else") == "abc and nothing else"
    assert redact("sk-ABCDEFGHIJKLMNOPQRSTUV") == REDACTED
    assert Redactor([])("nothing to hide") == "nothing to hide"


@pytest.mark.parametrize("piece", [1, 3, 7, 64])
def test_stream_redactor_sees_a_secret_split_across_reads(piece):
    text = f"start {HOSTILE} middle {HOSTILE}{HOSTILE} end\n"
    stream = StreamRedactor(Redactor([HOSTILE]))
    out = "".join(stream.feed(text[i:i + piece]) for i in range(0, len(text), piece)) + stream.close()
    assert out == f"start {REDACTED} middle {REDACTED}{REDACTED} end\n"


def keyed_home(home, variable: str) -> None:
    config = (home.root / "config.toml").read_text() + (
        f'\n[runtimes.keyed]\nengine = "demo"\nmodels = ["demo-1"]\nauth = {{ env = "{variable}" }}\n')
    (home.root / "config.toml").write_text(config)


def leaks_under(root: Path, value: str) -> list[str]:
    forms = stored_forms(value)
    return [f"{p}: {f!r}" for p in root.rglob("*") if p.is_file()
            for f in forms if f in p.read_bytes()]


def test_hostile_secret_is_in_no_stored_form_in_answer_events_messages_or_engine_log(home, workdir):
    keyed_home(home, "DEMO_TOKEN")
    daemon = DaemonProcess(home, env={"DEMO_TOKEN": HOSTILE}).start()
    try:
        agent = daemon.call("start", {"task": "echo_env: DEMO_TOKEN\nanswer: printing my token",
                                      "workdir": str(workdir), "runtime": "keyed"})
        view = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})["agent"]
        assert view["state"] == "succeeded", view
        answer = daemon.call("answer", {"agent_id": agent["id"]})["text"]
        assert answer.endswith(f"DEMO_TOKEN={REDACTED}")
        items = daemon.call("transcript", {"agent_id": agent["id"]})["items"]
    finally:
        daemon.stop()
    engine_log = next(home.agents_dir.rglob("engine.log")).read_text()
    assert f"DEMO_TOKEN={REDACTED}" in engine_log, "the engine printed it on stderr, redacted"
    assert all("7f3a9c" not in json.dumps(i, ensure_ascii=False) for i in items)
    events = [dict(r) for r in db_rows(home, "SELECT kind, data FROM events")]
    assert events and "7f3a9c" not in json.dumps(events, ensure_ascii=False)
    assert leaks_under(home.root, HOSTILE) == []
