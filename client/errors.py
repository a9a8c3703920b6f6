"""Typed errors of the callgate client, chosen by the `ErrorInfo.reason` the server sends.

Hierarchy::

    CallgateClientError              code, reason, message, metadata, violations
    ├── AuthenticationError          UNAUTHENTICATED: TOKEN_MISSING, TOKEN_INVALID
    ├── PermissionDeniedError        PERMISSION_DENIED: ROLE_REQUIRED
    ├── InvalidArgumentsError        INVALID_ARGUMENT: ARGUMENTS_INVALID (the tool's arguments)
    ├── InvalidRequestError          INVALID_ARGUMENT: REQUEST_INVALID, WORKSPACE_INVALID
    ├── NotFoundError                NOT_FOUND: LOOP_NOT_FOUND
    │   ├── SessionNotFoundError     SESSION_NOT_FOUND
    │   ├── ToolNotFoundError        TOOL_NOT_FOUND
    │   ├── CallNotFoundError        CALL_NOT_FOUND
    │   └── RuleNotFoundError        RULE_NOT_FOUND
    ├── CallStateError               FAILED_PRECONDITION: CALL_NOT_APPROVED, CALL_DENIED,
    │                                CALL_EXPIRED, CALL_ALREADY_INVOKED, CALL_STATE_INVALID,
    │                                DIGEST_MISMATCH, NO_APPROVER
    ├── RuleReadOnlyError            FAILED_PRECONDITION: RULE_READ_ONLY (a config rule)
    ├── ApproveOnceOnlyError         FAILED_PRECONDITION: APPROVE_ONCE_ONLY (a human-only call)
    ├── RequestIdConflictError       ALREADY_EXISTS: REQUEST_ID_CONFLICT
    ├── LimitExceededError           RESOURCE_EXHAUSTED: SESSION_LIMIT, CALL_LIMIT,
    │                                CONCURRENCY_LIMIT, PROCESS_LIMIT, LOOP_LIMIT
    ├── ServerUnavailableError       UNAVAILABLE: SHUTTING_DOWN, or no server reached
    ├── DeadlineExceededError        DEADLINE_EXCEEDED: the RPC ran past its deadline
    ├── InternalServerError          INTERNAL: INTERNAL (details stay in the server's log)
    ├── CallDeniedError              client-side: `run` got a DENIED call (has `.call`)
    ├── ApprovalTimeoutError         client-side: `run` stopped waiting for an approver
    └── ProtocolError                client-side: the server sent something unreadable

A gRPC error is classified by its `ErrorInfo.reason` when the ErrorInfo comes from the
callgate domain, otherwise by its status code; any other code is the root class. The
client-side errors have `code = None`. Callers branch on the class or on `reason`, never
on the message, which is one sentence for humans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple

import grpc
from google.rpc import error_details_pb2, status_pb2

from callgate.client.models import Denial, DenialKind, ToolCall

__all__ = [
    "ERROR_DOMAIN",
    "ApprovalTimeoutError",
    "ApproveOnceOnlyError",
    "AuthenticationError",
    "CallDeniedError",
    "CallNotFoundError",
    "CallStateError",
    "CallgateClientError",
    "DeadlineExceededError",
    "FieldViolation",
    "InternalServerError",
    "InvalidArgumentsError",
    "InvalidRequestError",
    "LimitExceededError",
    "NotFoundError",
    "PermissionDeniedError",
    "ProtocolError",
    "RequestIdConflictError",
    "RuleNotFoundError",
    "RuleReadOnlyError",
    "ServerUnavailableError",
    "SessionNotFoundError",
    "ToolNotFoundError",
    "error_from_rpc",
    "error_from_status",
]

ERROR_DOMAIN: Final = "callgate.dev"
_STATUS_DETAILS_KEY: Final = "grpc-status-details-bin"
_CODES: Final = {code.value[0]: code for code in grpc.StatusCode}


class FieldViolation(NamedTuple):
    """One bad request field from `google.rpc.BadRequest`, e.g. `arguments.path`."""

    field: str
    description: str


class CallgateClientError(Exception):
    """Root of every error the client raises."""

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
        violations: Sequence[FieldViolation] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})
        self.violations: list[FieldViolation] = list(violations)

    def __repr__(self) -> str:
        code = self.code.name if self.code is not None else None
        return (
            f"{type(self).__name__}(code={code}, reason={self.reason!r}, message={self.message!r})"
        )


class AuthenticationError(CallgateClientError):
    """The token is missing or not valid."""


class PermissionDeniedError(CallgateClientError):
    """The token's principal lacks the role the RPC needs."""


class InvalidArgumentsError(CallgateClientError):
    """The tool's arguments failed validation at Prepare; `violations` names the fields."""


class InvalidRequestError(CallgateClientError):
    """A request field (not the tool's arguments) is not valid."""


class NotFoundError(CallgateClientError):
    """The resource does not exist or belongs to someone else."""


class SessionNotFoundError(NotFoundError):
    """The session does not exist, was closed, or belongs to someone else."""


class ToolNotFoundError(NotFoundError):
    """The session offers no tool of that name."""


class CallNotFoundError(NotFoundError):
    """The execution ID names no call of this session."""


class RuleNotFoundError(NotFoundError):
    """The rule ID names no rule (never existed, or already deleted)."""


class CallStateError(CallgateClientError):
    """The call is not in a state that allows the operation (e.g. invoked twice, expired)."""


class RuleReadOnlyError(CallgateClientError):
    """The rule comes from the server's configuration and cannot be deleted over the API."""


class ApproveOnceOnlyError(CallgateClientError):
    """The call has a human-only requirement (a write to a file that makes programs run
    code): decide it with APPROVE_ONCE or DENY; no session or always rule may cover it."""


class RequestIdConflictError(CallgateClientError):
    """The request ID was used before with a different payload."""


class LimitExceededError(CallgateClientError):
    """A server limit (sessions, calls, concurrency, processes, loops) was reached."""


class ServerUnavailableError(CallgateClientError):
    """The server is shutting down or could not be reached."""


class DeadlineExceededError(CallgateClientError):
    """The RPC did not finish before its deadline."""


class InternalServerError(CallgateClientError):
    """The server failed unexpectedly; its log has the details."""


class CallDeniedError(CallgateClientError):
    """The gate or an approver denied the call; `denial` says why (raised by `run`)."""

    def __init__(self, call: ToolCall) -> None:
        self.call = call
        self.denial = call.denial or Denial(kind=DenialKind.UNSPECIFIED, description="")
        description = self.denial.description or "no reason was given"
        super().__init__(
            f"The call to {call.tool_name} was denied ({self.denial.kind}): {description}",
            reason="CALL_DENIED",
            metadata={"execution_id": call.execution_id, "denial_kind": str(self.denial.kind)},
        )

    @property
    def kind(self) -> DenialKind:
        """The denial kind."""
        return self.denial.kind


class ApprovalTimeoutError(CallgateClientError):
    """No approver decided within the time `run` was told to wait; the call was cancelled."""

    def __init__(self, call: ToolCall, waited: float) -> None:
        self.call = call
        super().__init__(
            f"No approver decided the call to {call.tool_name} within {waited:g} s; "
            "it was cancelled.",
            reason="APPROVAL_PENDING",
            metadata={"execution_id": call.execution_id},
        )


class ProtocolError(CallgateClientError):
    """The server answered with something this client cannot read (a server bug or skew)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="RESPONSE_INVALID")


_BY_REASON: Final[Mapping[str, type[CallgateClientError]]] = {
    "TOKEN_MISSING": AuthenticationError,
    "TOKEN_INVALID": AuthenticationError,
    "ROLE_REQUIRED": PermissionDeniedError,
    "ARGUMENTS_INVALID": InvalidArgumentsError,
    "REQUEST_INVALID": InvalidRequestError,
    "WORKSPACE_INVALID": InvalidRequestError,
    "SESSION_NOT_FOUND": SessionNotFoundError,
    "LOOP_NOT_FOUND": NotFoundError,
    "TOOL_NOT_FOUND": ToolNotFoundError,
    "CALL_NOT_FOUND": CallNotFoundError,
    "RULE_NOT_FOUND": RuleNotFoundError,
    "RULE_READ_ONLY": RuleReadOnlyError,
    "APPROVE_ONCE_ONLY": ApproveOnceOnlyError,
    "CALL_NOT_APPROVED": CallStateError,
    "CALL_DENIED": CallStateError,
    "CALL_EXPIRED": CallStateError,
    "CALL_ALREADY_INVOKED": CallStateError,
    "CALL_STATE_INVALID": CallStateError,
    "DIGEST_MISMATCH": CallStateError,
    "NO_APPROVER": CallStateError,
    "REQUEST_ID_CONFLICT": RequestIdConflictError,
    "SESSION_LIMIT": LimitExceededError,
    "CALL_LIMIT": LimitExceededError,
    "CONCURRENCY_LIMIT": LimitExceededError,
    "PROCESS_LIMIT": LimitExceededError,
    "LOOP_LIMIT": LimitExceededError,
    "SHUTTING_DOWN": ServerUnavailableError,
    "INTERNAL": InternalServerError,
}

_BY_CODE: Final[Mapping[grpc.StatusCode, type[CallgateClientError]]] = {
    grpc.StatusCode.UNAUTHENTICATED: AuthenticationError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequestError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: CallStateError,
    grpc.StatusCode.ALREADY_EXISTS: RequestIdConflictError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: LimitExceededError,
    grpc.StatusCode.UNAVAILABLE: ServerUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.INTERNAL: InternalServerError,
}


def _rich_status(error: grpc.aio.AioRpcError) -> status_pb2.Status | None:
    """The `google.rpc.Status` carried in the trailing metadata, if any and readable."""
    trailing = error.trailing_metadata()
    if not trailing:
        return None
    for key, value in trailing:
        if key == _STATUS_DETAILS_KEY and isinstance(value, bytes):
            status = status_pb2.Status()
            try:
                status.ParseFromString(value)
            except ValueError:
                # A garbled detail must not hide the status code: classify by code instead.
                return None
            return status
    return None


def error_from_rpc(error: grpc.aio.AioRpcError) -> CallgateClientError:
    """The typed client error for a failed RPC, decoded from its rich status details."""
    return _typed_error(error.code(), error.details() or "", _rich_status(error))


def error_from_status(status: status_pb2.Status) -> CallgateClientError:
    """The typed client error for a `google.rpc.Status` sent as a message: an Exchange
    operation's error, which the server builds exactly like the status of a failed RPC."""
    return _typed_error(_CODES.get(status.code, grpc.StatusCode.UNKNOWN), "", status)


def _typed_error(
    code: grpc.StatusCode, message: str, status: status_pb2.Status | None
) -> CallgateClientError:
    reason = ""
    domain = ""
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    if status is not None:
        message = message or status.message
        have_info = False
        for detail in status.details:
            if not have_info and detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason, domain, metadata = info.reason, info.domain, dict(info.metadata)
                have_info = True
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad_request = error_details_pb2.BadRequest()
                detail.Unpack(bad_request)
                violations.extend(
                    FieldViolation(item.field, item.description)
                    for item in bad_request.field_violations
                )
    cls = (_BY_REASON.get(reason) if domain == ERROR_DOMAIN else None) or _BY_CODE.get(
        code, CallgateClientError
    )
    return cls(message, code=code, reason=reason, metadata=metadata, violations=violations)
