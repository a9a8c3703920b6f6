"""The Fetch tool: one HTTP(S) request to an approved `tcp://host:port` (design section 5).

Prepare canonicalizes the URL (lower-case IDNA host, numeric IPv4 forms in dotted form,
compressed IPv6, default ports) and freezes it; nothing is resolved or fetched. Invoke
resolves the host once, refuses internal addresses unless `network.allow_networks` lists them,
and dials that pinned address for the whole call (the Host header and TLS SNI keep the
name), so DNS rebinding cannot move it. Redirects stay on the approved scheme, host and
port. Errors name only the method and host:port, never the path, query or body.
"""

from __future__ import annotations

import codecs
import hashlib
import hmac
import http
import re
import ssl
import urllib.parse
from typing import Annotated, ClassVar, Literal

import anyio
import httpcore
from pydantic import Field

from callgate.server.core.errors import arguments_invalid
from callgate.server.core.models import Requirement, RequirementKind, RuleCandidate, ToolResult
from callgate.server.core.preview import bounded
from callgate.server.core.tool import Arguments, Artifact, Prepared, Tool, ToolContext

from ..net.addresses import IPAddress, Target, bare_host
from .network import HttpAccess, NetworkRefused

URL_MAX_BYTES = 8 << 10
BODY_MAX_BYTES = 1 << 20
HEADERS_MAX = 32
HEADER_VALUE_MAX_BYTES = 8 << 10
MAX_REDIRECTS = 5
RESULT_HEADERS_MAX = 16
RESULT_HEADER_VALUE_MAX_CHARS = 200
RESULT_BODY_MAX_BYTES = 64 << 10

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_TOKEN = re.compile(r"\A[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
# Framing and hop-by-hop headers are the client's to set, never the agent's.
_REFUSED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "upgrade",
    }
)
# Request headers whose values are credentials: the approver sees that one is sent (its scheme,
# or the cookies' names) and which (a fingerprint), never the value.
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
# A request header's value in the preview is cut to this many characters.
PREVIEW_VALUE_CHARS = 512
# Response headers whose values are credentials: shown by name only.
_REDACTED_HEADERS = frozenset({"set-cookie", "set-cookie2", "www-authenticate"})
_TEXT_TYPES = ("application/json", "application/xml", "application/javascript")


# The tool ------------------------------------------------------------------------------------


class FetchArguments(Arguments):
    url: str = Field(description="The http or https URL to request.")
    method: Literal["GET", "POST", "HEAD"] = Field(default="GET", description="HTTP method.")
    headers: dict[str, str] | None = Field(
        default=None, description="Extra request headers (at most 32)."
    )
    body: str | None = Field(default=None, description="Request body (POST only, UTF-8).")
    timeout: Annotated[float, Field(ge=1, le=60)] = Field(
        default=30, description="Seconds the whole request may take (1-60)."
    )


class FetchArtifact(Artifact):
    method: str
    scheme: str
    host: str
    port: int
    target: str
    headers: tuple[tuple[str, str], ...]
    body: str | None
    timeout: float


def _validate_headers(headers: dict[str, str]) -> tuple[tuple[str, str], ...]:
    if len(headers) > HEADERS_MAX:
        raise arguments_invalid("headers", f"at most {HEADERS_MAX} headers may be sent")
    seen: set[str] = set()
    result = []
    for name, value in headers.items():
        if not _TOKEN.match(name):
            raise arguments_invalid("headers", "a header name is not a valid HTTP token")
        lowered = name.lower()
        if lowered in seen:
            raise arguments_invalid("headers", f"header {lowered} is given twice")
        seen.add(lowered)
        if lowered in _REFUSED_HEADERS:
            raise arguments_invalid("headers", f"header {lowered} is set by the server")
        if any(c in value for c in "\r\n\0") or len(value.encode()) > HEADER_VALUE_MAX_BYTES:
            raise arguments_invalid(
                f"headers.{lowered}", "a header value may not hold CR, LF or NUL (max 8 KiB)"
            )
        result.append((name, value))
    return tuple(result)


class Fetch(Tool[FetchArguments, FetchArtifact]):
    name: ClassVar[str] = "Fetch"
    description: ClassVar[str] = (
        "Make one HTTP GET, POST or HEAD request to a public http(s) URL and return the "
        "status, the response headers and the body (capped at 64 KiB)."
    )
    arguments: ClassVar[type[Arguments]] = FetchArguments
    artifact: ClassVar[type[Artifact]] = FetchArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = (RequirementKind.NETWORK.value,)

    def __init__(self, http: HttpAccess) -> None:
        """`http` is the server's network client (`Service.NETWORK`), whose address policy
        every request of this tool obeys."""
        self._http = http

    def prepare_args(self, args: FetchArguments, ctx: ToolContext) -> Prepared:
        if len(args.url.encode()) > URL_MAX_BYTES:
            raise arguments_invalid("url", "the URL is longer than 8 KiB")
        try:
            target = Target.parse(args.url)
        except ValueError as exc:
            raise arguments_invalid("url", str(exc)) from None
        headers = _validate_headers(args.headers or {})
        if args.body is not None:
            if args.method != "POST":
                raise arguments_invalid("body", "a body may be sent only with POST")
            if len(args.body.encode()) > BODY_MAX_BYTES:
                raise arguments_invalid("body", "the body is larger than 1 MiB")
        summary = f"{args.method} {target.authority}"
        match = f"tcp://{target.authority}"
        kind = RequirementKind.NETWORK.value
        header = [
            f"{args.method} {target.scheme}://{target.authority}{target.target}",
            "headers:" + ("" if headers else " none"),
            *(f"  {self._shown_header(name, value)}" for name, value in headers),
        ]
        if args.body is None:
            preview = bounded("request", header, (), ctx.limits.preview_max_bytes)
        else:
            size = len(args.body.encode())
            header.append(f"body ({size} bytes):")
            preview = bounded(
                "request", header, args.body.split("\n"), ctx.limits.preview_max_bytes
            )
        return Prepared(
            summary=summary,
            requirements=(Requirement(kind=kind, scope="", match=match, description=summary),),
            artifact=FetchArtifact(
                method=args.method,
                scheme=target.scheme,
                host=target.host,
                port=target.port,
                target=target.target,
                headers=headers,
                body=args.body,
                timeout=args.timeout,
            ),
            candidates=(RuleCandidate(kind=kind, match=match, description=f"connect to {match}"),),
            preview=preview,
        )

    def _shown_header(self, name: str, value: str) -> str:
        """A request header as the approver sees it: the value (escaped by the preview, cut),
        or for a credential its scheme (the cookies' names) and a keyed fingerprint."""
        lowered = name.lower()
        if lowered not in _CREDENTIAL_HEADERS:
            if len(value) > PREVIEW_VALUE_CHARS:
                value = f"{value[:PREVIEW_VALUE_CHARS]}… ({len(value)} characters)"
            return f"{name}: {value}"
        digest = hmac.new(self._http.credential_key, value.encode(), hashlib.sha256).hexdigest()
        if lowered == "cookie":
            names = [part.split("=", 1)[0].strip() for part in value.split(";") if part.strip()]
            shown = "cookies " + ", ".join(n[:64] for n in names[:16])
            if len(names) > 16:
                shown += f", … ({len(names)} in all)"
        else:
            scheme, _, rest = value.strip().partition(" ")
            shown = f"{scheme[:32]} …" if rest else "a credential without a scheme"
        return f"{name}: {shown} [value not shown; fingerprint {digest[:12]}]"

    async def run(self, artifact: FetchArtifact, ctx: ToolContext) -> ToolResult:
        target = Target(artifact.scheme, artifact.host, artifact.port, artifact.target)
        where = f"{artifact.method} {target.authority}"
        try:
            with anyio.fail_after(artifact.timeout):
                address = await self._pin(target, where)
                if isinstance(address, ToolResult):
                    return address
                return await self._exchange(artifact, target, address, where)
        except TimeoutError:
            return ToolResult.error(
                "timed_out", f"{where}: no complete response within {artifact.timeout:g} s."
            )

    async def _pin(self, target: Target, where: str) -> IPAddress | ToolResult:
        """The one address this call connects to, or the error result refusing it."""
        try:
            return await self._http.pin(target.host, target.port)
        except NetworkRefused as refused:
            if refused.code == "address_refused":
                return ToolResult.error(
                    "address_refused",
                    f"{where}: the host resolves to an internal address, which Fetch may not "
                    "reach (see network.allow_networks).",
                )
            return ToolResult.error(refused.code, f"{where}: {refused.message}")

    async def _exchange(
        self, artifact: FetchArtifact, target: Target, address: IPAddress, where: str
    ) -> ToolResult:
        method = artifact.method
        body = artifact.body.encode() if artifact.body is not None else None
        async with self._http.pool(address) as pool:
            for _ in range(MAX_REDIRECTS + 1):
                headers = [("Host", target.host_header), *artifact.headers]
                if body is not None:
                    headers.append(("Content-Length", str(len(body))))
                request = httpcore.Request(
                    method,
                    httpcore.URL(
                        scheme=target.scheme,
                        host=bare_host(target.host),
                        port=target.port,
                        target=target.target,
                    ),
                    headers=headers,
                    content=body or b"",
                )
                try:
                    response = await pool.handle_async_request(request)
                    try:
                        location = _redirect_location(response)
                        if location is None:
                            return await _result(response, method)
                    finally:
                        await response.aclose()
                except httpcore.ConnectError as exc:
                    if _tls_failure(exc):
                        return ToolResult.error(
                            "tls_failed", f"{where}: the TLS handshake or certificate failed."
                        )
                    return ToolResult.error("connect_failed", f"{where}: could not connect.")
                except (httpcore.ConnectTimeout, httpcore.ReadTimeout, httpcore.WriteTimeout):
                    raise TimeoutError from None
                except httpcore.NetworkError:
                    return ToolResult.error("connect_failed", f"{where}: the connection failed.")
                except httpcore.ProtocolError:
                    return ToolResult.error(
                        "connect_failed", f"{where}: the server's response was not valid HTTP."
                    )
                try:
                    following = Target.parse(urllib.parse.urljoin(target.url, location))
                except ValueError:
                    return ToolResult.error(
                        "redirect_refused",
                        f"{where}: the server redirected to an invalid location; not followed.",
                    )
                if not following.same_origin(target):
                    return ToolResult.error(
                        "redirect_refused",
                        f"{where}: the server redirected to {following.scheme} "
                        f"{following.authority}, which was not approved; not followed.",
                    )
                target = following
                if response.status == 303 or (response.status in (301, 302) and method == "POST"):
                    method, body = "GET", None
        return ToolResult.error(
            "too_many_redirects", f"{where}: more than {MAX_REDIRECTS} redirects."
        )


def _tls_failure(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _header(response: httpcore.Response, name: bytes) -> str | None:
    for key, value in response.headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _redirect_location(response: httpcore.Response) -> str | None:
    if response.status not in _REDIRECTS:
        return None
    return _header(response, b"location")


def _printable(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _status_line(response: httpcore.Response) -> str:
    reason = response.extensions.get("reason_phrase", b"")
    phrase = reason.decode("latin-1") if isinstance(reason, bytes) else ""
    if not phrase:
        try:
            phrase = http.HTTPStatus(response.status).phrase
        except ValueError:
            phrase = ""
    return _printable(f"HTTP {response.status} {phrase}".rstrip())


def _header_lines(response: httpcore.Response) -> list[str]:
    lines = []
    for raw_name, raw_value in sorted(response.headers, key=lambda kv: kv[0].lower()):
        name = raw_name.decode("latin-1").lower()
        value = raw_value.decode("latin-1")
        if name in _REDACTED_HEADERS:
            value = f"[{len(raw_value)} bytes redacted]"
        elif len(value) > RESULT_HEADER_VALUE_MAX_CHARS:
            value = value[:RESULT_HEADER_VALUE_MAX_CHARS] + "…"
        lines.append(_printable(f"{name}: {value}"))
    if len(lines) > RESULT_HEADERS_MAX:
        left = len(lines) - RESULT_HEADERS_MAX
        lines = [*lines[:RESULT_HEADERS_MAX], f"[{left} more headers not shown]"]
    return lines


def _charset(content_type: str) -> str | None:
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.lower() == "charset" and value:
            name = value.strip("\"' ")
            try:
                return codecs.lookup(name).name
            except LookupError:
                return None
    return None


def _textual(media_type: str) -> bool:
    return (
        media_type.startswith("text/")
        or media_type in _TEXT_TYPES
        or media_type.endswith(("+json", "+xml"))
    )


def _decode(data: bytes, content_type: str, complete: bool) -> str | None:
    """The body as text, or None when it is binary."""
    media_type = content_type.split(";", maxsplit=1)[0].strip().lower()
    charset = _charset(content_type)
    if _textual(media_type) or charset is not None:
        decoder = codecs.getincrementaldecoder(charset or "utf-8")(errors="replace")
        return decoder.decode(data, final=complete)
    if b"\0" in data:
        return None
    try:
        return codecs.getincrementaldecoder("utf-8")().decode(data, final=complete)
    except UnicodeDecodeError:
        return None


async def _result(response: httpcore.Response, method: str) -> ToolResult:
    lines = [_status_line(response), *_header_lines(response), ""]
    if method == "HEAD":
        return ToolResult(text="\n".join([*lines, ""]))
    data = bytearray()
    truncated = False
    async for chunk in response.aiter_stream():
        room = RESULT_BODY_MAX_BYTES - len(data)
        data += chunk[:room]
        if len(chunk) > room:
            truncated = True
            break
    length = _header(response, b"content-length")
    total = int(length) if length is not None and length.isdigit() else None
    omitted = max(total - len(data), 0) if truncated and total is not None else 0
    content_type = _header(response, b"content-type") or ""
    text = _decode(bytes(data), content_type, complete=not truncated)
    if text is None:
        size = str(total if total is not None else len(data))
        if truncated and total is None:
            size = f"more than {len(data)}"
        kind = _printable(content_type.split(";")[0].strip()) or "no content type"
        lines.append(f"[binary body: {size} bytes, {kind}]")
        return ToolResult(text="\n".join(lines), omitted_bytes=omitted)
    lines.append(text)
    if truncated:
        rest = f"{omitted} more bytes" if omitted else "the rest"
        lines.append(f"[body truncated at {RESULT_BODY_MAX_BYTES} bytes; {rest} not read]")
    return ToolResult(text="\n".join(lines), omitted_bytes=omitted)
