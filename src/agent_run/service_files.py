"""Service definitions (launchd, systemd --user) that keep `agent-run api serve` running."""

import sys
from xml.sax.saxutils import escape

from agent_run.home import Home


def _systemd_quote(arg: str) -> str:
    """Quote one ExecStart argument the way systemd.syntax(7) reads it."""
    if arg and not any(c in arg for c in ' \t"\'\\;$%'):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def systemd_unit(home: Home) -> str:
    exec_start = " ".join(_systemd_quote(a) for a in (sys.executable, "-m", "agent_run", "--home",
                                                      str(home.root), "api", "serve"))
    return f"""# ~/.config/systemd/user/agent-run.service
# systemctl --user daemon-reload && systemctl --user enable --now agent-run
[Unit]
Description=agent-run daemon ({home.root})

[Service]
ExecStart={exec_start}
Restart=on-failure
RestartSec=2
# Agents run under their own supervisors: stopping the daemon must not kill them.
KillMode=process

[Install]
WantedBy=default.target
"""


def launchd_plist(home: Home) -> str:
    args = "".join(f"\n      <string>{escape(a)}</string>"
                   for a in (sys.executable, "-m", "agent_run", "--home", str(home.root), "api", "serve"))
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- ~/Library/LaunchAgents/dev.agent-run.daemon.plist ; launchctl load -w that file -->
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
  <dict>
    <key>Label</key>
    <string>dev.agent-run.daemon</string>
    <key>ProgramArguments</key>
    <array>{args}
    </array>
    <key>KeepAlive</key>
    <true/>
    <key>RunAtLoad</key>
    <true/>
    <key>AbandonProcessGroup</key>
    <true/>
    <key>StandardErrorPath</key>
    <string>{escape(str(home.logs_dir / "daemon.out"))}</string>
  </dict>
</plist>
"""
