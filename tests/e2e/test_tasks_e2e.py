"""The task tools end to end: policy-approved, one graph per loop, refusals as results, and
strict arguments rejected at Prepare."""

from __future__ import annotations

import json

import grpc
import pytest

from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.support.calls import open_session, prepare, run
from tests.support.server import Harness
from tests.support.status import failure

pytestmark = pytest.mark.anyio


def _json(response: tpb.InvokeResponse) -> dict[str, object]:
    assert response.call.state == cpb.STATE_SUCCEEDED, response.result.text
    assert not response.result.is_error, response.result.text
    value = json.loads(response.result.json)
    assert isinstance(value, dict)
    return value


def _task(response: tpb.InvokeResponse) -> dict[str, object]:
    task = _json(response)["task"]
    assert isinstance(task, dict)
    return task


async def test_create_get_update_list_and_delete_round_trip(harness: Harness) -> None:
    """Tasks are created pending, patched, listed with derived blocks, and deleted."""
    stub = harness.stub()
    session_id = await open_session(stub)
    first = _task(await run(stub, session_id, "TaskCreate", {"subject": "Write the parser"}))
    assert (first["id"], first["status"], first["blocked_by"]) == ("t1", "pending", [])
    second = _task(
        await run(
            stub,
            session_id,
            "TaskCreate",
            {
                "subject": "Test the parser",
                "description": "with Hypothesis",
                "active_form": "Testing the parser",
                "blocked_by": ["t1"],
                "metadata": {"owner": "me", "points": 3},
            },
        )
    )
    assert second["id"] == "t2"
    got = _task(await run(stub, session_id, "TaskGet", {"id": "t1"}))
    assert got["blocks"] == ["t2"]
    updated = _task(await run(stub, session_id, "TaskUpdate", {"id": "t1", "status": "completed"}))
    assert (updated["status"], updated["subject"]) == ("completed", "Write the parser")
    listed = _json(await run(stub, session_id, "TaskList", {}))["tasks"]
    assert isinstance(listed, list)
    assert [(t["id"], t["status"], t["blocked_by"]) for t in listed] == [
        ("t1", "completed", []),
        ("t2", "pending", ["t1"]),
    ]
    full = _task(await run(stub, session_id, "TaskGet", {"id": "t2"}))
    assert full["metadata"] == {"owner": "me", "points": 3}
    assert full["description"] == "with Hypothesis"
    deleted = _json(await run(stub, session_id, "TaskUpdate", {"id": "t1", "status": "deleted"}))
    assert deleted == {"deleted_task_id": "t1", "unblocked_task_ids": ["t2"]}
    assert _task(await run(stub, session_id, "TaskGet", {"id": "t2"}))["blocked_by"] == []
    pending = _json(await run(stub, session_id, "TaskList", {"status": "completed"}))
    assert pending == {"tasks": []}


async def test_the_summary_names_the_subject(harness: Harness) -> None:
    """The approver sees TaskCreate with the subject; no requirement is needed."""
    stub = harness.stub()
    session_id = await open_session(stub)
    call = await prepare(stub, session_id, "TaskCreate", {"subject": "Ship it"}, evaluate=True)
    assert call.state == cpb.STATE_APPROVED
    assert call.summary == 'TaskCreate "Ship it"'


async def test_two_loops_have_separate_graphs(harness: Harness) -> None:
    """A task created in one loop is not visible in another; each loop mints its own IDs."""
    stub = harness.stub()
    session_id = await open_session(stub)
    other = (await stub.OpenLoop(tpb.OpenLoopRequest(session_id=session_id))).loop_id
    await run(stub, session_id, "TaskCreate", {"subject": "default loop"})
    in_other = _task(
        await run(stub, session_id, "TaskCreate", {"subject": "other loop"}, loop_id=other)
    )
    assert in_other["id"] == "t1"
    mine = _json(await run(stub, session_id, "TaskList", {}))["tasks"]
    theirs = _json(await run(stub, session_id, "TaskList", {}, loop_id=other))["tasks"]
    assert isinstance(mine, list)
    assert isinstance(theirs, list)
    assert [t["subject"] for t in mine] == ["default loop"]
    assert [t["subject"] for t in theirs] == ["other loop"]


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"id": "t9", "status": "completed"}, "unknown_task"),
        ({"id": "t2", "add_blocked_by": ["t2"]}, "self_dependency"),
        ({"id": "t1", "add_blocked_by": ["t2"]}, "cycle"),
        ({"id": "t2", "status": "in_progress"}, "blocked"),
    ],
)
async def test_a_graph_violation_is_an_error_result_and_changes_nothing(
    harness: Harness, arguments: dict[str, object], code: str
) -> None:
    """Invoke refuses a change that breaks the graph with an error result, not a gRPC error."""
    stub = harness.stub()
    session_id = await open_session(stub)
    await run(stub, session_id, "TaskCreate", {"subject": "first"})
    await run(stub, session_id, "TaskCreate", {"subject": "second", "blocked_by": ["t1"]})
    before = await run(stub, session_id, "TaskList", {})
    response = await run(stub, session_id, "TaskUpdate", arguments)
    assert response.result.is_error
    assert response.result.error_code == code
    after = await run(stub, session_id, "TaskList", {})
    assert after.result.json == before.result.json


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("TaskCreate", {"subject": "x", "owner": "me"}, "arguments.owner"),
        ("TaskCreate", {}, "arguments.subject"),
        ("TaskCreate", {"subject": 7}, "arguments.subject"),
        ("TaskCreate", {"subject": ""}, "arguments.subject"),
        ("TaskCreate", {"subject": "   "}, "arguments.subject"),
        ("TaskCreate", {"subject": "é" * 257}, "arguments.subject"),
        (
            "TaskCreate",
            {"subject": "x", "description": "d" * (16 << 10 | 1)},
            "arguments.description",
        ),
        ("TaskCreate", {"subject": "x", "active_form": "a" * 513}, "arguments.active_form"),
        ("TaskCreate", {"subject": "x", "metadata": ["a"]}, "arguments.metadata"),
        ("TaskCreate", {"subject": "x", "metadata": "{}"}, "arguments.metadata"),
        ("TaskCreate", {"subject": "x", "metadata": {"k": "v" * (16 << 10)}}, "arguments.metadata"),
        ("TaskCreate", {"subject": "x", "blocked_by": "t1"}, "arguments.blocked_by"),
        ("TaskCreate", {"subject": "x", "blocked_by": [1]}, "arguments.blocked_by[0]"),
        ("TaskCreate", {"subject": "x", "blocked_by": ["task-1"]}, "arguments.blocked_by[0]"),
        ("TaskCreate", {"subject": "x", "blocked_by": ["t1", "t1"]}, "arguments.blocked_by"),
        (
            "TaskCreate",
            {"subject": "x", "blocked_by": [f"t{n}" for n in range(1, 130)]},
            "arguments.blocked_by",
        ),
        ("TaskUpdate", {"id": "t1"}, "arguments"),
        ("TaskUpdate", {"status": "completed"}, "arguments.id"),
        ("TaskUpdate", {"id": "t1", "status": "done"}, "arguments.status"),
        ("TaskUpdate", {"id": "t1", "status": "deleted", "subject": "x"}, "arguments.subject"),
        (
            "TaskUpdate",
            {"id": "t1", "blocked_by": [], "add_blocked_by": ["t2"]},
            "arguments.blocked_by",
        ),
        ("TaskGet", {"id": 1}, "arguments.id"),
        ("TaskGet", {}, "arguments.id"),
        ("TaskList", {"status": "deleted"}, "arguments.status"),
        ("TaskList", {"limit": 3}, "arguments.limit"),
    ],
)
async def test_bad_arguments_are_rejected_at_prepare(
    harness: Harness, tool: str, arguments: dict[str, object], field: str
) -> None:
    """Strict decoding: INVALID_ARGUMENT / ARGUMENTS_INVALID naming the offending field."""
    stub = harness.stub()
    session_id = await open_session(stub)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await prepare(stub, session_id, tool, arguments)
    problem = failure(raised.value)
    assert (problem.code, problem.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGUMENTS_INVALID")
    assert problem.fields == [field]
