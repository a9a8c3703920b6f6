"""One session never refuses the others' work: what a session can fill without an approver
(task text here; spools and stream buffers in test_disk_budget.py and test_slow_readers.py) is
bounded by its share of the server-wide budget, and given back when the session closes."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from callgate.v1 import tool_service_pb2 as tpb
from tests.support.calls import invoke, open_session, prepare
from tests.support.server import Harness, serve
from tests.support.status import failure

pytestmark = pytest.mark.anyio

DESCRIPTION = "d" * (16 << 10)  # the most a task's description may hold


async def _create(harness: Harness, session: str, loop: str = "") -> grpc.aio.AioRpcError | None:
    """TaskCreate (the policy approves it); the RPC error when it is refused."""
    stub = harness.stub()
    try:
        call = await prepare(
            stub,
            session,
            "TaskCreate",
            {"subject": "fill", "description": DESCRIPTION},
            evaluate=True,
            loop_id=loop,
        )
    except grpc.aio.AioRpcError as error:
        return error
    result = (await invoke(stub, session, call.execution_id)).result
    assert not result.is_error, result.text
    return None


async def test_task_text_is_bounded_by_the_sessions_share(tmp_path: Path) -> None:
    """1 MiB of task text server-wide, half of it a session's: one session filling its loops
    is refused TASK_BUDGET at about 512 KiB, in any of its loops; another session still
    creates tasks; closing the first gives its text back."""
    async with serve(tmp_path, limits={"max_task_text_bytes": 1 << 20}) as harness:
        stub = harness.stub()
        greedy = await open_session(stub)
        loops = [
            "",
            *[
                (await stub.OpenLoop(tpb.OpenLoopRequest(session_id=greedy))).loop_id
                for _ in range(3)
            ],
        ]
        created, refused = 0, None
        for attempt in range(100):
            refused = await _create(harness, greedy, loops[attempt % len(loops)])
            if refused is not None:
                break
            created += 1
        assert refused is not None, "one session filled the server's task text"
        details = failure(refused)
        assert details.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert details.reason == "TASK_BUDGET"
        assert 20 <= created <= 32  # ~512 KiB of 16.6 KiB tasks
        other = await open_session(stub)
        assert await _create(harness, other) is None
        await stub.CloseSession(tpb.CloseSessionRequest(session_id=greedy))
        again = await open_session(stub)
        for _ in range(created):
            assert await _create(harness, again) is None
