"""The network as tools reach it: canonical http(s) URLs, which addresses may be reached, and a
connection backend pinned to the one address a call resolved (so that DNS rebinding cannot move
it), and the network client the server gives tools (`HttpAccess`, `Service.NETWORK`): Fetch uses
it, and so does any tool that makes requests for an agent.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
import socket
import ssl
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import anyio
import httpcore

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]

DEFAULT_PORTS = {"http": 80, "https": 443}
_AUTHORITY = re.compile(r"\A(?P<host>\[[^\[\]]*\]|[^:\[\]]*)(?::(?P<port>[0-9]{0,5}))?\Z")
_LABEL = re.compile(r"\A[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\Z")
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_URL_SAFE = "!#$%&'()*+,/:;=?@[]~-._"


class _NotIPv4(ValueError):
    """A host that is not a numeric IPv4 form (so it is a domain name)."""


# Canonical URLs ------------------------------------------------------------------------------


def _ipv4_number(part: str) -> int:
    """One component of a numeric IPv4 host, as inet_aton reads it (0x hex, 0 octal)."""
    if part[:2] in ("0x", "0X"):
        digits, base = part[2:], 16
        if digits == "":
            return 0
    elif len(part) > 1 and part.startswith("0"):
        digits, base = part[1:], 8
    else:
        digits, base = part, 10
    allowed = {16: "0123456789abcdefABCDEF", 8: "01234567", 10: "0123456789"}[base]
    if not digits or not all(c in allowed for c in digits):
        raise _NotIPv4(part)
    return int(digits, base)


def parse_ipv4(host: str) -> ipaddress.IPv4Address:
    """A numeric IPv4 host in any form browsers accept (`2130706433`, `0177.0.0.1`,
    `0x7f.1`, `127.1`). Raises _NotIPv4 for a name, ValueError for an out-of-range number."""
    parts = host.split(".")
    if len(parts) > 4 or any(p == "" for p in parts):
        raise _NotIPv4(host)
    numbers = [_ipv4_number(p) for p in parts]
    *leading, last = numbers
    if any(n > 255 for n in leading) or last >= 256 ** (5 - len(numbers)):
        raise ValueError(host)
    value = last
    for index, number in enumerate(leading):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def canonical_host(raw: str) -> str:
    """The canonical form of a URL host (IPv6 in brackets). Raises ValueError if invalid."""
    if raw.startswith("["):
        if not raw.endswith("]") or "%" in raw:
            raise ValueError("an IPv6 literal must be [address] without a zone")
        return f"[{ipaddress.IPv6Address(raw[1:-1]).compressed}]"
    host = raw.lower().removesuffix(".")
    if not host:
        raise ValueError("the URL has no host")
    try:
        return str(parse_ipv4(host))
    except _NotIPv4:
        pass
    if host.split(".")[-1].isdigit() or host.split(".")[-1].startswith("0x"):
        # A host ending in a number is an IPv4 address or nothing (WHATWG URL).
        raise ValueError("the host is not a valid IPv4 address")
    try:
        encoded = host.encode("idna").decode("ascii") if not host.isascii() else host
    except UnicodeError:
        raise ValueError("the host is not a valid domain name") from None
    labels = encoded.split(".")
    if len(encoded) > 253 or not all(_LABEL.match(label) for label in labels):
        raise ValueError("the host is not a valid domain name")
    return encoded


def bare_host(host: str) -> str:
    """A URL host without the brackets of an IPv6 literal."""
    return host[1:-1] if host.startswith("[") else host


class Target:
    """A canonical http(s) URL: scheme, host, port and request target (path and query)."""

    __slots__ = ("host", "port", "scheme", "target")

    def __init__(self, scheme: str, host: str, port: int, target: str) -> None:
        self.scheme, self.host, self.port, self.target = scheme, host, port, target

    @classmethod
    def parse(cls, url: str) -> Target:
        """Canonicalize `url`. Raises ValueError naming what is wrong (never echoing it)."""
        if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
            raise ValueError("the URL contains whitespace or control characters")
        try:
            split = urllib.parse.urlsplit(url)
        except ValueError:
            raise ValueError("the URL is not a valid http or https URL") from None
        scheme = split.scheme.lower()
        if scheme not in DEFAULT_PORTS:
            raise ValueError("only http and https URLs can be fetched")
        if "@" in split.netloc:
            raise ValueError("the URL may not carry user information")
        authority = _AUTHORITY.match(split.netloc)
        if authority is None:
            raise ValueError("the URL's host and port are not valid")
        host = canonical_host(authority["host"])
        port = int(authority["port"]) if authority["port"] else DEFAULT_PORTS[scheme]
        if not 1 <= port <= 65535:
            raise ValueError("the URL port must be 1-65535")
        path = urllib.parse.quote(split.path or "/", safe=_URL_SAFE)
        query = urllib.parse.quote(split.query, safe=_URL_SAFE)
        has_query = "?" in url.split("#", maxsplit=1)[0]
        target = f"{path}?{query}" if has_query else path
        return cls(scheme, host, port, target)

    @property
    def authority(self) -> str:
        """host:port, the only part of a URL errors and summaries show."""
        return f"{self.host}:{self.port}"

    @property
    def host_header(self) -> str:
        return self.host if self.port == DEFAULT_PORTS[self.scheme] else self.authority

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host_header}{self.target}"

    def same_origin(self, other: Target) -> bool:
        return (self.scheme, self.host, self.port) == (other.scheme, other.host, other.port)


# Addresses -----------------------------------------------------------------------------------


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _internal(address: IPAddress) -> bool:
    return (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
        or (isinstance(address, ipaddress.IPv4Address) and address in _CGNAT)
    )


def dialled(address: IPAddress) -> IPAddress:
    """The address a socket really reaches: an IPv4-mapped IPv6 address is its IPv4."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def address_refused(address: IPAddress, allowed: Iterable[IPNetwork]) -> bool:
    """True when `address`, or an IPv4 address it embeds (mapped, compatible, NAT64, 6to4,
    Teredo), is internal, unless an allowed network contains the address it dials."""
    target = dialled(address)
    if any(target in net for net in allowed if target.version == net.version):
        return False
    if target is not address:
        return _internal(target)
    candidates: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            candidates.append(embedded)
    return any(_internal(a) for a in candidates)


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """Every address the system resolver gives for `host` (TCP)."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Dials one pinned address whatever host the connection pool asks for; TLS still
    verifies the certificate against (and sends SNI for) the URL's host."""

    def __init__(self, address: IPAddress, inner: httpcore.AsyncNetworkBackend) -> None:
        self._address = str(dialled(address))
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return await self._inner.connect_tcp(
            self._address, port, timeout, local_address, socket_options
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are never dialled")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


# The network client tools are given -------------------------------------------------------------


class NetworkRefused(Exception):
    """A request that was not made, or failed: `code` is stable (`dns_failed`,
    `address_refused`, `connect_failed`, `tls_failed`, `timed_out`), `message` one sentence that
    names no more than the host and port."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """One response: status, headers as sent, and the body up to the caller's cap."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    truncated: bool


def network_target(url: str) -> str:
    """The `network` requirement's match for a request to `url`: `tcp://host:port`, canonical
    (what a rule or an approval names). Raises ValueError when `url` is not a valid http(s)
    URL."""
    return f"tcp://{Target.parse(url).authority}"


class HttpAccess:
    """`Service.NETWORK`, the server's network client: every request resolves its host once,
    refuses internal addresses unless `allow_networks` (`[fetch] allow_networks`) lists them,
    and connects only to that pinned address (the Host header and TLS name keep the host)."""

    def __init__(
        self,
        allow_networks: Iterable[str] = (),
        *,
        resolver: Resolver | None = None,
        backend: httpcore.AsyncNetworkBackend | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.allowed: tuple[IPNetwork, ...] = tuple(
            ipaddress.ip_network(n, strict=False) for n in allow_networks
        )
        self.resolver: Resolver = resolver or system_resolver
        self.backend: httpcore.AsyncNetworkBackend = backend or httpcore.AnyIOBackend()
        self.ssl_context = ssl_context
        # Keys the fingerprints previews show of credentials a request would send: stable for
        # one server run (the same token shows the same fingerprint in every session and loop),
        # useless for guessing a short secret offline.
        self.credential_key = secrets.token_bytes(32)

    async def pin(self, host: str, port: int) -> IPAddress:
        """The one address a request to `host:port` may connect to; NetworkRefused
        (`dns_failed`, `address_refused`) otherwise."""
        try:
            addresses: list[IPAddress] = [ipaddress.ip_address(bare_host(host))]
        except ValueError:
            try:
                addresses = await self.resolver(host, port)
            except OSError:
                addresses = []
        if not addresses:
            raise NetworkRefused("dns_failed", "the host name did not resolve.")
        if any(address_refused(a, self.allowed) for a in addresses):
            raise NetworkRefused(
                "address_refused",
                "the host resolves to an internal address, which tools may not reach "
                "(see fetch.allow_networks).",
            )
        return addresses[0]

    def pool(self, address: IPAddress) -> httpcore.AsyncConnectionPool:
        """A connection pool that dials only `address`."""
        return httpcore.AsyncConnectionPool(
            ssl_context=self.ssl_context or ssl.create_default_context(),
            network_backend=PinnedBackend(address, self.backend),
            retries=0,
        )

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Iterable[tuple[str, str]] = (),
        body: bytes | None = None,
        timeout: float,  # noqa: ASYNC109 - one bound for the whole request, resolution included
        max_body_bytes: int = 64 << 10,
    ) -> HttpResponse:
        """One request to `url`, redirects not followed, the body read up to
        `max_body_bytes`. Raises NetworkRefused for a request that could not be made."""
        try:
            target = Target.parse(url)
        except ValueError as exc:
            raise NetworkRefused("url_invalid", f"the URL is not valid: {exc}.") from None
        sent = [("Host", target.host_header), *headers]
        if body is not None:
            sent.append(("Content-Length", str(len(body))))
        try:
            with anyio.fail_after(timeout):
                address = await self.pin(target.host, target.port)
                async with self.pool(address) as pool:
                    request = httpcore.Request(
                        method,
                        httpcore.URL(
                            scheme=target.scheme,
                            host=bare_host(target.host),
                            port=target.port,
                            target=target.target,
                        ),
                        headers=sent,
                        content=body or b"",
                    )
                    response = await pool.handle_async_request(request)
                    try:
                        data = bytearray()
                        truncated = False
                        async for chunk in response.aiter_stream():
                            room = max_body_bytes - len(data)
                            data += chunk[:room]
                            if len(chunk) > room:
                                truncated = True
                                break
                        response_headers = tuple(
                            (name.decode("latin-1"), value.decode("latin-1"))
                            for name, value in response.headers
                        )
                        return HttpResponse(
                            response.status, response_headers, bytes(data), truncated
                        )
                    finally:
                        await response.aclose()
        except TimeoutError:
            raise NetworkRefused(
                "timed_out", f"{target.authority}: no complete response within {timeout:g} s."
            ) from None
        except httpcore.ConnectError:
            raise NetworkRefused(
                "connect_failed", f"{target.authority}: could not connect."
            ) from None
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.TimeoutException):
            raise NetworkRefused(
                "connect_failed", f"{target.authority}: the exchange failed."
            ) from None
