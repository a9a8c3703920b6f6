"""`callgate mcp`: an MCP server that fronts one callgate session.

An MCP client (an IDE, an agent framework) sees callgate's tools as MCP tools:

- `tools/list` is the session's ListTools: names, descriptions, argument JSON Schemas, and
  MCP annotations (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`) as
  each tool's definition declares them (`ToolInfo.annotations`).
- `tools/call` is Prepare -> Approve -> Invoke (`ClientSession.start`, then the wait and the
  Invoke here). A gated call waits for a human through callgate's approval channel
  (ApprovalService: `callgate approvals` or any other approver), at most `approval_timeout`
  seconds in all, and keeps the client alive meanwhile:
  - a client that asked for progress (`_meta.progressToken`) gets a progress notification every
    few seconds naming the call, what waits for it and when it is denied if nobody decides;
  - a client that did not is answered after `pending_after` seconds (below its own timeout)
    with a result saying the call awaits an approver; the same call (tool and arguments) made
    again returns its outcome once decided, and never prepares a second call.
- The session is a named one (`session_name`, by default derived from the agent's token), so
  that every connection, process and stateless request of one agent finds the same session:
  what it read, its processes, its session approvals. It is not closed when the bridge exits;
  the server closes it when idle, and the bridge then opens it again by name. The calls a
  bridge answered as pending are noted in a ledger of the session's (`mcp_pending`), so that
  the same call made again through another bridge process follows that call.
- An approved call runs in a task of the bridge's own: a client that gives up (its request
  timeout) does not stop it, and the repeat of the same call gets its outcome ("still
  running" until then); it runs once.
- Calls of one model turn share a batch ID, so that an approver decides them at once: those
  that arrive while another call of the same client is being prepared or waits, or within
  `BATCH_WINDOW` of the previous one.

Two error planes, as MCP asks: a call that was denied, timed out waiting for an approver,
had invalid arguments, or ran and failed is a tool result with `isError: true` whose text
says why; an unknown tool or a callgate server that cannot be reached is a protocol error.

Elicitation is not used: approvals always go through callgate's approval channel, so one
call is never asked about in two places.

Over HTTP every request needs `Authorization: Bearer <token>` (see `mcp_token`): without it, or
with another token, the SDK's bearer middleware answers 401 before anything runs. The bridge
binds loopback unless the caller allows a remote address.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import json
import socket
import sys
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, Final, TypeVar, cast

import anyio
import mcp_types as types
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from pydantic import AnyHttpUrl

from callgate.client.connection import CallgateClient
from callgate.client.errors import (
    CallDeniedError,
    CallgateClientError,
    CallStateError,
    InvalidArgumentsError,
    InvalidRequestError,
    RequestIdConflictError,
    SessionNotFoundError,
    ToolNotFoundError,
)
from callgate.client.models import State, ToolCall, ToolResult, ToolSpec
from callgate.client.session import ClientSession, new_batch_id

from .mcp_pending import Ledger, LedgerEntry, default_ledger_dir, ledger_name
from .mcp_tasks import TASKS_EXTENSION, TaskParams, TaskTable, UpdateTaskParams, opted_in
from .mcp_token import StaticTokenVerifier, check_http_token

__all__ = [
    "BATCH_WINDOW",
    "DEFAULT_APPROVAL_TIMEOUT",
    "DEFAULT_PENDING_AFTER",
    "LOOPBACK",
    "McpBridge",
    "TurnBatches",
    "default_session_name",
    "is_loopback",
    "parse_http_address",
    "serve_http",
    "serve_stdio",
    "tool_annotations",
]

DEFAULT_APPROVAL_TIMEOUT: Final = 600.0
"""How long a gated call waits for an approver by default, in seconds."""

DEFAULT_PENDING_AFTER: Final = 4.0
"""After this many seconds a gated call is answered as pending to a client that asked for no
progress (below the 5 s the OpenAI Agents SDK waits by default); 0: never."""

PROGRESS_EVERY: Final = 3.0
"""Seconds between progress notifications while a call waits for an approver."""

BATCH_WINDOW: Final = 0.05
"""Calls arriving within this many seconds of the previous one are of one model turn."""

MAX_BATCHERS: Final = 256
"""MCP sessions whose turns are tracked at once (the least recently used are forgotten)."""

MAX_WAITING: Final = 1024
"""Gated calls a bridge keeps for a repeat at once (the oldest are forgotten first)."""

STALE_AFTER: Final = 3600.0
"""Seconds past the approval timeout after which a kept call nobody came back for is
forgotten (it has expired on the server by then)."""

_UNDECIDED: Final = (State.PREPARED, State.AWAITING_APPROVAL)

_MCP_PATH: Final = "/mcp"
_T = TypeVar("_T")

LOOPBACK: Final = "127.0.0.1"
"""Where `--http` binds when the address names no host."""

# JSON-RPC codes (MCP uses the JSON-RPC 2.0 ones).
_INVALID_PARAMS: Final = -32602
_INTERNAL_ERROR: Final = -32603


def tool_annotations(spec: ToolSpec) -> types.ToolAnnotations:
    """The MCP hints for a tool: the annotations its definition declares (ToolInfo)."""
    hints = spec.annotations
    return types.ToolAnnotations(
        read_only_hint=hints.read_only,
        destructive_hint=None if hints.read_only else hints.destructive,
        idempotent_hint=hints.idempotent,
        open_world_hint=hints.open_world,
    )


def _error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _call_result(result: ToolResult) -> types.CallToolResult:
    """A callgate tool result as an MCP one: text, structured content when it is a JSON
    object (MCP before 2026-07-28 allows nothing else), and the error flag."""
    text = result.text
    if result.is_error and not text:
        text = f"The tool failed ({result.error_code or 'no error code'})."
    structured = result.parsed_json()
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content=structured if isinstance(structured, dict) else None,
        is_error=result.is_error,
    )


def default_session_name(token: str) -> str:
    """The named session an agent's bridges share: derived from its token by a keyed digest
    of its own (never a prefix of the token's plain SHA-256, which configurations hold)."""
    digest = hashlib.blake2b(token.encode(), key=b"callgate mcp session", digest_size=8)
    return "mcp-" + digest.hexdigest()


def canonical_arguments(arguments: Mapping[str, object]) -> str:
    """The arguments as the bridge sends them: JSON with sorted keys, so that the same call
    made again is byte for byte the same request (its Prepare request fingerprint)."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def call_key(tool: str, arguments: Mapping[str, object], text: str | None = None) -> str:
    """What makes two tool calls "the same call": the tool and its arguments, canonical
    (`text`: `canonical_arguments(arguments)`, when already made)."""
    canonical = text if text is not None else canonical_arguments(arguments)
    return hashlib.sha256(f"{tool}\0{canonical}".encode()).hexdigest()


class TurnBatches:
    """Batch IDs for the calls of one model turn: a call joins the current batch while another
    call of the client is being prepared or waits for its decision, or within `window` seconds
    of the previous call; otherwise it opens a new batch."""

    def __init__(self, window: float = BATCH_WINDOW) -> None:
        self._window = window
        self._batch = ""
        self._last = float("-inf")
        self._busy = 0

    def join(self) -> str:
        now = time.monotonic()
        if not self._batch or (self._busy == 0 and now - self._last > self._window):
            self._batch = new_batch_id()
        self._last = now
        self._busy += 1
        return self._batch

    def leave(self) -> None:
        self._busy -= 1
        self._last = time.monotonic()


@dataclass(eq=False)
class _Waiting:
    """A gated call this bridge answers for, by its call key, until its outcome has been
    delivered: a repeat of the same call (or the same call made at once by another request)
    finds it instead of preparing another. `call` is None until it is prepared (`ready`);
    `running` is its Invoke, a task of the bridge's own that a client giving up never cancels
    (and detached on the server, so that the bridge's process ending does not stop it either).
    The IDs are those it was prepared and is invoked with (a ledger entry holds them);
    `noted` is set once the ledger holds it."""

    invoke_request_id: str
    prepare_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    execution_id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex)
    batch_id: str = ""
    started: float = field(default_factory=time.monotonic)
    call: ToolCall | None = None
    ready: anyio.Event = field(default_factory=anyio.Event)
    running: asyncio.Task[types.CallToolResult] | None = None
    # The wait for its decision that the tasks of this call follow (tasks extension).
    settling: asyncio.Future[types.CallToolResult] | None = None
    noted: bool = False

    def entry(self) -> LedgerEntry:
        return LedgerEntry(
            self.prepare_request_id,
            self.execution_id,
            self.batch_id,
            self.invoke_request_id,
            time.time(),
        )


OpenSession = Callable[[], Awaitable[ClientSession]]


class McpBridge:
    """The MCP handlers over one callgate session (reopened by name when the server closed
    it for idleness, given `reopen`)."""

    def __init__(
        self,
        session: ClientSession,
        approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
        pending_after: float = DEFAULT_PENDING_AFTER,
        reopen: OpenSession | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        if approval_timeout < 0:
            raise ValueError("approval_timeout must be zero or more seconds")
        if pending_after < 0:
            raise ValueError("pending_after must be zero or more seconds")
        self._session = session
        self._reopen = reopen
        self._approval_timeout = approval_timeout
        self._pending_after = pending_after
        self._waiting: OrderedDict[str, _Waiting] = OrderedDict()
        self._ledger = ledger
        self._ledger_writes: set[asyncio.Future[object]] = set()
        self._tasks = TaskTable()
        # One batcher per MCP session (a client's connection, by its Mcp-Session-Id); "" for
        # what has none (stdio: one client; stateless HTTP: this bridge's one agent).
        self._batches: OrderedDict[str, TurnBatches] = OrderedDict()

    def server(self) -> Server[Any]:
        """A low-level MCP server whose tools are the session's (with the tasks extension)."""
        server: Server[Any] = Server(
            "callgate",
            instructions="Tools run through callgate's policy gate; a gated call waits for "
            "a human approver, and a denied call returns an error result with the reason. A "
            "call answered as awaiting an approver or still running: make exactly the same "
            "call again later to get its outcome (it never runs twice).",
            on_list_tools=self.list_tools,
            # A task (resultType "task") is a mapping the runner passes through as the
            # extension's own shape on the 2026-07-28 era, which is the only one it is sent on.
            on_call_tool=cast(Any, self._on_call_tool),
        )
        server.extensions[TASKS_EXTENSION] = {}
        server.add_request_handler("tasks/get", TaskParams, self._tasks_get)
        server.add_request_handler("tasks/cancel", TaskParams, self._tasks_cancel)
        server.add_request_handler("tasks/update", UpdateTaskParams, self._tasks_update)
        return server

    async def _with_session(self, operation: Callable[[ClientSession], Awaitable[_T]]) -> _T:
        """`operation` on the session; when the server closed it (idle), reopened by name
        once and tried again (the calls waiting on the old one are forgotten)."""
        session = self._session
        try:
            return await operation(session)
        except SessionNotFoundError:
            if self._reopen is None:
                raise
        if self._session is session:
            self._session = await self._reopen()
            self._waiting.clear()
        return await operation(self._session)

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """`tools/list`: the session's tools, all on one page."""
        try:
            specs = await self._with_session(lambda session: session.tools())
        except CallgateClientError as exc:
            raise _protocol_error(exc) from exc
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=spec.name,
                    description=spec.description,
                    input_schema=dict(spec.input_schema),
                    annotations=tool_annotations(spec),
                )
                for spec in specs
            ]
        )

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """`tools/call` for a client without the tasks extension."""
        answer = await self._call_tool(ctx, params, tasks=False)
        assert isinstance(answer, types.CallToolResult)
        return answer

    async def _on_call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | dict[str, Any]:
        return await self._call_tool(ctx, params, tasks=opted_in(ctx))

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams, tasks: bool
    ) -> types.CallToolResult | dict[str, Any]:
        """`tools/call`: Prepare -> Approve (waiting for a human if gated) -> Invoke; a repeat
        of a call that waits, runs, or was answered as pending gets that same call. With
        `tasks`, a call that waits for an approver is answered with a task to poll."""
        arguments: Mapping[str, object] = params.arguments or {}
        text = canonical_arguments(arguments)
        key = call_key(params.name, arguments, text)
        self._forget_stale()
        try:
            waiting = self._waiting.get(key)
            if waiting is not None:
                await waiting.ready.wait()
                if waiting.call is None or not await self._still_ours(key, waiting):
                    # Its Prepare failed, or another bridge delivered its outcome: this one
                    # is a call of its own.
                    self._drop_now(key, waiting, ledger=False)
                    waiting = None
            if waiting is None:
                # Reserved before anything is awaited: the same call arriving meanwhile waits
                # for this one instead of preparing another.
                waiting = _Waiting(str(uuid.uuid4()))
                self._waiting[key] = waiting
                try:
                    started = await self._start(ctx, params.name, text, key, waiting)
                finally:
                    waiting.ready.set()
                    if waiting.call is None:
                        self._drop_now(key, waiting, ledger=False)
                if started is not None:
                    return started
            assert waiting.call is not None
            if tasks and waiting.running is None and waiting.call.state in _UNDECIDED:
                # The client polls a task instead of waiting on this request. Every task of
                # one call follows the one wait of the bridge's own for its decision.
                if waiting.settling is None:
                    waiting.settling = asyncio.ensure_future(
                        self._settle(key, waiting, soft=None, report=None)
                    )
                return self._tasks.start(
                    _follow(waiting.settling),
                    describe=lambda: _task_words(waiting),
                    withdraw=lambda: self._withdraw(key, waiting),
                )
            report = None
            soft = None
            if ctx.meta and ctx.meta.get("progress_token") is not None:
                report = ctx.session.report_progress
            elif self._pending_after > 0:
                soft = time.monotonic() + self._pending_after
            return await self._settle(key, waiting, soft=soft, report=report)
        except CallDeniedError as exc:
            return _denied(exc.denial.description, exc.kind)
        except InvalidArgumentsError as exc:
            detail = "; ".join(f"{field}: {text}" for field, text in exc.violations)
            return _error_result(
                exc.message + (f" ({detail})" if detail and detail not in exc.message else "")
            )
        except CallgateClientError as exc:
            raise _protocol_error(exc) from exc

    async def _start(
        self,
        ctx: ServerRequestContext[Any],
        name: str,
        text: str,
        key: str,
        waiting: _Waiting,
    ) -> types.CallToolResult | None:
        """Prepare (and, when allowed, run) the call; its result when it ran, else None with
        `waiting.call` set. A call another bridge answered as pending (the ledger names it) is
        prepared again with its own request IDs: the server returns that call if the tool and
        arguments are the same (and its outcome, if it ran), and refuses otherwise, and then
        this is a call of its own."""
        entry = None
        if self._ledger is not None and self._ledger.may_hold():
            entry = await self._ledger_do(lambda ledger: ledger.find(key))
        if entry is not None:
            waiting.prepare_request_id = entry.prepare_request_id
            waiting.execution_id = entry.execution_id
            waiting.batch_id = entry.batch_id
            waiting.invoke_request_id = entry.invoke_request_id
            waiting.noted = True
            try:
                # Prepare alone (never the pipelined Invoke): only once the server has said
                # that the entry names this very call is anything invoked (by `_settle`).
                call = await self._with_session(
                    lambda session: session.prepare(
                        name,
                        text,
                        request_id=waiting.prepare_request_id,
                        evaluate=True,
                        batch_id=waiting.batch_id,
                        execution_id=waiting.execution_id,
                    )
                )
                waiting.call = _kept(call)
                return None
            except (RequestIdConflictError, InvalidRequestError):
                # Not that call (other arguments, a planted entry): forget it.
                await self._ledger_do(lambda ledger: ledger.drop(key))
                waiting.prepare_request_id = str(uuid.uuid4())
                waiting.execution_id = "call_" + uuid.uuid4().hex
                waiting.invoke_request_id = str(uuid.uuid4())
                waiting.noted = False
        batches = self._batches_of(ctx)
        waiting.batch_id = batches.join()
        try:
            started = await self._with_session(
                lambda session: session.start(
                    name,
                    text,
                    batch_id=waiting.batch_id,
                    invoke_request_id=waiting.invoke_request_id,
                    prepare_request_id=waiting.prepare_request_id,
                    execution_id=waiting.execution_id,
                )
            )
        finally:
            batches.leave()
        if started.result is not None:
            return _call_result(started.result)
        assert started.call is not None
        waiting.call = _kept(started.call)
        return None

    async def _still_ours(self, key: str, waiting: _Waiting) -> bool:
        """Whether a call held here is still to be answered for: one noted in the ledger that
        the ledger no longer names was delivered by another bridge."""
        if not waiting.noted or self._ledger is None:
            return True
        entry = await self._ledger_do(lambda ledger: ledger.find(key))
        return self._ledger is None or (
            entry is not None and entry.execution_id == waiting.execution_id
        )

    async def _ledger_do(self, operation: Callable[[Ledger], _T]) -> _T | None:
        """`operation` on the ledger, in a worker thread; a ledger that cannot be used (a
        file that is not ours, a lock held too long, anything unexpected) is none from then
        on: the bridge keeps its pending calls in memory only."""
        ledger = self._ledger
        if ledger is None:
            return None
        try:
            return await anyio.to_thread.run_sync(operation, ledger)
        except Exception as exc:  # the ledger is an aid, never a failure
            print(f"callgate: mcp: the pending-call ledger is not used: {exc}", file=sys.stderr)
            self._ledger = None
            return None

    def _drop_now(self, key: str, waiting: _Waiting, *, ledger: bool = True) -> None:
        """Forget `key`'s entry, if it is still `waiting` (a newer call may hold the key); with
        `ledger`, the ledger's too, in the background (see `flush`)."""
        if self._waiting.get(key) is waiting:
            del self._waiting[key]
        if ledger and waiting.noted:
            waiting.noted = False
            self._spawn_ledger(lambda ledger: ledger.drop(key))

    async def _drop(self, key: str, waiting: _Waiting) -> None:
        """Forget `key`'s entry, the ledger's too (its outcome is being delivered), before the
        answer goes: a client that ends the bridge right after it leaves no stale entry."""
        if self._waiting.get(key) is waiting:
            del self._waiting[key]
        if waiting.noted:
            waiting.noted = False
            await self._ledger_do(lambda ledger: ledger.drop(key))

    async def _keep(self, key: str, waiting: _Waiting) -> None:
        """Note the call answered as pending or running in the ledger, for the next bridge,
        before the answer goes."""
        if waiting.call is not None and self._ledger is not None:
            entry = waiting.entry()
            await self._ledger_do(lambda ledger: ledger.put(key, entry))
            waiting.noted = self._ledger is not None  # None: it could not be written

    def _spawn_ledger(self, operation: Callable[[Ledger], object]) -> None:
        """A ledger write the answer does not wait for (kept alive until it is done)."""
        task = asyncio.ensure_future(self._ledger_do(operation))
        self._ledger_writes.add(task)
        task.add_done_callback(self._ledger_writes.discard)

    async def flush(self) -> None:
        """Wait for the ledger writes under way (before the process ends)."""
        while self._ledger_writes:
            await asyncio.gather(*self._ledger_writes, return_exceptions=True)

    def _forget_stale(self) -> None:
        """Forget entries nobody came back for: past the approval timeout and the call's
        time to be invoked, or beyond the most kept."""
        limit = time.monotonic() - self._approval_timeout - STALE_AFTER
        for key in [k for k, w in self._waiting.items() if w.started < limit and not w.running]:
            del self._waiting[key]
        while len(self._waiting) > MAX_WAITING:
            self._waiting.popitem(last=False)

    def _batches_of(self, ctx: ServerRequestContext[Any]) -> TurnBatches:
        headers = getattr(getattr(ctx, "request", None), "headers", None)
        key = str(headers.get("mcp-session-id") or "") if headers is not None else ""
        batches = self._batches.get(key)
        if batches is None:
            batches = self._batches[key] = TurnBatches()
            while len(self._batches) > MAX_BATCHERS:
                self._batches.popitem(last=False)
        self._batches.move_to_end(key)
        return batches

    async def _settle(
        self,
        key: str,
        waiting: _Waiting,
        *,
        soft: float | None,
        report: Callable[..., Awaitable[None]] | None,
    ) -> types.CallToolResult:
        """Wait for the call's decision (with progress when `report`, or until `soft` for the
        pending answer), then run it in a task of the bridge's own and wait for that (again
        until `soft`); the outcome is delivered once, and the call forgotten. Whatever goes
        wrong on the way, the call is forgotten too (the next same call is a call of its own)."""
        try:
            return await self._settled(key, waiting, soft=soft, report=report)
        except BaseException:
            if waiting.running is None or waiting.running.done():
                self._drop_now(key, waiting)
            raise

    async def _settled(
        self,
        key: str,
        waiting: _Waiting,
        *,
        soft: float | None,
        report: Callable[..., Awaitable[None]] | None,
    ) -> types.CallToolResult:
        assert waiting.call is not None
        call = waiting.call
        hard = waiting.started + self._approval_timeout
        while waiting.running is None and call.state in _UNDECIDED:
            now = time.monotonic()
            if now >= hard:
                # Decided meanwhile? Only a call still undecided is withdrawn.
                call = await self._session.get_call(call.execution_id)
                if call.state in _UNDECIDED:
                    await self._drop(key, waiting)
                    await self._abandon(call)
                    return _error_result(
                        f"No approver decided call {call.execution_id} within "
                        f"{self._approval_timeout:g} seconds; it was withdrawn."
                    )
                break
            if soft is not None and now >= soft:
                await self._keep(key, waiting)
                return _pending_result(call)
            if report is not None:
                await report(now - waiting.started, message=_waiting_words(call))
            step = min(PROGRESS_EVERY, hard - now, (soft or hard) - now)
            try:
                call = _kept(await self._session.approve(call.execution_id, wait=max(step, 0.0)))
            except CallStateError:
                # It ended elsewhere (invoked by another bridge, expired, cancelled): as it is.
                call = _kept(await self._session.get_call(call.execution_id))
            waiting.call = call
        if waiting.running is None:
            if call.state is State.DENIED:
                await self._drop(key, waiting)
                return _denied(call.denial.description if call.denial else "", _denial_kind(call))
            # Not cancelled with the request: a client that gives up does not stop the run,
            # and its repeat gets the outcome. An Invoke of a call that ran already (with this
            # request ID) returns its outcome; of one that ended otherwise, says how.
            waiting.running = asyncio.ensure_future(self._invoke(waiting))
        timeout = None if soft is None else max(soft - time.monotonic(), 0.0)
        done, _ = await asyncio.wait({waiting.running}, timeout=timeout)
        if not done:
            await self._keep(key, waiting)
            return _running_result(call)
        await self._drop(key, waiting)
        return waiting.running.result()

    async def _invoke(self, waiting: _Waiting) -> types.CallToolResult:
        """The call's Invoke, detached on the server: it runs to its end even if this bridge's
        process ends first (a repeat through another bridge then gets the outcome)."""
        assert waiting.call is not None
        try:
            invoked = await self._session.invoke(
                waiting.call.execution_id, request_id=waiting.invoke_request_id, detach=True
            )
        except CallgateClientError as exc:
            return _error_result(f"callgate: {exc.reason or exc.code}: {exc.message}")
        return _call_result(invoked.result)

    async def _abandon(self, call: ToolCall) -> None:
        with contextlib.suppress(CallgateClientError):  # decided or gone meanwhile
            await self._session.cancel(call.execution_id)

    async def _withdraw(self, key: str, waiting: _Waiting) -> bool:
        """A task cancelled by its client: the call is cancelled on the server (undecided:
        withdrawn from the approvers; running: stopped). True when it was withdrawn before it
        ran (the task is then cancelled); False when it had run or runs (the task then ends
        with its outcome, which the call's key keeps until delivered)."""
        call = waiting.call
        if call is None:
            return True
        try:
            after = await self._session.cancel(call.execution_id)
        except CallgateClientError:
            after = await self._session.get_call(call.execution_id)
        if waiting.running is None and after.state in (
            State.CANCELLED,
            State.DENIED,
            State.EXPIRED,
        ):
            if waiting.settling is not None:
                waiting.settling.cancel()
            await self._drop(key, waiting)
            return True
        return False

    async def _tasks_get(self, ctx: ServerRequestContext[Any], params: TaskParams) -> Any:
        return await self._tasks.get(ctx, params)

    async def _tasks_cancel(self, ctx: ServerRequestContext[Any], params: TaskParams) -> Any:
        return await self._tasks.cancel(ctx, params)

    async def _tasks_update(self, ctx: ServerRequestContext[Any], params: UpdateTaskParams) -> Any:
        return await self._tasks.update(ctx, params)


def _kept(call: ToolCall) -> ToolCall:
    """What the bridge keeps of a waiting call (not its preview, which may be large)."""
    return call.model_copy(update={"preview": None}) if call.preview is not None else call


async def _follow(settling: asyncio.Future[types.CallToolResult]) -> types.CallToolResult:
    """A task's share of its call's one wait: a task ending early does not end the wait."""
    return await asyncio.shield(settling)


def _task_words(waiting: _Waiting) -> str:
    call = waiting.call
    if call is None:
        return "being prepared"
    if waiting.running is not None:
        return f"approved; call {call.execution_id} ({call.summary}) is running"
    return _waiting_words(call)


def _running_result(call: ToolCall) -> types.CallToolResult:
    text = (
        f"callgate: call {call.execution_id} ({call.summary}) was approved and is running. "
        "Make exactly the same call again to get its outcome (it runs once)."
    )
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content={"status": "running", "execution_id": call.execution_id},
        is_error=False,
    )


def _waiting_words(call: ToolCall) -> str:
    deadline = (
        f"; denied at {call.expire_time.astimezone(UTC):%H:%M:%S} UTC if nobody decides"
        if call.expire_time is not None
        else ""
    )
    return f"waiting for an approver: call {call.execution_id} ({call.summary}){deadline}"


def _pending_result(call: ToolCall) -> types.CallToolResult:
    """The answer to a client that would time out first: the call waits, and how to get its
    outcome."""
    text = (
        f"callgate: {_waiting_words(call)}. Nobody has decided yet. Make exactly the same call "
        "again to get its outcome once it is decided (it runs at most once)."
    )
    structured: dict[str, Any] = {
        "status": "awaiting_approval",
        "execution_id": call.execution_id,
        "summary": call.summary,
    }
    if call.expire_time is not None:
        structured["expire_time"] = call.expire_time.astimezone(UTC).isoformat()
    return types.CallToolResult(
        content=[types.TextContent(text=text)], structured_content=structured, is_error=False
    )


def _denial_kind(call: ToolCall) -> str:
    return str(call.denial.kind) if call.denial is not None else "denied"


def _denied(description: str, kind: object) -> types.CallToolResult:
    return _error_result(
        f"callgate denied the call ({kind}): {description or 'no reason was given'}"
    )


def _protocol_error(exc: CallgateClientError) -> MCPError:
    code = _INVALID_PARAMS if isinstance(exc, ToolNotFoundError) else _INTERNAL_ERROR
    return MCPError(code, f"callgate: {exc.reason or exc.code}: {exc.message}")


def parse_http_address(address: str) -> tuple[str, int]:
    """`PORT`, `:PORT`, `HOST:PORT` or `[V6]:PORT` split, with no host (or `localhost`)
    meaning 127.0.0.1; raises ValueError on anything else."""
    host, _, port = address.rpartition(":")
    if not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected PORT or HOST:PORT, got {address!r}")
    host = host.removeprefix("[").removesuffix("]")
    return (LOOPBACK if host in ("", "localhost") else host), int(port)


def is_loopback(host: str) -> bool:
    """Whether `host` is a literal loopback address (a name never is: it may resolve anywhere)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def serve_stdio(
    target: str,
    token: str,
    *,
    workspace: str = "",
    approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
    pending_after: float = DEFAULT_PENDING_AFTER,
    session_name: str = "",
) -> None:
    """Serves MCP on stdin/stdout until stdin closes, over the named session `session_name`
    (default: the agent's own, `default_session_name`) on `target`, left open at exit."""
    async with CallgateClient(target, token=token) as client:
        name = session_name or default_session_name(token)

        async def reopen() -> ClientSession:
            return await client.open_session(workspace, name=name)

        ledger = Ledger(
            default_ledger_dir(), ledger_name(token, name), approval_timeout + STALE_AFTER
        )
        bridge = McpBridge(await reopen(), approval_timeout, pending_after, reopen, ledger)
        server = bridge.server()
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        await bridge.flush()


async def serve_http(
    target: str,
    token: str,
    address: str,
    *,
    http_token: str,
    allow_remote: bool = False,
    workspace: str = "",
    approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
    pending_after: float = DEFAULT_PENDING_AFTER,
    session_name: str = "",
) -> None:
    """Serves MCP over streamable HTTP at `http://<address>/mcp` until interrupted, to clients
    that send `Authorization: Bearer <http_token>`.

    Port 0 picks a free port; the address actually bound is printed to stderr. A host that is
    not a loopback address is refused unless `allow_remote` (TLS is then a reverse proxy's job).
    """
    import uvicorn

    host, port = parse_http_address(address)
    if not allow_remote and not is_loopback(host):
        raise ValueError(f"{host} is not a loopback address and remote clients were not allowed")
    check_http_token(http_token, token)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        # Listening before the address is printed: a client that connects at once waits in
        # the backlog for uvicorn instead of being refused.
        listener.listen()
        bound_port = listener.getsockname()[1]
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        base_url = f"http://{shown}:{bound_port}"
        async with CallgateClient(target, token=token) as client:
            name = session_name or default_session_name(token)

            async def reopen() -> ClientSession:
                return await client.open_session(workspace, name=name)

            ledger = Ledger(
                default_ledger_dir(), ledger_name(token, name), approval_timeout + STALE_AFTER
            )
            app = (
                McpBridge(await reopen(), approval_timeout, pending_after, reopen, ledger)
                .server()
                .streamable_http_app(
                    streamable_http_path=_MCP_PATH,
                    host=host,
                    # AuthSettings insists on an issuer; the bridge issued the token, and with
                    # no authorization server and no resource metadata the URL is never served.
                    auth=AuthSettings(issuer_url=AnyHttpUrl(base_url), resource_server_url=None),
                    token_verifier=StaticTokenVerifier(http_token),
                )
            )
            print(
                f"callgate: mcp serving on {base_url}{_MCP_PATH}",
                file=sys.stderr,
                flush=True,
            )
            config = uvicorn.Config(app, log_level="warning", lifespan="on")
            await uvicorn.Server(config).serve(sockets=[listener])
    finally:
        listener.close()
