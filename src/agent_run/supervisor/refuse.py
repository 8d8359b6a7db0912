"""An execution whose stored plan cannot be run ends `failed` / `config_error`, not in a traceback."""

from agent_run.domain.errors import StorageFull
from agent_run.domain.failures import FailureKind
from agent_run.domain.states import ExecutionState
from agent_run.store import agents as agents_q
from agent_run.store import commands as commands_q
from agent_run.store.db import connect, on_commit, write
from agent_run.store.wake import Waker
from agent_run.supervisor.storage import note, patiently
from agent_run.system.home import Home


def refuse_plan(home: Home, execution_id: str, message: str) -> None:
    """Fail the execution with `message` if no supervisor has taken it yet (it is `created`).

    The spawner then sees the ready pipe close and finds the row already decided.
    """
    conn = connect(home.db_path)
    waker = Waker(home.wake_path)
    on_commit(conn, waker.wake)  # the daemon's waiters learn of the refusal at once

    def refuse() -> None:
        with write(conn, "the execution's refusal"):
            row = agents_q.get_execution(conn, execution_id)
            if row is None or row["state"] != ExecutionState.CREATED:
                return
            agents_q.transition(
                conn,
                execution_id,
                ExecutionState.FAILED,
                failure_kind=FailureKind.CONFIG_ERROR.value,
                failure_message=message[:500],
            )
            for command in commands_q.pending(conn, execution_id):
                commands_q.resolve(
                    conn, command, state="refused", result="the execution plan is invalid"
                )

    try:
        patiently(refuse, "the execution's refusal")
    except StorageFull as exc:
        note(f"storage_full: could not record the refusal: {exc.message}")
    finally:
        conn.close()
        waker.close()
