"""Short ways to drive the lifecycle through the generated stub."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from callgate.v1 import tool_call_pb2, tool_service_pb2

if TYPE_CHECKING:
    from callgate.v1.tool_service_pb2_grpc import ToolServiceAsyncStub as ToolServiceStub


async def open_session(stub: ToolServiceStub, workspace: str = "") -> str:
    response = await stub.OpenSession(tool_service_pb2.OpenSessionRequest(workspace=workspace))
    return response.session.session_id


async def prepare(
    stub: ToolServiceStub,
    session_id: str,
    tool: str,
    arguments: dict[str, object] | str,
    *,
    evaluate: bool = False,
    loop_id: str = "",
    request_id: str = "",
    batch_id: str = "",
) -> tool_call_pb2.ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    response = await stub.Prepare(
        tool_service_pb2.PrepareRequest(
            session_id=session_id,
            loop_id=loop_id,
            tool_name=tool,
            arguments_json=text,
            evaluate=evaluate,
            request_id=request_id,
            batch_id=batch_id,
        )
    )
    return response.call


async def approve(
    stub: ToolServiceStub, session_id: str, execution_id: str
) -> tool_call_pb2.ToolCall:
    response = await stub.Approve(
        tool_service_pb2.ApproveRequest(session_id=session_id, execution_id=execution_id)
    )
    return response.call


async def invoke(
    stub: ToolServiceStub, session_id: str, execution_id: str, request_id: str = ""
) -> tool_service_pb2.InvokeResponse:
    return await stub.Invoke(
        tool_service_pb2.InvokeRequest(
            session_id=session_id, execution_id=execution_id, request_id=request_id
        )
    )


async def run(
    stub: ToolServiceStub,
    session_id: str,
    tool: str,
    arguments: dict[str, object],
    loop_id: str = "",
) -> tool_service_pb2.InvokeResponse:
    """Fast path: Prepare(evaluate) then Invoke; the call must be approved by policy."""
    call = await prepare(stub, session_id, tool, arguments, evaluate=True, loop_id=loop_id)
    assert call.state == tool_call_pb2.STATE_APPROVED, (call.state, call.denial.description)
    return await invoke(stub, session_id, call.execution_id)
