"""An execution ID names one call, ever: a client-chosen ID the journal holds is refused, after
its session closed and after a restart, so the audit trail of an ID is one call's story."""

from __future__ import annotations

import uuid
from pathlib import Path

import grpc
import pytest

from callgate.v1 import audit_service_pb2 as apb
from callgate.v1 import audit_service_pb2_grpc
from callgate.v1 import tool_service_pb2 as tpb
from tests.support.calls import invoke, open_session
from tests.support.server import Harness, serve
from tests.support.status import failure

pytestmark = pytest.mark.anyio


async def _prepare_as(harness: Harness, session: str, execution_id: str) -> tpb.PrepareResponse:
    (harness.workspace / "a.txt").write_text("a\n")
    return await harness.stub().Prepare(
        tpb.PrepareRequest(
            session_id=session,
            tool_name="ReadFile",
            arguments_json='{"path": "a.txt"}',
            execution_id=execution_id,
            evaluate=True,
        )
    )


async def _refused(harness: Harness, session: str, execution_id: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _prepare_as(harness, session, execution_id)
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert failure(caught.value).reason == "EXECUTION_ID_EXISTS"


async def _events(harness: Harness, execution_id: str) -> list[apb.AuditEvent]:
    stub = audit_service_pb2_grpc.AuditServiceStub(harness.channel("admin"))
    request = apb.ListEventsRequest(filter=apb.EventFilter(execution_id=execution_id))
    response = await stub.ListEvents(request)
    return list(response.events)


async def test_an_id_is_refused_after_its_session_closed(tmp_path: Path) -> None:
    chosen = "call_" + uuid.uuid4().hex
    async with serve(tmp_path) as harness:
        stub = harness.stub()
        first = await open_session(stub)
        prepared = await _prepare_as(harness, first, chosen)
        await invoke(stub, first, prepared.call.execution_id)
        await stub.CloseSession(tpb.CloseSessionRequest(session_id=first))
        await _refused(harness, await open_session(stub), chosen)
        events = await _events(harness, chosen)
    assert {event.session_id for event in events} == {first}
    assert [event.kind for event in events][-1] == "call.finished"


async def test_an_id_is_refused_after_a_restart(tmp_path: Path) -> None:
    chosen = "call_" + uuid.uuid4().hex
    async with serve(tmp_path) as harness:
        session = await open_session(harness.stub())
        await _prepare_as(harness, session, chosen)
    async with serve(tmp_path) as harness:  # the same state directory: the same journal
        await _refused(harness, await open_session(harness.stub()), chosen)
        events = await _events(harness, chosen)
    assert {event.session_id for event in events} == {session}
    assert [event.kind for event in events].count("call.prepared") == 1


async def test_a_fresh_id_is_still_taken(tmp_path: Path) -> None:
    async with serve(tmp_path) as harness:
        session = await open_session(harness.stub())
        chosen = "call_" + uuid.uuid4().hex
        prepared = await _prepare_as(harness, session, chosen)
        assert prepared.call.execution_id == chosen
