"""Addresses on the network as the server reaches them: canonical hosts and http(s) URLs, and
which addresses may be reached at all (loopback, private, link-local, metadata and other
internal addresses only where `allow_networks` lists them). Fetch and the proxy that sandboxed
commands reach the network through both decide by these."""

from __future__ import annotations

import ipaddress
import re
import socket
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable

import anyio

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


# Endpoints: what a network requirement, a rule and the proxy name ------------------------------

WILDCARD = "*."


class Endpoint:
    """A canonical `host:port`: `host` is a canonical host (IPv6 in brackets) or, where a
    wildcard is allowed, `*.<domain>` (every host below that domain, not the domain itself);
    `port` is None for any port, where that is allowed (rules only)."""

    __slots__ = ("host", "port")

    def __init__(self, host: str, port: int | None) -> None:
        self.host, self.port = host, port

    @classmethod
    def parse(cls, text: str, *, wildcard: bool = False, any_port: bool = False) -> Endpoint:
        """Canonicalize `host:port`. Raises ValueError saying what is wrong (never echoing it)."""
        if not text.isascii() or any(c.isspace() or ord(c) < 0x20 for c in text):
            raise ValueError("a network target is host:port in ASCII, e.g. pypi.org:443")
        host, separator, port_text = text.rpartition(":")
        if not separator or not host or (host.endswith(":") and not host.startswith("[")):
            raise ValueError("a network target is host:port, e.g. pypi.org:443")
        port: int | None
        if port_text == "*" and any_port:
            port = None
        elif port_text.isdigit() and len(port_text) <= 5 and 1 <= int(port_text) <= 65535:
            port = int(port_text)
        else:
            raise ValueError("the port must be a number from 1 to 65535")
        if host.startswith(WILDCARD):
            if not wildcard:
                raise ValueError("a wildcard host (*.domain) is not allowed here")
            domain = canonical_host(host.removeprefix(WILDCARD))
            if domain.startswith("[") or _is_ip(domain) or domain.count(".") < 1:
                raise ValueError(
                    "a wildcard host must name a domain of two labels or more, e.g. *.example.org"
                )
            return cls(WILDCARD + domain, port)
        if ":" in host and not host.startswith("["):
            raise ValueError("an IPv6 address is written in brackets, e.g. [::1]:8080")
        return cls(canonical_host(host), port)

    @property
    def is_wildcard(self) -> bool:
        return self.host.startswith(WILDCARD)

    def covers(self, other: Endpoint) -> bool:
        """Whether this endpoint, read as a pattern, covers `other`: the same host, or a host
        (or narrower wildcard) below its wildcard's domain; any port when its port is None."""
        if self.port is not None and self.port != other.port:
            return False
        if self.host == other.host:
            return True
        if not self.is_wildcard:
            return False
        domain = self.host.removeprefix(WILDCARD)
        below = other.host.removeprefix(WILDCARD)
        if other.is_wildcard:
            return below.endswith("." + domain)
        return not _is_ip(other.host) and below.endswith("." + domain)

    def __str__(self) -> str:
        return f"{self.host}:{'*' if self.port is None else self.port}"

    def __repr__(self) -> str:
        return f"Endpoint({self})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Endpoint) and (self.host, self.port) == (other.host, other.port)

    def __hash__(self) -> int:
        return hash((self.host, self.port))


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(bare_host(host))
    except ValueError:
        return False
    return True
