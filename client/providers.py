"""Model-provider adapters: a session's tools in OpenAI (Chat Completions and Responses API) and
Anthropic form, and a model's tool call run through callgate and answered in that provider's
tool-result shape. A tool call may be a plain dict or the SDK's own object (`anthropic`'s
`ToolUseBlock`, `openai`'s `ChatCompletionMessageToolCall` or `ResponseFunctionToolCall`, or any
object with `model_dump()` or those attributes).

    tools = anthropic_tools(await session.tools())
    ...                                   # the model answers with tool_use blocks
    results = [await run_anthropic_tool_use(session, block) for block in tool_uses]

What the model can act on comes back as an error tool result, never as an exception that
ends the agent loop: a tool that ran and failed (`is_error`), a denial (`CallDeniedError`),
arguments the tool rejects (`InvalidArgumentsError`) or that are not a JSON object, a tool
the session does not offer (`ToolNotFoundError`), and a call no approver decided in time
(`ApprovalTimeoutError`). Errors of the connection or the server (authentication,
unavailability, protocol) are raised: the loop cannot fix them by trying something else.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Literal, NamedTuple

from pydantic import JsonValue

from callgate.client.errors import (
    ApprovalTimeoutError,
    CallDeniedError,
    InvalidArgumentsError,
    ToolNotFoundError,
)
from callgate.client.models import ToolResult, ToolSpec
from callgate.client.session import ClientSession

__all__ = [
    "ToolOutcome",
    "anthropic_tools",
    "openai_tools",
    "run_anthropic_tool_use",
    "run_openai_tool_call",
    "run_tool_call",
]


class ToolOutcome(NamedTuple):
    """What a model is told about one tool call: the text, and whether it is an error."""

    content: str
    is_error: bool


def openai_tools(
    specs: Iterable[ToolSpec], api: Literal["chat", "responses"] = "chat"
) -> list[dict[str, JsonValue]]:
    """The `tools` argument of an OpenAI request, one function entry per tool: for the Chat
    Completions API (`{"type": "function", "function": {...}}`), or with `api="responses"`
    for the Responses API (`{"type": "function", "name", "description", "parameters"}`)."""
    if api == "chat":
        return [spec.to_openai() for spec in specs]
    if api == "responses":
        return [
            {
                "type": "function",
                "name": spec.name,
                "description": spec.description,
                "parameters": copy.deepcopy(spec.input_schema),
                "strict": False,
            }
            for spec in specs
        ]
    raise ValueError(f"api must be 'chat' or 'responses', not {api!r}")


def _fields(item: object) -> Mapping[str, object]:
    """A tool call as a mapping: a dict as it is, an SDK object (pydantic) by `model_dump()`,
    anything else by its attributes."""
    if isinstance(item, Mapping):
        return item
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        dumped = dump()
        if isinstance(dumped, Mapping):
            return dumped
    names = ("id", "type", "name", "input", "function", "arguments", "call_id")
    return {name: getattr(item, name) for name in names if hasattr(item, name)}


def anthropic_tools(specs: Iterable[ToolSpec]) -> list[dict[str, JsonValue]]:
    """The `tools` argument of an Anthropic message: one entry per tool."""
    return [spec.to_anthropic() for spec in specs]


async def run_tool_call(
    session: ClientSession,
    name: str,
    arguments: Mapping[str, object] | str,
    *,
    wait: float | None = None,
    loop_id: str = "",
) -> ToolOutcome:
    """Runs one tool call from a model (`arguments` as decoded JSON or as the JSON text) and
    says what to tell the model; see the module docstring for which failures are results."""
    if isinstance(arguments, str):
        try:
            decoded: object = json.loads(arguments)
        except ValueError as exc:
            return ToolOutcome(f"The arguments of {name} are not valid JSON: {exc}.", True)
    else:
        decoded = arguments
    if not isinstance(decoded, Mapping):
        return ToolOutcome(f"The arguments of {name} must be a JSON object.", True)
    try:
        result = await session.run(name, decoded, wait=wait, loop_id=loop_id)
    except InvalidArgumentsError as exc:
        details = "; ".join(f"{field}: {text}" for field, text in exc.violations)
        return ToolOutcome(f"{exc.message}" + (f" ({details})" if details else ""), True)
    except (CallDeniedError, ToolNotFoundError, ApprovalTimeoutError) as exc:
        return ToolOutcome(exc.message, True)
    return ToolOutcome(_content(result), result.is_error)


def _content(result: ToolResult) -> str:
    """The text a model reads: the tool's text, else its structured result, tagged on error."""
    text = result.text or result.json
    if result.is_error and result.error_code:
        return f"[{result.error_code}] {text}"
    return text


async def _run_named(
    session: ClientSession,
    name: object,
    arguments: object,
    words: tuple[str, str],
    wait: float | None,
    loop_id: str,
) -> ToolOutcome:
    """A provider's call of the tool `name`, checked for its shape, then run; `words` are
    what the provider's shape says when it names no tool, and what it calls the arguments."""
    unnamed, called = words
    if not isinstance(name, str) or not name:
        return ToolOutcome(unnamed, True)
    if not isinstance(arguments, str | Mapping):
        return ToolOutcome(f"The {called} of {name} must be a JSON object.", True)
    return await run_tool_call(session, name, arguments, wait=wait, loop_id=loop_id)


async def run_openai_tool_call(
    session: ClientSession,
    tool_call: object,
    *,
    wait: float | None = None,
    loop_id: str = "",
) -> dict[str, JsonValue]:
    """Runs an OpenAI tool call and returns what answers it:
    - a Chat Completions tool call (`{"id", "type": "function", "function": {"name",
      "arguments"}}`, or `ChatCompletionMessageToolCall`) gets a `{"role": "tool",
      "tool_call_id", "content"}` message;
    - a Responses API function call (`{"type": "function_call", "call_id", "name",
      "arguments"}`, or `ResponseFunctionToolCall`) gets a `{"type": "function_call_output",
      "call_id", "output"}` item.

    Neither answer has an error flag, so an error's text starts with "Error: ". Raises
    `ValueError` when the call has no ID (there is nothing to answer).
    """
    fields = _fields(tool_call)
    if fields.get("type") == "function_call" or "call_id" in fields:
        return await _run_openai_response_call(session, fields, wait=wait, loop_id=loop_id)
    call_id = fields.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError("an OpenAI tool call needs a string `id`")
    function = fields.get("function")
    if function is not None and not isinstance(function, Mapping):
        function = _fields(function)
    name = function.get("name") if isinstance(function, Mapping) else None
    arguments = function.get("arguments", "{}") if isinstance(function, Mapping) else None
    outcome = await _run_named(
        session, name, arguments, ("The tool call names no function.", "arguments"), wait, loop_id
    )
    content = f"Error: {outcome.content}" if outcome.is_error else outcome.content
    return {"role": "tool", "tool_call_id": call_id, "content": content}


async def _run_openai_response_call(
    session: ClientSession, fields: Mapping[str, object], *, wait: float | None, loop_id: str
) -> dict[str, JsonValue]:
    call_id = fields.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError("an OpenAI function_call needs a string `call_id`")
    outcome = await _run_named(
        session,
        fields.get("name"),
        fields.get("arguments", "{}"),
        ("The function call names no function.", "arguments"),
        wait,
        loop_id,
    )
    output = f"Error: {outcome.content}" if outcome.is_error else outcome.content
    return {"type": "function_call_output", "call_id": call_id, "output": output}


async def run_anthropic_tool_use(
    session: ClientSession,
    block: object,
    *,
    wait: float | None = None,
    loop_id: str = "",
) -> dict[str, JsonValue]:
    """Runs an Anthropic `tool_use` block (`{"type": "tool_use", "id", "name", "input"}`, or the
    SDK's `ToolUseBlock`) and returns the `tool_result` block that answers it, `is_error` set
    for every error.

    `input` may also be JSON text (as assembled from a streamed `input_json_delta`).
    Raises `ValueError` when `block` has no ID (there is nothing to answer).
    """
    block = _fields(block)
    use_id = block.get("id")
    if not isinstance(use_id, str) or not use_id:
        raise ValueError("an Anthropic tool_use block needs a string `id`")
    outcome = await _run_named(
        session,
        block.get("name"),
        block.get("input", {}),
        ("The tool_use block names no tool.", "input"),
        wait,
        loop_id,
    )
    return {
        "type": "tool_result",
        "tool_use_id": use_id,
        "content": outcome.content,
        "is_error": outcome.is_error,
    }
