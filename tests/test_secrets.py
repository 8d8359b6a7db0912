"""Secrets are never stored: the redactor's forms, engine.log, the demo engine end to end."""

import json
from pathlib import Path

import pytest

from agent_run.supervisor.redact import REDACTED, Redactor, StreamRedactor, secret_forms
from tests.harness import DaemonProcess, db_rows, supervisors_gone, wait_for

# A secret an engine's JSON must escape: a quote, a backslash, a newline, non-ASCII, a slash.
HOSTILE = 'k3y"with\\back\nline-é/ß-7f3a9c'


def stored_forms(value: str) -> list[bytes]:
    return sorted({form.encode() for form in secret_forms(value)}, key=len)


REDACTION_TABLE = [
    ("raw", "plain-secret-value", lambda v: f"key={v}!"),
    ("json default (ensure_ascii)", HOSTILE, lambda v: json.dumps({"t": f"key={v}"})),
    ("json utf-8 (JS JSON.stringify)", HOSTILE, lambda v: json.dumps({"t": v}, ensure_ascii=False)),
    (
        "json uppercase hex escapes",
        HOSTILE,
        lambda v: json.dumps({"t": v}).replace("\\u00e9", "\\u00E9").replace("\\u00df", "\\u00DF"),
    ),
    ("json with escaped slashes", HOSTILE, lambda v: json.dumps({"t": v}).replace("/", "\\/")),
    (
        "json inside json (a tool result)",
        HOSTILE,
        lambda v: json.dumps({"out": json.dumps({"t": v})}),
    ),
    (
        "utf-8 json inside ascii json",
        HOSTILE,
        lambda v: json.dumps({"out": json.dumps({"t": v}, ensure_ascii=False)}),
    ),
    ("raw with a newline", HOSTILE, lambda v: f"stderr says {v} then more"),
]


@pytest.mark.parametrize(
    ("secret", "render"),
    [(s, r) for _, s, r in REDACTION_TABLE],
    ids=[name for name, _, _ in REDACTION_TABLE],
)
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


def test_a_secret_that_key_shaped_text_runs_into_is_still_redacted_whole():
    """Text shaped like a provider key that runs into a known secret does not take part of the
    secret with it and leave the rest: every known secret goes first, then the key shapes."""
    secret = "abcd!efgh-secret"
    text = "key sk-" + "A" * 16 + secret + " end"
    redacted = Redactor([secret])(text)
    assert redacted == f"key {REDACTED}{REDACTED} end"
    assert "efgh" not in redacted


@pytest.mark.parametrize("piece", [1, 3, 7, 64])
def test_stream_redactor_sees_a_secret_split_across_reads(piece):
    text = f"start {HOSTILE} middle {HOSTILE}{HOSTILE} end\n"
    stream = StreamRedactor(Redactor([HOSTILE]))
    out = (
        "".join(stream.feed(text[i : i + piece]) for i in range(0, len(text), piece))
        + stream.close()
    )
    assert out == f"start {REDACTED} middle {REDACTED}{REDACTED} end\n"


def keyed_home(home, variable: str) -> None:
    config = (home.root / "config.toml").read_text() + (
        f'\n[runtimes.keyed]\nengine = "demo"\nmodels = ["demo-1"]\nauth = {{ env = "{variable}" }}\n'
    )
    (home.root / "config.toml").write_text(config)


def leaks_under(root: Path, value: str) -> list[str]:
    forms = stored_forms(value)
    return [
        f"{p}: {f!r}" for p in root.rglob("*") if p.is_file() for f in forms if f in p.read_bytes()
    ]


def test_hostile_secret_is_in_no_stored_form_in_answer_events_messages_or_engine_log(home, workdir):
    keyed_home(home, "DEMO_TOKEN")
    daemon = DaemonProcess(home, env={"DEMO_TOKEN": HOSTILE}).start()
    try:
        agent = daemon.call(
            "start",
            {
                "task": "echo_env: DEMO_TOKEN\nanswer: printing my token",
                "workdir": str(workdir),
                "runtime": "keyed",
            },
        )
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
    wait_for(lambda: supervisors_gone(home), what="the supervisor to finish writing")
    assert leaks_under(home.root, HOSTILE) == []


DAEMON_ONLY = "daemon-only-key-0b7e5d2a91"


def test_supervisor_gets_an_allowlisted_environment_and_its_secret_over_a_pipe(home, workdir):
    keyed_home(home, "DEMO_TOKEN")
    daemon = DaemonProcess(
        home,
        env={
            "DEMO_TOKEN": HOSTILE,
            "OTHER_RUNTIME_KEY": DAEMON_ONLY,
            "HTTPS_PROXY": "http://proxy.invalid:3128",
        },
    ).start()
    try:
        agent = daemon.call(
            "start", {"task": "sleep: 30", "workdir": str(workdir), "runtime": "keyed"}
        )
        row = wait_for(
            lambda: (
                (db_rows(home, "SELECT supervisor_pid, engine_pid FROM executions") or [None])[0]
                if db_rows(home, "SELECT engine_pid FROM executions WHERE engine_pid IS NOT NULL")
                else None
            )
        )
        supervisor_env = Path(f"/proc/{row['supervisor_pid']}/environ").read_bytes()
        supervisor_argv = Path(f"/proc/{row['supervisor_pid']}/cmdline").read_bytes()
        engine_env = Path(f"/proc/{row['engine_pid']}/environ").read_bytes()
        daemon.call("cancel", {"agent_id": agent["id"]})
    finally:
        daemon.stop()
    names = {entry.split(b"=", 1)[0] for entry in supervisor_env.split(b"\0") if entry}
    assert b"OTHER_RUNTIME_KEY" not in names and b"DEMO_TOKEN" not in names
    assert (
        DAEMON_ONLY.encode() not in supervisor_env
        and b"7f3a9c" not in supervisor_env + supervisor_argv
    )
    assert b"HTTPS_PROXY" in names, "proxies pass the allowlist"
    assert DAEMON_ONLY.encode() not in engine_env
    assert HOSTILE.encode() in engine_env, "the demo engine reads its key from its environment"
    assert b"NO_PROXY=127.0.0.1,localhost,::1" in engine_env


def test_supervisor_without_its_credential_payload_exits_unrecorded_and_a_respawn_runs(
    home, workdir
):
    import subprocess
    import sys

    from agent_run.store import agents as agents_q
    from agent_run.store.db import connect, write
    from agent_run.supervisor.secrets import secret_payload

    keyed_home(home, "DEMO_TOKEN")
    daemon = DaemonProcess(home, env={"DEMO_TOKEN": "a-plain-secret-value"}).start()
    try:
        first = daemon.call(
            "start", {"task": "answer: one", "workdir": str(workdir), "runtime": "keyed"}
        )
        assert (
            daemon.call("wait", {"agent_id": first["id"], "timeout_seconds": 60})["agent"]["state"]
            == "succeeded"
        )
    finally:
        daemon.stop()
    conn = connect(home.db_path)
    plan = json.loads(db_rows(home, "SELECT plan_json FROM executions")[0]["plan_json"])
    plan |= {"execution_id": "ex_payloadtest", "resume_session_id": None}
    with write(conn):  # an admitted execution whose spawner died before sending the secret
        agents_q.insert_execution(
            conn,
            agent_id=first["id"],
            execution={
                "id": "ex_payloadtest",
                "kind": "resume",
                "prompt": "answer: two",
                "plan": plan,
            },
        )
    home.execution_dir(first["id"], "ex_payloadtest").mkdir(mode=0o700)  # as launch_execution does
    argv = [
        sys.executable,
        "-m",
        "agent_run.supervisor",
        "--home",
        str(home.root),
        "--execution",
        "ex_payloadtest",
    ]
    orphan = subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert orphan.returncode == 1 and b"no credential payload" in orphan.stderr
    row = db_rows(home, "SELECT state, supervisor_pid FROM executions WHERE id = 'ex_payloadtest'")[
        0
    ]
    assert (row["state"], row["supervisor_pid"]) == ("created", None)
    payload = secret_payload(conn, "ex_payloadtest")  # resolved where the key is: here, the test
    assert b"auth_error" in payload
    payload = json.dumps({"secrets": {"DEMO_TOKEN": "a-plain-secret-value"}}).encode() + b"\n"
    done = subprocess.run(
        argv, input=payload, capture_output=True, timeout=60, env={"PATH": "/usr/bin:/bin"}
    )
    assert done.returncode == 0, done.stderr
    row = db_rows(home, "SELECT state, answer_path FROM executions WHERE id = 'ex_payloadtest'")[0]
    assert row["state"] == "succeeded", dict(
        db_rows(
            home, "SELECT failure_kind, failure_message FROM executions WHERE id = 'ex_payloadtest'"
        )[0]
    )
    assert Path(row["answer_path"]).read_text().startswith("two")


def test_verify_command_gets_the_allowlisted_environment_not_the_daemons(home):
    from tests.batch_harness import make_repo, runs_of, wait_batch

    daemon = DaemonProcess(home, env={"OTHER_RUNTIME_KEY": DAEMON_ONLY}).start()
    try:
        repo = make_repo()
        batch = daemon.call(
            "batch_start",
            {
                "runtime": "demo",
                "workflow": "ranked",
                "project": str(repo),
                "runs": 1,
                "reviewers": 1,
                "prompt": "write: feature.txt = a feature\ncommit: add the feature",
                "review_prompt": "score: 70",
                "verify_command": "env; echo verify-ran",
            },
        )
        done = wait_batch(daemon, batch["id"])
    finally:
        daemon.stop()
    output = runs_of(done, "candidate")[0]["verify_output"]
    assert "verify-ran" in output and "PATH=" in output
    assert "OTHER_RUNTIME_KEY" not in output and DAEMON_ONLY not in output


def test_auth_is_resolved_by_the_daemon_missing_variable_is_config_error_and_a_file_works(
    home, workdir, tmp_path
):
    key_file = tmp_path / "key.txt"
    key_file.write_text("file-held-secret-5e8d\n")
    key_file.chmod(0o600)  # a key file others can read is refused (tests/test_doctor_daemon.py)
    config = (home.root / "config.toml").read_text() + (
        '\n[runtimes.unset]\nengine = "demo"\nmodels = ["demo-1"]\nauth = { env = "NOT_SET_ANYWHERE" }\n'
        f'\n[runtimes.filed]\nengine = "demo"\nmodels = ["demo-1"]\nauth = {{ file = "{key_file}" }}\n'
    )
    (home.root / "config.toml").write_text(config)
    daemon = DaemonProcess(home).start()
    try:
        unset = daemon.call(
            "start", {"task": "answer: x", "workdir": str(workdir), "runtime": "unset"}
        )
        view = daemon.call("wait", {"agent_id": unset["id"], "timeout_seconds": 60})["agent"]
        assert (view["state"], view["failure_kind"]) == ("failed", "config_error")
        assert "NOT_SET_ANYWHERE" in view["execution"]["failure_message"]
        filed = daemon.call(
            "start",
            {"task": "echo_env: AGENT_RUN_API_KEY", "workdir": str(workdir), "runtime": "filed"},
        )
        view = daemon.call("wait", {"agent_id": filed["id"], "timeout_seconds": 60})["agent"]
        assert view["state"] == "succeeded", view
        answer = daemon.call("answer", {"agent_id": filed["id"]})["text"]
        assert answer.endswith(f"AGENT_RUN_API_KEY={REDACTED}"), (
            "the engine got it and it was redacted"
        )
    finally:
        daemon.stop()
    wait_for(lambda: supervisors_gone(home), what="the supervisors to finish writing")
    assert leaks_under(home.root, "file-held-secret-5e8d") == []


def test_stream_redaction_holds_back_only_what_could_start_a_secret():
    """An engine's last stderr line before a long wait (Qwen's 429 before "Retrying in 60s")
    is stored at once; only a tail that may be the start of a secret waits for the next read."""
    stream = StreamRedactor(Redactor(["sk-hold-back-secret-0001"]))
    assert stream.feed("[API Error: 429 rate limited]\n") == "[API Error: 429 rate limited]\n"
    assert stream.feed("token sk-hold") == "token "
    assert stream.feed("-back-secret-0001 done") == "[REDACTED] done"
    assert stream.close() == ""
