"""Hosts on 127.0.0.1 for the egress tests: an HTTP server that counts every connection it
accepts (so a test can show that nothing reached it, not only that a request failed), and a UDP
socket that counts datagrams."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Handler(BaseHTTPRequestHandler):
    server: CountingServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = bytearray()
            while size := int(self.rfile.readline().split(b";")[0], 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            self.server.bodies.append(bytes(body))
        else:
            length = int(self.headers.get("Content-Length") or 0)
            self.server.bodies.append(self.rfile.read(length))
        self._answer()

    def do_DELETE(self) -> None:
        self._answer()

    def _answer(self) -> None:
        self.server.requests.append((self.command, self.path, self.headers.get("Host", "")))
        if self.path.startswith("/big/"):
            size = int(self.path.removeprefix("/big/"))
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            chunk = b"x" * (1 << 20)
            while size > 0:
                self.wfile.write(chunk[: min(size, len(chunk))])
                size -= len(chunk)
            return
        served = self.server.directory
        if served is not None and self.path.count("/") > 1:
            # A static file (git's dumb HTTP protocol reads a bare repository so).
            file = (served / self.path.lstrip("/").split("?")[0]).resolve()
            if not file.is_relative_to(served) or not file.is_file():
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = file.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        body = f"{self.server.name}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class CountingServer(ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 that answers its `name`, counting accepted connections."""

    daemon_threads = True

    def __init__(self, name: str, directory: Path | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.name = name
        self.directory = directory.resolve() if directory is not None else None
        self.accepted = 0
        self.requests: list[tuple[str, str, str]] = []
        self.bodies: list[bytes] = []

    def verify_request(self, request: object, client_address: object) -> bool:
        self.accepted += 1
        return True

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@contextmanager
def counting_server(name: str, directory: Path | None = None) -> Iterator[CountingServer]:
    """A CountingServer answering its name; with `directory`, also the files below it."""
    server = CountingServer(name, directory)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@dataclass
class UdpSink:
    port: int
    received: list[bytes] = field(default_factory=list)


@contextmanager
def udp_sink() -> Iterator[UdpSink]:
    """A UDP socket on 127.0.0.1 that records every datagram it gets."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(0.05)
        sink = UdpSink(sock.getsockname()[1])
        done = threading.Event()

        def receive() -> None:
            while not done.is_set():
                try:
                    sink.received.append(sock.recv(2048))
                except TimeoutError:
                    continue
                except OSError:
                    return

        thread = threading.Thread(target=receive)
        thread.start()
        try:
            yield sink
        finally:
            done.set()
            thread.join(10)
