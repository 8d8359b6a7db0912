"""What a socket path too long for a socket address costs (`agent_run.system.unix_sockets` reaches it
through its folder, `/proc/self/fd/N/NAME`) against one that fits (its path is the address),
in the same run, interleaved:

- a bare connect + accept on a listener of our own (what every client connection adds: a CLI
  call, a web request, an MCP call, a relay); the long one opens and closes its folder each time;
- a wake nudge (sendto + the listener's recv) through `store.wake.Waker`, which holds its
  address for its life (a nudge follows every supervisor commit).

No daemon: the difference is in the kernel's path walk and the folder's open, measured alone.
Run: uv run python bench/bench_unix_sockets.py
"""

import os
import shutil
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _common import machine_info, print_table, ratio, summary, write_results

from agent_run.store import wake
from agent_run.system import unix_sockets
from tests.harness import short_tmpdir

ROUNDS = 10  # interleaved blocks of each pair
CONNECTS = 500
NUDGES = 2000
LONG = 220  # bytes of the long folder's path


def timed_us(action: Callable[[], None], count: int) -> float:
    """Microseconds per call of `action`, over `count` calls."""
    begun = time.perf_counter()
    for _ in range(count):
        action()
    return (time.perf_counter() - begun) / count * 1e6


def connect_accept(folder: Path) -> tuple[Callable[[], None], Callable[[], None]]:
    path = folder / "api.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_sockets.bind(listener, path)
    listener.listen(64)

    def once() -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            unix_sockets.connect(sock, path)
            listener.accept()[0].close()

    return once, listener.close


def nudge(folder: Path) -> tuple[Callable[[], None], Callable[[], None]]:
    path = folder / "wake.sock"
    listener = wake.listen(path)
    assert listener is not None
    waker = wake.Waker(path)

    def once() -> None:
        waker.wake()
        assert wake.drain(listener) == 1

    def close() -> None:
        waker.close()
        listener.close()

    return once, close


def main() -> int:
    info = machine_info()
    base = short_tmpdir("arb-")
    long = base
    while len(os.fsencode(long)) < LONG:
        long = long / ("d" * 49)
    folders = {"short": base / "s", "long": long}
    for folder in folders.values():
        folder.mkdir(mode=0o700, parents=True)
    samples: dict[str, dict[str, list[float]]] = {"connect": {}, "nudge": {}}
    closers = []
    try:
        actions = {}
        for way, folder in folders.items():
            for name, make, count in (
                ("connect", connect_accept, CONNECTS),
                ("nudge", nudge, NUDGES),
            ):
                once, close = make(folder)
                closers.append(close)
                actions[(name, way)] = (once, count)
                samples[name][way] = []
        for _ in range(ROUNDS):
            for (name, way), (once, count) in actions.items():
                samples[name][way].append(timed_us(once, count))
    finally:
        for close in closers:
            close()
        shutil.rmtree(base, ignore_errors=True)
    rows, results = [], {}
    labels = {"connect": "connect + accept", "nudge": "wake nudge (sendto + recv)"}
    for name, label in labels.items():
        short, far = summary(samples[name]["short"]), summary(samples[name]["long"])
        results[name] = {
            "short_us": short,
            "long_us": far,
            "long_over_short_p50": ratio(far["p50"], short["p50"]),
        }
        rows.append([label, short["p50"], far["p50"], results[name]["long_over_short_p50"]])
    print_table(["per call", "path fits us (p50)", f"{LONG}-byte folder us (p50)", "ratio"], rows)
    write_results("bench_unix_sockets", {"machine": info, **results, "samples": samples})
    return 0


if __name__ == "__main__":
    sys.exit(main())
