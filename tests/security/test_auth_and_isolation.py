"""Authentication, roles, and isolation between principals and sessions."""

from __future__ import annotations

from collections.abc import Awaitable

import grpc
import pytest

from callgate.v1 import tool_service_pb2
from tests.support.calls import invoke, open_session, prepare
from tests.support.server import Harness
from tests.support.status import failure

pytestmark = pytest.mark.anyio


async def test_missing_token_is_unauthenticated(harness: Harness) -> None:
    """No authorization metadata: UNAUTHENTICATED / TOKEN_MISSING."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await open_session(harness.stub(role=None))
    got = failure(raised.value)
    assert (got.code, got.reason) == (grpc.StatusCode.UNAUTHENTICATED, "TOKEN_MISSING")


@pytest.mark.parametrize("token", ["wrong", "x" * 4000, "Bearer"])
async def test_wrong_token_is_unauthenticated(harness: Harness, token: str) -> None:
    """A token the server does not know: UNAUTHENTICATED / TOKEN_INVALID."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await open_session(harness.stub(token=token))
    got = failure(raised.value)
    assert (got.code, got.reason) == (grpc.StatusCode.UNAUTHENTICATED, "TOKEN_INVALID")


async def test_approver_token_cannot_use_the_agent_service(harness: Harness) -> None:
    """The approver role alone cannot open sessions: PERMISSION_DENIED / ROLE_REQUIRED."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await open_session(harness.stub(role="approver"))
    got = failure(raised.value)
    assert (got.code, got.reason) == (grpc.StatusCode.PERMISSION_DENIED, "ROLE_REQUIRED")


async def test_token_files_are_private(harness: Harness) -> None:
    """Generated token files are mode 0600 in a 0700 directory."""
    assert harness.running.token_dir is not None
    assert harness.running.token_dir.stat().st_mode & 0o777 == 0o700
    for role in ("agent", "approver", "admin"):
        assert (harness.running.token_dir / role).stat().st_mode & 0o777 == 0o600


async def test_another_principals_session_is_not_found_even_for_admin(harness: Harness) -> None:
    """An agent's session and calls are NOT_FOUND for admin, exactly like an unknown ID."""
    (harness.workspace / "a.txt").write_text("a")
    agent = harness.stub()
    session = await open_session(agent)
    call = await prepare(agent, session, "ReadFile", {"path": "a.txt"}, evaluate=True)
    admin = harness.stub(role="admin")
    attempts: list[Awaitable[object]] = [
        admin.GetSession(tool_service_pb2.GetSessionRequest(session_id=session)),
        admin.GetCall(
            tool_service_pb2.GetCallRequest(session_id=session, execution_id=call.execution_id)
        ),
        admin.Invoke(
            tool_service_pb2.InvokeRequest(session_id=session, execution_id=call.execution_id)
        ),
        admin.CancelCall(
            tool_service_pb2.CancelCallRequest(session_id=session, execution_id=call.execution_id)
        ),
        admin.CloseSession(tool_service_pb2.CloseSessionRequest(session_id=session)),
        admin.ListCalls(tool_service_pb2.ListCallsRequest(session_id=session)),
    ]
    for attempt in attempts:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await attempt
        assert failure(raised.value).reason == "SESSION_NOT_FOUND"
    response = await invoke(agent, session, call.execution_id)
    assert response.result.text.strip().endswith("a")


async def test_an_execution_id_from_another_session_is_not_found(harness: Harness) -> None:
    """A call is invisible from another session of the same principal."""
    (harness.workspace / "a.txt").write_text("a")
    stub = harness.stub()
    first = await open_session(stub)
    second = await open_session(stub)
    call = await prepare(stub, first, "ReadFile", {"path": "a.txt"}, evaluate=True)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await invoke(stub, second, call.execution_id)
    got = failure(raised.value)
    assert (got.code, got.reason) == (grpc.StatusCode.NOT_FOUND, "CALL_NOT_FOUND")


async def test_closed_session_is_gone(harness: Harness) -> None:
    """After CloseSession the session and its calls are NOT_FOUND."""
    stub = harness.stub()
    session = await open_session(stub)
    call = await prepare(stub, session, "Glob", {"pattern": "*"}, evaluate=True)
    await stub.CloseSession(tool_service_pb2.CloseSessionRequest(session_id=session))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await invoke(stub, session, call.execution_id)
    assert failure(raised.value).reason == "SESSION_NOT_FOUND"


async def test_execution_ids_are_long_and_random(harness: Harness) -> None:
    """Execution and session IDs carry at least 122 random bits (here: 24 url-safe chars)."""
    stub = harness.stub()
    session = await open_session(stub)
    ids = {(await prepare(stub, session, "Glob", {"pattern": "*"})).execution_id for _ in range(20)}
    assert len(ids) == 20
    assert all(len(i.removeprefix("call_")) >= 24 for i in ids)
    assert len(session.removeprefix("ses_")) >= 24
