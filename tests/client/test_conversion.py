"""Wire messages convert into the client's models completely and without loss."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import UTC, datetime

import pytest
from google.protobuf import descriptor
from pydantic import BaseModel

from callgate.client import (
    Decision,
    DecisionKind,
    Denial,
    DenialKind,
    PendingApproval,
    PendingQuestion,
    Requirement,
    Resolved,
    Rule,
    RuleCandidate,
    RuleEffect,
    SandboxMode,
    Session,
    State,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from callgate.client.conversion import (
    DECISION_KINDS,
    DENIAL_KINDS,
    RULE_EFFECTS,
    SANDBOX_MODES,
    STATES,
    call_from_proto,
    result_from_proto,
    session_from_proto,
    tool_spec_from_proto,
)
from callgate.v1 import approval_service_pb2, session_pb2, tool_call_pb2, tool_service_pb2
from tests.client.scripted_server import TIME, call_message, session_message

ENUM_TABLES: list[
    tuple[descriptor.EnumDescriptor, str, Mapping[int, enum.StrEnum], type[enum.StrEnum]]
] = [
    (tool_call_pb2.DESCRIPTOR.enum_types_by_name["State"], "STATE_", STATES, State),
    (
        tool_call_pb2.DESCRIPTOR.enum_types_by_name["DenialKind"],
        "DENIAL_KIND_",
        DENIAL_KINDS,
        DenialKind,
    ),
    (
        session_pb2.DESCRIPTOR.enum_types_by_name["SandboxMode"],
        "SANDBOX_MODE_",
        SANDBOX_MODES,
        SandboxMode,
    ),
    (
        approval_service_pb2.DESCRIPTOR.enum_types_by_name["RuleEffect"],
        "RULE_EFFECT_",
        RULE_EFFECTS,
        RuleEffect,
    ),
]


@pytest.mark.parametrize(("proto_enum", "prefix", "table", "model_enum"), ENUM_TABLES)
def test_enum_tables_map_each_proto_value_to_the_model_value_of_the_same_name(
    proto_enum: descriptor.EnumDescriptor,
    prefix: str,
    table: Mapping[int, enum.StrEnum],
    model_enum: type[enum.StrEnum],
) -> None:
    """Every proto enum value has its StrEnum twin (prefix dropped), one to one."""
    for value in proto_enum.values:
        assert table[value.number] == model_enum(value.name.removeprefix(prefix).lower())
    assert len(table) == len(proto_enum.values)
    assert set(table.values()) == set(model_enum)


def test_decision_kinds_map_every_decision_to_the_proto_value_of_the_same_name() -> None:
    """Each DecisionKind is sent as its proto twin; only UNSPECIFIED has no model value."""
    proto_enum = approval_service_pb2.DESCRIPTOR.enum_types_by_name["DecisionKind"]
    for kind in DecisionKind:
        assert proto_enum.values_by_number[DECISION_KINDS[kind]].name == (
            "DECISION_KIND_" + kind.name
        )
    assert len(DECISION_KINDS) == len(proto_enum.values) - 1


def _field_names(message_descriptor: descriptor.Descriptor) -> set[str]:
    return {field.name for field in message_descriptor.fields}


@pytest.mark.parametrize(
    ("message_descriptor", "model"),
    [
        (session_pb2.Session.DESCRIPTOR, Session),
        (tool_call_pb2.ToolCall.DESCRIPTOR, ToolCall),
        (tool_call_pb2.Requirement.DESCRIPTOR, Requirement),
        (tool_call_pb2.Decision.DESCRIPTOR, Decision),
        (tool_call_pb2.Denial.DESCRIPTOR, Denial),
        (tool_call_pb2.ToolResult.DESCRIPTOR, ToolResult),
        (approval_service_pb2.PendingApproval.DESCRIPTOR, PendingApproval),
        (approval_service_pb2.PendingQuestion.DESCRIPTOR, PendingQuestion),
        (approval_service_pb2.Resolved.DESCRIPTOR, Resolved),
        (approval_service_pb2.RuleCandidate.DESCRIPTOR, RuleCandidate),
        (approval_service_pb2.Rule.DESCRIPTOR, Rule),
    ],
)
def test_every_proto_field_has_a_model_field_of_the_same_name(
    message_descriptor: descriptor.Descriptor, model: type[BaseModel]
) -> None:
    """A field added to the proto fails here until the model (and conversion) carry it."""
    assert _field_names(message_descriptor) == set(model.model_fields)


def test_tool_spec_covers_every_tool_info_field() -> None:
    """ToolInfo's fields all reach ToolSpec (the schema decoded from its JSON text)."""
    renamed = {"input_schema_json": "input_schema"}
    names = {renamed.get(name, name) for name in _field_names(tool_service_pb2.ToolInfo.DESCRIPTOR)}
    assert names == set(ToolSpec.model_fields)


def _full_call() -> tool_call_pb2.ToolCall:
    call = call_message(tool_call_pb2.STATE_FAILED, "ex-42", tool_name="Bash")
    call.requirements.add(
        kind="command.execute", scope="", match="make test", description="run make test"
    )
    call.requirements.add(
        kind="filesystem.write",
        scope="tree:/work/space",
        match="tree:/work/space/out",
        description="write /work/space/out",
    )
    call.decision.decided_by = "alice"
    call.decision.rule_ids.extend(["rule-1", "rule-2"])
    call.decision.decide_time.FromDatetime(TIME)
    call.decision.reason = "approved once by alice"
    call.denial.kind = tool_call_pb2.DENIAL_KIND_APPROVAL_TIMEOUT
    call.denial.description = "No approver decided in time."
    call.result.is_error = True
    call.result.error_code = "timed_out"
    call.result.text = "partial output"
    call.result.json = '{"status":"exited"}'
    call.result.exit_code = 0
    call.result.omitted_bytes = 1234
    call.expire_time.FromDatetime(TIME)
    return call


def test_a_fully_populated_call_converts_every_field() -> None:
    """Each field of a ToolCall, nested messages included, reaches the model unchanged."""
    call = call_from_proto(_full_call())
    assert call == ToolCall(
        execution_id="ex-42",
        session_id="s-1",
        loop_id="loop-0",
        tool_name="Bash",
        state=State.FAILED,
        summary="Bash README.md",
        requirements=(
            Requirement(
                kind="command.execute", scope="", match="make test", description="run make test"
            ),
            Requirement(
                kind="filesystem.write",
                scope="tree:/work/space",
                match="tree:/work/space/out",
                description="write /work/space/out",
            ),
        ),
        digest="ab" * 32,
        decision=Decision(
            decided_by="alice",
            rule_ids=("rule-1", "rule-2"),
            decide_time=TIME,
            reason="approved once by alice",
        ),
        denial=Denial(kind=DenialKind.APPROVAL_TIMEOUT, description="No approver decided in time."),
        result=ToolResult(
            is_error=True,
            error_code="timed_out",
            text="partial output",
            json='{"status":"exited"}',
            exit_code=0,
            omitted_bytes=1234,
        ),
        create_time=TIME,
        update_time=TIME,
        expire_time=TIME,
    )


def test_a_converted_call_round_trips_through_json() -> None:
    """A call model serializes to JSON and reads back equal (for logs and agent memory)."""
    call = call_from_proto(_full_call())
    assert ToolCall.model_validate_json(call.model_dump_json()) == call


def test_unset_messages_and_timestamps_convert_to_none() -> None:
    """Absent decision, denial, result and timestamps are None, not empty defaults."""
    call = call_from_proto(tool_call_pb2.ToolCall(execution_id="ex-1"))
    assert call.decision is None
    assert call.denial is None
    assert call.result is None
    assert (call.create_time, call.update_time, call.expire_time) == (None, None, None)
    assert call.state is State.UNSPECIFIED


def test_exit_code_is_none_when_unset_and_zero_when_set_to_zero() -> None:
    """The optional exit code tells "no process ran" from "exited 0"."""
    assert result_from_proto(tool_call_pb2.ToolResult()).exit_code is None
    assert result_from_proto(tool_call_pb2.ToolResult(exit_code=0)).exit_code == 0
    assert result_from_proto(tool_call_pb2.ToolResult(exit_code=2)).exit_code == 2


def test_timestamps_convert_to_aware_utc_datetimes() -> None:
    """Timestamps keep their instant, with UTC as the time zone."""
    session = session_from_proto(session_message())
    assert session.create_time == TIME
    assert session.create_time is not None
    assert session.create_time.tzinfo is UTC
    assert session.create_time == datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


def test_a_session_converts_every_field() -> None:
    """Session fields, labels and sandbox mode reach the model."""
    message = session_message("s-7")
    message.sandbox_warning = "bubblewrap is not available; commands run unsandboxed"
    assert session_from_proto(message) == Session(
        session_id="s-7",
        workspace="/work/space",
        default_loop_id="loop-0",
        sandbox_mode=SandboxMode.BWRAP,
        create_time=TIME,
        labels={"agent": "test"},
        sandbox_warning="bubblewrap is not available; commands run unsandboxed",
    )


def test_enum_values_from_a_newer_server_read_as_unspecified() -> None:
    """An enum number this client does not know does not break reading the message."""
    call = tool_call_pb2.ToolCall(state=99)  # type: ignore[arg-type]  # an unknown wire value on purpose
    call.denial.kind = 77  # type: ignore[assignment]  # an unknown wire value on purpose
    model = call_from_proto(call)
    assert model.state is State.UNSPECIFIED
    assert model.denial is not None
    assert model.denial.kind is DenialKind.UNSPECIFIED
    session = session_pb2.Session(sandbox_mode=5)  # type: ignore[arg-type]  # an unknown wire value on purpose
    assert session_from_proto(session).sandbox_mode is SandboxMode.UNSPECIFIED


def test_tool_info_with_an_empty_schema_reads_as_an_empty_object() -> None:
    """A tool without a schema text gets `{}`, which every model API accepts."""
    spec = tool_spec_from_proto(tool_service_pb2.ToolInfo(name="TaskList"))
    assert spec.input_schema == {}
