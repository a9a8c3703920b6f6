"""Attack review of PrepareRequest.arguments (google.protobuf.Struct).

Scratch file (git-ignored). The agent controls the Struct; it should be no more dangerous than
the same bytes in arguments_json."""

from __future__ import annotations

import json
import math
import time
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

PREPARE = "/callgate.v1.ToolService/Prepare"


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(value)
    return message


def raw_prepare(
    harness: Harness, role: str = "agent"
) -> grpc.aio.UnaryUnaryMultiCallable[bytes, tool_service_pb2.PrepareResponse]:
    """Prepare taking already-serialized bytes: the client does no work on the shared loop."""
    return harness.channel(role).unary_unary(
        PREPARE,
        request_serializer=None,
        response_deserializer=tool_service_pb2.PrepareResponse.FromString,
    )


async def _max_loop_gap(during: object) -> float:
    """Largest gap between ticks of a 10 ms ticker on this loop (the server's loop: the
    harness serves in-process) while `during()` runs."""
    gaps: list[float] = []
    done = anyio.Event()

    async def tick() -> None:
        last = time.monotonic()
        while not done.is_set():
            await anyio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        await anyio.sleep(0.05)
        try:
            await during()  # type: ignore[operator]
        finally:
            done.set()
    return max(gaps)


def _many_empty_values(count: int) -> struct_pb2.Struct:
    """A Struct whose one list holds `count` unset Values: 2 bytes each on the wire, each one
    a Python object in MessageToDict and in _exact (refused only after all the work, as
    larger than max_argument_bytes)."""
    message = struct_pb2.Struct()
    values = message.fields["pattern"].list_value.values
    for _ in range(count):
        values.add()
    return message


async def test_struct_arguments_do_not_block_the_servers_loop(harness: Harness) -> None:
    """ATTACK: one agent's Prepare with a ~4 MB Struct (the default max message size) of empty
    values. arguments_text runs MessageToDict + _exact + json.dumps on the event loop before
    any size check (and before the session is even looked up): ~1 s of loop time per request
    here, so a handful of them in flight freezes every other principal's RPCs (approvers
    included). The same bytes as arguments_json are refused by a length check in microseconds.
    """
    session = await open_session(harness.stub())
    big = tool_service_pb2.PrepareRequest(
        session_id=session, tool_name="Glob", arguments=_many_empty_values(1_950_000)
    ).SerializeToString()
    assert len(big) < 4 << 20
    as_json = tool_service_pb2.PrepareRequest(
        session_id=session, tool_name="Glob", arguments_json="[" + "null," * 800_000 + "null]"
    ).SerializeToString()
    prepare = raw_prepare(harness)

    async def send(payload: bytes, times: int) -> None:
        async def one() -> None:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await prepare(payload, timeout=120)
            assert failure(raised.value).reason == "ARGUMENTS_INVALID"

        async with anyio.create_task_group() as tg:
            for _ in range(times):
                tg.start_soon(one)

    json_gap = await _max_loop_gap(lambda: send(as_json, 4))
    struct_gap = await _max_loop_gap(lambda: send(big, 4))
    print(f"max loop gap: arguments_json {json_gap:.3f}s, Struct {struct_gap:.3f}s")
    # The old code held the loop ~1 s per request (4 s here); a loaded two-core machine may
    # stretch a fair gap past half a second.
    assert struct_gap < 1.0, (
        f"4 Struct Prepares blocked the server's loop for {struct_gap:.2f}s at a stretch "
        f"(the same size as arguments_json: {json_gap:.3f}s)"
    )


async def test_struct_conversion_happens_before_the_session_is_checked(harness: Harness) -> None:
    """The conversion runs for a session_id that is not the caller's (or does not exist): the
    CPU is spent before any ownership check. Shown by the error: ARGUMENTS_INVALID (from the
    conversion) rather than SESSION_NOT_FOUND."""
    prepare = raw_prepare(harness)
    payload = tool_service_pb2.PrepareRequest(
        session_id="ses_nobody", tool_name="Glob", arguments=struct({"n": 2.0**60})
    ).SerializeToString()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await prepare(payload, timeout=10)
    assert failure(raised.value).reason == "SESSION_NOT_FOUND", failure(raised.value).reason


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
async def test_non_finite_struct_numbers_are_arguments_invalid(
    harness: Harness, number: float
) -> None:
    """NaN / Infinity in a Struct number: arguments_json refuses them with ARGUMENTS_INVALID;
    the Struct path lets json_format raise ValueError, which becomes a bare INTERNAL (and an
    'unexpected error' log with a traceback per request)."""
    session = await open_session(harness.stub())
    message = struct_pb2.Struct()
    message.fields["pattern"].number_value = number
    request = tool_service_pb2.PrepareRequest(
        session_id=session, tool_name="Glob", arguments=message
    )
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await harness.stub().Prepare(request, timeout=10)
    found = failure(raised.value)
    assert (found.code, found.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGUMENTS_INVALID"), (
        found.code,
        found.reason,
    )


# ---------------------------------------------------------------- what held (controls)


async def test_struct_and_json_forms_hit_the_same_limits(tmp_path: object) -> None:
    """max_argument_bytes, nesting depth and NUL checks apply to the Struct's JSON text."""
    from pathlib import Path

    from tests.support.server import serve

    async with serve(Path(str(tmp_path)), limits={"max_argument_bytes": 4096}) as harness:
        session = await open_session(harness.stub())
        stub = harness.stub()

        async def refused(**forms: object) -> str:
            request = tool_service_pb2.PrepareRequest(
                session_id=session,
                tool_name="Glob",
                **forms,  # type: ignore[arg-type]
            )
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.Prepare(request, timeout=10)
            return failure(raised.value).reason

        assert await refused(arguments=struct({"pattern": "x" * 5000})) == "ARGUMENTS_INVALID"
        deep: dict[str, object] = {"pattern": "*"}
        inner: dict[str, object] = {}
        node = inner
        for _ in range(31):
            node["a"] = {}
            node = node["a"]  # type: ignore[assignment]
        deep["extra"] = inner
        assert await refused(arguments=struct(deep)) == "ARGUMENTS_INVALID"
        assert await refused(arguments=struct({"pattern": "a\x00b"})) == "ARGUMENTS_INVALID"
        # Empty Struct == "{}"; an empty arguments_json with a Struct set is not "both".
        request = tool_service_pb2.PrepareRequest(
            session_id=session, tool_name="Glob", arguments=struct({"pattern": "*"})
        )
        response = await stub.Prepare(request, timeout=10)
        as_json = await stub.Prepare(
            tool_service_pb2.PrepareRequest(
                session_id=session, tool_name="Glob", arguments_json=json.dumps({"pattern": "*"})
            ),
            timeout=10,
        )
        assert response.call.digest == as_json.call.digest
