"""The credential broker on its own: token check, key swap, streaming, proxies (real sockets)."""

import http.client
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent_run.supervisor.broker import CredentialBroker
from tests.support.mock_provider import Fault, MockProvider, Text

KEY = "sk-real-key-held-by-the-broker-0042"


def post(broker: CredentialBroker, headers: dict[str, str], body: dict, path: str = "/v1/messages"):
    conn = http.client.HTTPConnection(
        "127.0.0.1", int(broker.base_url.rsplit(":", 1)[1].split("/")[0])
    )
    conn.request(
        "POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **headers}
    )
    return conn, conn.getresponse()


def messages_body(stream: bool) -> dict:
    return {
        "model": "m",
        "max_tokens": 100,
        "stream": stream,
        "tools": [{"name": "Bash"}],
        "messages": [{"role": "user", "content": "hi"}],
    }


@pytest.fixture
def provider():
    with MockProvider() as mp:
        yield mp


def test_wrong_or_missing_token_is_401_and_never_forwarded(provider):
    broker = CredentialBroker(provider.url, KEY).start()
    try:
        for headers in (
            {},
            {"x-api-key": "guess"},
            {"authorization": "Bearer " + KEY},
            {"authorization": "Bearer " + broker.token[:-1]},
        ):
            _, response = post(broker, headers, messages_body(False))
            assert response.status == 401, headers
            response.read()
        _, response = post(
            broker,
            {"x-api-key": broker.token},
            messages_body(False),
            path="http://elsewhere.example/v1/messages",
        )
        assert response.status == 400, "an absolute-form target is refused"
        response.read()
        assert provider.requests == []
    finally:
        broker.close()


@pytest.mark.parametrize("header", ["x-api-key", "authorization"])
def test_token_is_swapped_for_the_key_in_the_header_the_engine_used(provider, header):
    broker = CredentialBroker(provider.url, KEY).start()
    try:
        value = broker.token if header == "x-api-key" else f"Bearer {broker.token}"
        provider.add(Text("hello"))
        _, response = post(broker, {header: value}, messages_body(False))
        assert response.status == 200 and "hello" in response.read().decode()
        got = provider.requests[0].headers
        assert got[header] == (KEY if header == "x-api-key" else f"Bearer {KEY}")
        assert broker.token not in json.dumps(got)
    finally:
        broker.close()
    with pytest.raises(OSError):  # the token died with the broker
        post(broker, {header: value}, messages_body(False))


def test_sse_streams_through_as_it_arrives(provider):
    broker = CredentialBroker(provider.url, KEY).start()
    try:
        provider.add(Text("word " * 40, seconds=4))
        started = time.monotonic()
        _, response = post(broker, {"x-api-key": broker.token}, messages_body(True))
        assert response.status == 200 and response.getheader("Transfer-Encoding") == "chunked"
        first = response.read1(65536)
        first_at = time.monotonic() - started
        rest = response.read()
        total = time.monotonic() - started
        assert b"message_start" in first and b"message_stop" in rest
        assert first_at < total / 2, (first_at, total)  # not buffered until the end
    finally:
        broker.close()


def test_rate_limit_headers_are_queued_as_signals(provider):
    from tests.support.mock_provider import Fault

    broker = CredentialBroker(provider.url, KEY).start()
    try:
        provider.add(Fault.http(429, retry_after=7))
        _, response = post(broker, {"x-api-key": broker.token}, messages_body(False))
        assert response.status == 429
        response.read()
        status, retry_after, detail = broker.signals.get(timeout=5)
        assert (status, retry_after) == (429, 7.0) and "retry-after" in json.loads(detail)
    finally:
        broker.close()


@pytest.mark.parametrize(
    ("status", "kind"), [(429, "rate_limited"), (503, "retry"), (529, "retry")]
)
def test_each_signal_says_what_the_response_was_evidence_of(provider, status, kind):
    """A 429 is a rate limit, a 503 with Retry-After or a 529 says "later" (not usage, as a
    503's headers were counted before), a success's rate-limit headers are usage."""
    from agent_run.supervisor.credentials import signal_kind
    from tests.support.mock_provider import Fault

    broker = CredentialBroker(provider.url, KEY).start()
    try:
        provider.add(Fault.http(status, retry_after=3))
        _, response = post(broker, {"x-api-key": broker.token}, messages_body(False))
        response.read()
        seen, retry_after, _detail = broker.signals.get(timeout=5)
        assert (seen, retry_after, signal_kind(seen)) == (status, 3.0, kind)
        assert signal_kind(200) == "usage"  # a success's rate-limit headers
    finally:
        broker.close()


class _Proxy(ThreadingHTTPServer):
    """A real forward proxy on loopback: CONNECT tunnels and absolute-form requests. Every host
    it is asked for is the mock provider's port on 127.0.0.1 (so the names need no DNS)."""

    daemon_threads = True

    def __init__(self, target_port: int) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.target_port = target_port
        self.seen: list[str] = []


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_CONNECT(self) -> None:
        self.server.seen.append(
            f"CONNECT {self.path} {self.headers.get('Proxy-Authorization', '')}"
        )
        self.send_response(502)  # no TLS upstream here: seeing the tunnel asked for is the point
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        self.server.seen.append(f"POST {self.path} {self.headers.get('Proxy-Authorization', '')}")
        body = self.rfile.read(int(self.headers["Content-Length"]))
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.target_port)
        upstream.request(
            "POST",
            self.path.split("/", 3)[3].join(["/", ""]),
            body=body,
            headers={k: v for k, v in self.headers.items() if k.lower() != "proxy-authorization"},
        )
        response = upstream.getresponse()
        data = response.read()
        self.send_response(response.status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def proxy(provider):
    server = _Proxy(int(provider.url.rsplit(":", 1)[1]))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_http_proxy_forwards_absolute_form_with_its_credentials(provider, proxy, monkeypatch):
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://me:s%40cret@127.0.0.1:{proxy.server_address[1]}")
    broker = CredentialBroker("http://provider.example:8080", KEY).start()
    try:
        provider.add(Text("via the proxy"))
        _, response = post(broker, {"x-api-key": broker.token}, messages_body(False))
        assert response.status == 200 and "via the proxy" in response.read().decode()
        assert proxy.seen == ["POST http://provider.example:8080/v1/messages Basic bWU6c0BjcmV0"]
        assert provider.requests[0].headers["x-api-key"] == KEY
    finally:
        broker.close()


def test_https_proxy_is_asked_for_a_connect_tunnel(proxy, monkeypatch):
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
    broker = CredentialBroker("https://api.provider.example/v1", KEY).start()
    try:
        with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):
            post(broker, {"authorization": f"Bearer {broker.token}"}, messages_body(False))
        assert proxy.seen == ["CONNECT api.provider.example:443 "]
        assert broker.unreachable and "Tunnel connection failed" in broker.unreachable
    finally:
        broker.close()


def test_loopback_upstream_goes_direct_even_with_a_proxy_set(provider, proxy, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    broker = CredentialBroker(provider.url, KEY).start()
    try:
        provider.add(Text("direct"))
        _, response = post(broker, {"x-api-key": broker.token}, messages_body(False))
        assert response.status == 200 and "direct" in response.read().decode()
        assert proxy.seen == []
    finally:
        broker.close()


def test_no_proxy_names_the_hosts_that_bypass_it(monkeypatch):
    from agent_run.supervisor.upstream import Upstream

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,.internal.example")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    assert Upstream("https://llm.internal.example/v1").proxy is None
    assert Upstream("https://[::1]:8443/v1").proxy is None
    proxied = Upstream("https://api.anthropic.com")
    assert proxied.proxy == "http://proxy.corp.example:3128"
    assert (proxied.proxy_host, proxied.proxy_port) == ("proxy.corp.example", 3128)


def test_a_kept_alive_connection_carries_request_after_request_whatever_the_reply(provider):
    """An engine reuses its connection to the broker, and the broker its connection upstream:
    a reply with a Content-Length body (a 401 here, as Claude Code's retries see it) must be
    finished on both, or the next request on them is dropped (an engine retry with no status)."""
    provider.add(Fault.http(401, times=2))
    provider.add(Text("third time"))
    broker = CredentialBroker(provider.url, KEY).start()
    try:
        conn, response = post(broker, {"x-api-key": broker.token}, messages_body(False))
        statuses = [response.status]
        response.read()
        for _ in range(2):
            conn.request(
                "POST",
                "/v1/messages",
                body=json.dumps(messages_body(False)),
                headers={"Content-Type": "application/json", "x-api-key": broker.token},
            )
            response = conn.getresponse()
            statuses.append(response.status)
            body = response.read().decode()
        assert statuses == [401, 401, 200] and "third time" in body
        assert len(provider.requests) == 3
    finally:
        broker.close()


def test_a_supervisor_without_a_credential_never_imports_the_broker():
    """Every demo agent's supervisor boots without http.server/http.client (a tenth of a second
    of CPU each); the broker is imported when a credential needs one."""
    code = (
        "import sys, agent_run.supervisor.run\n"
        "print(sorted(m for m in ('agent_run.supervisor.broker', 'http.server', 'http.client')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
