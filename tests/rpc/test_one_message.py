"""PrepareRequest.invoke: one request and one answer for a call the policy allows; a gated or
denied call is answered as with evaluate and nothing runs; a repeat with the same request_id
returns the stored call and result and never runs it again (real server, generated stub)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import audit_service_pb2, audit_service_pb2_grpc, tool_call_pb2
from callgate.v1 import tool_service_pb2 as pb
from tests.support.approvals import Watcher, approver, decide
from tests.support.calls import open_session
from tests.support.server import Harness, serve
from tests.support.tools import Note

pytestmark = pytest.mark.anyio


@pytest.fixture
async def noting(tmp_path: Path) -> AsyncIterator[Harness]:
    allowed = str(tmp_path / "ws" / "allowed.txt")
    rule = {"effect": "allow", "kind": "filesystem.write", "match": allowed}
    async with serve(tmp_path, extra_tools=[Note()], rules=[rule]) as running:
        yield running


def _request(
    session_id: str, tool: str, arguments: dict[str, object], **extra: object
) -> pb.PrepareRequest:
    return pb.PrepareRequest(
        session_id=session_id,
        tool_name=tool,
        arguments_json=json.dumps(arguments),
        invoke=True,
        **extra,  # type: ignore[arg-type]
    )


async def _kinds(harness: Harness, execution_id: str) -> list[str]:
    stub = audit_service_pb2_grpc.AuditServiceStub(harness.channel("admin"))
    page = await stub.ListEvents(
        audit_service_pb2.ListEventsRequest(
            filter=audit_service_pb2.EventFilter(execution_id=execution_id)
        ),
        timeout=10,
    )
    return [e.kind for e in page.events]


async def test_an_allowed_call_is_prepared_run_and_answered_in_one_message(
    noting: Harness,
) -> None:
    (noting.workspace / "README.md").write_text("hello\n")
    stub = noting.stub()
    session_id = await open_session(stub)
    answer = await stub.Prepare(_request(session_id, "ReadFile", {"path": "README.md"}))
    assert answer.call.state == tool_call_pb2.STATE_SUCCEEDED
    assert "hello" in answer.result.text
    assert not answer.call.HasField("result")  # sent once, in `result`
    kinds = await _kinds(noting, answer.call.execution_id)
    assert kinds[:1] == ["call.prepared"]
    assert "call.invoked" in kinds


async def test_a_repeat_returns_the_stored_call_and_result_and_never_runs_again(
    noting: Harness,
) -> None:
    stub = noting.stub()
    session_id = await open_session(stub)
    request = _request(
        session_id, "Note", {"text": "once", "file": "allowed.txt"}, request_id=str(uuid.uuid4())
    )
    first = await stub.Prepare(request)
    second = await stub.Prepare(request)
    assert first.call.state == tool_call_pb2.STATE_SUCCEEDED
    assert second.call.execution_id == first.call.execution_id
    assert second.result.text == first.result.text
    assert (noting.workspace / "allowed.txt").read_text() == "once\n"


async def test_a_gated_call_is_answered_as_gated_and_runs_only_by_its_invoke(
    noting: Harness,
) -> None:
    stub = noting.stub()
    session_id = await open_session(stub)
    request = _request(session_id, "Note", {"text": "gated"}, request_id=str(uuid.uuid4()))
    watcher = Watcher(approver(noting))
    try:
        answer = await stub.Prepare(request)
        pending = await watcher.approval(answer.call.execution_id)
    finally:
        watcher.cancel()
    assert answer.call.state == tool_call_pb2.STATE_AWAITING_APPROVAL
    assert not answer.HasField("result")
    assert not (noting.workspace / "notes.txt").exists()
    await decide(approver(noting), pending.call, apb.DECISION_KIND_APPROVE_ONCE)
    again = await stub.Prepare(request)  # a human approved it: its Invoke runs it, not this
    assert again.call.state == tool_call_pb2.STATE_APPROVED
    assert not again.HasField("result")
    assert not (noting.workspace / "notes.txt").exists()
    invoked = await stub.Invoke(
        pb.InvokeRequest(session_id=session_id, execution_id=answer.call.execution_id)
    )
    assert invoked.call.state == tool_call_pb2.STATE_SUCCEEDED
    assert (noting.workspace / "notes.txt").read_text() == "gated\n"


async def test_a_denied_call_is_answered_denied_and_nothing_runs(noting: Harness) -> None:
    (noting.workspace / ".env").write_text("SECRET=1\n")
    stub = noting.stub()
    session_id = await open_session(stub)
    answer = await stub.Prepare(_request(session_id, "ReadFile", {"path": ".env"}))
    assert answer.call.state == tool_call_pb2.STATE_DENIED
    assert not answer.HasField("result")
    assert "call.invoked" not in await _kinds(noting, answer.call.execution_id)
