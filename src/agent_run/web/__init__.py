"""`agent-run web`: a local browser front-end that talks to the daemon over its socket."""

DEFAULT_PORT = 8787  # light on purpose: the CLI and the quick start import it
