"""Entry point of a detached supervisor: `python -m agent_run.supervisor --home H --execution E`."""

import argparse
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser(prog="agent-run-supervisor")
    parser.add_argument("--home", required=True)
    parser.add_argument("--execution")
    parser.add_argument("--ready-fd", type=int)
    parser.add_argument("--canary", action="store_true",
                        help="record identity and signal handlers, report, exit (doctor)")
    args = parser.parse_args()
    os.umask(0o077)
    if args.canary:
        from agent_run.supervisor.canary import run_canary

        return run_canary(args.ready_fd)

    from agent_run.home import Home
    from agent_run.supervisor.run import Supervisor

    supervisor = Supervisor(Home.resolve(args.home), args.execution)
    if not supervisor.record_identity(args.ready_fd):
        return 1
    supervisor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
