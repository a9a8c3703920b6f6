"""Slow readers never break streams.

The attack: an InvokeStream reader that stops reading for a few seconds. The command's output
pump was blocked in a gRPC write when the command ended; two seconds later it was cancelled
mid-write and the handler wrote the final message on top of the pending one, so the RPC ended
INTERNAL (`GRPC_CALL_ERROR_TOO_MANY_OPERATIONS`) although the call SUCCEEDED. Now one task
writes each stream and output is buffered (bounded per stream, per session and server-wide).
A reader that pauses paces the command (it waits on its pipe, as with a terminal) and gets every
byte within the call's own time limit; only a stream that finds the server-wide buffer full with
nothing of its own to wait on gets RESOURCE_EXHAUSTED `STREAM_BACKLOG` — never INTERNAL, and the
call's outcome unaffected.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import grpc
import pytest

from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import audit_service_pb2 as apb_audit
from callgate.v1 import audit_service_pb2_grpc
from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.support.approvals import approver
from tests.support.calls import open_session, prepare
from tests.support.sandbox import bwrap_only
from tests.support.server import serve
from tests.support.status import failure

if TYPE_CHECKING:
    from callgate.v1.tool_service_pb2_grpc import ToolServiceAsyncStub

pytestmark = pytest.mark.anyio

MIB = 1 << 20


async def stream(
    stub: ToolServiceAsyncStub, session: str, command: str, pause: float, limit: float = 30
) -> tuple[int, tpb.InvokeStreamResponse | None, grpc.aio.AioRpcError | None]:
    """InvokeStream a command, stop reading for `pause` seconds after the first message;
    returns (output bytes read, the final message, the RPC error)."""
    arguments = {"command": command, "timeout": limit}
    call = await prepare(stub, session, "Bash", arguments, evaluate=True)
    assert call.state == cpb.STATE_APPROVED
    responses = stub.InvokeStream(
        tpb.InvokeStreamRequest(session_id=session, execution_id=call.execution_id)
    )
    received, final, paused = 0, None, False
    try:
        async for response in responses:
            if not paused:
                paused = True
                await asyncio.sleep(pause)
            if response.WhichOneof("event") == "output":
                received += len(response.output.data)
            else:
                final = response
    except grpc.aio.AioRpcError as error:
        return received, final, error
    return received, final, None


@bwrap_only[0]
@bwrap_only[1]
async def test_a_reader_that_pauses_gets_every_byte_and_the_outcome(tmp_path: Path) -> None:
    limits = {"stream_buffer_bytes": 32 * MIB}
    async with serve(
        tmp_path, sandbox="bwrap", access={"command": "allow"}, limits=limits
    ) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        # More than gRPC's buffers hold (~6 MiB here), less than the stream's buffer; the
        # reader sleeps past the command's 3 s time limit. The old pump blocked in a write,
        # the command was killed at its limit, and the final message broke the stream.
        size = 20 * MIB
        received, final, error = await stream(
            stub, session, f"head -c {size} /dev/zero | tr '\\0' a", pause=6.0, limit=3
        )
        assert error is None, (error.code(), error.details()) if error else None
        assert final is not None
        assert final.finished.state == cpb.STATE_SUCCEEDED
        assert received == size


@bwrap_only[0]
@bwrap_only[1]
async def test_a_reader_that_keeps_reading_paces_the_command_and_gets_every_byte(
    tmp_path: Path,
) -> None:
    """Output far bigger than the stream's buffer, produced far faster than any reader takes
    it: the command waits for a reader that keeps reading (as a terminal makes it wait)
    instead of the stream being given up."""
    limits = {"stream_buffer_bytes": 1 * MIB}
    async with serve(
        tmp_path, sandbox="bwrap", access={"command": "allow"}, limits=limits
    ) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        size = 64 * MIB
        received, final, error = await stream(
            stub, session, f"head -c {size} /dev/zero | tr '\\0' c", pause=0.5
        )
        assert error is None, (error.code(), error.details()) if error else None
        assert final is not None
        assert final.finished.state == cpb.STATE_SUCCEEDED
        assert received == size
        assert harness.app.tool_servicer.stream_budget.buffered == 0


@bwrap_only[0]
@bwrap_only[1]
async def test_a_reader_that_pauses_longer_than_its_buffer_gets_every_byte(
    tmp_path: Path,
) -> None:
    """24 MiB through a 1 MiB buffer to a reader that stops for 4 s: the command waits for
    it (the stream was given up here before, STREAM_BACKLOG after 1 s)."""
    limits = {"stream_buffer_bytes": 1 * MIB}
    async with serve(
        tmp_path, sandbox="bwrap", access={"command": "allow"}, limits=limits
    ) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        received, final, error = await stream(
            stub, session, f"head -c {24 * MIB} /dev/zero | tr '\\0' b", pause=4.0
        )
        assert error is None, (error.code(), error.details()) if error else None
        assert final is not None
        assert final.finished.state == cpb.STATE_SUCCEEDED
        assert received == 24 * MIB
        assert harness.app.tool_servicer.stream_budget.buffered == 0


async def _paused_stream(stub: ToolServiceAsyncStub, session: str, read_one: bool = True) -> Any:
    """An InvokeStream of a long, loud command whose reader takes one message (or none, when
    its session's share may already be full), then none."""
    arguments = {"command": "cat /dev/zero", "timeout": 60}
    call = await prepare(stub, session, "Bash", arguments, evaluate=True)
    responses = stub.InvokeStream(
        tpb.InvokeStreamRequest(session_id=session, execution_id=call.execution_id)
    )
    if read_one:
        await responses.read()
    return responses


@bwrap_only[0]
@bwrap_only[1]
async def test_one_session_holds_at_most_its_share_and_a_stream_is_given_up_only_when_all_is_full(
    tmp_path: Path,
) -> None:
    """Stream buffers: 1 MiB per stream, 2 MiB in all, a session's share half of it. Two
    paused streams of one session together stay within 1 MiB; a second session's paused
    stream takes the rest; only then does a third session's stream find nothing to wait on
    and end with STREAM_BACKLOG (its call runs on)."""
    limits = {"stream_buffer_bytes": 1 * MIB, "stream_buffer_total_bytes": 2 * MIB}
    async with serve(
        tmp_path, sandbox="bwrap", access={"command": "allow"}, limits=limits
    ) as harness:
        stub = harness.stub()
        budget = harness.app.tool_servicer.stream_budget
        first = await open_session(stub)
        paused = [await _paused_stream(stub, first)]
        # The session's share is full now: a second stream of it waits (its command too).
        paused.append(await _paused_stream(stub, first, read_one=False))
        second = await open_session(stub)
        paused.append(await _paused_stream(stub, second))
        with anyio.fail_after(60):  # the buffers fill at the speed of cat: a wait on that
            while budget.buffered + 64 * 1024 <= budget.total:
                await budget.taken().wait()
        assert budget.by_session[first] <= budget.per_session
        assert budget.by_session[second] <= budget.per_session
        third = await open_session(stub)
        _, final, error = await stream(
            stub, third, f"head -c {4 * MIB} /dev/zero", pause=0.0, limit=30
        )
        assert final is None
        assert error is not None
        assert failure(error).reason == "STREAM_BACKLOG"
        for responses in paused:
            responses.cancel()


@bwrap_only[0]
@bwrap_only[1]
async def test_a_reader_that_never_reads_pins_no_memory_and_does_not_hold_shutdown(
    tmp_path: Path,
) -> None:
    limits = {"stream_buffer_bytes": 1 * MIB}
    async with serve(
        tmp_path, sandbox="bwrap", access={"command": "allow"}, limits=limits
    ) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        call = await prepare(
            stub,
            session,
            "Bash",
            {"command": "head -c 50000000 /dev/zero", "timeout": 3},
            evaluate=True,
        )
        responses = stub.InvokeStream(
            tpb.InvokeStreamRequest(session_id=session, execution_id=call.execution_id)
        )
        await responses.read()  # the first chunk, then never again
        budget = harness.app.tool_servicer.stream_budget
        # WatchCall ends after the call's terminal state: a wait on that event, bounded only
        # against a failure.
        async with asyncio.timeout(60):
            changes = stub.WatchCall(
                tpb.WatchCallRequest(session_id=session, execution_id=call.execution_id)
            )
            states = [response.call.state async for response in changes]
        # The command waited for its reader until its own time limit (as on a terminal).
        assert states[-1] == cpb.STATE_FAILED
        assert budget.buffered <= 1 * MIB
        responses.cancel()
    # Leaving `serve` stopped the server with the stream still open: it did not hang.


async def test_a_slow_event_watcher_gets_every_event(tmp_path: Path) -> None:
    """WatchEvents reads the journal as the watcher asks: a slow one loses nothing and the
    server buffers nothing for it."""
    async with serve(tmp_path, access={"workspace_write": "deny"}) as harness:
        stub = harness.stub()
        audit = audit_service_pb2_grpc.AuditServiceStub(harness.channel("admin"))
        watch = audit.WatchEvents(apb_audit.WatchEventsRequest())
        await watch.wait_for_connection()
        session = await open_session(stub)
        for index in range(300):
            await prepare(
                stub, session, "WriteFile", {"path": f"e{index}", "content": "x"}, evaluate=True
            )
        await harness.app.journal.flush()
        await asyncio.sleep(1.0)  # the watcher lags behind the flood
        seqs: list[int] = []
        while len(seqs) < 601:  # session.opened, then call.prepared and call.decided each
            response = await asyncio.wait_for(watch.read(), 5)
            assert isinstance(response, apb_audit.WatchEventsResponse)
            seqs.append(response.event.seq)
            await asyncio.sleep(0.001)
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        watch.cancel()


async def test_a_slow_approval_watcher_gets_every_item_or_a_clear_error(tmp_path: Path) -> None:
    """WatchApprovals keeps a bounded queue per watcher (gRPC's flow-control windows hold a few
    MiB more): a watcher that lags behind a flood of 1,150 approvals gets each of them, or is
    ended with RESOURCE_EXHAUSTED WATCH_QUEUE_FULL and can watch again; never INTERNAL."""
    async with serve(tmp_path) as harness:
        stub = harness.stub()
        approvals = approver(harness)
        watch = approvals.WatchApprovals(apb.WatchApprovalsRequest())
        session = await open_session(stub)
        await prepare(stub, session, "WriteFile", {"path": "w", "content": "x"}, evaluate=True)
        await asyncio.wait_for(watch.read(), 5)  # subscribed; it lags from here on
        flood = 1
        for _ in range(5):
            session = await open_session(stub)
            for index in range(230):
                await prepare(
                    stub, session, "WriteFile", {"path": f"w{index}", "content": "x"}, evaluate=True
                )
                flood += 1
        seen = 1
        try:
            while seen < flood:
                item = await asyncio.wait_for(watch.read(), 5)
                assert isinstance(item, apb.WatchApprovalsResponse)
                seen += item.WhichOneof("item") == "approval"
                await asyncio.sleep(0.0005)
        except grpc.aio.AioRpcError as error:
            details = failure(error)
            assert details.code is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert details.reason == "WATCH_QUEUE_FULL"
        else:
            assert seen == flood
        watch.cancel()


async def test_a_slow_call_watcher_gets_the_latest_state(tmp_path: Path) -> None:
    async with serve(tmp_path) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        call = await prepare(stub, session, "WriteFile", {"path": "c", "content": "x"})
        watch = stub.WatchCall(
            tpb.WatchCallRequest(session_id=session, execution_id=call.execution_id)
        )
        first = await watch.read()
        assert isinstance(first, tpb.WatchCallResponse)
        assert first.call.state == cpb.STATE_PREPARED
        await stub.CancelCall(
            tpb.CancelCallRequest(session_id=session, execution_id=call.execution_id)
        )
        await asyncio.sleep(1.0)
        states = [response.call.state async for response in watch]
        assert states[-1] == cpb.STATE_CANCELLED
