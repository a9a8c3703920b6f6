"""A session on a callgate server and the Prepare -> Approve -> Invoke lifecycle of its calls."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing, suppress
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Final, Self

import anyio
from google.protobuf import duration_pb2

from callgate.client.conversion import (
    call_from_proto,
    result_from_proto,
    session_from_proto,
    tool_spec_from_proto,
)
from callgate.client.errors import (
    ApprovalTimeoutError,
    CallDeniedError,
    CallgateClientError,
    ProtocolError,
    SessionNotFoundError,
)
from callgate.client.exchange import APPROVE, CANCEL_CALL, GET_CALL, INVOKE, PREPARE
from callgate.client.models import InvokeResult, Session, State, ToolCall, ToolResult, ToolSpec
from callgate.client.transport import Transport
from callgate.v1 import tool_service_pb2

if TYPE_CHECKING:
    from callgate.v1.tool_service_pb2_grpc import ToolServiceAsyncStub

__all__ = ["MAX_APPROVE_WAIT", "ClientSession", "encode_arguments"]

MAX_APPROVE_WAIT: Final = 60.0
"""The longest wait one Approve may ask for; the server caps `wait` at this."""

_CLEANUP_TIMEOUT: Final = 5.0
"""How long best-effort clean-up RPCs (closing, cancelling) may take while unwinding."""


def new_batch_id() -> str:
    """A fresh batch ID: pass it to `prepare` or `run` for every call of one model turn."""
    return "turn-" + uuid.uuid4().hex


def encode_arguments(args: Mapping[str, object] | str) -> str:
    """The `arguments_json` for `args`: a string passes through, a mapping becomes compact JSON."""
    if isinstance(args, str):
        return args
    return json.dumps(args, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class ClientSession:
    """A session opened by `CallgateClient.open_session`; closes the session on context exit."""

    def __init__(self, stub: ToolServiceAsyncStub, transport: Transport, session: Session) -> None:
        self._stub = stub
        self._transport = transport
        self._session = session
        self._closed = False

    @property
    def session(self) -> Session:
        """The session as the server described it when it was opened."""
        return self._session

    @property
    def session_id(self) -> str:
        """The session's ID."""
        return self._session.session_id

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Shielded so that a cancelled caller still releases the session's server resources.
        with anyio.move_on_after(_CLEANUP_TIMEOUT, shield=True):
            if exc is None:
                await self.close()
                return
            # The body's own error matters more than a failed close (say, the server is gone).
            with suppress(CallgateClientError):
                await self.close()

    async def close(self) -> None:
        """Closes the session on the server; closing twice, or a session already gone, is fine."""
        if self._closed:
            return
        # Already closed elsewhere (or never ours): the outcome the caller wants.
        with suppress(SessionNotFoundError):
            await self._transport.unary(
                self._stub.CloseSession,
                tool_service_pb2.CloseSessionRequest(session_id=self.session_id),
            )
        self._closed = True

    async def refresh(self) -> Session:
        """Reads the session again from the server."""
        response = await self._transport.unary(
            self._stub.GetSession, tool_service_pb2.GetSessionRequest(session_id=self.session_id)
        )
        self._session = session_from_proto(response.session)
        return self._session

    async def open_loop(self) -> str:
        """Opens an extra loop (a sub-agent) in this session and returns its loop ID."""
        response = await self._transport.unary(
            self._stub.OpenLoop, tool_service_pb2.OpenLoopRequest(session_id=self.session_id)
        )
        return response.loop_id

    async def tools(self) -> list[ToolSpec]:
        """The tools this session offers, with their argument schemas."""
        response = await self._transport.unary(
            self._stub.ListTools, tool_service_pb2.ListToolsRequest(session_id=self.session_id)
        )
        return [tool_spec_from_proto(tool) for tool in response.tools]

    async def prepare(
        self,
        tool: str,
        args: Mapping[str, object] | str,
        *,
        loop_id: str = "",
        request_id: str | None = None,
        evaluate: bool = False,
        batch_id: str = "",
        execution_id: str = "",
    ) -> ToolCall:
        """Validates and freezes a call (no effect); with `evaluate` the gate decides it too.

        `batch_id` marks the calls one model turn prepares (any 1-64 characters of
        [A-Za-z0-9._:-], e.g. `new_batch_id()`), so that an approver can decide them together.
        `execution_id` is one chosen here ("call_" and `uuid4().hex`); empty: the server's.
        """
        response = await self._transport.operation(
            PREPARE,
            self._stub.Prepare,
            self._prepare_request(
                tool, args, loop_id, request_id or "", evaluate, batch_id, execution_id
            ),
        )
        return call_from_proto(response.call)

    def _prepare_request(
        self,
        tool: str,
        args: Mapping[str, object] | str,
        loop_id: str,
        request_id: str,
        evaluate: bool,
        batch_id: str,
        execution_id: str = "",
    ) -> tool_service_pb2.PrepareRequest:
        return tool_service_pb2.PrepareRequest(
            session_id=self.session_id,
            loop_id=loop_id,
            tool_name=tool,
            arguments_json=encode_arguments(args),
            request_id=request_id,
            evaluate=evaluate,
            batch_id=batch_id,
            execution_id=execution_id,
        )

    async def approve(self, execution_id: str, wait: float | None = None) -> ToolCall:
        """Asks the gate to decide a call; waits up to `wait` seconds (at most 60) for a human."""
        request = tool_service_pb2.ApproveRequest(
            session_id=self.session_id, execution_id=execution_id
        )
        if wait is not None:
            if wait < 0:
                raise ValueError("wait must be zero or more seconds")
            request.wait.CopyFrom(_duration(min(wait, MAX_APPROVE_WAIT)))
        response = await self._transport.operation(APPROVE, self._stub.Approve, request)
        return call_from_proto(response.call)

    async def invoke(
        self, execution_id: str, request_id: str | None = None, *, detach: bool = False
    ) -> InvokeResult:
        """Runs an approved call once and returns the final call and its result; cancelling
        the caller cancels the running call on the server, unless `detach` (then the call
        runs to its end, and an Invoke with the same `request_id` returns its outcome)."""
        response = await self._transport.operation(
            INVOKE,
            self._stub.Invoke,
            tool_service_pb2.InvokeRequest(
                session_id=self.session_id,
                execution_id=execution_id,
                request_id=request_id or "",
                detach=detach,
            ),
        )
        return _invoke_result(response, execution_id)

    async def invoke_stream(
        self, execution_id: str, request_id: str | None = None
    ) -> AsyncGenerator[bytes | ToolCall, None]:
        """Runs an approved call once, yielding output chunks and then the final call.

        Leaving the iteration early cancels the RPC, and with it the running tool; wrap the
        iterator in `contextlib.aclosing` so that happens at once rather than at garbage
        collection.
        """
        request = tool_service_pb2.InvokeStreamRequest(
            session_id=self.session_id, execution_id=execution_id, request_id=request_id or ""
        )
        async with aclosing(
            self._transport.server_stream(self._stub.InvokeStream, request)
        ) as responses:
            async for response in responses:
                event = response.WhichOneof("event")
                if event == "output":
                    yield response.output.data
                elif event == "finished":
                    yield call_from_proto(response.finished)
                    return
                # Any other event comes from a newer server; this client skips it.
        raise ProtocolError(f"The output stream of {execution_id} ended without the final call.")

    async def get_call(self, execution_id: str) -> ToolCall:
        """Reads one call."""
        response = await self._transport.operation(
            GET_CALL,
            self._stub.GetCall,
            tool_service_pb2.GetCallRequest(session_id=self.session_id, execution_id=execution_id),
        )
        return call_from_proto(response.call)

    async def watch_call(self, execution_id: str) -> AsyncGenerator[ToolCall, None]:
        """Yields the call now, then the call after every change; ends after a terminal
        state. Leaving early (best inside `contextlib.aclosing`) cancels the stream."""
        request = tool_service_pb2.WatchCallRequest(
            session_id=self.session_id, execution_id=execution_id
        )
        async with aclosing(
            self._transport.server_stream(self._stub.WatchCall, request)
        ) as responses:
            async for response in responses:
                call = call_from_proto(response.call)
                yield call
                if call.state.is_terminal:
                    return

    async def list_calls(self) -> list[ToolCall]:
        """The session's calls, newest first."""
        response = await self._transport.unary(
            self._stub.ListCalls, tool_service_pb2.ListCallsRequest(session_id=self.session_id)
        )
        return [call_from_proto(call) for call in response.calls]

    async def cancel(self, execution_id: str) -> ToolCall:
        """Cancels a call that has not finished; a running call's effect is stopped."""
        response = await self._transport.operation(
            CANCEL_CALL,
            self._stub.CancelCall,
            tool_service_pb2.CancelCallRequest(
                session_id=self.session_id, execution_id=execution_id
            ),
        )
        return call_from_proto(response.call)

    async def run(
        self,
        tool: str,
        args: Mapping[str, object] | str,
        *,
        wait: float | None = None,
        loop_id: str = "",
        batch_id: str = "",
        on_gated: Callable[[ToolCall], object] | None = None,
    ) -> ToolResult:
        """Prepares, approves and invokes a call, and returns its result.

        Uses the fast path (the gate decides at Prepare). A gated call is waited for up to
        `wait` seconds in all (None: until the server decides, which its approval timeout
        bounds); after that the call is cancelled and `ApprovalTimeoutError` raised. A denied
        call raises `CallDeniedError`. A tool that ran and failed is a result with
        `is_error`, not an exception. Prepare and Invoke carry fresh request IDs, so the
        channel's retries never repeat an effect. Calls run concurrently for one model turn
        with the same `batch_id` (`new_batch_id()`) can be approved in one action.
        `on_gated` is called once with the call when it waits for an approver (its
        `expire_time` is when it is denied if nobody decides).
        """
        if wait is not None and wait < 0:
            raise ValueError("wait must be zero or more seconds")
        invoke_request_id = str(uuid.uuid4())
        started = await self.start(
            tool, args, loop_id=loop_id, batch_id=batch_id, invoke_request_id=invoke_request_id
        )
        if started.result is not None:
            return started.result
        assert started.call is not None  # not run at once: the prepared call is there
        call = started.call
        if call.state is State.AWAITING_APPROVAL and on_gated is not None:
            on_gated(call)
        call = await self._until_decided(call, wait)
        if call.state is State.DENIED:
            raise CallDeniedError(call)
        # Any other state goes to Invoke: the server is the authority on whether it may run
        # and answers with the precise reason (expired, cancelled, ...) if not.
        invoked_now = await self.invoke(call.execution_id, request_id=invoke_request_id)
        return invoked_now.result

    async def start(
        self,
        tool: str,
        args: Mapping[str, object] | str,
        *,
        loop_id: str = "",
        batch_id: str = "",
        invoke_request_id: str = "",
        prepare_request_id: str = "",
        execution_id: str = "",
    ) -> Started:
        """The first half of `run`, in one message (`PrepareRequest.invoke`): the server
        prepares the call, the gate decides it, and a call the policy allows runs at once and
        comes back with its result. A gated call is left for the caller to wait for
        (`approve`) and invoke, with `invoke_request_id` (given, or made here) so that an
        Invoke whose answer was lost returns its outcome instead of running again.

        A repeat with the same `prepare_request_id`, `execution_id`, `batch_id` and arguments
        returns that same call (and its result, if it ran: never a second run); other
        arguments are refused (ALREADY_EXISTS)."""
        invoke_request_id = invoke_request_id or str(uuid.uuid4())
        request = self._prepare_request(
            tool,
            args,
            loop_id,
            prepare_request_id or str(uuid.uuid4()),
            True,
            batch_id,
            execution_id,
        )
        request.invoke = True
        response = await self._transport.operation(PREPARE, self._stub.Prepare, request)
        if response.HasField("result"):
            return Started(
                None, _result_of(response, response.call.execution_id), invoke_request_id
            )
        return Started(call_from_proto(response.call), None, invoke_request_id)

    async def _until_decided(self, call: ToolCall, wait: float | None) -> ToolCall:
        """Calls Approve until the call leaves PREPARED / AWAITING_APPROVAL or `wait` runs out."""
        deadline = None if wait is None else anyio.current_time() + wait
        try:
            while call.state in (State.PREPARED, State.AWAITING_APPROVAL):
                remaining = (
                    MAX_APPROVE_WAIT if deadline is None else deadline - anyio.current_time()
                )
                if remaining <= 0 and call.state is State.AWAITING_APPROVAL:
                    assert wait is not None  # a deadline exists only when a wait was given
                    await self._abandon(call)
                    raise ApprovalTimeoutError(call, wait)
                asked_from = call.state
                call = await self.approve(call.execution_id, wait=max(0.0, remaining))
                if asked_from is State.PREPARED and call.state is State.PREPARED:
                    raise ProtocolError(
                        f"The server left call {call.execution_id} undecided after Approve."
                    )
        except anyio.get_cancelled_exc_class():
            await self._abandon(call)
            raise
        return call

    async def _abandon(self, call: ToolCall) -> None:
        """Best-effort cancel of a call nobody will invoke, so no approver is asked in vain."""
        with anyio.move_on_after(_CLEANUP_TIMEOUT, shield=True):
            # Decided or gone meanwhile: nothing is left to withdraw.
            with suppress(CallgateClientError):
                await self.cancel(call.execution_id)


@dataclass(frozen=True, slots=True)
class Started:
    """What `ClientSession.start` did: the prepared call (None when it ran at once: the
    result says all), the result when it ran, and the request ID its Invoke uses."""

    call: ToolCall | None
    result: ToolResult | None
    invoke_request_id: str


def _invoke_result(response: tool_service_pb2.InvokeResponse, execution_id: str) -> InvokeResult:
    return InvokeResult(
        call=call_from_proto(response.call), result=_result_of(response, execution_id)
    )


def _result_of(
    response: tool_service_pb2.InvokeResponse | tool_service_pb2.PrepareResponse,
    execution_id: str,
) -> ToolResult:
    if response.HasField("result"):
        return result_from_proto(response.result)
    if response.call.HasField("result"):
        return result_from_proto(response.call.result)
    raise ProtocolError(f"The server answered Invoke of {execution_id} without a result.")


def _duration(seconds: float) -> duration_pb2.Duration:
    duration = duration_pb2.Duration()
    duration.FromNanoseconds(round(seconds * 1e9))
    return duration
