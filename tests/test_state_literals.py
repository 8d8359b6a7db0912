"""No bare state strings outside the domain: every string literal of `src/agent_run` (SQL text
included, docstrings excepted) is parsed with `ast`, and one that spells an execution, batch
or run state must be the enum (`ExecutionState`, `BatchState`, `RunState`) instead. The few
words that only look like states (an engine's protocol, a worker-tool report) are listed
below with the reason, file by file."""

import ast
import re
from pathlib import Path

from agent_run.domain.batch_states import BATCH_SETTLED, BatchState, RunState
from agent_run.domain.states import TERMINAL_STATES, ExecutionState
from agent_run.store import notices as notices_q

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "agent_run"
STATE_NAMES = frozenset(
    s.value for machine in (ExecutionState, BatchState, RunState) for s in machine
)
# A state quoted inside SQL or other text: `state = 'created'`.
QUOTED = re.compile(r"'(" + "|".join(sorted(STATE_NAMES)) + r")'")

# (file, word): why it is not one of our states. Keep it short; each entry is a reason.
ALLOWED = {
    # Codex app-server's own item and turn statuses, read off its protocol.
    ("engines/codex.py", "completed"): "Codex protocol status",
    ("engines/codex.py", "failed"): "Codex protocol status",
    # The worker tools are stdlib only: their verdicts and a commit report's state.
    ("worker_tools/catalog.py", "blocked"): "finish verdict (domain.states.Verdict)",
    ("worker_tools/catalog.py", "failed"): "finish verdict (domain.states.Verdict)",
    ("worker_tools/server.py", "failed"): "create_commit report state",
    ("batches/workflows.py", "failed"): "create_commit report state",
    # The notice outbox's own states (pending, sending, retry_wait, delivered, failed, expired).
    ("store/notices.py", "failed"): "notice outbox state",
}


def docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def state_literals(source: str) -> list[tuple[int, str]]:
    """(line, state word) for each string literal that is, or quotes, a state name."""
    tree = ast.parse(source)
    skip = docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in skip:
            continue
        if node.value in STATE_NAMES:
            hits.append((node.lineno, node.value))
        hits += [(node.lineno, word) for word in QUOTED.findall(node.value)]
    return sorted(hits)


def bare_states() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("domain/"):
            continue
        for line, word in state_literals(path.read_text()):
            if (rel, word) not in ALLOWED:
                found.append(f"{rel}:{line}: {word!r}")
    return found


def test_no_state_is_spelled_as_a_bare_string_outside_the_domain():
    assert bare_states() == []


def test_the_finder_sees_comparisons_keys_sql_and_f_strings_but_not_docstrings():
    # Sharpness: the shapes the bare strings took before they became enums.
    source = '''
"""A docstring may say running and 'failed'."""
def f(b, row, conn):
    """So may this one: 'completed'."""
    if b.state != "completed":
        pass
    table = (("succeeded", 0), ("timed_out", 4))
    conn.execute("INSERT INTO x VALUES (?, 'created')")
    sql = f"WHERE state IN ('queued', {row})"
    return row["state"] == "running" and "not a state" and "verify FAILED"
'''
    assert state_literals(source) == [
        (5, "completed"),
        (7, "succeeded"),
        (8, "created"),
        (9, "queued"),
        (10, "running"),
    ]


def test_every_allowance_is_still_needed():
    """An allowance whose word left its file is a hole for the next bare string: drop it."""
    used = set()
    for rel, _word in ALLOWED:
        used |= {(rel, w) for _, w in state_literals((PACKAGE / rel).read_text())}
    assert set(ALLOWED) <= used


def test_the_notice_outbox_reads_the_domains_terminal_sets():
    assert set(notices_q.TERMINAL_EXECUTIONS) == TERMINAL_STATES
    assert set(notices_q.SETTLED_BATCHES) == BATCH_SETTLED
