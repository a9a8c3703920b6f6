"""Bad input for every tool and RPC: a clear error with a stable reason, and nothing stored."""

from __future__ import annotations

import json
from collections.abc import Awaitable

import grpc
import pytest

from callgate.v1 import tool_service_pb2
from tests.support.calls import open_session, prepare
from tests.support.server import Harness
from tests.support.status import failure

pytestmark = pytest.mark.anyio

TOOLS_VALID: dict[str, dict[str, object]] = {
    "ReadFile": {"path": "a.txt"},
    "WriteFile": {"path": "a.txt", "content": "x"},
    "EditFile": {"path": "a.txt", "old": "a", "new": "b"},
    "Glob": {"pattern": "*"},
    "Grep": {"pattern": "a"},
}


def _nested(depth: int) -> str:
    return '{"path": ' + "[" * depth + "]" * depth + "}"


BAD_DOCUMENTS: dict[str, str] = {
    "malformed": '{"path": ',
    "not_an_object": '["a.txt"]',
    "empty": "",
    "nan": '{"path": NaN}',
    "nul_byte": '{"path": "a\\u0000b"}',
    "lone_surrogate": '{"path": "\\ud800"}',
    "duplicate_key": '{"path": "a", "path": "b"}',
    "deep_nesting": _nested(100),
    "huge": json.dumps({"path": "a" * (2 << 20)}),
}


@pytest.mark.parametrize("tool", sorted(TOOLS_VALID))
@pytest.mark.parametrize("case", sorted(BAD_DOCUMENTS))
async def test_malformed_arguments_are_invalid_and_store_nothing(
    harness: Harness, tool: str, case: str
) -> None:
    """Every malformed document fails Prepare with ARGUMENTS_INVALID and leaves no call behind."""
    stub = harness.stub()
    session = await open_session(stub)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await prepare(stub, session, tool, BAD_DOCUMENTS[case])
    got = failure(raised.value)
    assert got.code == grpc.StatusCode.INVALID_ARGUMENT
    assert got.reason == "ARGUMENTS_INVALID"
    assert got.domain == "callgate.dev"
    assert got.fields
    assert got.fields[0].startswith("arguments")
    listed = await stub.ListCalls(tool_service_pb2.ListCallsRequest(session_id=session))
    assert list(listed.calls) == []


def _mutations(tool: str) -> list[tuple[str, dict[str, object], str]]:
    valid = TOOLS_VALID[tool]
    first = next(iter(valid))
    cases: list[tuple[str, dict[str, object], str]] = [
        ("unknown_field", {**valid, "surprise": 1}, "arguments.surprise"),
        ("wrong_type", {**valid, first: 42}, f"arguments.{first}"),
        ("missing_required", {k: v for k, v in valid.items() if k != first}, f"arguments.{first}"),
        ("null", {**valid, first: None}, f"arguments.{first}"),
    ]
    return cases


@pytest.mark.parametrize(
    ("tool", "case", "arguments", "field"),
    [(tool, *m) for tool in sorted(TOOLS_VALID) for m in _mutations(tool)],
)
async def test_ill_typed_arguments_name_the_field(
    harness: Harness, tool: str, case: str, arguments: dict[str, object], field: str
) -> None:
    """Unknown fields, wrong types and missing fields are ARGUMENTS_INVALID naming the field."""
    stub = harness.stub()
    session = await open_session(stub)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await prepare(stub, session, tool, arguments)
    got = failure(raised.value)
    assert (got.code, got.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGUMENTS_INVALID"), case
    assert got.fields == [field]


async def test_unknown_tool_is_not_found(harness: Harness) -> None:
    """An unknown tool name is NOT_FOUND / TOOL_NOT_FOUND."""
    stub = harness.stub()
    session = await open_session(stub)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await prepare(stub, session, "rm -rf", {})
    assert failure(raised.value).reason == "TOOL_NOT_FOUND"


@pytest.mark.parametrize(
    ("method", "message", "reason"),
    [
        ("GetSession", tool_service_pb2.GetSessionRequest(), "REQUEST_INVALID"),
        (
            "GetSession",
            tool_service_pb2.GetSessionRequest(session_id="ses_nope"),
            "SESSION_NOT_FOUND",
        ),
        (
            "GetSession",
            tool_service_pb2.GetSessionRequest(session_id="x" * 100_000),
            "SESSION_NOT_FOUND",
        ),
        ("OpenLoop", tool_service_pb2.OpenLoopRequest(session_id="ses_nope"), "SESSION_NOT_FOUND"),
        ("ListTools", tool_service_pb2.ListToolsRequest(), "REQUEST_INVALID"),
        (
            "CloseSession",
            tool_service_pb2.CloseSessionRequest(session_id="ses_nope"),
            "SESSION_NOT_FOUND",
        ),
        (
            "OpenSession",
            tool_service_pb2.OpenSessionRequest(workspace="relative/dir"),
            "WORKSPACE_INVALID",
        ),
        ("OpenSession", tool_service_pb2.OpenSessionRequest(workspace="/"), "WORKSPACE_INVALID"),
        (
            "OpenSession",
            tool_service_pb2.OpenSessionRequest(workspace="/nonexistent/dir"),
            "WORKSPACE_INVALID",
        ),
        (
            "OpenSession",
            tool_service_pb2.OpenSessionRequest(labels={str(i): "v" for i in range(17)}),
            "REQUEST_INVALID",
        ),
    ],
)
async def test_bad_session_requests_get_stable_reasons(
    harness: Harness, method: str, message: object, reason: str
) -> None:
    """Session RPCs reject bad IDs and workspaces with a stable reason."""
    stub = harness.stub()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await getattr(stub, method)(message)
    assert failure(raised.value).reason == reason


async def test_call_rpcs_reject_bad_ids_and_request_ids(harness: Harness) -> None:
    """Missing/unknown execution IDs and non-UUID request IDs fail cleanly."""
    stub = harness.stub()
    session = await open_session(stub)
    cases: list[tuple[Awaitable[object], str]] = [
        (stub.GetCall(tool_service_pb2.GetCallRequest(session_id=session)), "REQUEST_INVALID"),
        (
            stub.GetCall(
                tool_service_pb2.GetCallRequest(session_id=session, execution_id="call_x")
            ),
            "CALL_NOT_FOUND",
        ),
        (
            stub.Invoke(tool_service_pb2.InvokeRequest(session_id=session, execution_id="call_x")),
            "CALL_NOT_FOUND",
        ),
        (
            stub.CancelCall(
                tool_service_pb2.CancelCallRequest(session_id=session, execution_id="call_x")
            ),
            "CALL_NOT_FOUND",
        ),
        (
            stub.Approve(
                tool_service_pb2.ApproveRequest(session_id=session, execution_id="call_x")
            ),
            "CALL_NOT_FOUND",
        ),
        (
            stub.Prepare(
                tool_service_pb2.PrepareRequest(
                    session_id=session,
                    tool_name="Glob",
                    arguments_json='{"pattern":"*"}',
                    request_id="not-a-uuid",
                )
            ),
            "REQUEST_INVALID",
        ),
        (
            stub.Prepare(
                tool_service_pb2.PrepareRequest(
                    session_id=session,
                    loop_id="loop_nope",
                    tool_name="Glob",
                    arguments_json='{"pattern":"*"}',
                )
            ),
            "LOOP_NOT_FOUND",
        ),
    ]
    for pending, reason in cases:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await pending
        assert failure(raised.value).reason == reason


async def test_invalid_utf8_in_a_string_field_is_invalid_argument(harness: Harness) -> None:
    """Invalid UTF-8 in a protobuf string field is INVALID_ARGUMENT, not INTERNAL."""
    stub = harness.stub()
    session = await open_session(stub)
    good = tool_service_pb2.PrepareRequest(
        session_id=session, tool_name="ReadFile", arguments_json='{"path":"AAAA"}'
    ).SerializeToString()
    bad = good.replace(b"AAAA", b"\xff\xfe\xfd\xfc")
    channel = harness.channel()
    raw = channel.unary_unary(
        "/callgate.v1.ToolService/Prepare",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await raw(bad)
    got = failure(raised.value)
    assert (got.code, got.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_INVALID")


async def test_prepare_request_id_replays_and_conflicts(harness: Harness) -> None:
    """The same request_id and payload returns the same call; another payload is ALREADY_EXISTS."""
    (harness.workspace / "a.txt").write_text("a")
    stub = harness.stub()
    session = await open_session(stub)
    request_id = "0b7c0f2e-6d5b-4a84-9a53-2d6f1c1e9d10"
    first = await prepare(stub, session, "ReadFile", {"path": "a.txt"}, request_id=request_id)
    again = await prepare(stub, session, "ReadFile", {"path": "a.txt"}, request_id=request_id)
    assert again.execution_id == first.execution_id
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await prepare(stub, session, "ReadFile", {"path": "b.txt"}, request_id=request_id)
    got = failure(raised.value)
    assert (got.code, got.reason) == (grpc.StatusCode.ALREADY_EXISTS, "REQUEST_ID_CONFLICT")
