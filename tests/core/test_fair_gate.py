"""The Prepare gate: one holder at a time, sessions served in turns, cancellation safe."""

from __future__ import annotations

import anyio
import pytest

from callgate.server.core.fair_gate import FairGate

pytestmark = pytest.mark.anyio


async def test_sessions_take_turns_so_one_flood_does_not_starve_another() -> None:
    """Ten waiters of session a queued before one of session b: b is served second."""
    gate = FairGate()
    order: list[str] = []
    release = anyio.Event()

    async def hold() -> None:
        async with gate.turn("a"):
            await release.wait()

    async def worker(key: str, name: str) -> None:
        async with gate.turn(key):
            order.append(name)

    async with anyio.create_task_group() as group:
        group.start_soon(hold)
        await anyio.wait_all_tasks_blocked()
        for index in range(10):
            group.start_soon(worker, "a", f"a{index}")
            await anyio.wait_all_tasks_blocked()
        group.start_soon(worker, "b", "b0")
        await anyio.wait_all_tasks_blocked()
        release.set()
    assert order[:2] == ["a0", "b0"]
    assert order[2:] == [f"a{index}" for index in range(1, 10)]


async def test_an_uncontended_turn_does_not_yield() -> None:
    gate = FairGate()
    async with gate.turn("a"):
        pass
    assert not gate._busy


async def test_a_waiter_cancelled_before_its_turn_leaves_the_gate_usable() -> None:
    gate = FairGate()
    release = anyio.Event()
    served: list[str] = []

    async def hold() -> None:
        async with gate.turn("a"):
            await release.wait()

    async def worker(key: str) -> None:
        async with gate.turn(key):
            served.append(key)

    async with anyio.create_task_group() as group:
        group.start_soon(hold)
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as scope:
            scope.cancel()
            async with anyio.create_task_group() as doomed:
                doomed.start_soon(worker, "x")
        group.start_soon(worker, "b")
        await anyio.wait_all_tasks_blocked()
        release.set()
    assert served == ["b"]
    async with gate.turn("c"):
        served.append("c")
    assert served == ["b", "c"]
