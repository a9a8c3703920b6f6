"""The pipelined fast path from the agent's seat: a Prepare with a client-chosen execution ID
and the Invoke naming it, written back to back on one Exchange stream before any answer.
The Invoke runs only if the call is APPROVED when it is taken; a gated, denied or merely
prepared call never runs, and the answer says why."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from pathlib import Path

import anyio
import grpc
import pytest

from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.support.calls import open_session, prepare
from tests.support.server import Harness, serve
from tests.support.status import failure

pytestmark = pytest.mark.anyio


def new_execution_id() -> str:
    return "call_" + uuid.uuid4().hex


def prepare_message(
    message_id: int,
    session_id: str,
    tool: str,
    arguments: Mapping[str, object],
    execution_id: str,
    *,
    evaluate: bool = True,
) -> tpb.ExchangeRequest:
    return tpb.ExchangeRequest(
        id=message_id,
        prepare=tpb.PrepareRequest(
            session_id=session_id,
            tool_name=tool,
            arguments_json=json.dumps(arguments),
            evaluate=evaluate,
            execution_id=execution_id,
        ),
    )


def invoke_message(message_id: int, session_id: str, execution_id: str) -> tpb.ExchangeRequest:
    return tpb.ExchangeRequest(
        id=message_id, invoke=tpb.InvokeRequest(session_id=session_id, execution_id=execution_id)
    )


async def pipelined(
    harness: Harness,
    session_id: str,
    tool: str,
    arguments: dict[str, object],
    *,
    evaluate: bool = True,
    execution_id: str = "",
) -> tuple[tpb.ExchangeResponse, tpb.ExchangeResponse]:
    """Writes Prepare and Invoke of the same execution ID before reading either answer."""
    execution_id = execution_id or new_execution_id()
    stream = harness.stub().Exchange()
    await stream.write(
        prepare_message(1, session_id, tool, arguments, execution_id, evaluate=evaluate)
    )
    await stream.write(invoke_message(2, session_id, execution_id))
    await stream.done_writing()
    answers: dict[int, tpb.ExchangeResponse] = {}
    with anyio.fail_after(10):
        async for response in stream:
            answers[response.id] = response
    return answers[1], answers[2]


async def test_an_allowed_call_runs_in_one_round_trip(harness: Harness) -> None:
    (harness.workspace / "a.txt").write_text("hello\n")
    session_id = await open_session(harness.stub())
    prepared, invoked = await pipelined(harness, session_id, "ReadFile", {"path": "a.txt"})
    assert prepared.prepare.call.state == cpb.STATE_APPROVED
    assert invoked.WhichOneof("outcome") == "invoke"
    assert invoked.invoke.call.state == cpb.STATE_SUCCEEDED
    assert "hello" in invoked.invoke.result.text


async def test_a_gated_call_never_runs_from_a_pipelined_invoke(harness: Harness) -> None:
    session_id = await open_session(harness.stub())
    prepared, invoked = await pipelined(
        harness, session_id, "WriteFile", {"path": "w.txt", "content": "x"}
    )
    assert prepared.prepare.call.state == cpb.STATE_AWAITING_APPROVAL
    assert invoked.WhichOneof("outcome") == "error"
    assert invoked.error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert not (harness.workspace / "w.txt").exists()
    got = await harness.stub().GetCall(
        tpb.GetCallRequest(session_id=session_id, execution_id=prepared.prepare.call.execution_id)
    )
    assert got.call.state == cpb.STATE_AWAITING_APPROVAL  # still the approver's to decide


async def test_a_denied_or_unevaluated_call_never_runs(harness: Harness) -> None:
    (harness.workspace / ".env").write_text("SECRET=1\n")
    session_id = await open_session(harness.stub())
    prepared, invoked = await pipelined(harness, session_id, "ReadFile", {"path": ".env"})
    assert prepared.prepare.call.state == cpb.STATE_DENIED
    assert invoked.WhichOneof("outcome") == "error"
    assert "SECRET" not in str(invoked)
    (harness.workspace / "b.txt").write_text("b\n")
    prepared, invoked = await pipelined(
        harness, session_id, "ReadFile", {"path": "b.txt"}, evaluate=False
    )
    assert prepared.prepare.call.state == cpb.STATE_PREPARED
    assert invoked.WhichOneof("outcome") == "error"
    assert invoked.error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]


async def test_many_pipelined_pairs_each_meet_their_own_settled_call(harness: Harness) -> None:
    """Twenty pairs written at once, allowed and gated interleaved: every allowed read runs,
    no gated write does."""
    session_id = await open_session(harness.stub())
    for n in range(10):
        (harness.workspace / f"r{n}.txt").write_text(f"read {n}\n")
    stream = harness.stub().Exchange()
    ids: list[tuple[str, str]] = []
    next_id = 1
    for n in range(10):
        for tool, args in (
            ("ReadFile", {"path": f"r{n}.txt"}),
            ("WriteFile", {"path": f"w{n}.txt", "content": "x"}),
        ):
            execution_id = new_execution_id()
            ids.append((tool, execution_id))
            await stream.write(prepare_message(next_id, session_id, tool, args, execution_id))
            await stream.write(invoke_message(next_id + 1, session_id, execution_id))
            next_id += 2
    await stream.done_writing()
    answers: dict[int, tpb.ExchangeResponse] = {}
    with anyio.fail_after(20):
        async for response in stream:
            answers[response.id] = response
    for index, (tool, _) in enumerate(ids):
        invoked = answers[2 * index + 2]
        if tool == "ReadFile":
            assert invoked.invoke.call.state == cpb.STATE_SUCCEEDED, invoked
        else:
            assert invoked.WhichOneof("outcome") == "error"
    assert not list(harness.workspace.glob("w*.txt"))


async def test_client_chosen_ids_are_checked_and_unique(harness: Harness) -> None:
    stub = harness.stub()
    session_id = await open_session(stub)
    (harness.workspace / "a.txt").write_text("a\n")
    for bad in ("call_x", "call_" + uuid.uuid4().hex.upper(), "call_" + uuid.uuid1().hex, "x" * 37):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Prepare(
                tpb.PrepareRequest(
                    session_id=session_id,
                    tool_name="ReadFile",
                    arguments_json='{"path": "a.txt"}',
                    execution_id=bad,
                )
            )
        assert failure(caught.value).reason == "REQUEST_INVALID"
    chosen = new_execution_id()
    request_id = str(uuid.uuid4())
    request = tpb.PrepareRequest(
        session_id=session_id,
        tool_name="ReadFile",
        arguments_json='{"path": "a.txt"}',
        execution_id=chosen,
        request_id=request_id,
    )
    first = await stub.Prepare(request)
    assert first.call.execution_id == chosen
    again = await stub.Prepare(request)  # a retry: the same call
    assert again.call.execution_id == chosen
    other_session = await open_session(stub)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Prepare(
            tpb.PrepareRequest(
                session_id=other_session,
                tool_name="ReadFile",
                arguments_json='{"path": "a.txt"}',
                execution_id=chosen,
            )
        )
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert failure(caught.value).reason == "EXECUTION_ID_EXISTS"
    minted = await prepare(stub, session_id, "ReadFile", {"path": "a.txt"})
    assert minted.execution_id.startswith("call_")
    assert minted.execution_id != chosen


async def test_a_long_command_parsed_off_the_loop_still_meets_its_pipelined_invoke(
    tmp_path: Path,
) -> None:
    """A long Bash command is parsed in a worker thread before its Prepare runs (Bash.warm),
    and Prepares take turns: the Prepare then awaits, yet the Invoke written right behind it on
    the stream still runs only once the call is settled, and runs it."""
    command = " && ".join(f"echo {index}" for index in range(200))  # > 1 KiB: parsed in a thread
    async with serve(tmp_path, access={"command": "allow"}) as harness:
        session_id = await open_session(harness.stub())
        prepared, invoked = await pipelined(harness, session_id, "Bash", {"command": command})
        assert prepared.prepare.call.state == cpb.STATE_APPROVED
        assert invoked.WhichOneof("outcome") == "invoke", invoked
        assert invoked.invoke.call.state == cpb.STATE_SUCCEEDED
        assert invoked.invoke.result.text.startswith("0\n1\n")


async def test_arguments_that_break_the_json_parser_are_refused_not_an_internal_error(
    harness: Harness,
) -> None:
    """Deeply nested JSON over 1 KiB went through Bash's early parse (warm) first, whose
    RecursionError answered INTERNAL; Prepare itself refuses it as ARGUMENTS_INVALID."""
    session_id = await open_session(harness.stub())
    deep = "[" * 5000 + "]" * 5000
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.stub().Prepare(
            tpb.PrepareRequest(session_id=session_id, tool_name="Bash", arguments_json=deep)
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert failure(caught.value).reason == "ARGUMENTS_INVALID"
