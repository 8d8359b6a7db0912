"""`[hosts.NAME]` in config.toml: another machine whose own agent-run runs agents, reached with
the system `ssh` (the user's ~/.ssh/config and agent; no password is stored or asked for).

Validated fail-closed like the rest of the config: an error names the dotted field
(`hosts.box.ssh`). docs/scaling.md has the model."""

import re
import shlex
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator

from agent_run.engines.options import StrictModel

HostName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")]

# user@host[:port]: a login name, a host name, alias or IPv4 address, an optional port. Never a
# leading `-` (it would be read as an ssh option) nor a space or shell character.
_TARGET = re.compile(
    r"^(?:(?P<user>[A-Za-z0-9_][A-Za-z0-9._-]{0,63})@)?"
    r"(?P<host>[A-Za-z0-9][A-Za-z0-9.-]{0,252})(?::(?P<port>[0-9]{1,5}))?$"
)


class HostConfig(StrictModel):
    ssh: str = Field(
        description="user@host[:port] (or a Host alias of your ssh config) to run `ssh` to"
    )
    ssh_config: str | None = Field(
        default=None,
        description="an ssh config file (`ssh -F FILE`); default: ssh's own (~/.ssh/config)",
    )
    agent_run: list[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        default_factory=lambda: ["agent-run"],
        min_length=1,
        max_length=16,
        description="the argv of agent-run on the host (default: `agent-run` on its PATH)",
    )
    home: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="the host's agent-run home (default: its own, $AGENT_RUN_HOME or ~/.agent-run)",
    )
    workspace: str = Field(
        default="agent-run-work",
        min_length=1,
        max_length=1024,
        pattern=r"^[^\s'\"\\$`]+$",
        description="where batch repositories and worktrees go on the host (under its home "
        "folder unless absolute)",
    )
    connect_timeout_seconds: float = Field(default=15.0, gt=0, le=300, allow_inf_nan=False)

    @field_validator("ssh")
    @classmethod
    def _a_target(cls, value: str) -> str:
        match = _TARGET.match(value)
        if match is None:
            raise ValueError(
                f"{value!r} is not user@host[:port] (letters, digits, `.`, `_`, `-`; no leading `-`)"
            )
        if match["port"] is not None and not 1 <= int(match["port"]) <= 65535:
            raise ValueError(f"port {match['port']} is not between 1 and 65535")
        return value

    @field_validator("ssh_config")
    @classmethod
    def _an_existing_file(cls, value: str | None) -> str | None:
        if value is None:
            return None
        path = Path(value).expanduser()
        if not path.is_absolute():
            raise ValueError(f"{value} is not an absolute path (~ is allowed)")
        if not path.is_file():
            raise ValueError(f"{path} is not an existing file")
        return str(path)

    def destination(self) -> tuple[str, int | None]:
        """(user@host or host, port or None) for ssh's argv."""
        match = _TARGET.match(self.ssh)
        assert match is not None  # validated
        user = f"{match['user']}@" if match["user"] else ""
        return user + match["host"], int(match["port"]) if match["port"] else None

    def ssh_argv(self, remote: list[str], timeout: float | None = None) -> list[str]:
        """`ssh ... DESTINATION -- COMMAND`: never a prompt (BatchMode), a dead link noticed
        within ~15 s (keep-alives), the command quoted for the host's shell."""
        destination, port = self.destination()
        argv = ["ssh", "-T", "-o", "BatchMode=yes"]
        argv += ["-o", f"ConnectTimeout={int(timeout or self.connect_timeout_seconds)}"]
        argv += ["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
        if self.ssh_config:
            argv += ["-F", self.ssh_config]
        if port is not None:
            argv += ["-p", str(port)]
        return [*argv, destination, "--", shlex.join(remote)]

    def agent_run_argv(self, *args: str) -> list[str]:
        """agent-run on the host with this home: `agent-run [--home H] ARGS`."""
        home = ["--home", self.home] if self.home else []
        return [*self.agent_run, *home, *args]
