"""Shared fixtures: every async test runs on plain asyncio (grpc.aio needs it).

Each test gets its own event loop. grpc.aio has one completion poller per process, and it can
deliver a completion that belongs to an earlier test's leftover call (a stream the server was
still answering when that test ended) while a later test runs; it then calls
`call_soon_threadsafe` on the earlier, closed loop, and the RuntimeError ("Event loop is
closed") surfaces in the unrelated later test. Test loops therefore still close their
resources but do not report themselves closed, which turns such a stale completion into the
no-op it should be.
"""

from __future__ import annotations

import asyncio

import pytest


class _TestEventLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self._released = False

    def close(self) -> None:
        if self._released:
            return
        super().close()
        self._released = True
        # Closed for real (selector and self-pipe released); only the flag `call_soon_threadsafe`
        # checks is left down, so a stale grpc completion aimed at this loop is dropped.
        self._closed = False

    def is_closed(self) -> bool:
        return self._released


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    return ("asyncio", {"loop_factory": _TestEventLoop})
