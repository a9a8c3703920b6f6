"""The provider adapters against a real server: tool specs for OpenAI and Anthropic, and
model tool calls run through callgate and answered in each provider's tool-result shape."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from callgate.client import (
    CallgateClient,
    ClientSession,
    anthropic_tools,
    openai_tools,
    run_anthropic_tool_use,
    run_openai_tool_call,
)
from tests.support.server import serve

pytestmark = pytest.mark.anyio


@pytest.fixture
async def session(tmp_path: Path) -> AsyncIterator[ClientSession]:
    """A session on a real server (interactive: writes are gated) with one readable file."""
    async with serve(tmp_path) as harness:
        (harness.workspace / "notes.txt").write_text("first line\n")
        (harness.workspace / ".env").write_text("SECRET=1\n")
        async with (
            CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client,
            client.open_session() as session,
        ):
            yield session


def _openai_call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _tool_use(name: str, tool_input: object, use_id: str = "toolu_1") -> dict[str, object]:
    return {"type": "tool_use", "id": use_id, "name": name, "input": tool_input}


async def test_both_formats_carry_every_listed_schema_unchanged(session: ClientSession) -> None:
    """Every ListTools schema is a JSON object schema and reaches both formats as is, JSON-safe."""
    specs = await session.tools()
    assert specs
    for spec, openai, anthropic in zip(
        specs, openai_tools(specs), anthropic_tools(specs), strict=True
    ):
        assert spec.input_schema["type"] == "object"
        assert isinstance(spec.input_schema.get("properties", {}), dict)
        assert openai == {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.input_schema,
            },
        }
        assert anthropic == {
            "name": spec.name,
            "description": spec.description,
            "input_schema": spec.input_schema,
        }
        assert json.loads(json.dumps(openai)) == openai
        assert json.loads(json.dumps(anthropic)) == anthropic


async def test_exported_specs_are_copies_the_caller_may_change(session: ClientSession) -> None:
    """Editing an exported schema (as SDK wrappers sometimes do) leaves the spec intact."""
    spec = (await session.tools())[0]
    exported = anthropic_tools([spec])[0]
    schema = exported["input_schema"]
    assert isinstance(schema, dict)
    schema["type"] = "changed"
    assert spec.input_schema["type"] == "object"


async def test_openai_tool_call_is_answered_with_the_tool_output(session: ClientSession) -> None:
    """A well-formed call runs and its text comes back in a tool message with the call's ID."""
    message = await run_openai_tool_call(
        session, _openai_call("ReadFile", '{"path": "notes.txt"}', "call_abc")
    )
    assert message["role"] == "tool"
    assert message["tool_call_id"] == "call_abc"
    assert isinstance(message["content"], str)
    assert "first line" in message["content"]
    assert not message["content"].startswith("Error:")


async def test_anthropic_tool_use_is_answered_with_a_tool_result(session: ClientSession) -> None:
    """A well-formed tool_use runs and comes back as a tool_result with is_error false."""
    block = await run_anthropic_tool_use(
        session, _tool_use("ReadFile", {"path": "notes.txt"}, "toolu_abc")
    )
    assert block["type"] == "tool_result"
    assert block["tool_use_id"] == "toolu_abc"
    assert block["is_error"] is False
    assert isinstance(block["content"], str)
    assert "first line" in block["content"]


async def test_a_tool_that_failed_is_an_error_result(session: ClientSession) -> None:
    """A tool error (the file is missing) sets is_error and names the tool's error code."""
    block = await run_anthropic_tool_use(session, _tool_use("ReadFile", {"path": "missing.txt"}))
    assert block["is_error"] is True
    assert "file_not_found" in str(block["content"])
    message = await run_openai_tool_call(session, _openai_call("ReadFile", '{"path": "gone"}'))
    assert str(message["content"]).startswith("Error: [file_not_found]")


async def test_a_denial_is_an_error_result_not_an_exception(session: ClientSession) -> None:
    """A denied call (protected path) is answered as an error; nothing of the file leaks."""
    block = await run_anthropic_tool_use(session, _tool_use("ReadFile", {"path": ".env"}))
    assert block["is_error"] is True
    assert "denied" in str(block["content"])
    assert "SECRET" not in str(block["content"])
    message = await run_openai_tool_call(session, _openai_call("ReadFile", '{"path": ".env"}'))
    assert str(message["content"]).startswith("Error: ")


async def test_arguments_the_tool_rejects_are_an_error_result(session: ClientSession) -> None:
    """Arguments failing the tool's schema are an error naming the bad field."""
    block = await run_anthropic_tool_use(session, _tool_use("ReadFile", {"path": 3}))
    assert block["is_error"] is True
    assert "arguments.path" in str(block["content"])
    message = await run_openai_tool_call(session, _openai_call("ReadFile", '{"nope": 1}'))
    assert str(message["content"]).startswith("Error: ")


async def test_malformed_json_arguments_are_an_error_result(session: ClientSession) -> None:
    """Arguments that are not JSON, or not an object, are answered as errors; no call is made."""
    message = await run_openai_tool_call(session, _openai_call("ReadFile", '{"path": '))
    assert str(message["content"]).startswith("Error: ")
    assert "JSON" in str(message["content"])
    array = await run_openai_tool_call(session, _openai_call("ReadFile", '["notes.txt"]'))
    assert str(array["content"]).startswith("Error: ")
    streamed = await run_anthropic_tool_use(session, _tool_use("ReadFile", '{"path": "notes'))
    assert streamed["is_error"] is True
    scalar = await run_anthropic_tool_use(session, _tool_use("ReadFile", 42))
    assert scalar["is_error"] is True
    assert await session.list_calls() == []


async def test_an_unknown_tool_is_an_error_result(session: ClientSession) -> None:
    """A tool name the model made up is answered as an error the model can correct."""
    block = await run_anthropic_tool_use(session, _tool_use("DeleteEverything", {}))
    assert block["is_error"] is True
    nameless = await run_openai_tool_call(session, {"id": "call_1", "type": "function"})
    assert str(nameless["content"]).startswith("Error: ")


async def test_a_gated_call_nobody_decides_is_an_error_result(session: ClientSession) -> None:
    """A gated call not decided within `wait` is cancelled and answered as an error."""
    block = await run_anthropic_tool_use(
        session, _tool_use("WriteFile", {"path": "new.txt", "content": "x"}), wait=0.2
    )
    assert block["is_error"] is True
    assert not (Path(session.session.workspace) / "new.txt").exists()


async def test_a_call_without_an_id_cannot_be_answered(session: ClientSession) -> None:
    """A tool call without an ID is the caller's bug: ValueError, before anything runs."""
    with pytest.raises(ValueError, match="id"):
        await run_openai_tool_call(session, {"function": {"name": "ReadFile", "arguments": "{}"}})
    with pytest.raises(ValueError, match="id"):
        await run_anthropic_tool_use(session, {"name": "ReadFile", "input": {}})
    assert await session.list_calls() == []


async def test_the_sdks_own_objects_are_run_and_answered(session: ClientSession) -> None:
    """`anthropic`'s ToolUseBlock, `openai`'s ChatCompletionMessageToolCall and
    ResponseFunctionToolCall, as the SDKs return them, are run like the plain dicts."""
    anthropic_types = pytest.importorskip("anthropic.types")
    chat = pytest.importorskip("openai.types.chat")
    responses = pytest.importorskip("openai.types.responses")
    block = anthropic_types.ToolUseBlock(
        id="toolu_9", name="ReadFile", input={"path": "notes.txt"}, type="tool_use"
    )
    chat_call = chat.ChatCompletionMessageToolCall(
        id="call_9",
        type="function",
        function={"name": "ReadFile", "arguments": '{"path": "notes.txt"}'},
    )
    response_call = responses.ResponseFunctionToolCall(
        call_id="call_10",
        name="ReadFile",
        arguments='{"path": ".env"}',
        type="function_call",
        id="fc_1",
    )
    anthropic_result = await run_anthropic_tool_use(session, block)
    chat_message = await run_openai_tool_call(session, chat_call)
    response_output = await run_openai_tool_call(session, response_call)
    assert anthropic_result["tool_use_id"] == "toolu_9"
    assert anthropic_result["is_error"] is False
    assert "first line" in str(anthropic_result["content"])
    assert chat_message["tool_call_id"] == "call_9"
    assert "first line" in str(chat_message["content"])
    assert response_output["type"] == "function_call_output"
    assert response_output["call_id"] == "call_10"
    assert str(response_output["output"]).startswith("Error: ")  # a secret: denied


async def test_openai_tools_come_in_both_api_shapes(session: ClientSession) -> None:
    specs = await session.tools()
    chat = openai_tools(specs)
    responses = openai_tools(specs, api="responses")
    assert [c["function"]["name"] for c in chat] == [r["name"] for r in responses]  # type: ignore[index,call-overload]
    first = responses[0]
    assert first["type"] == "function"
    assert first["parameters"] == specs[0].input_schema
    with pytest.raises(ValueError, match="api must be"):
        openai_tools(specs, api="assistants")  # type: ignore[arg-type]
