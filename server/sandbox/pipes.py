"""A command's pipes: one output pipe for stdout and stderr (so their order is kept), read
without blocking the event loop and without the copies of an asyncio stream reader, and the
stdin pipe written the same way."""

from __future__ import annotations

import contextlib
import fcntl
import os

import anyio
import anyio.lowlevel
from anyio import BrokenResourceError, ClosedResourceError, EndOfStream
from anyio.abc import ByteReceiveStream, ByteSendStream

# A larger pipe lets a fast writer run ahead while the reader forwards a chunk (Linux caps
# unprivileged pipes at /proc/sys/fs/pipe-max-size, 1 MiB by default).
PIPE_BYTES = 1 << 20


def output_pipe() -> tuple[int, int]:
    """A close-on-exec pipe (read end, write end). The write end goes to the child as fds 1
    and 2 and must be closed here once the child has started."""
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    with contextlib.suppress(OSError):  # a smaller pipe only costs wake-ups
        fcntl.fcntl(read_fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    return read_fd, write_fd


class PipeReceiveStream(ByteReceiveStream):
    """The read end of a pipe as an anyio byte stream. `receive` returns whatever the pipe
    holds, up to `max_bytes`, in one read; it raises EndOfStream once every writer is gone."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd = fd
        self._closed = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        # A checkpoint per chunk: a writer that never lets the pipe run dry must not keep
        # the event loop from everything else.
        await anyio.lowlevel.checkpoint()
        while True:
            if self._closed:
                raise ClosedResourceError
            try:
                data = os.read(self._fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            except OSError as exc:
                raise BrokenResourceError from exc
            if not data:
                raise EndOfStream
            return data

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            anyio.notify_closing(self._fd)
            os.close(self._fd)
        await anyio.lowlevel.checkpoint()


class PipeSendStream(ByteSendStream):
    """The write end of a pipe (a command's stdin) as an anyio byte stream: `send` waits while
    the pipe is full and raises BrokenResourceError once the reader is gone."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd = fd
        self._closed = False

    async def send(self, item: bytes) -> None:
        await anyio.lowlevel.checkpoint()
        view = memoryview(item)
        while view:
            if self._closed:
                raise ClosedResourceError
            try:
                written = os.write(self._fd, view)
            except BlockingIOError:
                await anyio.wait_writable(self._fd)
                continue
            except OSError as exc:  # EPIPE: the command closed its stdin or exited
                raise BrokenResourceError from exc
            view = view[written:]

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            anyio.notify_closing(self._fd)
            os.close(self._fd)
        await anyio.lowlevel.checkpoint()
