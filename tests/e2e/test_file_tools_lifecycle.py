"""The whole Prepare -> Approve -> Invoke lifecycle for each file tool, through the stub."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import grpc
import pytest

from callgate.v1 import tool_call_pb2, tool_service_pb2
from tests.support.calls import approve, invoke, open_session, prepare, run
from tests.support.server import Harness, serve
from tests.support.status import failure

pytestmark = pytest.mark.anyio


@pytest.fixture
async def writable(tmp_path: Path) -> AsyncIterator[Harness]:
    """A server whose config allows writes anywhere in the workspace."""
    workspace = os.path.realpath(tmp_path / "ws")
    rules = [{"effect": "allow", "kind": "filesystem.write", "match": f"tree:{workspace}"}]
    async with serve(tmp_path, rules=rules) as running:
        yield running


async def test_read_file_runs_through_prepare_approve_invoke(harness: Harness) -> None:
    """A workspace read is PREPARED, then APPROVED by policy, then SUCCEEDED with numbered lines."""
    (harness.workspace / "a.txt").write_text("alpha\nbeta\n")
    stub = harness.stub()
    session = await open_session(stub)
    call = await prepare(stub, session, "ReadFile", {"path": "a.txt"})
    assert call.state == tool_call_pb2.STATE_PREPARED
    assert call.summary == "ReadFile a.txt"
    assert [(r.kind, r.match) for r in call.requirements] == [
        ("filesystem.read", os.path.realpath(harness.workspace / "a.txt"))
    ]
    assert len(call.digest) == 64
    approved = await approve(stub, session, call.execution_id)
    assert approved.state == tool_call_pb2.STATE_APPROVED
    assert approved.decision.decided_by == "policy"
    response = await invoke(stub, session, call.execution_id)
    assert response.call.state == tool_call_pb2.STATE_SUCCEEDED
    assert response.result.text.startswith("     1\talpha\n     2\tbeta")
    assert not response.result.is_error
    assert response.call.result == response.result


async def test_fast_path_approves_in_the_prepare_round_trip(harness: Harness) -> None:
    """Prepare with evaluate=true returns an APPROVED call that Invoke runs."""
    (harness.workspace / "b.txt").write_text("x\n")
    stub = harness.stub()
    session = await open_session(stub)
    response = await run(stub, session, "ReadFile", {"path": "b.txt"})
    assert response.call.state == tool_call_pb2.STATE_SUCCEEDED


async def test_write_file_is_gated_by_default_and_awaits_approval(harness: Harness) -> None:
    """In interactive mode a workspace write waits for a human and cannot be invoked."""
    stub = harness.stub()
    session = await open_session(stub)
    call = await prepare(
        stub, session, "WriteFile", {"path": "n.txt", "content": "hi"}, evaluate=True
    )
    assert call.state == tool_call_pb2.STATE_AWAITING_APPROVAL
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await invoke(stub, session, call.execution_id)
    assert failure(raised.value).reason == "CALL_NOT_APPROVED"
    assert not (harness.workspace / "n.txt").exists()


async def test_headless_mode_denies_gated_calls_at_once(headless: Harness) -> None:
    """Headless: a gated write is DENIED with APPROVAL_REQUIRED and Invoke says CALL_DENIED."""
    stub = headless.stub()
    session = await open_session(stub)
    call = await prepare(
        stub, session, "WriteFile", {"path": "n.txt", "content": "hi"}, evaluate=True
    )
    assert call.state == tool_call_pb2.STATE_DENIED
    assert call.denial.kind == tool_call_pb2.DENIAL_KIND_APPROVAL_REQUIRED
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await invoke(stub, session, call.execution_id)
    assert failure(raised.value).reason == "CALL_DENIED"
    assert not (headless.workspace / "n.txt").exists()


async def test_write_then_edit_with_an_allow_rule(writable: Harness) -> None:
    """A config allow rule approves writes by policy, recording the rule ID; edits need a read."""
    stub = writable.stub()
    session = await open_session(stub)
    call = await prepare(
        stub, session, "WriteFile", {"path": "d/new.txt", "content": "one\ntwo\n"}, evaluate=True
    )
    assert call.state == tool_call_pb2.STATE_APPROVED
    assert list(call.decision.rule_ids) == ["config-0"]
    written = await invoke(stub, session, call.execution_id)
    assert written.call.state == tool_call_pb2.STATE_SUCCEEDED, written.result.text
    assert (writable.workspace / "d/new.txt").read_text() == "one\ntwo\n"
    # Writing the file again without a full read by this loop is refused... unless the write
    # itself counts as the loop's knowledge of the content; an edit after a read always works.
    await run(stub, session, "ReadFile", {"path": "d/new.txt"})
    edited = await run(
        stub, session, "EditFile", {"path": "d/new.txt", "old": "two", "new": "three"}
    )
    assert edited.call.state == tool_call_pb2.STATE_SUCCEEDED, edited.result.text
    assert (writable.workspace / "d/new.txt").read_text() == "one\nthree\n"
    assert "three" in edited.result.text


async def test_overwrite_without_a_read_is_a_stale_read(writable: Harness) -> None:
    """Overwriting an existing file the loop never read fails with stale_read and no effect."""
    (writable.workspace / "old.txt").write_text("keep")
    stub = writable.stub()
    session = await open_session(stub)
    response = await run(stub, session, "WriteFile", {"path": "old.txt", "content": "clobber"})
    assert response.call.state == tool_call_pb2.STATE_FAILED
    assert response.result.error_code == "stale_read"
    assert (writable.workspace / "old.txt").read_text() == "keep"


async def test_file_changed_after_prepare_is_not_overwritten(writable: Harness) -> None:
    """The approved artifact runs against what the loop read: an outside change makes it stale."""
    target = writable.workspace / "f.txt"
    target.write_text("v1")
    stub = writable.stub()
    session = await open_session(stub)
    await run(stub, session, "ReadFile", {"path": "f.txt"})
    call = await prepare(
        stub, session, "WriteFile", {"path": "f.txt", "content": "v2"}, evaluate=True
    )
    target.write_text("changed by someone else")
    response = await invoke(stub, session, call.execution_id)
    assert response.result.error_code == "stale_read"
    assert target.read_text() == "changed by someone else"


async def test_invoke_runs_the_prepared_artifact_not_later_arguments(writable: Harness) -> None:
    """Changing the JSON the agent holds after Prepare changes nothing: the artifact runs."""
    stub = writable.stub()
    session = await open_session(stub)
    arguments: dict[str, object] = {"path": "p.txt", "content": "prepared"}
    call = await prepare(stub, session, "WriteFile", arguments, evaluate=True)
    arguments["content"] = "changed"
    arguments["path"] = "other.txt"
    # A second Prepare with the changed JSON is a different call with its own digest.
    other = await prepare(stub, session, "WriteFile", arguments)
    assert other.digest != call.digest
    response = await invoke(stub, session, call.execution_id)
    assert response.call.state == tool_call_pb2.STATE_SUCCEEDED
    assert (writable.workspace / "p.txt").read_text() == "prepared"
    assert not (writable.workspace / "other.txt").exists()


def test_invoke_requests_carry_no_tool_arguments() -> None:
    """InvokeRequest and InvokeStreamRequest name a call and how to take it (session_id,
    execution_id, request_id; an Invoke may also `detach`), never any of its arguments."""
    names = {"session_id", "execution_id", "request_id"}
    assert {f.name for f in tool_service_pb2.InvokeStreamRequest.DESCRIPTOR.fields} == names
    assert {f.name for f in tool_service_pb2.InvokeRequest.DESCRIPTOR.fields} == {*names, "detach"}
    assert tool_service_pb2.InvokeRequest.DESCRIPTOR.fields_by_name["detach"].type == (
        tool_service_pb2.InvokeRequest.DESCRIPTOR.fields_by_name["detach"].TYPE_BOOL
    )


async def test_a_second_invoke_is_refused_and_the_effect_happens_once(writable: Harness) -> None:
    """Single use: a second Invoke is CALL_ALREADY_INVOKED; the same request_id replays."""
    stub = writable.stub()
    session = await open_session(stub)
    call = await prepare(
        stub, session, "WriteFile", {"path": "once.txt", "content": "1"}, evaluate=True
    )
    request_id = "6f1c1d7e-0d43-4a43-9c1b-0c6f6c3f2a11"
    first = await invoke(stub, session, call.execution_id, request_id)
    assert first.call.state == tool_call_pb2.STATE_SUCCEEDED
    (writable.workspace / "once.txt").write_text("tampered")
    replay = await invoke(stub, session, call.execution_id, request_id)
    assert replay.result == first.result
    assert (writable.workspace / "once.txt").read_text() == "tampered"
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await invoke(stub, session, call.execution_id)
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert failure(raised.value).reason == "CALL_ALREADY_INVOKED"


async def test_glob_and_grep_list_workspace_files(harness: Harness) -> None:
    """Glob returns sorted relative paths; Grep returns path:line:text."""
    (harness.workspace / "src").mkdir()
    (harness.workspace / "src/a.py").write_text("import os\nclass A:\n    pass\n")
    (harness.workspace / "src/b.py").write_text("class B:\n    pass\n")
    (harness.workspace / "notes.md").write_text("class notes\n")
    stub = harness.stub()
    session = await open_session(stub)
    globbed = await run(stub, session, "Glob", {"pattern": "**/*.py"})
    assert globbed.call.requirements[0].match == "tree:" + os.path.realpath(harness.workspace)
    assert globbed.result.text.splitlines()[:2] == ["src/a.py", "src/b.py"]
    grepped = await run(stub, session, "Grep", {"pattern": "^class [AB]", "path": "src"})
    lines = grepped.result.text.splitlines()
    assert lines[:2] == ["src/a.py:2:class A:", "src/b.py:1:class B:"]


async def test_invoke_stream_ends_with_the_finished_call(harness: Harness) -> None:
    """InvokeStream's last message is the finished call with its result."""
    (harness.workspace / "s.txt").write_text("streamed\n")
    stub = harness.stub()
    session = await open_session(stub)
    call = await prepare(stub, session, "ReadFile", {"path": "s.txt"}, evaluate=True)
    events = [
        event
        async for event in stub.InvokeStream(
            tool_service_pb2.InvokeStreamRequest(session_id=session, execution_id=call.execution_id)
        )
    ]
    assert events[-1].WhichOneof("event") == "finished"
    assert events[-1].finished.state == tool_call_pb2.STATE_SUCCEEDED
    assert "streamed" in events[-1].finished.result.text


async def test_cancelled_call_cannot_be_invoked(writable: Harness) -> None:
    """CancelCall on an approved call makes it CANCELLED; Invoke then refuses with no effect."""
    stub = writable.stub()
    session = await open_session(stub)
    call = await prepare(
        stub, session, "WriteFile", {"path": "c.txt", "content": "x"}, evaluate=True
    )
    cancelled = await stub.CancelCall(
        tool_service_pb2.CancelCallRequest(session_id=session, execution_id=call.execution_id)
    )
    assert cancelled.call.state == tool_call_pb2.STATE_CANCELLED
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await invoke(stub, session, call.execution_id)
    assert failure(raised.value).reason == "CALL_STATE_INVALID"
    assert not (writable.workspace / "c.txt").exists()


async def test_list_and_get_calls_show_the_session_history(harness: Harness) -> None:
    """ListCalls returns the session's calls newest first; GetCall returns one."""
    (harness.workspace / "a.txt").write_text("a")
    stub = harness.stub()
    session = await open_session(stub)
    first = await prepare(stub, session, "ReadFile", {"path": "a.txt"})
    second = await prepare(stub, session, "Glob", {"pattern": "*"})
    listed = await stub.ListCalls(tool_service_pb2.ListCallsRequest(session_id=session))
    assert [c.execution_id for c in listed.calls] == [second.execution_id, first.execution_id]
    got = await stub.GetCall(
        tool_service_pb2.GetCallRequest(session_id=session, execution_id=first.execution_id)
    )
    assert got.call.digest == first.digest


async def test_loops_have_their_own_observations(writable: Harness) -> None:
    """A read in one loop does not let another loop overwrite the file."""
    (writable.workspace / "shared.txt").write_text("v1")
    stub = writable.stub()
    session = await open_session(stub)
    other_loop = (await stub.OpenLoop(tool_service_pb2.OpenLoopRequest(session_id=session))).loop_id
    await run(stub, session, "ReadFile", {"path": "shared.txt"})
    refused = await run(
        stub, session, "WriteFile", {"path": "shared.txt", "content": "v2"}, loop_id=other_loop
    )
    assert refused.result.error_code == "stale_read"
    allowed = await run(stub, session, "WriteFile", {"path": "shared.txt", "content": "v2"})
    assert allowed.call.state == tool_call_pb2.STATE_SUCCEEDED
    assert (writable.workspace / "shared.txt").read_text() == "v2"


async def test_digest_is_stable_for_identical_calls(harness: Harness) -> None:
    """Two Prepares of the same arguments get different execution IDs but the same digest."""
    (harness.workspace / "a.txt").write_text("a")
    stub = harness.stub()
    session = await open_session(stub)
    one = await prepare(stub, session, "ReadFile", {"path": "a.txt"})
    two = await prepare(stub, session, "ReadFile", json.dumps({"path": "a.txt"}, indent=2))
    ranged = await prepare(stub, session, "ReadFile", {"path": "a.txt", "end_line": 1})
    assert one.execution_id != two.execution_id
    assert one.digest == two.digest
    assert ranged.digest != one.digest


async def test_unix_socket_listener_serves_the_same_api(harness: Harness) -> None:
    """The Unix socket listener answers like TCP."""
    stub = harness.stub(unix=True)
    with anyio.fail_after(5):
        session = await open_session(stub)
    assert session.startswith("ses_")
    assert oct(os.stat(harness.unix_target.removeprefix("unix://")).st_mode & 0o777) == "0o660"
