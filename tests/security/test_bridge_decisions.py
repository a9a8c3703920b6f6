"""Attack review of `callgate mcp` around a human decision (pending answer + repeat, named
session, turn batches). Scratch file (git-ignored)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import grpc
import mcp_types as types
import pytest
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError

from callgate.cli.mcp_bridge import McpBridge, call_key, default_session_name
from callgate.client import CallgateClient
from callgate.server.core.models import ToolResult
from callgate.server.core.tool import ToolContext
from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_service_pb2
from tests.support.approvals import Watcher, approver, decide
from tests.support.mcp_http import (
    bridge_args,
    http_bridge,
    mcp_http_session,
    prepared_calls,
    private_file,
    stdio_bridge,
    text_of,
)
from tests.support.server import Harness, serve
from tests.support.status import failure
from tests.support.tools import Note, NoteArtifact

pytestmark = pytest.mark.anyio

APPROVE = apb.DECISION_KIND_APPROVE_ONCE
DENY = apb.DECISION_KIND_DENY
BOUND = 40.0
RUN_SECONDS = 8.0


class SlowNote(Note):
    """A gated write (filesystem.write, like Note) that takes RUN_SECONDS: appends "start",
    waits, appends "end". Each "start" line is one run."""

    name = "SlowNote"
    description = "Append a line after a while."

    async def run(self, artifact: NoteArtifact, ctx: ToolContext) -> ToolResult:
        with open(artifact.path, "a", encoding="utf-8") as handle:
            handle.write("start\n")
        await anyio.sleep(RUN_SECONDS)
        with open(artifact.path, "a", encoding="utf-8") as handle:
            handle.write("end\n")
        return ToolResult(text="done")


@pytest.fixture
async def slow_harness(tmp_path: Path) -> AsyncIterator[Harness]:
    async with serve(tmp_path, extra_tools=[SlowNote()]) as running:
        yield running


# ------------------------------------------------------------------ repeat during the run


async def test_repeat_of_an_approved_call_that_outlasts_the_client_timeout_is_not_run_twice(
    slow_harness: Harness, tmp_path: Path
) -> None:
    """Was broken: the OpenAI Agents SDK's defaults (5 s timeout, no progress). A gated call
    is answered pending, approved, and repeated: the repeat invokes it, but the bridge pops the
    call from `_waiting` *before* Invoke, and applies no pending answer while it runs. The run
    takes 8 s, so the client times out at 5 s and sends notifications/cancelled, which cancels
    the bridge handler and with it the Invoke RPC: the server kills the approved call half-way.
    The model makes the same call again, as the pending answer told it to: the bridge finds
    nothing and prepares a *second* call, which the approver sees as a fresh identical request;
    approved, the tool runs a second time. The pending text promised "it runs at most once"."""
    harness = slow_harness
    harness.workspace.joinpath("notes.txt").write_text("")
    arguments = {"text": "x"}
    watcher = Watcher(approver(harness))
    outcomes: list[str] = []
    try:
        async with stdio_bridge(harness, tmp_path, read_timeout=5.0) as session:
            with anyio.fail_after(BOUND):
                first = await session.call_tool("SlowNote", arguments)
            assert first.structured_content is not None
            assert first.structured_content["status"] == "awaiting_approval"
            pending = await watcher.approval()
            await decide(approver(harness), pending.call, APPROVE)
            for _ in range(3):  # the model repeats until it gets an outcome
                done = False

                async def repeat(scope: anyio.CancelScope) -> None:
                    nonlocal done
                    try:
                        with anyio.fail_after(BOUND):
                            again = await session.call_tool("SlowNote", arguments)
                        outcomes.append(f"result is_error={again.is_error}: {text_of(again)[:160]}")
                        status = (again.structured_content or {}).get("status")
                        done = status not in ("awaiting_approval", "running")
                    except MCPError as exc:  # the client's own 5 s timeout
                        outcomes.append(f"MCPError {exc}")
                    scope.cancel()

                async def approve_repeats() -> None:
                    # An approver that sees the identical call again approves it (it is the
                    # call they approved a moment ago, as far as they can tell).
                    while True:
                        fresh = Watcher(approver(harness))
                        try:
                            second = await fresh.approval()
                        except (TimeoutError, AssertionError):
                            continue
                        finally:
                            fresh.cancel()
                        outcomes.append(f"re-asked: {second.call.execution_id}")
                        await decide(approver(harness), second.call, APPROVE)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(approve_repeats)
                    await repeat(tg.cancel_scope)
                if done:
                    break
            await anyio.sleep(RUN_SECONDS + 1)
    finally:
        watcher.cancel()
    runs = harness.workspace.joinpath("notes.txt").read_text().count("start")
    ends = harness.workspace.joinpath("notes.txt").read_text().count("end")
    prepared = await prepared_calls(harness, "SlowNote")
    print("\n".join(outcomes), f"\nruns={runs} ends={ends} prepared={prepared}")
    assert prepared == 1, f"the same call was prepared {prepared} times: {outcomes}"
    assert runs == 1, f"the approved call ran {runs} times ({ends} finished): {outcomes}"
    assert ends == runs, f"an approved run was killed half-way ({runs} started, {ends} ended)"


# ------------------------------------------------------------------ turn batches over HTTP


def _real_context(session_id: str | None) -> ServerRequestContext[Any]:
    """A request context as the MCP SDK's ServerRunner builds it for an HTTP connection."""
    connection = Connection(SimpleNamespace(), protocol_version="2025-11-25", session_id=session_id)
    return ServerRequestContext(
        session=ServerSession(SimpleNamespace(), connection),
        lifespan_context=None,
        protocol_version="2025-11-25",
        method="tools/call",
    )


async def test_http_calls_of_two_clients_get_two_batches(harness: Harness, tmp_path: Path) -> None:
    """The same over real streamable HTTP: two MCP clients of one `callgate mcp --http`, each
    making one gated write at about the same time."""
    http_token = "t" * 43
    token_file = private_file(tmp_path / "mcp-http-token", http_token)
    args = bridge_args(harness, tmp_path, "--http", "127.0.0.1:0", "--http-token-file")
    watcher = Watcher(approver(harness))
    seen: list[Any] = []
    try:
        async with (
            http_bridge([*args, str(token_file), "--pending-after", "0"]) as (url, _),
            mcp_http_session(url, http_token) as one,
            mcp_http_session(url, http_token) as two,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(one.call_tool, "WriteFile", {"path": "one.txt", "content": "1"})
            tasks.start_soon(two.call_tool, "WriteFile", {"path": "two.txt", "content": "2"})
            seen = [await watcher.approval() for _ in range(2)]
            for item in seen:
                await decide(approver(harness), item.call, DENY)
    finally:
        watcher.cancel()
    batches = [item.call.batch_id for item in seen]
    assert batches[0] != batches[1], f"two clients' calls share batch {batches[0]}"


# ------------------------------------------------------------------ the pending map


class _Ctx:
    """A minimal request context: no progress token, one MCP session."""

    def __init__(self, session_id: str = "s") -> None:
        self.meta = None
        self.session = SimpleNamespace(connection=SimpleNamespace(session_id=session_id))


@asynccontextmanager
async def in_process_bridge(
    harness: Harness, pending_after: float = 0.05, approval_timeout: float = 600.0
) -> AsyncIterator[McpBridge]:
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        session = await client.open_session("", name=default_session_name(harness.tokens["agent"]))
        yield McpBridge(session, approval_timeout, pending_after)


def _params(name: str, arguments: dict[str, Any]) -> types.CallToolRequestParams:
    return types.CallToolRequestParams(name=name, arguments=arguments)


async def test_a_repeat_after_approval_timeout_of_an_approved_call_says_nobody_decided(
    harness: Harness,
) -> None:
    """The stale state check: the entry's call still says AWAITING_APPROVAL (as of the
    pending answer), so a repeat after approval_timeout withdraws (cancels) a call that an
    approver *approved*, and tells the model "No approver decided"."""
    async with in_process_bridge(harness, pending_after=0.2, approval_timeout=2.0) as bridge:
        arguments = {"path": "late.txt", "content": "x"}
        first = await bridge.call_tool(_Ctx(), _params("WriteFile", arguments))  # type: ignore[arg-type]
        assert first.structured_content is not None
        stub = approver(harness)
        watcher = Watcher(stub)
        try:
            pending = await watcher.approval(first.structured_content["execution_id"])
        finally:
            watcher.cancel()
        await decide(stub, pending.call, APPROVE)
        await anyio.sleep(2.2)
        with anyio.fail_after(BOUND):
            again = await bridge.call_tool(_Ctx(), _params("WriteFile", arguments))  # type: ignore[arg-type]
    assert "No approver decided" not in text_of(again), text_of(again)


async def test_concurrent_identical_calls_prepare_once(harness: Harness) -> None:
    """Two identical calls arriving together (parallel tool calls of one turn, or two HTTP
    clients): both miss `_waiting` (it is filled only after Prepare returns) and two calls are
    prepared; the second overwrites the first's entry, and the first's settle pops the
    second's entry."""
    async with in_process_bridge(harness, pending_after=0.3) as bridge:
        arguments = {"path": "twice.txt", "content": "x"}
        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(bridge.call_tool, _Ctx(), _params("WriteFile", arguments))  # type: ignore[arg-type]
    assert await prepared_calls(harness, "WriteFile") == 1


# ------------------------------------------------------------------ the named session


async def test_a_long_lived_bridge_survives_its_named_session_going_idle(
    tmp_path: Path,
) -> None:
    """Was broken (a regression of named sessions): the bridge used an unnamed session, never
    closed for idleness. Now
    it opens a *named* one and keeps its session_id; the server closes named sessions unused
    for sessions.idle_seconds (default 1 h; ListTools does not count as use), and the bridge
    never reopens it: every later tools/list and tools/call is a protocol error until the
    bridge is restarted."""
    async with serve(tmp_path, sessions={"idle_seconds": 1.0}) as harness:
        harness.workspace.joinpath("a.txt").write_text("hello\n")
        async with stdio_bridge(harness, tmp_path) as session:
            with anyio.fail_after(BOUND):
                ok = await session.call_tool("ReadFile", {"path": "a.txt"})
            assert not ok.is_error
            await anyio.sleep(1.5)
            await harness.app.lifecycle.close_idle()  # or the server's own sweep did
            assert not harness.app.lifecycle._named
            with anyio.fail_after(BOUND):
                try:
                    later = await session.call_tool("ReadFile", {"path": "a.txt"})
                    outcome = f"is_error={later.is_error} {text_of(later)[:200]}"
                except MCPError as exc:
                    outcome = f"MCPError {exc}"
    assert outcome.startswith("is_error=False"), outcome


async def test_another_agent_cannot_reach_the_named_session(
    harness: Harness, tmp_path: Path
) -> None:
    """Held: named sessions are keyed by (principal, name). The admin principal (agent role)
    opening the agent's default name gets a session of its own, and the agent's session ID
    is SESSION_NOT_FOUND to it."""
    name = default_session_name(harness.tokens["agent"])
    mine = await harness.stub().OpenSession(
        tool_service_pb2.OpenSessionRequest(name=name), timeout=5
    )
    theirs = await harness.stub("admin").OpenSession(
        tool_service_pb2.OpenSessionRequest(name=name), timeout=5
    )
    assert mine.session.session_id != theirs.session.session_id
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await harness.stub("admin").GetSession(
            tool_service_pb2.GetSessionRequest(session_id=mine.session.session_id), timeout=5
        )
    assert failure(raised.value).reason == "SESSION_NOT_FOUND"


# ------------------------------------------------------------------ call keys


def _pairs() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    yield {"a": 1}, {"a": 1.0}
    yield {"a": 1}, {"a": "1"}
    yield {"a": 1}, {"a": True}
    yield {"a": 0.0}, {"a": -0.0}
    yield {"a": "\u00e9"}, {"a": "e\u0301"}  # NFC vs NFD
    yield {"a": None}, {}
    yield {"a": [1, 2]}, {"a": [2, 1]}
    yield {"a": 2**53}, {"a": 2**53 + 1}
    yield {"a\u0000": 1}, {"a": 1}


@pytest.mark.parametrize(("left", "right"), list(_pairs()))
def test_call_keys_of_different_calls_differ(left: dict[str, Any], right: dict[str, Any]) -> None:
    assert call_key("WriteFile", left) != call_key("WriteFile", right)
    assert call_key("WriteFile", {"b": 1, "a": 2}) == call_key("WriteFile", {"a": 2, "b": 1})
    assert call_key("A", {}) != call_key("B", {})
