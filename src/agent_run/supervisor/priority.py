"""Agents yield the CPU to the daemon and to the user's own work: a niceness for an agent's
processes and, on Linux, for its sessions' scheduling groups.

Linux puts each session in a scheduling group of its own (autogroup) and shares the CPU
between groups: without this, 50 agents (a supervisor's session and an engine's each) would
get 100 shares of a busy machine for the daemon's one and the user's desktop's one, and the
daemon's replies would wait behind them. Raising a niceness needs no privilege; lowering it
back would, so an agent never asks for more than the default.
"""

import os


def lower_priority(pid: int, nice: int) -> None:
    """Give process `pid` (ours) the niceness `nice`, and its session's group too; best effort:
    a platform without the knob runs the agent at the default priority."""
    if nice <= 0:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, pid, max(nice, os.getpriority(os.PRIO_PROCESS, pid)))
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/autogroup", "w") as group:  # the session's group (Linux)
            group.write(str(nice))
    except OSError:  # no autogroup here, or the process is gone
        pass
