"""InvokeRequest.detach: a call whose Invoke RPC is cancelled (its client went away) runs to its
end when the Invoke asked for it, and an Invoke with the same request_id gets the outcome;
without it, cancelling the RPC cancels the call. A detached Invoke needs a request_id."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import grpc
import pytest

from callgate.server.core.models import ToolResult
from callgate.server.core.tool import ToolContext
from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_call_pb2, tool_service_pb2
from tests.support.approvals import Watcher, approver, decide, watch_call
from tests.support.calls import open_session, prepare
from tests.support.server import Harness, serve
from tests.support.tools import Note, NoteArtifact

pytestmark = pytest.mark.anyio


class HeldNote(Note):
    """Appends "start", waits until the test releases it, appends "end"."""

    name = "HeldNote"
    started = anyio.Event()
    release = anyio.Event()

    async def run(self, artifact: NoteArtifact, ctx: ToolContext) -> ToolResult:
        with open(artifact.path, "a", encoding="utf-8") as handle:
            handle.write("start\n")
        type(self).started.set()
        await type(self).release.wait()
        with open(artifact.path, "a", encoding="utf-8") as handle:
            handle.write("end\n")
        return ToolResult(text="held and done")


@pytest.fixture
async def held(tmp_path: Path) -> AsyncIterator[Harness]:
    HeldNote.started, HeldNote.release = anyio.Event(), anyio.Event()
    async with serve(tmp_path, extra_tools=[HeldNote()]) as running:
        yield running


async def _approved(harness: Harness) -> tuple[str, tool_call_pb2.ToolCall]:
    stub = harness.stub()
    session_id = await open_session(stub)
    watcher = Watcher(approver(harness))
    try:
        call = await prepare(stub, session_id, "HeldNote", {"text": "x"}, evaluate=True)
        pending = await watcher.approval(call.execution_id)
    finally:
        watcher.cancel()
    await decide(approver(harness), pending.call, apb.DECISION_KIND_APPROVE_ONCE)
    return session_id, call


async def _invoke_then_hang_up(
    harness: Harness, session_id: str, execution_id: str, request_id: str, detach: bool
) -> None:
    rpc = harness.stub().Invoke(
        tool_service_pb2.InvokeRequest(
            session_id=session_id, execution_id=execution_id, request_id=request_id, detach=detach
        )
    )
    with anyio.fail_after(10):
        await HeldNote.started.wait()
    rpc.cancel()  # the client goes away mid-run


async def test_a_detached_call_runs_to_its_end_and_its_outcome_comes_back(held: Harness) -> None:
    session_id, call = await _approved(held)
    request_id = str(uuid.uuid4())
    await _invoke_then_hang_up(held, session_id, call.execution_id, request_id, detach=True)
    HeldNote.release.set()
    with anyio.fail_after(10):
        again = await held.stub().Invoke(
            tool_service_pb2.InvokeRequest(
                session_id=session_id, execution_id=call.execution_id, request_id=request_id
            )
        )
    assert again.call.state == tool_call_pb2.STATE_SUCCEEDED
    assert again.result.text == "held and done"
    assert (held.workspace / "notes.txt").read_text() == "start\nend\n"


async def test_without_detach_hanging_up_cancels_the_call(held: Harness) -> None:
    session_id, call = await _approved(held)
    await _invoke_then_hang_up(held, session_id, call.execution_id, "", detach=False)
    # The stream ends once the call has ended: the server saw the RPC go away.
    ended = (await watch_call(held.stub(), session_id, call.execution_id, within=10))[-1]
    HeldNote.release.set()
    assert ended.state == tool_call_pb2.STATE_CANCELLED
    assert (held.workspace / "notes.txt").read_text() == "start\n"


async def test_a_detached_invoke_needs_a_request_id(held: Harness) -> None:
    session_id, call = await _approved(held)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await held.stub().Invoke(
            tool_service_pb2.InvokeRequest(
                session_id=session_id, execution_id=call.execution_id, detach=True
            )
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "request_id" in (refused.value.details() or "")
    assert not (held.workspace / "notes.txt").exists()
