"""Reading callgate's rich error details (ErrorInfo, BadRequest) off a failed RPC."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.rpc import error_details_pb2, status_pb2


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
    reason = domain = ""
    metadata: dict[str, str] = {}
    fields: list[str] = []
    for key, value in error.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        assert isinstance(value, bytes)
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason, domain, metadata = info.reason, info.domain, dict(info.metadata)
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                fields.extend(v.field for v in bad.field_violations)
    return RpcFailure(error.code(), reason, domain, error.details() or "", metadata, fields)
