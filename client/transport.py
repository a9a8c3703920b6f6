"""The one place RPCs are sent: adds the credentials and turns gRPC errors into typed ones."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from callgate.client.errors import error_from_rpc
from callgate.client.exchange import Exchange, ExchangeUnavailable, Operation, StreamBroken

_Request = TypeVar("_Request")
_Response = TypeVar("_Response")
_Operation = TypeVar("_Operation", bound=Message)
_Answer = TypeVar("_Answer", bound=Message)


_RESENDS = 2


class Transport:
    """Sends requests over one channel with the caller's metadata on every call.

    With an `exchange`, lifecycle operations go over the Exchange stream, and an operation
    whose stream broke before answering is sent again on a new stream if `resend` allows
    retries and repeating it cannot repeat an effect (see `Operation.may_resend`).
    """

    def __init__(
        self,
        metadata: Sequence[tuple[str, str]],
        exchange: Exchange | None = None,
        *,
        resend: bool = False,
    ) -> None:
        self._metadata = tuple(metadata)
        self._exchange = exchange
        self._resend = resend

    async def close(self) -> None:
        """Ends the Exchange stream, if one is open."""
        if self._exchange is not None:
            await self._exchange.close()

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

    async def operation(
        self,
        operation: Operation[_Operation, _Answer],
        method: grpc.aio.UnaryUnaryMultiCallable[_Operation, _Answer],
        request: _Operation,
    ) -> _Answer:
        """Sends one lifecycle operation: over the Exchange stream when this client uses it
        and the server has it, otherwise as its unary RPC `method`."""
        if self._exchange is not None:
            try:
                return await self._exchanged(self._exchange, operation, request)
            except ExchangeUnavailable:
                pass  # An older server: the unary RPC it does have.
        return await self.unary(method, request)

    async def _exchanged(
        self, exchange: Exchange, operation: Operation[_Operation, _Answer], request: _Operation
    ) -> _Answer:
        # The first resend can still meet the dead connection (the channel has not noticed
        # yet: "Broken pipe"), so a repeatable operation gets two resends on fresh streams.
        resends = _RESENDS if self._resend and operation.may_resend(request) else 0
        while True:
            try:
                return await exchange.request(operation, request)
            except StreamBroken as broken:
                if resends == 0:
                    raise broken.error from broken.error.__cause__
                resends -= 1

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
