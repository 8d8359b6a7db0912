"""Where the credential broker sends requests: the runtime's base URL, directly or by proxy.

`HTTPS_PROXY` / `HTTP_PROXY` (either case) are honoured for https and http upstreams: https
through a CONNECT tunnel, http in absolute form; `NO_PROXY` and loopback upstreams go direct.
A proxy URL's `user:password@` becomes `Proxy-Authorization: Basic`. TLS verification uses the
system store plus `SSL_CERT_FILE` / `SSL_CERT_DIR` and `NODE_EXTRA_CA_CERTS` when set.
"""

import base64
import http.client
import ipaddress
import os
import ssl
import urllib.request
from urllib.parse import unquote, urlsplit


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tls_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    extra = os.environ.get("NODE_EXTRA_CA_CERTS")
    if extra and os.path.isfile(extra):
        context.load_verify_locations(cafile=extra)
    return context


class Upstream:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url {url!r} is not an http(s) URL")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if self.scheme == "https" else 80)
        self.path = parts.path
        default = 443 if self.scheme == "https" else 80
        name = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = name if self.port == default else f"{name}:{self.port}"
        self.proxy = self._proxy()
        self.proxy_host, self.proxy_port = "", 0
        self.proxy_auth: dict[str, str] = {}
        if self.proxy:
            proxy = urlsplit(self.proxy if "://" in self.proxy else f"http://{self.proxy}")
            self.proxy_host, self.proxy_port = proxy.hostname or "", proxy.port or 80
            if proxy.username:
                pair = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}".encode()
                self.proxy_auth["Proxy-Authorization"] = "Basic " + base64.b64encode(pair).decode()
        # Headers each request carries: the proxy's credentials when it forwards plain http.
        self.extra_headers = self.proxy_auth if self.proxy and self.scheme == "http" else {}

    def _proxy(self) -> str | None:
        if is_loopback(self.host):
            return None
        proxies = urllib.request.getproxies_environment()
        if urllib.request.proxy_bypass_environment(self.host, proxies):
            return None
        return proxies.get(self.scheme)

    def target(self, path: str) -> str:
        """The request target: the path, or the absolute URL when an http proxy forwards it."""
        if self.proxy and self.scheme == "http":
            return f"http://{self.host_header}{path}"
        return path

    def connect(self) -> http.client.HTTPConnection:
        if self.proxy is None:
            if self.scheme == "https":
                return http.client.HTTPSConnection(self.host, self.port, context=tls_context())
            return http.client.HTTPConnection(self.host, self.port)
        if self.scheme == "https":
            conn = http.client.HTTPSConnection(
                self.proxy_host, self.proxy_port, context=tls_context()
            )
            conn.set_tunnel(self.host, self.port, headers=self.proxy_auth)
            return conn
        return http.client.HTTPConnection(self.proxy_host, self.proxy_port)
