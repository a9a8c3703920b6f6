"""Async Python client of callgate: sessions and the Prepare -> Approve -> Invoke lifecycle.

target = f"unix://{default_state_dir() / 'callgate.sock'}"
async with CallgateClient(target, token=default_token()) as client:
    async with client.open_session() as session:
        tools = [spec.to_anthropic() for spec in await session.tools()]
        result = await session.run("ReadFile", {"path": "README.md"})

`callgate.client.providers` turns a model's tool calls (OpenAI or Anthropic shape) into runs
and the results back into that provider's tool results.

An approver connects with its own token and uses `client.approvals` (see `Approvals`) and
`client.audit` (the audit journal, see `Audit`).
"""

from callgate.client.approvals import ApprovalItem, Approvals
from callgate.client.audit import Audit, EventPage
from callgate.client.connection import (
    MAX_MESSAGE_BYTES,
    CallgateClient,
    OpeningSession,
    default_state_dir,
    default_token,
)
from callgate.client.errors import (
    ERROR_DOMAIN,
    ApprovalTimeoutError,
    ApproveOnceOnlyError,
    AuthenticationError,
    CallDeniedError,
    CallgateClientError,
    CallNotFoundError,
    CallStateError,
    DeadlineExceededError,
    FieldViolation,
    InternalServerError,
    InvalidArgumentsError,
    InvalidRequestError,
    LimitExceededError,
    NotFoundError,
    PermissionDeniedError,
    ProtocolError,
    RequestIdConflictError,
    RuleNotFoundError,
    RuleReadOnlyError,
    ServerUnavailableError,
    SessionNotFoundError,
    ToolNotFoundError,
)
from callgate.client.models import (
    AuditEvent,
    Decision,
    DecisionKind,
    Denial,
    DenialKind,
    InvokeResult,
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
from callgate.client.providers import (
    ToolOutcome,
    anthropic_tools,
    openai_tools,
    run_anthropic_tool_use,
    run_openai_tool_call,
    run_tool_call,
)
from callgate.client.session import (
    MAX_APPROVE_WAIT,
    ClientSession,
    encode_arguments,
    new_batch_id,
)

__all__ = [
    "ERROR_DOMAIN",
    "MAX_APPROVE_WAIT",
    "MAX_MESSAGE_BYTES",
    "ApprovalItem",
    "ApprovalTimeoutError",
    "Approvals",
    "ApproveOnceOnlyError",
    "Audit",
    "AuditEvent",
    "AuthenticationError",
    "CallDeniedError",
    "CallNotFoundError",
    "CallStateError",
    "CallgateClient",
    "CallgateClientError",
    "ClientSession",
    "DeadlineExceededError",
    "Decision",
    "DecisionKind",
    "Denial",
    "DenialKind",
    "EventPage",
    "FieldViolation",
    "InternalServerError",
    "InvalidArgumentsError",
    "InvalidRequestError",
    "InvokeResult",
    "LimitExceededError",
    "NotFoundError",
    "OpeningSession",
    "PendingApproval",
    "PendingQuestion",
    "PermissionDeniedError",
    "Preview",
    "ProtocolError",
    "RequestIdConflictError",
    "Requirement",
    "Resolved",
    "Rule",
    "RuleCandidate",
    "RuleEffect",
    "RuleNotFoundError",
    "RuleReadOnlyError",
    "SandboxMode",
    "ServerUnavailableError",
    "Session",
    "SessionNotFoundError",
    "State",
    "ToolAnnotations",
    "ToolCall",
    "ToolNotFoundError",
    "ToolOutcome",
    "ToolResult",
    "ToolSpec",
    "anthropic_tools",
    "default_state_dir",
    "default_token",
    "encode_arguments",
    "new_batch_id",
    "openai_tools",
    "run_anthropic_tool_use",
    "run_openai_tool_call",
    "run_tool_call",
]
