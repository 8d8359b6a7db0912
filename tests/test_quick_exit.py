"""A supervisor's process ends as the interpreter's visible shutdown would, without its
teardown (`supervisor.quick_exit`): run in a child interpreter, since it ends the process."""

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import atexit, sys, threading, time
    from agent_run.supervisor.quick_exit import run_then_exit

    class Noisy:
        def __del__(self):
            print("torn down", flush=True)

    KEPT = Noisy()  # freed only by the interpreter's teardown
    atexit.register(lambda: print("atexit ran", flush=True))

    def late():
        time.sleep(0.2)
        print("thread joined", flush=True)

    def work():
        threading.Thread(target=late).start()  # not a daemon thread: joined before the exit
        sys.stdout.write("buffered, not flushed")
        return int(sys.argv[1]) if sys.argv[1].isdigit() else eval(sys.argv[1])

    run_then_exit(work)
    print("never reached")
    """
)


def run(outcome: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, outcome],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONUNBUFFERED": "", "PATH": "/usr/bin:/bin"},
    )


def test_a_supervisor_exits_with_its_code_after_threads_and_atexit_without_the_teardown():
    done = run("3")
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith("buffered, not flushed")
    assert "thread joined" in done.stdout and "atexit ran" in done.stdout
    assert done.stdout.index("thread joined") < done.stdout.index("atexit ran")
    assert "torn down" not in done.stdout and "never reached" not in done.stdout


def test_a_supervisor_that_raises_prints_the_traceback_and_exits_1():
    done = run("1/0")
    assert done.returncode == 1
    assert "ZeroDivisionError" in done.stderr and "Traceback" in done.stderr
    assert "thread joined" in done.stdout and "atexit ran" in done.stdout


def test_a_supervisor_that_calls_sys_exit_gets_the_interpreters_codes():
    exited = run("sys.exit(7)")
    assert exited.returncode == 7 and "atexit ran" in exited.stdout
    assert run("sys.exit()").returncode == 0
    refused = run("sys.exit('no execution given')")
    assert refused.returncode == 1 and "no execution given" in refused.stderr
