"""InvokeStream's output: buffered, paced by a reader that keeps reading, written by one task.

grpc.aio allows one pending write per stream. The command's output pump used to write each
chunk itself and so waited for the reader; when the command ended, its pump was cancelled
mid-write after a short drain and the final message was written on top of the pending one
(`GRPC_CALL_ERROR_TOO_MANY_OPERATIONS`: INTERNAL, although the call had succeeded).

Now the pump only appends to this stream's buffer and one writer task sends the chunks in
order, then the final message. The buffer is bounded per stream (`limits.stream_buffer_bytes`)
and server-wide (`limits.stream_buffer_total_bytes`). When it is full the pump waits for the
reader, as a terminal makes a program wait (the command blocks writing its pipe), but only
while the reader keeps taking messages: one that takes none for `READER_WAIT_SECONDS` while the
buffer is full loses the stream — the buffer is dropped at once and, when the call has ended,
the RPC ends with RESOURCE_EXHAUSTED `STREAM_BACKLOG` — while the call itself runs to its end
unaffected (its result is in GetCall). A reader that takes no message for `STALL_SECONDS` after
the call ended gets the same answer, so a stream nobody reads does not stay open forever.
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
# While the buffer is full: how long the command's output waits for the reader to take one
# message before the stream is given up (a reader that keeps reading paces the command).
READER_WAIT_SECONDS = 1.0


class StreamBudget:
    """Output bytes buffered for InvokeStream readers, per stream and server-wide."""

    def __init__(self, per_stream: int, total: int) -> None:
        self.per_stream = per_stream
        self.total = total
        self.buffered = 0


def stream_backlog(limit: int) -> ResourceExhausted:
    return ResourceExhausted(
        "STREAM_BACKLOG",
        "The stream's reader fell too far behind the call's output, so the stream was ended; "
        "the call went on to its end: read its result with GetCall or WatchCall.",
        metadata={"limit_bytes": str(limit)},
    )


class OutputStream(Generic[Final]):
    """One InvokeStream: the output buffer, its single writer, then the final message."""

    def __init__(
        self,
        context: grpc.aio.ServicerContext[object, object],
        budget: StreamBudget,
        output_message: Callable[[bytes], object],
    ) -> None:
        self._context = context
        self._budget = budget
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
        """The command's output sink: buffers `data`; waits while the buffer is full and the
        reader keeps taking messages, else gives the stream up (never the call)."""
        if self.overflowed or not data:
            return
        budget = self._budget
        while (
            self._buffered + len(data) > budget.per_stream
            or budget.buffered + len(data) > budget.total
        ):
            if self._buffered == 0 or not await self._reader_took_one():
                # The reader is too far behind: drop the stream's output (not the call).
                self.overflowed = True
                self._drop()
                self._wake.set()
                return
        self._chunks.append(data)
        self._buffered += len(data)
        budget.buffered += len(data)
        self._wake.set()

    async def _reader_took_one(self) -> bool:
        """True when the writer delivers a message within READER_WAIT_SECONDS."""
        self._progress = anyio.Event()
        with anyio.move_on_after(READER_WAIT_SECONDS):
            await self._progress.wait()
            return not self.overflowed
        return False

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
            self._budget.buffered -= size

    def _drop(self) -> None:
        """Give every buffered byte back at once (the stream overflowed or is ending)."""
        if not self._dropped:
            self._dropped = True
            self._budget.buffered -= self._buffered
            self._buffered = 0
            self._chunks.clear()
