"""Driving the approver side (ApprovalService) and watching calls, through the generated stubs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import grpc

from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import approval_service_pb2_grpc, tool_call_pb2, tool_service_pb2

from .server import Harness

if TYPE_CHECKING:
    from callgate.v1.approval_service_pb2_grpc import ApprovalServiceAsyncStub
    from callgate.v1.tool_service_pb2_grpc import ToolServiceAsyncStub


def approver(harness: Harness, role: str = "approver") -> ApprovalServiceAsyncStub:
    """An ApprovalService stub that sends `role`'s token."""
    return approval_service_pb2_grpc.ApprovalServiceStub(harness.channel(role))


class Watcher:
    """One WatchApprovals stream; every read is bounded."""

    def __init__(self, stub: ApprovalServiceAsyncStub) -> None:
        self.call: Any = stub.WatchApprovals(apb.WatchApprovalsRequest())

    async def next(self, within: float = 5.0) -> apb.WatchApprovalsResponse:
        with anyio.fail_after(within):
            item = await self.call.read()
        assert item is not grpc.aio.EOF, "the watch ended"
        assert isinstance(item, apb.WatchApprovalsResponse)
        return item

    async def approval(self, execution_id: str = "") -> apb.PendingApproval:
        """The next pending approval (of `execution_id` when given), skipping other items."""
        while True:
            item = await self.next()
            if item.WhichOneof("item") == "approval" and execution_id in (
                "",
                item.approval.call.execution_id,
            ):
                return item.approval

    async def question(self, execution_id: str = "") -> apb.PendingQuestion:
        while True:
            item = await self.next()
            if item.WhichOneof("item") == "question" and execution_id in (
                "",
                item.question.execution_id,
            ):
                return item.question

    async def resolved(self, execution_id: str) -> apb.Resolved:
        while True:
            item = await self.next()
            if item.WhichOneof("item") == "resolved" and item.resolved.execution_id == execution_id:
                return item.resolved

    def cancel(self) -> None:
        self.call.cancel()


async def decide(
    stub: ApprovalServiceAsyncStub,
    call: tool_call_pb2.ToolCall,
    kind: apb.DecisionKind.ValueType,
    note: str = "",
) -> tool_call_pb2.ToolCall:
    response = await stub.Decide(
        apb.DecideRequest(execution_id=call.execution_id, digest=call.digest, kind=kind, note=note),
        timeout=5,
    )
    return response.call


async def watch_call(
    stub: ToolServiceAsyncStub, session_id: str, execution_id: str, within: float = 5.0
) -> list[tool_call_pb2.ToolCall]:
    """Every message of a WatchCall stream until it ends."""
    calls: list[tool_call_pb2.ToolCall] = []
    with anyio.fail_after(within):
        async for response in stub.WatchCall(
            tool_service_pb2.WatchCallRequest(session_id=session_id, execution_id=execution_id)
        ):
            calls.append(response.call)
    return calls
