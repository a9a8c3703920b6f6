"""The egress proxy: a sandboxed command's only way out (design section 6).

A command approved for network runs in a network namespace of its own with nothing but
loopback; on that loopback the server has put a listener (`sandbox/netns.py`), which this proxy
serves. The command finds it through HTTP_PROXY, HTTPS_PROXY and ALL_PROXY; a program that
ignores them reaches nothing at all. Per connection the proxy takes one request:

- `CONNECT host:port` opens a tunnel, and
- an absolute-URI request (`GET http://host:port/path HTTP/1.1`) is forwarded once, with
  `Connection: close`, and its response returned;

only to an endpoint the call's approved network requirements cover (`Allowance`), exactly:
the host a request names, never the one a later Host header or TLS name claims. Before
connecting, the proxy resolves the host itself (the sandbox has no DNS) and refuses it when any
address it resolves to is loopback, private, link-local, metadata or otherwise internal, unless
`allow_networks` lists it (the same check as Fetch: `addresses.address_refused`); it connects to
the first address only. In a tunnel, the client's first bytes are read before any is forwarded:
a TLS ClientHello whose server name (SNI) is not the tunnel's host is refused with a TLS alert.
Per-host method limits apply to forwarded requests (a tunnel's methods are inside its TLS).

Every refusal is answered at once (HTTP 403, 400, 502 or 504 naming the host and the reason;
a TLS alert inside a tunnel), and every connection, allowed or refused, is reported by
`ConnectionRecord` to the server, which journals it. A call makes at most
`max_connections` connections (and holds at most that many open) and moves at most `max_bytes`
each way; past either, connections are refused or cut, with that reason; the proxy as a whole
holds at most `max_open_total` open (each is two of the server's file descriptors). Memory per
connection is bounded whatever the peers do: what is parsed (HEAD_LIMIT_BYTES, a ClientHello)
is buffered, everything else goes through a pipe (`relay.py`).

The proxy runs in a thread of its own with its own asyncio loop, started at its first use, so
neither a busy transfer nor a slow peer takes time from the server's event loop; the server
hands it listeners and collects reports through `open` and `close` (thread-safe).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import ipaddress
import logging
import re
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .addresses import (
    Endpoint,
    IPAddress,
    IPNetwork,
    Target,
    address_refused,
    bare_host,
    dialled,
)
from .client_hello import ACCESS_DENIED_ALERT, MAX_HELLO_BYTES, Verdict, read_hello
from .relay import READ_BYTES, Peer, TooLong, relay

log = logging.getLogger(__name__)

# A request's head (request line and headers), and a response's head, at most.
HEAD_LIMIT_BYTES = 64 << 10
# A chunk-size line at most (hex size and extensions).
MAX_CHUNK_LINE_BYTES = 4096
# After a failed accept (out of file descriptors, say), before the next.
ACCEPT_RETRY_SECONDS = 0.05
HEAD_SECONDS = 30.0
RESOLVE_SECONDS = 10.0
# The most addresses of one host tried in turn.
MAX_ADDRESSES = 8
DEFAULT_CONNECT_SECONDS = 10.0
DEFAULT_MAX_CONNECTIONS = 256
DEFAULT_MAX_BYTES = 4 << 30
DEFAULT_MAX_OPEN_TOTAL = 2048
# A tunnel's file descriptors: two sockets, and a pipe (two ends) per relayed direction.
FDS_PER_CONNECTION = 6
# How long a refused client's further bytes are read and dropped before its socket is closed.
LINGER_SECONDS = 1.0
# How long closing a call's proxy waits for its connections to end once cancelled.
CLOSE_SECONDS = 5.0
NOT_APPROVED = "not approved for this command"
# A tunnel with no byte either way for this long is closed (its slot goes back to the pool).
TUNNEL_IDLE_SECONDS = 300.0
IDLE_CHECK_SECONDS = 30.0
# Connections of one call reading their request head or first bytes at once; more wait.
PARSING_AT_ONCE = 16
# Names resolved at once: per call, and by the proxy as a whole (its own threads).
RESOLVING_PER_CALL = 2
RESOLVER_THREADS = 8
# Headers that ask an application for another method than the request's own: dropped where
# a method limit applies.
_METHOD_OVERRIDES = frozenset({b"x-http-method-override", b"x-http-method", b"x-method-override"})
# Ports whose tunnels must begin with TLS (so that its server name is checked).
TLS_PORTS = frozenset({443})
# The most refused endpoints a report (and the call's result) lists.
MAX_REPORTED = 32

_TOKEN = re.compile(rb"\A[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
        b"host",
    }
)
_RESPONSE_DROPPED = frozenset({b"connection", b"keep-alive", b"proxy-connection"})

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Allowance:
    """One approved endpoint of a call (`Endpoint`, maybe `*.domain`), and what approved it
    (`rule config-0`, `approved by alice`, `access default`), which the journal names."""

    endpoint: Endpoint
    origin: str


@dataclass(frozen=True, slots=True)
class EgressSettings:
    """What the proxy enforces beyond a call's allowances (`[network]`)."""

    allow_networks: tuple[IPNetwork, ...] = ()
    # Per-endpoint method limits for forwarded (plain HTTP) requests: the first covering
    # pattern decides.
    methods: tuple[tuple[Endpoint, frozenset[str]], ...] = ()
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_bytes: int = DEFAULT_MAX_BYTES
    connect_seconds: float = DEFAULT_CONNECT_SECONDS
    # Connections open at once across every call (each holds up to FDS_PER_CONNECTION of the
    # server's file descriptors), and the share of them one principal may hold.
    max_open_total: int = DEFAULT_MAX_OPEN_TOTAL
    session_share: float = 0.5

    @classmethod
    def build(
        cls,
        allow_networks: Iterable[str] = (),
        methods: Iterable[tuple[str, Iterable[str]]] = (),
        **limits: Any,
    ) -> EgressSettings:
        return cls(
            tuple(ipaddress.ip_network(n, strict=False) for n in allow_networks),
            tuple(
                (Endpoint.parse(p, wildcard=True, any_port=True), frozenset(m.upper() for m in ms))
                for p, ms in methods
            ),
            **limits,
        )


@dataclass(frozen=True, slots=True)
class ConnectionRecord:
    """One connection a sandboxed command asked the proxy for, as the journal keeps it:
    `refusal` is a stable code (empty when the connection was allowed and ran its course),
    `rule` what approved the endpoint (empty when none did)."""

    session_id: str
    execution_id: str
    method: str
    host: str
    port: int
    allowed: bool
    rule: str
    refusal: str
    message: str
    address: str
    bytes_up: int
    bytes_down: int

    def journal_data(self) -> dict[str, str | int | bool]:
        return {
            "method": self.method,
            "host": self.host,
            "port": self.port,
            "allowed": self.allowed,
            "rule": self.rule,
            "refusal": self.refusal,
            "message": self.message,
            "address": self.address,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
        }


@dataclass(frozen=True, slots=True)
class EgressReport:
    """What a call's commands did on the network: connections asked for, bytes each way, and
    the endpoints refused with why (distinct, at most MAX_REPORTED, `omitted` more)."""

    connections: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    refused: tuple[tuple[str, str], ...] = ()
    omitted: int = 0

    def footer(self) -> str:
        """One line for the call's result naming what was refused, or "" when nothing was."""
        return refused_footer(self.refused, self.omitted)


def refused_footer(refused: Iterable[tuple[str, str]], omitted: int = 0) -> str:
    """One line naming the endpoints a command's proxy refused and why ("" for none)."""
    refused = list(refused)
    listed = "; ".join(f"{endpoint} ({reason})" for endpoint, reason in refused)
    if not listed:
        return ""
    more = f"; and {omitted} more" if omitted else ""
    advice = (
        ". A host that was not approved can be declared in access.network of a new call"
        if any(reason == NOT_APPROVED for _, reason in refused)
        else ""
    )
    return f"[network refused: {listed}{more}{advice}]"


@dataclass(frozen=True, slots=True)
class EgressCall:
    """The call a listener serves: for the records, what it may reach, and whose share of the
    proxy it uses (`principal`, the session when empty)."""

    session_id: str
    execution_id: str
    allowances: tuple[Allowance, ...]
    principal: str = ""

    @property
    def holder(self) -> str:
        return self.principal or f"session:{self.session_id}"


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


@dataclass(slots=True)
class _Connection:
    upstream: Peer | None = None
    method: str = ""
    endpoint: Endpoint | None = None
    rule: str = ""
    address: str = ""
    up: int = 0
    down: int = 0
    refusal: str = ""
    message: str = ""
    allowed: bool = False


@dataclass(eq=False, slots=True)
class _Grant:
    """One call's listener and its connections (proxy thread only)."""

    call: EgressCall
    deliver: Callable[[ConnectionRecord], None]
    parsing: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(PARSING_AT_ONCE))
    resolving: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(RESOLVING_PER_CALL)
    )
    listener: socket.socket | None = None
    acceptor: asyncio.Future[None] | None = None
    tasks: set[asyncio.Future[None]] = field(default_factory=set)
    connections: int = 0
    up: int = 0
    down: int = 0
    exhausted: str = ""
    refused: dict[str, str] = field(default_factory=dict)
    omitted: int = 0
    closed: bool = False

    def refuse(self, endpoint: str, message: str) -> None:
        if endpoint in self.refused:
            return
        if len(self.refused) >= MAX_REPORTED:
            self.omitted += 1
        else:
            self.refused[endpoint] = message

    def report(self) -> EgressReport:
        return EgressReport(
            self.connections, self.up, self.down, tuple(self.refused.items()), self.omitted
        )


class EgressHandle:
    """A listener being served for one call; `EgressProxy.close` ends it."""

    def __init__(self, grant: _Grant) -> None:
        self._grant = grant

    def refused_so_far(self) -> tuple[tuple[str, str], ...]:
        """The endpoints refused until now (from any thread: a copy taken under the GIL)."""
        return tuple(list(self._grant.refused.items()))


class EgressProxy:
    """The server's one egress proxy (see the module docstring)."""

    def __init__(self, settings: EgressSettings | None = None) -> None:
        self.settings = settings or EgressSettings()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False
        # Connections open now, across every call and per principal (proxy thread only).
        self._open = 0
        self._open_by_holder: dict[str, int] = {}
        self._resolver = concurrent.futures.ThreadPoolExecutor(
            RESOLVER_THREADS, thread_name_prefix="callgate-egress-dns"
        )

    # The server's side (its event loop) ---------------------------------------------------

    async def open(
        self,
        listener: socket.socket,
        call: EgressCall,
        record: Callable[[ConnectionRecord], None],
    ) -> EgressHandle:
        """Serve `listener` (a listening TCP socket, in the sandbox's namespace) for `call`;
        `record` is called on the caller's event loop with each connection once it is over.
        The proxy owns the listener from here on."""
        caller = asyncio.get_running_loop()

        def deliver(item: ConnectionRecord) -> None:
            with contextlib.suppress(RuntimeError):  # the server's loop is gone: shutting down
                caller.call_soon_threadsafe(record, item)

        grant = _Grant(call, deliver)
        try:
            await self._in_thread(self._serve(listener, grant))
        except BaseException:
            listener.close()
            raise
        return EgressHandle(grant)

    async def close(self, handle: EgressHandle) -> EgressReport:
        """Stop serving the call's listener, end its connections, and report."""
        report: EgressReport = await self._in_thread(self._close(handle._grant))
        return report

    def stop(self) -> None:
        """End the proxy's thread (at server stop); every listener still served is closed."""
        with self._lock:
            self._stopped = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(CLOSE_SECONDS)
        self._resolver.shutdown(wait=False, cancel_futures=True)

    async def _in_thread(self, coroutine: Any) -> Any:
        loop = self._started()
        future: concurrent.futures.Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, loop)
        return await asyncio.shield(asyncio.wrap_future(future))

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._stopped:
                raise RuntimeError("the egress proxy is stopped")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(
                    target=self._run, args=(loop, ready), name="callgate-egress", daemon=True
                )
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            for task in asyncio.all_tasks(loop):
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    # The proxy's side (its own loop) ------------------------------------------------------

    async def _serve(self, listener: socket.socket, grant: _Grant) -> None:
        listener.setblocking(False)
        grant.listener = listener
        grant.acceptor = asyncio.ensure_future(self._accept(listener, grant))

    async def _accept(self, listener: socket.socket, grant: _Grant) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not grant.closed:
                try:
                    sock, _ = await loop.sock_accept(listener)
                except OSError:
                    await asyncio.sleep(ACCEPT_RETRY_SECONDS)  # EMFILE and such: not a spin
                    continue
                grant.connections += 1
                refusal = self._over_capacity(grant)
                if refusal is not None:
                    # Bounded: each counts toward the call's connections, and past them the
                    # listener is closed (the kernel refuses what comes later, at no cost).
                    away = asyncio.ensure_future(self._turn_away(grant, Peer(sock), refusal))
                    grant.tasks.add(away)
                    away.add_done_callback(grant.tasks.discard)
                    if refusal.code == "connection_limit":
                        return
                    continue
                task = asyncio.ensure_future(self._accepted(grant, Peer(sock)))
                grant.tasks.add(task)
                holder = grant.call.holder
                self._open += 1
                self._open_by_holder[holder] = self._open_by_holder.get(holder, 0) + 1
                task.add_done_callback(lambda done: self._ended(grant, done))
        finally:
            listener.close()

    def _over_capacity(self, grant: _Grant) -> _Refused | None:
        """A connection past what one call may make, or past what the proxy as a whole holds
        open: refused at accept, before it costs more than its socket. Past the call's limit
        the listener is closed, so that a command connecting in a loop costs the server
        nothing more."""
        if grant.connections > self.settings.max_connections:
            return _Refused(
                403,
                "connection_limit",
                f"the command made {self.settings.max_connections} connections, the most one "
                "call may; later ones are refused",
            )
        if self._open >= self.settings.max_open_total:
            return _Refused(
                503,
                "proxy_busy",
                "the proxy holds as many connections as it may; try again when some have ended",
            )
        share = max(1, int(self.settings.max_open_total * self.settings.session_share))
        if self._open_by_holder.get(grant.call.holder, 0) >= share:
            return _Refused(
                503,
                "proxy_busy",
                f"this agent's commands hold {share} connections open, its share of the "
                "proxy; try again when some have ended",
            )
        return None

    @staticmethod
    async def _turn_away(grant: _Grant, client: Peer, refused: _Refused) -> None:
        """Answer a connection refused at accept, read nothing of it but what lingers."""
        grant.refuse("(new connections)", refused.message)
        grant.deliver(
            ConnectionRecord(
                session_id=grant.call.session_id,
                execution_id=grant.call.execution_id,
                method="",
                host="",
                port=0,
                allowed=False,
                rule="",
                refusal=refused.code,
                message=refused.message,
                address="",
                bytes_up=0,
                bytes_down=0,
            )
        )
        try:
            if await _answer(client, refused, None):
                await _linger(client)
        finally:
            client.close()

    def _ended(self, grant: _Grant, task: asyncio.Future[None]) -> None:
        grant.tasks.discard(task)
        self._open -= 1
        holder = grant.call.holder
        left = self._open_by_holder.get(holder, 1) - 1
        if left:
            self._open_by_holder[holder] = left
        else:
            self._open_by_holder.pop(holder, None)

    async def _close(self, grant: _Grant) -> EgressReport:
        grant.closed = True
        tasks = [*grant.tasks, *([grant.acceptor] if grant.acceptor is not None else [])]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_SECONDS)
        if grant.listener is not None:
            grant.listener.close()
        return grant.report()

    async def _accepted(self, grant: _Grant, client: Peer) -> None:
        connection = _Connection()
        upstream: Peer | None = None
        try:
            upstream = await self._handle(grant, connection, client)
        except _Refused as refused:
            connection.refusal, connection.message = refused.code, refused.message
            if await _answer(client, refused, connection.endpoint):
                await _linger(client)
        except asyncio.CancelledError:
            if not connection.refusal and connection.allowed:
                connection.message = "ended with the command"
        except (ConnectionError, OSError, EOFError):
            pass  # a peer went away: the record says what was moved
        except Exception:
            log.exception("the egress proxy failed on a connection")
        finally:
            client.close()
            for made in (upstream, connection.upstream):
                if made is not None:
                    made.close()
            self._record(grant, connection)

    def _record(self, grant: _Grant, connection: _Connection) -> None:
        endpoint = connection.endpoint
        if endpoint is None:
            return  # nothing was asked for (closed before a request, or not a request at all)
        if connection.refusal:
            grant.refuse(str(endpoint), connection.message)
        grant.deliver(
            ConnectionRecord(
                session_id=grant.call.session_id,
                execution_id=grant.call.execution_id,
                method=connection.method,
                host=endpoint.host,
                port=endpoint.port or 0,
                allowed=connection.allowed,
                rule=connection.rule,
                refusal=connection.refusal,
                message=connection.message,
                address=connection.address,
                bytes_up=connection.up,
                bytes_down=connection.down,
            )
        )

    async def _handle(self, grant: _Grant, connection: _Connection, client: Peer) -> Peer | None:
        try:
            async with grant.parsing, asyncio.timeout(HEAD_SECONDS):
                head = await client.read_until(b"\r\n\r\n", HEAD_LIMIT_BYTES, paced=True)
        except TooLong:
            raise _Refused(400, "bad_request", "the request head is too large") from None
        except TimeoutError:
            return None  # no request came: nothing to answer or record
        if head is None:
            return None
        method, target, headers = _parse_request(head)
        connection.method = method
        framing = ("none", 0)
        if method == "CONNECT":
            endpoint = _connect_endpoint(target)
            url = None
        else:
            url, endpoint = _forward_endpoint(target)
            framing = _body_framing(headers)
        connection.endpoint = endpoint
        allowance = self._admit(grant, endpoint)
        connection.rule = allowance.origin
        if url is not None:
            limit = next((m for p, m in self.settings.methods if p.covers(endpoint)), None)
            if limit is not None and method not in limit:
                raise _Refused(
                    403,
                    "method_refused",
                    f"{method} is not among the methods allowed for {endpoint} "
                    f"({', '.join(sorted(limit))})",
                )
        async with grant.resolving:
            addresses = await self._resolve(endpoint)
        upstream, address = await self._connect(addresses, endpoint)
        connection.upstream = upstream
        connection.address = str(address)
        connection.allowed = True
        try:
            if url is None:
                await client.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
                limited = any(p.covers(endpoint) for p, _ in self.settings.methods)
                await self._tunnel(grant, connection, client, upstream, tls_only=limited)
            else:
                await self._forward(
                    grant, connection, (url, method, headers, framing), client, upstream
                )
        except _Refused as refused:
            connection.refusal, connection.message = refused.code, refused.message
            # Refused by its first bytes: nothing was sent on to the host.
            connection.allowed = refused.code not in ("server_name", "not_tls")
            if refused.status == 0 or url is None:
                return upstream  # mid-stream: nothing more can be said in HTTP
            raise
        return upstream

    def _admit(self, grant: _Grant, endpoint: Endpoint) -> Allowance:
        if grant.exhausted:
            raise _Refused(403, "byte_limit", grant.exhausted)
        allowance = next((a for a in grant.call.allowances if a.endpoint.covers(endpoint)), None)
        if allowance is None:
            raise _Refused(403, "not_approved", NOT_APPROVED)
        return allowance

    async def _resolve(self, endpoint: Endpoint) -> list[IPAddress]:
        host = bare_host(endpoint.host)
        try:
            addresses: list[IPAddress] = [ipaddress.ip_address(host)]
        except ValueError:
            loop = asyncio.get_running_loop()
            try:
                infos = await asyncio.wait_for(
                    loop.run_in_executor(
                        self._resolver,
                        functools.partial(
                            socket.getaddrinfo, host, endpoint.port, type=socket.SOCK_STREAM
                        ),
                    ),
                    RESOLVE_SECONDS,
                )
            except (OSError, TimeoutError):
                infos = []
            addresses = [ipaddress.ip_address(str(i[4][0]).split("%")[0]) for i in infos]
        if not addresses:
            raise _Refused(502, "dns_failed", "the host name did not resolve")
        if any(address_refused(a, self.settings.allow_networks) for a in addresses):
            raise _Refused(
                403,
                "address_refused",
                "the host resolves to an internal address, which commands may not reach "
                "(see network.allow_networks)",
            )
        return list(dict.fromkeys(dialled(a) for a in addresses))[:MAX_ADDRESSES]

    async def _connect(
        self, addresses: list[IPAddress], endpoint: Endpoint
    ) -> tuple[Peer, IPAddress]:
        """Connect to the first of the checked addresses that answers (in the resolver's
        order: an unreachable IPv6 address does not fail a host that has IPv4 too)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.connect_seconds
        for address in addresses:
            family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                async with asyncio.timeout(max(deadline - loop.time(), 0.001)):
                    await loop.sock_connect(sock, (str(address), endpoint.port))
            except TimeoutError:
                sock.close()
                raise _Refused(504, "timed_out", "the connection timed out") from None
            except OSError:
                sock.close()
                continue
            return Peer(sock), address
        raise _Refused(502, "connect_failed", "could not connect")

    def _charge(self, grant: _Grant, connection: _Connection, up: int, down: int) -> None:
        """Count bytes moved; past the call's budget the connection is cut (and later ones
        refused)."""
        connection.up += up
        connection.down += down
        grant.up += up
        grant.down += down
        limit = self.settings.max_bytes
        if grant.up > limit or grant.down > limit:
            grant.exhausted = (
                f"the command moved more than {limit} bytes one way, the most one call may move"
            )
            raise _Refused(0, "byte_limit", grant.exhausted)

    def _charger(self, grant: _Grant, connection: _Connection, *, up: bool) -> Any:
        if up:
            return lambda n: self._charge(grant, connection, n, 0)
        return lambda n: self._charge(grant, connection, 0, n)

    async def _tunnel(
        self,
        grant: _Grant,
        connection: _Connection,
        client: Peer,
        upstream: Peer,
        *,
        tls_only: bool = False,
    ) -> None:
        """Relay both ways; the client's first bytes are held until they show whether they are
        TLS, and if they are, that its server name is the tunnel's host. Where TLS is required
        (port 443, and an endpoint with a method limit, whose plain HTTP must come as plain
        requests), other first bytes are refused. A tunnel idle both ways is closed."""
        assert connection.endpoint is not None
        endpoint = connection.endpoint
        tls_only = tls_only or endpoint.port in TLS_PORTS

        async def outward() -> None:
            try:
                async with grant.parsing, asyncio.timeout(HEAD_SECONDS):
                    await _check_first_bytes(client, endpoint, tls_only=tls_only)
            except TimeoutError:
                return  # nothing but a trickle: it never began; closed as any idle tunnel
            except _Refused as refused:
                # Recorded now: the call may end while the client is still being answered.
                connection.refusal, connection.message = refused.code, refused.message
                connection.allowed = False
                with contextlib.suppress(ConnectionError, OSError):
                    if refused.code == "server_name":  # a TLS client: it understands an alert
                        await client.send(ACCESS_DENIED_ALERT)
                    client.shut_write()
                    await _linger(client)
                raise
            await relay(client, upstream, self._charger(grant, connection, up=True))

        async def inward() -> None:
            await relay(upstream, client, self._charger(grant, connection, up=False))

        relays = asyncio.ensure_future(_both(outward(), inward()))
        try:
            idle_checks = 0
            while True:
                moved = connection.up + connection.down
                done, _ = await asyncio.wait({relays}, timeout=IDLE_CHECK_SECONDS)
                if done:
                    relays.result()
                    return
                idle_checks = idle_checks + 1 if connection.up + connection.down == moved else 0
                if idle_checks * IDLE_CHECK_SECONDS >= TUNNEL_IDLE_SECONDS:
                    raise _Refused(
                        0, "idle", f"no byte either way for {TUNNEL_IDLE_SECONDS:g} seconds"
                    )
        finally:
            relays.cancel()
            await asyncio.gather(relays, return_exceptions=True)

    async def _forward(
        self,
        grant: _Grant,
        connection: _Connection,
        request: tuple[Target, str, list[tuple[bytes, bytes]], tuple[str, int]],
        client: Peer,
        upstream: Peer,
    ) -> None:
        """Forward one request (its body framed as the client framed it) with `Connection:
        close`, and relay the response with `Connection: close`; nothing more is read from the
        client, so every request on the connection is one this proxy checked."""
        url, method, headers, (framing, length) = request
        named = _connection_tokens(headers)
        assert connection.endpoint is not None
        if any(p.covers(connection.endpoint) for p, _ in self.settings.methods):
            named |= _METHOD_OVERRIDES
        lines = [f"{method} {url.target} HTTP/1.1".encode(), b"Host: " + url.host_header.encode()]
        lines += [
            name + b": " + value
            for name, value in headers
            if name.lower() not in _HOP_BY_HOP and name.lower() not in named
        ]
        if framing == "chunked":
            lines.append(b"Transfer-Encoding: chunked")
        elif framing == "length":
            lines.append(b"Content-Length: " + str(length).encode())
        lines.append(b"Connection: close")
        head = b"\r\n".join(lines) + b"\r\n\r\n"
        self._charge(grant, connection, len(head), 0)
        await upstream.send(head)
        up = self._charger(grant, connection, up=True)

        async def body() -> None:
            try:
                if framing == "length":
                    await relay(client, upstream, up, limit=length)
                elif framing == "chunked":
                    await _copy_chunked(client, upstream, up)
            except (ConnectionError, OSError):
                pass  # the host stopped reading (it may have answered already): its answer counts

        async def response() -> None:
            await self._relay_response(grant, connection, upstream, client)

        await _both(body(), response(), second_ends=True)

    async def _relay_response(
        self, grant: _Grant, connection: _Connection, upstream: Peer, client: Peer
    ) -> None:
        while True:
            try:
                head = await upstream.read_until(b"\r\n\r\n", HEAD_LIMIT_BYTES)
            except TooLong:
                raise _Refused(502, "bad_response", "the response head is too large") from None
            if head is None:
                raise _Refused(502, "bad_response", "the host closed without a response")
            status_line, _, rest = head.partition(b"\r\n")
            parts = status_line.split(b" ", 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
                raise _Refused(502, "bad_response", "the host's response is not HTTP/1")
            status = int(parts[1])
            if 100 <= status < 200 and status != 101:
                self._charge(grant, connection, 0, len(head))
                await client.send(head)
                continue
            kept = [
                line
                for line in rest[:-4].split(b"\r\n")
                if line and line.split(b":", 1)[0].strip().lower() not in _RESPONSE_DROPPED
            ]
            rewritten = b"\r\n".join([status_line, *kept, b"Connection: close"]) + b"\r\n\r\n"
            self._charge(grant, connection, 0, len(rewritten))
            await client.send(rewritten)
            break
        await relay(upstream, client, self._charger(grant, connection, up=False))


async def _check_first_bytes(client: Peer, endpoint: Endpoint, *, tls_only: bool) -> None:
    """Look at the client's first bytes in a tunnel (left buffered for the relay): they pass
    when they are TLS naming the tunnel's host (or no name), or, unless `tls_only`, not TLS at
    all; _Refused otherwise. They are parsed again only once as many bytes as the last look
    asked for have come."""
    needed = 1
    while True:
        if len(client.buffer) >= needed:
            hello = read_hello(bytes(client.buffer))
            if hello.verdict is not Verdict.INCOMPLETE:
                break
            needed = hello.needed
            if needed > MAX_HELLO_BYTES:
                raise _Refused(0, "server_name", "its TLS ClientHello is too large to check")
        if not await client.fill_paced():
            return  # the client closed first: nothing was sent to check
    if hello.verdict is Verdict.NOT_TLS:
        if tls_only:
            raise _Refused(
                0,
                "not_tls",
                f"a tunnel to {endpoint} must begin with TLS (its server name is checked); "
                "plain HTTP to it goes as plain requests, whose methods are checked",
            )
        return
    if hello.verdict is Verdict.MALFORMED:
        raise _Refused(0, "server_name", "its TLS ClientHello could not be read")
    if hello.server_name is None:
        return
    try:
        named = Endpoint.parse(f"{hello.server_name}:{endpoint.port}")
    except ValueError:
        named = None
    if named is None or named.host != endpoint.host:
        raise _Refused(
            0,
            "server_name",
            "its TLS server name is another host than the one the tunnel was opened to",
        )


async def _copy_chunked(client: Peer, upstream: Peer, charge: Any) -> None:
    """Forward a chunked request body re-framed: each size line as bare hex (extensions
    dropped), the data, and no trailers (read, bounded, and dropped), so that the host parses
    exactly the framing this proxy checked."""
    while True:
        line = await client.read_until(b"\r\n", MAX_CHUNK_LINE_BYTES)
        if line is None:
            raise EOFError
        size_text = line[:-2].split(b";", 1)[0].strip(b" \t")
        if (
            not size_text
            or len(size_text) > 16
            or not all(c in b"0123456789abcdefABCDEF" for c in size_text)
            or b"\n" in line[:-2]
            or b"\r" in line[:-2]
        ):
            raise _Refused(0, "bad_request", "the request's chunked body is malformed")
        size = int(size_text, 16)
        framed = f"{size:x}\r\n".encode()
        charge(len(framed))
        await upstream.send(framed)
        if size == 0:
            break
        await relay(client, upstream, charge, limit=size)
        if await client.read_exactly(2) != b"\r\n":
            raise _Refused(0, "bad_request", "the request's chunked body is malformed")
        await upstream.send(b"\r\n")
    dropped = 0
    while True:  # trailers, up to the empty line: dropped
        line = await client.read_until(b"\r\n", HEAD_LIMIT_BYTES)
        if line is None:
            raise EOFError
        dropped += len(line)
        if dropped > HEAD_LIMIT_BYTES:
            raise _Refused(0, "bad_request", "the request's trailers are too large")
        if line == b"\r\n":
            await upstream.send(b"\r\n")
            return


async def _both(first: Any, second: Any, *, second_ends: bool = False) -> None:
    """Run two relays; when one fails, the other is cancelled and the failure raised. With
    `second_ends`, the second one ending ends the first too."""
    tasks = [asyncio.ensure_future(first), asyncio.ensure_future(second)]
    try:
        pending: set[asyncio.Future[Any]] = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
            if second_ends and tasks[1] in done:
                break
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _linger(client: Peer) -> None:
    """Read and drop what the client still sends, for a moment, before closing: closing a
    socket with unread bytes resets the connection, and the client would lose the answer."""
    with contextlib.suppress(TimeoutError, ConnectionError, OSError):
        async with asyncio.timeout(LINGER_SECONDS):
            dropped = 0
            while dropped < HEAD_LIMIT_BYTES and (chunk := await client.read_some(READ_BYTES)):
                dropped += len(chunk)


async def _answer(client: Peer, refused: _Refused, endpoint: Endpoint | None) -> bool:
    """The HTTP answer to a refused request (none once a tunnel or response has begun), the
    writing side then shut; True when one was sent."""
    if refused.status == 0:
        return False
    with contextlib.suppress(ConnectionError, OSError):
        await client.send(_answer_bytes(refused, endpoint))
        client.shut_write()
        return True
    return False


def _answer_bytes(refused: _Refused, endpoint: Endpoint | None) -> bytes:
    subject = str(endpoint) if endpoint is not None else "the connection"
    body = f"callgate refused {subject}: {refused.message}.\n".encode()
    head = (
        f"HTTP/1.1 {refused.status} {_REASONS[refused.status]}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"X-Callgate-Refusal: {refused.code}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    return head + body


def _parse_request(head: bytes) -> tuple[str, str, list[tuple[bytes, bytes]]]:
    """The method, request target and headers of a request head; _Refused (400) when it is not
    a strict HTTP/1.x request head (bare CR or LF, folded or spaced header names included)."""
    lines = head[:-4].split(b"\r\n")
    if any(b"\r" in line or b"\n" in line for line in lines):
        raise _Refused(400, "bad_request", "the request head is malformed")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0") or not _TOKEN.match(parts[0]):
        raise _Refused(400, "bad_request", "the request line is not an HTTP/1 request")
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.match(name):
            raise _Refused(400, "bad_request", "a request header is malformed")
        value = value.strip(b" \t")
        if _CONTROL.search(value):
            raise _Refused(400, "bad_request", "a request header holds a control character")
        headers.append((name, value))
    try:
        return parts[0].decode("ascii"), parts[1].decode("ascii"), headers
    except UnicodeDecodeError:
        raise _Refused(400, "bad_request", "the request target is not ASCII") from None


def _connect_endpoint(target: str) -> Endpoint:
    try:
        return Endpoint.parse(target)
    except ValueError as exc:
        raise _Refused(400, "bad_request", f"the CONNECT target is not host:port ({exc})") from None


def _forward_endpoint(target: str) -> tuple[Target, Endpoint]:
    if not target.lower().startswith("http://"):
        raise _Refused(
            400,
            "bad_request",
            "this is a proxy: send an absolute http:// URL, or CONNECT host:port for anything "
            "else (https included)",
        )
    try:
        url = Target.parse(target)
    except ValueError as exc:
        raise _Refused(400, "bad_request", f"the URL is not valid ({exc})") from None
    return url, Endpoint(url.host, url.port)


def _body_framing(headers: list[tuple[bytes, bytes]]) -> tuple[str, int]:
    """How the request body is framed: ("none", 0), ("length", n) or ("chunked", 0); _Refused
    for anything ambiguous (both, several lengths, another transfer coding)."""
    lengths = [v for n, v in headers if n.lower() == b"content-length"]
    codings = [v for n, v in headers if n.lower() == b"transfer-encoding"]
    if codings:
        if lengths or len(codings) != 1 or codings[0].strip().lower() != b"chunked":
            raise _Refused(400, "bad_request", "the request's body framing is ambiguous")
        return "chunked", 0
    if not lengths:
        return "none", 0
    if len(set(lengths)) != 1 or not lengths[0].isdigit() or len(lengths[0]) > 18:
        raise _Refused(400, "bad_request", "the request's Content-Length is not valid")
    return "length", int(lengths[0])


def _connection_tokens(headers: list[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """The header names the client's Connection header calls hop-by-hop."""
    tokens: set[bytes] = set()
    for name, value in headers:
        if name.lower() in (b"connection", b"proxy-connection"):
            tokens.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return frozenset(tokens)
