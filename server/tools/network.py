"""The network as tools reach it: a connection backend pinned to the one address a call resolved
(so that DNS rebinding cannot move it), and the network client the server gives tools
(`HttpAccess`, `Service.NETWORK`): Fetch uses it, and so does any tool that makes requests for
an agent. Which addresses may be reached is `net.addresses`.
"""

from __future__ import annotations

import ipaddress
import secrets
import ssl
from collections.abc import Iterable
from dataclasses import dataclass

import anyio
import httpcore

from ..net.addresses import (
    IPAddress,
    IPNetwork,
    Resolver,
    Target,
    address_refused,
    bare_host,
    dialled,
    system_resolver,
)


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
    refuses internal addresses unless `allow_networks` (`[network] allow_networks`) lists them,
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
                "(see network.allow_networks).",
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
