"""Batch decisions: the calls one model turn prepares (PrepareRequest.batch_id) are decided in
one DecideBatch, each bound to its own digest, all or none; through a real server, the
generated stubs and the Python client."""

from __future__ import annotations

import grpc
import pytest

from callgate.client import CallgateClient, DecisionKind, new_batch_id
from callgate.client.errors import CallgateClientError
from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.support.approvals import Watcher, approver
from tests.support.calls import invoke, open_session, prepare
from tests.support.server import Harness
from tests.support.status import failure

pytestmark = pytest.mark.anyio

ONCE = apb.DECISION_KIND_APPROVE_ONCE


async def _batch(harness: Harness, session_id: str, batch_id: str) -> list[cpb.ToolCall]:
    calls = []
    for name in ("a.txt", "b.txt", "c.txt"):
        call = await prepare(
            harness.stub(),
            session_id,
            "WriteFile",
            {"path": name, "content": name},
            evaluate=True,
            batch_id=batch_id,
        )
        assert call.state == cpb.STATE_AWAITING_APPROVAL
        assert call.batch_id == batch_id
        calls.append(call)
    return calls


def _requests(
    calls: list[cpb.ToolCall], kind: apb.DecisionKind.ValueType = ONCE, note: str = ""
) -> apb.DecideBatchRequest:
    return apb.DecideBatchRequest(
        requests=[
            apb.DecideRequest(execution_id=c.execution_id, digest=c.digest, kind=kind, note=note)
            for c in calls
        ]
    )


async def _states(harness: Harness, session_id: str, calls: list[cpb.ToolCall]) -> list[int]:
    states: list[int] = []
    for call in calls:
        got = await harness.stub().GetCall(
            tpb.GetCallRequest(session_id=session_id, execution_id=call.execution_id)
        )
        states.append(got.call.state)
    return states


async def test_a_batch_of_three_decided_in_one_action_runs_all_three(harness: Harness) -> None:
    session_id = await open_session(harness.stub())
    watcher = Watcher(approver(harness))
    calls = await _batch(harness, session_id, "turn-7")
    for call in calls:  # the approver sees each with its batch
        assert (await watcher.approval(call.execution_id)).call.batch_id == "turn-7"
    watcher.cancel()
    response = await approver(harness).DecideBatch(_requests(calls, note="one turn"))
    assert [c.state for c in response.calls] == [cpb.STATE_APPROVED] * 3
    assert [c.execution_id for c in response.calls] == [c.execution_id for c in calls]
    for call in calls:
        result = await invoke(harness.stub(), session_id, call.execution_id)
        assert not result.result.is_error
    assert sorted(p.name for p in harness.workspace.iterdir()) == ["a.txt", "b.txt", "c.txt"]


async def test_one_changed_digest_decides_none(harness: Harness) -> None:
    session_id = await open_session(harness.stub())
    calls = await _batch(harness, session_id, "turn-8")
    request = _requests(calls)
    request.requests[1].digest = "0" * 64
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await approver(harness).DecideBatch(request)
    error = failure(caught.value)
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION
    assert error.reason == "DIGEST_MISMATCH"
    assert error.metadata["execution_id"] == calls[1].execution_id
    assert error.metadata["index"] == "1"
    assert calls[1].execution_id in error.message
    assert await _states(harness, session_id, calls) == [cpb.STATE_AWAITING_APPROVAL] * 3


async def test_a_decided_call_or_a_rule_on_a_human_only_call_decides_none(
    harness: Harness,
) -> None:
    stub = harness.stub()
    session_id = await open_session(stub)
    calls = await _batch(harness, session_id, "turn-9")
    await approver(harness).Decide(
        apb.DecideRequest(
            execution_id=calls[2].execution_id, digest=calls[2].digest, kind=apb.DECISION_KIND_DENY
        )
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await approver(harness).DecideBatch(_requests(calls))
    assert failure(caught.value).reason == "CALL_STATE_INVALID"
    assert await _states(harness, session_id, calls[:2]) == [cpb.STATE_AWAITING_APPROVAL] * 2

    hook = await prepare(
        stub,
        session_id,
        "WriteFile",
        {"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"},
        evaluate=True,
        batch_id="turn-9",
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await approver(harness).DecideBatch(
            _requests([*calls[:2], hook], apb.DECISION_KIND_APPROVE_FOR_SESSION)
        )
    assert failure(caught.value).reason == "APPROVE_ONCE_ONLY"
    assert (
        await _states(harness, session_id, [*calls[:2], hook]) == [cpb.STATE_AWAITING_APPROVAL] * 3
    )


async def test_bad_batches_are_refused_and_change_nothing(harness: Harness) -> None:
    session_id = await open_session(harness.stub())
    calls = await _batch(harness, session_id, "turn-10")
    cases = [
        (apb.DecideBatchRequest(), "INVALID_ARGUMENT"),
        (_requests([calls[0], calls[0]]), "INVALID_ARGUMENT"),
        (_requests(calls * 40), "INVALID_ARGUMENT"),
    ]
    for request, code in cases:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await approver(harness).DecideBatch(request)
        assert caught.value.code().name == code
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await approver(harness, "agent").DecideBatch(_requests(calls))
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert await _states(harness, session_id, calls) == [cpb.STATE_AWAITING_APPROVAL] * 3
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await prepare(harness.stub(), session_id, "ReadFile", {"path": "x"}, batch_id="no spaces")
    assert failure(caught.value).reason == "REQUEST_INVALID"


async def test_the_batch_is_covered_by_the_digest(harness: Harness) -> None:
    session_id = await open_session(harness.stub())
    args: dict[str, object] = {"path": "same.txt", "content": "same"}
    alone = await prepare(harness.stub(), session_id, "WriteFile", args)
    batched = await prepare(harness.stub(), session_id, "WriteFile", args, batch_id="turn-1")
    assert alone.digest != batched.digest


async def test_the_python_client_runs_a_turn_and_decides_it_in_one_action(
    harness: Harness,
) -> None:
    """An agent marks one turn's calls with `new_batch_id()`; an approver with the client
    decides them with `decide_batch`, and a stale one makes the whole batch fail."""
    target = harness.tcp_target
    async with (
        CallgateClient(target, token=harness.tokens["agent"]) as agent,
        CallgateClient(target, token=harness.tokens["approver"]) as human,
        agent.open_session() as session,
    ):
        batch_id = new_batch_id()
        first = await session.prepare(
            "WriteFile", {"path": "x.txt", "content": "1"}, evaluate=True, batch_id=batch_id
        )
        second = await session.prepare(
            "WriteFile", {"path": "y.txt", "content": "2"}, evaluate=True, batch_id=batch_id
        )
        assert first.batch_id == second.batch_id == batch_id
        assert first.preview is not None
        assert first.preview.kind == "content"
        with pytest.raises(CallgateClientError) as caught:
            await human.approvals.decide_batch(
                [(first.execution_id, first.digest), (second.execution_id, "f" * 64)],
                DecisionKind.APPROVE_ONCE,
            )
        assert caught.value.reason == "DIGEST_MISMATCH"
        decided = await human.approvals.decide_batch(
            [(first.execution_id, first.digest), (second.execution_id, second.digest)],
            DecisionKind.DENY,
            note="not this turn",
        )
        assert [c.state.value for c in decided] == ["denied", "denied"]
        assert decided[0].denial is not None
        assert "not this turn" in decided[0].denial.description
