"""The Exchange stream: lifecycle operations multiplexed over one bidirectional gRPC stream.

A message round trip on an open stream costs about half of a unary RPC, so the client sends
Prepare, Approve, Invoke, GetCall and CancelCall over one stream per client, opened by the
first operation that needs it. A writer task sends queued operations one at a time (a
grpc.aio write interrupted by a cancelled caller would end the whole stream); a reader task
hands each answer to the operation waiting for its id. When the stream ends, every operation
still waiting fails, and the next operation opens a new stream.

A caller that stops waiting (cancelled) leaves its operation to finish on the server, with
one exception: an abandoned Invoke is followed by a CancelCall for its call, which is what
cancelling a unary Invoke does to the running tool.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Final, Generic, TypeVar

import anyio
import grpc
from google.protobuf.message import Message

from callgate.client.errors import (
    CallgateClientError,
    ProtocolError,
    ServerUnavailableError,
    error_from_rpc,
    error_from_status,
)
from callgate.v1 import tool_service_pb2 as pb

__all__ = [
    "APPROVE",
    "CANCEL_CALL",
    "GET_CALL",
    "INVOKE",
    "MAX_IN_FLIGHT",
    "PREPARE",
    "Exchange",
    "ExchangeUnavailable",
    "Operation",
    "StreamBroken",
]

_CLOSE_TIMEOUT: Final = 1.0
"""How long closing waits for the server to end the half-closed stream before cancelling it."""

MAX_IN_FLIGHT: Final = 64
"""Operations in flight on one stream; the server refuses more, so callers beyond it wait."""

_Request = TypeVar("_Request", bound=Message)
_Response = TypeVar("_Response", bound=Message)

ExchangeCall = grpc.aio.StreamStreamCall[pb.ExchangeRequest, pb.ExchangeResponse]


class ExchangeUnavailable(Exception):
    """The server has no Exchange method (it predates it); the unary RPC must be used."""


class StreamBroken(Exception):
    """The stream ended before answering (connection lost, server restarted or stopping), so
    the operation's outcome is unknown; `error` is what its caller gets if it is not resent."""

    def __init__(self, error: CallgateClientError) -> None:
        super().__init__(error.message)
        self.error = error


class Operation(Generic[_Request, _Response]):
    """One lifecycle operation: its field in the `operation` and `outcome` oneofs, its answer
    type, and whether repeating it is harmless whatever its request ID."""

    def __init__(self, field: str, answer_type: type[_Response], *, repeatable: bool) -> None:
        self.field = field
        self.answer_type = answer_type
        self.repeatable = repeatable

    def may_resend(self, request: _Request) -> bool:
        """Whether `request` may be sent again after its stream broke before answering: reads
        and idempotent transitions may; Prepare and Invoke only with a request ID, with which
        the server answers a repeat with the original outcome instead of acting again."""
        return self.repeatable or bool(getattr(request, "request_id", ""))

    def answer(self, response: pb.ExchangeResponse) -> _Response:
        """The answer in `response`, or the typed error the server sent instead."""
        outcome = response.WhichOneof("outcome")
        if outcome == self.field:
            answer = getattr(response, self.field)
            if isinstance(answer, self.answer_type):
                return answer
        if outcome == "error":
            raise error_from_status(response.error)
        raise ProtocolError(
            f"The server answered a {self.field} operation with {outcome or 'nothing'}."
        )


PREPARE: Final = Operation[pb.PrepareRequest, pb.PrepareResponse](
    "prepare", pb.PrepareResponse, repeatable=False
)
APPROVE: Final = Operation[pb.ApproveRequest, pb.ApproveResponse](
    "approve", pb.ApproveResponse, repeatable=True
)
INVOKE: Final = Operation[pb.InvokeRequest, pb.InvokeResponse](
    "invoke", pb.InvokeResponse, repeatable=False
)
GET_CALL: Final = Operation[pb.GetCallRequest, pb.GetCallResponse](
    "get_call", pb.GetCallResponse, repeatable=True
)
CANCEL_CALL: Final = Operation[pb.CancelCallRequest, pb.CancelCallResponse](
    "cancel_call", pb.CancelCallResponse, repeatable=True
)


class Exchange:
    """The client's Exchange stream: opened on first use, and again after it ends."""

    def __init__(self, open_call: Callable[[], ExchangeCall]) -> None:
        self._open_call = open_call
        self._stream: _Stream | None = None
        self._ids = itertools.count(1)
        self._slots = anyio.Semaphore(MAX_IN_FLIGHT, fast_acquire=True)
        self._unavailable = False
        self._closed = False

    async def request(
        self, operation: Operation[_Request, _Response], request: _Request
    ) -> _Response:
        """Sends one operation and returns its answer.

        Raises the operation's typed error, `StreamBroken` if the stream ended before the
        answer came, or `ExchangeUnavailable` (from then on at once) if the server has no
        Exchange.
        """
        if self._unavailable:
            raise ExchangeUnavailable
        async with self._slots:
            stream = await self._current()
            try:
                response = await stream.send(operation.field, request)
            except ExchangeUnavailable:
                self._unavailable = True
                raise
        return operation.answer(response)

    async def close(self) -> None:
        """Ends the stream; operations still waiting fail, and none can be sent any more."""
        self._closed = True
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.close()

    async def _current(self) -> _Stream:
        if self._closed:
            raise CallgateClientError("The client is closed.", code=grpc.StatusCode.CANCELLED)
        stream = self._stream
        if stream is not None and not stream.ended:
            return stream
        # Replaced before any await, so that concurrent callers share the new stream.
        self._stream = fresh = _Stream(self._open_call(), self._ids)
        if stream is not None:
            await stream.close()
        return fresh


_Failure = Callable[[], Exception]


def _client_closed() -> Exception:
    return CallgateClientError(
        "The client was closed before the server answered.", code=grpc.StatusCode.CANCELLED
    )


def _ended_early() -> Exception:
    return StreamBroken(
        ServerUnavailableError(
            "The server ended the Exchange stream before answering.",
            code=grpc.StatusCode.UNAVAILABLE,
        )
    )


def _failure_of(error: grpc.aio.AioRpcError) -> _Failure:
    """How the operations waiting on a stream that ended with `error` fail."""
    code = error.code()
    if code is grpc.StatusCode.UNIMPLEMENTED:
        return ExchangeUnavailable

    def typed() -> CallgateClientError:
        typed_error = error_from_rpc(error)
        typed_error.__cause__ = error
        return typed_error

    if code is grpc.StatusCode.UNAVAILABLE:
        return lambda: StreamBroken(typed())
    if (
        code is grpc.StatusCode.INTERNAL
        and not _from_callgate(error)
        and not (error.details() or "").startswith("Exception deserializing")
    ):
        # gRPC's own failure (e.g. "Internal error from Core" when a stream is opened on a
        # connection the server is closing), not a server verdict: the outcome is unknown.
        return lambda: StreamBroken(
            ServerUnavailableError(
                f"The connection to the server failed: {error.details() or 'no details'}",
                code=grpc.StatusCode.UNAVAILABLE,
            )
        )
    # Anything else (UNAUTHENTICATED before any operation ran, say) is that stream's verdict.
    return typed


def _from_callgate(error: grpc.aio.AioRpcError) -> bool:
    """Whether the server's handler sent this status (callgate statuses carry details)."""
    return any(key == "grpc-status-details-bin" for key, _ in error.trailing_metadata() or ())


class _Stream:
    """One Exchange call with its writer and reader tasks."""

    def __init__(self, call: ExchangeCall, ids: Iterator[int]) -> None:
        self._call = call
        self._ids = ids
        self._pending: dict[int, asyncio.Future[pb.ExchangeResponse]] = {}
        self._outgoing: asyncio.Queue[pb.ExchangeRequest] = asyncio.Queue()
        self._failure: _Failure | None = None
        loop = asyncio.get_running_loop()
        self._writer = loop.create_task(self._write_all(), name="callgate-exchange-writer")
        self._reader = loop.create_task(self._read_all(), name="callgate-exchange-reader")

    @property
    def ended(self) -> bool:
        return self._failure is not None

    async def send(self, field: str, request: Message) -> pb.ExchangeResponse:
        if self._failure is not None:
            raise self._failure()
        request_id = next(self._ids)
        message = pb.ExchangeRequest(id=request_id)
        getattr(message, field).CopyFrom(request)
        future: asyncio.Future[pb.ExchangeResponse] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self._outgoing.put_nowait(message)
        try:
            return await future
        except asyncio.CancelledError:
            if isinstance(request, pb.InvokeRequest):
                self._withdraw(request)
            raise
        finally:
            del self._pending[request_id]

    def _withdraw(self, invoke: pb.InvokeRequest) -> None:
        """Cancels the call of an Invoke whose caller gave up (its answer is not awaited)."""
        if self._failure is None:
            self._outgoing.put_nowait(
                pb.ExchangeRequest(
                    id=next(self._ids),
                    cancel_call=pb.CancelCallRequest(
                        session_id=invoke.session_id, execution_id=invoke.execution_id
                    ),
                )
            )

    async def close(self) -> None:
        self._end(_client_closed)
        self._writer.cancel()
        await asyncio.gather(self._writer, return_exceptions=True)
        # Half-close and let the server end the stream (it does once it has answered what
        # is in flight), bounded; only then cancel. A cancelled call leaves operations in
        # flight in gRPC's core whose completions, arriving after this event loop closed,
        # fail in whichever loop runs next ("Event loop is closed").
        with anyio.move_on_after(_CLOSE_TIMEOUT):
            with suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                await self._call.done_writing()
            await asyncio.shield(self._reader)
        self._call.cancel()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)

    def _end(self, failure: _Failure) -> None:
        if self._failure is not None:
            return
        self._failure = failure
        for future in self._pending.values():
            if not future.done():
                future.set_exception(failure())

    async def _write_all(self) -> None:
        while True:
            message = await self._outgoing.get()
            try:
                await self._call.write(message)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                return  # The call has ended; the reader reports how.

    async def _read_all(self) -> None:
        failure: _Failure
        try:
            while True:
                response = await self._call.read()
                if not isinstance(response, pb.ExchangeResponse):
                    failure = _ended_early
                    break
                future = self._pending.get(response.id)
                # No future: an answer nobody waits for any more (a cancelled caller's).
                if future is not None and not future.done():
                    future.set_result(response)
        except grpc.aio.AioRpcError as error:
            failure = _failure_of(error)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            failure = _client_closed  # the call itself was cancelled: the client is closing
        self._end(failure)
