"""AskUser end to end: the question on WatchApprovals, Answer, choices, timeout, headless."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import grpc
import pytest

from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.support.approvals import Watcher, approver
from tests.support.calls import invoke, open_session, prepare
from tests.support.server import Harness, serve
from tests.support.status import failure

pytestmark = pytest.mark.anyio


async def _ask(harness: Harness, arguments: dict[str, object]) -> tuple[str, cpb.ToolCall]:
    session_id = await open_session(harness.stub())
    call = await prepare(harness.stub(), session_id, "AskUser", arguments, evaluate=True)
    assert call.state == cpb.STATE_APPROVED, "AskUser needs no approval"
    return session_id, call


async def test_a_question_is_published_and_the_answer_is_the_result(harness: Harness) -> None:
    """Invoke waits for Answer; the result text is the answer and the JSON holds it."""
    session_id, call = await _ask(harness, {"question": "Which branch?", "choices": ["a", "b"]})
    watcher = Watcher(approver(harness))
    results: list[tpb.InvokeResponse] = []

    async def run() -> None:
        results.append(await invoke(harness.stub(), session_id, call.execution_id))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run)
            question = await watcher.question(call.execution_id)
            assert (question.question, list(question.choices)) == ("Which branch?", ["a", "b"])
            assert question.session_id == session_id
            assert question.requested_by == "agent"
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await approver(harness).Answer(
                    apb.AnswerRequest(execution_id=call.execution_id, answer="c")
                )
            problem = failure(raised.value)
            assert (problem.code, problem.reason) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "REQUEST_INVALID",
            )
            await approver(harness).Answer(
                apb.AnswerRequest(execution_id=call.execution_id, answer="b")
            )
            resolved = await watcher.resolved(call.execution_id)
            assert resolved.state == cpb.STATE_SUCCEEDED
    (result,) = results
    assert result.call.state == cpb.STATE_SUCCEEDED
    assert result.result.text == "b"
    assert json.loads(result.result.json) == {"answer": "b"}
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await approver(harness).Answer(
            apb.AnswerRequest(execution_id=call.execution_id, answer="a")
        )
    assert failure(raised.value).reason == "CALL_STATE_INVALID"


async def test_other_is_always_an_acceptable_answer(harness: Harness) -> None:
    """With choices, 'other' is accepted too."""
    session_id, call = await _ask(harness, {"question": "Pick", "choices": ["x"]})
    watcher = Watcher(approver(harness))
    results: list[tpb.InvokeResponse] = []

    async def run() -> None:
        results.append(await invoke(harness.stub(), session_id, call.execution_id))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run)
            await watcher.question(call.execution_id)
            await approver(harness).Answer(
                apb.AnswerRequest(execution_id=call.execution_id, answer="other")
            )
    assert results[0].result.text == "other"


async def test_an_unanswered_question_fails_with_no_answer(tmp_path: Path) -> None:
    """Past ask.timeout the call FAILS with no_answer and the question is resolved."""
    async with serve(tmp_path, ask={"timeout_seconds": 0.2}) as harness:
        session_id, call = await _ask(harness, {"question": "Anyone?"})
        watcher = Watcher(approver(harness))
        with anyio.fail_after(5):
            result = await invoke(harness.stub(), session_id, call.execution_id)
        assert result.call.state == cpb.STATE_FAILED
        assert result.result.error_code == "no_answer"
        assert (await watcher.resolved(call.execution_id)).state == cpb.STATE_FAILED


async def test_headless_fails_with_no_user_at_once(headless: Harness) -> None:
    """A headless server has no user: no_user without waiting."""
    session_id, call = await _ask(headless, {"question": "Anyone?"})
    with anyio.fail_after(5):
        result = await invoke(headless.stub(), session_id, call.execution_id)
    assert result.result.error_code == "no_user"


@pytest.mark.parametrize(
    "arguments",
    [
        {"question": ""},
        {"question": "x" * 4097},
        {"question": "q", "choices": ["a", "a"]},
        {"question": "q", "choices": [""]},
        {"question": "q", "choices": [str(i) for i in range(17)]},
        {"question": "q", "choices": ["x" * 257]},
    ],
)
async def test_bad_questions_are_refused_at_prepare(
    harness: Harness, arguments: dict[str, object]
) -> None:
    """Question and choice limits are enforced at Prepare (ARGUMENTS_INVALID)."""
    session_id = await open_session(harness.stub())
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await prepare(harness.stub(), session_id, "AskUser", arguments)
    assert failure(raised.value).reason == "ARGUMENTS_INVALID"


async def test_answer_for_an_unknown_call_is_not_found(harness: Harness) -> None:
    """An unknown execution ID is NOT_FOUND / CALL_NOT_FOUND; a call with no question waiting
    is FAILED_PRECONDITION / CALL_STATE_INVALID."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await approver(harness).Answer(apb.AnswerRequest(execution_id="call_nope", answer="a"))
    assert failure(raised.value).reason == "CALL_NOT_FOUND"
    _, call = await _ask(harness, {"question": "Later?"})
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await approver(harness).Answer(
            apb.AnswerRequest(execution_id=call.execution_id, answer="a")
        )
    assert failure(raised.value).reason == "CALL_STATE_INVALID"
