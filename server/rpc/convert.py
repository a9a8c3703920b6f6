"""Domain snapshots to callgate.v1 messages."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import assert_never

from google.protobuf import json_format, timestamp_pb2

from callgate.server.core.calls import CallSnapshot
from callgate.server.core.errors import arguments_invalid
from callgate.server.core.lifecycle import SessionSnapshot
from callgate.server.core.models import (
    Decision,
    Denial,
    DenialKind,
    Requirement,
    SandboxMode,
    State,
    ToolInfo,
    ToolResult,
)
from callgate.v1 import session_pb2, tool_call_pb2, tool_service_pb2


def state_to_proto(state: State) -> tool_call_pb2.State.ValueType:
    match state:
        case State.PREPARED:
            return tool_call_pb2.STATE_PREPARED
        case State.AWAITING_APPROVAL:
            return tool_call_pb2.STATE_AWAITING_APPROVAL
        case State.APPROVED:
            return tool_call_pb2.STATE_APPROVED
        case State.DENIED:
            return tool_call_pb2.STATE_DENIED
        case State.RUNNING:
            return tool_call_pb2.STATE_RUNNING
        case State.SUCCEEDED:
            return tool_call_pb2.STATE_SUCCEEDED
        case State.FAILED:
            return tool_call_pb2.STATE_FAILED
        case State.CANCELLED:
            return tool_call_pb2.STATE_CANCELLED
        case State.EXPIRED:
            return tool_call_pb2.STATE_EXPIRED
        case _:
            assert_never(state)


def denial_kind_to_proto(kind: DenialKind) -> tool_call_pb2.DenialKind.ValueType:
    match kind:
        case DenialKind.OUT_OF_SCOPE:
            return tool_call_pb2.DENIAL_KIND_OUT_OF_SCOPE
        case DenialKind.REFUSED:
            return tool_call_pb2.DENIAL_KIND_REFUSED
        case DenialKind.APPROVAL_REQUIRED:
            return tool_call_pb2.DENIAL_KIND_APPROVAL_REQUIRED
        case DenialKind.APPROVAL_TIMEOUT:
            return tool_call_pb2.DENIAL_KIND_APPROVAL_TIMEOUT
        case DenialKind.APPROVER_DENIED:
            return tool_call_pb2.DENIAL_KIND_APPROVER_DENIED
        case _:
            assert_never(kind)


def sandbox_mode_to_proto(mode: SandboxMode) -> session_pb2.SandboxMode.ValueType:
    match mode:
        case SandboxMode.NONE:
            return session_pb2.SANDBOX_MODE_NONE
        case SandboxMode.BWRAP:
            return session_pb2.SANDBOX_MODE_BWRAP
        case _:
            assert_never(mode)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    # Twice as fast as Timestamp.FromDatetime, and every call message carries several.
    delta = value - _EPOCH
    return timestamp_pb2.Timestamp(
        seconds=delta.days * 86_400 + delta.seconds, nanos=delta.microseconds * 1000
    )


def result_to_proto(result: ToolResult) -> tool_call_pb2.ToolResult:
    message = tool_call_pb2.ToolResult(
        is_error=result.is_error,
        error_code=result.error_code,
        text=result.text,
        json=result.json,
        omitted_bytes=result.omitted_bytes,
    )
    if result.exit_code is not None:
        message.exit_code = result.exit_code
    return message


def _decision(decision: Decision) -> tool_call_pb2.Decision:
    return tool_call_pb2.Decision(
        decided_by=decision.decided_by,
        rule_ids=decision.rule_ids,
        decide_time=timestamp(decision.decide_time),
        reason=decision.reason,
        read_only=decision.read_only,
    )


def _denial(denial: Denial) -> tool_call_pb2.Denial:
    return tool_call_pb2.Denial(
        kind=denial_kind_to_proto(denial.kind), description=denial.description
    )


def requirement_to_proto(requirement: Requirement) -> tool_call_pb2.Requirement:
    return tool_call_pb2.Requirement(
        kind=requirement.kind,
        scope=requirement.scope,
        match=requirement.match,
        description=requirement.description,
        human_only=requirement.human_only,
    )


def call_to_proto(call: CallSnapshot) -> tool_call_pb2.ToolCall:
    message = tool_call_pb2.ToolCall(
        execution_id=call.execution_id,
        session_id=call.session_id,
        loop_id=call.loop_id,
        tool_name=call.tool_name,
        state=state_to_proto(call.state),
        summary=call.summary,
        requirements=[requirement_to_proto(r) for r in call.requirements],
        digest=call.digest,
        create_time=timestamp(call.create_time),
        update_time=timestamp(call.update_time),
        batch_id=call.batch_id,
    )
    if call.preview is not None:
        message.preview.CopyFrom(
            tool_call_pb2.Preview(
                kind=call.preview.kind,
                text=call.preview.text,
                omitted_bytes=call.preview.omitted_bytes,
            )
        )
    if call.decision is not None:
        message.decision.CopyFrom(_decision(call.decision))
    if call.denial is not None:
        message.denial.CopyFrom(_denial(call.denial))
    if call.result is not None:
        message.result.CopyFrom(result_to_proto(call.result))
    if call.expire_time is not None:
        message.expire_time.CopyFrom(timestamp(call.expire_time))
    return message


def session_to_proto(session: SessionSnapshot) -> session_pb2.Session:
    return session_pb2.Session(
        session_id=session.session_id,
        workspace=session.workspace,
        default_loop_id=session.default_loop_id,
        sandbox_mode=sandbox_mode_to_proto(session.sandbox_mode),
        sandbox_warning=session.sandbox_warning,
        sandbox_limits=session.sandbox_limits,
        create_time=timestamp(session.create_time),
        labels=dict(session.labels),
        name=session.name,
        last_used_time=timestamp(session.last_used_time) if session.last_used_time else None,
        dry_run=session.dry_run,
    )


def tool_info_to_proto(info: ToolInfo) -> tool_service_pb2.ToolInfo:
    return tool_service_pb2.ToolInfo(
        name=info.name,
        description=info.description,
        input_schema_json=info.input_schema_json,
        requirement_kinds=info.requirement_kinds,
        annotations=tool_service_pb2.ToolAnnotations(
            read_only=info.annotations.read_only,
            destructive=info.annotations.destructive,
            idempotent=info.annotations.idempotent,
            open_world=info.annotations.open_world,
        ),
    )


# A Struct holds doubles: integers beyond this cannot be told apart from their neighbours.
EXACT_INTEGER_LIMIT = 2**53


def check_struct_arguments(request: tool_service_pb2.PrepareRequest, max_bytes: int) -> None:
    """The cheap checks of the Struct form, before any conversion: one form only, and no
    larger than the arguments may be (its encoded size, which is about its JSON's)."""
    if request.arguments_json:
        raise arguments_invalid(
            "", "give the arguments either as arguments_json or as arguments, not both"
        )
    if request.arguments.ByteSize() > max_bytes:
        raise arguments_invalid("", f"the arguments are larger than {max_bytes} bytes")


def struct_arguments_text(request: tool_service_pb2.PrepareRequest) -> str:
    """The `arguments` Struct as one JSON object text (integral numbers as integers);
    ARGUMENTS_INVALID for an integral number a double cannot hold exactly, or a number that
    is not finite. Costs time in proportion to its size: run it off the event loop."""
    try:
        decoded = json_format.MessageToDict(request.arguments)
    except ValueError:
        raise arguments_invalid("", "a number is not finite (NaN or infinity)") from None
    return json.dumps(_exact(decoded, ""), ensure_ascii=False, separators=(",", ":"))


def _exact(value: object, path: str) -> object:
    if isinstance(value, float) and value.is_integer():
        if abs(value) > EXACT_INTEGER_LIMIT:
            raise arguments_invalid(
                path,
                "an integer beyond 2^53 cannot be exact in a Struct; send the arguments as "
                "arguments_json",
            )
        return int(value)
    if isinstance(value, dict):
        return {k: _exact(v, f"{path}.{k}" if path else k) for k, v in value.items()}
    if isinstance(value, list):
        return [_exact(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value
