"""The worker-tools gate: a Unix socket in the execution's sandbox folder, and outside the
sandbox, in the supervisor itself, one worker-tools server thread per connection, holding the
token (and, from its first call, a database connection of its own).

The engine's MCP config names the relay (`python -I -S .../worker_tools/relay.py SOCKET`);
the token, `$AGENT_RUN_HOME` and `state.db` never enter the engine's sandbox. The tools are
served here, not by a process per connection: the supervisor already runs outside the sandbox
with the token and the database, so a connection costs a thread, not an interpreter's start
and memory.
"""

import socket
import sys
import threading
import time
import traceback
from pathlib import Path

from agent_run.engines.base import WorkerMcp
from agent_run.system import unix_sockets
from agent_run.system.home import WORKER_SOCKET
from agent_run.worker_tools import relay
from agent_run.worker_tools.server import serve_connection

SOCKET_NAME = WORKER_SOCKET
# How long `close` lets a call in flight finish (a `create_commit`'s git) before it cuts the
# connections it still holds.
REAP_SECONDS = 5.0
# Connections served at once: an engine opens one per MCP server it starts; one past this is
# closed at once (a runaway client cannot make the supervisor start threads without bound).
MAX_CONNECTIONS = 8
ACCEPT_RETRY_SECONDS = 0.1


class WorkerGate:
    def __init__(
        self, sandbox_dir: Path, home: Path, execution_id: str, token: str, tools: list[str]
    ) -> None:
        self.path = sandbox_dir / SOCKET_NAME
        self.home, self.execution_id, self.token, self.tools = home, execution_id, token, tools
        self.path.unlink(missing_ok=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix_sockets.bind(self.listener, self.path)  # a path of any length (0600)
        self.listener.listen(MAX_CONNECTIONS)
        self.lock = threading.Lock()
        self.connections: dict[socket.socket, threading.Thread] = {}  # those being served
        self.closed = False
        threading.Thread(target=self._accept, name="worker-gate", daemon=True).start()

    def mcp(self, name: str) -> WorkerMcp:
        """How the engine starts the worker tools: the relay to this gate, no secret in it."""
        return WorkerMcp(
            name=name,
            command=sys.executable,
            args=["-I", "-S", relay.__file__, str(self.path)],  # the smallest interpreter
            env={},
            tools=self.tools,
        )

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                if self.closed:
                    return
                # Out of descriptors or buffers (EMFILE, ENOBUFS), or a client that hung up
                # first: the gate lives on and accepts the next.
                time.sleep(ACCEPT_RETRY_SECONDS)
                continue
            with self.lock:
                if self.closed or len(self.connections) >= MAX_CONNECTIONS:
                    conn.close()
                    continue
                thread = threading.Thread(
                    target=self._serve, args=(conn,), name="worker-tools", daemon=True
                )
                self.connections[conn] = thread
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn.makefile("rb") as reader, conn.makefile("wb") as writer:
                serve_connection(
                    self.home, self.execution_id, self.token, self.tools, reader, writer
                )
        except OSError:
            pass  # the relay went away mid-message, or `close` cut the connection
        except Exception:  # noqa: BLE001 - a broken database: the relay sees its server end
            print("worker-tools server failed:", file=sys.stderr)
            traceback.print_exc()
        finally:
            with self.lock:
                self.connections.pop(conn, None)
            conn.close()

    def close(self) -> None:
        """Stop accepting; let the calls in flight finish (up to REAP_SECONDS), then end the
        connections still open (their relays see the end of their server)."""
        self.closed = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        self.path.unlink(missing_ok=True)
        deadline = time.monotonic() + REAP_SECONDS
        for thread in self._threads():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        with self.lock:
            lingering = list(self.connections)
        for conn in lingering:
            try:
                conn.shutdown(socket.SHUT_RDWR)  # its thread's read ends; the thread closes it
            except OSError:
                pass
        for thread in self._threads():
            thread.join(timeout=REAP_SECONDS)

    def _threads(self) -> list[threading.Thread]:
        with self.lock:
            return list(self.connections.values())
