"""Entry point of a detached supervisor: `python -m agent_run.supervisor --home H --execution E`."""

import argparse
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser(prog="agent-run-supervisor")
    parser.add_argument("--home", required=True)
    parser.add_argument("--execution")
    parser.add_argument("--ready-fd", type=int)
    parser.add_argument(
        "--canary",
        action="store_true",
        help="record identity and signal handlers, report, exit (doctor)",
    )
    args = parser.parse_args()
    if args.canary:
        os.umask(0o077)
        from agent_run.supervisor.canary import run_canary

        return run_canary(args.ready_fd)
    return run_supervisor(args.home, args.execution, args.ready_fd)


def run_supervisor(home_root: str, execution_id: str, ready_fd: int | None) -> int:
    """Run one execution to its end (a forked zygote child calls this directly: no argv to
    parse)."""
    os.umask(0o077)
    from agent_run.engines.plan import PlanInvalid
    from agent_run.supervisor.refuse import refuse_plan
    from agent_run.supervisor.run import Supervisor
    from agent_run.supervisor.secrets import read_payload
    from agent_run.system.home import Home

    payload = read_payload(sys.stdin.buffer)  # the credential, from the spawner, over a pipe
    home = Home.resolve(home_root)
    try:
        supervisor = Supervisor(home, execution_id)
    except PlanInvalid as exc:
        print(exc.message, file=sys.stderr)
        refuse_plan(home, execution_id, exc.message)
        return 1
    if payload is None and supervisor.plan.runtime_config.auth:
        print(
            "no credential payload on stdin (the spawner went away): exiting unrecorded",
            file=sys.stderr,
        )
        return 1  # the row stays `created`, for a later spawn
    supervisor.payload = payload or {}
    if not supervisor.record_identity(ready_fd):
        return 1
    supervisor.run()
    return 0


if __name__ == "__main__":
    from agent_run.supervisor.quick_exit import run_then_exit

    run_then_exit(main)  # no interpreter teardown: ~15 ms of CPU per agent, after its seal
