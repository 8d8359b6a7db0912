"""Pure rules: transitions, the terminal decision table, redaction, migrations."""

import sqlite3

import pytest

from agent_run.domain.failures import FAILURE_ADVICE, FailureKind
from agent_run.domain.states import ExecutionState, can_transition, check_transition
from agent_run.engines.base import Completion
from agent_run.engines.demo import DemoEngine
from agent_run.store.db import connect, migrations
from agent_run.supervisor.outcome import StopRequest, decide_outcome
from agent_run.supervisor.redact import REDACTED, Redactor

S = ExecutionState


def test_terminal_states_never_reopen():
    for terminal in (S.SUCCEEDED, S.FAILED, S.CANCELLED, S.LOST):
        for target in S:
            assert not can_transition(terminal, target)
    with pytest.raises(ValueError):
        check_transition(S.SUCCEEDED, S.RUNNING)


def test_cancelling_sits_between_running_and_cancelled():
    assert can_transition(S.RUNNING, S.CANCELLING)
    assert can_transition(S.CANCELLING, S.CANCELLED)
    assert not can_transition(S.CANCELLING, S.SUCCEEDED)
    assert not can_transition(S.CREATED, S.RUNNING)


def test_every_failure_kind_has_advice():
    assert set(FAILURE_ADVICE) == set(FailureKind)


OK = Completion(text="done", is_error=False)
CANCEL = StopRequest("cancel requested", None)
STALL = StopRequest("silent", FailureKind.STALLED)


@pytest.mark.parametrize(
    ("evidence", "state", "kind"),
    [
        ({"group_gone": False, "completion": OK}, S.FAILED, FailureKind.ENGINE_GROUP_SURVIVED),
        ({"stop": CANCEL, "completion": OK}, S.CANCELLED, None),
        ({"stop": STALL}, S.FAILED, FailureKind.STALLED),
        ({"completion": None}, S.FAILED, FailureKind.ENGINE_CRASHED),
        ({"completion": None, "unparsed_lines": 2}, S.FAILED, FailureKind.PROTOCOL_ERROR),
        (
            {"completion": Completion("Invalid API key", True, 401)},
            S.FAILED,
            FailureKind.AUTH_FAILED,
        ),
        ({"completion": Completion("slow down", True, 429)}, S.FAILED, FailureKind.RATE_LIMITED),
        (
            {"completion": Completion("quota exceeded", True, 429)},
            S.FAILED,
            FailureKind.QUOTA_EXHAUSTED,
        ),
        (
            {"completion": Completion("Overloaded", True, 529)},
            S.FAILED,
            FailureKind.PROVIDER_OVERLOADED,
        ),
        ({"completion": Completion("boom", True, 500)}, S.FAILED, FailureKind.PROVIDER_ERROR),
        ({"completion": Completion("weird", True, None)}, S.FAILED, FailureKind.ERROR_REPLY),
        ({"completion": Completion("  ", False)}, S.FAILED, FailureKind.NO_ANSWER),
        (
            {"completion": Completion("[API Error: Connection error.]", False)},
            S.FAILED,
            FailureKind.ERROR_REPLY,
        ),
        ({"completion": OK}, S.SUCCEEDED, None),
    ],
)
def test_terminal_decision_follows_the_documented_order(evidence, state, kind):
    args = {
        "engine": DemoEngine(),
        "group_gone": True,
        "stop": None,
        "completion": None,
        "exit_code": 0,
        "unparsed_lines": 0,
        "stderr_tail": "",
        **evidence,
    }
    outcome = decide_outcome(**args)
    assert (outcome.state, outcome.failure) == (state, kind)


def test_redactor_replaces_known_values_and_key_shapes():
    redact = Redactor(["hunter2-secret", "abc"])  # too-short values are ignored
    assert redact("key=hunter2-secret!") == f"key={REDACTED}!"
    assert redact("abc") == "abc"
    assert redact("sk-ABCDEFGHIJKLMNOPQRSTUV") == REDACTED


def test_migrations_are_numbered_strict_and_recorded_in_user_version(tmp_path):
    numbers = [n for n, _, _ in migrations()]
    assert numbers == list(range(1, len(numbers) + 1))
    conn = connect(tmp_path / "state.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == numbers[-1]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with pytest.raises(sqlite3.IntegrityError):  # STRICT: a wrong type is refused
        conn.execute(
            "INSERT INTO messages (agent_id, execution_id, role, content, ts)"
            " VALUES ('a', 'e', 'user', 'x', 'not a number')"
        )
    conn.close()
    again = connect(tmp_path / "state.db")  # re-opening applies nothing twice
    assert again.execute("PRAGMA user_version").fetchone()[0] == numbers[-1]
