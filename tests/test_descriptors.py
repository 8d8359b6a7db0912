"""No descriptor ceiling: a daemon holding more than 1,023 descriptors still spawns agents, and a
burst of connects to a busy daemon is queued (listen backlog SOMAXCONN), not refused."""

import json
import os
import resource
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from agent_run.system.home import Home
from tests.harness import DaemonProcess

IDLE_CONNECTIONS = 1100
BURST_CONNECTS = 600


@contextmanager
def own_fd_limit(needed: int) -> Iterator[None]:
    """This test process needs more descriptors than a default soft limit of 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"hard RLIMIT_NOFILE {hard} < {needed}")
    resource.setrlimit(
        resource.RLIMIT_NOFILE,
        (max(soft, needed) if soft != resource.RLIM_INFINITY else soft, hard),
    )
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def ping_all(socks: list[socket.socket]) -> None:
    """Ping on every connection, then read every reply: the daemon has accepted them all."""
    for n, sock in enumerate(socks):
        sock.sendall(json.dumps({"jsonrpc": "2.0", "id": n, "method": "ping"}).encode() + b"\n")
    for n, sock in enumerate(socks):
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(4096)
            assert chunk, f"connection {n} closed by the daemon"
            reply += chunk
        assert json.loads(reply)["id"] == n


def open_connections(home: Home, count: int, *, blocking: bool) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        socks.append(sock)
        sock.setblocking(blocking)
        sock.connect(str(home.socket_path))  # non-blocking: EAGAIN when the backlog is full
        sock.setblocking(True)
        sock.settimeout(30)
    return socks


def test_start_wait_answer_with_1100_idle_connections_open(home, workdir):
    # Started with a soft limit of 1,024 (a common default): the daemon must raise it itself.
    daemon = DaemonProcess(home, nofile_soft=1024)
    socks: list[socket.socket] = []
    with own_fd_limit(IDLE_CONNECTIONS + 200):
        try:
            daemon.start()
            socks = open_connections(home, IDLE_CONNECTIONS, blocking=True)
            ping_all(socks)
            agent = daemon.call(
                "start", {"task": "answer: past the fd ceiling", "workdir": str(workdir)}
            )
            result = daemon.call("wait", {"agent_id": agent["id"], "timeout_seconds": 60})
            assert result["agent"]["state"] == "succeeded", result
            assert daemon.call("answer", {"agent_id": agent["id"]})["text"] == "past the fd ceiling"
            errors = [
                line
                for line in (home.logs_dir / "daemon.log").read_text().splitlines()
                if json.loads(line)["level"] == "error"
            ]
            assert not errors, errors
        finally:
            for sock in socks:
                sock.close()
            daemon.stop()


def test_burst_of_connects_to_a_stopped_daemon_waits_in_the_backlog(daemon, home):
    socks: list[socket.socket] = []
    with own_fd_limit(BURST_CONNECTS + 200):
        os.kill(daemon.proc.pid, signal.SIGSTOP)  # busy: accepts nothing while the burst arrives
        try:
            socks = open_connections(home, BURST_CONNECTS, blocking=False)
        finally:
            os.kill(daemon.proc.pid, signal.SIGCONT)
        try:
            ping_all(socks)
        finally:
            for sock in socks:
                sock.close()
