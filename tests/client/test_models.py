"""The client's models are frozen, strict, and export tool specs in model-API formats."""

from __future__ import annotations

import math

import pydantic
import pytest

from callgate.client import State, ToolResult, ToolSpec, encode_arguments

SCHEMA: dict[str, pydantic.JsonValue] = {
    "type": "object",
    "properties": {"path": {"type": "string", "description": "File to read."}},
    "required": ["path"],
    "additionalProperties": False,
}


def _spec() -> ToolSpec:
    return ToolSpec(
        name="ReadFile",
        description="Reads a text file from the workspace.",
        input_schema=SCHEMA,
        requirement_kinds=("filesystem.read",),
    )


def test_to_openai_has_the_function_calling_shape() -> None:
    """`to_openai` is a `{"type": "function", "function": {...}}` tool entry."""
    assert _spec().to_openai() == {
        "type": "function",
        "function": {
            "name": "ReadFile",
            "description": "Reads a text file from the workspace.",
            "parameters": SCHEMA,
        },
    }


def test_to_anthropic_has_the_tool_use_shape() -> None:
    """`to_anthropic` is a `{"name", "description", "input_schema"}` tool entry."""
    assert _spec().to_anthropic() == {
        "name": "ReadFile",
        "description": "Reads a text file from the workspace.",
        "input_schema": SCHEMA,
    }


def test_exported_specs_are_copies_the_caller_may_change() -> None:
    """Editing an exported schema (e.g. adding `strict`) leaves the spec itself untouched."""
    spec = _spec()
    exported = spec.to_anthropic()
    schema = exported["input_schema"]
    assert isinstance(schema, dict)
    schema["required"] = []
    assert spec.input_schema == SCHEMA


def test_models_are_frozen_and_reject_unknown_fields() -> None:
    """Models cannot be changed after creation, nor built with fields they do not have."""
    spec = _spec()
    with pytest.raises(pydantic.ValidationError):
        spec.name = "Other"
    with pytest.raises(pydantic.ValidationError):
        ToolSpec.model_validate({**spec.model_dump(), "extra": 1})


def test_tool_result_json_field_holds_the_wire_text_and_parses_on_request() -> None:
    """`json` is the structured result's text; `parsed_json` decodes it, None when empty."""
    result = ToolResult(
        is_error=False,
        error_code="",
        text="ok",
        json='{"status":"running","next_cursor":4}',
        exit_code=None,
        omitted_bytes=0,
    )
    assert result.json == '{"status":"running","next_cursor":4}'
    assert result.parsed_json() == {"status": "running", "next_cursor": 4}
    assert result.model_copy(update={"json": ""}).parsed_json() is None


def test_encode_arguments_is_compact_utf8_json_and_passes_strings_through() -> None:
    """Mappings become compact JSON (non-ASCII kept); strings are sent as the model wrote them."""
    assert encode_arguments({"path": "ü.txt", "n": [1, 2]}) == '{"path":"ü.txt","n":[1,2]}'
    assert encode_arguments('{"path": 1}') == '{"path": 1}'


def test_encode_arguments_refuses_values_json_cannot_carry() -> None:
    """NaN is not JSON, so it is refused before it reaches the server."""
    with pytest.raises(ValueError, match="JSON"):
        encode_arguments({"n": math.nan})


@pytest.mark.parametrize(
    ("state", "terminal"),
    [
        (State.UNSPECIFIED, False),
        (State.PREPARED, False),
        (State.AWAITING_APPROVAL, False),
        (State.APPROVED, False),
        (State.RUNNING, False),
        (State.DENIED, True),
        (State.SUCCEEDED, True),
        (State.FAILED, True),
        (State.CANCELLED, True),
        (State.EXPIRED, True),
    ],
)
def test_terminal_states_are_the_ones_a_call_never_leaves(state: State, terminal: bool) -> None:
    """`is_terminal` matches the lifecycle: denied, succeeded, failed, cancelled, expired."""
    assert state.is_terminal is terminal
