"""Sockets as the egress proxy uses them: buffered reads with hard bounds for what it must parse
(request and response heads, a TLS ClientHello), and relaying whole streams with splice(2)
through a pipe, so that bytes a command moves through its proxy are never copied through
Python (the relay costs a wake-up per pipe-full, not a copy per chunk).

Everything here runs on the proxy's own event loop, with non-blocking sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
from collections.abc import Callable

# How much one relay direction moves per wake-up at most (the pipe between the sockets).
PIPE_BYTES = 1 << 20
# The kernel buffers of a proxied connection's sockets, fixed (no autotuning): a tunnel whose
# client reads nothing while its host sends holds about 2 MiB of kernel memory (these buffers,
# which the kernel counts twice, and a full pipe), not the tens of MiB autotuning grows to.
# (Measured: a 256 KiB pipe instead of 1 MiB halves the relay's throughput.)
SOCKET_BUFFER_BYTES = 256 << 10
# A read this small while a head or ClientHello is still incomplete is a trickle: the next
# read waits a moment, so that a client sending a byte at a time costs a few wake-ups a second.
TRICKLE_BYTES = 512
TRICKLE_PAUSE_SECONDS = 0.05
# One read of what must be parsed.
READ_BYTES = 64 << 10
F_SETPIPE_SZ = 1031
# Splice rounds with progress before a relay lets the loop's other connections run.
FAIR_ROUNDS = 16
_SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)


class TooLong(Exception):
    """What was to be read did not end within its bound."""


class Peer:
    """One side of a proxied connection: a non-blocking socket and the bytes read from it that
    were not used yet (never more than a read's worth beyond the caller's bound)."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
        self.sock = sock
        self.buffer = bytearray()
        self._trickle = False
        self._loop = asyncio.get_running_loop()

    async def _fill(self, *, paced: bool = False) -> bool:
        """Read once more into the buffer; False at the end of the stream. `paced`: the
        caller still waits for more of something small (a head, a ClientHello), so after a
        trickle the read waits a moment first."""
        if paced and self._trickle:
            await asyncio.sleep(TRICKLE_PAUSE_SECONDS)
        chunk = await self._loop.sock_recv(self.sock, READ_BYTES)
        self._trickle = len(chunk) < TRICKLE_BYTES
        self.buffer += chunk
        return bool(chunk)

    async def fill_paced(self) -> bool:
        return await self._fill(paced=True)

    async def read_until(
        self, separator: bytes, limit: int, *, paced: bool = False
    ) -> bytes | None:
        """Bytes up to and including `separator`; None when the stream ends first. Raises
        TooLong when `limit` bytes came without it. `paced`: see `_fill`."""
        start = 0
        while True:
            found = self.buffer.find(separator, start)
            if found >= 0:
                end = found + len(separator)
                if end > limit:
                    raise TooLong
                data = bytes(self.buffer[:end])
                del self.buffer[:end]
                return data
            if len(self.buffer) >= limit:
                raise TooLong
            start = max(len(self.buffer) - len(separator) + 1, 0)
            if not await self._fill(paced=paced):
                return None

    async def read_some(self, limit: int) -> bytes:
        """What is buffered or arrives next, at most `limit` bytes; b"" at the end."""
        if not self.buffer and not await self._fill():
            return b""
        data = bytes(self.buffer[:limit])
        del self.buffer[:limit]
        return data

    async def read_exactly(self, count: int) -> bytes:
        """Exactly `count` bytes (a bounded count: it is buffered). Raises EOFError."""
        while len(self.buffer) < count:
            if not await self._fill():
                raise EOFError
        data = bytes(self.buffer[:count])
        del self.buffer[:count]
        return data

    async def send(self, data: bytes) -> None:
        await self._loop.sock_sendall(self.sock, data)

    def shut_write(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.sock.close()


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, *, write: bool) -> None:
    waiter: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not waiter.done():
            waiter.set_result(None)

    if write:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await waiter
    finally:
        if write:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


async def relay(
    source: Peer, sink: Peer, charge: Callable[[int], None], *, limit: int | None = None
) -> None:
    """Move everything `source` sends to `sink` (what `source` buffered first), then shut
    `sink`'s writing side; with `limit`, stop after that many bytes. `charge(n)` is called
    for every n bytes taken from `source` and may raise to stop the relay."""
    left = limit
    if source.buffer:
        data = bytes(source.buffer if left is None else source.buffer[:left])
        del source.buffer[: len(data)]
        charge(len(data))
        await sink.send(data)
        if left is not None:
            left -= len(data)
    if left is None or left > 0:
        await _splice(source, sink, charge, left)
    if limit is None:
        sink.shut_write()


async def _splice(
    source: Peer, sink: Peer, charge: Callable[[int], None], left: int | None
) -> None:
    loop = asyncio.get_running_loop()
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    with contextlib.suppress(OSError):
        fcntl.fcntl(write_end, F_SETPIPE_SZ, PIPE_BYTES)
    source_fd, sink_fd = source.sock.fileno(), sink.sock.fileno()
    held = 0  # bytes in the pipe
    ended = False
    rounds = 0
    try:
        while True:
            moved = sent = 0
            if not ended and held < PIPE_BYTES and (left is None or left > 0):
                want = PIPE_BYTES - held if left is None else min(PIPE_BYTES - held, left)
                try:
                    moved = os.splice(source_fd, write_end, want, flags=_SPLICE_FLAGS)
                except BlockingIOError:
                    moved = -1
                if moved == 0:
                    ended = True
                elif moved > 0:
                    charge(moved)
                    held += moved
                    if left is not None:
                        left -= moved
            if held:
                try:
                    sent = os.splice(read_end, sink_fd, held, flags=_SPLICE_FLAGS)
                except BlockingIOError:
                    sent = 0
                held -= sent
            if held == 0 and (ended or left == 0):
                return
            if moved > 0 or sent > 0:
                # Progress: go on without a trip through the selector, but let the other
                # connections of the loop run now and then.
                rounds += 1
                if rounds % FAIR_ROUNDS == 0:
                    await asyncio.sleep(0)
                continue
            # Stuck: drain the pipe first (whether it is full is counted in buffers, not
            # bytes, so only the sink can say), else wait for the source.
            if held:
                await _ready(loop, sink_fd, write=True)
            else:
                await _ready(loop, source_fd, write=False)
    finally:
        os.close(read_end)
        os.close(write_end)
