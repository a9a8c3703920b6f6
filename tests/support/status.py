"""Reading callgate's rich error details (ErrorInfo, BadRequest) off a failed RPC or an
Exchange operation's `error`."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.rpc import error_details_pb2, status_pb2

_CODES = {code.value[0]: code for code in grpc.StatusCode}


@dataclass(frozen=True)
class RpcFailure:
    code: grpc.StatusCode
    reason: str
    domain: str
    message: str
    metadata: dict[str, str]
    fields: list[str]


def failure(error: grpc.aio.AioRpcError) -> RpcFailure:
    """Decode the google.rpc.Status carried in the trailing metadata of `error`."""
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            assert isinstance(value, bytes)
            decoded = status_failure(status_pb2.Status.FromString(value))
            return RpcFailure(
                error.code(),
                decoded.reason,
                decoded.domain,
                error.details() or "",
                decoded.metadata,
                decoded.fields,
            )
    return RpcFailure(error.code(), "", "", error.details() or "", {}, [])


def status_failure(status: status_pb2.Status) -> RpcFailure:
    """Decode a google.rpc.Status message, as an Exchange operation's `error` carries it."""
    reason = domain = ""
    metadata: dict[str, str] = {}
    fields: list[str] = []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason, domain, metadata = info.reason, info.domain, dict(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            fields.extend(v.field for v in bad.field_violations)
    code = _CODES.get(status.code, grpc.StatusCode.UNKNOWN)
    return RpcFailure(code, reason, domain, status.message, metadata, fields)
