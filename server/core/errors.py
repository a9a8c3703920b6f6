"""Domain errors, each with a stable reason that the RPC layer maps to a gRPC status.

Hierarchy::

    CallgateError                  (reason, one-sentence message, metadata, field violations)
    ├── Unauthenticated            TOKEN_MISSING, TOKEN_INVALID
    ├── PermissionDenied           ROLE_REQUIRED
    ├── InvalidArgument            ARGUMENTS_INVALID, REQUEST_INVALID, WORKSPACE_INVALID
    ├── NotFound                   SESSION_/LOOP_/TOOL_/CALL_/RULE_NOT_FOUND
    ├── FailedPrecondition         CALL_NOT_APPROVED, CALL_DENIED, CALL_EXPIRED, ...
    ├── AlreadyExists              REQUEST_ID_CONFLICT
    ├── ResourceExhausted          SESSION_LIMIT, CALL_LIMIT, CONCURRENCY_LIMIT, ...
    ├── Unavailable                SHUTTING_DOWN
    └── InternalError              INTERNAL (details are logged, never sent)

Messages never contain secrets: no file contents, tokens, environment values or another
owner's details. Tests assert the class and reason, never the wording.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

ERROR_DOMAIN = "callgate.dev"


class ErrorCode(enum.StrEnum):
    """The status class of an error; the RPC layer maps each one to a gRPC code."""

    UNAUTHENTICATED = "unauthenticated"
    PERMISSION_DENIED = "permission_denied"
    INVALID_ARGUMENT = "invalid_argument"
    NOT_FOUND = "not_found"
    FAILED_PRECONDITION = "failed_precondition"
    ALREADY_EXISTS = "already_exists"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One bad field: `field` is a dotted path such as `arguments.path` or `session_id`."""

    field: str
    description: str


class CallgateError(Exception):
    """Root of every domain error."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(
        self,
        reason: str,
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
        violations: Sequence[FieldViolation] = (),
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})
        self.violations: tuple[FieldViolation, ...] = tuple(violations)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reason!r}, {self.message!r})"


class Unauthenticated(CallgateError):
    code = ErrorCode.UNAUTHENTICATED


class PermissionDenied(CallgateError):
    code = ErrorCode.PERMISSION_DENIED


class InvalidArgument(CallgateError):
    code = ErrorCode.INVALID_ARGUMENT


class NotFound(CallgateError):
    code = ErrorCode.NOT_FOUND


class FailedPrecondition(CallgateError):
    code = ErrorCode.FAILED_PRECONDITION


class AlreadyExists(CallgateError):
    code = ErrorCode.ALREADY_EXISTS


class ResourceExhausted(CallgateError):
    code = ErrorCode.RESOURCE_EXHAUSTED


class Unavailable(CallgateError):
    code = ErrorCode.UNAVAILABLE


class InternalError(CallgateError):
    code = ErrorCode.INTERNAL

    def __init__(self) -> None:
        super().__init__("INTERNAL", "The server failed unexpectedly; the details are in its log.")


_MAX_FIELD_CHARS = 256


def _printable_field(field: str) -> str:
    """The field path as it may travel in a status: keys come from the caller's JSON, so a NUL,
    a control character or a lone surrogate (which cannot be encoded in a gRPC status at all)
    is escaped, and a huge key is cut so the status fits in trailing metadata."""
    text = "".join(
        ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in field[: _MAX_FIELD_CHARS + 1]
    )
    return text[:_MAX_FIELD_CHARS] + "..." if len(text) > _MAX_FIELD_CHARS else text


def arguments_invalid(field: str, description: str) -> InvalidArgument:
    """A tool-argument error naming the offending field (`arguments.<path>`)."""
    path = f"arguments.{_printable_field(field)}" if field else "arguments"
    return InvalidArgument(
        "ARGUMENTS_INVALID",
        f"Invalid tool arguments: {path}: {description}",
        violations=[FieldViolation(path, description)],
    )


def request_invalid(field: str, description: str) -> InvalidArgument:
    """An RPC-field error naming the offending request field."""
    return InvalidArgument(
        "REQUEST_INVALID",
        f"Invalid request: {field}: {description}",
        violations=[FieldViolation(field, description)],
    )
