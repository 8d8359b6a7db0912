"""The explicit environment every engine child starts from: an allowlist, nothing inherited."""

import os

from agent_run.engines.base import ExecutionPlan

# Variables passed through from the supervisor's own environment when set; nothing else is.
PASSTHROUGH = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "TMPDIR", "SSL_CERT_FILE",
               "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS")


def base_environment(plan: ExecutionPlan) -> dict[str, str]:
    env = {name: os.environ[name] for name in PASSTHROUGH if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["HOME"] = plan.engine_home
    env["PWD"] = plan.workdir
    env["AGENT_RUN_AGENT_ID"] = plan.agent_id
    env["AGENT_RUN_EXECUTION_ID"] = plan.execution_id
    env["PYTHONUNBUFFERED"] = "1"
    return env


def single_secret(secrets: dict[str, str]) -> str | None:
    """The runtime's one credential value (auth names one variable or one file)."""
    return next(iter(secrets.values()), None)
