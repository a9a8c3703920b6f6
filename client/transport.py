"""The one place RPCs are sent: adds the credentials and turns gRPC errors into typed ones."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import TypeVar

import grpc

from callgate.client.errors import error_from_rpc

_Request = TypeVar("_Request")
_Response = TypeVar("_Response")


class Transport:
    """Sends requests over one channel with the caller's metadata on every call."""

    def __init__(self, metadata: Sequence[tuple[str, str]]) -> None:
        self._metadata = tuple(metadata)

    async def unary(
        self,
        method: grpc.aio.UnaryUnaryMultiCallable[_Request, _Response],
        request: _Request,
    ) -> _Response:
        """Sends one request and returns its response."""
        try:
            return await method(request, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from exc

    async def server_stream(
        self,
        method: grpc.aio.UnaryStreamMultiCallable[_Request, _Response],
        request: _Request,
    ) -> AsyncGenerator[_Response, None]:
        """Sends one request and yields the responses; closing the iterator cancels the RPC."""
        call = method(request, metadata=self._metadata)
        try:
            async for response in call:
                yield response
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from exc
        finally:
            call.cancel()
