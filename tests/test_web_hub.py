"""The web process's change hub on a real daemon: one `changes` call at a time, at most ten a
second while a busy batch changes the store constantly, and nothing missed."""

import asyncio
import time

from agent_run.web.hub import NOW, ChangeHub
from agent_run.web.proxy import DaemonProxy
from tests.harness import wait_for_async


class RecordingProxy(DaemonProxy):
    """The web's own daemon client, keeping the time of each `changes` call it makes to follow
    the daemon (not the one-off `changes(NOW)` that reads the revision to start from: it comes
    right before the first long-poll, unpaced, so streams can say hello at once)."""

    def __init__(self, home) -> None:
        super().__init__(home)
        self.changes_calls: list[float] = []

    async def call(self, method, params=None):
        if method == "changes" and params["after_revision"] != NOW:
            self.changes_calls.append(time.monotonic())
        return await super().call(method, params)


def test_the_hub_asks_at_most_ten_times_a_second_and_misses_no_change(daemon, workdir):
    async def scenario():
        proxy = RecordingProxy(daemon.home)
        hub = ChangeHub(proxy)
        hub.start()
        await wait_for_async(lambda: hub.connected, what="the hub to follow the daemon")
        agents = [
            await proxy.call(
                "start",
                {"task": f"steps: 20\nstep_seconds: 0.05\nanswer: {n}", "workdir": str(workdir)},
            )
            for n in range(8)
        ]
        for agent in agents:
            await proxy.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
        calls = list(proxy.changes_calls)
        final = (await proxy.call("changes", {"after_revision": 0}))["revision"]
        await wait_for_async(
            lambda: hub.revision is not None and hub.revision >= final, what="the hub to catch up"
        )
        seen = frozenset().union(*(c.agents for c in hub.history))
        return calls, seen, {a["id"] for a in agents}

    calls, seen, started = asyncio.run(scenario())
    assert started <= seen  # every agent's changes reached the hub
    assert len(calls) >= 5
    for n in range(len(calls) - 10):
        assert calls[n + 10] - calls[n] >= 0.99, "more than ten `changes` calls in a second"
