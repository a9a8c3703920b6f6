"""The client turns gRPC statuses with google.rpc details into typed errors."""

from __future__ import annotations

from pathlib import Path

import anyio
import grpc
import pytest

from callgate.client import (
    ApproveOnceOnlyError,
    AuthenticationError,
    CallgateClient,
    CallgateClientError,
    CallNotFoundError,
    CallStateError,
    DeadlineExceededError,
    FieldViolation,
    InternalServerError,
    InvalidArgumentsError,
    InvalidRequestError,
    LimitExceededError,
    NotFoundError,
    PermissionDeniedError,
    RequestIdConflictError,
    RuleNotFoundError,
    RuleReadOnlyError,
    ServerUnavailableError,
    SessionNotFoundError,
    ToolNotFoundError,
)
from tests.client.scripted_server import PlainStatus, ScriptedToolService, rich_status

Code = grpc.StatusCode

REASONS: list[tuple[grpc.StatusCode, str, type[CallgateClientError]]] = [
    (Code.UNAUTHENTICATED, "TOKEN_MISSING", AuthenticationError),
    (Code.UNAUTHENTICATED, "TOKEN_INVALID", AuthenticationError),
    (Code.PERMISSION_DENIED, "ROLE_REQUIRED", PermissionDeniedError),
    (Code.INVALID_ARGUMENT, "ARGUMENTS_INVALID", InvalidArgumentsError),
    (Code.INVALID_ARGUMENT, "REQUEST_INVALID", InvalidRequestError),
    (Code.INVALID_ARGUMENT, "WORKSPACE_INVALID", InvalidRequestError),
    (Code.NOT_FOUND, "SESSION_NOT_FOUND", SessionNotFoundError),
    (Code.NOT_FOUND, "LOOP_NOT_FOUND", NotFoundError),
    (Code.NOT_FOUND, "TOOL_NOT_FOUND", ToolNotFoundError),
    (Code.NOT_FOUND, "CALL_NOT_FOUND", CallNotFoundError),
    (Code.NOT_FOUND, "RULE_NOT_FOUND", RuleNotFoundError),
    (Code.FAILED_PRECONDITION, "RULE_READ_ONLY", RuleReadOnlyError),
    (Code.FAILED_PRECONDITION, "APPROVE_ONCE_ONLY", ApproveOnceOnlyError),
    (Code.FAILED_PRECONDITION, "CALL_NOT_APPROVED", CallStateError),
    (Code.FAILED_PRECONDITION, "CALL_DENIED", CallStateError),
    (Code.FAILED_PRECONDITION, "CALL_EXPIRED", CallStateError),
    (Code.FAILED_PRECONDITION, "CALL_ALREADY_INVOKED", CallStateError),
    (Code.FAILED_PRECONDITION, "CALL_STATE_INVALID", CallStateError),
    (Code.FAILED_PRECONDITION, "DIGEST_MISMATCH", CallStateError),
    (Code.FAILED_PRECONDITION, "NO_APPROVER", CallStateError),
    (Code.ALREADY_EXISTS, "REQUEST_ID_CONFLICT", RequestIdConflictError),
    (Code.RESOURCE_EXHAUSTED, "SESSION_LIMIT", LimitExceededError),
    (Code.RESOURCE_EXHAUSTED, "CALL_LIMIT", LimitExceededError),
    (Code.RESOURCE_EXHAUSTED, "CONCURRENCY_LIMIT", LimitExceededError),
    (Code.RESOURCE_EXHAUSTED, "PROCESS_LIMIT", LimitExceededError),
    (Code.RESOURCE_EXHAUSTED, "LOOP_LIMIT", LimitExceededError),
    (Code.UNAVAILABLE, "SHUTTING_DOWN", ServerUnavailableError),
    (Code.INTERNAL, "INTERNAL", InternalServerError),
]


async def _error_of(
    client: CallgateClient, service: ScriptedToolService, status: grpc.Status
) -> CallgateClientError:
    service.script("ListTools", status)
    with anyio.fail_after(5), pytest.raises(CallgateClientError) as raised:
        await client.tools("s-1")
    return raised.value


@pytest.mark.anyio
@pytest.mark.parametrize(("code", "reason", "expected"), REASONS)
async def test_each_documented_reason_raises_its_error_class(
    client: CallgateClient,
    service: ScriptedToolService,
    code: grpc.StatusCode,
    reason: str,
    expected: type[CallgateClientError],
) -> None:
    """Every reason of the design's table maps to its class, keeping code and reason."""
    error = await _error_of(client, service, rich_status(code, reason))
    assert type(error) is expected
    assert error.code is code
    assert error.reason == reason


@pytest.mark.anyio
async def test_error_metadata_violations_and_message_are_exposed(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """ErrorInfo metadata, BadRequest field violations and the status message are decoded."""
    status = rich_status(
        Code.INVALID_ARGUMENT,
        "ARGUMENTS_INVALID",
        message_text="Invalid tool arguments: arguments.path: required",
        metadata={"tool": "ReadFile"},
        violations=[("arguments.path", "required"), ("arguments.start_line", "must be >= 1")],
    )
    error = await _error_of(client, service, status)
    assert isinstance(error, InvalidArgumentsError)
    assert error.metadata == {"tool": "ReadFile"}
    assert error.violations == [
        FieldViolation("arguments.path", "required"),
        FieldViolation("arguments.start_line", "must be >= 1"),
    ]
    assert error.message == str(error)
    assert error.message


@pytest.mark.anyio
async def test_original_rpc_error_is_kept_as_the_cause(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """The typed error chains the grpc.aio.AioRpcError it was decoded from."""
    error = await _error_of(client, service, rich_status(Code.NOT_FOUND, "SESSION_NOT_FOUND"))
    assert isinstance(error.__cause__, grpc.aio.AioRpcError)


@pytest.mark.anyio
async def test_unknown_reason_falls_back_to_the_class_of_its_status_code(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """A reason this client does not know is classified by the status code, reason kept."""
    error = await _error_of(client, service, rich_status(Code.NOT_FOUND, "WIDGET_NOT_FOUND"))
    assert type(error) is NotFoundError
    assert error.reason == "WIDGET_NOT_FOUND"


@pytest.mark.anyio
async def test_error_info_from_another_domain_is_classified_by_status_code(
    client: CallgateClient, service: ScriptedToolService
) -> None:
    """A foreign ErrorInfo (e.g. from a proxy) never selects a callgate reason class."""
    status = rich_status(Code.NOT_FOUND, "SESSION_NOT_FOUND", domain="proxy.example")
    error = await _error_of(client, service, status)
    assert type(error) is NotFoundError
    assert error.reason == "SESSION_NOT_FOUND"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (Code.UNAVAILABLE, ServerUnavailableError),
        (Code.INTERNAL, InternalServerError),
        (Code.DEADLINE_EXCEEDED, DeadlineExceededError),
        (Code.UNAUTHENTICATED, AuthenticationError),
        (Code.UNIMPLEMENTED, CallgateClientError),
        (Code.UNKNOWN, CallgateClientError),
    ],
)
async def test_status_without_details_is_classified_by_status_code(
    client: CallgateClient,
    service: ScriptedToolService,
    code: grpc.StatusCode,
    expected: type[CallgateClientError],
) -> None:
    """A bare status gets its code's class (the root class for unmapped codes) and no reason."""
    error = await _error_of(client, service, PlainStatus(code))
    assert type(error) is expected
    assert error.code is code
    assert error.reason == ""
    assert error.violations == []


@pytest.mark.anyio
async def test_unreachable_server_raises_server_unavailable_error(tmp_path: Path) -> None:
    """A target nobody listens on is a ServerUnavailableError after the retries run out."""
    async with CallgateClient(f"unix://{tmp_path}/absent.sock", token="t") as client:
        with anyio.fail_after(5), pytest.raises(ServerUnavailableError) as raised:
            await client.tools("s-1")
    assert raised.value.code is Code.UNAVAILABLE
    assert raised.value.reason == ""
