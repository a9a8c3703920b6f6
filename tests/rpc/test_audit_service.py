"""AuditService over real gRPC: listing with filters and pages, following, roles, bad input."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import grpc
import pytest
from google.protobuf import timestamp_pb2

from callgate.client import CallgateClient, InvalidRequestError, PermissionDeniedError
from callgate.v1 import audit_service_pb2 as pb
from callgate.v1 import audit_service_pb2_grpc, tool_service_pb2
from tests.support.calls import open_session, run
from tests.support.server import Harness, serve
from tests.support.status import failure

pytestmark = pytest.mark.anyio


def audit_stub(
    harness: Harness, role: str = "approver"
) -> audit_service_pb2_grpc.AuditServiceAsyncStub:
    return audit_service_pb2_grpc.AuditServiceStub(harness.channel(role))


async def scripted(harness: Harness) -> tuple[str, list[str]]:
    """One session with three reads; returns its ID and the execution IDs."""
    (harness.workspace / "a.txt").write_text("a\n")
    stub = harness.stub()
    session = await open_session(stub)
    executions = []
    for _ in range(3):
        response = await run(stub, session, "ReadFile", {"path": "a.txt"})
        executions.append(response.call.execution_id)
    return session, executions


async def list_all(
    stub: audit_service_pb2_grpc.AuditServiceAsyncStub,
    page_size: int,
    session_id: str = "",
    execution_id: str = "",
    kind: str = "",
) -> tuple[list[pb.AuditEvent], int]:
    events: list[pb.AuditEvent] = []
    token, pages = "", 0
    while True:
        page = await stub.ListEvents(
            pb.ListEventsRequest(
                filter=pb.EventFilter(session_id=session_id, execution_id=execution_id, kind=kind),
                page_size=page_size,
                page_token=token,
            )
        )
        pages += 1
        events += page.events
        if not page.next_page_token:
            return events, pages
        token = page.next_page_token


async def test_list_events_filters_and_pages_through_everything_once_in_order(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path) as harness:
        session, executions = await scripted(harness)
        stub = audit_stub(harness)
        everything, _ = await list_all(stub, 0)
        seqs = [e.seq for e in everything]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        assert [e.kind for e in everything][:2] == ["server.started", "session.opened"]

        paged, pages = await list_all(stub, 2)
        assert paged == everything
        assert pages == (len(everything) + 1) // 2

        first = [e.kind for e in (await list_all(stub, 0, execution_id=executions[0]))[0]]
        assert first == ["call.prepared", "call.decided", "call.invoked", "call.finished"]
        finished, _ = await list_all(stub, 0, kind="call.finished")
        assert [e.execution_id for e in finished] == executions
        assert all(json.loads(e.data_json)["state"] == "succeeded" for e in finished)
        calls, _ = await list_all(stub, 0, kind="call.", session_id=session)
        assert len(calls) == 12
        assert {e.session_id for e in calls} == {session}
        assert (await list_all(stub, 0, session_id="sess_nobody"))[0] == []

        later = datetime.now(UTC) + timedelta(hours=1)
        stamp = timestamp_pb2.Timestamp()
        stamp.FromDatetime(later)
        future = await stub.ListEvents(
            pb.ListEventsRequest(filter=pb.EventFilter(start_time=stamp))
        )
        assert list(future.events) == []
        past = await stub.ListEvents(pb.ListEventsRequest(filter=pb.EventFilter(end_time=stamp)))
        assert len(past.events) == len(everything)


@pytest.mark.parametrize(
    ("request_message", "field"),
    [
        (pb.ListEventsRequest(page_size=-1), "page_size"),
        (pb.ListEventsRequest(page_size=1001), "page_size"),
        (pb.ListEventsRequest(page_token="not-a-token"), "page_token"),
        (pb.ListEventsRequest(page_token="YWZ0ZXI6LTE="), "page_token"),  # "after:-1"
        # "after:9223372036854775808": beyond SQLite's integers
        (pb.ListEventsRequest(page_token="YWZ0ZXI6OTIyMzM3MjAzNjg1NDc3NTgwOA=="), "page_token"),
        (pb.ListEventsRequest(filter=pb.EventFilter(kind="Call.*")), "filter.kind"),
        (pb.ListEventsRequest(filter=pb.EventFilter(kind="x" * 65)), "filter.kind"),
        (pb.ListEventsRequest(filter=pb.EventFilter(session_id="s" * 129)), "filter.session_id"),
        (
            pb.ListEventsRequest(filter=pb.EventFilter(execution_id="a\nb")),
            "filter.execution_id",
        ),
        (
            pb.ListEventsRequest(
                filter=pb.EventFilter(start_time=timestamp_pb2.Timestamp(seconds=2**62))
            ),
            "filter.start_time",
        ),
        (
            pb.ListEventsRequest(
                filter=pb.EventFilter(
                    start_time=timestamp_pb2.Timestamp(seconds=2000),
                    end_time=timestamp_pb2.Timestamp(seconds=1000),
                )
            ),
            "filter.end_time",
        ),
    ],
)
async def test_bad_list_requests_are_request_invalid_naming_the_field(
    tmp_path: Path, request_message: pb.ListEventsRequest, field: str
) -> None:
    async with serve(tmp_path) as harness:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await audit_stub(harness).ListEvents(request_message)
    got = failure(caught.value)
    assert (got.code, got.reason, got.fields) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "REQUEST_INVALID",
        [field],
    )
    assert got.message.startswith(f"Invalid request: {field}: ")


async def test_agents_cannot_read_the_journal_approvers_and_admins_can(tmp_path: Path) -> None:
    async with serve(tmp_path) as harness:
        for role in ("approver", "admin"):
            assert (await audit_stub(harness, role).ListEvents(pb.ListEventsRequest())).events
        agent = audit_stub(harness, "agent")
        with pytest.raises(grpc.aio.AioRpcError) as listed:
            await agent.ListEvents(pb.ListEventsRequest())
        with pytest.raises(grpc.aio.AioRpcError) as watched:
            async for _ in agent.WatchEvents(pb.WatchEventsRequest()):
                pass
        nobody = audit_service_pb2_grpc.AuditServiceStub(harness.channel(None))
        with pytest.raises(grpc.aio.AioRpcError) as anonymous:
            await nobody.ListEvents(pb.ListEventsRequest())
    for caught in (listed, watched):
        got = failure(caught.value)
        assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "ROLE_REQUIRED")
    assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_watch_replays_after_a_seq_then_follows_new_events(tmp_path: Path) -> None:
    async with serve(tmp_path) as harness:
        session, executions = await scripted(harness)
        stub = audit_stub(harness)
        finished, _ = await list_all(stub, 0, kind="call.finished")
        call = stub.WatchEvents(
            pb.WatchEventsRequest(
                filter=pb.EventFilter(kind="call.finished"), after_seq=finished[0].seq
            )
        )
        stream = aiter(call)
        with anyio.fail_after(10):
            replayed = [await anext(stream), await anext(stream)]
        assert [r.event.execution_id for r in replayed] == executions[1:]
        response = await run(harness.stub(), session, "ReadFile", {"path": "a.txt"})
        with anyio.fail_after(10):
            live = await anext(stream)
        assert live.event.execution_id == response.call.execution_id
        assert live.event.kind == "call.finished"
        call.cancel()


async def test_shutdown_ends_a_watch_with_shutting_down(tmp_path: Path) -> None:
    async with serve(tmp_path) as harness:
        stub = audit_stub(harness)
        call = stub.WatchEvents(pb.WatchEventsRequest())
        stream = aiter(call)
        with anyio.fail_after(10):
            assert (await anext(stream)).event.kind == "server.started"
        # What the server's drain does first on SIGTERM.
        harness.app.audit.begin_shutdown()
        with anyio.fail_after(10), pytest.raises(grpc.aio.AioRpcError) as caught:
            await anext(stream)
    got = failure(caught.value)
    assert (got.code, got.reason) == (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN")


async def test_the_client_lists_and_follows_with_typed_events_and_errors(tmp_path: Path) -> None:
    async with serve(tmp_path) as harness:
        session, executions = await scripted(harness)
        async with CallgateClient(harness.tcp_target, token=harness.tokens["approver"]) as client:
            events = [e async for e in client.audit.events(session_id=session, page_size=3)]
            assert next(e.kind for e in events) == "session.opened"
            assert [e.execution_id for e in events if e.kind == "call.finished"] == executions
            assert events[-1].data["state"] == "succeeded"
            page = await client.audit.list_events(kind="call.", page_size=5)
            assert len(page.events) == 5
            assert page.next_page_token
            with pytest.raises(InvalidRequestError) as bad:
                await client.audit.list_events(kind="*")
            assert bad.value.violations[0].field == "filter.kind"
            watch = client.audit.watch(kind="session.", after_seq=events[-1].seq)
            await harness.stub().CloseSession(
                tool_service_pb2.CloseSessionRequest(session_id=session)
            )
            with anyio.fail_after(10):
                closed = await anext(watch)
            await watch.aclose()
            assert (closed.kind, closed.session_id) == ("session.closed", session)
        async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as agent:
            with pytest.raises(PermissionDeniedError):
                await agent.audit.list_events()
