"""The doctor's canary: a real detached supervisor spawn that reports its identity and exits."""

import json
import os
import signal

from agent_run.supervisor.identity import ProcessIdentity


def run_canary(ready_fd: int | None) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    me = ProcessIdentity.current()
    report = {**me.__dict__, "sid": os.getsid(0), "pgid": os.getpgid(0)}
    if ready_fd is not None:
        os.write(ready_fd, (json.dumps(report) + "\n").encode())
        os.close(ready_fd)
    return 0
