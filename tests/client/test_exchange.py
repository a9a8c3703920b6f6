"""The client's lifecycle operations over the Exchange stream, against a real server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from callgate.client import (
    CallgateClient,
    CallNotFoundError,
    CallStateError,
    ClientSession,
    InvalidArgumentsError,
    ServerUnavailableError,
    SessionNotFoundError,
    State,
)
from callgate.v1 import tool_call_pb2, tool_service_pb2
from tests.client.conftest import TOKEN
from tests.client.scripted_server import (
    ScriptedToolService,
    call_message,
    result_message,
    session_message,
)
from tests.support.proxy import forward
from tests.support.server import Harness, serve
from tests.support.tools import Slow

pytestmark = pytest.mark.anyio

README = "line one\nline two\n"


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    async with serve(tmp_path) as running:
        (running.workspace / "README.md").write_text(README)
        yield running


def _client(harness: Harness, *, unix: bool = False, exchange: bool = True) -> CallgateClient:
    target = harness.unix_target if unix else harness.tcp_target
    return CallgateClient(target, token=harness.tokens["agent"], exchange=exchange)


def _exchange_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("callgate-exchange-")]


@pytest.mark.parametrize("unix", [False, True], ids=["tcp", "unix"])
async def test_run_goes_over_one_exchange_stream_per_client(harness: Harness, unix: bool) -> None:
    """Every session of a client shares one stream, over TCP and Unix sockets alike."""
    async with _client(harness, unix=unix) as client:
        with anyio.fail_after(5):
            async with client.open_session() as first, client.open_session() as second:
                results = [await s.run("ReadFile", {"path": "README.md"}) for s in (first, second)]
                streams = harness.app.tool_servicer.open_exchanges
    assert [r.text for r in results] == ["     1\tline one\n     2\tline two"] * 2
    assert streams == 1


async def test_without_exchange_the_client_sends_unary_rpcs(harness: Harness) -> None:
    """`exchange=False` keeps every operation a unary RPC, with the same results."""
    async with _client(harness, exchange=False) as client:
        with anyio.fail_after(5):
            async with client.open_session() as session:
                result = await session.run("ReadFile", {"path": "README.md"})
                streams = harness.app.tool_servicer.open_exchanges
    assert not result.is_error
    assert result.text.startswith("     1\tline one")
    assert streams == 0


async def test_stream_operations_raise_the_typed_errors_of_the_unary_rpcs(
    harness: Harness,
) -> None:
    """Bad arguments, an unknown call and a closed session raise their typed errors, and the
    stream stays usable after each."""
    async with _client(harness) as client:
        with anyio.fail_after(5):
            session = await client.open_session()
            with pytest.raises(InvalidArgumentsError) as bad_arguments:
                await session.prepare("ReadFile", {}, evaluate=True)
            with pytest.raises(CallNotFoundError):
                await session.get_call("call_unknown")
            result = await session.run("ReadFile", {"path": "README.md"})
            await session.close()
            with pytest.raises(SessionNotFoundError):
                await session.run("ReadFile", {"path": "README.md"})
    assert bad_arguments.value.reason == "ARGUMENTS_INVALID"
    assert [v.field for v in bad_arguments.value.violations] == ["arguments.path"]
    assert not result.is_error


async def test_a_waiting_approve_does_not_hold_up_other_operations(harness: Harness) -> None:
    """Operations of one client run concurrently on the stream and finish in any order."""
    async with _client(harness) as client:
        with anyio.fail_after(5):
            session = await client.open_session()
            gated = await session.prepare(
                "WriteFile", {"path": "n.txt", "content": "x"}, evaluate=True
            )
            assert gated.state is State.AWAITING_APPROVAL
            outcome: list[BaseException] = []

            async def approve() -> None:
                try:
                    await session.approve(gated.execution_id, wait=30)
                except CallStateError as error:
                    outcome.append(error)

            async with anyio.create_task_group() as group:
                group.start_soon(approve)
                result = await session.run("ReadFile", {"path": "README.md"})
                assert not outcome  # still waiting for its approver
                cancelled = await session.cancel(gated.execution_id)
    assert not result.is_error
    assert cancelled.state is State.CANCELLED
    assert [getattr(e, "reason", None) for e in outcome] == ["CALL_STATE_INVALID"]


async def test_an_invoke_whose_caller_is_cancelled_cancels_the_call(tmp_path: Path) -> None:
    """Cancelling the caller of a stream Invoke cancels the running call, as over unary."""
    slow = Slow(anyio.Event())
    request_id = str(uuid.uuid4())
    async with serve(tmp_path, extra_tools=[slow]) as harness, _client(harness) as client:
        with anyio.fail_after(5):
            session = await client.open_session()
            call = await session.prepare("Slow", {}, evaluate=True)
            async with anyio.create_task_group() as group:
                group.start_soon(session.invoke, call.execution_id, request_id)
                await slow.started.wait()
                group.cancel_scope.cancel()
            # The same request ID waits for the original run and returns its outcome.
            outcome = await session.invoke(call.execution_id, request_id)
    assert outcome.call.state is State.CANCELLED
    assert slow.finished_runs == 0


async def test_a_broken_stream_fails_an_unanswered_invoke_and_the_next_operation_reconnects(
    tmp_path: Path,
) -> None:
    """An Invoke without a request ID in flight when the connection drops is not sent again:
    it fails with ServerUnavailableError; the next operation opens a new stream."""
    slow = Slow(anyio.Event())
    async with serve(tmp_path, extra_tools=[slow]) as harness, forward(harness.tcp_target) as proxy:
        (harness.workspace / "README.md").write_text(README)
        async with CallgateClient(proxy.target, token=harness.tokens["agent"]) as client:
            with anyio.fail_after(5):
                session = await client.open_session()
                call = await session.prepare("Slow", {}, evaluate=True)
                failures: list[BaseException] = []

                async def invoke() -> None:
                    try:
                        await session.invoke(call.execution_id)
                    except ServerUnavailableError as error:
                        failures.append(error)

                async with anyio.create_task_group() as group:
                    group.start_soon(invoke)
                    await slow.started.wait()
                    proxy.cut()
                result = await session.run("ReadFile", {"path": "README.md"})
    assert len(failures) == 1
    assert not result.is_error
    assert proxy.accepted == 2
    assert slow.finished_runs == 0


async def test_an_invoke_with_a_request_id_is_sent_once_more_after_the_stream_breaks(
    tmp_path: Path,
) -> None:
    """With a request ID, an Invoke cut off by a broken stream is resent on a new stream and
    answered with the original run's outcome, never run twice."""
    slow = Slow(anyio.Event())
    async with (
        serve(tmp_path, extra_tools=[slow]) as harness,
        forward(harness.tcp_target) as proxy,
        CallgateClient(proxy.target, token=harness.tokens["agent"]) as client,
    ):
        with anyio.fail_after(5):
            session = await client.open_session()
            call = await session.prepare("Slow", {}, evaluate=True)
            outcomes: list[State] = []

            async def invoke() -> None:
                invoked = await session.invoke(call.execution_id, str(uuid.uuid4()))
                outcomes.append(invoked.call.state)

            async with anyio.create_task_group() as group:
                group.start_soon(invoke)
                await slow.started.wait()
                proxy.cut()
    # Losing the connection cancelled the run on the server; the resend reports just that.
    assert outcomes == [State.CANCELLED]
    assert slow.finished_runs == 0


async def test_the_client_uses_a_new_stream_after_a_server_restart(tmp_path: Path) -> None:
    """A stream ended by a stopping server is replaced by the next operation's new stream."""
    socket = Path(tmp_path / "sock")
    socket.mkdir()
    listen = [f"unix://{socket}/s.sock"]
    target = f"unix://{socket}/s.sock"
    async with serve(tmp_path, listen=listen) as harness:
        (harness.workspace / "README.md").write_text(README)
        client = CallgateClient(target, token=harness.tokens["agent"])
        await client.__aenter__()
        try:
            with anyio.fail_after(5):
                session = await client.open_session()
                await session.run("ReadFile", {"path": "README.md"})
        except BaseException:
            await client.close()
            raise
    async with client, serve(tmp_path, listen=listen):
        with anyio.fail_after(5):
            # The session died with its server; a new one works over a new stream.
            with pytest.raises(SessionNotFoundError):
                await session.get_call("call_unknown")
            fresh = await client.open_session()
            result = await fresh.run("ReadFile", {"path": "README.md"})
    assert not result.is_error


async def test_closing_the_client_ends_its_stream_tasks(harness: Harness) -> None:
    """Leaving `async with` stops the stream's reader and writer; no task is left behind."""
    async with _client(harness) as client:
        with anyio.fail_after(5):
            session: ClientSession = await client.open_session()
            await session.run("ReadFile", {"path": "README.md"})
            assert len(_exchange_tasks()) == 2
    assert _exchange_tasks() == []


async def test_a_server_without_exchange_is_asked_once_then_served_unary(
    target: str, service: ScriptedToolService
) -> None:
    """Against an older server the client falls back to unary RPCs and stops trying Exchange."""
    service.script(
        "OpenSession", tool_service_pb2.OpenSessionResponse(session=session_message("s-1"))
    )
    for _ in range(2):
        service.script(
            "Prepare",
            tool_service_pb2.PrepareResponse(call=call_message(tool_call_pb2.STATE_APPROVED)),
        )
        done = call_message(tool_call_pb2.STATE_SUCCEEDED)
        done.result.CopyFrom(result_message())
        service.script("Invoke", tool_service_pb2.InvokeResponse(call=done, result=done.result))
    async with CallgateClient(target, token=TOKEN) as client:
        with anyio.fail_after(5):
            session = await client.open_session()
            first = await session.run("ReadFile", {"path": "README.md"})
            second = await session.run("ReadFile", {"path": "README.md"})
    assert first == second
    assert service.exchange_attempts == 1
    assert len(service.requests("Prepare")) == len(service.requests("Invoke")) == 2


async def test_run_sends_one_message_for_an_allowed_call_on_the_exchange_stream(
    harness: Harness,
) -> None:
    """Once the stream has answered, `run` sends one Prepare with `invoke`: an allowed call
    runs and comes back in that one answer; a gated one waits for the approver and then runs
    once (its Invoke); a denied one raises CallDeniedError and never runs."""
    from callgate.client import CallDeniedError
    from callgate.v1 import approval_service_pb2 as apb
    from tests.support.approvals import Watcher, approver, decide

    (harness.workspace / ".env").write_text("SECRET=1\n")
    async with _client(harness) as client:
        with anyio.fail_after(10):
            session = await client.open_session()
            first = await session.run("ReadFile", {"path": "README.md"})  # proves the stream
            second = await session.run("ReadFile", {"path": "README.md"})
            assert first.text == second.text
            watcher = Watcher(approver(harness))
            results: list[str] = []

            async def write() -> None:
                results.append(
                    (await session.run("WriteFile", {"path": "w.txt", "content": "w"})).text
                )

            async with anyio.create_task_group() as group:
                group.start_soon(write)
                pending = await watcher.approval()
                await decide(approver(harness), pending.call, apb.DECISION_KIND_APPROVE_ONCE)
            watcher.cancel()
            with pytest.raises(CallDeniedError):
                await session.run("ReadFile", {"path": ".env"})
    assert results == ["wrote w.txt (1 bytes)"]
    assert (harness.workspace / "w.txt").read_text() == "w"
    listed = await harness.stub().ListCalls(
        tool_service_pb2.ListCallsRequest(session_id=session.session_id)
    )
    states = sorted((c.tool_name, tool_call_pb2.State.Name(c.state)) for c in listed.calls)
    assert states == [
        ("ReadFile", "STATE_DENIED"),
        ("ReadFile", "STATE_SUCCEEDED"),
        ("ReadFile", "STATE_SUCCEEDED"),
        ("WriteFile", "STATE_SUCCEEDED"),
    ]
