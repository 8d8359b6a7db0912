"""The explicit environments agent-run starts processes with: allowlists, nothing inherited."""

import os
from pathlib import Path

from agent_run.engines.plan import ExecutionPlan

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")
# Variables passed through from the supervisor's own environment when set; nothing else is.
# Proxies pass so that the credential broker (and the model's own tools) can reach out.
PASSTHROUGH = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TERM",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    *PROXY_VARIABLES,
)
# Commands agent-run runs itself (a batch's verify_command) also get who and where the user is.
COMMAND_PASSTHROUGH = (*PASSTHROUGH, "HOME", "USER", "LOGNAME", "SHELL")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def allowlisted(names: tuple[str, ...]) -> dict[str, str]:
    env = {name: os.environ[name] for name in names if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    if any(name in env for name in PROXY_VARIABLES[:4]):
        # The engine reaches the credential broker on loopback: never through a proxy.
        listed = [
            h for h in (env.get("NO_PROXY") or env.get("no_proxy") or "").split(",") if h.strip()
        ]
        env["NO_PROXY"] = env["no_proxy"] = ",".join(
            [*listed, *(h for h in _LOOPBACK if h not in listed)]
        )
    return env


def command_environment() -> dict[str, str]:
    """For a command agent-run runs on the user's behalf (verify_command): never the daemon's keys."""
    return allowlisted(COMMAND_PASSTHROUGH)


# The git identity of the engine's generated home (its `~/.gitconfig`): the user's real home is
# never read, and git run by the model (`git merge`, `git commit`) refuses to work without one.
# A repository's own user.name / user.email win over it; create_commit commits as agent-run too.
GIT_IDENTITY = "[user]\n\tname = agent-run\n\temail = agent-run@localhost\n"


def give_git_identity(engine_home: str) -> None:
    """Write the engine home's `.gitconfig` naming agent-run, unless it has one (the model's
    own, or an earlier execution's): never through a link, readable by the owner only. One
    that cannot be written (a full disk) leaves the engine as it was without it."""
    try:
        fd = os.open(
            Path(engine_home) / ".gitconfig",
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
    except OSError:  # there already (FileExistsError), or not to be had
        return
    try:
        os.write(fd, GIT_IDENTITY.encode())
    except OSError:  # a part of it would be a config git cannot read
        os.unlink(Path(engine_home) / ".gitconfig")
    finally:
        os.close(fd)


def base_environment(plan: ExecutionPlan) -> dict[str, str]:
    env = allowlisted(PASSTHROUGH)
    env["HOME"] = plan.engine_home
    env["PWD"] = plan.workdir
    env["AGENT_RUN_AGENT_ID"] = plan.agent_id
    env["AGENT_RUN_EXECUTION_ID"] = plan.execution_id
    env["PYTHONUNBUFFERED"] = "1"
    return env


def single_secret(secrets: dict[str, str]) -> str | None:
    """The runtime's one credential value (auth names one variable or one file)."""
    return next(iter(secrets.values()), None)
