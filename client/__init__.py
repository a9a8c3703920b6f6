"""Async Python client of callgate: sessions and the Prepare -> Approve -> Invoke lifecycle.

async with CallgateClient("unix:///run/callgate.sock", token=default_token(state_dir)) as client:
    async with client.open_session() as session:
        tools = [spec.to_anthropic() for spec in await session.tools()]
        result = await session.run("ReadFile", {"path": "README.md"})
"""

from callgate.client.connection import (
    MAX_MESSAGE_BYTES,
    CallgateClient,
    OpeningSession,
    default_token,
)
from callgate.client.errors import (
    ERROR_DOMAIN,
    ApprovalTimeoutError,
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
    ServerUnavailableError,
    SessionNotFoundError,
    ToolNotFoundError,
)
from callgate.client.models import (
    Decision,
    Denial,
    DenialKind,
    InvokeResult,
    Requirement,
    SandboxMode,
    Session,
    State,
    ToolCall,
    ToolResult,
    ToolSpec,
)
from callgate.client.session import MAX_APPROVE_WAIT, ClientSession, encode_arguments

__all__ = [
    "ERROR_DOMAIN",
    "MAX_APPROVE_WAIT",
    "MAX_MESSAGE_BYTES",
    "ApprovalTimeoutError",
    "AuthenticationError",
    "CallDeniedError",
    "CallNotFoundError",
    "CallStateError",
    "CallgateClient",
    "CallgateClientError",
    "ClientSession",
    "DeadlineExceededError",
    "Decision",
    "Denial",
    "DenialKind",
    "FieldViolation",
    "InternalServerError",
    "InvalidArgumentsError",
    "InvalidRequestError",
    "InvokeResult",
    "LimitExceededError",
    "NotFoundError",
    "OpeningSession",
    "PermissionDeniedError",
    "ProtocolError",
    "RequestIdConflictError",
    "Requirement",
    "SandboxMode",
    "ServerUnavailableError",
    "Session",
    "SessionNotFoundError",
    "State",
    "ToolCall",
    "ToolNotFoundError",
    "ToolResult",
    "ToolSpec",
    "default_token",
    "encode_arguments",
]
