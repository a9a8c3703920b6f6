"""Real agent frameworks drive `callgate mcp` on their own defaults, with a scripted model in
place of a provider: the OpenAI Agents SDK (its MCP client gives up on a request after 5 s)
writes a file through a gated call an approver decides after 10 s."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from callgate.v1 import approval_service_pb2 as apb
from tests.support.approvals import Watcher, approver, decide
from tests.support.mcp_http import bridge_args, bridge_env, prepared_calls
from tests.support.server import Harness

agents = pytest.importorskip("agents")
responses = pytest.importorskip("openai.types.responses")

pytestmark = pytest.mark.anyio

APPROVER_TAKES = 10.0
BOUND = 90.0
ARGUMENTS = {"path": "decided.txt", "content": "written after a human decided\n"}


class ScriptedModel(agents.Model):  # type: ignore[misc,name-defined]
    """Calls WriteFile, calls it again while the answer says it awaits an approver (as a model
    following the tool's words would), and then says what the tool answered."""

    def __init__(self) -> None:
        self.calls = 0
        self.seen: list[str] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        items = args[1] if len(args) > 1 else kwargs["input"]
        outputs = [
            str(item.get("output"))
            for item in (items if isinstance(items, list) else [])
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        if outputs:
            self.seen.append(outputs[-1])
        if not outputs or "Make exactly the same call again" in outputs[-1]:
            self.calls += 1
            call = responses.ResponseFunctionToolCall(
                call_id=f"call_{self.calls}",
                name="WriteFile",
                arguments=json.dumps(ARGUMENTS),
                type="function_call",
                id=f"fc_{self.calls}",
            )
            return agents.ModelResponse(output=[call], usage=agents.Usage(), response_id=None)
        message = responses.ResponseOutputMessage(
            id="msg_1",
            content=[
                responses.ResponseOutputText(text=outputs[-1], type="output_text", annotations=[])
            ],
            role="assistant",
            status="completed",
            type="message",
        )
        return agents.ModelResponse(output=[message], usage=agents.Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


async def test_the_openai_agents_sdk_on_its_defaults_outlives_a_slow_approver(
    harness: Harness, tmp_path: Path
) -> None:
    command, *args = bridge_args(harness, tmp_path)
    model = ScriptedModel()
    watcher = Watcher(approver(harness))
    outcome: list[Any] = []
    try:
        async with agents.mcp.MCPServerStdio(
            params={"command": command, "args": args, "env": bridge_env()}
        ) as server:  # its defaults: a 5 s timeout per MCP request
            agent = agents.Agent(name="writer", model=model, mcp_servers=[server])

            async def run() -> None:
                outcome.append(await agents.Runner.run(agent, "Write the file."))

            with anyio.fail_after(BOUND):
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(run)
                    pending = await watcher.approval()
                    await anyio.sleep(APPROVER_TAKES)
                    assert not (harness.workspace / "decided.txt").exists()
                    await decide(approver(harness), pending.call, apb.DECISION_KIND_APPROVE_ONCE)
    finally:
        watcher.cancel()
    assert (harness.workspace / "decided.txt").read_text() == ARGUMENTS["content"]
    assert model.calls >= 2  # answered as pending at least once, then repeated
    assert "Make exactly the same call again" in model.seen[0]
    assert "awaiting" not in str(outcome[0].final_output)


async def test_pydantic_ai_with_a_progress_handler_waits_for_a_slow_approver(
    harness: Harness, tmp_path: Path
) -> None:
    """pydantic-ai's MCP toolset waits 300 s for an answer by default, and gives up on a tool
    after one retry: with a progress handler (its client then asks for progress) the bridge
    keeps it informed instead of answering early, and the write goes through once decided."""
    pydantic_ai = pytest.importorskip("pydantic_ai")
    mcp_toolsets = pytest.importorskip("pydantic_ai.mcp")
    function_models = pytest.importorskip("pydantic_ai.models.function")
    messages = pytest.importorskip("pydantic_ai.messages")
    transports = pytest.importorskip("fastmcp.client.transports")
    fastmcp_client = pytest.importorskip("fastmcp.client")
    command, *args = bridge_args(harness, tmp_path)
    heard: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append(message or "")

    def script(history: list[Any], info: Any) -> Any:
        returned = [
            part
            for message in history
            for part in getattr(message, "parts", [])
            if isinstance(part, messages.ToolReturnPart | messages.RetryPromptPart)
        ]
        if not returned:
            return messages.ModelResponse(
                parts=[messages.ToolCallPart(tool_name="WriteFile", args=ARGUMENTS)]
            )
        return messages.ModelResponse(parts=[messages.TextPart(content=str(returned[-1].content))])

    client = fastmcp_client.Client(
        transports.StdioTransport(command, args, env=bridge_env()), progress_handler=on_progress
    )
    toolset = mcp_toolsets.MCPToolset(client)
    agent = pydantic_ai.Agent(function_models.FunctionModel(script), toolsets=[toolset])
    watcher = Watcher(approver(harness))
    outcome: list[Any] = []
    try:
        with anyio.fail_after(BOUND):
            async with anyio.create_task_group() as tasks:

                async def run() -> None:
                    outcome.append(await agent.run("Write the file."))

                tasks.start_soon(run)
                pending = await watcher.approval()
                await anyio.sleep(APPROVER_TAKES)
                await decide(approver(harness), pending.call, apb.DECISION_KIND_APPROVE_ONCE)
    finally:
        watcher.cancel()
    assert (harness.workspace / "decided.txt").read_text() == ARGUMENTS["content"]
    assert any(f"call {pending.call.execution_id}" in message for message in heard)
    assert "awaiting" not in str(outcome[0].output)


async def test_pydantic_ai_on_its_defaults_waits_for_a_slow_approver(
    harness: Harness, tmp_path: Path
) -> None:
    """pydantic-ai's MCP toolset on its defaults (a FastMCP client, no tasks package): its
    client asks for progress on every call (FastMCP's default progress handler) and waits
    300 s, so the bridge keeps it informed instead of answering early; the one call is
    written once decided. Were it answered as pending, the script would repeat the call."""
    pydantic_ai = pytest.importorskip("pydantic_ai")
    mcp_toolsets = pytest.importorskip("pydantic_ai.mcp")
    function_models = pytest.importorskip("pydantic_ai.models.function")
    messages = pytest.importorskip("pydantic_ai.messages")
    transports = pytest.importorskip("fastmcp.client.transports")
    command, *args = bridge_args(harness, tmp_path)
    calls: list[int] = []

    def script(history: list[Any], info: Any) -> Any:
        returned = [
            part
            for message in history
            for part in getattr(message, "parts", [])
            if isinstance(part, messages.ToolReturnPart | messages.RetryPromptPart)
        ]
        if not returned or "Make exactly the same call again" in str(returned[-1].content):
            calls.append(1)
            return messages.ModelResponse(
                parts=[messages.ToolCallPart(tool_name="WriteFile", args=ARGUMENTS)]
            )
        return messages.ModelResponse(parts=[messages.TextPart(content=str(returned[-1].content))])

    toolset = mcp_toolsets.MCPToolset(transports.StdioTransport(command, args, env=bridge_env()))
    agent = pydantic_ai.Agent(function_models.FunctionModel(script), toolsets=[toolset])
    watcher = Watcher(approver(harness))
    outcome: list[Any] = []
    try:
        with anyio.fail_after(BOUND):
            async with anyio.create_task_group() as tasks:

                async def run() -> None:
                    outcome.append(await agent.run("Write the file."))

                tasks.start_soon(run)
                pending = await watcher.approval()
                await anyio.sleep(APPROVER_TAKES)
                await decide(approver(harness), pending.call, apb.DECISION_KIND_APPROVE_ONCE)
    finally:
        watcher.cancel()
    assert (harness.workspace / "decided.txt").read_text() == ARGUMENTS["content"]
    assert len(calls) == 1  # never answered as pending
    assert "awaiting" not in str(outcome[0].output)
    assert await prepared_calls(harness, "WriteFile") == 1
