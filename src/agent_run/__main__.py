"""`python -m agent_run`: the same CLI as the `agent-run` script."""

from agent_run.cli.main import main

main()
