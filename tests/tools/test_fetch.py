"""Fetch: URL canonicalization at Prepare, address pinning and refusal, redirects, results."""

from __future__ import annotations

import ipaddress
import json
import ssl
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpcore
import pytest

from callgate.server.core.tool import ToolContext
from callgate.server.net.addresses import IPAddress, address_refused
from callgate.server.tools.fetch import Fetch
from callgate.server.tools.network import HttpAccess
from tests.support.http_server import BIG_BODY_BYTES, WebServer, self_signed, web_server
from tests.tools.drive import execute, invalid_field, make_context

pytestmark = pytest.mark.anyio

LOOPBACK = ["127.0.0.0/8"]


class RecordingBackend(httpcore.AsyncNetworkBackend):
    """The real anyio backend, recording every address it is asked to dial."""

    def __init__(self) -> None:
        self.dialled: list[tuple[str, int]] = []
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.dialled.append((host, port))
        return await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class FixedResolver:
    """Maps every name to fixed addresses and records the lookups."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = [ipaddress.ip_address(a) for a in addresses]
        self.lookups: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.lookups.append((host, port))
        return list(self.addresses)


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return make_context(tmp_path)


@pytest.fixture
def web() -> Iterator[WebServer]:
    with web_server() as server:
        yield server


@pytest.fixture
def backend() -> RecordingBackend:
    return RecordingBackend()


def loopback_fetch(backend: RecordingBackend, resolver: FixedResolver | None = None) -> Fetch:
    return Fetch(
        HttpAccess(LOOPBACK, resolver=resolver or FixedResolver("127.0.0.1"), backend=backend)
    )


def body_json(text: str) -> dict[str, object]:
    body = text.split("\n\n", 1)[1]
    parsed = json.loads(body)
    assert isinstance(parsed, dict)
    return parsed


# Prepare ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("http://2130706433/", "tcp://127.0.0.1:80"),
        ("http://0177.0.0.1/", "tcp://127.0.0.1:80"),
        ("http://0x7f.0.0.1/", "tcp://127.0.0.1:80"),
        ("http://127.1/", "tcp://127.0.0.1:80"),
        ("https://ExAmple.COM./a?b=c", "tcp://example.com:443"),
        ("http://example.com:8080", "tcp://example.com:8080"),
        ("http://bücher.example/", "tcp://xn--bcher-kva.example:80"),
        ("http://[::ffff:127.0.0.1]/", "tcp://[::ffff:7f00:1]:80"),
        ("https://[2001:DB8:0:0::1]:8443/", "tcp://[2001:db8::1]:8443"),
    ],
)
def test_prepare_canonicalizes_the_url_into_a_network_requirement(
    ctx: ToolContext, url: str, match: str
) -> None:
    """Hosts are lower-cased, IDNA-encoded, numeric forms dotted and IPv6 compressed."""
    prepared = Fetch(HttpAccess()).prepare({"url": url}, ctx)
    (requirement,) = prepared.requirements
    assert (requirement.kind, requirement.scope, requirement.match) == ("network", "", match)
    authority = match.removeprefix("tcp://")
    assert prepared.summary == f"GET {authority}"
    assert requirement.description == f"GET {authority}"
    assert [c.match for c in prepared.candidates] == [match]


def test_summary_never_shows_path_or_query(ctx: ToolContext) -> None:
    """The summary and requirement carry method and host:port only."""
    prepared = Fetch(HttpAccess()).prepare(
        {"url": "https://example.com/private/path?token=secret", "method": "POST", "body": "x"},
        ctx,
    )
    shown = prepared.summary + repr(prepared.requirements) + repr(prepared.candidates)
    assert prepared.summary == "POST example.com:443"
    assert "secret" not in shown
    assert "private" not in shown


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"url": "ftp://example.com/"}, "arguments.url"),
        ({"url": "file:///etc/passwd"}, "arguments.url"),
        ({"url": "http://user:pw@example.com/"}, "arguments.url"),
        ({"url": "http://example.com/a b"}, "arguments.url"),
        ({"url": "http://example.com/\x00"}, "arguments.url"),
        ({"url": "http:///nohost"}, "arguments.url"),
        ({"url": "http://example.com:0/"}, "arguments.url"),
        ({"url": "http://example.com:70000/"}, "arguments.url"),
        ({"url": "http://256.0.0.1/"}, "arguments.url"),
        ({"url": "http://1.2.3.09/"}, "arguments.url"),
        ({"url": "http://[::1%25eth0]/"}, "arguments.url"),
        ({"url": "http://exa$mple.com/"}, "arguments.url"),
        ({"url": "http://example.com/" + "a" * (8 << 10)}, "arguments.url"),
        ({"url": "http://example.com/", "method": "PUT"}, "arguments.method"),
        ({"url": "http://example.com/", "method": "get"}, "arguments.method"),
        ({"url": "http://example.com/", "body": "x"}, "arguments.body"),
        (
            {"url": "http://example.com/", "method": "POST", "body": "x" * (1 << 20 | 1)},
            "arguments.body",
        ),
        ({"url": "http://example.com/", "timeout": 0.5}, "arguments.timeout"),
        ({"url": "http://example.com/", "timeout": 61}, "arguments.timeout"),
        ({"url": "http://example.com/", "headers": {"Host": "evil"}}, "arguments.headers"),
        ({"url": "http://example.com/", "headers": {"content-length": "1"}}, "arguments.headers"),
        (
            {"url": "http://example.com/", "headers": {"Transfer-Encoding": "x"}},
            "arguments.headers",
        ),
        ({"url": "http://example.com/", "headers": {"Connection": "close"}}, "arguments.headers"),
        ({"url": "http://example.com/", "headers": {"Upgrade": "h2c"}}, "arguments.headers"),
        ({"url": "http://example.com/", "headers": {"bad name": "x"}}, "arguments.headers"),
        (
            {"url": "http://example.com/", "headers": {"X-A": "a\r\nInjected: 1"}},
            "arguments.headers.x-a",
        ),
        ({"url": "http://example.com/", "headers": {"X-A": 1}}, "arguments.headers.X-A"),
        (
            {"url": "http://example.com/", "headers": {f"X-{i}": "v" for i in range(33)}},
            "arguments.headers",
        ),
        ({"url": "http://example.com/", "extra": 1}, "arguments.extra"),
        ({}, "arguments.url"),
    ],
)
def test_bad_arguments_are_refused_at_prepare_with_the_field(
    ctx: ToolContext, raw: dict[str, object], field: str
) -> None:
    """Invalid input is ARGUMENTS_INVALID naming the field, before anything is resolved."""
    assert invalid_field(Fetch(HttpAccess()), raw, ctx) == field


# Refused addresses ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "10.0.0.1",
        "192.168.1.1",
        "172.16.0.1",
        "169.254.169.254",
        "100.64.0.1",
        "224.0.0.1",
        "0.0.0.0",  # noqa: S104 - an address to refuse, nothing binds to it
        "240.0.0.1",
        "127.0.0.1",
        "::1",
        "fe80::1",
        "fc00::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "2002:a00:1::1",
    ],
)
async def test_internal_addresses_are_refused_before_any_connection(
    ctx: ToolContext, backend: RecordingBackend, address: str
) -> None:
    """A name resolving to an internal address is refused; no socket is ever dialled."""
    resolver = FixedResolver(address)
    tool = Fetch(HttpAccess(resolver=resolver, backend=backend))
    result = await execute(tool, {"url": "http://internal.test/a?token=secret"}, ctx)
    assert result.is_error
    assert result.error_code == "address_refused"
    assert resolver.lookups == [("internal.test", 80)]
    assert backend.dialled == []
    assert "internal.test:80" in result.text
    assert "secret" not in result.text


async def test_one_internal_address_among_public_ones_refuses_the_call(
    ctx: ToolContext, backend: RecordingBackend
) -> None:
    """Every resolved address must be acceptable, not just the first."""
    tool = Fetch(HttpAccess(resolver=FixedResolver("93.184.216.34", "10.0.0.1"), backend=backend))
    result = await execute(tool, {"url": "http://mixed.test/"}, ctx)
    assert result.error_code == "address_refused"
    assert backend.dialled == []


@pytest.mark.parametrize(
    "url", ["http://2130706433/", "http://[::ffff:127.0.0.1]/", "http://127.1:9/"]
)
async def test_literal_internal_addresses_are_refused_without_allow_networks(
    ctx: ToolContext, backend: RecordingBackend, url: str
) -> None:
    """An IP literal in any numeric form is checked like a resolved one, with no lookup."""
    resolver = FixedResolver("8.8.8.8")
    result = await execute(Fetch(HttpAccess(resolver=resolver, backend=backend)), {"url": url}, ctx)
    assert result.error_code == "address_refused"
    assert resolver.lookups == []
    assert backend.dialled == []


async def test_unresolvable_names_are_dns_failed(
    ctx: ToolContext, backend: RecordingBackend
) -> None:
    """No address means dns_failed, naming method and host:port only."""
    tool = Fetch(HttpAccess(resolver=FixedResolver(), backend=backend))
    result = await execute(tool, {"url": "https://nowhere.test/x?token=secret"}, ctx)
    assert result.error_code == "dns_failed"
    assert "GET nowhere.test:443" in result.text
    assert "secret" not in result.text
    assert backend.dialled == []


# Round trips on 127.0.0.1 ------------------------------------------------------------------


async def test_get_connects_to_the_pinned_address_and_keeps_the_host_name(
    ctx: ToolContext, web: WebServer, backend: RecordingBackend
) -> None:
    """The request goes to the resolved address while the Host header keeps the name."""
    resolver = FixedResolver("127.0.0.1")
    tool = loopback_fetch(backend, resolver)
    result = await execute(tool, {"url": web.url("/echo?q=1", host="pinned.test")}, ctx)
    assert not result.is_error, result.text
    assert result.text.startswith("HTTP 200 OK\n")
    echoed = body_json(result.text)
    assert echoed["host"] == f"pinned.test:{web.port}"
    assert echoed["path"] == "/echo?q=1"
    assert backend.dialled == [("127.0.0.1", web.port)]
    assert resolver.lookups == [("pinned.test", web.port)]


async def test_post_sends_body_and_headers(
    ctx: ToolContext, web: WebServer, backend: RecordingBackend
) -> None:
    """POST carries the body, its length and the agent's headers."""
    raw: dict[str, object] = {
        "url": web.url("/echo"),
        "method": "POST",
        "body": "hello, server",
        "headers": {"X-Agent": "yes", "Content-Type": "text/plain"},
    }
    result = await execute(loopback_fetch(backend), raw, ctx)
    echoed = body_json(result.text)
    assert echoed["method"] == "POST"
    assert echoed["body"] == "hello, server"
    headers = echoed["headers"]
    assert isinstance(headers, dict)
    assert headers["x-agent"] == "yes"
    assert headers["content-length"] == str(len("hello, server"))


async def test_head_returns_status_and_headers_without_a_body(
    ctx: ToolContext, web: WebServer, backend: RecordingBackend
) -> None:
    """HEAD shows the status line and headers, then nothing after the blank line."""
    raw: dict[str, object] = {"url": web.url("/echo"), "method": "HEAD"}
    result = await execute(loopback_fetch(backend), raw, ctx)
    assert not result.is_error
    head, body = result.text.split("\n\n", 1)
    assert head.startswith("HTTP 200 OK\n")
    assert "content-type: application/json" in head
    assert body == ""
    assert web.recorded.requests == [("HEAD", "/echo")]


async def test_not_found_is_a_normal_result(
    ctx: ToolContext, web: WebServer, backend: RecordingBackend
) -> None:
    """A 404 is the server's answer, not a tool error."""
    result = await execute(loopback_fetch(backend), {"url": web.url("/missing")}, ctx)
    assert not result.is_error
    assert result.text.startswith("HTTP 404 Not Found\n")
    assert result.text.endswith("\n\nno such page")


async def test_headers_are_sorted_capped_cut_and_cookies_redacted(
    ctx: ToolContext, web: WebServer, backend: RecordingBackend
) -> None:
    """At most 16 lower-cased sorted headers, values cut at 200 chars, no cookie values."""
    result = await execute(loopback_fetch(backend), {"url": web.url("/headers")}, ctx)
    head = result.text.split("\n\n", 1)[0].splitlines()
    header_lines = [line for line in head[1:] if not line.startswith("[")]
    assert len(header_lines) == 16
    names = [line.split(":", 1)[0] for line in header_lines]
    assert names == sorted(names)
    assert all(name == name.lower() for name in names)
    assert head[-1].startswith("[")
    assert "more headers not shown" in head[-1]
    cut = next(line for line in header_lines if line.startswith("x-header-00"))
    assert len(cut) < 230
    assert "very-secret" not in result.text


async def test_body_is_capped_and_reading_stops_at_the_cap(
    ctx: ToolContext, web: WebServer, backend: RecordingBackend
) -> None:
    """An 8 MiB body shows 64 KiB, says it was truncated and reports the omitted bytes."""
    result = await execute(loopback_fetch(backend), {"url": web.url("/big")}, ctx)
    body = result.text.split("\n\n", 1)[1]
    assert body.startswith("a" * (64 << 10))
    assert "truncated" in body.splitlines()[-1]
    assert result.omitted_bytes == BIG_BODY_BYTES - (64 << 10)


async def test_binary_body_is_reported_by_size_and_type(
    ctx: ToolContext, web: WebServer, backend: RecordingBackend
) -> None:
    """Non-text content is never put in the result, only its size and type."""
    result = await execute(loopback_fetch(backend), {"url": web.url("/binary")}, ctx)
    assert result.text.endswith("\n\n[binary body: 1024 bytes, application/octet-stream]")


async def test_text_is_decoded_by_its_charset(
    ctx: ToolContext, web: WebServer, backend: RecordingBackend
) -> None:
    """A latin-1 body declared as such comes back as the right characters."""
    result = await execute(loopback_fetch(backend), {"url": web.url("/latin1")}, ctx)
    assert result.text.endswith("\n\ncafé")


async def test_a_slow_server_times_out(
    ctx: ToolContext, web: WebServer, backend: RecordingBackend
) -> None:
    """The timeout bounds the whole request; the error names no path."""
    raw: dict[str, object] = {"url": web.url("/slow?token=secret"), "timeout": 1}
    result = await execute(loopback_fetch(backend), raw, ctx)
    assert result.error_code == "timed_out"
    assert f"GET 127.0.0.1:{web.port}" in result.text
    assert "secret" not in result.text
    assert "slow" not in result.text


async def test_a_closed_port_is_connect_failed(ctx: ToolContext, backend: RecordingBackend) -> None:
    """Nothing listening means connect_failed, naming method and host:port only."""
    with web_server() as gone:
        port = gone.port
    raw: dict[str, object] = {"url": f"http://127.0.0.1:{port}/p?token=secret"}
    result = await execute(loopback_fetch(backend), raw, ctx)
    assert result.error_code == "connect_failed"
    assert "secret" not in result.text
    assert "/p" not in result.text


# Redirects -----------------------------------------------------------------------------------


async def test_same_origin_redirects_are_followed_on_the_pinned_address(
    ctx: ToolContext, web: WebServer, backend: RecordingBackend
) -> None:
    """A relative redirect on the same host and port is followed; DNS is asked once."""
    resolver = FixedResolver("127.0.0.1")
    url = web.url("/redirect?to=/echo%3Fafter%3D1", host="pinned.test")
    result = await execute(loopback_fetch(backend, resolver), {"url": url}, ctx)
    assert body_json(result.text)["path"] == "/echo?after=1"
    assert resolver.lookups == [("pinned.test", web.port)]
    assert {d for d in backend.dialled} == {("127.0.0.1", web.port)}


async def test_303_after_post_becomes_a_get(
    ctx: ToolContext, web: WebServer, backend: RecordingBackend
) -> None:
    """See Other switches to GET and drops the body."""
    raw: dict[str, object] = {
        "url": web.url("/redirect?status=303&to=/echo"),
        "method": "POST",
        "body": "data",
    }
    result = await execute(loopback_fetch(backend), raw, ctx)
    echoed = body_json(result.text)
    assert (echoed["method"], echoed["body"]) == ("GET", "")


@pytest.mark.parametrize(
    ("location", "named"),
    [
        ("http://other.test:{port}/echo?token=secret", "other.test:{port}"),
        ("http://127.0.0.1:1/echo?token=secret", "127.0.0.1:1"),
        ("https://127.0.0.1:{port}/echo?token=secret", "127.0.0.1:{port}"),
        ("http://2130706434:{port}/echo?token=secret", "127.0.0.2:{port}"),
    ],
)
async def test_redirects_elsewhere_are_refused_naming_only_host_and_port(
    ctx: ToolContext, web: WebServer, backend: RecordingBackend, location: str, named: str
) -> None:
    """Another scheme, host or port stops the call with the host:port it tried to reach."""
    target = location.format(port=web.port).replace("?", "%3F").replace("=", "%3D")
    result = await execute(loopback_fetch(backend), {"url": web.url(f"/redirect?to={target}")}, ctx)
    assert result.is_error
    assert result.error_code == "redirect_refused"
    assert named.format(port=web.port) in result.text
    assert "secret" not in result.text
    assert "/echo" not in result.text
    assert [p for _, p in web.recorded.requests] == [f"/redirect?to={target}"]


async def test_redirect_loops_stop_after_five(
    ctx: ToolContext, web: WebServer, backend: RecordingBackend
) -> None:
    """At most five redirects are followed."""
    result = await execute(loopback_fetch(backend), {"url": web.url("/loop")}, ctx)
    assert result.error_code == "too_many_redirects"
    assert len(web.recorded.requests) == 6


# TLS -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"), "pinned.test")


@pytest.fixture
def tls_web(certificate: tuple[Path, Path]) -> Iterator[WebServer]:
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(*certificate)
    with web_server(server_context) as server:
        yield server


def trusting(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certificate[0]))
    return context


async def test_tls_verifies_the_certificate_against_the_url_host(
    ctx: ToolContext, tls_web: WebServer, certificate: tuple[Path, Path]
) -> None:
    """Dialling the pinned IP still checks the certificate (and SNI) for the host name."""
    backend = RecordingBackend()
    tool = Fetch(
        HttpAccess(
            LOOPBACK,
            resolver=FixedResolver("127.0.0.1"),
            backend=backend,
            ssl_context=trusting(certificate),
        )
    )
    url = tls_web.url("/echo", host="pinned.test", scheme="https")
    result = await execute(tool, {"url": url}, ctx)
    assert not result.is_error, result.text
    assert backend.dialled == [("127.0.0.1", tls_web.port)]


async def test_tls_refuses_a_certificate_for_another_name(
    ctx: ToolContext, tls_web: WebServer, certificate: tuple[Path, Path]
) -> None:
    """The same server reached under a name its certificate lacks is tls_failed."""
    tool = Fetch(
        HttpAccess(
            LOOPBACK,
            resolver=FixedResolver("127.0.0.1"),
            backend=RecordingBackend(),
            ssl_context=trusting(certificate),
        )
    )
    url = tls_web.url("/echo?token=secret", host="other.test", scheme="https")
    result = await execute(tool, {"url": url}, ctx)
    assert result.error_code == "tls_failed"
    assert f"GET other.test:{tls_web.port}" in result.text
    assert "secret" not in result.text


# Address policy ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "allowed", "refused"),
    [
        ("8.8.8.8", [], False),
        ("2606:4700:4700::1111", [], False),
        ("::ffff:8.8.8.8", [], False),
        ("::ffff:127.0.0.1", ["127.0.0.0/8"], False),
        ("127.0.0.1", ["10.0.0.0/8"], True),
        ("10.1.2.3", ["10.0.0.0/8"], False),
        ("2002:7f00:1::1", ["127.0.0.0/8"], True),  # 6to4 never dials the embedded address
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", [], True),  # Teredo client 10.0.0.1
        ("64:ff9b::a00:1", [], True),  # NAT64 of 10.0.0.1
        ("::a00:1", [], True),  # IPv4-compatible 10.0.0.1
    ],
)
def test_address_policy(address: str, allowed: list[str], refused: bool) -> None:
    """Internal addresses (or embedded ones) are refused unless the dialled address is allowed."""
    networks = [ipaddress.ip_network(n) for n in allowed]
    assert address_refused(ipaddress.ip_address(address), networks) is refused


class RefusingBackend(RecordingBackend):
    """Records the dial and connects nowhere: for addresses tests may not reach."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.dialled.append((host, port))
        raise httpcore.ConnectError("not dialled in tests")


async def test_allow_networks_lets_an_internal_address_be_dialled(ctx: ToolContext) -> None:
    """An address inside fetch.allow_networks is dialled (pinned) instead of refused."""
    backend = RefusingBackend()
    tool = Fetch(HttpAccess(["10.0.0.0/8"], resolver=FixedResolver("10.0.0.1"), backend=backend))
    result = await execute(tool, {"url": "http://intranet.test/?token=secret"}, ctx)
    assert result.error_code == "connect_failed"
    assert backend.dialled == [("10.0.0.1", 80)]
    assert "secret" not in result.text


async def test_mapped_ipv6_literal_dials_its_ipv4_address(
    ctx: ToolContext, web: WebServer, backend: RecordingBackend
) -> None:
    """`[::ffff:127.0.0.1]` reaches 127.0.0.1 when loopback is allowed; Host keeps the literal."""
    url = f"http://[::ffff:127.0.0.1]:{web.port}/echo"
    result = await execute(loopback_fetch(backend), {"url": url}, ctx)
    assert body_json(result.text)["host"] == f"[::ffff:7f00:1]:{web.port}"
    assert backend.dialled == [("127.0.0.1", web.port)]


async def test_the_system_resolver_is_used_by_default(
    ctx: ToolContext, backend: RecordingBackend
) -> None:
    """`localhost` resolves through the system resolver to loopback, which is refused."""
    result = await execute(Fetch(HttpAccess(backend=backend)), {"url": "http://localhost:1/"}, ctx)
    assert result.error_code == "address_refused"
    assert backend.dialled == []
