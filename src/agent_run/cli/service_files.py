"""Service definitions (launchd, systemd --user) that keep `agent-run api serve` running; the
label and unit name carry a digest of the home, so two homes never collide."""

import hashlib
import plistlib
import sys

from agent_run.system.home import Home


def home_tag(home: Home) -> str:
    """8 hex digits naming the home in a service name (sha256 of its absolute path)."""
    return hashlib.sha256(str(home.root).encode()).hexdigest()[:8]


def launchd_label(home: Home) -> str:
    return f"dev.agent-run.daemon.{home_tag(home)}"


def systemd_unit_name(home: Home) -> str:
    return f"agent-run-{home_tag(home)}.service"


def _argv(home: Home) -> list[str]:
    return [sys.executable, "-m", "agent_run", "--home", str(home.root), "api", "serve"]


def _systemd_quote(arg: str) -> str:
    """Quote one ExecStart argument the way systemd.syntax(7) reads it."""
    if arg and not any(c in arg for c in " \t\"'\\;$%"):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def systemd_unit(home: Home) -> str:
    name = systemd_unit_name(home)
    exec_start = " ".join(_systemd_quote(a) for a in _argv(home))
    return f"""# ~/.config/systemd/user/{name}
# agent-run api stop   (an autostarted daemon holds the home's lock: stop it first)
# systemctl --user daemon-reload && systemctl --user enable --now {name}
[Unit]
Description=agent-run daemon ({home.root})

[Service]
ExecStart={exec_start}
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=2
# Agents run under their own supervisors: stopping the daemon must not kill them.
KillMode=process

[Install]
WantedBy=default.target
"""


def launchd_plist(home: Home) -> str:
    label = launchd_label(home)
    body = plistlib.dumps(
        {
            "Label": label,
            "ProgramArguments": _argv(home),
            "KeepAlive": {"SuccessfulExit": False},  # `agent-run api stop` (exit 0) stays stopped
            "RunAtLoad": True,
            "AbandonProcessGroup": True,  # agents outlive the daemon
            "StandardErrorPath": str(home.logs_dir / "daemon.out"),
        },
        sort_keys=False,
    ).decode()
    head, rest = body.split("\n", 1)
    return (
        f"{head}\n<!-- ~/Library/LaunchAgents/{label}.plist\n"
        f"     agent-run api stop   (an autostarted daemon holds the home's lock: stop it first)\n"
        f"     launchctl bootstrap gui/$(id -u) ~/Library/LaunchAgents/{label}.plist -->\n{rest}"
    )
