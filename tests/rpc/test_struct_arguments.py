"""PrepareRequest.arguments, the Struct form of a call's arguments: the same call as the same
object in arguments_json (same digest, same checks), integral numbers taken as integers, and
one form only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest
from google.protobuf import struct_pb2

from callgate.v1 import tool_service_pb2
from tests.support.calls import open_session
from tests.support.server import Harness
from tests.support.status import failure

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent.parent


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(value)
    return message


async def prepare_with(
    harness: Harness, session: str, tool: str, **forms: object
) -> tool_service_pb2.PrepareResponse:
    request = tool_service_pb2.PrepareRequest(session_id=session, tool_name=tool, **forms)  # type: ignore[arg-type]
    return await harness.stub().Prepare(request)


async def test_a_struct_is_the_same_call_as_its_json(harness: Harness) -> None:
    (harness.workspace / "lines.txt").write_text("one\ntwo\nthree\n")
    session = await open_session(harness.stub())
    arguments = {"path": "lines.txt", "start_line": 2, "end_line": 3}
    as_text = await prepare_with(harness, session, "ReadFile", arguments_json=json.dumps(arguments))
    as_struct = await prepare_with(harness, session, "ReadFile", arguments=struct(arguments))
    assert as_struct.call.digest == as_text.call.digest
    assert as_struct.call.summary == as_text.call.summary


@pytest.mark.parametrize(
    ("forms", "field"),
    [
        (
            {"arguments_json": '{"path": "a.txt"}', "arguments": struct({"path": "a.txt"})},
            "arguments",
        ),
        ({"arguments": struct({"path": "a.txt", "end_line": 2.0**60})}, "arguments.end_line"),
        ({"arguments": struct({"path": "a.txt", "end_line": 2.5})}, "arguments.end_line"),
        ({"arguments": struct({"path": 7})}, "arguments.path"),
        ({"arguments": struct({"path": "a.txt", "end_line": float("nan")})}, "arguments"),
        ({"arguments": struct({"path": "a.txt", "end_line": float("inf")})}, "arguments"),
        ({"arguments": struct({"path": "a" * (2 << 20)})}, "arguments"),
    ],
    ids=["both-forms", "beyond-2^53", "not-integral", "wrong-type", "nan", "infinity", "huge"],
)
async def test_bad_struct_arguments_are_invalid_naming_the_field(
    harness: Harness, forms: dict[str, object], field: str
) -> None:
    session = await open_session(harness.stub())
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await prepare_with(harness, session, "ReadFile", **forms)
    found = failure(raised.value)
    assert (found.code, found.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGUMENTS_INVALID")
    assert found.fields == [field]


async def test_a_struct_for_a_session_of_nobodys_is_session_not_found(harness: Harness) -> None:
    """The caller's session is checked before a Struct costs any conversion."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await prepare_with(
            harness, "ses_nobodys", "ReadFile", arguments=struct({"path": "a", "end_line": 2.5})
        )
    assert failure(raised.value).reason == "SESSION_NOT_FOUND"


async def test_a_struct_goes_through_the_exchange_stream_too(harness: Harness) -> None:
    session = await open_session(harness.stub())
    request = tool_service_pb2.ExchangeRequest(
        id=1,
        prepare=tool_service_pb2.PrepareRequest(
            session_id=session, tool_name="Glob", arguments=struct({"pattern": "*"})
        ),
    )
    call = harness.stub().Exchange()
    await call.write(request)
    response = await call.read()
    await call.done_writing()
    call.cancel()
    assert isinstance(response, tool_service_pb2.ExchangeResponse)
    assert response.WhichOneof("outcome") == "prepare", response
    assert response.prepare.call.tool_name == "Glob"


async def test_a_generic_grpc_client_prepares_with_a_struct_over_reflection(
    harness: Harness,
) -> None:
    """`buf curl`, knowing callgate only through reflection (v1), prepares a call whose
    arguments are a JSON object in the request (a Struct), not JSON text in a string."""
    buf = shutil.which("buf") or str(ROOT / ".tools/node_modules/.bin/buf")
    if not Path(buf).exists():
        pytest.skip("buf is not installed (make buf-lint installs it)")
    session = await open_session(harness.stub())
    body = {"session_id": session, "tool_name": "Glob", "arguments": {"pattern": "*"}}
    done = await anyio.run_process(
        [
            buf, "curl", "--protocol", "grpc", "--http2-prior-knowledge",
            "--reflect-protocol", "grpc-v1",
            "-H", f"authorization: Bearer {harness.tokens['agent']}",
            "-d", json.dumps(body),
            f"http://{harness.tcp_target}/callgate.v1.ToolService/Prepare",
        ],
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    answer = json.loads(done.stdout)
    assert answer["call"]["toolName"] == "Glob"
    assert answer["call"]["digest"]
