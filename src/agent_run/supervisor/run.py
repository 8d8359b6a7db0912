"""One execution, start to seal: launch the engine, stream it, obey commands, decide the outcome."""

import errno
import json
import os
import secrets as token_source
import selectors
import shutil
import signal
import sqlite3
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent_run.domain.errors import StorageFull
from agent_run.domain.failures import FailureKind
from agent_run.domain.states import ExecutionState
from agent_run.domain.text import may_hold_surrogates, well_formed
from agent_run.engines.base import (
    Completion,
    ControlAck,
    Engine,
    EngineNote,
    LaunchSpec,
    MessageEvent,
    RetryEvent,
    SendInput,
    SessionStarted,
    SteerJoined,
    Unparsed,
    UsageUpdate,
    WorkerMcp,
)
from agent_run.engines.environment import give_git_identity
from agent_run.engines.plan import load_plan
from agent_run.engines.quota import QuotaEvent
from agent_run.engines.registry import engine_spec
from agent_run.engines.sandbox import (
    bwrap_missing,
    refusal_message,
    sandbox_argv,
    sandbox_refusal,
)
from agent_run.store import agents as agents_q
from agent_run.store import commands as commands_q
from agent_run.store import reports as reports_q
from agent_run.store.db import (
    ChangeWatch,
    connect,
    is_busy,
    is_storage_full,
    on_commit,
    set_busy_timeout,
    until_unlocked,
    write,
)
from agent_run.store.usage import Spend, agent_spend, group_spend
from agent_run.store.wake import Waker
from agent_run.supervisor.budget import Budget, Prices, SpendMeter
from agent_run.supervisor.credentials import EngineCredentials, engine_credentials
from agent_run.supervisor.ending import Ending, EndWriter
from agent_run.supervisor.engine_process import EngineProcess, Escalation
from agent_run.supervisor.eventlog import ExecutionLog
from agent_run.supervisor.identity import ProcessIdentity, adopt_orphans, kill_group
from agent_run.supervisor.outcome import Outcome, StopRequest, decide_outcome
from agent_run.supervisor.priority import lower_priority
from agent_run.supervisor.redact import Redactor
from agent_run.supervisor.retries import RetryWatch
from agent_run.supervisor.seal import keep_reply
from agent_run.supervisor.signin_keeper import SignInKeeper
from agent_run.supervisor.starvation import STARVED_STALLS, Silence
from agent_run.supervisor.stderr_log import StderrLog
from agent_run.supervisor.storage import (
    StorageReserve,
    filesystem_full,
    note,
    patiently,
    reserve_log_space,
    says_storage_full,
)
from agent_run.supervisor.worker_gate import WorkerGate
from agent_run.system.home import Home
from agent_run.worker_tools.binding import SERVER_NAME, token_hash

COMMAND_POLL_SECONDS = 0.2
NO_MORE_INPUT = (
    "the engine takes no more input (its last turn ended, or it exited); start a follow-up instead"
)
STOPPING_TICK_SECONDS = 0.05  # how finely a stop's TERM and KILL steps are timed
USAGE_WRITE_SECONDS = 0.2  # the row's usage lags what the engine reported by at most this
MAX_LINE_BYTES = 8 * 1024 * 1024
STDERR_TAIL_BYTES = 4000


class Supervisor:
    """Raises PlanInvalid when the execution's stored plan cannot be run (`refuse_plan`)."""

    def __init__(self, home: Home, execution_id: str) -> None:
        self.home = home
        self.conn = connect(home.db_path)
        self.waker = Waker(home.wake_path)
        on_commit(self.conn, self.waker.wake)  # the daemon reads the revision at once
        row = agents_q.get_execution(self.conn, execution_id)
        if row is None:
            raise SystemExit(f"no execution {execution_id}")
        self.execution_id = execution_id
        self.plan = load_plan(row["plan_json"])
        set_busy_timeout(self.conn, self.plan.busy_timeout_seconds)  # past it: held, retried
        # From here on this agent yields the CPU (its engine inherits the niceness).
        lower_priority(os.getpid(), self.plan.nice)
        # The engine's orphans (bubblewrap's own init, a tool's leftovers) become ours, not
        # init's: their zombies are reaped as the engine ends (engine_process.reap_group).
        adopt_orphans()
        self.prompt: str = row["prompt"]  # the task, or a resume's prompt: stored once, on the row
        # spend caps, checked as the engine reports usage (supervisor/budget.py)
        self.budget = Budget.of_execution(
            row, agent_spend(self.conn, row["agent_id"], besides=execution_id)
        )
        self.meter = SpendMeter(_prices(row))
        self.group_others: Spend | None = None  # the rest of the spend group, as last read
        self.usage_written_at = 0.0
        self.engine_spec = engine_spec(self.plan.engine)
        self.dir = home.execution_dir(self.plan.agent_id, execution_id)
        self.log = ExecutionLog(
            self.conn,
            self.plan.agent_id,
            execution_id,
            self.plan.runtime,
            account=row["account"],
            raw_path=self.dir / "runtime.jsonl",
            buffer_bytes=self.plan.storage_buffer_bytes,
        )
        self.reserve = StorageReserve(self.dir)
        self.handled_commands: set[int] = set()  # resolved, though maybe not yet written
        self.changes = ChangeWatch(self.conn)  # polls skip their query if nothing changed
        self.retries = RetryWatch(self.plan.runtime_config.retry_give_up_seconds)
        self.silence = Silence(self.plan.stall_seconds)  # the stall watchdog's clock
        self.signalled: int | None = None
        self.child: EngineProcess | None = None
        self.stderr: StderrLog | None = None
        self.payload: dict[str, Any] = {}  # the spawner's: {"secrets": ...} or {"auth_error": ...}
        self.credentials: EngineCredentials | None = None
        self.signin: SignInKeeper | None = None  # a native login's shared credential
        self.stop: StopRequest | None = None
        self.completion: Completion | None = None
        self.completions = 0
        self.turns_outstanding = 1
        self.idle_after_completion = False  # the engine's last event completed a turn
        self.unparsed_lines = 0
        self.engine: Engine = self.engine_spec.factory()
        self.spec: LaunchSpec | None = None
        self.gate: WorkerGate | None = None
        # all the engine sees of the execution's folder
        self.sandbox_dir = home.sandbox_dir(self.plan.agent_id, execution_id)
        # The worker tools' capability: only its hash is stored, with the identity (so it is
        # committed before any engine can hold it, in no transaction of its own).
        self.worker_token = token_source.token_urlsafe(32)

    # -- start-up ---------------------------------------------------------------------------

    def record_identity(self, ready_fd: int | None) -> bool:
        """Install signal handlers, record who we are, then tell the spawner we are ready."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        me = ProcessIdentity.current()

        def take() -> bool:
            with write(self.conn, "the supervisor's identity"):
                state = agents_q.get_execution(self.conn, self.execution_id)["state"]
                if state != ExecutionState.CREATED:
                    return False  # the spawner gave up on us, or another supervisor took it
                agents_q.update_execution(
                    self.conn,
                    self.execution_id,
                    supervisor_pid=me.pid,
                    supervisor_start_ticks=me.start_ticks,
                    boot_id=me.boot_id,
                    worker_token_sha256=token_hash(self.worker_token),
                )
                agents_q.transition(
                    self.conn, self.execution_id, ExecutionState.STARTING, started_at=time.time()
                )
            return True

        try:
            if not patiently(take, "the supervisor's identity"):
                return False
        except StorageFull as exc:
            note(f"storage_full: {exc.message}")
            return False
        if ready_fd is not None:
            # The row is ours now: a spawner that died meanwhile (EPIPE) must not take the
            # execution down with it. The next daemon finds us alive by our recorded identity.
            try:
                os.write(ready_fd, (json.dumps(me.__dict__) + "\n").encode())
            except OSError:
                pass
            finally:
                os.close(ready_fd)
        return True

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.signalled = signum

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:
            self._fail_hard(traceback.format_exc(), storage=is_storage_full(exc))

    def _run(self) -> None:
        engine = self.engine
        self.reserve.take()  # space to record the end in, should the disk fill up meanwhile
        reserve_log_space()  # and for the log lines that would say so
        refusal = self._refusal()
        if refusal is not None:
            self._finish(refusal)
            return
        secrets: dict[str, str] = self.payload.get("secrets") or {}
        token, worker = self._worker_mcp()
        self.credentials = engine_credentials(self.engine_spec.broker_upstream, self.plan, secrets)
        redact = Redactor(
            [
                *secrets.values(),
                *self.credentials.secrets.values(),
                token,
                *(self.payload.get("redact") or []),
            ]
        )
        Path(self.plan.engine_home).mkdir(mode=0o700, parents=True, exist_ok=True)
        give_git_identity(self.plan.engine_home)
        self.signin = SignInKeeper.start(
            self.plan.engine, self.plan.runtime_config.auth, self.plan.engine_home, redact
        )
        spec = self.spec = engine.launch(
            self.credentials.plan, self.credentials.secrets, worker, self.sandbox_dir
        )
        try:
            self.child = EngineProcess.start(self._sandboxed(spec))
        except OSError as exc:
            self._finish(
                Outcome(
                    ExecutionState.FAILED,
                    FailureKind.SPAWN_FAILED,
                    spawn_failure(spec.argv[0], self.plan.runtime, exc),
                )
            )
            return
        lower_priority(self.child.pgid, self.plan.nice)  # its own session's group
        self.stderr = StderrLog(self.child.stderr_fd(), self.dir / "engine.log", redact).start()
        identity = self.child.identity
        self.log.update(
            engine_pid=self.child.pgid,
            engine_start_ticks=identity.start_ticks if identity else None,
        )
        self.log.transition(ExecutionState.RUNNING)
        self.log.flush()
        for data in engine.initial_input(self.plan, self.prompt):
            self._write_stdin(data)
        self._pump(engine, redact)
        self._finish(self._decide(engine, redact))

    def _refusal(self) -> Outcome | None:
        """Why the engine must not start: the spawner's auth error, or no sandbox can start."""
        if "auth_error" in self.payload:
            failure = FailureKind(self.payload.get("failure") or FailureKind.CONFIG_ERROR)
            return Outcome(ExecutionState.FAILED, failure, self.payload["auth_error"])
        if self.plan.runtime_config.sandbox == "bubblewrap":
            # Whether bwrap can start a sandbox here is asked only if the engine then ends
            # without a word (`_sandbox_refusal`): a probe per start cost a bwrap run each.
            missing = bwrap_missing()
            if missing is not None:
                return Outcome(
                    ExecutionState.FAILED, FailureKind.CONFIG_ERROR, refusal_message(missing)
                )
        return None

    def _sandbox_refusal(self, outcome: Outcome) -> Outcome:
        """An engine that ended without completing, and without a line we could not parse, may
        never have started: when bubblewrap cannot start a sandbox here, that is the cause."""
        if (
            outcome.failure is not FailureKind.ENGINE_CRASHED
            or self.plan.runtime_config.sandbox != "bubblewrap"
        ):
            return outcome
        refusal = sandbox_refusal()
        if refusal is None:
            return outcome
        return Outcome(ExecutionState.FAILED, FailureKind.CONFIG_ERROR, refusal_message(refusal))

    def _storage_cause(self, outcome: Outcome, stderr_tail: str) -> Outcome:
        """An engine that crashed saying a disk was full, or while a disk it writes is full,
        ran out of space: `storage_full`, with that evidence, not `engine_crashed`."""
        if outcome.failure is not FailureKind.ENGINE_CRASHED:
            return outcome
        said = says_storage_full(stderr_tail)
        evidence = f"its stderr says: {said}" if said else None
        for path in (self.plan.workdir, self.plan.engine_home, str(self.home.root)):
            free = None if evidence else filesystem_full(Path(path))
            if free is not None:
                evidence = f"the filesystem holding {path} has {free} bytes free"
        if evidence is None:
            return outcome
        note(f"storage_full: the engine ended without completing; {evidence}")
        return Outcome(
            ExecutionState.FAILED,
            FailureKind.STORAGE_FULL,
            f"the engine exited {self.child.proc.returncode if self.child else None} without "
            f"completing, on a full disk: {evidence}"[:1000],
        )

    def _sandboxed(self, spec: LaunchSpec) -> LaunchSpec:
        """The engine's command inside its bubblewrap sandbox (unless `sandbox = "none"`);
        FileNotFoundError, as a bare spawn would raise, when the engine's program is missing."""
        if self.plan.runtime_config.sandbox == "none":
            return spec
        if shutil.which(spec.argv[0], path=spec.env.get("PATH")) is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), spec.argv[0])
        argv = sandbox_argv(self.plan, spec.argv, spec.env, self.sandbox_dir, self.home.root)
        return replace(spec, argv=argv)

    def _worker_mcp(self) -> tuple[str, WorkerMcp]:
        """The capability token (its hash recorded with the identity), kept outside the sandbox
        by the worker gate, and how the engine starts the worker tools (the relay to the gate)."""
        token = self.worker_token
        self.sandbox_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.gate = WorkerGate(
            self.sandbox_dir, self.home.root, self.execution_id, token, self.plan.worker_tools
        )
        return token, self.gate.mcp(SERVER_NAME)

    def _pump(self, engine: Engine, redact: Redactor) -> None:
        """Read the engine's stdout until EOF, obeying commands and watchdogs meanwhile."""
        assert self.child and self.child.proc.stdout
        started = time.monotonic()
        self.silence.event(started)
        self.silence.watch(self.child.pgid)
        next_poll = 0.0
        pending = b""
        stdout = self.child.proc.stdout
        selector = selectors.DefaultSelector()
        selector.register(stdout, selectors.EVENT_READ)
        eof = False
        while not eof:
            for _key, _ in self._readable(selector, next_poll):
                chunk = os.read(stdout.fileno(), 65536)
                if not chunk:
                    eof = True
                    break
                self.silence.event(time.monotonic())
                if self.signin is not None:
                    self.signin.check()  # a token refreshed just now is redacted from this chunk
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._on_line(engine, redact, line)
                if len(pending) > MAX_LINE_BYTES:
                    self._on_line(engine, redact, pending)
                    pending = b""
            now = time.monotonic()
            if self.credentials is not None:
                self.credentials.record_signals(self.log)
            if self.signin is not None:
                self.signin.check()
            if self.log.due() and not self.log.flush() and self.log.exhausted:
                self._request_stop(
                    engine,
                    f"the disk stayed full and the {self.log.buffer_bytes}-byte "
                    f"event buffer is exhausted: {self.log.full_error}",
                    FailureKind.STORAGE_FULL,
                )
            if now >= next_poll:
                next_poll = now + COMMAND_POLL_SECONDS
                self._poll_commands(engine)
                self._read_group()
                self._check_spend()
            self._watchdogs(now, started)
            if self.stop is not None and self.stop.escalation is not None:
                self.child.escalate(self.stop.escalation, now)
        if pending.strip():
            self._on_line(engine, redact, pending)
        self.log.flush()

    def _readable(self, selector: selectors.BaseSelector, next_poll: float) -> list[Any]:
        """The engine's stdout once it has something to read, or nothing after the quiet wait.
        While the database stays locked and the outbox is full, nothing is read (the engine
        waits on its pipe): that silence is the store's, not the engine's."""
        if not self.log.backlogged:
            return selector.select(timeout=self._quiet_wait(next_poll))
        self.log.say_backlogged()
        time.sleep(self._quiet_wait(next_poll))
        self.silence.event(time.monotonic())
        return []

    def _quiet_wait(self, next_poll: float) -> float:
        """How long the pump sleeps if the engine says nothing: until the next command poll or
        the next flush of held events, finer only while a stop is escalating. A silent agent's
        supervisor wakes 5 times a second, not 20; the watchdogs (budgets of seconds) are
        checked at every wake, so at most one poll late."""
        now = time.monotonic()
        wait = next_poll - now
        flush_in = self.log.due_in()
        if flush_in is not None:
            wait = min(wait, flush_in)
        if self.stop is not None:
            wait = min(wait, STOPPING_TICK_SECONDS)
        return min(max(wait, 0.0), COMMAND_POLL_SECONDS)

    def _on_line(self, engine: Engine, redact: Redactor, data: bytes) -> None:
        line = redact(data.decode("utf-8", errors="replace")).strip()
        if not line:
            return
        self.log.raw(line.encode() + b"\n")
        hostile = may_hold_surrogates(line)
        for event in engine.parse_line(line):
            self._on_event(well_formed(event) if hostile else event)

    def _on_event(self, event: object) -> None:
        if not isinstance(event, RetryEvent):
            self.retries.progress()  # anything but a retry is progress
        self.idle_after_completion = isinstance(event, Completion)
        if isinstance(event, SessionStarted):
            self.log.event("session", {"session_id": event.session_id, "model": event.model})
            if event.session_id:
                self.log.update(engine_session_id=event.session_id)
                # Written once this read's lines are handled (with the events that came in the
                # same read), not in a transaction of its own: a resume needs it soon, not alone.
                self.log.flush_soon()
        elif isinstance(event, MessageEvent):
            self.log.message(event.role, event.content, event.name, is_error=event.is_error)
            self.log.event(
                "message", {"role": event.role, "name": event.name, "preview": event.content[:200]}
            )
        elif isinstance(event, RetryEvent):
            self.log.event(
                "retry",
                {"status": event.status, "attempt": event.attempt, "message": event.message[:500]},
            )
            if self.credentials is None or self.credentials.broker is None:
                # Behind a broker the provider's response itself is the signal (with its
                # headers, `record_signals`): the engine's retry of it is not a second one.
                kind = {429: "rate_limited"}.get(event.status or 0, "retry")
                self.log.signal(kind, event.status, None, event.message)
            verdict = self.retries.retry(event)
            if verdict is not None:
                self._request_stop(self.engine, verdict.reason, verdict.kind)
            return
        elif isinstance(event, Completion):
            self._on_completion(event)
        elif isinstance(event, UsageUpdate):  # the running turn's usage so far
            self.meter.turn_so_far(event.usage)
            self._check_spend()
        elif isinstance(event, ControlAck):
            self.log.event("control", {"request_id": event.request_id, "subtype": event.subtype})
        elif isinstance(event, Unparsed):
            self.unparsed_lines += 1
            self.log.event("unparsed", {"line": event.line[:500]})
        elif isinstance(event, SendInput):
            self._write_stdin(event.data)
        elif isinstance(event, SteerJoined):  # the steer opens no turn: the running one answers it
            self.turns_outstanding = max(1, self.turns_outstanding - 1)
            self.log.event("steer_joined", {"turns_outstanding": self.turns_outstanding})
        elif isinstance(event, EngineNote):
            self.log.event(event.kind, event.data)
        elif isinstance(event, QuotaEvent):  # capacity samples (docs/capacity.md, "native")
            self.log.quota(event.windows)

    def _on_completion(self, completion: Completion) -> None:
        self.completion = completion
        self.completions += 1
        self.turns_outstanding -= 1
        self.meter.turn_completed(completion.usage, completion.cost_usd)
        self._check_spend()
        self.log.event(
            "completion",
            {
                "is_error": completion.is_error,
                "subtype": completion.subtype,
                "error_status": completion.error_status,
                "chars": len(completion.text),
            },
        )
        if self.turns_outstanding <= 0:
            self._close_stdin()  # no queued turn: let the engine finish

    # -- spend caps -------------------------------------------------------------------------

    def _check_spend(self) -> None:
        """Stop the run once its spend (or its batch's) passes a cap: on each usage the engine
        reports, and on each command poll (another run of the batch may have passed it)."""
        if self.stop is None:
            over = self.budget.exceeded(self.meter.spend(), self.group_others)
            if over is not None:
                self._request_stop(self.engine, over, FailureKind.BUDGET_EXCEEDED)
        self._write_usage(force=False)

    def _read_group(self) -> None:
        # Another run's usage is written by its own supervisor: a commit ChangeWatch sees.
        if self.budget.group is None:
            return
        try:
            if not self.changes.unchanged("group"):
                self.group_others = group_spend(
                    self.conn, self.budget.group, besides=self.execution_id
                )
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            self.changes.forget("group")  # the next poll reads it

    def _write_usage(self, *, force: bool) -> None:
        """The usage reported so far onto the execution row (through the outbox), at most every
        USAGE_WRITE_SECONDS: the batch's other runs and every view read it from there."""
        now = time.monotonic()
        if self.meter.changed and (force or now - self.usage_written_at >= USAGE_WRITE_SECONDS):
            fields = self.meter.row_fields()
            if fields:
                self.log.update(**fields)
            self.meter.changed = False
            self.usage_written_at = now

    # -- commands and watchdogs -----------------------------------------------------------

    def _poll_commands(self, engine: Engine) -> None:
        if self.signalled is not None and self.stop is None:
            self._request_stop(engine, f"supervisor received signal {self.signalled}", None)
        try:
            if self.changes.unchanged("commands"):  # a command is enqueued by a daemon's commit
                return
            commands = commands_q.pending(self.conn, self.execution_id)
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            self.changes.forget("commands")  # the next poll reads them
            return
        for command in commands:
            if command["id"] in self.handled_commands:
                continue  # resolved; its resolution waits in the log for disk space
            self.handled_commands.add(command["id"])
            if command["kind"] == "cancel":
                self._request_stop(engine, "cancel requested", None)
                self.log.resolve(command, "done", ExecutionState.CANCELLING)
            else:
                state, result = self._steer(engine, json.loads(command["payload"])["text"])
                self.log.resolve(command, state, result)
            self.log.flush()

    def _steer(self, engine: Engine, text: str) -> tuple[str, str]:
        data = engine.steer_input(text)
        if data is None:
            return "refused", f"the {engine.name} engine cannot take input during a run"
        if self.stop is not None:
            return "refused", "the execution is stopping"
        if not self._stdin_open():
            return "refused", NO_MORE_INPUT
        joins = not self.engine_spec.steer_opens_turn  # Codex: joins the running turn
        self._write_stdin(data)
        if not self._stdin_open():  # the write failed: the engine had exited
            return "refused", NO_MORE_INPUT
        if not joins:
            self.turns_outstanding += 1
        self.log.message("user", text, "steer")
        # Claude Code (and the demo's fold_steers) may still take it into the running turn:
        # which one happens is known only later (a `steer_joined` event), so say both.
        return (
            "delivered",
            "added to the running turn"
            if joins
            else "delivered to the engine: answered in the running turn if the engine takes it "
            "in mid-turn (event steer_joined), else as its next turn",
        )

    def _request_stop(self, engine: Engine, reason: str, failure: FailureKind | None) -> None:
        if self.stop is not None:
            return
        grace = self.plan.cancel_grace_seconds
        self.stop = StopRequest(
            reason, failure, Escalation(time.monotonic() + grace, max(grace, 1.0))
        )
        self.log.event("stopping", {"reason": reason, "failure_kind": failure})
        if failure is None:
            self.log.transition(ExecutionState.CANCELLING)
        self.log.flush()
        interrupt = engine.interrupt_input()
        if interrupt is not None and self._stdin_open():
            self._write_stdin(interrupt)
            self._close_stdin()
        else:
            self.stop.escalation.term_at = time.monotonic()

    def _watchdogs(self, now: float, started: float) -> None:
        if self.stop is not None:
            return
        stall = self.plan.stall_seconds
        silence = self.silence
        silence.sample(now)  # the time its engine waited for a CPU is not silence it chose
        if silence.active(now) > stall and self.idle_after_completion:
            self._end_idle_after_completion(stall)
        elif silence.active(now) > stall:
            reason = silence.stalled_reason(stall, now)
            self._request_stop(self.engine, reason, FailureKind.STALLED)
        elif silence.starved > STARVED_STALLS * stall:
            reason = silence.starved_reason(now)
            self._request_stop(self.engine, reason, FailureKind.STARVED)
        elif self.plan.wall_seconds is not None and now - started > self.plan.wall_seconds:
            self._request_stop(
                self.engine,
                f"wall budget of {self.plan.wall_seconds:g}s spent",
                FailureKind.TIMED_OUT,
            )
        elif self.retries.due(now):
            verdict = self.retries.give_up(self._stderr_tail())
            if verdict.status_from_stderr:
                self.log.signal(
                    {429: "rate_limited"}.get(verdict.status, "retry"),
                    verdict.status,
                    None,
                    f"HTTP {verdict.status} on the engine's stderr while it retried",
                )
            self._request_stop(self.engine, verdict.reason, verdict.kind)

    def _stderr_tail(self) -> str:
        """The end of the engine's stderr as stored (not redacted: callers keep no text of it)."""
        try:
            with open(self.dir / "engine.log", "rb") as log:
                log.seek(max(0, os.fstat(log.fileno()).st_size - STDERR_TAIL_BYTES))
                return log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def _end_idle_after_completion(self, stall: float) -> None:
        """Silent since a completed turn: the turn we waited for (a steer the engine took into
        the finished turn) never began. A completed answer is never discarded: it stands, and
        the engine gets end of input (then TERM after the grace) instead of an interrupt."""
        grace = self.plan.cancel_grace_seconds
        self.stop = StopRequest(
            f"idle {stall:g}s after a completed turn; no further turn began",
            None,
            Escalation(time.monotonic() + grace, max(grace, 1.0)),
            answer_stands=True,
        )
        self.log.event("idle_after_completion", {"turns_outstanding": self.turns_outstanding})
        self.log.flush()
        self._close_stdin()

    def _stdin_open(self) -> bool:
        return self.child is not None and self.child.stdin_open()

    def _write_stdin(self, data: bytes) -> None:
        if self.child is not None:
            self.child.write(data)

    def _close_stdin(self) -> None:
        if self.child is not None:
            self.child.close_stdin()

    # -- the end ----------------------------------------------------------------------------

    def _decide(self, engine: Engine, redact: Redactor) -> Outcome:
        assert self.child
        exit_code = self.child.wait(max(self.plan.cancel_grace_seconds, 2.0))
        group_gone, survivors = self.child.reap_group()
        if survivors:
            self.log.event("group_killed", {"pids": survivors, "gone": group_gone})
        self.log.update(exit_code=exit_code)
        stderr_tail = ""
        if self.stderr is not None:
            self.stderr.join()
            stderr_tail = redact(self.stderr.tail())
        finish = until_unlocked(lambda: reports_q.reports(self.conn, self.execution_id, "finish"))
        finish_payload = json.loads(finish[-1]["payload"]) if finish else None
        outcome = decide_outcome(
            engine=engine,
            group_gone=group_gone,
            stop=self.stop,
            completion=self.completion,
            exit_code=exit_code,
            unparsed_lines=self.unparsed_lines,
            stderr_tail=stderr_tail,
            finish=finish_payload,
        )
        outcome = self._sandbox_refusal(outcome)
        outcome = self._storage_cause(outcome, stderr_tail)
        if self.credentials is not None:
            outcome = self.credentials.reclassify(outcome)
        # The answer is decoded text (a `finish` summary never passed through a stored line).
        return replace(outcome, answer=redact(outcome.answer)) if outcome.answer else outcome

    def _finish(self, outcome: Outcome) -> None:
        # What is still held (the exit code, a group kill) is written in the end's own
        # transaction (EndWriter), not in one before it.
        for path in self.spec.token_files if self.spec else []:
            path.unlink(missing_ok=True)  # the capability dies with the execution
        if self.gate is not None:
            self.gate.close()  # the engine is gone: its worker tools end with their relays
        if self.credentials is not None:
            self.credentials.record_signals(self.log)
            self.credentials.close()  # so does the broker's token
        if self.signin is not None:
            self.signin.check()  # a refresh written at the very end still reaches the real file
        fields: dict[str, object] = {"verdict": outcome.verdict, **self.meter.row_fields()}
        if outcome.state is not ExecutionState.SUCCEEDED:
            fields.update(
                failure_kind=outcome.failure.value if outcome.failure else None,
                failure_message=outcome.message,
            )
            if outcome.answer:  # keep an error reply readable, unsealed, for diagnosis
                try:
                    keep_reply(self.dir, outcome.answer)
                except OSError as exc:
                    note(f"reply.md not kept: {exc}")
        if outcome.failure in (FailureKind.RATE_LIMITED, FailureKind.QUOTA_EXHAUSTED):
            self.log.signal(outcome.failure.value, None, None, outcome.message or "")
        sealing = outcome.state is ExecutionState.SUCCEEDED
        ending = Ending(
            outcome.state,
            fields,
            failure=outcome.failure,
            answer=(outcome.answer or "") if sealing else None,
        )
        writer = EndWriter(self.log, self.dir, self.reserve, self.plan.storage_wait_seconds)
        try:
            writer.record(ending)
        finally:
            self.reserve.release()
            self.log.close()

    def _fail_hard(self, trace: str, storage: bool = False) -> None:
        """An internal error (or a full disk where no buffer helps): never leave the engine
        behind or the row undecided."""
        print(trace, flush=True)
        if self.child is not None:
            kill_group(self.child.pgid, signal.SIGKILL)
        kind = FailureKind.STORAGE_FULL if storage else FailureKind.SUPERVISOR_FAILED

        def end() -> None:
            with write(self.conn, "the execution's terminal state"):
                row = agents_q.get_execution(self.conn, self.execution_id)
                if not ExecutionState(row["state"]).terminal:
                    agents_q.transition(
                        self.conn,
                        self.execution_id,
                        ExecutionState.FAILED,
                        failure_kind=kind.value,
                        failure_message=trace.strip().splitlines()[-1][:500],
                    )

        try:
            patiently(end, "the supervisor's failure")
        except StorageFull as exc:
            note(f"storage_full: could not record the supervisor's failure: {exc.message}")
        except Exception:
            print(traceback.format_exc(), flush=True)
        finally:
            self.reserve.release()


def _prices(row: Any) -> Prices | None:
    """The execution's `[prices]` entry, recorded at admission."""
    keys = row.keys()
    if "price_input_per_mtok" not in keys or row["price_input_per_mtok"] is None:
        return None
    return Prices(row["price_input_per_mtok"], row["price_output_per_mtok"] or 0.0)


def spawn_failure(binary: str, runtime: str, exc: OSError) -> str:
    """Why the engine did not start, and the fix (the daemon's PATH is not the user's shell's)."""
    if isinstance(exc, FileNotFoundError) and os.sep not in binary:
        return (
            f"the daemon's PATH has no `{binary}`: set `binary` under [runtimes.{runtime}] to an "
            "absolute path, or restart the daemon from a shell that has it (`agent-run api restart`)"
        )
    return f"cannot start {binary}: {exc.strerror}"
