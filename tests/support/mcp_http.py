"""`callgate mcp` as a real subprocess in front of a test server, and MCP clients for it."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
from anyio.abc import Process
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from callgate.v1 import audit_service_pb2, audit_service_pb2_grpc

from .server import Harness

CALLGATE = str(Path(sys.executable).with_name("callgate"))


_RUNTIME = tempfile.mkdtemp(prefix="callgate-test-runtime-")
atexit.register(shutil.rmtree, _RUNTIME, True)


def bridge_env(**extra: str) -> dict[str, str]:
    """This process's environment without CALLGATE_* variables (PYTHONPATH stays), plus `extra`;
    XDG_RUNTIME_DIR (where bridges keep their pending-call ledgers) is the tests' own."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    return kept | {"XDG_RUNTIME_DIR": _RUNTIME} | extra


def private_file(path: Path, text: str, mode: int = 0o600) -> Path:
    """`path` holding `text` and a newline, with `mode`."""
    path.write_text(text + "\n")
    path.chmod(mode)
    return path


def bridge_args(harness: Harness, tmp_path: Path, *extra: str) -> list[str]:
    """`callgate mcp` arguments for the harness's server with the agent token."""
    token_file = private_file(tmp_path / "agent-token", harness.tokens["agent"])
    target = ["--target", harness.tcp_target, "--token-file", str(token_file)]
    return [CALLGATE, "mcp", *target, *extra]


async def stop(process: Process) -> None:
    """Terminates `process` (kills it after 10 s) and reaps it."""
    if process.returncode is None:
        process.terminate()
    with anyio.move_on_after(10, shield=True) as scope:
        await process.wait()
    if scope.cancelled_caught:
        process.kill()
    await process.aclose()


@asynccontextmanager
async def http_bridge(
    args: list[str], env: Mapping[str, str] | None = None
) -> AsyncIterator[tuple[str, str]]:
    """A `callgate mcp --http` subprocess: its URL and what it wrote to stderr up to then."""
    process = await anyio.open_process(args, env=dict(env) if env is not None else bridge_env())
    try:
        assert process.stderr is not None
        url = ""
        seen = b""
        with anyio.fail_after(20):
            async for chunk in process.stderr:
                seen += chunk
                if b"mcp serving on " in seen and b"\n" in seen.split(b"mcp serving on ", 1)[1]:
                    url = seen.split(b"mcp serving on ", 1)[1].split(b"\n", 1)[0].decode()
                    break
        assert url.startswith("http://"), seen.decode(errors="replace")
        yield url, seen.decode(errors="replace")
    finally:
        await stop(process)


@asynccontextmanager
async def mcp_http_session(url: str, http_token: str) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session over streamable HTTP that sends `http_token`."""
    headers = {"Authorization": f"Bearer {http_token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http_client,
        streamable_http_client(url, http_client=http_client) as (read_stream, write_stream),
        ClientSession(read_stream, write_stream) as session,
    ):
        with anyio.fail_after(20):
            await session.initialize()
        yield session


@asynccontextmanager
async def stdio_bridge(
    harness: Harness, tmp_path: Path, *extra: str, read_timeout: float | None = None
) -> AsyncIterator[ClientSession]:
    """One `callgate mcp` process over stdio and an initialized client session on it (its
    stderr appended to `tmp_path/bridge-stderr`)."""
    command, *args = bridge_args(harness, tmp_path, *extra)
    params = StdioServerParameters(command=command, args=args, env=bridge_env())
    with (tmp_path / "bridge-stderr").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read_stream, write_stream),
            ClientSession(read_stream, write_stream, read_timeout_seconds=read_timeout) as session,
        ):
            with anyio.fail_after(20):
                await session.initialize()
            yield session


def text_of(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def prepared_calls(harness: Harness, tool: str) -> int:
    """How many calls of `tool` the server's journal says were prepared."""
    stub = audit_service_pb2_grpc.AuditServiceStub(harness.channel("admin"))
    response = await stub.ListEvents(
        audit_service_pb2.ListEventsRequest(
            filter=audit_service_pb2.EventFilter(kind="call.prepared"), page_size=1000
        ),
        timeout=10,
    )
    return sum(1 for e in response.events if json.loads(e.data_json).get("tool") == tool)
