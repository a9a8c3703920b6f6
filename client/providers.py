"""Model-provider adapters: a session's tools in OpenAI and Anthropic form, and a model's tool
call run through callgate and answered in that provider's tool-result shape.

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

import json
from collections.abc import Iterable, Mapping
from typing import NamedTuple

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


def openai_tools(specs: Iterable[ToolSpec]) -> list[dict[str, JsonValue]]:
    """The `tools` argument of an OpenAI chat completion: one function entry per tool."""
    return [spec.to_openai() for spec in specs]


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


async def run_openai_tool_call(
    session: ClientSession,
    tool_call: Mapping[str, object],
    *,
    wait: float | None = None,
    loop_id: str = "",
) -> dict[str, JsonValue]:
    """Runs an OpenAI tool call (`{"id", "type": "function", "function": {"name",
    "arguments"}}`) and returns the `{"role": "tool", ...}` message that answers it.

    OpenAI's tool message has no error flag, so an error's content starts with "Error: ".
    Raises `ValueError` when `tool_call` has no ID (there is nothing to answer).
    """
    call_id = tool_call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError("an OpenAI tool call needs a string `id`")
    function = tool_call.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    arguments = function.get("arguments", "{}") if isinstance(function, Mapping) else None
    if not isinstance(name, str) or not name:
        outcome = ToolOutcome("The tool call names no function.", True)
    elif not isinstance(arguments, str | Mapping):
        outcome = ToolOutcome(f"The arguments of {name} must be a JSON object.", True)
    else:
        outcome = await run_tool_call(session, name, arguments, wait=wait, loop_id=loop_id)
    content = f"Error: {outcome.content}" if outcome.is_error else outcome.content
    return {"role": "tool", "tool_call_id": call_id, "content": content}


async def run_anthropic_tool_use(
    session: ClientSession,
    block: Mapping[str, object],
    *,
    wait: float | None = None,
    loop_id: str = "",
) -> dict[str, JsonValue]:
    """Runs an Anthropic `tool_use` block (`{"type": "tool_use", "id", "name", "input"}`) and
    returns the `tool_result` block that answers it, `is_error` set for every error.

    `input` may also be JSON text (as assembled from a streamed `input_json_delta`).
    Raises `ValueError` when `block` has no ID (there is nothing to answer).
    """
    use_id = block.get("id")
    if not isinstance(use_id, str) or not use_id:
        raise ValueError("an Anthropic tool_use block needs a string `id`")
    name = block.get("name")
    arguments = block.get("input", {})
    if not isinstance(name, str) or not name:
        outcome = ToolOutcome("The tool_use block names no tool.", True)
    elif not isinstance(arguments, str | Mapping):
        outcome = ToolOutcome(f"The input of {name} must be a JSON object.", True)
    else:
        outcome = await run_tool_call(session, name, arguments, wait=wait, loop_id=loop_id)
    return {
        "type": "tool_result",
        "tool_use_id": use_id,
        "content": outcome.content,
        "is_error": outcome.is_error,
    }
