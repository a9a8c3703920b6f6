"""The egress proxy on its own: a real listener on 127.0.0.1 served by the proxy's thread, real
peers on 127.0.0.1, and a client speaking raw HTTP/1 and TLS to it. What is checked: only the
approved endpoints are reached, exactly (CONNECT target, absolute URI), refusals answer at once
and name the host, a tunnel's TLS server name must be its host, every connection is recorded,
and the limits hold."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field

import anyio
import pytest

from callgate.server.net.addresses import Endpoint
from callgate.server.net.client_hello import ACCESS_DENIED_ALERT
from callgate.server.net.egress import (
    Allowance,
    ConnectionRecord,
    EgressCall,
    EgressProxy,
    EgressReport,
    EgressSettings,
)
from tests.support.egress import counting_server

pytestmark = pytest.mark.anyio

BOUND = 20.0
LOOPBACK = ("127.0.0.0/8", "::1/128")


@dataclass
class Peer:
    """A raw TCP peer on 127.0.0.1: records what each connection sent; `banner` is sent first
    (a protocol where the server speaks first), `echo` sends back what it got."""

    port: int = 0
    banner: bytes = b""
    echo: bool = True
    received: list[bytes] = field(default_factory=list)
    accepted: int = 0
    ended: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def wait_ended(self, count: int) -> list[bytes]:
        """What the first `count` connections sent, once each has ended (bounded)."""
        for _ in range(count):
            assert self.ended.acquire(timeout=BOUND), "a connection to the peer did not end"
        return self.received


@contextmanager
def raw_peer(banner: bytes = b"", echo: bool = True) -> Iterator[Peer]:
    peer = Peer(banner=banner, echo=echo)
    server = socket.create_server(("127.0.0.1", 0))
    peer.port = server.getsockname()[1]
    server.settimeout(0.05)
    done = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        data = bytearray()
        with conn:
            conn.settimeout(BOUND)
            if peer.banner:
                conn.sendall(peer.banner)
            while True:
                try:
                    chunk = conn.recv(65536)
                except OSError:
                    break
                if not chunk:
                    break
                data += chunk
                if peer.echo:
                    conn.sendall(chunk)
        peer.received.append(bytes(data))
        peer.ended.release()

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            peer.accepted += 1
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        yield peer
    finally:
        done.set()
        thread.join(10)
        server.close()


@dataclass
class Proxied:
    port: int
    records: list[ConnectionRecord]
    proxy: EgressProxy
    report: EgressReport | None = None


@asynccontextmanager
async def proxied(*allowed: str, settings: EgressSettings | None = None) -> AsyncIterator[Proxied]:
    """The proxy serving a fresh listener for a call allowed `allowed` (`host:port`, origin
    `rule r-<i>`)."""
    proxy = EgressProxy(settings or EgressSettings.build(LOOPBACK))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    records: list[ConnectionRecord] = []
    call = EgressCall(
        "s-1",
        "x-1",
        tuple(
            Allowance(Endpoint.parse(a, wildcard=True), f"rule r-{i}")
            for i, a in enumerate(allowed)
        ),
    )
    handle = await proxy.open(listener, call, records.append)
    result = Proxied(port, records, proxy)
    try:
        yield result
        result.report = await proxy.close(handle)
    finally:
        proxy.stop()


def exchange(port: int, request: bytes, then: bytes = b"") -> bytes:
    """Send `request` (and `then` once the head of the answer came back), read to the end."""
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as conn:
        conn.sendall(request)
        data = bytearray()
        sent_then = not then
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                return bytes(data)
            data += chunk
            if not sent_then and b"\r\n\r\n" in data:
                with contextlib.suppress(OSError):  # the proxy may have closed already
                    conn.sendall(then)
                    conn.shutdown(socket.SHUT_WR)
                sent_then = True


async def in_thread(function: object, *args: object) -> bytes:
    result: bytes = await anyio.to_thread.run_sync(function, *args)  # type: ignore[arg-type]
    return result


def client_hello(server_name: str | None) -> bytes:
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


async def test_connect_to_an_approved_endpoint_tunnels_and_is_recorded() -> None:
    with raw_peer() as peer:
        async with proxied(f"127.0.0.1:{peer.port}") as p:
            head = f"CONNECT 127.0.0.1:{peer.port} HTTP/1.1\r\n\r\n".encode()
            answer = await in_thread(exchange, p.port, head, b"ping")
        assert answer == b"HTTP/1.1 200 Connection established\r\n\r\nping"
    assert peer.wait_ended(1) == [b"ping"]
    assert p.report is not None
    assert (p.report.connections, p.report.refused) == (1, ())
    [record] = p.records
    assert (record.method, record.host, record.port, record.allowed) == (
        "CONNECT",
        "127.0.0.1",
        peer.port,
        True,
    )
    assert (record.rule, record.refusal, record.bytes_up, record.bytes_down) == (
        "rule r-0",
        "",
        4,
        4,
    )


@pytest.mark.parametrize(
    "target",
    [
        "127.0.0.1:{other}",
        "127.0.0.2:{port}",
        "2130706434:{port}",
        "localhost:{port}",
        "[::1]:{port}",
    ],
)
async def test_anything_but_the_approved_endpoint_is_refused_at_once(target: str) -> None:
    """Another port, another address, another spelling of another address, a name for the
    same address: refused (403) before any connection is made, naming the endpoint."""
    with raw_peer() as peer, raw_peer() as other:
        async with proxied(f"127.0.0.1:{peer.port}") as p:
            wanted = target.format(port=peer.port, other=other.port)
            answer = await in_thread(
                exchange, p.port, f"CONNECT {wanted} HTTP/1.1\r\n\r\n".encode()
            )
        assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
        assert b"X-Callgate-Refusal: not_approved" in answer
        assert b"not approved for this command" in answer
        assert peer.accepted == other.accepted == 0
    assert p.report is not None
    [(endpoint, reason)] = p.report.refused
    assert reason == "not approved for this command"
    assert p.records[0].allowed is False
    assert p.records[0].refusal == "not_approved"
    assert p.report.footer().startswith(f"[network refused: {endpoint} (not approved")


async def test_an_internal_address_needs_allow_networks() -> None:
    with raw_peer() as peer:
        async with proxied(f"127.0.0.1:{peer.port}", settings=EgressSettings()) as p:
            answer = await in_thread(
                exchange, p.port, f"CONNECT 127.0.0.1:{peer.port} HTTP/1.1\r\n\r\n".encode()
            )
        assert b"X-Callgate-Refusal: address_refused" in answer
        assert b"network.allow_networks" in answer
        assert peer.accepted == 0


async def test_a_tunnel_whose_tls_names_another_host_is_refused_before_any_byte_goes_on() -> None:
    with raw_peer() as peer:
        async with proxied(f"localhost:{peer.port}", f"127.0.0.1:{peer.port}") as p:
            for connect, name in (("localhost", "evil.example"), ("127.0.0.1", "localhost")):
                head = f"CONNECT {connect}:{peer.port} HTTP/1.1\r\n\r\n".encode()
                answer = await in_thread(exchange, p.port, head, client_hello(name))
                assert answer.endswith(ACCESS_DENIED_ALERT)
        # The proxy connected (to answer 200 or 502 truthfully) but sent nothing on.
        assert peer.wait_ended(2) == [b"", b""]
    assert [r.refusal for r in p.records] == ["server_name", "server_name"]
    assert [r.allowed for r in p.records] == [False, False]


async def test_a_tunnel_whose_tls_names_its_host_or_nothing_goes_through() -> None:
    with raw_peer() as peer:
        async with proxied(f"localhost:{peer.port}", f"127.0.0.1:{peer.port}") as p:
            for connect, name in (("localhost", "LOCALHOST."), ("127.0.0.1", None)):
                hello = client_hello(name)
                head = f"CONNECT {connect}:{peer.port} HTTP/1.1\r\n\r\n".encode()
                answer = await in_thread(exchange, p.port, head, hello)
                assert answer.endswith(hello)
    assert [r.refusal for r in p.records] == ["", ""]


async def test_a_server_that_speaks_first_is_heard_through_a_tunnel() -> None:
    """SSH and SMTP servers speak first: the tunnel relays the banner before the client's
    first bytes (which are not TLS, so they go on unchecked)."""
    with raw_peer(banner=b"SSH-2.0-test\r\n", echo=False) as peer:
        async with proxied(f"127.0.0.1:{peer.port}") as p:

            def talk() -> bytes:
                with socket.create_connection(("127.0.0.1", p.port), timeout=BOUND) as conn:
                    conn.sendall(f"CONNECT 127.0.0.1:{peer.port} HTTP/1.1\r\n\r\n".encode())
                    data = b""
                    while b"SSH-2.0-test\r\n" not in data:
                        data += conn.recv(4096)
                    conn.sendall(b"SSH-2.0-client\r\n")
                    conn.shutdown(socket.SHUT_WR)
                    while chunk := conn.recv(4096):
                        data += chunk
                    return data

            answer = await in_thread(talk)
    assert answer.endswith(b"SSH-2.0-test\r\n")
    assert peer.wait_ended(1) == [b"SSH-2.0-client\r\n"]


async def test_a_plain_http_request_is_forwarded_once_with_its_own_host() -> None:
    """The absolute URI decides the host (a Host header naming another is replaced), the
    request goes on in origin form with Connection: close, and a second request pipelined on
    the same connection never reaches anyone."""
    with counting_server("upstream") as server:
        async with proxied(f"127.0.0.1:{server.port}") as p:
            request = (
                f"GET http://127.0.0.1:{server.port}/a?b=1 HTTP/1.1\r\nHost: evil.example\r\n"
                "Proxy-Authorization: secret\r\nConnection: keep-alive\r\n\r\n"
                f"DELETE http://127.0.0.1:{server.port}/gone HTTP/1.1\r\n\r\n"
            ).encode()
            answer = await in_thread(exchange, p.port, request)
    assert answer.startswith(b"HTTP/1.0 200 OK\r\n") or answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nConnection: close\r\n" in answer
    assert answer.endswith(b"upstream\n")
    assert server.requests == [("GET", "/a?b=1", f"127.0.0.1:{server.port}")]
    assert p.records[0].method == "GET"


async def test_method_limits_hold_for_plain_http() -> None:
    with counting_server("upstream") as server:
        settings = EgressSettings.build(LOOPBACK, [(f"127.0.0.1:{server.port}", ["GET", "HEAD"])])
        async with proxied(f"127.0.0.1:{server.port}", settings=settings) as p:
            base = f"http://127.0.0.1:{server.port}/"
            refused = await in_thread(exchange, p.port, f"DELETE {base} HTTP/1.1\r\n\r\n".encode())
            allowed = await in_thread(exchange, p.port, f"GET {base} HTTP/1.1\r\n\r\n".encode())
    assert b"X-Callgate-Refusal: method_refused" in refused
    assert allowed.endswith(b"upstream\n")
    assert [r[0] for r in server.requests] == ["GET"]


async def test_request_bodies_keep_their_framing() -> None:
    with counting_server("upstream") as server:
        async with proxied(f"127.0.0.1:{server.port}") as p:
            url = f"http://127.0.0.1:{server.port}/post"
            sized = f"POST {url} HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello".encode()
            chunked = (
                f"POST {url} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
            ).encode()
            for request in (sized, chunked):
                assert (await in_thread(exchange, p.port, request)).endswith(b"upstream\n")
    assert server.bodies == [b"hello", b"abcde"]


@pytest.mark.parametrize(
    "request_text",
    [
        "POST {url} HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc",
        "POST {url} HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        "POST {url} HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "GET {url} HTTP/1.1\r\nBad Header: x\r\n\r\n",
        "GET {url} HTTP/1.1\r\n folded: x\r\n\r\n",
        "GET {url} HTTP/1.1\r\nX: a\rb\r\n\r\n",
        "GET /relative HTTP/1.1\r\n\r\n",
        "GET https://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n",
        "GET {url} HTTP/2.0\r\n\r\n",
        "CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n",
        "GET {url} HTTP/1.1\r\nX: " + "a" * (70 << 10) + "\r\n\r\n",
    ],
    ids=[
        "length-and-chunked",
        "two-lengths",
        "other-coding",
        "space-in-name",
        "folded",
        "bare-cr",
        "origin-form",
        "https-absolute",
        "http2",
        "connect-without-port",
        "huge-head",
    ],
)
async def test_malformed_or_ambiguous_requests_are_refused_and_reach_nothing(
    request_text: str,
) -> None:
    with counting_server("upstream") as server:
        async with proxied(f"127.0.0.1:{server.port}") as p:
            url = f"http://127.0.0.1:{server.port}/"
            raw = request_text.format(url=url, port=server.port).encode()
            answer = await in_thread(exchange, p.port, raw)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert server.accepted == 0


async def test_past_the_connection_limit_connections_are_refused() -> None:
    with raw_peer() as peer:
        settings = EgressSettings.build(LOOPBACK, max_connections=2)
        async with proxied(f"127.0.0.1:{peer.port}", settings=settings) as p:
            head = f"CONNECT 127.0.0.1:{peer.port} HTTP/1.1\r\n\r\n".encode()
            answers = [await in_thread(exchange, p.port, head, b"x") for _ in range(3)]
            # Past the limit the call's port is closed: a loop of connects costs nothing.
            with pytest.raises(ConnectionRefusedError):
                await in_thread(exchange, p.port, head)
        assert [a.split(b"\r\n")[0] for a in answers] == [
            b"HTTP/1.1 200 Connection established",
            b"HTTP/1.1 200 Connection established",
            b"HTTP/1.1 403 Forbidden",
        ]
        assert b"connection_limit" in answers[2]
        assert b"the command made 2 connections" in answers[2]
        assert peer.accepted == 2
    assert p.report is not None
    assert p.report.refused == (
        ("(new connections)", "the command made 2 connections, the most one call may; later "
         "ones are refused"),
    )  # fmt: skip
    assert sorted(r.refusal for r in p.records) == ["", "", "connection_limit"]


async def test_past_the_proxys_own_limit_new_connections_are_turned_away() -> None:
    with raw_peer() as peer:
        settings = EgressSettings.build(LOOPBACK, max_open_total=1)
        async with proxied(f"127.0.0.1:{peer.port}", settings=settings) as p:
            head = f"CONNECT 127.0.0.1:{peer.port} HTTP/1.1\r\n\r\n".encode()
            with socket.create_connection(("127.0.0.1", p.port), timeout=BOUND) as held:
                held.sendall(head)
                assert held.recv(100).startswith(b"HTTP/1.1 200")
                busy = await in_thread(exchange, p.port, head)
            assert busy.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
            assert b"proxy_busy" in busy


async def test_past_the_byte_limit_the_transfer_is_cut_and_later_connections_refused() -> None:
    with counting_server("upstream") as server:
        settings = EgressSettings.build(LOOPBACK, max_bytes=1 << 20)
        async with proxied(f"127.0.0.1:{server.port}", settings=settings) as p:
            big = f"GET http://127.0.0.1:{server.port}/big/{4 << 20} HTTP/1.1\r\n\r\n".encode()
            cut = await in_thread(exchange, p.port, big)
            later = await in_thread(exchange, p.port, big)
    assert len(cut) < 2 << 20
    assert b"byte_limit" in later
    assert [r.refusal for r in p.records] == ["byte_limit", "byte_limit"]


async def test_closing_the_call_ends_its_open_tunnels() -> None:
    with raw_peer() as peer:
        proxy = EgressProxy(EgressSettings.build(LOOPBACK))
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        allowance = Allowance(Endpoint.parse(f"127.0.0.1:{peer.port}"), "access default")
        records: list[ConnectionRecord] = []
        handle = await proxy.open(listener, EgressCall("s", "x", (allowance,)), records.append)
        try:
            conn = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
            conn.sendall(f"CONNECT 127.0.0.1:{peer.port} HTTP/1.1\r\n\r\n".encode())
            assert (await anyio.to_thread.run_sync(conn.recv, 100)).startswith(b"HTTP/1.1 200")
            report = await proxy.close(handle)
            assert await anyio.to_thread.run_sync(conn.recv, 100) == b""
            conn.close()
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
        finally:
            proxy.stop()
    assert report.connections == 1
    # Delivered to this loop before the close returned.
    assert records[0].message == "ended with the command"


async def test_one_principal_cannot_take_every_slot_of_the_proxy() -> None:
    """The proxy's open connections are shared: one principal holds at most its share, and
    another still gets through."""
    with raw_peer() as peer:
        proxy = EgressProxy(EgressSettings.build(LOOPBACK, max_open_total=4))
        target = Endpoint.parse(f"127.0.0.1:{peer.port}")
        listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
        ports = [listener.getsockname()[1] for listener in listeners]
        handles = [
            await proxy.open(
                listener, EgressCall("s", "x", (Allowance(target, "t"),), who), lambda _: None
            )
            for listener, who in zip(listeners, ("greedy", "other"), strict=True)
        ]
        head = f"CONNECT 127.0.0.1:{peer.port} HTTP/1.1\r\n\r\n".encode()
        held: list[socket.socket] = []
        try:
            for _ in range(2):
                conn = socket.create_connection(("127.0.0.1", ports[0]), timeout=BOUND)
                held.append(conn)
                conn.sendall(head)
                assert (await in_thread(conn.recv, 100)).startswith(b"HTTP/1.1 200")
            refused = await in_thread(exchange, ports[0], head)
            allowed = await in_thread(exchange, ports[1], head, b"hi")
        finally:
            for conn in held:
                conn.close()
            for handle in handles:
                await proxy.close(handle)
            proxy.stop()
    assert refused.startswith(b"HTTP/1.1 503")
    assert b"its share of the proxy" in refused
    assert allowed.startswith(b"HTTP/1.1 200")


async def test_a_tunnel_to_port_443_or_a_method_limited_endpoint_must_begin_with_tls() -> None:
    """Plain HTTP through a tunnel would pass a method limit unseen (`curl -p -X DELETE`), and
    a prefix before a ClientHello would pass its server name unchecked: where it matters, a
    tunnel must begin with TLS."""
    with raw_peer() as peer:
        settings = EgressSettings.build(LOOPBACK, [(f"127.0.0.1:{peer.port}", ["GET"])])
        async with proxied(f"127.0.0.1:{peer.port}", settings=settings) as p:
            head = f"CONNECT 127.0.0.1:{peer.port} HTTP/1.1\r\n\r\n".encode()
            plain = f"DELETE /admin HTTP/1.1\r\nHost: 127.0.0.1:{peer.port}\r\n\r\n".encode()
            refused = await in_thread(exchange, p.port, head, plain)
            tls = await in_thread(exchange, p.port, head, client_hello(None))
        assert refused == b"HTTP/1.1 200 Connection established\r\n\r\n"
        assert peer.wait_ended(2) == [b"", client_hello(None)[:0] + peer.received[1]]
        assert peer.received[1].startswith(b"\x16\x03")
        assert tls.startswith(b"HTTP/1.1 200")
    assert sorted(r.refusal for r in p.records) == ["", "not_tls"]


async def test_a_client_hello_in_many_records_or_a_trickle_costs_little() -> None:
    """A ClientHello split into tiny records is refused after a few; bytes sent one at a time
    are read a few times a second, not once per byte."""
    message = b"\x01\x00\x00\x40" + b"\x03\x03" + b"\0" * 62
    tiny = b"".join(b"\x16\x03\x01\x00\x01" + message[i : i + 1] for i in range(len(message)))
    with raw_peer() as peer:
        async with proxied(f"127.0.0.1:{peer.port}") as p:
            head = f"CONNECT 127.0.0.1:{peer.port} HTTP/1.1\r\n\r\n".encode()
            answer = await in_thread(exchange, p.port, head, tiny)

            def trickle() -> float:
                with socket.create_connection(("127.0.0.1", p.port), timeout=BOUND) as conn:
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    started = time.process_time()
                    for byte in f"GET http://127.0.0.1:{peer.port}/ HTTP/1.1\r\n\r\n".encode():
                        conn.send(bytes([byte]))
                        time.sleep(0.001)
                    conn.recv(100)
                    return time.process_time() - started

            await in_thread(trickle)
    assert answer.endswith(ACCESS_DENIED_ALERT)
    # (The peer echoes what it gets, which is no HTTP response.)
    assert [r.refusal for r in p.records] == ["server_name", "bad_response"]
    # The refused tunnel sent nothing on; the trickled request went on whole, once.
    assert sorted(peer.wait_ended(2)) == [
        b"",
        f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{peer.port}\r\nConnection: close\r\n\r\n".encode(),
    ]


async def test_chunk_lines_go_on_re_framed_and_trailers_do_not() -> None:
    with raw_peer(echo=False) as peer:
        async with proxied(f"127.0.0.1:{peer.port}") as p:
            url = f"http://127.0.0.1:{peer.port}/upload"
            request = (
                f"POST {url} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                "3;name=value\r\nabc\r\n0\r\nX-Trailer: yes\r\n\r\n"
            ).encode()

            def send(raw: bytes) -> None:
                # The peer never answers: the wait for one ends with the call.
                with socket.create_connection(("127.0.0.1", p.port), timeout=0.5) as conn:
                    conn.sendall(raw)
                    with contextlib.suppress(OSError):
                        conn.recv(100)

            await in_thread(send, request)
            bare_lf = request.replace(b"3;name=value\r\n", b"3;\nabc\r\n")
            await in_thread(send, bare_lf)
    forwarded = sorted(peer.wait_ended(2), key=len)
    # The size line with a bare LF is refused before it goes on: only the head went.
    assert forwarded[0].endswith(b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    assert forwarded[1].endswith(b"\r\n\r\n3\r\nabc\r\n0\r\n\r\n")


async def test_header_values_with_control_characters_are_refused() -> None:
    with counting_server("upstream") as server:
        async with proxied(f"127.0.0.1:{server.port}") as p:
            url = f"http://127.0.0.1:{server.port}/"
            answer = await in_thread(
                exchange, p.port, f"GET {url} HTTP/1.1\r\nX: a\x00b\r\n\r\n".encode()
            )
    assert answer.startswith(b"HTTP/1.1 400")
    assert server.accepted == 0
