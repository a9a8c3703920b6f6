"""`callgate mcp` as an MCP client sees it: a real `mcp` client session over stdio and over
streamable HTTP, talking to a `callgate mcp` subprocess that fronts a real callgate server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from callgate.v1 import approval_service_pb2 as apb
from tests.support.approvals import Watcher, approver, decide
from tests.support.mcp_http import (
    bridge_args,
    bridge_env,
    http_bridge,
    mcp_http_session,
    private_file,
)
from tests.support.server import Harness

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def _stdio_session(harness: Harness, tmp_path: Path) -> AsyncIterator[ClientSession]:
    """An initialized MCP session with `callgate mcp` spawned as its stdio server."""
    command, *args = bridge_args(harness, tmp_path)
    params = StdioServerParameters(command=command, args=args, env=bridge_env())
    with (tmp_path / "bridge-stderr").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read_stream, write_stream),
            ClientSession(read_stream, write_stream) as session,
        ):
            with anyio.fail_after(20):
                await session.initialize()
            yield session


@asynccontextmanager
async def _http_session(harness: Harness, tmp_path: Path) -> AsyncIterator[ClientSession]:
    """An initialized MCP session over streamable HTTP to `callgate mcp --http` on loopback,
    sending the bridge's HTTP token."""
    http_token = "t" * 43
    token_file = private_file(tmp_path / "mcp-http-token", http_token)
    args = bridge_args(harness, tmp_path, "--http", "127.0.0.1:0", "--http-token-file")
    async with (
        http_bridge([*args, str(token_file)]) as (url, _),
        mcp_http_session(url, http_token) as session,
    ):
        assert url.startswith("http://127.0.0.1:")
        yield session


def _text(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def _call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> Any:
    with anyio.fail_after(20):
        return await session.call_tool(tool, arguments)


async def _gated_call_decided(
    harness: Harness,
    session: ClientSession,
    arguments: dict[str, Any],
    kind: apb.DecisionKind.ValueType,
    note: str = "",
) -> types.CallToolResult:
    """Runs a WriteFile through the bridge while an approver decides it with `kind`."""
    watcher = Watcher(approver(harness))
    results: list[types.CallToolResult] = []

    async def call() -> None:
        results.append(await _call(session, "WriteFile", arguments))

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            pending = await watcher.approval()
            assert pending.call.tool_name == "WriteFile"
            assert not results, "the gated call finished before anyone decided it"
            await decide(approver(harness), pending.call, kind, note)
    finally:
        watcher.cancel()
    return results[0]


async def test_stdio_lists_tools_with_schemas_and_annotations(
    harness: Harness, tmp_path: Path
) -> None:
    """tools/list carries every callgate tool with its JSON Schema and MCP hints."""
    async with _stdio_session(harness, tmp_path) as session:
        with anyio.fail_after(10):
            listed = await session.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert {"ReadFile", "WriteFile", "Bash", "Glob", "Grep"} <= tools.keys()
    read_file = tools["ReadFile"]
    assert read_file.input_schema["type"] == "object"
    assert "path" in read_file.input_schema["properties"]
    assert read_file.description
    for name in ("ReadFile", "Glob", "Grep"):
        annotations = tools[name].annotations
        assert annotations is not None
        assert annotations.read_only_hint is True
    for name in ("WriteFile", "EditFile", "Bash"):
        annotations = tools[name].annotations
        assert annotations is not None
        assert annotations.read_only_hint is False
        assert annotations.destructive_hint is True


async def test_stdio_allowed_read_returns_the_file_as_text(
    harness: Harness, tmp_path: Path
) -> None:
    """An allowed ReadFile runs at once and its text comes back as the result content."""
    (harness.workspace / "hello.txt").write_text("hello through mcp\n")
    async with _stdio_session(harness, tmp_path) as session:
        result = await _call(session, "ReadFile", {"path": "hello.txt"})
    assert not result.is_error
    assert "     1\thello through mcp" in _text(result)


async def test_stdio_numbers_sent_as_strings_are_taken(harness: Harness, tmp_path: Path) -> None:
    """MCP Inspector's CLI (`--tool-arg end_line=2`) and models send numbers as strings: an
    unambiguous one is taken for the integer, and the call reads exactly those lines."""
    (harness.workspace / "lines.txt").write_text("one\ntwo\nthree\n")
    async with _stdio_session(harness, tmp_path) as session:
        result = await _call(
            session, "ReadFile", {"path": "lines.txt", "start_line": "2", "end_line": "2"}
        )
        refused = await _call(session, "ReadFile", {"path": "lines.txt", "end_line": "two"})
    assert not result.is_error
    assert _text(result) == "     2\ttwo"
    assert refused.is_error
    assert "end_line" in _text(refused)


async def test_stdio_denied_read_is_an_error_result_with_the_reason(
    harness: Harness, tmp_path: Path
) -> None:
    """A call the gate denies is a tool result with isError, naming why, not a protocol error."""
    (harness.workspace / ".env").write_text("SECRET=1\n")
    async with _stdio_session(harness, tmp_path) as session:
        result = await _call(session, "ReadFile", {"path": ".env"})
    assert result.is_error
    text = _text(result)
    assert "denied" in text
    assert "SECRET" not in text


async def test_stdio_gated_write_waits_for_the_approver(harness: Harness, tmp_path: Path) -> None:
    """A gated WriteFile waits until an approver approves it through ApprovalService."""
    async with _stdio_session(harness, tmp_path) as session:
        result = await _gated_call_decided(
            harness,
            session,
            {"path": "out.txt", "content": "approved\n"},
            apb.DECISION_KIND_APPROVE_ONCE,
        )
    assert not result.is_error, _text(result)
    assert (harness.workspace / "out.txt").read_text() == "approved\n"


async def test_http_lists_tools_and_reads_a_file(harness: Harness, tmp_path: Path) -> None:
    """Over streamable HTTP the same tools are listed and an allowed ReadFile succeeds."""
    (harness.workspace / "hello.txt").write_text("hello over http\n")
    async with _http_session(harness, tmp_path) as session:
        with anyio.fail_after(10):
            listed = await session.list_tools()
        result = await _call(session, "ReadFile", {"path": "hello.txt"})
    read_file = next(tool for tool in listed.tools if tool.name == "ReadFile")
    assert read_file.annotations is not None
    assert read_file.annotations.read_only_hint is True
    assert not result.is_error
    assert "hello over http" in _text(result)


async def test_http_approver_denial_is_an_error_result_with_the_note(
    harness: Harness, tmp_path: Path
) -> None:
    """An approver's denial of a gated WriteFile comes back as isError carrying the note."""
    async with _http_session(harness, tmp_path) as session:
        result = await _gated_call_decided(
            harness,
            session,
            {"path": "nope.txt", "content": "x\n"},
            apb.DECISION_KIND_DENY,
            note="not in this change",
        )
    assert result.is_error
    assert "not in this change" in _text(result)
    assert not (harness.workspace / "nope.txt").exists()
