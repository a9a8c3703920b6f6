"""ToolService.Exchange: the unary lifecycle operations multiplexed over one bidirectional stream.

One reader takes operations off the stream; each runs in its own task, owned by a task group
scoped to the stream, through the very unary handler its RPC uses, so validation, errors and
effects are identical. Outcomes go back through one writer (grpc.aio allows one write at a
time) in completion order, each tagged with the client's id.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from typing import Final

import anyio
from anyio.abc import TaskGroup

from callgate.server.core.errors import (
    CallgateError,
    InternalError,
    ResourceExhausted,
    Unavailable,
    request_invalid,
)
from callgate.v1 import tool_service_pb2 as pb

from ..core.fair_gate import SETTLED
from .handlers import Call, UnaryHandler
from .status import status_proto

log = logging.getLogger(__name__)

MAX_IN_FLIGHT: Final = 64
"""Operations one stream may have running at once; one more is answered CONCURRENCY_LIMIT."""

OPERATIONS: Final = tuple(
    field.name for field in pb.ExchangeRequest.DESCRIPTOR.oneofs_by_name["operation"].fields
)
"""The `operation` oneof fields; each has an `outcome` field of the same name."""


def shutting_down() -> Unavailable:
    """The error that ends (or refuses) an Exchange stream while the server stops."""
    return Unavailable("SHUTTING_DOWN", "The server is shutting down; retry on another instance.")


def check_operations(operations: Mapping[str, UnaryHandler]) -> None:
    """Fails unless `operations` has a handler for every Exchange operation."""
    missing = set(OPERATIONS) - set(operations)
    if missing:
        raise ValueError(f"no handler for the Exchange operations {sorted(missing)}")


class ExchangeStream:
    """One open Exchange stream of one principal; `operations` maps each operation (see
    `check_operations`) to the unary handler of its RPC."""

    def __init__(
        self,
        operations: Mapping[str, UnaryHandler],
        call: Call,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self._operations = operations
        self._call = call
        self._max_in_flight = max_in_flight
        # Ids of operations not yet answered, and operations whose answer is not yet written:
        # the limit counts the latter, so that a client that stops reading answers soon
        # stops being read itself (back-pressure) instead of piling up finished operations.
        self._in_flight: set[int] = set()
        self._unwritten = 0
        self._writing = anyio.Lock(fast_acquire=True)
        self._reading = anyio.CancelScope()
        # Set when the last Prepare taken from the stream is done: an operation taken after a
        # Prepare starts only then, so that the stream's messages are still taken in order
        # (a pipelined Invoke meets its call settled) although a Prepare may wait its turn.
        self._last_prepare: anyio.Event | None = None

    def stop_reading(self) -> None:
        """Takes no further operations (the server is stopping): the stream ends with
        UNAVAILABLE / SHUTTING_DOWN once the operations in flight are answered."""
        self._reading.cancel()

    async def serve(self, requests: AsyncIterator[pb.ExchangeRequest]) -> None:
        """Runs the stream until the client half-closes and every operation is answered.

        Raises a CallgateError to end the stream with its status: REQUEST_INVALID for an
        undecodable message (operations in flight are then cancelled), SHUTTING_DOWN after
        `stop_reading`. When the client abandons the stream, gRPC cancels this task and with
        it every operation in flight.
        """
        failure: CallgateError | None = None
        async with anyio.create_task_group() as operations:
            with self._reading:
                try:
                    async for request in requests:
                        await self._start(operations, request)
                except CallgateError as error:
                    failure = error
                    operations.cancel_scope.cancel()
        if failure is not None:
            raise failure
        if self._reading.cancel_called:
            raise shutting_down()

    async def _start(self, operations: TaskGroup, request: pb.ExchangeRequest) -> None:
        field = request.WhichOneof("operation")
        if field is None:
            await self._answer_error(
                request.id,
                request_invalid("operation", "set one of " + ", ".join(OPERATIONS)),
            )
        elif request.id in self._in_flight:
            await self._answer_error(
                request.id,
                request_invalid("id", "an operation with this id is still in flight"),
            )
        elif self._unwritten >= self._max_in_flight:
            await self._answer_error(
                request.id,
                ResourceExhausted(
                    "CONCURRENCY_LIMIT",
                    f"The stream already has {self._unwritten} operations in flight; "
                    "wait for an answer before sending more.",
                ),
            )
        else:
            self._in_flight.add(request.id)
            self._unwritten += 1
            after = self._last_prepare
            done = None
            if field == "prepare":
                done = self._last_prepare = anyio.Event()
            operations.start_soon(
                self._run, request.id, field, getattr(request, field), after, done
            )

    async def _run(
        self,
        request_id: int,
        field: str,
        message: object,
        after: anyio.Event | None = None,
        done: anyio.Event | None = None,
    ) -> None:
        try:
            response = pb.ExchangeResponse(id=request_id)
            try:
                if after is not None and not after.is_set():
                    await after.wait()
                if done is not None:
                    SETTLED.set(done)  # this task's own context: set once the call is settled
                try:
                    answer = await self._operations[field](message, self._call)
                finally:
                    if done is not None:
                        done.set()
                getattr(response, field).CopyFrom(answer)
            except CallgateError as error:
                response.error.CopyFrom(status_proto(error))
            except Exception:
                log.exception(
                    "unexpected error in an Exchange operation", extra={"operation": field}
                )
                response.error.CopyFrom(status_proto(InternalError()))
            finally:
                # Before the answer goes out: the client may reuse the id once it has it.
                self._in_flight.discard(request_id)
            await self._write(response)
        finally:
            if done is not None:
                done.set()  # also when cancelled before its turn: nothing waits forever
            self._unwritten -= 1

    async def _answer_error(self, request_id: int, error: CallgateError) -> None:
        await self._write(pb.ExchangeResponse(id=request_id, error=status_proto(error)))

    async def _write(self, response: pb.ExchangeResponse) -> None:
        # Shielded: a grpc.aio write cancelled half-way breaks the whole stream, and neither
        # stop_reading nor a failing neighbour should do that to an answer already made.
        with anyio.CancelScope(shield=True):
            async with self._writing:
                await self._call.context.write(response)
