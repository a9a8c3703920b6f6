"""Disk is bounded: background processes kept 64 MiB spool files each
(12 printing 80 MiB left 768 MiB) with nothing bounding their sum, on the disk the journal
needs. Now every spool draws on one server-wide budget, a start that finds it spent fails with
`spool_budget`, spools are deleted when their process is forgotten, at CloseSession and at
start, and spools stop before the disk's free space falls below the journal's reserve."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from callgate.v1 import tool_service_pb2 as tpb
from tests.support.calls import open_session, prepare, run
from tests.support.sandbox import bwrap_only
from tests.support.server import Harness, serve
from tests.support.status import failure

pytestmark = [pytest.mark.anyio, *bwrap_only]

MIB = 1 << 20


def spool_bytes(state: Path) -> int:
    return sum(p.stat().st_size for p in state.rglob("processes/*.out"))


async def start(harness: Harness, session: str, command: str, loop_id: str = "") -> Any:
    response = await run(
        harness.stub(), session, "Bash", {"command": command, "background": True}, loop_id=loop_id
    )
    return json.loads(response.result.json) if response.result.json else response.result


async def wait_all(
    harness: Harness, session: str, ids: list[str], loop_id: str = "", timeout_ms: int = 20000
) -> Any:
    wait = "all" if timeout_ms else "poll"
    response = await run(
        harness.stub(),
        session,
        "ProcessOutput",
        {"process_ids": ids, "wait": wait, "timeout_ms": timeout_ms, "limit_bytes": 1},
        loop_id=loop_id,
    )
    return json.loads(response.result.json)


async def printed(harness: Harness, session: str, process_id: str, size: int) -> None:
    """Wait (on the server: `wait: any`) until the process has printed `size` bytes."""
    cursor = 0
    while True:
        response = await run(
            harness.stub(),
            session,
            "ProcessOutput",
            {"process_id": process_id, "cursor": cursor, "wait": "any", "timeout_ms": 20000},
        )
        state = json.loads(response.result.json)
        if state["total_bytes"] >= size:
            return
        cursor = state["next_cursor"]


async def refused_for_spool(harness: Harness, session: str) -> None:
    """A background Bash is refused at Prepare with RESOURCE_EXHAUSTED SPOOL_BUDGET."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await prepare(
            harness.stub(),
            session,
            "Bash",
            {"command": "echo x", "background": True},
            evaluate=True,
        )
    error = failure(caught.value)
    assert error.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.reason == "SPOOL_BUDGET"
    assert "close a session" in error.message


async def test_spools_share_one_budget_and_a_start_past_it_fails(tmp_path: Path) -> None:
    config: dict[str, Any] = {
        "sandbox": "bwrap",
        "access": {"command": "allow"},
        "processes": {"spool_bytes": 4 * MIB, "spool_budget_bytes": 6 * MIB},
        "limits": {"session_share": 1.0},  # one session may take it all (tested below)
    }
    async with serve(tmp_path, **config) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        # They print, then stay running: their spools stay theirs (finished processes are
        # forgotten to make room for a new start).
        noisy = "head -c 5000000 /dev/zero | tr '\\0' a; exec sleep 60"
        first = await start(harness, session, noisy)
        second = await start(harness, session, noisy)
        ids = [first["process_id"], second["process_id"]]
        for process_id in ids:
            await printed(harness, session, process_id, 5000000)
        done = await wait_all(harness, session, ids, timeout_ms=0)
        # 10 MB printed, 8 MiB of per-process caps: the budget holds them to 6 MiB.
        assert spool_bytes(harness.state_dir) <= 6 * MIB
        assert any(p["spool_stopped"] == "spool_budget" for p in done["processes"])
        # Reads past the spool say so honestly.
        read = await run(
            stub, session, "ProcessOutput", {"process_id": ids[1], "cursor": 0, "limit_bytes": 10}
        )
        assert "gap" in json.loads(read.result.json)
        # The budget is spent: a new start fails clearly, and nothing was started.
        await refused_for_spool(harness, session)
        # CloseSession deletes the spools and gives the budget back.
        await stub.CloseSession(tpb.CloseSessionRequest(session_id=session))
        assert spool_bytes(harness.state_dir) == 0
        again = await open_session(stub)
        started = await start(harness, again, "echo back")
        assert started["status"] in ("running", "exited")


async def test_one_session_holds_at_most_its_share_of_the_spool_budget(tmp_path: Path) -> None:
    """Two noisy processes of one session stop at its share (half of the budget by default);
    its next start is refused SPOOL_SHARE; another session still starts and spools."""
    config: dict[str, Any] = {
        "sandbox": "bwrap",
        "access": {"command": "allow"},
        "processes": {"spool_bytes": 4 * MIB, "spool_budget_bytes": 6 * MIB},
    }
    async with serve(tmp_path, **config) as harness:
        stub = harness.stub()
        greedy = await open_session(stub)
        ids = []
        for size in (1900000, 5000000):  # the second one runs into the share; both stay running
            command = f"head -c {size} /dev/zero | tr '\\0' a; exec sleep 60"
            started = await start(harness, greedy, command)
            ids.append(started["process_id"])
            await printed(harness, greedy, ids[-1], size)
        done = await wait_all(harness, greedy, ids, timeout_ms=0)
        assert spool_bytes(harness.state_dir) <= 3 * MIB
        assert any(p["spool_stopped"] == "spool_share" for p in done["processes"])
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await prepare(
                stub, greedy, "Bash", {"command": "echo x", "background": True}, evaluate=True
            )
        assert failure(caught.value).reason == "SPOOL_SHARE"
        other = await open_session(stub)
        started = await start(harness, other, "head -c 2000000 /dev/zero | tr '\\0' b")
        done = await wait_all(harness, other, [started["process_id"]])
        (process,) = done["processes"]
        assert process["total_bytes"] == 2000000
        assert "spool_stopped" not in process or not process["spool_stopped"]


async def test_forgotten_processes_take_their_spools_with_them(tmp_path: Path) -> None:
    config: dict[str, Any] = {
        "sandbox": "bwrap",
        "access": {"command": "allow"},
        "processes": {"max_finished_kept": 1, "spool_budget_bytes": 8 * MIB},
    }
    async with serve(tmp_path, **config) as harness:
        session = await open_session(harness.stub())
        for _ in range(4):
            started = await start(harness, session, "head -c 2000000 /dev/zero")
            await wait_all(harness, session, [started["process_id"]])
            await asyncio.sleep(0.1)
        # Only the one finished process still kept has a spool; the budget was reused.
        assert spool_bytes(harness.state_dir) <= 2_000_000
        budget = harness.app.processes.settings.spool_budget
        assert budget is not None
        assert budget.used == spool_bytes(harness.state_dir)


async def test_spools_stop_before_the_journals_reserve(tmp_path: Path) -> None:
    config: dict[str, Any] = {
        "sandbox": "bwrap",
        "access": {"command": "allow"},
        # More than any test machine has free: the reserve is never available to spools.
        "journal": {"reserve_bytes": 1 << 40},
    }
    async with serve(tmp_path, **config) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        # A session with no process yet is checked when the start runs (a tool error).
        refused = await run(stub, session, "Bash", {"command": "echo x", "background": True})
        assert refused.result.error_code == "spool_budget"
        assert "journal" in refused.result.text
        assert spool_bytes(harness.state_dir) == 0
        # The journal still commits and foreground work goes on.
        done = await run(stub, session, "Bash", {"command": "echo fine"})
        assert done.result.text.startswith("fine")


async def test_stale_spools_are_removed_at_start(tmp_path: Path) -> None:
    stale = tmp_path / "state" / "sessions" / "ses_old" / "processes"
    stale.mkdir(parents=True)
    (stale / "proc_x.out").write_bytes(b"x" * 1000)
    async with serve(tmp_path, sandbox="bwrap"):
        assert not (stale / "proc_x.out").exists()


async def test_a_session_at_its_spool_share_starts_again_once_its_processes_ended(
    tmp_path: Path,
) -> None:
    """Finished processes keep their spools until forgotten; a session whose finished
    processes fill its share once stayed refused until it closed. Now a start forgets the
    session's oldest finished processes to make room."""
    config: dict[str, Any] = {
        "sandbox": "bwrap",
        "access": {"command": "allow"},
        "processes": {"spool_bytes": 4 * MIB, "spool_budget_bytes": 6 * MIB},
    }
    async with serve(tmp_path, **config) as harness:
        session = await open_session(harness.stub())
        ids = []
        for size in (1900000, 5000000):  # together they fill the session's 3 MiB share
            started = await start(harness, session, f"head -c {size} /dev/zero | tr '\\0' a")
            ids.append(started["process_id"])
            await wait_all(harness, session, ids[-1:])
        again = await start(harness, session, "echo again")
        assert again.get("status") in ("running", "exited"), again
        assert spool_bytes(harness.state_dir) <= 3 * MIB
