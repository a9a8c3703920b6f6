"""Request checks and the errors the lifecycle answers with (design section 3)."""

from __future__ import annotations

import hashlib
import re
import uuid

from .calls import CallRecord
from .errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    request_invalid,
)
from .models import State


def check_request_id(request_id: str) -> None:
    if not request_id:
        return
    try:
        uuid.UUID(request_id)
    except ValueError:
        raise request_invalid("request_id", "the request_id must be a UUID") from None


_BATCH_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_CLIENT_EXECUTION_ID = re.compile(r"call_[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}")


def check_client_execution_id(execution_id: str) -> None:
    """A client-chosen execution ID (PrepareRequest.execution_id): `call_` and a version 4
    UUID in lower-case hex, so that it has 122 random bits like the ones the server mints."""
    if execution_id and _CLIENT_EXECUTION_ID.fullmatch(execution_id) is None:
        raise request_invalid(
            "execution_id",
            'a client-chosen execution_id is "call_" and a random UUID in lower-case hex '
            "without dashes (uuid4().hex)",
        )


def execution_id_exists() -> AlreadyExists:
    return AlreadyExists(
        "EXECUTION_ID_EXISTS",
        "A call with that execution_id exists; choose a new random one (uuid4().hex).",
    )


def check_batch_id(batch_id: str) -> None:
    if batch_id and _BATCH_ID.fullmatch(batch_id) is None:
        raise request_invalid(
            "batch_id", "the batch_id must be 1-64 characters of letters, digits and ._:-"
        )


def request_fingerprint(
    loop_id: str,
    tool_name: str,
    arguments_json: str,
    evaluate: bool,
    batch_id: str = "",
    execution_id: str = "",
) -> str:
    h = hashlib.sha256()
    for part in (
        loop_id,
        tool_name,
        arguments_json,
        "1" if evaluate else "0",
        batch_id,
        execution_id,
    ):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def outside_allowed_roots() -> InvalidArgument:
    return InvalidArgument(
        "WORKSPACE_INVALID",
        "The workspace is outside the server's allowed roots; use one inside them.",
    )


def tool_not_found(name: str) -> NotFound:
    return NotFound(
        "TOOL_NOT_FOUND",
        "No tool has that name; ListTools shows the available tools.",
        metadata={"tool_name": name[:64]},
    )


def request_id_conflict() -> AlreadyExists:
    return AlreadyExists(
        "REQUEST_ID_CONFLICT",
        "That request_id was already used with a different request; use a new UUID.",
    )


def call_error(record: CallRecord) -> FailedPrecondition:
    state = record.state
    metadata = {"state": state.value}
    if state in (State.PREPARED, State.AWAITING_APPROVAL):
        return FailedPrecondition(
            "CALL_NOT_APPROVED",
            "The call is not approved yet; call Approve first.",
            metadata=metadata,
        )
    if state is State.DENIED:
        return FailedPrecondition(
            "CALL_DENIED", "The call was denied and cannot be invoked.", metadata=metadata
        )
    if state is State.EXPIRED:
        return FailedPrecondition(
            "CALL_EXPIRED",
            "The call expired before it was invoked; prepare it again.",
            metadata=metadata,
        )
    if state in (State.RUNNING, State.SUCCEEDED, State.FAILED):
        return FailedPrecondition(
            "CALL_ALREADY_INVOKED",
            "The call was already invoked; a call runs at most once.",
            metadata=metadata,
        )
    return FailedPrecondition(
        "CALL_STATE_INVALID", f"The call is {state.value} and cannot be invoked.", metadata=metadata
    )
