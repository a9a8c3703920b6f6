"""Conversion of `callgate.v1` wire messages into client models; nothing else converts them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

from google.protobuf import timestamp_pb2
from pydantic import JsonValue

from callgate.client.errors import ProtocolError
from callgate.client.models import (
    Decision,
    Denial,
    DenialKind,
    Requirement,
    SandboxMode,
    Session,
    State,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from callgate.v1 import session_pb2, tool_call_pb2, tool_service_pb2

__all__ = [
    "DENIAL_KINDS",
    "SANDBOX_MODES",
    "STATES",
    "call_from_proto",
    "decision_from_proto",
    "denial_from_proto",
    "requirement_from_proto",
    "result_from_proto",
    "session_from_proto",
    "timestamp_from_proto",
    "tool_spec_from_proto",
]

# Complete tables, proto value -> model value; tests check that each covers its proto enum
# and its StrEnum one to one. A value missing here (from a newer server) reads as UNSPECIFIED.
STATES: Final[Mapping[int, State]] = {
    tool_call_pb2.STATE_UNSPECIFIED: State.UNSPECIFIED,
    tool_call_pb2.STATE_PREPARED: State.PREPARED,
    tool_call_pb2.STATE_AWAITING_APPROVAL: State.AWAITING_APPROVAL,
    tool_call_pb2.STATE_APPROVED: State.APPROVED,
    tool_call_pb2.STATE_DENIED: State.DENIED,
    tool_call_pb2.STATE_RUNNING: State.RUNNING,
    tool_call_pb2.STATE_SUCCEEDED: State.SUCCEEDED,
    tool_call_pb2.STATE_FAILED: State.FAILED,
    tool_call_pb2.STATE_CANCELLED: State.CANCELLED,
    tool_call_pb2.STATE_EXPIRED: State.EXPIRED,
}

DENIAL_KINDS: Final[Mapping[int, DenialKind]] = {
    tool_call_pb2.DENIAL_KIND_UNSPECIFIED: DenialKind.UNSPECIFIED,
    tool_call_pb2.DENIAL_KIND_OUT_OF_SCOPE: DenialKind.OUT_OF_SCOPE,
    tool_call_pb2.DENIAL_KIND_REFUSED: DenialKind.REFUSED,
    tool_call_pb2.DENIAL_KIND_APPROVAL_REQUIRED: DenialKind.APPROVAL_REQUIRED,
    tool_call_pb2.DENIAL_KIND_APPROVAL_TIMEOUT: DenialKind.APPROVAL_TIMEOUT,
    tool_call_pb2.DENIAL_KIND_APPROVER_DENIED: DenialKind.APPROVER_DENIED,
}

SANDBOX_MODES: Final[Mapping[int, SandboxMode]] = {
    session_pb2.SANDBOX_MODE_UNSPECIFIED: SandboxMode.UNSPECIFIED,
    session_pb2.SANDBOX_MODE_NONE: SandboxMode.NONE,
    session_pb2.SANDBOX_MODE_BWRAP: SandboxMode.BWRAP,
}


def timestamp_from_proto(timestamp: timestamp_pb2.Timestamp) -> datetime:
    """An aware UTC datetime."""
    return timestamp.ToDatetime(tzinfo=UTC)


def session_from_proto(message: session_pb2.Session) -> Session:
    """A Session model."""
    return Session(
        session_id=message.session_id,
        workspace=message.workspace,
        default_loop_id=message.default_loop_id,
        sandbox_mode=SANDBOX_MODES.get(message.sandbox_mode, SandboxMode.UNSPECIFIED),
        create_time=(
            timestamp_from_proto(message.create_time) if message.HasField("create_time") else None
        ),
        labels=dict(message.labels),
        sandbox_warning=message.sandbox_warning,
    )


def requirement_from_proto(message: tool_call_pb2.Requirement) -> Requirement:
    """A Requirement model."""
    return Requirement(
        kind=message.kind,
        scope=message.scope,
        match=message.match,
        description=message.description,
    )


def decision_from_proto(message: tool_call_pb2.Decision) -> Decision:
    """A Decision model."""
    return Decision(
        decided_by=message.decided_by,
        rule_ids=tuple(message.rule_ids),
        decide_time=(
            timestamp_from_proto(message.decide_time) if message.HasField("decide_time") else None
        ),
        reason=message.reason,
    )


def denial_from_proto(message: tool_call_pb2.Denial) -> Denial:
    """A Denial model."""
    return Denial(
        kind=DENIAL_KINDS.get(message.kind, DenialKind.UNSPECIFIED),
        description=message.description,
    )


def result_from_proto(message: tool_call_pb2.ToolResult) -> ToolResult:
    """A ToolResult model; `exit_code` is None unless the server set it."""
    return ToolResult(
        is_error=message.is_error,
        error_code=message.error_code,
        text=message.text,
        json=message.json,
        exit_code=message.exit_code if message.HasField("exit_code") else None,
        omitted_bytes=message.omitted_bytes,
    )


def call_from_proto(message: tool_call_pb2.ToolCall) -> ToolCall:
    """A ToolCall model; unset sub-messages and timestamps become None."""
    return ToolCall(
        execution_id=message.execution_id,
        session_id=message.session_id,
        loop_id=message.loop_id,
        tool_name=message.tool_name,
        state=STATES.get(message.state, State.UNSPECIFIED),
        summary=message.summary,
        requirements=tuple(requirement_from_proto(item) for item in message.requirements),
        digest=message.digest,
        decision=(decision_from_proto(message.decision) if message.HasField("decision") else None),
        denial=denial_from_proto(message.denial) if message.HasField("denial") else None,
        result=result_from_proto(message.result) if message.HasField("result") else None,
        create_time=(
            timestamp_from_proto(message.create_time) if message.HasField("create_time") else None
        ),
        update_time=(
            timestamp_from_proto(message.update_time) if message.HasField("update_time") else None
        ),
        expire_time=(
            timestamp_from_proto(message.expire_time) if message.HasField("expire_time") else None
        ),
    )


def tool_spec_from_proto(message: tool_service_pb2.ToolInfo) -> ToolSpec:
    """A ToolSpec model; raises ProtocolError when the schema is not a JSON object."""
    try:
        schema: JsonValue = json.loads(message.input_schema_json or "{}")
    except ValueError as exc:
        raise ProtocolError(
            f"The server sent an input schema for tool {message.name!r} that is not valid JSON."
        ) from exc
    if not isinstance(schema, dict):
        raise ProtocolError(
            f"The server sent an input schema for tool {message.name!r} that is not a JSON object."
        )
    return ToolSpec(
        name=message.name,
        description=message.description,
        input_schema=schema,
        requirement_kinds=tuple(message.requirement_kinds),
    )
