"""Domain errors to rich gRPC statuses: one ErrorInfo (domain callgate.dev) plus BadRequest."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from callgate.server.core.errors import ERROR_DOMAIN, CallgateError, ErrorCode

GRPC_CODES: dict[ErrorCode, grpc.StatusCode] = {
    ErrorCode.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorCode.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorCode.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
}


def to_status(error: CallgateError) -> grpc.Status:
    """Build the grpc.Status (with details in trailing metadata) for a domain error."""
    result: grpc.Status = rpc_status.to_status(status_proto(error))
    return result


def status_proto(error: CallgateError) -> status_pb2.Status:
    """Build the google.rpc.Status for a domain error: its code, message, one ErrorInfo and,
    for field errors, a BadRequest. Unary RPCs end with it; Exchange answers with it."""
    code: grpc.StatusCode = GRPC_CODES[error.code]
    info = error_details_pb2.ErrorInfo(
        reason=error.reason, domain=ERROR_DOMAIN, metadata=error.metadata
    )
    details = [_pack(info)]
    if error.violations:
        bad_request = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=v.field, description=v.description
                )
                for v in error.violations
            ]
        )
        details.append(_pack(bad_request))
    return status_pb2.Status(code=code.value[0], message=error.message, details=details)


def _pack(message: error_details_pb2.ErrorInfo | error_details_pb2.BadRequest) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed
