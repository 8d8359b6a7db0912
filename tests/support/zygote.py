"""A fork server for test daemons: `python -m agent_run` without paying its imports every time.

Every test boots its own `agent-run api serve`; most of a boot is importing the daemon's stack
(pydantic models, click, asyncio: over a second of CPU). The zygote imports that stack once,
single-threaded, then forks one child per request; the child becomes a session leader with its
own environment, log file and limits, and runs `python -m agent_run ARGS` exactly as the real
command does (runpy over `agent_run.__main__`). The daemon is still a real, separate process with
its own socket, database connections and threads; only the import is shared, copy-on-write.
(One visible difference: /proc/PID/environ and cmdline show the zygote's exec-time values; the
daemon's os.environ, and so every process it starts, has the requested environment.)

The tests' CLI calls (`tests.harness.cli`) are forked the same way: a child that is not a session
leader, in the test's working directory, with stdin, stdout and stderr on files of the test's,
ending as a Python process ends (non-daemon threads joined, atexit handlers run, a `SystemExit`
message printed), so a CLI call costs a fork instead of a second of imports.

Protocol (one JSON object a line): the test writes {"argv" (after `-m agent_run`), "env", "log"
(stdout and stderr), "nofile_soft"} for a daemon, or {"argv", "env", "cwd", "stdin", "stdout",
"stderr", "cli": true} for a CLI call; the zygote answers {"pid", "serial"} in order, and
{"exited": serial, "code"} (Popen-style: -N for signal N) whenever a child ends, so the test's
handle can poll, wait and read return codes. Exits name the spawn's serial, not its pid: pids
are reused.
"""

import itertools
import json
import os
import selectors
import signal
import sys

# What `api serve` imports by the time it answers ping (measured with -X importtime).
PRELOAD = (
    "agent_run.cli.main",
    "agent_run.daemon.serve",
    "agent_run.rpc.server",
    "agent_run.batches.workflows",
    "agent_run.batches.scheduler",
    "agent_run.services.docs",
    "agent_run.rpc.client",
    "runpy",
    "argparse",
    # `agent-run web`'s stack (tests.web_harness forks it too)
    "agent_run.web.app",
    "uvicorn",
    "uvicorn.config",
    "uvicorn.server",
    "uvicorn.loops.asyncio",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.lifespan.on",
    # the supervisor's stack (its zygote's PRELOAD too, below): the zygote a daemon forks
    # from itself then has it already
    "agent_run.supervisor.zygote",
)


def _run_child(request: dict) -> None:
    """In the forked child: become `python -m agent_run ARGV`; never returns."""
    from agent_run.supervisor.quick_exit import run_then_exit  # preloaded

    def become() -> int:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the only disposition the zygote changed
        if request.get("cli"):
            os.chdir(request["cwd"])
            _stdio(request.get("stdin") or os.devnull, request["stdout"], request["stderr"])
        else:
            os.setsid()
            _stdio(os.devnull, request["log"], request["log"])
        if request.get("nofile_soft") is not None:
            import resource

            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (request["nofile_soft"], hard))
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["-m", *request["argv"]]  # runpy puts the module path in argv[0]
        import runpy

        runpy.run_module("agent_run", run_name="__main__", alter_sys=True)
        return 0

    # as a Python process ends (exit code, traceback, threads joined, atexit run), then at once
    run_then_exit(become)


def _stdio(stdin: str, stdout: str, stderr: str) -> None:
    """Descriptors 0-2 on these files, and fresh sys.std* objects over them: the zygote's own
    wrap its control pipes, whose buffers may already hold the next request."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    fds = [os.open(stdin, os.O_RDONLY), os.open(stdout, flags, 0o600)]
    fds.append(fds[1] if stderr == stdout else os.open(stderr, flags, 0o600))
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    os.closerange(3, 65536)  # the zygote's control pipes and selector are not the child's
    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    sys.stdin = open(0, encoding=encoding, errors=errors, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding=encoding, errors=errors, closefd=False)  # noqa: SIM115
    sys.stderr = open(
        2, "w", encoding=encoding, errors="backslashreplace", closefd=False, buffering=1
    )


def _reap(out, serials: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        serial = serials.pop(pid, None)
        out.write(json.dumps({"exited": serial, "code": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()


def serve() -> None:
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:  # moved or renamed: the child imports what it needs as usual
            pass
    for name in sys.modules["agent_run.supervisor.zygote"].PRELOAD:
        __import__(name)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    control, out = sys.stdin.buffer, sys.stdout
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    out.write(json.dumps({"ready": os.getpid()}) + "\n")
    out.flush()
    serials: dict[int, int] = {}  # a pid is reused once reaped: exits name the spawn, not the pid
    counter = itertools.count(1)
    while True:
        for key, _ in selector.select():
            if key.fileobj == wake_read:
                os.read(wake_read, 4096)
                _reap(out, serials)
                continue
            line = control.readline()
            if not line:
                return  # the test process is gone: its daemons are its fixtures' to stop
            pid = os.fork()
            if pid == 0:
                _run_child(json.loads(line))
            serials[pid] = next(counter)
            out.write(json.dumps({"pid": pid, "serial": serials[pid]}) + "\n")
            out.flush()
        _reap(out, serials)


if __name__ == "__main__":
    serve()
