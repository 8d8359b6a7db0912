"""A loopback HTTPS proxy that answers an engine's OAuth token refresh itself (test support).

Claude Code refreshes its sign-in at a fixed host (`https://platform.claude.com/v1/oauth/token`;
`CLAUDE_CODE_CUSTOM_OAUTH_URL` accepts only Anthropic's own hosts), so a test cannot point it at
the mock provider. Instead the engine is given `HTTPS_PROXY` = this proxy and
`NODE_EXTRA_CA_CERTS` = a throwaway CA made here: the proxy accepts CONNECT, terminates TLS with
a certificate of that CA for the requested host, and answers each request with
`answer(method, host, path, body) -> (status, json)`. Everything it saw is in `seen`.
"""

import datetime
import json
import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Answer = Callable[[str, str, str, bytes], tuple[int, Any]]


def _certificate(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: Any,
    signer: Any,
    extensions: list[tuple[Any, bool]],
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(signer, hashes.SHA256())


def make_ca_and_server_cert(folder: Path, hosts: list[str]) -> Path:
    """ca.pem (to trust), cert.pem + key.pem (the proxy's, valid for `hosts`); returns ca.pem."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agent-run test CA")])
    usage = x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=True,
        crl_sign=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )
    ca = _certificate(
        ca_name,
        ca_name,
        ca_key.public_key(),
        ca_key,
        [(x509.BasicConstraints(ca=True, path_length=None), True), (usage, True)],
    )
    cert = _certificate(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]),
        ca_name,
        key.public_key(),
        ca_key,
        [
            (x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts]), False),
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
        ],
    )
    (folder / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return folder / "ca.pem"


def _read_head(stream: BinaryIO) -> tuple[str, dict[str, str]]:
    line = stream.readline().decode("latin-1")
    headers = {}
    while True:
        header = stream.readline().decode("latin-1")
        if header in ("\r\n", "\n", ""):
            return line, headers
        name, _, value = header.partition(":")
        headers[name.strip().lower()] = value.strip()


class OAuthMitm:
    def __init__(self, folder: Path, hosts: list[str], answer: Answer) -> None:
        self.ca = make_ca_and_server_cert(folder, hosts)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
        self.answer = answer
        self.seen: list[tuple[str, str, str, bytes]] = []  # (method, host, path, body)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            line, _ = _read_head(conn.makefile("rb"))
            parts = line.split()
            if len(parts) != 3 or parts[0] != "CONNECT":
                conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
                return
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            host = parts[1].rsplit(":", 1)[0]
            try:
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    self._requests(tls, host)
            except (OSError, ssl.SSLError):
                return

    def _requests(self, tls: ssl.SSLSocket, host: str) -> None:
        stream = tls.makefile("rb")
        while True:
            line, headers = _read_head(stream)
            if not line.strip():
                return
            method, path, _ = line.split()
            body = stream.read(int(headers.get("content-length") or 0))
            self.seen.append((method, host, path, body))
            status, data = self.answer(method, host, path, body)
            payload = json.dumps(data).encode()
            tls.sendall(
                f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
                f"content-length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
