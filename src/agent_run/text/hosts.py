"""Text renderers of the `hosts` and `abandon` results (registered in `text.render.RENDERERS`)."""

from typing import Any


def hosts(result: Any) -> str:
    if not result.items:
        return 'no host configured: add a [hosts.NAME] table with ssh = "user@host[:port]"'
    lines = []
    for h in result.items:
        if h.connected:
            link = (
                f"connected (agent-run {h.version}, daemon pid {h.daemon_pid}, ssh pid {h.ssh_pid})"
            )
        else:
            link = "not connected"
        agents = f"{h.live_agents} live agent(s)" + (
            f", {h.unreachable_agents} unreachable" if h.unreachable_agents else ""
        )
        lines.append(f"{h.name:<12} {h.ssh}  {link}; {agents}")
        if h.last_error:
            lines.append(f"  last error: {h.last_error_code}: {h.last_error}")
    return "\n".join(lines)


def abandon(result: Any) -> str:
    return f"{result.agent_id}: {result.state} - {result.message}"


def mirror_page(page: Any) -> str:
    return (
        f"{page.agent_id}: {page.execution.state}, {len(page.events)} event(s), "
        f"{len(page.messages)} message(s) after the cursors (revision {page.revision})"
    )


RENDERERS = {"HostsResult": hosts, "AbandonResult": abandon, "MirrorPage": mirror_page}
