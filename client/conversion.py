"""Conversion of `callgate.v1` wire messages into client models; nothing else converts them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final, assert_never

from google.protobuf import timestamp_pb2
from pydantic import JsonValue

from callgate.client.errors import ProtocolError
from callgate.client.models import (
    AuditEvent,
    ChangeSet,
    Decision,
    DecisionKind,
    Denial,
    DenialKind,
    FileChange,
    PendingApproval,
    PendingQuestion,
    Preview,
    Requirement,
    Resolved,
    Rule,
    RuleCandidate,
    RuleEffect,
    SandboxMode,
    Session,
    State,
    ToolAnnotations,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from callgate.v1 import (
    approval_service_pb2,
    audit_service_pb2,
    session_pb2,
    tool_call_pb2,
    tool_service_pb2,
)

__all__ = [
    "DECISION_KINDS",
    "DENIAL_KINDS",
    "RULE_EFFECTS",
    "SANDBOX_MODES",
    "STATES",
    "approval_item_from_proto",
    "call_from_proto",
    "change_set_from_proto",
    "decision_from_proto",
    "denial_from_proto",
    "pending_approval_from_proto",
    "pending_question_from_proto",
    "requirement_from_proto",
    "result_from_proto",
    "rule_effect_to_proto",
    "rule_from_proto",
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

RULE_EFFECTS: Final[Mapping[int, RuleEffect]] = {
    approval_service_pb2.RULE_EFFECT_UNSPECIFIED: RuleEffect.UNSPECIFIED,
    approval_service_pb2.RULE_EFFECT_ALLOW: RuleEffect.ALLOW,
    approval_service_pb2.RULE_EFFECT_DENY: RuleEffect.DENY,
}

# The other direction: what the client sends. DecisionKind has no UNSPECIFIED member, since
# no caller means to send one.
DECISION_KINDS: Final[Mapping[DecisionKind, approval_service_pb2.DecisionKind.ValueType]] = {
    DecisionKind.APPROVE_ONCE: approval_service_pb2.DECISION_KIND_APPROVE_ONCE,
    DecisionKind.APPROVE_FOR_SESSION: approval_service_pb2.DECISION_KIND_APPROVE_FOR_SESSION,
    DecisionKind.APPROVE_ALWAYS: approval_service_pb2.DECISION_KIND_APPROVE_ALWAYS,
    DecisionKind.DENY: approval_service_pb2.DECISION_KIND_DENY,
    DecisionKind.APPLY_CHANGES: approval_service_pb2.DECISION_KIND_APPLY_CHANGES,
}

ApprovalItem = PendingApproval | PendingQuestion | Resolved
"""One item of the WatchApprovals stream."""


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
        sandbox_limits=message.sandbox_limits,
        name=message.name,
        last_used_time=(
            timestamp_from_proto(message.last_used_time)
            if message.HasField("last_used_time")
            else None
        ),
        dry_run=message.dry_run,
    )


def requirement_from_proto(message: tool_call_pb2.Requirement) -> Requirement:
    """A Requirement model."""
    return Requirement(
        kind=message.kind,
        scope=message.scope,
        match=message.match,
        description=message.description,
        human_only=message.human_only,
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
        read_only=message.read_only,
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
        batch_id=message.batch_id,
        preview=(
            Preview(
                kind=message.preview.kind,
                text=message.preview.text,
                omitted_bytes=message.preview.omitted_bytes,
            )
            if message.HasField("preview")
            else None
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
        annotations=ToolAnnotations(
            read_only=message.annotations.read_only,
            destructive=message.annotations.destructive,
            idempotent=message.annotations.idempotent,
            open_world=message.annotations.open_world,
        ),
    )


def _optional_time(message: timestamp_pb2.Timestamp, present: bool) -> datetime | None:
    return timestamp_from_proto(message) if present else None


def rule_candidate_from_proto(message: approval_service_pb2.RuleCandidate) -> RuleCandidate:
    """A RuleCandidate model."""
    return RuleCandidate(kind=message.kind, match=message.match, description=message.description)


def pending_approval_from_proto(message: approval_service_pb2.PendingApproval) -> PendingApproval:
    """A PendingApproval model; raises ProtocolError when the call is missing."""
    if not message.HasField("call"):
        raise ProtocolError("The server sent a pending approval without its call.")
    return PendingApproval(
        call=call_from_proto(message.call),
        candidates=tuple(rule_candidate_from_proto(item) for item in message.candidates),
        unmet=tuple(requirement_from_proto(item) for item in message.unmet),
        command=message.command,
        working_directory=message.working_directory,
        requested_by=message.requested_by,
        workspace=message.workspace,
        deadline=_optional_time(message.deadline, message.HasField("deadline")),
        dry_run_refusal=message.dry_run_refusal,
        change_set=change_set_from_proto(message.change_set)
        if message.HasField("change_set")
        else None,
    )


def change_set_from_proto(message: approval_service_pb2.ChangeSet) -> ChangeSet:
    """A ChangeSet model."""
    return ChangeSet(
        changes=tuple(
            FileChange(path=c.path, kind=c.kind, detail=c.detail, mode=c.mode, size=c.size)
            for c in message.changes
        ),
        omitted_changes=message.omitted_changes,
        exit_code=message.exit_code if message.HasField("exit_code") else None,
        output_head=message.output_head,
        output_tail=message.output_tail,
        omitted_output_bytes=message.omitted_output_bytes,
        unrepresentable=message.unrepresentable,
        failure=message.failure,
        effect_digest=message.effect_digest,
        requested_by=message.requested_by,
        time=_optional_time(message.time, message.HasField("time")),
    )


def pending_question_from_proto(message: approval_service_pb2.PendingQuestion) -> PendingQuestion:
    """A PendingQuestion model."""
    return PendingQuestion(
        execution_id=message.execution_id,
        session_id=message.session_id,
        question=message.question,
        choices=tuple(message.choices),
        requested_by=message.requested_by,
        deadline=_optional_time(message.deadline, message.HasField("deadline")),
    )


def approval_item_from_proto(
    message: approval_service_pb2.WatchApprovalsResponse,
) -> ApprovalItem | None:
    """The item a WatchApprovals message carries; None for an item kind this client does
    not know (a newer server), which callers skip."""
    match message.WhichOneof("item"):
        case "approval":
            return pending_approval_from_proto(message.approval)
        case "question":
            return pending_question_from_proto(message.question)
        case "resolved":
            return Resolved(
                execution_id=message.resolved.execution_id,
                state=STATES.get(message.resolved.state, State.UNSPECIFIED),
                decided_by=message.resolved.decided_by,
                reason=message.resolved.reason,
            )
        case _:
            return None


def rule_from_proto(message: approval_service_pb2.Rule) -> Rule:
    """A Rule model."""
    return Rule(
        rule_id=message.rule_id,
        effect=RULE_EFFECTS.get(message.effect, RuleEffect.UNSPECIFIED),
        kind=message.kind,
        match=message.match,
        scope=message.scope,
        origin=message.origin,
        create_time=_optional_time(message.create_time, message.HasField("create_time")),
    )


def rule_effect_to_proto(effect: RuleEffect) -> approval_service_pb2.RuleEffect.ValueType:
    """The proto value of a rule effect; UNSPECIFIED is refused (the server would too)."""
    match effect:
        case RuleEffect.ALLOW:
            return approval_service_pb2.RULE_EFFECT_ALLOW
        case RuleEffect.DENY:
            return approval_service_pb2.RULE_EFFECT_DENY
        case RuleEffect.UNSPECIFIED:
            raise ValueError("A rule's effect must be allow or deny.")
        case _:
            assert_never(effect)


def audit_event_from_proto(message: audit_service_pb2.AuditEvent) -> AuditEvent:
    try:
        data = json.loads(message.data_json) if message.data_json else {}
    except ValueError:
        raise ProtocolError("the server sent an audit event whose data is not JSON") from None
    if not isinstance(data, dict):
        raise ProtocolError("the server sent an audit event whose data is not a JSON object")
    return AuditEvent(
        seq=message.seq,
        run_id=message.run_id,
        time=timestamp_from_proto(message.time),
        kind=message.kind,
        session_id=message.session_id,
        execution_id=message.execution_id,
        principal=message.principal,
        data=data,
    )
