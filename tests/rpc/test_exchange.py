"""ToolService.Exchange: the lifecycle operations over one bidirectional stream, with the
semantics and errors of their unary RPCs, through the generated stub."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import grpc
import pytest
from google.protobuf import duration_pb2

from callgate.v1 import tool_call_pb2, tool_service_pb2, tool_service_pb2_grpc
from tests.support.calls import open_session, prepare
from tests.support.server import Harness, serve
from tests.support.status import failure, status_failure
from tests.support.tools import Slow

if TYPE_CHECKING:
    from callgate.v1.tool_service_pb2_grpc import ToolServiceAsyncStub

pytestmark = pytest.mark.anyio

Request = tool_service_pb2.ExchangeRequest
Response = tool_service_pb2.ExchangeResponse
Stream = grpc.aio.StreamStreamCall[Request, Response]
Code = grpc.StatusCode
WRITE: dict[str, object] = {"path": "g.txt", "content": "x"}
INVOKE_ID = "5b0c33a4-4f43-4f38-9d1e-2c61f7c0e8a1"


def _prepare(
    request_id: int,
    session_id: str,
    tool: str,
    arguments: dict[str, object],
    *,
    evaluate: bool = True,
    invoke_request_id: str = "",
) -> Request:
    return Request(
        id=request_id,
        prepare=tool_service_pb2.PrepareRequest(
            session_id=session_id,
            tool_name=tool,
            arguments_json=json.dumps(arguments),
            evaluate=evaluate,
            request_id=invoke_request_id,
        ),
    )


def _approve(request_id: int, session_id: str, execution_id: str, wait: float = 0) -> Request:
    duration = duration_pb2.Duration()
    duration.FromNanoseconds(round(wait * 1e9))
    return Request(
        id=request_id,
        approve=tool_service_pb2.ApproveRequest(
            session_id=session_id, execution_id=execution_id, wait=duration
        ),
    )


def _invoke(request_id: int, session_id: str, execution_id: str, invoke_id: str = "") -> Request:
    return Request(
        id=request_id,
        invoke=tool_service_pb2.InvokeRequest(
            session_id=session_id, execution_id=execution_id, request_id=invoke_id
        ),
    )


def _get(request_id: int, session_id: str, execution_id: str) -> Request:
    return Request(
        id=request_id,
        get_call=tool_service_pb2.GetCallRequest(session_id=session_id, execution_id=execution_id),
    )


def _cancel(request_id: int, session_id: str, execution_id: str) -> Request:
    return Request(
        id=request_id,
        cancel_call=tool_service_pb2.CancelCallRequest(
            session_id=session_id, execution_id=execution_id
        ),
    )


async def _receive(stream: Stream) -> Response:
    response = await stream.read()
    assert isinstance(response, Response), "the stream ended early"
    return response


async def _ask(stream: Stream, request: Request) -> Response:
    """Sends one operation and reads its answer (nothing else may be in flight)."""
    await stream.write(request)
    response = await _receive(stream)
    assert response.id == request.id
    return response


async def _receive_all(stream: Stream, count: int) -> dict[int, Response]:
    responses: dict[int, Response] = {}
    for _ in range(count):
        response = await _receive(stream)
        assert response.id not in responses
        responses[response.id] = response
    return responses


@pytest.fixture
async def stub(harness: Harness) -> ToolServiceAsyncStub:
    return harness.stub()


@pytest.fixture
async def stream(stub: ToolServiceAsyncStub) -> AsyncIterator[Stream]:
    call = stub.Exchange()
    try:
        yield call
    finally:
        call.cancel()


async def _gated_call(stream: Stream, session: str, request_id: int) -> str:
    """Prepares a workspace write, which waits for a human in interactive mode."""
    response = await _ask(stream, _prepare(request_id, session, "WriteFile", WRITE))
    assert response.prepare.call.state == tool_call_pb2.STATE_AWAITING_APPROVAL
    return response.prepare.call.execution_id


async def test_prepare_and_invoke_over_the_stream_read_a_file(
    harness: Harness, stub: ToolServiceAsyncStub, stream: Stream
) -> None:
    """Prepare(evaluate) then Invoke on one stream run the fast path, each answer echoing its id."""
    (harness.workspace / "a.txt").write_text("alpha\nbeta\n")
    with anyio.fail_after(5):
        session = await open_session(stub)
        prepared = await _ask(stream, _prepare(7, session, "ReadFile", {"path": "a.txt"}))
        assert prepared.WhichOneof("outcome") == "prepare"
        call = prepared.prepare.call
        assert call.state == tool_call_pb2.STATE_APPROVED
        invoked = await _ask(stream, _invoke(8, session, call.execution_id))
    assert invoked.WhichOneof("outcome") == "invoke"
    assert invoked.invoke.call.state == tool_call_pb2.STATE_SUCCEEDED
    assert invoked.invoke.result.text.startswith("     1\talpha\n     2\tbeta")
    assert invoked.invoke.result == invoked.invoke.call.result


async def test_answers_arrive_in_completion_order(
    harness: Harness, stub: ToolServiceAsyncStub, stream: Stream
) -> None:
    """A waiting Approve does not hold up the operations sent after it on the same stream."""
    (harness.workspace / "a.txt").write_text("a\n")
    with anyio.fail_after(5):
        session = await open_session(stub)
        gated = await _gated_call(stream, session, 1)
        await stream.write(_approve(2, session, gated, wait=30))
        read = await _ask(stream, _prepare(3, session, "ReadFile", {"path": "a.txt"}))
        invoked = await _ask(stream, _invoke(4, session, read.prepare.call.execution_id))
        assert invoked.invoke.call.state == tool_call_pb2.STATE_SUCCEEDED
        await stream.write(_cancel(5, session, gated))
        answers = await _receive_all(stream, 2)
    assert answers[5].cancel_call.call.state == tool_call_pb2.STATE_CANCELLED
    # As over the unary RPC, an Approve whose call was cancelled while it waited says so.
    assert status_failure(answers[2].error).reason == "CALL_STATE_INVALID"


async def test_many_pipelined_operations_are_all_answered(
    harness: Harness, stub: ToolServiceAsyncStub, stream: Stream
) -> None:
    """Operations sent back to back without waiting each get exactly one answer with their id.
    (16 invocations: the session's limit of concurrent invocations, which pipelined invokes
    waiting for their journal commit really are.)"""
    (harness.workspace / "a.txt").write_text("a\n")
    with anyio.fail_after(5):
        session = await open_session(stub)
        for request_id in range(100, 140):
            await stream.write(_prepare(request_id, session, "ReadFile", {"path": "a.txt"}))
        prepared = await _receive_all(stream, 40)
        for request_id, response in sorted(prepared.items())[:16]:
            await stream.write(
                _invoke(request_id + 1000, session, response.prepare.call.execution_id)
            )
        invoked = await _receive_all(stream, 16)
    assert sorted(prepared) == list(range(100, 140))
    assert sorted(invoked) == list(range(1100, 1116))
    assert {r.invoke.call.state for r in invoked.values()} == {tool_call_pb2.STATE_SUCCEEDED}


async def test_a_failed_operation_is_answered_with_its_status_and_the_stream_goes_on(
    harness: Harness, stub: ToolServiceAsyncStub, stream: Stream
) -> None:
    """Bad arguments, an unknown session and another principal's call are per-operation errors
    with the unary RPC's code, reason and field violations; later operations still run."""
    (harness.workspace / "a.txt").write_text("a\n")
    with anyio.fail_after(5):
        session = await open_session(stub)
        bad_arguments = await _ask(stream, _prepare(1, session, "ReadFile", {}))
        no_session = await _ask(stream, _prepare(2, "sess_nope", "ReadFile", {"path": "a.txt"}))
        mine = await prepare(stub, session, "ReadFile", {"path": "a.txt"})
        other = harness.stub("admin").Exchange()
        try:
            foreign = await _ask(other, _get(3, session, mine.execution_id))
        finally:
            other.cancel()
        still_fine = await _ask(stream, _get(4, session, mine.execution_id))
    arguments = status_failure(bad_arguments.error)
    assert (arguments.code, arguments.reason) == (Code.INVALID_ARGUMENT, "ARGUMENTS_INVALID")
    assert arguments.fields == ["arguments.path"]
    assert arguments.domain == "callgate.dev"
    missing = status_failure(no_session.error)
    assert (missing.code, missing.reason) == (Code.NOT_FOUND, "SESSION_NOT_FOUND")
    assert status_failure(foreign.error).code == Code.NOT_FOUND
    assert still_fine.get_call.call.execution_id == mine.execution_id


async def test_stream_errors_match_the_unary_rpc_errors(
    harness: Harness, stub: ToolServiceAsyncStub, stream: Stream
) -> None:
    """Invoking an unapproved call fails the same way over the stream as over the unary RPC."""
    with anyio.fail_after(5):
        session = await open_session(stub)
        gated = await _gated_call(stream, session, 1)
        over_stream = status_failure((await _ask(stream, _invoke(2, session, gated))).error)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Invoke(
                tool_service_pb2.InvokeRequest(session_id=session, execution_id=gated)
            )
    unary = failure(raised.value)
    assert (over_stream.code, over_stream.reason, over_stream.metadata, over_stream.message) == (
        unary.code,
        unary.reason,
        unary.metadata,
        unary.message,
    )
    assert over_stream.reason == "CALL_NOT_APPROVED"


async def test_a_stream_without_a_token_ends_unauthenticated(harness: Harness) -> None:
    """The principal is checked once when the stream opens; no token ends it UNAUTHENTICATED."""
    stream = harness.stub(role=None).Exchange()
    with anyio.fail_after(5), pytest.raises(grpc.aio.AioRpcError) as raised:
        await stream.read()
    got = failure(raised.value)
    assert (got.code, got.reason) == (Code.UNAUTHENTICATED, "TOKEN_MISSING")


async def test_a_request_without_an_operation_is_request_invalid(
    stub: ToolServiceAsyncStub, stream: Stream
) -> None:
    """An ExchangeRequest with no operation set is answered REQUEST_INVALID for its id."""
    with anyio.fail_after(5):
        session = await open_session(stub)
        empty = await _ask(stream, Request(id=9))
        after = await _ask(stream, _get(10, session, "call_unknown"))
    got = status_failure(empty.error)
    assert (got.code, got.reason, got.fields) == (
        Code.INVALID_ARGUMENT,
        "REQUEST_INVALID",
        ["operation"],
    )
    assert status_failure(after.error).reason == "CALL_NOT_FOUND"


async def test_an_id_still_in_flight_is_refused_for_the_second_operation(
    stub: ToolServiceAsyncStub, stream: Stream
) -> None:
    """Reusing the id of an unanswered operation fails the newcomer only; the first one goes on."""
    with anyio.fail_after(5):
        session = await open_session(stub)
        gated = await _gated_call(stream, session, 1)
        await stream.write(_approve(2, session, gated, wait=30))
        duplicate = await _ask(stream, _get(2, session, gated))
        await stream.write(_cancel(3, session, gated))
        answers = await _receive_all(stream, 2)
    got = status_failure(duplicate.error)
    assert (got.code, got.reason, got.fields) == (Code.INVALID_ARGUMENT, "REQUEST_INVALID", ["id"])
    assert status_failure(answers[2].error).reason == "CALL_STATE_INVALID"
    assert answers[3].cancel_call.call.state == tool_call_pb2.STATE_CANCELLED


async def test_more_operations_in_flight_than_the_limit_are_refused(
    stub: ToolServiceAsyncStub, stream: Stream
) -> None:
    """Past 64 operations in flight on one stream, the next is RESOURCE_EXHAUSTED."""
    with anyio.fail_after(10):
        session = await open_session(stub)
        for request_id in range(64):
            await stream.write(_prepare(request_id, session, "WriteFile", WRITE))
        prepared = await _receive_all(stream, 64)
        for request_id, response in prepared.items():
            execution_id = response.prepare.call.execution_id
            await stream.write(_approve(request_id, session, execution_id, wait=30))
        refused = await _ask(stream, _get(64, session, prepared[0].prepare.call.execution_id))
    got = status_failure(refused.error)
    assert (got.code, got.reason) == (Code.RESOURCE_EXHAUSTED, "CONCURRENCY_LIMIT")


async def test_an_undecodable_message_ends_the_stream_invalid_argument(
    harness: Harness, stub: ToolServiceAsyncStub
) -> None:
    """Invalid UTF-8 in a string field ends the stream with INVALID_ARGUMENT / REQUEST_INVALID."""
    with anyio.fail_after(5):
        session = await open_session(stub)
        good = _prepare(1, session, "ReadFile", {"path": "AAAA"}).SerializeToString()
        raw = harness.channel().stream_stream(
            "/callgate.v1.ToolService/Exchange",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        call = raw()
        await call.write(good.replace(b"AAAA", b"\xff\xfe\xfd\xfc"))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call.read()
    got = failure(raised.value)
    assert (got.code, got.reason) == (Code.INVALID_ARGUMENT, "REQUEST_INVALID")


async def test_half_closing_answers_the_operations_in_flight_then_ends_ok(
    stub: ToolServiceAsyncStub, stream: Stream
) -> None:
    """After a half-close, the operation still waiting is answered and the stream ends OK."""
    with anyio.fail_after(5):
        session = await open_session(stub)
        gated = await _gated_call(stream, session, 1)
        await stream.write(_approve(2, session, gated, wait=30))
        await stream.done_writing()
        await stub.CancelCall(
            tool_service_pb2.CancelCallRequest(session_id=session, execution_id=gated)
        )
        answer = await _receive(stream)
        assert await stream.read() is grpc.aio.EOF
        code = await stream.code()
    assert (answer.id, status_failure(answer.error).reason) == (2, "CALL_STATE_INVALID")
    assert code == Code.OK


async def test_abandoning_the_stream_cancels_its_running_invocation(tmp_path: Path) -> None:
    """A stream cancelled by the client mid-Invoke leaves the call CANCELLED, its tool stopped."""
    slow = Slow(anyio.Event())
    async with serve(tmp_path, extra_tools=[slow]) as harness:
        stub = harness.stub()
        with anyio.fail_after(5):
            session = await open_session(stub)
            stream = stub.Exchange()
            prepared = await _ask(stream, _prepare(1, session, "Slow", {}))
            execution_id = prepared.prepare.call.execution_id
            await stream.write(_invoke(2, session, execution_id, invoke_id=INVOKE_ID))
            await slow.started.wait()
            stream.cancel()
            # A retry with the same request ID waits for the original run and returns it.
            outcome = await stub.Invoke(
                tool_service_pb2.InvokeRequest(
                    session_id=session, execution_id=execution_id, request_id=INVOKE_ID
                )
            )
    assert outcome.call.state == tool_call_pb2.STATE_CANCELLED
    assert slow.finished_runs == 0


async def test_a_stopping_server_ends_idle_streams_at_once(tmp_path: Path) -> None:
    """An idle stream does not hold the shutdown grace period: it ends UNAVAILABLE/SHUTTING_DOWN."""
    async with AsyncExitStack() as stack:
        async with serve(tmp_path) as harness:
            # A channel of the test's own: the harness closes its channels before stopping.
            channel = grpc.aio.insecure_channel(harness.tcp_target)
            stack.push_async_callback(channel.close)
            token = (("authorization", f"Bearer {harness.tokens['agent']}"),)
            stream = tool_service_pb2_grpc.ToolServiceStub(channel).Exchange(metadata=token)
            with anyio.fail_after(5):
                session = await open_session(harness.stub())
                await _ask(stream, _get(1, session, "call_unknown"))
            stopping = time.monotonic()
        stopped_after = time.monotonic() - stopping
        with anyio.fail_after(5), pytest.raises(grpc.aio.AioRpcError) as raised:
            await stream.read()
    got = failure(raised.value)
    assert (got.code, got.reason) == (Code.UNAVAILABLE, "SHUTTING_DOWN")
    assert stopped_after < 2.5  # the grace period is 5 s
