"""Prepare's work on the event loop, taken in turns by session.

Prepare is synchronous: parsing a large command and reading it against the rules can take tens
of milliseconds of the event loop, and hundreds of Prepares in flight at once (48 sessions
pipelining on their streams) kept every other request — the health check, another session's
one call — waiting behind all of them. Through this gate one Prepare runs at a time and the
others wait parked, not runnable; sessions take turns (round robin), so one session's flood
delays another's Prepare by at most one Prepare per session with work waiting. Uncontended, a
turn is taken without yielding to the event loop (the fast path costs nothing).
"""

from __future__ import annotations

import contextvars
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

# Set by an Exchange stream around a Prepare it runs: the Prepare sets the event as soon as the
# call is settled (before its answer is committed and written), which is all the operations
# written after it on the stream wait for.
SETTLED: contextvars.ContextVar[anyio.Event | None] = contextvars.ContextVar(
    "callgate_prepare_settled", default=None
)


class FairGate:
    """One holder at a time; waiters served round robin by key, in arrival order per key."""

    def __init__(self) -> None:
        self._busy = False
        self._waiting: dict[str, deque[anyio.Event]] = {}
        self._turns: deque[str] = deque()

    @asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        if self._busy or self._turns:
            granted = anyio.Event()
            queue = self._waiting.get(key)
            if queue is None:
                queue = self._waiting[key] = deque()
                self._turns.append(key)
            queue.append(granted)
            try:
                await granted.wait()
            except BaseException:
                if granted.is_set():
                    self._release()  # granted as we were cancelled: pass the turn on
                else:
                    queue.remove(granted)
                    if not queue:
                        del self._waiting[key]
                        self._turns.remove(key)
                raise
        else:
            self._busy = True
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        """Hand the gate to the first waiter of the next key in turn, or free it."""
        while self._turns:
            key = self._turns.popleft()
            queue = self._waiting[key]
            granted = queue.popleft()
            if queue:
                self._turns.append(key)  # this key's next waiter comes after the others
            else:
                del self._waiting[key]
            granted.set()
            return  # the gate stays busy: it is now the waiter's
        self._busy = False
