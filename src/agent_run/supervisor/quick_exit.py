"""Ending a supervisor's process without the interpreter's teardown.

Py_Finalize frees every module and object one by one: about 15 ms of CPU for a supervisor, all
of it after its execution is sealed, and paid by every agent (a burst of 100 is CPU-bound).
Nothing of it is needed: a supervisor closes its database, logs and engine pipes itself. So
it ends as the interpreter's visible shutdown would (non-daemon threads joined, atexit handlers
run, stdout and stderr flushed) and then `os._exit`. A supervisor forked from the daemon's
zygote must end this way anyway: the daemon's finalizers would act on descriptors it reuses.
"""

import atexit
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import NoReturn


def run_then_exit(work: Callable[[], int]) -> NoReturn:
    """Run `work` as a process's main, with the exit code and traceback the interpreter would
    give it, then end the process at once."""
    code = 1
    try:
        try:
            code = work()
        except SystemExit as exc:
            code = exit_code(exc)
        except BaseException:  # noqa: BLE001 - printed as the interpreter would, on stderr
            traceback.print_exc()
            code = 1
        code = finish_like_python(code)  # after an error too, as the interpreter does
    except BaseException:  # noqa: BLE001 - an atexit handler or a joined thread's exit
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def exit_code(exc: SystemExit) -> int:
    """What the interpreter would exit with; a non-int code is printed to stderr first."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def finish_like_python(code: int) -> int:
    """Interpreter shutdown's visible part: join non-daemon threads, then run atexit handlers."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # what Py_Finalize calls first
    except SystemExit as exc:
        code = exit_code(exc)
    atexit._run_exitfuncs()
    return code
