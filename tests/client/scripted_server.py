"""A throwaway ToolService that answers each RPC from a script, for testing the client alone."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import anyio
import grpc
from google.protobuf import any_pb2, message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from callgate.client import ERROR_DOMAIN
from callgate.v1 import session_pb2, tool_call_pb2, tool_service_pb2, tool_service_pb2_grpc

_Response = TypeVar("_Response", bound=message.Message)


class Hang:
    """A scripted outcome that never answers: the handler waits until the client gives up."""


Outcome = message.Message | grpc.Status | Hang | Sequence[message.Message | grpc.Status]


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    method: str
    request: message.Message
    metadata: Mapping[str, str | bytes]


class ScriptedToolService(tool_service_pb2_grpc.ToolServiceServicer):
    """Answers every RPC with the next outcome scripted for its method, else UNIMPLEMENTED.

    An outcome is a response message, a `grpc.Status` to abort with, `Hang()`, or for
    InvokeStream and WatchCall a sequence of stream messages (optionally ending with a
    status). Exchange is always UNIMPLEMENTED, as on a server that predates it, so the client
    under test falls back to the unary RPCs scripted here; `exchange_attempts` counts its tries.
    """

    def __init__(self) -> None:
        self.outcomes: defaultdict[str, deque[Outcome]] = defaultdict(deque)
        self.received: list[Received] = []
        self.hanging = anyio.Event()
        self.exchange_attempts = 0

    def script(self, method: str, *outcomes: Outcome) -> None:
        """Queues the answers to the next calls of `method`."""
        self.outcomes[method].extend(outcomes)

    def requests(self, method: str) -> list[message.Message]:
        """The requests `method` received, oldest first."""
        return [item.request for item in self.received if item.method == method]

    async def _next(
        self,
        method: str,
        request: message.Message,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> Outcome:
        metadata = {key: value for key, value in context.invocation_metadata() or ()}
        self.received.append(Received(method, request, metadata))
        queue = self.outcomes[method]
        if not queue:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"nothing scripted for {method}")
        outcome = queue.popleft()
        if isinstance(outcome, grpc.Status):
            await context.abort_with_status(outcome)
        if isinstance(outcome, Hang):
            self.hanging.set()
            await anyio.Event().wait()
        return outcome

    async def _unary(
        self,
        method: str,
        request: message.Message,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
        response_type: type[_Response],
    ) -> _Response:
        outcome = await self._next(method, request, context)
        assert isinstance(outcome, response_type), f"{method} scripted with {outcome!r}"
        return outcome

    async def OpenSession(
        self,
        request: tool_service_pb2.OpenSessionRequest,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> tool_service_pb2.OpenSessionResponse:
        return await self._unary(
            "OpenSession", request, context, tool_service_pb2.OpenSessionResponse
        )

    async def CloseSession(
        self,
        request: tool_service_pb2.CloseSessionRequest,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> tool_service_pb2.CloseSessionResponse:
        return await self._unary(
            "CloseSession", request, context, tool_service_pb2.CloseSessionResponse
        )

    async def GetSession(
        self,
        request: tool_service_pb2.GetSessionRequest,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> tool_service_pb2.GetSessionResponse:
        return await self._unary(
            "GetSession", request, context, tool_service_pb2.GetSessionResponse
        )

    async def ListSessions(
        self,
        request: tool_service_pb2.ListSessionsRequest,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> tool_service_pb2.ListSessionsResponse:
        return await self._unary(
            "ListSessions", request, context, tool_service_pb2.ListSessionsResponse
        )

    async def OpenLoop(
        self,
        request: tool_service_pb2.OpenLoopRequest,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> tool_service_pb2.OpenLoopResponse:
        return await self._unary("OpenLoop", request, context, tool_service_pb2.OpenLoopResponse)

    async def ListTools(
        self,
        request: tool_service_pb2.ListToolsRequest,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> tool_service_pb2.ListToolsResponse:
        return await self._unary("ListTools", request, context, tool_service_pb2.ListToolsResponse)

    async def Prepare(
        self,
        request: tool_service_pb2.PrepareRequest,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> tool_service_pb2.PrepareResponse:
        return await self._unary("Prepare", request, context, tool_service_pb2.PrepareResponse)

    async def Approve(
        self,
        request: tool_service_pb2.ApproveRequest,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> tool_service_pb2.ApproveResponse:
        return await self._unary("Approve", request, context, tool_service_pb2.ApproveResponse)

    async def Invoke(
        self,
        request: tool_service_pb2.InvokeRequest,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> tool_service_pb2.InvokeResponse:
        return await self._unary("Invoke", request, context, tool_service_pb2.InvokeResponse)

    async def InvokeStream(
        self,
        request: tool_service_pb2.InvokeStreamRequest,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> AsyncIterator[tool_service_pb2.InvokeStreamResponse]:
        outcome = await self._next("InvokeStream", request, context)
        assert isinstance(outcome, Sequence), f"InvokeStream scripted with {outcome!r}"
        for item in outcome:
            if isinstance(item, grpc.Status):
                await context.abort_with_status(item)
            assert isinstance(item, tool_service_pb2.InvokeStreamResponse)
            yield item

    async def WatchCall(
        self,
        request: tool_service_pb2.WatchCallRequest,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> AsyncIterator[tool_service_pb2.WatchCallResponse]:
        outcome = await self._next("WatchCall", request, context)
        assert isinstance(outcome, Sequence), f"WatchCall scripted with {outcome!r}"
        for item in outcome:
            if isinstance(item, grpc.Status):
                await context.abort_with_status(item)
            assert isinstance(item, tool_service_pb2.WatchCallResponse)
            yield item

    async def Exchange(
        self,
        request_iterator: AsyncIterator[tool_service_pb2.ExchangeRequest],
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> AsyncIterator[tool_service_pb2.ExchangeResponse]:
        self.exchange_attempts += 1
        context.set_code(grpc.StatusCode.UNIMPLEMENTED)
        context.set_details("Method not found!")
        nothing: list[tool_service_pb2.ExchangeResponse] = []
        for response in nothing:  # an async generator that answers nothing
            yield response

    async def GetCall(
        self,
        request: tool_service_pb2.GetCallRequest,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> tool_service_pb2.GetCallResponse:
        return await self._unary("GetCall", request, context, tool_service_pb2.GetCallResponse)

    async def ListCalls(
        self,
        request: tool_service_pb2.ListCallsRequest,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> tool_service_pb2.ListCallsResponse:
        return await self._unary("ListCalls", request, context, tool_service_pb2.ListCallsResponse)

    async def CancelCall(
        self,
        request: tool_service_pb2.CancelCallRequest,
        context: grpc.aio.ServicerContext[message.Message, message.Message],
    ) -> tool_service_pb2.CancelCallResponse:
        return await self._unary(
            "CancelCall", request, context, tool_service_pb2.CancelCallResponse
        )


def rich_status(
    code: grpc.StatusCode,
    reason: str,
    *,
    message_text: str = "Something was refused.",
    domain: str = ERROR_DOMAIN,
    metadata: Mapping[str, str] | None = None,
    violations: Sequence[tuple[str, str]] = (),
) -> grpc.Status:
    """A status carrying google.rpc.Status details the way the callgate server sends them."""
    details: list[any_pb2.Any] = []
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=domain, metadata=metadata or {}))
    details.append(info)
    if violations:
        bad_request = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=name, description=description)
                for name, description in violations
            ]
        )
        packed = any_pb2.Any()
        packed.Pack(bad_request)
        details.append(packed)
    status: grpc.Status = rpc_status.to_status(
        status_pb2.Status(code=code.value[0], message=message_text, details=details)
    )
    return status


class PlainStatus(grpc.Status):
    """A status without rich details, as a proxy or the gRPC runtime would send it."""

    def __init__(self, code: grpc.StatusCode, details: str = "No details.") -> None:
        self.code = code
        self.details = details
        self.trailing_metadata = ()


TIME = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


def session_message(session_id: str = "s-1") -> session_pb2.Session:
    """A session as the server would describe it."""
    session = session_pb2.Session(
        session_id=session_id,
        workspace="/work/space",
        default_loop_id="loop-0",
        sandbox_mode=session_pb2.SANDBOX_MODE_BWRAP,
        labels={"agent": "test"},
    )
    session.create_time.FromDatetime(TIME)
    return session


def call_message(
    state: tool_call_pb2.State.ValueType,
    execution_id: str = "ex-1",
    *,
    tool_name: str = "ReadFile",
) -> tool_call_pb2.ToolCall:
    """A call in `state` with the fields every call has."""
    call = tool_call_pb2.ToolCall(
        execution_id=execution_id,
        session_id="s-1",
        loop_id="loop-0",
        tool_name=tool_name,
        state=state,
        summary=f"{tool_name} README.md",
        digest="ab" * 32,
    )
    call.create_time.FromDatetime(TIME)
    call.update_time.FromDatetime(TIME)
    return call


def result_message(
    text: str = "     1\thello", *, is_error: bool = False, error_code: str = ""
) -> tool_call_pb2.ToolResult:
    """A tool result."""
    return tool_call_pb2.ToolResult(text=text, is_error=is_error, error_code=error_code)
