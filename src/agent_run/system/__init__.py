"""What agent-run uses of the machine: the home folder, log files, git, process identity."""
