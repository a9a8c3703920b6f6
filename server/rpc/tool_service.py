"""callgate.v1.ToolService: each handler converts, calls one Lifecycle method, converts back."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import anyio

from callgate.server.core.calls import CallSnapshot
from callgate.server.core.lifecycle import Lifecycle
from callgate.server.core.tool import OutputSink
from callgate.v1 import tool_service_pb2 as pb

from ..core.fair_gate import SETTLED, FairGate
from .convert import (
    call_to_proto,
    check_struct_arguments,
    result_to_proto,
    session_to_proto,
    struct_arguments_text,
    tool_info_to_proto,
)
from .exchange import ExchangeStream, check_operations, shutting_down
from .handlers import Call, StreamHandler, UnaryHandler, acknowledged
from .output_stream import OutputStream, StreamBudget


class ToolServicer:
    """Handlers for every ToolService method."""

    def __init__(self, lifecycle: Lifecycle, stream_budget: StreamBudget | None = None) -> None:
        self.lifecycle = lifecycle
        # Output buffered for InvokeStream readers (see output_stream).
        self.stream_budget = stream_budget or StreamBudget(8 << 20, 64 << 20)
        # Prepare's synchronous work, one at a time, sessions taking turns (fair_gate).
        self.prepare_gate = FairGate()
        # Exchange runs each operation through the unary handler of the same RPC.
        commit = lifecycle.journal.commit
        self._exchange_operations: dict[str, UnaryHandler] = {
            "prepare": acknowledged(self.prepare, commit),
            "approve": acknowledged(self.approve, commit),
            "invoke": acknowledged(self.invoke, commit),
            "get_call": self.get_call,
            "cancel_call": acknowledged(self.cancel_call, commit),
        }
        check_operations(self._exchange_operations)
        self._exchanges: set[ExchangeStream] = set()
        self._stopping = False

    @property
    def open_exchanges(self) -> int:
        """How many Exchange streams are open now."""
        return len(self._exchanges)

    def begin_shutdown(self) -> None:
        """Refuses new Exchange streams and ends the open ones once their operations in
        flight are answered, so that idle streams do not hold the server's grace period."""
        self._stopping = True
        for stream in self._exchanges:
            stream.stop_reading()

    def handlers(self) -> dict[str, UnaryHandler | StreamHandler]:
        # Answers that acknowledge a journaled event wait for its commit (see `acknowledged`).
        commit = self.lifecycle.journal.commit
        return {
            "OpenSession": acknowledged(self.open_session, commit),
            "CloseSession": acknowledged(self.close_session, commit),
            "GetSession": self.get_session,
            "ListSessions": self.list_sessions,
            "OpenLoop": self.open_loop,
            "ListTools": self.list_tools,
            "Prepare": acknowledged(self.prepare, commit),
            "Approve": acknowledged(self.approve, commit),
            "Invoke": acknowledged(self.invoke, commit),
            "InvokeStream": self.invoke_stream,
            "GetCall": self.get_call,
            "ListCalls": self.list_calls,
            "CancelCall": acknowledged(self.cancel_call, commit),
            "WatchCall": self.watch_call,
            "Exchange": self.exchange,
        }

    async def open_session(
        self, request: pb.OpenSessionRequest, call: Call
    ) -> pb.OpenSessionResponse:
        session = self.lifecycle.open_session(
            call.principal, request.workspace, request.labels, request.name
        )
        return pb.OpenSessionResponse(session=session_to_proto(session))

    async def list_sessions(
        self, request: pb.ListSessionsRequest, call: Call
    ) -> pb.ListSessionsResponse:
        sessions = self.lifecycle.list_sessions(call.principal)
        return pb.ListSessionsResponse(sessions=[session_to_proto(s) for s in sessions])

    async def close_session(
        self, request: pb.CloseSessionRequest, call: Call
    ) -> pb.CloseSessionResponse:
        await self.lifecycle.close_session(call.principal, request.session_id)
        return pb.CloseSessionResponse()

    async def get_session(self, request: pb.GetSessionRequest, call: Call) -> pb.GetSessionResponse:
        session = self.lifecycle.get_session(call.principal, request.session_id)
        return pb.GetSessionResponse(session=session_to_proto(session))

    async def open_loop(self, request: pb.OpenLoopRequest, call: Call) -> pb.OpenLoopResponse:
        return pb.OpenLoopResponse(
            loop_id=self.lifecycle.open_loop(call.principal, request.session_id)
        )

    async def list_tools(self, request: pb.ListToolsRequest, call: Call) -> pb.ListToolsResponse:
        infos = self.lifecycle.list_tools(call.principal, request.session_id)
        return pb.ListToolsResponse(tools=[tool_info_to_proto(i) for i in infos])

    async def prepare(self, request: pb.PrepareRequest, call: Call) -> pb.PrepareResponse:
        arguments = request.arguments_json
        if request.HasField("arguments"):
            # The caller's session first, the cheap checks next, and the conversion (its
            # time grows with the Struct) in a worker thread, taking turns by session.
            self.lifecycle.get_session(call.principal, request.session_id)
            check_struct_arguments(request, self.lifecycle.settings.max_argument_bytes)
            async with self.prepare_gate.turn(request.session_id):
                arguments = await anyio.to_thread.run_sync(struct_arguments_text, request)
        await self.lifecycle.warm(
            call.principal,
            request.session_id,
            request.loop_id,
            request.tool_name,
            arguments,
        )
        async with self.prepare_gate.turn(request.session_id):
            snapshot = self.lifecycle.prepare(
                call.principal,
                request.session_id,
                request.loop_id,
                request.tool_name,
                arguments,
                request.request_id,
                request.evaluate or request.invoke,
                request.batch_id,
                request.execution_id,
            )
        settled = SETTLED.get()
        if settled is not None:
            settled.set()  # a pipelined Invoke behind it may start now
        if request.invoke:
            snapshot = await self.lifecycle.run_allowed(
                call.principal, request.session_id, snapshot, request.request_id
            )
            if snapshot.result is None:
                return pb.PrepareResponse(call=call_to_proto(snapshot))
            # The result once, in `result` (its text is most of the message).
            return pb.PrepareResponse(
                call=call_to_proto(dataclasses.replace(snapshot, result=None)),
                result=result_to_proto(snapshot.result),
            )
        return pb.PrepareResponse(call=call_to_proto(snapshot))

    async def approve(self, request: pb.ApproveRequest, call: Call) -> pb.ApproveResponse:
        wait = request.wait.seconds + request.wait.nanos / 1e9 if request.HasField("wait") else 0.0
        snapshot = await self.lifecycle.approve(
            call.principal, request.session_id, request.execution_id, wait
        )
        return pb.ApproveResponse(call=call_to_proto(snapshot))

    async def invoke(self, request: pb.InvokeRequest, call: Call) -> pb.InvokeResponse:
        snapshot = await self.lifecycle.invoke(
            call.principal,
            request.session_id,
            request.execution_id,
            request.request_id,
            detach=request.detach,
        )
        message = call_to_proto(snapshot)
        return pb.InvokeResponse(call=message, result=message.result)

    async def invoke_stream(self, request: pb.InvokeStreamRequest, call: Call) -> None:
        async def run(sink: OutputSink) -> CallSnapshot:
            snapshot = await self.lifecycle.invoke(
                call.principal, request.session_id, request.execution_id, request.request_id, sink
            )
            await self.lifecycle.journal.commit()
            return snapshot

        stream: OutputStream[CallSnapshot] = OutputStream(
            call.context,
            self.stream_budget,
            lambda data: pb.InvokeStreamResponse(output=pb.OutputChunk(data=data)),
            request.session_id,
        )
        await stream.serve(
            run, lambda snapshot: pb.InvokeStreamResponse(finished=call_to_proto(snapshot))
        )

    async def get_call(self, request: pb.GetCallRequest, call: Call) -> pb.GetCallResponse:
        snapshot = self.lifecycle.get_call(call.principal, request.session_id, request.execution_id)
        return pb.GetCallResponse(call=call_to_proto(snapshot))

    async def list_calls(self, request: pb.ListCallsRequest, call: Call) -> pb.ListCallsResponse:
        snapshots = self.lifecycle.list_calls(call.principal, request.session_id)
        return pb.ListCallsResponse(calls=[call_to_proto(s) for s in snapshots])

    async def cancel_call(self, request: pb.CancelCallRequest, call: Call) -> pb.CancelCallResponse:
        snapshot = self.lifecycle.cancel_call(
            call.principal, request.session_id, request.execution_id
        )
        return pb.CancelCallResponse(call=call_to_proto(snapshot))

    async def watch_call(self, request: pb.WatchCallRequest, call: Call) -> None:
        snapshots = self.lifecycle.watch_call(
            call.principal, request.session_id, request.execution_id
        )
        async for snapshot in snapshots:
            await call.context.write(pb.WatchCallResponse(call=call_to_proto(snapshot)))

    async def exchange(self, requests: AsyncIterator[pb.ExchangeRequest], call: Call) -> None:
        if self._stopping:
            raise shutting_down()
        stream = ExchangeStream(self._exchange_operations, call)
        self._exchanges.add(stream)
        try:
            await stream.serve(requests)
        finally:
            self._exchanges.discard(stream)
