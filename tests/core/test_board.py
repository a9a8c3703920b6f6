"""The approval board: snapshot-then-changes for watchers, bounded queues, shutdown."""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
import pytest

from callgate.server.core.board import ApprovalBoard, PendingQuestion, Resolved
from callgate.server.core.errors import ResourceExhausted, Unavailable
from callgate.server.core.models import State

pytestmark = pytest.mark.anyio


def _question(execution_id: str) -> PendingQuestion:
    return PendingQuestion(execution_id, "ses", "q?", (), "agent", datetime.now(UTC))


async def test_a_slow_watcher_is_dropped_without_blocking_the_board() -> None:
    """When a watcher's queue is full it is dropped with WATCH_QUEUE_FULL; others go on."""
    board = ApprovalBoard(queue_limit=2)
    with board.subscribe() as slow, board.subscribe() as fast:
        board.ask(_question("a"))
        first = await fast.next()
        assert isinstance(first, PendingQuestion)
        assert first.execution_id == "a"
        board.ask(_question("b"))
        board.ask(_question("c"))
        assert board.subscriber_count == 1
        with anyio.fail_after(1), pytest.raises(ResourceExhausted) as raised:
            await slow.next()
        assert raised.value.reason == "WATCH_QUEUE_FULL"
        assert isinstance(await fast.next(), PendingQuestion)


async def test_resolving_publishes_once_and_forgets_the_item() -> None:
    """A resolved item is announced once; resolving again is a no-op."""
    board = ApprovalBoard()
    board.ask(_question("a"))
    with board.subscribe() as watcher:
        assert isinstance(await watcher.next(), PendingQuestion)
        board.resolve("a", State.SUCCEEDED)
        board.resolve("a", State.FAILED)
        assert await watcher.next() == Resolved("a", State.SUCCEEDED)
        assert board.pending_count == 0
        board.close()
        with anyio.fail_after(1), pytest.raises(Unavailable):
            await watcher.next()
