"""`callgate console`: a web approval console for a fleet of callgate servers, served by
callgate itself (an ASGI app on Starlette, under uvicorn).

Security, since the page holds an approver's authority:

- It listens on a loopback address only (reach it from elsewhere through an SSH tunnel or
  `kubectl port-forward`); the Host header must name that address (DNS rebinding).
- Login takes an approver token, checked by each server (ListRules needs the approver role);
  the token stays in this process's memory. The browser holds only a random 256-bit session
  ID in the cookie `callgate_console` (HttpOnly, SameSite=Strict, Path=/), which expires
  after an hour idle and twelve hours in all.
- Every state-changing request is a JSON POST carrying the session's CSRF token in
  `X-CSRF-Token` (compared in constant time), from the console's own origin (Origin and
  Sec-Fetch-Site checked when the browser sends them); anything else is 403 and changes
  nothing.
- Every response has a strict Content-Security-Policy (only the console's own scripts,
  styles and connections; no inline code, no frames), nosniff, no referrer to other sites
  and no caching.
  Every asset is served from this package; nothing comes from a CDN, and the page builds its
  DOM with textContent only.
"""

from __future__ import annotations

import hmac
import json
import secrets
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib import resources
from typing import Final

import anyio
from anyio.abc import TaskGroup
from pydantic import JsonValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from callgate.client.connection import CallgateClient
from callgate.client.errors import CallgateClientError, ServerUnavailableError
from callgate.client.models import DecisionKind

from .fleet import FleetView, Target

COOKIE: Final = "callgate_console"
IDLE_SECONDS: Final = 3600.0
LIFETIME_SECONDS: Final = 12 * 3600.0
LOGIN_TIMEOUT: Final = 5.0
HEARTBEAT_SECONDS: Final = 15.0
MAX_BODY_BYTES: Final = 64 << 10
AUDIT_PAGE: Final = 200
MAX_SESSIONS: Final = 32
"""Logged-in browsers kept at once (each holds a stream per server); the oldest goes first."""

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: Final = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    # same-origin, not no-referrer: with no-referrer a browser sends `Origin: null` on a form
    # POST, and the login's origin check could not tell the console's own page from others.
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)

KINDS: Final = {
    "once": DecisionKind.APPROVE_ONCE,
    "session": DecisionKind.APPROVE_FOR_SESSION,
    "always": DecisionKind.APPROVE_ALWAYS,
    "deny": DecisionKind.DENY,
    "apply": DecisionKind.APPLY_CHANGES,
}

_STATIC: Final = {
    "/static/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/static/console.css": ("console.css", "text/css; charset=utf-8"),
}


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


class Refused(Exception):
    """A request the console answers with `status` and a JSON error, changing nothing."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason


@dataclass(eq=False)
class ConsoleSession:
    view: FleetView
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    created: float = field(default_factory=time.monotonic)
    seen: float = field(default_factory=time.monotonic)

    def expired(self, now: float) -> bool:
        return now - self.seen > IDLE_SECONDS or now - self.created > LIFETIME_SECONDS


class SecurityHeaders:
    """Pure ASGI middleware: refuses a Host that is not the console's own address, and adds
    the security headers to every response (streamed ones included)."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = dict(scope["headers"]).get(b"host", b"").decode("latin-1").lower()
        if host not in self.hosts:
            response: Response = JSONResponse(
                {"error": "This console answers only at its own address."}, status_code=421
            )
            await self._secured(response)(scope, receive, send)
            return

        async def secured_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, secured_send)

    @staticmethod
    def _secured(response: Response) -> Response:
        for name, value in SECURITY_HEADERS:
            response.headers[name.decode()] = value.decode()
        return response


class Console:
    """The console's state (sessions) and its routes."""

    def __init__(self, targets: Sequence[Target], listen_host: str, listen_port: int) -> None:
        if not targets:
            raise ValueError("the console needs at least one target")
        names = [t.name for t in targets]
        if len(set(names)) != len(names):
            raise ValueError("two targets have the same name; name them NAME=ADDRESS")
        self.targets = tuple(targets)
        self.sessions: dict[str, ConsoleSession] = {}
        self._task_group: TaskGroup | None = None
        shown = f"[{listen_host}]" if ":" in listen_host else listen_host
        self.origin_hosts = frozenset(
            {f"{shown}:{listen_port}"}
            | ({f"localhost:{listen_port}"} if listen_host in ("127.0.0.1", "::1") else set())
        )

    # ------------------------------------------------------------------ app

    def app(self) -> ASGIApp:
        routes = [
            Route("/", self.index, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/api/session", self.session_info, methods=["GET"]),
            Route("/api/events", self.events, methods=["GET"]),
            Route("/api/decide", self.decide, methods=["POST"]),
            Route("/api/decide-batch", self.decide_batch, methods=["POST"]),
            Route("/api/dry-run", self.dry_run, methods=["POST"]),
            Route("/api/answer", self.answer, methods=["POST"]),
            Route("/api/audit", self.audit, methods=["GET"]),
            Route("/api/preview", self.preview, methods=["GET"]),
            *(Route(path, self.static, methods=["GET"]) for path in _STATIC),
            Route("/favicon.ico", lambda request: Response(status_code=204), methods=["GET"]),
        ]
        starlette = Starlette(routes=routes, lifespan=self._lifespan)
        return SecurityHeaders(starlette, self.origin_hosts)

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as group:
            self._task_group = group
            try:
                yield
            finally:
                await self.close_sessions()
                group.cancel_scope.cancel()

    async def close_sessions(self) -> None:
        """Log everybody out: watchers stop, live streams end."""
        sessions, self.sessions = list(self.sessions.values()), {}
        for session in sessions:
            await session.view.close()

    # ------------------------------------------------------------------ sessions

    async def _sweep(self) -> None:
        now = time.monotonic()
        for key, session in list(self.sessions.items()):
            if session.expired(now):
                del self.sessions[key]
                await session.view.close()

    async def _session(self, request: Request) -> ConsoleSession | None:
        await self._sweep()
        key = request.cookies.get(COOKIE, "")
        session = self.sessions.get(key) if key else None
        if session is not None:
            session.seen = time.monotonic()
        return session

    def _same_origin(self, request: Request) -> bool:
        """The request comes from the console's own page (when the browser says where from)."""
        origin = request.headers.get("origin")
        if origin is not None:
            parsed = urllib.parse.urlsplit(origin)
            if parsed.scheme != "http" or parsed.netloc.lower() not in self.origin_hosts:
                return False
        site = request.headers.get("sec-fetch-site")
        return site is None or site in ("same-origin", "none")

    async def _checked(self, request: Request) -> tuple[ConsoleSession, dict[str, JsonValue]]:
        """A state-changing API request: session cookie, CSRF token, origin, a JSON object."""
        session = await self._session(request)
        if session is None:
            raise Refused(401, "Log in first: the session is missing or has expired.")
        token = request.headers.get("x-csrf-token", "")
        if not hmac.compare_digest(token.encode(), session.csrf.encode()):
            raise Refused(403, "The request has no valid CSRF token; reload the console.")
        if not self._same_origin(request):
            raise Refused(403, "The request does not come from the console's own page.")
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise Refused(415, "Send the request as application/json.")
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            raise Refused(413, f"The request is larger than {MAX_BODY_BYTES} bytes.")
        try:
            data = json.loads(body)
        except ValueError:
            raise Refused(400, "The request is not valid JSON.") from None
        if not isinstance(data, dict):
            raise Refused(400, "The request must be a JSON object.")
        return session, data

    # ------------------------------------------------------------------ pages

    async def index(self, request: Request) -> Response:
        page = "console.html" if await self._session(request) is not None else "login.html"
        return HTMLResponse(_asset(page))

    async def static(self, request: Request) -> Response:
        name, media_type = _STATIC[request.url.path]
        return Response(_asset(name), media_type=media_type)

    async def login(self, request: Request) -> Response:
        if not self._same_origin(request):
            return _login_page(403, "The login form must be sent from this console's page.")
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return _login_page(413, "The login form is too large.")
        token = urllib.parse.parse_qs(body.decode("utf-8", "replace")).get("token", [""])[0]
        token = token.strip()
        if not token or not token.isascii() or not token.isprintable():
            return _login_page(401, "Paste an approver token (<state_dir>/tokens/approver).")
        await self._sweep()
        view = FleetView(token, self.targets)
        if not await view.login(per_target=LOGIN_TIMEOUT):
            await view.close()
            return _login_page(
                401, "No server accepted this token: it must be an approver or admin token."
            )
        assert self._task_group is not None  # the lifespan runs before any request
        view.start(self._task_group)
        key = secrets.token_urlsafe(32)
        while len(self.sessions) >= MAX_SESSIONS:
            oldest = min(self.sessions, key=lambda k: self.sessions[k].created)
            await self.sessions.pop(oldest).view.close()
        self.sessions[key] = ConsoleSession(view)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            COOKIE, key, httponly=True, samesite="strict", path="/", max_age=int(LIFETIME_SECONDS)
        )
        return response

    async def logout(self, request: Request) -> Response:
        return await self._api(request, self._logout)

    async def _logout(self, request: Request) -> Response:
        session, _ = await self._checked(request)
        key = request.cookies.get(COOKIE, "")
        self.sessions.pop(key, None)
        await session.view.close()
        response = JSONResponse({"ok": True})
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    # ------------------------------------------------------------------ API

    async def _api(
        self, request: Request, handler: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        try:
            return await handler(request)
        except Refused as refused:
            return JSONResponse(
                {"error": refused.message, "reason": refused.reason}, status_code=refused.status
            )
        except ServerUnavailableError as exc:
            return JSONResponse({"error": exc.message, "reason": exc.reason}, status_code=502)
        except CallgateClientError as exc:
            status = 409 if exc.code is not None and exc.code.name == "FAILED_PRECONDITION" else 400
            if exc.code is not None and exc.code.name in ("PERMISSION_DENIED", "UNAUTHENTICATED"):
                status = 403
            if exc.code is not None and exc.code.name == "NOT_FOUND":
                status = 404
            return JSONResponse({"error": exc.message, "reason": exc.reason}, status_code=status)

    async def session_info(self, request: Request) -> Response:
        session = await self._session(request)
        if session is None:
            return JSONResponse({"error": "Log in first."}, status_code=401)
        return JSONResponse(
            {
                "csrf": session.csrf,
                "targets": [
                    {"name": t.name, "address": t.address, **session.view.status.get(t.name, {})}
                    for t in self.targets
                ],
            }
        )

    async def events(self, request: Request) -> Response:
        session = await self._session(request)
        if session is None:
            return JSONResponse({"error": "Log in first."}, status_code=401)
        snapshot, receive = session.view.listen()

        async def stream() -> AsyncIterator[bytes]:
            async with receive:
                yield b"retry: 1000\n\n"
                for event in snapshot:
                    yield _sse(event)
                while True:
                    with anyio.move_on_after(HEARTBEAT_SECONDS) as idle:
                        try:
                            event = await receive.receive()
                        except anyio.EndOfStream:
                            return
                    if idle.cancelled_caught:
                        yield b": keep-alive\n\n"
                        continue
                    yield _sse(event)

        return StreamingResponse(stream(), media_type="text/event-stream")

    @staticmethod
    def _client_for(session: ConsoleSession, data: dict[str, JsonValue]) -> CallgateClient:
        target = data.get("target")
        client = session.view.clients.get(target) if isinstance(target, str) else None
        if client is None:
            raise Refused(400, "Name a target this session is connected to.")
        return client

    async def decide(self, request: Request) -> Response:
        async def run(request: Request) -> Response:
            session, data = await self._checked(request)
            client = self._client_for(session, data)
            kind = _kind(data)
            if kind is DecisionKind.APPLY_CHANGES:
                call = await client.approvals.apply_changes(
                    _text(data, "execution_id"),
                    _text(data, "digest"),
                    _text(data, "effect_digest"),
                    _text(data, "note", ""),
                )
            else:
                call = await client.approvals.decide(
                    _text(data, "execution_id"),
                    _text(data, "digest"),
                    kind,
                    _text(data, "note", ""),
                    _rules(data),
                )
            return JSONResponse({"call": call.model_dump(mode="json")})

        return await self._api(request, run)

    async def dry_run(self, request: Request) -> Response:
        """A dry run of a pending call; its change set also comes back on the event stream
        (the approval sent again), for every approver watching."""

        async def run(request: Request) -> Response:
            session, data = await self._checked(request)
            client = self._client_for(session, data)
            change_set = await client.approvals.dry_run(
                _text(data, "execution_id"), _text(data, "digest")
            )
            return JSONResponse({"change_set": change_set.model_dump(mode="json")})

        return await self._api(request, run)

    async def decide_batch(self, request: Request) -> Response:
        async def run(request: Request) -> Response:
            session, data = await self._checked(request)
            client = self._client_for(session, data)
            calls = data.get("calls")
            if not isinstance(calls, list) or not calls:
                raise Refused(400, "Name the calls to decide: calls is a list of objects.")
            pairs = []
            for item in calls:
                if not isinstance(item, dict):
                    raise Refused(400, "Each call is an object with execution_id and digest.")
                pairs.append((_text(item, "execution_id"), _text(item, "digest")))
            decided = await client.approvals.decide_batch(
                pairs, _kind(data), _text(data, "note", "")
            )
            return JSONResponse({"calls": [c.model_dump(mode="json") for c in decided]})

        return await self._api(request, run)

    async def answer(self, request: Request) -> Response:
        async def run(request: Request) -> Response:
            session, data = await self._checked(request)
            client = self._client_for(session, data)
            await client.approvals.answer(_text(data, "execution_id"), _text(data, "answer"))
            return JSONResponse({"ok": True})

        return await self._api(request, run)

    async def _call_query(self, request: Request) -> tuple[CallgateClient, str]:
        """A GET about one call (`?target=…&execution_id=…`) of a logged-in approver: the
        client of that target and the execution ID."""
        session = await self._session(request)
        if session is None:
            raise Refused(401, "Log in first.")
        params = request.query_params
        client = self._client_for(session, {"target": params.get("target", "")})
        execution_id = params.get("execution_id", "")
        if not execution_id:
            raise Refused(400, "Name the call: execution_id is required.")
        return client, execution_id

    async def audit(self, request: Request) -> Response:
        async def run(request: Request) -> Response:
            client, execution_id = await self._call_query(request)
            page = await client.audit.list_events(execution_id=execution_id, page_size=AUDIT_PAGE)
            return JSONResponse({"events": [e.model_dump(mode="json") for e in page.events]})

        return await self._api(request, run)

    async def preview(self, request: Request) -> Response:
        """A pending call's preview that the fleet view did not keep (fleet.PREVIEWS_KEPT),
        fetched from its server when the browser shows the card; never stored here."""

        async def run(request: Request) -> Response:
            client, execution_id = await self._call_query(request)
            pending = await client.approvals.pending(execution_id)
            call = pending.call
            return JSONResponse(
                {
                    "digest": call.digest,
                    "preview": call.preview.model_dump(mode="json") if call.preview else None,
                }
            )

        return await self._api(request, run)


def _sse(event: dict[str, JsonValue]) -> bytes:
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


# At most this many rules in one decision (a call offers a handful).
MAX_RULES = 64


def _text(data: dict[str, JsonValue], key: str, default: str | None = None) -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise Refused(400, f"{key} must be a string.")
    return value


def _rules(data: dict[str, JsonValue]) -> list[tuple[str, str]]:
    """The rules the approver was shown with a session or always decision ({kind, match}
    objects): the server saves exactly those, and refuses one it did not offer."""
    rules = data.get("rules", [])
    if not isinstance(rules, list) or len(rules) > MAX_RULES:
        raise Refused(400, f"rules must be a list of at most {MAX_RULES} objects.")
    chosen = []
    for item in rules:
        if not isinstance(item, dict):
            raise Refused(400, "Each rule is an object with kind and match.")
        chosen.append((_text(item, "kind"), _text(item, "match")))
    return chosen


def _kind(data: dict[str, JsonValue]) -> DecisionKind:
    kind = KINDS.get(str(data.get("kind", "")))
    if kind is None:
        raise Refused(400, "kind must be once, session, always, deny or apply.")
    return kind


def _login_page(status: int, message: str) -> Response:
    page = _asset("login.html").decode()
    escaped = (
        message.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
    )
    page = page.replace("<!--error-->", f'<p class="error" role="alert">{escaped}</p>')
    return HTMLResponse(page, status_code=status)
