"""The worker-tools gate: a Unix socket in the execution's sandbox folder, and outside the
sandbox one worker-tools server per connection, holding the token and the database.

The engine's MCP config names the relay (`agent_run.worker_tools.relay SOCKET`); the token,
`$AGENT_RUN_HOME` and `state.db` never enter the engine's sandbox.
"""

import socket
import subprocess
import sys
import threading
from pathlib import Path

from agent_run.engines.base import WorkerMcp

SOCKET_NAME = "worker.sock"
REAP_SECONDS = 5.0


class WorkerGate:
    def __init__(self, sandbox_dir: Path, server_env: dict[str, str], tools: list[str]) -> None:
        self.path = sandbox_dir / SOCKET_NAME
        self.server_env = server_env
        self.tools = tools
        self.path.unlink(missing_ok=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(8)
        self.servers: list[subprocess.Popen[bytes]] = []
        self.closed = False
        threading.Thread(target=self._accept, name="worker-gate", daemon=True).start()

    def mcp(self, name: str) -> WorkerMcp:
        """How the engine starts the worker tools: the relay to this gate, no secret in it."""
        return WorkerMcp(
            name=name,
            command=sys.executable,
            args=["-m", "agent_run.worker_tools.relay", str(self.path)],
            env={},
            tools=self.tools,
        )

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            with conn:
                self.servers.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "agent_run.worker_tools"],
                        stdin=conn.fileno(),
                        stdout=conn.fileno(),
                        stderr=subprocess.DEVNULL,
                        env=self.server_env,
                        start_new_session=True,
                    )
                )

    def close(self) -> None:
        """Stop accepting; the servers end when their relays close (killed if they linger)."""
        self.closed = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        self.path.unlink(missing_ok=True)
        for server in list(self.servers):
            try:
                server.wait(timeout=REAP_SECONDS)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
