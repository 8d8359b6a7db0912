"""`agent-run web`: a local browser front-end that talks to the daemon over its socket."""
