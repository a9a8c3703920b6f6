"""`callgate mcp` around a human decision, as agent frameworks use it on their defaults: a real
`mcp` client over stdio against `callgate mcp` subprocesses and a real callgate server.

- A client that asks for no progress and would time out first (the OpenAI Agents SDK waits 5 s)
  gets a pending answer, and the same call made again returns its outcome: one call, run once.
- A client that asks for progress gets notifications naming the call while it waits.
- A new bridge process per call (langchain-mcp-adapters' default) finds the agent's named
  session, so that reading and then overwriting a file works.
- Calls of one model turn arrive at the approver as one batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from callgate.v1 import approval_service_pb2 as apb
from tests.support.approvals import Watcher, approver, decide
from tests.support.mcp_http import prepared_calls, stdio_bridge, text_of
from tests.support.server import Harness

pytestmark = pytest.mark.anyio

APPROVE = apb.DECISION_KIND_APPROVE_ONCE
BOUND = 30.0


async def test_a_client_that_would_time_out_gets_a_pending_answer_and_the_outcome_on_repeat(
    harness: Harness, tmp_path: Path
) -> None:
    """With a 5 s request timeout and no progress asked (the OpenAI Agents SDK's defaults), a
    gated write approved after the client would have given up still succeeds: the bridge
    answers "awaiting an approver" first, and the same call made again after the decision
    returns the write's outcome, prepared and run once."""
    watcher = Watcher(approver(harness))
    arguments = {"path": "gated.txt", "content": "approved later\n"}
    try:
        async with stdio_bridge(harness, tmp_path, read_timeout=5.0) as session:
            with anyio.fail_after(BOUND):
                first = await session.call_tool("WriteFile", arguments)
            assert not first.is_error  # not a failure: frameworks count those against retries
            assert first.structured_content is not None
            assert first.structured_content["status"] == "awaiting_approval"
            assert "Make exactly the same call again" in text_of(first)
            pending = await watcher.approval()
            assert pending.call.execution_id == first.structured_content["execution_id"]
            assert not (harness.workspace / "gated.txt").exists()
            await decide(approver(harness), pending.call, APPROVE)
            with anyio.fail_after(BOUND):
                second = await session.call_tool("WriteFile", arguments)
    finally:
        watcher.cancel()
    assert not second.is_error, text_of(second)
    assert (harness.workspace / "gated.txt").read_text() == "approved later\n"
    assert await prepared_calls(harness, "WriteFile") == 1


async def test_a_client_that_asks_for_progress_hears_the_call_named_while_it_waits(
    harness: Harness, tmp_path: Path
) -> None:
    """Progress notifications name the call and its deadline; no pending answer is given to a
    client that asked for progress, however long the approver takes."""
    heard: list[str] = []
    first_heard = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append(message or "")
        first_heard.set()

    watcher = Watcher(approver(harness))
    results: list[types.CallToolResult] = []
    try:
        async with stdio_bridge(harness, tmp_path, "--pending-after", "1") as session:

            async def call() -> None:
                results.append(
                    await session.call_tool(
                        "WriteFile",
                        {"path": "slow.txt", "content": "x\n"},
                        progress_callback=on_progress,
                    )
                )

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(call)
                pending = await watcher.approval()
                with anyio.fail_after(BOUND):
                    await first_heard.wait()
                await anyio.sleep(1.5)  # past --pending-after: still no pending answer
                assert not results
                await decide(approver(harness), pending.call, APPROVE)
    finally:
        watcher.cancel()
    assert not results[0].is_error, text_of(results[0])
    assert f"call {pending.call.execution_id}" in heard[0]
    assert "if nobody decides" in heard[0]


async def test_a_bridge_per_call_shares_the_agents_session(
    harness: Harness, tmp_path: Path
) -> None:
    """langchain-mcp-adapters starts a new MCP session (here a new bridge process) for every
    call: the read in one and the overwrite in the next are of one callgate session, so the
    write knows the file was read."""
    (harness.workspace / "notes.txt").write_text("old\n")
    async with stdio_bridge(harness, tmp_path) as session:
        with anyio.fail_after(BOUND):
            read = await session.call_tool("ReadFile", {"path": "notes.txt"})
    assert not read.is_error
    watcher = Watcher(approver(harness))
    results: list[types.CallToolResult] = []
    try:
        async with stdio_bridge(harness, tmp_path, "--pending-after", "0") as session:

            async def write() -> None:
                results.append(
                    await session.call_tool("WriteFile", {"path": "notes.txt", "content": "new\n"})
                )

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(write)
                pending = await watcher.approval()
                await decide(approver(harness), pending.call, APPROVE)
    finally:
        watcher.cancel()
    assert not results[0].is_error, text_of(results[0])
    assert (harness.workspace / "notes.txt").read_text() == "new\n"


async def test_a_call_answered_as_pending_by_one_bridge_process_is_followed_by_the_next(
    harness: Harness, tmp_path: Path
) -> None:
    """A bridge per call on its defaults: the first process answers "awaiting an approver"
    and ends; the approver decides; the same call made through a new process returns the
    outcome of that call, which runs once, and no second call is prepared."""
    (harness.workspace / "notes.txt").write_text("old\n")
    arguments = {"path": "notes.txt", "content": "new\n"}
    async with stdio_bridge(harness, tmp_path) as session:
        with anyio.fail_after(BOUND):
            await session.call_tool("ReadFile", {"path": "notes.txt"})
    watcher = Watcher(approver(harness))
    try:
        async with stdio_bridge(harness, tmp_path, "--pending-after", "0.5") as session:
            with anyio.fail_after(BOUND):
                first = await session.call_tool("WriteFile", arguments)
        assert first.structured_content is not None
        assert first.structured_content["status"] == "awaiting_approval", text_of(first)
        pending = await watcher.approval()
        await decide(approver(harness), pending.call, APPROVE)
        assert (harness.workspace / "notes.txt").read_text() == "old\n"  # nobody invoked it
        async with stdio_bridge(harness, tmp_path, "--pending-after", "0.5") as session:
            with anyio.fail_after(BOUND):
                second = await session.call_tool("WriteFile", arguments)
        async with stdio_bridge(harness, tmp_path, "--pending-after", "0.5") as session:
            with anyio.fail_after(BOUND):
                third = await session.call_tool("ReadFile", {"path": "notes.txt"})
    finally:
        watcher.cancel()
    assert not second.is_error, text_of(second)
    assert (harness.workspace / "notes.txt").read_text() == "new\n"
    assert await prepared_calls(harness, "WriteFile") == 1
    assert "new" in text_of(third)


async def test_the_calls_of_one_turn_reach_the_approver_as_one_batch(
    harness: Harness, tmp_path: Path
) -> None:
    watcher = Watcher(approver(harness))
    try:
        async with (
            stdio_bridge(harness, tmp_path, "--pending-after", "0") as session,
            anyio.create_task_group() as tasks,
        ):
            for name in ("a.txt", "b.txt", "c.txt"):
                tasks.start_soon(session.call_tool, "WriteFile", {"path": name, "content": "x"})
            seen: list[Any] = [await watcher.approval() for _ in range(3)]
            batches = {item.call.batch_id for item in seen}
            for item in seen:
                await decide(approver(harness), item.call, apb.DECISION_KIND_DENY)
    finally:
        watcher.cancel()
    assert len(batches) == 1
    assert batches.pop()
