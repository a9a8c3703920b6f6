"""A real HTTP(S) server on 127.0.0.1 for the Fetch tests, with a few fixed routes."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

BIG_BODY_BYTES = 8 << 20
BINARY_BODY = bytes(range(256)) * 4


@dataclass
class Recorded:
    """What the server saw: one (method, path-with-query) per request, and a release event
    the slow route waits on."""

    requests: list[tuple[str, str]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: test output stays readable."""

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()

    def do_HEAD(self) -> None:
        self._route()

    def _send(
        self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _route(self) -> None:
        self.server.recorded.requests.append((self.command, self.path))
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length) if length else b""
        if url.path == "/echo":
            echoed = {
                "method": self.command,
                "path": self.path,
                "host": self.headers.get("Host", ""),
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body.decode(),
            }
            self._send(200, json.dumps(echoed).encode(), "application/json")
        elif url.path == "/missing":
            self._send(404, b"no such page", "text/plain; charset=utf-8")
        elif url.path == "/binary":
            self._send(200, BINARY_BODY, "application/octet-stream")
        elif url.path == "/latin1":
            self._send(200, "café".encode("latin-1"), "text/plain; charset=iso-8859-1")
        elif url.path == "/headers":
            extra = {f"X-Header-{i:02d}": "v" * (300 if i == 0 else 3) for i in range(20)}
            extra["Set-Cookie"] = "session=very-secret"
            self._send(200, b"ok", "text/plain", extra)
        elif url.path == "/big":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(BIG_BODY_BYTES))
            self.end_headers()
            chunk = b"a" * (64 << 10)
            try:
                for _ in range(BIG_BODY_BYTES // len(chunk)):
                    self.wfile.write(chunk)
            except OSError:
                pass  # the client stopped reading at its cap, as it should
        elif url.path == "/slow":
            self.server.recorded.release.wait(10)
            self._send(200, b"late", "text/plain")
        elif url.path == "/redirect":
            status = int(query.get("status", "302"))
            self._send(status, b"", "text/plain", {"Location": query["to"]})
        elif url.path == "/loop":
            self._send(302, b"", "text/plain", {"Location": "/loop"})
        else:
            self._send(500, b"unknown route", "text/plain")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, recorded: Recorded) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.recorded = recorded


@dataclass
class WebServer:
    port: int
    recorded: Recorded

    def url(self, path: str, host: str = "127.0.0.1", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.port}{path}"


@contextmanager
def web_server(tls: ssl.SSLContext | None = None) -> Iterator[WebServer]:
    """Serve the routes on 127.0.0.1 (an ephemeral port) until the block exits."""
    recorded = Recorded()
    server = _Server(recorded)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield WebServer(server.server_address[1], recorded)
    finally:
        recorded.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate (and its key) valid for DNS name `name`, made by openssl."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is needed to make a test certificate")
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            f"/CN={name}",
            "-addext",
            f"subjectAltName=DNS:{name}",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
