"""The stall watchdog's clock: how long the engine has been silent, less the time its processes
spent runnable but waiting for a CPU.

A starved engine (it has work to do, but a busy machine gives it no CPU) and a stalled one (it
waits on a provider that does not answer) both use almost no CPU time; only the kernel's
run-queue wait, counted per thread (`processes.ProcessTable.threads_sched`: `/proc` schedstat
on Linux), tells them apart. Where it is not counted nothing is credited: the clock is the
silence itself, as before.
"""

import time

from agent_run.system.processes import ProcessTable, ThreadSched, current

# An engine kept from the CPU for this many stall windows of one silence is ended `starved`.
STARVED_STALLS = 3
# The engine's threads are read once it has been silent for this share of the stall window (a
# silence that short ends no run; most never last that long, so most runs read nothing), then
# every hundredth of the window, within these bounds: a read scans the process table for the
# group and reads a small /proc file or two per thread.
SAMPLE_AFTER_STALL_SHARE = 0.25
# A thread counts as kept from the CPU in an interval when it wanted it (ran or waited) for at
# least this share of the interval; then its wait in it is credited.
RUNNABLE_SHARE = 0.9
SAMPLE_MIN_SECONDS = 0.2
SAMPLE_MAX_SECONDS = 5.0


class Silence:
    """Since the engine's last event: the wall time, and the seconds its process group spent
    waiting for a CPU (`starved`). Once the silence has lasted a quarter of the stall window,
    the group's threads are read every period; each interval between two reads credits the
    longest run-queue wait in it of a thread that wanted the CPU nearly all along (threads
    waiting side by side are one engine kept waiting).

    The kernel adds a wait to a thread's count only when the wait ends (the thread runs): a
    thread runnable at both reads that did not run in between waited the whole interval, and
    is credited it now; what its count later adds for that wait is not credited twice."""

    def __init__(self, stall_seconds: float, table: ProcessTable | None = None) -> None:
        self.table = table or current()
        self.after = stall_seconds * SAMPLE_AFTER_STALL_SHARE
        self.period = min(max(stall_seconds / 100, SAMPLE_MIN_SECONDS), SAMPLE_MAX_SECONDS)
        self.since = time.monotonic()  # the engine's last event (or its start)
        self.starved = 0.0
        self.pgid: int | None = None
        self._threads: dict[int, ThreadSched] | None = None  # at the last read of this silence
        self._owed: dict[int, int] = {}  # ns credited while waiting, not yet in the thread's count
        self._read_at = 0.0

    def watch(self, pgid: int) -> None:
        """The engine's process group, whose threads' waits count (where they are counted)."""
        if self.table.threads_sched([]) is not None:
            self.pgid = pgid

    def event(self, now: float) -> None:
        """The engine said something (or the supervisor stopped reading it): a new silence."""
        self.since = now
        self.starved = 0.0
        self._threads, self._owed = None, {}

    def silent(self, now: float) -> float:
        return now - self.since

    def active(self, now: float) -> float:
        """The silence less the time the engine waited for a CPU: what the stall window
        measures."""
        return now - self.since - self.starved

    def sample(self, now: float) -> None:
        """Read the group's threads (once the silence is long enough, at most once a period)
        and credit their wait since the last read to this silence."""
        if self.pgid is None or self.silent(now) < self.after or now - self._read_at < self.period:
            return
        threads = self.table.threads_sched(self.table.group_members(self.pgid))
        if threads is None:  # not counted here: nothing is credited
            return
        if self._threads is not None and now > self._read_at:
            interval = now - self._read_at
            self.starved += self._waited(threads, round(interval * 1e9)) / 1e9
        self._threads, self._read_at = threads, now

    def _waited(self, threads: dict[int, ThreadSched], interval_ns: int) -> int:
        """Nanoseconds of the interval the engine was kept waiting: the longest wait of a thread
        that wanted the CPU (ran or waited) for at least RUNNABLE_SHARE of it. A thread that
        wakes now and then (a timer, an idle event loop) waits in the queue too on a busy
        machine, but is not held back from work: its waits are not counted."""
        assert self._threads is not None
        longest = 0
        owed: dict[int, int] = {}
        for tid, now in threads.items():
            before = self._threads.get(tid)  # none: born since, all its wait is new
            counted = now.waited_ns - (before.waited_ns if before else 0)
            already = self._owed.get(tid, 0)
            waited = max(0, counted - already)
            owed[tid] = max(0, already - counted)
            ran = now.ran_ns - (before.ran_ns if before else 0)
            if before and before.runnable and now.runnable and ran == 0:
                waited += interval_ns  # runnable all along and never ran: waiting still
                owed[tid] += interval_ns
            if waited + ran >= RUNNABLE_SHARE * interval_ns:
                longest = max(longest, waited)
        self._owed = owed  # threads that ended are forgotten
        return min(longest, interval_ns)

    def stalled_reason(self, stall_seconds: float, now: float) -> str:
        reason = f"no engine event for {stall_seconds:g}s"
        if self.starved >= 1:
            reason += (
                f" of its own time (silent {self.silent(now):.0f}s, of which {self.starved:.0f}s "
                "waiting for a CPU, not counted)"
            )
        return reason

    def starved_reason(self, now: float) -> str:
        return (
            f"no engine event for {self.silent(now):.0f}s, {self.starved:.0f}s of it spent "
            "waiting for a CPU: the machine is too busy to run this agent"
        )
