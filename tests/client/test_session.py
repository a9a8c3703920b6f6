"""The client drives sessions and the Prepare -> Approve -> Invoke lifecycle over real gRPC."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import grpc
import pytest
from google.protobuf import message

from callgate.client import (
    ApprovalTimeoutError,
    CallDeniedError,
    CallgateClient,
    CallStateError,
    ClientSession,
    DenialKind,
    InvalidArgumentsError,
    ProtocolError,
    ServerUnavailableError,
    SessionNotFoundError,
    State,
    ToolCall,
    default_token,
)
from callgate.v1 import tool_call_pb2, tool_service_pb2
from tests.client.conftest import TOKEN
from tests.client.scripted_server import (
    Hang,
    PlainStatus,
    ScriptedToolService,
    call_message,
    result_message,
    rich_status,
    session_message,
)

Code = grpc.StatusCode


def _prepared(state: tool_call_pb2.State.ValueType) -> tool_service_pb2.PrepareResponse:
    return tool_service_pb2.PrepareResponse(call=call_message(state))


def _approved(state: tool_call_pb2.State.ValueType) -> tool_service_pb2.ApproveResponse:
    return tool_service_pb2.ApproveResponse(call=call_message(state))


def _invoked(
    state: tool_call_pb2.State.ValueType = tool_call_pb2.STATE_SUCCEEDED,
    result: tool_call_pb2.ToolResult | None = None,
) -> tool_service_pb2.InvokeResponse:
    result = result or result_message()
    call = call_message(state)
    call.result.CopyFrom(result)
    return tool_service_pb2.InvokeResponse(call=call, result=result)


def _cancelled() -> tool_service_pb2.CancelCallResponse:
    return tool_service_pb2.CancelCallResponse(call=call_message(tool_call_pb2.STATE_CANCELLED))


def _only(service: ScriptedToolService, method: str) -> message.Message:
    requests = service.requests(method)
    assert len(requests) == 1, f"{method} received {len(requests)} requests"
    return requests[0]


async def _drain(stream: AsyncIterator[bytes | ToolCall], into: list[bytes | ToolCall]) -> None:
    async for item in stream:
        into.append(item)


async def _open(client: CallgateClient, service: ScriptedToolService) -> ClientSession:
    service.script(
        "OpenSession", tool_service_pb2.OpenSessionResponse(session=session_message("s-1"))
    )
    return await client.open_session()


@pytest.mark.anyio
async def test_every_call_carries_the_bearer_token(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """The token goes out as `authorization: Bearer <token>` metadata on each RPC."""
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script(
            "GetCall",
            tool_service_pb2.GetCallResponse(call=call_message(tool_call_pb2.STATE_PREPARED)),
        )
        await session.get_call("ex-1")
    assert [item.metadata.get("authorization") for item in service.received] == [
        f"Bearer {TOKEN}",
        f"Bearer {TOKEN}",
    ]


@pytest.mark.anyio
async def test_token_file_and_default_token_read_the_agent_token_file(
    target: str, service: ScriptedToolService, tmp_path: Path
) -> None:
    """`default_token` reads `<state_dir>/tokens/agent` and `token_file` sends that token."""
    (tmp_path / "tokens").mkdir()
    token_file = tmp_path / "tokens" / "agent"
    token_file.write_text("file-token\n", encoding="utf-8")
    assert default_token(tmp_path) == "file-token"
    service.script("ListTools", tool_service_pb2.ListToolsResponse())
    async with CallgateClient(target, token_file=token_file) as client:
        with anyio.fail_after(5):
            await client.tools("s-1")
    assert service.received[0].metadata["authorization"] == "Bearer file-token"


def test_client_refuses_a_token_together_with_a_token_file(tmp_path: Path) -> None:
    """Two token sources are ambiguous, so the constructor refuses them."""
    with pytest.raises(ValueError, match="token"):
        CallgateClient("127.0.0.1:1", token="a", token_file=tmp_path / "agent")


def test_client_refuses_a_token_that_cannot_be_sent_as_metadata() -> None:
    """A token with a line break is refused at construction, not at the first call."""
    with pytest.raises(ValueError, match="token"):
        CallgateClient("127.0.0.1:1", token="abc\ndef")


@pytest.mark.anyio
async def test_using_a_client_outside_its_context_raises() -> None:
    """The channel exists only inside `async with`; calling before that says so."""
    client = CallgateClient("127.0.0.1:1", token="t")
    with pytest.raises(RuntimeError, match="async with"):
        await client.tools("s-1")


@pytest.mark.anyio
async def test_open_session_as_context_manager_closes_the_session_on_exit(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """`async with client.open_session()` opens with workspace and labels and closes on exit."""
    service.script(
        "OpenSession", tool_service_pb2.OpenSessionResponse(session=session_message("s-9"))
    )
    service.script("CloseSession", tool_service_pb2.CloseSessionResponse())
    with anyio.fail_after(5):
        async with client.open_session("/work/space", labels={"agent": "test"}) as session:
            assert session.session.session_id == "s-9"
            assert session.session.labels == {"agent": "test"}
    opened = _only(service, "OpenSession")
    assert isinstance(opened, tool_service_pb2.OpenSessionRequest)
    assert opened.workspace == "/work/space"
    assert dict(opened.labels) == {"agent": "test"}
    closed = _only(service, "CloseSession")
    assert isinstance(closed, tool_service_pb2.CloseSessionRequest)
    assert closed.session_id == "s-9"


@pytest.mark.anyio
async def test_closing_a_session_that_is_already_gone_is_not_an_error(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """SESSION_NOT_FOUND on close means the session is closed; a second close sends nothing."""
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script("CloseSession", rich_status(Code.NOT_FOUND, "SESSION_NOT_FOUND"))
        await session.close()
        await session.close()
    assert len(service.requests("CloseSession")) == 1


@pytest.mark.anyio
async def test_prepare_sends_mapping_arguments_as_compact_json(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """A mapping is encoded as compact JSON; a string is sent exactly as given."""
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script(
            "Prepare",
            _prepared(tool_call_pb2.STATE_PREPARED),
            _prepared(tool_call_pb2.STATE_PREPARED),
        )
        call = await session.prepare("ReadFile", {"path": "dir/ü.txt", "start_line": 2})
        await session.prepare("ReadFile", '{"path": "x"}', loop_id="loop-2", request_id="r-1")
    assert call.state is State.PREPARED
    first, second = service.requests("Prepare")
    assert isinstance(first, tool_service_pb2.PrepareRequest)
    assert isinstance(second, tool_service_pb2.PrepareRequest)
    assert first.arguments_json == '{"path":"dir/ü.txt","start_line":2}'
    assert (first.session_id, first.tool_name, first.evaluate) == ("s-1", "ReadFile", False)
    assert (first.loop_id, first.request_id) == ("", "")
    assert second.arguments_json == '{"path": "x"}'
    assert (second.loop_id, second.request_id) == ("loop-2", "r-1")


@pytest.mark.anyio
async def test_approve_sends_wait_as_a_duration_capped_at_sixty_seconds(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """`wait` becomes ApproveRequest.wait, never above the server's 60 s cap; None sends none."""
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script("Approve", *[_approved(tool_call_pb2.STATE_APPROVED)] * 3)
        await session.approve("ex-1", wait=1.5)
        await session.approve("ex-1", wait=600)
        await session.approve("ex-1")
    waits = []
    for request in service.requests("Approve"):
        assert isinstance(request, tool_service_pb2.ApproveRequest)
        waits.append(request.wait.ToNanoseconds() if request.HasField("wait") else None)
    assert waits == [1_500_000_000, 60_000_000_000, None]


@pytest.mark.anyio
async def test_run_invokes_a_call_the_gate_approved_at_prepare(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """The fast path: Prepare(evaluate) returns APPROVED, then Invoke, with distinct UUIDs."""
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script("Prepare", _prepared(tool_call_pb2.STATE_APPROVED))
        service.script("Invoke", _invoked())
        result = await session.run("ReadFile", {"path": "README.md"})
    assert result.text == "     1\thello"
    assert not result.is_error
    assert service.requests("Approve") == []
    prepare = _only(service, "Prepare")
    invoke = _only(service, "Invoke")
    assert isinstance(prepare, tool_service_pb2.PrepareRequest)
    assert isinstance(invoke, tool_service_pb2.InvokeRequest)
    assert prepare.evaluate
    assert json.loads(prepare.arguments_json) == {"path": "README.md"}
    assert invoke.execution_id == "ex-1"
    assert uuid.UUID(prepare.request_id) != uuid.UUID(invoke.request_id)


@pytest.mark.anyio
async def test_run_waits_for_an_approver_through_repeated_approve(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """A gated call is re-asked with a wait until an approver decides, then invoked."""
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script("Prepare", _prepared(tool_call_pb2.STATE_AWAITING_APPROVAL))
        service.script(
            "Approve",
            _approved(tool_call_pb2.STATE_AWAITING_APPROVAL),
            _approved(tool_call_pb2.STATE_APPROVED),
        )
        service.script("Invoke", _invoked())
        result = await session.run("ReadFile", {"path": "README.md"}, wait=300)
    assert not result.is_error
    approvals = service.requests("Approve")
    assert len(approvals) == 2
    for request in approvals:
        assert isinstance(request, tool_service_pb2.ApproveRequest)
        assert 0 < request.wait.ToNanoseconds() <= 60_000_000_000


@pytest.mark.anyio
async def test_run_raises_call_denied_error_with_the_denial(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """A DENIED call raises CallDeniedError carrying kind and description, and is not invoked."""
    denied = call_message(tool_call_pb2.STATE_DENIED)
    denied.denial.kind = tool_call_pb2.DENIAL_KIND_REFUSED
    denied.denial.description = "A deny rule refuses reading /work/space/.env."
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script("Prepare", tool_service_pb2.PrepareResponse(call=denied))
        with pytest.raises(CallDeniedError) as raised:
            await session.run("ReadFile", {"path": ".env"})
    error = raised.value
    assert error.code is None
    assert error.reason == "CALL_DENIED"
    assert error.kind is DenialKind.REFUSED
    assert error.denial.description == "A deny rule refuses reading /work/space/.env."
    assert error.call.state is State.DENIED
    assert service.requests("Invoke") == []


@pytest.mark.anyio
async def test_run_cancels_the_call_when_its_approval_wait_runs_out(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """With the wait spent and no decision, run cancels the call and raises."""
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script("Prepare", _prepared(tool_call_pb2.STATE_AWAITING_APPROVAL))
        service.script("CancelCall", _cancelled())
        with pytest.raises(ApprovalTimeoutError) as raised:
            await session.run("Bash", {"command": "make"}, wait=0)
    assert raised.value.reason == "APPROVAL_PENDING"
    assert raised.value.call.execution_id == "ex-1"
    cancel = _only(service, "CancelCall")
    assert isinstance(cancel, tool_service_pb2.CancelCallRequest)
    assert cancel.execution_id == "ex-1"
    assert service.requests("Invoke") == []


@pytest.mark.anyio
async def test_run_cancels_the_call_when_the_caller_is_cancelled_while_waiting(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """Cancelling run during Approve withdraws the call so no approver is asked in vain."""
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script("Prepare", _prepared(tool_call_pb2.STATE_AWAITING_APPROVAL))
        service.script("Approve", Hang())
        service.script("CancelCall", _cancelled())
        async with anyio.create_task_group() as group:
            group.start_soon(session.run, "Bash", {"command": "make"})
            await service.hanging.wait()
            group.cancel_scope.cancel()
    cancel = _only(service, "CancelCall")
    assert isinstance(cancel, tool_service_pb2.CancelCallRequest)
    assert cancel.execution_id == "ex-1"


@pytest.mark.anyio
async def test_run_returns_a_tool_level_failure_as_a_result(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """A tool that ran and failed is a result with is_error, never an exception."""
    failure = result_message("No such file: a.txt", is_error=True, error_code="file_not_found")
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script("Prepare", _prepared(tool_call_pb2.STATE_APPROVED))
        service.script("Invoke", _invoked(tool_call_pb2.STATE_FAILED, failure))
        result = await session.run("ReadFile", {"path": "a.txt"})
    assert result.is_error
    assert result.error_code == "file_not_found"


@pytest.mark.anyio
async def test_invalid_arguments_at_prepare_raise_with_field_violations(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """ARGUMENTS_INVALID from Prepare surfaces from run as InvalidArgumentsError."""
    refused = rich_status(
        Code.INVALID_ARGUMENT, "ARGUMENTS_INVALID", violations=[("arguments.path", "required")]
    )
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script("Prepare", refused)
        with pytest.raises(InvalidArgumentsError) as raised:
            await session.run("ReadFile", {})
    assert [item.field for item in raised.value.violations] == ["arguments.path"]


@pytest.mark.anyio
async def test_invoke_returns_the_final_call_and_its_result(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """Invoke sends only IDs and returns the final call with its result."""
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script("Invoke", _invoked())
        invoked = await session.invoke("ex-1", request_id="r-7")
    assert invoked.call.state is State.SUCCEEDED
    assert invoked.result == invoked.call.result
    request = _only(service, "Invoke")
    assert isinstance(request, tool_service_pb2.InvokeRequest)
    assert (request.session_id, request.execution_id, request.request_id) == ("s-1", "ex-1", "r-7")


@pytest.mark.anyio
async def test_invoke_stream_yields_output_chunks_then_the_final_call(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """Chunks arrive as bytes in order, and the last item is the final ToolCall."""
    events = [
        tool_service_pb2.InvokeStreamResponse(output=tool_service_pb2.OutputChunk(data=b"one\n")),
        tool_service_pb2.InvokeStreamResponse(output=tool_service_pb2.OutputChunk(data=b"two\n")),
        tool_service_pb2.InvokeStreamResponse(finished=call_message(tool_call_pb2.STATE_SUCCEEDED)),
    ]
    received: list[bytes | ToolCall] = []
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script("InvokeStream", events)
        async for item in session.invoke_stream("ex-1"):
            received.append(item)
    assert received[:2] == [b"one\n", b"two\n"]
    final = received[2]
    assert isinstance(final, ToolCall)
    assert final.state is State.SUCCEEDED


@pytest.mark.anyio
async def test_watch_call_yields_each_state_and_stops_at_a_terminal_one(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """WatchCall's calls arrive in order; the iteration ends with the terminal state."""
    events = [
        tool_service_pb2.WatchCallResponse(call=call_message(state))
        for state in (
            tool_call_pb2.STATE_AWAITING_APPROVAL,
            tool_call_pb2.STATE_APPROVED,
            tool_call_pb2.STATE_DENIED,
        )
    ]
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script("WatchCall", events)
        states = [call.state async for call in session.watch_call("ex-1")]
    assert states == [State.AWAITING_APPROVAL, State.APPROVED, State.DENIED]
    request = _only(service, "WatchCall")
    assert isinstance(request, tool_service_pb2.WatchCallRequest)
    assert (request.session_id, request.execution_id) == ("s-1", "ex-1")


@pytest.mark.anyio
async def test_invoke_stream_raises_the_typed_error_that_ends_the_stream(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """An error status after some output is raised as its typed error."""
    events: list[message.Message | grpc.Status] = [
        tool_service_pb2.InvokeStreamResponse(output=tool_service_pb2.OutputChunk(data=b"x")),
        rich_status(Code.FAILED_PRECONDITION, "CALL_ALREADY_INVOKED"),
    ]
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script("InvokeStream", events)
        received: list[bytes | ToolCall] = []
        with pytest.raises(CallStateError) as raised:
            await _drain(session.invoke_stream("ex-1"), received)
    assert received == [b"x"]
    assert raised.value.reason == "CALL_ALREADY_INVOKED"


@pytest.mark.anyio
async def test_invoke_stream_without_a_final_call_is_a_protocol_error(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """A stream that ends without its final call is reported, not silently accepted."""
    events = [
        tool_service_pb2.InvokeStreamResponse(output=tool_service_pb2.OutputChunk(data=b"x")),
    ]
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script("InvokeStream", events)
        with pytest.raises(ProtocolError):
            await _drain(session.invoke_stream("ex-1"), [])


@pytest.mark.anyio
async def test_tools_lists_specs_and_rejects_a_schema_that_is_not_an_object(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """ListTools becomes ToolSpecs with decoded schemas; a non-object schema is a ProtocolError."""
    good = tool_service_pb2.ToolInfo(
        name="ReadFile",
        description="Reads a file.",
        input_schema_json='{"type":"object","properties":{"path":{"type":"string"}}}',
        requirement_kinds=["filesystem.read"],
    )
    bad = tool_service_pb2.ToolInfo(name="Broken", input_schema_json="[1]")
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script("ListTools", tool_service_pb2.ListToolsResponse(tools=[good]))
        service.script("ListTools", tool_service_pb2.ListToolsResponse(tools=[good, bad]))
        (spec,) = await session.tools()
        with pytest.raises(ProtocolError):
            await session.tools()
    assert spec.name == "ReadFile"
    assert spec.input_schema == {"type": "object", "properties": {"path": {"type": "string"}}}
    assert spec.requirement_kinds == ("filesystem.read",)


@pytest.mark.anyio
async def test_session_calls_name_their_session(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """ListCalls, CancelCall and OpenLoop carry the session ID and return converted answers."""
    with anyio.fail_after(5):
        session = await _open(client, service)
        service.script(
            "ListCalls",
            tool_service_pb2.ListCallsResponse(
                calls=[
                    call_message(tool_call_pb2.STATE_SUCCEEDED, "ex-2"),
                    call_message(tool_call_pb2.STATE_PREPARED, "ex-1"),
                ]
            ),
        )
        service.script("CancelCall", _cancelled())
        service.script("OpenLoop", tool_service_pb2.OpenLoopResponse(loop_id="loop-1"))
        calls = await session.list_calls()
        cancelled = await session.cancel("ex-1")
        loop_id = await session.open_loop()
    assert [call.execution_id for call in calls] == ["ex-2", "ex-1"]
    assert cancelled.state is State.CANCELLED
    assert loop_id == "loop-1"
    for method in ("ListCalls", "CancelCall", "OpenLoop"):
        request = _only(service, method)
        assert getattr(request, "session_id", None) == "s-1"


@pytest.mark.anyio
async def test_a_retried_prepare_and_invoke_reuse_their_request_ids(
    target: str, service: ScriptedToolService
) -> None:
    """On UNAVAILABLE the channel retries with the same request ID, so no effect repeats."""
    service.script(
        "OpenSession", tool_service_pb2.OpenSessionResponse(session=session_message("s-1"))
    )
    service.script(
        "Prepare", PlainStatus(Code.UNAVAILABLE), _prepared(tool_call_pb2.STATE_APPROVED)
    )
    service.script("Invoke", PlainStatus(Code.UNAVAILABLE), _invoked())
    async with CallgateClient(target, token=TOKEN) as client:
        with anyio.fail_after(5):
            session = await client.open_session()
            result = await session.run("ReadFile", {"path": "README.md"})
    assert not result.is_error
    for method in ("Prepare", "Invoke"):
        first, second = service.requests(method)
        assert getattr(first, "request_id", "") == getattr(second, "request_id", None) != ""


@pytest.mark.anyio
async def test_open_session_is_not_retried(target: str, service: ScriptedToolService) -> None:
    """OpenSession would leave an orphan session if retried, so UNAVAILABLE surfaces at once."""
    service.script("OpenSession", PlainStatus(Code.UNAVAILABLE))
    async with CallgateClient(target, token=TOKEN) as client:
        with anyio.fail_after(5), pytest.raises(ServerUnavailableError):
            await client.open_session()
    assert len(service.requests("OpenSession")) == 1


@pytest.mark.anyio
async def test_get_session_attaches_to_an_existing_session(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """get_session reads the session and returns a ClientSession bound to it."""
    service.script(
        "GetSession", tool_service_pb2.GetSessionResponse(session=session_message("s-4"))
    )
    service.script("GetSession", rich_status(Code.NOT_FOUND, "SESSION_NOT_FOUND"))
    with anyio.fail_after(5):
        session = await client.get_session("s-4")
        with pytest.raises(SessionNotFoundError):
            await client.get_session("s-5")
    assert session.session_id == "s-4"


@pytest.mark.anyio
async def test_a_failed_close_does_not_hide_the_error_that_ended_the_block(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """When the body raised, a close that fails too leaves the body's error in charge."""
    service.script(
        "OpenSession", tool_service_pb2.OpenSessionResponse(session=session_message("s-1"))
    )
    service.script("CloseSession", PlainStatus(Code.UNAVAILABLE))
    with anyio.fail_after(5), pytest.raises(KeyError):
        async with client.open_session():
            raise KeyError("from the body")
    assert len(service.requests("CloseSession")) == 1
