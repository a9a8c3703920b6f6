"""Memory an agent can make the server keep is bounded and accounted.

The attack: WriteFile calls carrying 1 MiB each, denied by policy, were kept with their
arguments (300 of them grew the server by 287 MiB, and the limits allowed about 64 GB), and the
memory stayed after CloseSession. Now an ended call keeps only what GetCall returns, kept calls
are accounted against `limits.max_retained_bytes`, the oldest ended calls go first, and a
Prepare that cannot fit is refused with RESOURCE_EXHAUSTED `MEMORY_BUDGET`, changing nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest

from callgate.server.core.journal import EventQuery
from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.support.calls import invoke, open_session, prepare
from tests.support.server import Harness, serve
from tests.support.status import RpcFailure, failure

if TYPE_CHECKING:
    from callgate.v1.tool_service_pb2_grpc import ToolServiceAsyncStub

pytestmark = pytest.mark.anyio

MIB = 1 << 20
# A WriteFile of this much content is just under the 1 MiB argument cap once JSON-encoded.
BIG = MIB - 1024
BUDGET = {
    "max_retained_bytes": 8 * MIB,
    "max_retained_bytes_per_session": 4 * MIB,
    "max_retained_result_bytes": 64 << 10,
}


async def fill(stub: ToolServiceAsyncStub, session: str) -> tuple[list[str], RpcFailure]:
    """Prepare 1 MiB WriteFile calls, left open, until the server refuses one."""
    kept: list[str] = []
    for index in range(100):
        try:
            call = await prepare(
                stub, session, "WriteFile", {"path": f"o/{index}.txt", "content": "y" * BIG}
            )
        except grpc.aio.AioRpcError as error:
            return kept, failure(error)
        kept.append(call.execution_id)
    raise AssertionError("100 open 1 MiB calls were all kept")


def retained(harness: Harness) -> int:
    return harness.app.lifecycle.retention.total


async def test_denied_calls_keep_no_arguments_and_cost_no_budget(tmp_path: Path) -> None:
    async with serve(tmp_path, limits=BUDGET, access={"workspace_write": "deny"}) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        ids = []
        # 60 MiB of denied arguments against an 8 MiB budget: every Prepare is answered.
        for index in range(60):
            call = await prepare(
                stub,
                session,
                "WriteFile",
                {"path": f"d/{index}.txt", "content": "x" * BIG},
                evaluate=True,
            )
            assert call.state == cpb.STATE_DENIED
            ids.append(call.execution_id)
        assert retained(harness) < 60 * (16 << 10)
        records = harness.app.lifecycle._calls_by_id
        assert all(records[i].artifact is None for i in ids)
        # GetCall still says what the call was, why it was denied, and its digest.
        got = await stub.GetCall(tpb.GetCallRequest(session_id=session, execution_id=ids[0]))
        assert got.call.summary.startswith("WriteFile")
        assert got.call.requirements
        assert got.call.digest
        assert got.call.denial.description


async def test_open_calls_that_do_not_fit_are_refused_and_change_nothing(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path, limits=BUDGET) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        kept, error = await fill(stub, session)
        assert error.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error.reason == "MEMORY_BUDGET"
        assert "invoke or cancel" in error.message
        assert 1 <= len(kept) < 4
        listed = await stub.ListCalls(tpb.ListCallsRequest(session_id=session))
        assert len(listed.calls) == len(kept)
        await harness.app.journal.flush()
        prepared = await harness.app.journal.events(
            EventQuery(session_id=session, kind="call.prepared")
        )
        assert len(prepared) == len(kept)
        # Cancelling one open call frees its share: the next Prepare fits.
        await stub.CancelCall(tpb.CancelCallRequest(session_id=session, execution_id=kept[0]))
        await prepare(stub, session, "WriteFile", {"path": "o/again.txt", "content": "y" * BIG})


async def test_a_session_cannot_take_the_whole_budget(tmp_path: Path) -> None:
    async with serve(tmp_path, limits=BUDGET) as harness:
        stub = harness.stub()
        greedy, other = await open_session(stub), await open_session(stub)
        _, error = await fill(stub, greedy)
        assert error.reason == "MEMORY_BUDGET"
        call = await prepare(stub, other, "WriteFile", {"path": "o.txt", "content": "z" * BIG})
        assert call.state == cpb.STATE_PREPARED


async def test_the_oldest_ended_calls_go_first_across_sessions(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "big.txt").write_text(("0123456789" * 60 + "\n") * 2000)
    limits = BUDGET | {"max_retained_result_bytes": 256 << 10}
    async with serve(tmp_path, limits=limits) as harness:
        stub = harness.stub()
        first, second = await open_session(stub), await open_session(stub)
        reads = []
        for session in (first, second):
            for _ in range(40):
                call = await prepare(stub, session, "ReadFile", {"path": "big.txt"}, evaluate=True)
                response = await invoke(stub, session, call.execution_id)
                # Invoke returns the whole result; the ended call keeps a capped one.
                assert len(response.result.text) > 900_000
                reads.append((session, call.execution_id))
        assert retained(harness) <= BUDGET["max_retained_bytes"]
        oldest_session, oldest = reads[0]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetCall(tpb.GetCallRequest(session_id=oldest_session, execution_id=oldest))
        assert failure(caught.value).reason == "CALL_NOT_FOUND"
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await invoke(stub, oldest_session, oldest)
        assert failure(caught.value).reason == "CALL_NOT_FOUND"
        newest_session, newest = reads[-1]
        got = await stub.GetCall(tpb.GetCallRequest(session_id=newest_session, execution_id=newest))
        assert got.call.state == cpb.STATE_SUCCEEDED
        assert len(got.call.result.text.encode()) <= limits["max_retained_result_bytes"]
        assert got.call.result.omitted_bytes > 900_000
        assert "Invoke returned all of it" in got.call.result.text


async def test_close_session_gives_the_budget_back(tmp_path: Path) -> None:
    async with serve(tmp_path, limits=BUDGET) as harness:
        stub = harness.stub()
        before = retained(harness)
        session = await open_session(stub)
        for index in range(3):
            await prepare(
                stub, session, "WriteFile", {"path": f"c/{index}", "content": "c" * (MIB // 2)}
            )
        assert retained(harness) > before + MIB
        await stub.CloseSession(tpb.CloseSessionRequest(session_id=session))
        assert retained(harness) == before
        assert not harness.app.lifecycle._calls_by_id
        # The bytes are reusable: a new session fills the same share again.
        again = await open_session(stub)
        for index in range(3):
            await prepare(
                stub, again, "WriteFile", {"path": f"c/{index}", "content": "c" * (MIB // 2)}
            )


def test_the_budget_settings_are_validated() -> None:
    from callgate.server.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="max_retained_bytes_per_session"):
        load_config(
            None,
            {
                "limits": {
                    "max_retained_bytes": 16 * MIB,
                    "max_retained_bytes_per_session": 32 * MIB,
                }
            },
            environ={},
        )
    config = load_config(None, {}, environ={})
    assert config.limits.max_retained_bytes == 256 * MIB
    assert json.dumps(config.limits.max_retained_result_bytes)
