"""What the credential broker adds to a model request: time to first byte and to the end.

The test suite's mock provider answers a streamed Messages request (a 90 KB request body, an
SSE reply). Each round sends it once directly and once through a `CredentialBroker`, on
kept-alive connections, interleaved; reported are p50/p95 of time to the first response byte
and to the end of the stream, and broker/direct ratios.
"""

import http.client
import json
import socket
import time

from _common import machine_info, print_table, ratio, summary, write_results

from agent_run.supervisor.broker import CredentialBroker
from tests.support import mock_provider
from tests.support.mock_provider import MockProvider, Text

# The mock's own replies without Nagle too (headers, then the body: two writes), so the direct
# baseline has no ~40 ms delayed-ACK stall of its own and the ratio is the broker's alone.
mock_provider._Handler.disable_nagle_algorithm = True

ROUNDS = 100
BODY = json.dumps(
    {
        "model": "m",
        "max_tokens": 100,
        "stream": True,
        "tools": [{"name": "Bash"}],
        "messages": [{"role": "user", "content": "x" * 90_000}],
    }
)


def one(conn: http.client.HTTPConnection, headers: dict[str, str]) -> tuple[float, float]:
    started = time.perf_counter()
    conn.request(
        "POST", "/v1/messages", body=BODY, headers={"Content-Type": "application/json", **headers}
    )
    response = conn.getresponse()
    response.read1(65536)
    first = time.perf_counter() - started
    response.read()
    return first, time.perf_counter() - started


def main() -> int:
    samples: dict[str, list[float]] = {
        "direct_first": [],
        "direct_end": [],
        "broker_first": [],
        "broker_end": [],
    }
    info = machine_info()
    with MockProvider() as provider:
        provider.add(Text("hello world " * 40, times=None))
        broker = CredentialBroker(provider.url, "bench-key").start()
        direct = http.client.HTTPConnection("127.0.0.1", int(provider.url.rsplit(":", 1)[1]))
        brokered = http.client.HTTPConnection("127.0.0.1", int(broker.base_url.rsplit(":", 1)[1]))
        for conn in (direct, brokered):  # the same socket options on both paths
            conn.connect()
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(ROUNDS):
            for name, conn, headers in (
                ("direct", direct, {"x-api-key": "bench-key"}),
                ("broker", brokered, {"x-api-key": broker.token}),
            ):
                first, end = one(conn, headers)
                samples[f"{name}_first"].append(first * 1000)
                samples[f"{name}_end"].append(end * 1000)
        broker.close()
    stats = {name: summary(values) for name, values in samples.items()}
    rows = [
        [
            what,
            stats[f"direct_{what}"]["p50"],
            stats[f"broker_{what}"]["p50"],
            ratio(stats[f"broker_{what}"]["p50"], stats[f"direct_{what}"]["p50"]),
            stats[f"direct_{what}"]["p95"],
            stats[f"broker_{what}"]["p95"],
        ]
        for what in ("first", "end")
    ]
    print_table(
        ["ms to", "direct p50", "broker p50", "ratio p50", "direct p95", "broker p95"], rows
    )
    path = write_results(
        "broker", {"machine": info, "rounds": ROUNDS, "summary": stats, "samples": samples}
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
