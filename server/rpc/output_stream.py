"""InvokeStream's output: buffered, paced by a reader that keeps reading, written by one task.

grpc.aio allows one pending write per stream. The command's output pump used to write each
chunk itself and so waited for the reader; when the command ended, its pump was cancelled
mid-write after a short drain and the final message was written on top of the pending one
(`GRPC_CALL_ERROR_TOO_MANY_OPERATIONS`: INTERNAL, although the call had succeeded).

Now the pump only appends to this stream's buffer and one writer task sends the chunks in
order, then the final message. The buffer is bounded per stream (`limits.stream_buffer_bytes`),
per session (a share of the server-wide bound, `limits.session_share`) and server-wide
(`limits.stream_buffer_total_bytes`). When the stream's or its session's buffer is full the pump
waits for the reader, as a terminal makes a program wait (the command blocks writing its pipe),
for as long as the call's own time limit allows: a reader that pauses gets every byte. Only when
the server-wide buffer is full while this stream holds nothing (other sessions' readers hold it
all) is the stream given up — the RPC ends with RESOURCE_EXHAUSTED `STREAM_BACKLOG` while the
call itself runs to its end unaffected (its result is in GetCall). A reader that takes no message
for `STALL_SECONDS` after the call ended gets the same answer, so a stream nobody reads does not
stay open forever.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio
import grpc

from ..core.errors import ResourceExhausted
from ..core.tool import OutputSink

Final = TypeVar("Final")

# Output messages carry at most this much (a bigger chunk is sent as several).
MESSAGE_BYTES = 1 << 20
# After the call ended: how long the reader may take no message before the stream is ended.
STALL_SECONDS = 30.0


class StreamBudget:
    """Output bytes buffered for InvokeStream readers: per stream, per session (at most
    `per_session` for all the session's streams together) and server-wide."""

    def __init__(self, per_stream: int, total: int, per_session: int | None = None) -> None:
        self.per_stream = per_stream
        self.total = total
        self.per_session = total if per_session is None else per_session
        self.buffered = 0
        self.by_session: dict[str, int] = {}
        # Set (and replaced) whenever bytes are given back, for pumps waiting for room, and
        # whenever bytes are taken.
        self._released = anyio.Event()
        self._taken = anyio.Event()

    def take(self, session_id: str, size: int) -> None:
        self.buffered += size
        self.by_session[session_id] = self.by_session.get(session_id, 0) + size
        self._taken.set()
        self._taken = anyio.Event()

    def taken(self) -> anyio.Event:
        """Set the next time any stream buffers bytes."""
        return self._taken

    def give_back(self, session_id: str, size: int) -> None:
        if not size:
            return
        self.buffered -= size
        left = self.by_session.get(session_id, 0) - size
        if left > 0:
            self.by_session[session_id] = left
        else:
            self.by_session.pop(session_id, None)
        self._released.set()
        self._released = anyio.Event()

    def released(self) -> anyio.Event:
        """Set the next time any stream gives bytes back."""
        return self._released


def stream_backlog(limit: int) -> ResourceExhausted:
    return ResourceExhausted(
        "STREAM_BACKLOG",
        "The stream was ended (the server's stream buffers were full, or its reader took "
        "nothing for too long after the call ended); the call went on to its end: read its "
        "result with GetCall or WatchCall.",
        metadata={"limit_bytes": str(limit)},
    )


class OutputStream(Generic[Final]):
    """One InvokeStream: the output buffer, its single writer, then the final message."""

    def __init__(
        self,
        context: grpc.aio.ServicerContext[object, object],
        budget: StreamBudget,
        output_message: Callable[[bytes], object],
        session_id: str = "",
    ) -> None:
        self._context = context
        self._budget = budget
        self._session_id = session_id
        self._output_message = output_message
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        # Set when there is something for the writer to do, and after each write it made.
        self._wake = anyio.Event()
        self._progress = anyio.Event()
        self._ended = False
        self._dropped = False
        self.overflowed = False

    async def serve(
        self,
        run: Callable[[OutputSink], Awaitable[Final]],
        final_message: Callable[[Final], object],
    ) -> None:
        """Run the call with this stream as its output sink, deliver the buffered output,
        then the final message; or end with STREAM_BACKLOG (the call is unaffected)."""
        try:
            async with anyio.create_task_group() as group:
                writer_done = anyio.Event()
                group.start_soon(self._write_chunks, writer_done)
                outcome = await run(self.emit)
                self._ended = True
                self._wake.set()
                stalled = await self._drain(writer_done)
                group.cancel_scope.cancel()
        finally:
            self._drop()
        if self.overflowed or stalled:
            raise stream_backlog(self._budget.per_stream)
        await self._context.write(final_message(outcome))

    async def emit(self, data: bytes) -> None:
        """The command's output sink: buffers `data`, waiting (the command with it) while the
        stream's or its session's buffer is full; gives the stream up (never the call) only
        when the server-wide buffer is full and this stream holds nothing to wait on."""
        if self.overflowed or not data:
            return
        budget = self._budget
        size = len(data)
        while True:
            own = self._buffered
            session = budget.by_session.get(self._session_id, 0)
            stream_full = own > 0 and own + size > budget.per_stream
            session_full = session > 0 and session + size > budget.per_session
            total_full = budget.buffered + size > budget.total
            if not (stream_full or session_full or total_full):
                break
            if own == 0 and total_full and not session_full:
                # Other sessions' readers hold the whole server-wide buffer: nothing of ours
                # to wait on. Drop the stream's output (not the call).
                self.overflowed = True
                self._drop()
                self._wake.set()
                return
            # Wait for room: our reader taking a message, or any stream giving bytes back.
            released = budget.released()
            self._progress = anyio.Event()
            progress = self._progress
            async with anyio.create_task_group() as waiting:

                async def wait_for(event: anyio.Event) -> None:
                    await event.wait()
                    waiting.cancel_scope.cancel()

                waiting.start_soon(wait_for, progress)
                waiting.start_soon(wait_for, released)
        self._chunks.append(data)
        self._buffered += size
        budget.take(self._session_id, size)
        self._wake.set()

    async def _write_chunks(self, done: anyio.Event) -> None:
        """The stream's only writer: one pending write at a time, chunks in order."""
        try:
            while not self.overflowed:
                if not self._chunks:
                    if self._ended:
                        return
                    self._wake = anyio.Event()
                    await self._wake.wait()
                    continue
                chunk = self._chunks.popleft()
                try:
                    for start in range(0, len(chunk), MESSAGE_BYTES):
                        await self._context.write(
                            self._output_message(chunk[start : start + MESSAGE_BYTES])
                        )
                        self._progress.set()
                finally:
                    self._release(len(chunk))
        finally:
            done.set()
            self._progress.set()

    async def _drain(self, writer_done: anyio.Event) -> bool:
        """Wait for the writer to deliver what is buffered; True when the reader took no
        message for STALL_SECONDS (its pending write is then abandoned with the stream)."""
        while not writer_done.is_set():
            self._progress = anyio.Event()
            with anyio.move_on_after(STALL_SECONDS):
                await self._progress.wait()
                continue
            return True
        return False

    def _release(self, size: int) -> None:
        """A chunk was written (it stays counted while its write is pending)."""
        if not self._dropped:
            self._buffered -= size
            self._budget.give_back(self._session_id, size)

    def _drop(self) -> None:
        """Give every buffered byte back at once (the stream overflowed or is ending)."""
        if not self._dropped:
            self._dropped = True
            self._budget.give_back(self._session_id, self._buffered)
            self._buffered = 0
            self._chunks.clear()
