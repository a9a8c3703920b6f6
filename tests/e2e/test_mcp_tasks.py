"""`callgate mcp` on MCP's 2026-07-28 revision (no initialize, no session ID: each request
stands alone), with and without the tasks extension, driven by the `mcp` SDK's own `Client`
over stdio against a real callgate server.

- A client that declares the tasks extension gets a task for a gated call: it polls
  `tasks/get` (the call named while it waits) and gets the write's result once an approver
  decided, after 10 s; cancelling the task withdraws the call from the approvers.
- A client without it gets the pending answer and, repeating the call, its outcome.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import grpc
import pytest
from mcp.client import Client
from mcp.client.extension import ClientExtension
from mcp.client.stdio import StdioServerParameters
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from callgate.v1 import approval_service_pb2 as apb
from tests.support.approvals import Watcher, approver, decide
from tests.support.mcp_http import bridge_args, bridge_env, prepared_calls, text_of
from tests.support.mcp_tasks import TasksClient
from tests.support.server import Harness

pytestmark = pytest.mark.anyio

APPROVER_TAKES = 10.0
BOUND = 60.0


@asynccontextmanager
async def modern_client(
    harness: Harness, tmp_path: Path, *extra: str, extensions: Sequence[ClientExtension] = ()
) -> AsyncIterator[Client]:
    command, *args = bridge_args(harness, tmp_path, *extra)
    params = StdioServerParameters(command=command, args=args, env=bridge_env())
    async with Client(params, extensions=list(extensions)) as client:
        assert client.session.protocol_version in MODERN_PROTOCOL_VERSIONS
        yield client


async def test_a_client_with_the_tasks_extension_polls_a_task_until_an_approver_decides(
    harness: Harness, tmp_path: Path
) -> None:
    tasks = TasksClient(bound=BOUND)
    arguments = {"path": "tasked.txt", "content": "decided\n"}
    watcher = Watcher(approver(harness))
    results = []
    try:
        async with modern_client(harness, tmp_path, extensions=[tasks]) as client:

            async def call() -> None:
                results.append(await client.call_tool("WriteFile", arguments))

            with anyio.fail_after(BOUND):
                async with anyio.create_task_group() as group:
                    group.start_soon(call)
                    pending = await watcher.approval()
                    await anyio.sleep(APPROVER_TAKES)
                    assert not (harness.workspace / "tasked.txt").exists()
                    await decide(approver(harness), pending.call, apb.DECISION_KIND_APPROVE_ONCE)
    finally:
        watcher.cancel()
    assert not results[0].is_error, text_of(results[0])
    assert (harness.workspace / "tasked.txt").read_text() == "decided\n"
    assert len(tasks.created) == 1
    assert tasks.created[0].status == "working"
    working = [s for s in tasks.seen if s.status == "working"]
    assert len(working) >= 5  # polled while the approver took 10 s
    assert f"call {pending.call.execution_id}" in (working[0].status_message or "")
    assert tasks.seen[-1].status == "completed"
    assert await prepared_calls(harness, "WriteFile") == 1


async def test_cancelling_a_task_withdraws_the_call_from_the_approvers(
    harness: Harness, tmp_path: Path
) -> None:
    tasks = TasksClient(cancel_after=2, bound=BOUND)
    watcher = Watcher(approver(harness))
    try:
        async with modern_client(harness, tmp_path, extensions=[tasks]) as client:
            with anyio.fail_after(BOUND):
                result = await client.call_tool(
                    "WriteFile", {"path": "never.txt", "content": "x\n"}
                )
            pending = await watcher.approval()
    finally:
        watcher.cancel()
    assert result.is_error
    assert tasks.seen[-1].status == "cancelled"
    stub = approver(harness)
    with pytest.raises(grpc.aio.AioRpcError, match="The call is cancelled") as raised:
        await decide(stub, pending.call, apb.DECISION_KIND_APPROVE_ONCE)
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert not (harness.workspace / "never.txt").exists()


async def test_a_modern_client_without_tasks_gets_the_pending_answer_then_the_outcome(
    harness: Harness, tmp_path: Path
) -> None:
    arguments = {"path": "modern.txt", "content": "m\n"}
    watcher = Watcher(approver(harness))
    try:
        async with modern_client(harness, tmp_path, "--pending-after", "0.5") as client:
            with anyio.fail_after(BOUND):
                first = await client.call_tool("WriteFile", arguments)
            assert first.structured_content is not None
            assert first.structured_content["status"] == "awaiting_approval"
            pending = await watcher.approval()
            await decide(approver(harness), pending.call, apb.DECISION_KIND_APPROVE_ONCE)
            with anyio.fail_after(BOUND):
                second = await client.call_tool("WriteFile", arguments)
    finally:
        watcher.cancel()
    assert not second.is_error, text_of(second)
    assert (harness.workspace / "modern.txt").read_text() == "m\n"
    assert await prepared_calls(harness, "WriteFile") == 1
