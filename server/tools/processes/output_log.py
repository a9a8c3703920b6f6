"""The output of one supervised process, addressed by cursors: absolute byte offsets into
everything the process has written (stdout and stderr combined).

Two stores keep it:

- a ring in memory holding the most recent `ring_bytes` bytes, and
- an append-only spool file holding the first `spool_bytes` bytes (appends never rewrite
  it; once it is full it stops growing).

A read from cursor `c` comes from the ring when `c` is still in it, else from the spool; when
the bytes at `c` are in neither (past the spool's cap and already pushed out of the ring), the
read starts at the oldest byte still held and says so (`gap`): output is never reset
silently. A cursor past the end is refused (`CursorAhead`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

log = logging.getLogger(__name__)

# How long the state directory's free space, once read, is trusted (spool writes are frequent).
FREE_SPACE_CHECK_SECONDS = 1.0

# Spool reads up to this size are done inline: a thread hand-off costs more than the read.
INLINE_SPOOL_READ_BYTES = 256 << 10


class CursorAhead(Exception):
    """The cursor is past the last byte the process has written."""

    def __init__(self, cursor: int, total: int) -> None:
        super().__init__(f"cursor {cursor} is past the end of the output ({total} bytes)")
        self.cursor = cursor
        self.total = total


@dataclass(frozen=True, slots=True)
class OutputChunk:
    """Bytes read from the output: `data` starts at offset `start`. `gap` is True when the
    bytes between the requested cursor and `start` are no longer held anywhere."""

    data: bytes
    start: int
    gap: bool
    total: int

    @property
    def end(self) -> int:
        return self.start + len(self.data)


class SpoolBudget:
    """The bytes every process's spool may take together (`processes.spool_budget_bytes`),
    and the free space the state directory's filesystem keeps for the journal
    (`journal.reserve_bytes`): output never fills the disk the journal needs."""

    def __init__(
        self, limit: int, reserve: int, directory: Path, session_share: int | None = None
    ) -> None:
        self.limit = limit
        self.reserve = reserve
        self.directory = directory
        # The most one session's spools may take together (`limits.session_share`).
        self.session_share = limit if session_share is None else session_share
        self.used = 0
        self._free = 0
        self._free_checked = -math.inf

    def _disk_room(self) -> int:
        now = time.monotonic()
        if now - self._free_checked > FREE_SPACE_CHECK_SECONDS:
            try:
                stats = os.statvfs(self.directory)
                self._free = stats.f_bavail * stats.f_frsize
            except OSError:
                self._free = 0
            self._free_checked = now
        return self._free - self.reserve

    def available(self) -> int:
        return max(0, min(self.limit - self.used, self._disk_room()))

    def grant(self, size: int) -> int:
        granted = max(0, min(size, self.available()))
        self.used += granted
        self._free -= granted
        return granted

    def give_back(self, size: int) -> None:
        self.used = max(0, self.used - size)

    def for_session(self) -> SessionSpoolBudget:
        """One session's view: its spools share at most `session_share` of the budget."""
        return SessionSpoolBudget(self)


class SessionSpoolBudget:
    """What one session's spools may still take: the server-wide budget, and the session's
    share of it, so that one session's output never leaves the others no room to start."""

    def __init__(self, budget: SpoolBudget) -> None:
        self.budget = budget
        self.used = 0

    @property
    def limit(self) -> int:
        return self.budget.limit

    @property
    def share(self) -> int:
        return self.budget.session_share

    def share_left(self) -> int:
        return max(0, self.budget.session_share - self.used)

    def available(self) -> int:
        return min(self.budget.available(), self.share_left())

    def grant(self, size: int) -> int:
        granted = self.budget.grant(min(size, self.share_left()))
        self.used += granted
        return granted

    def give_back(self, size: int) -> None:
        self.budget.give_back(size)
        self.used = max(0, self.used - size)


class OutputLog:
    """Ring + spool for one process. `append` is called by the process's reader task only."""

    def __init__(
        self,
        ring_bytes: int,
        spool_path: Path | None,
        spool_bytes: int,
        budget: SpoolBudget | SessionSpoolBudget | None = None,
    ) -> None:
        if ring_bytes < 1:
            raise ValueError("the ring must hold at least one byte")
        self._ring_cap = ring_bytes
        # Byte at absolute offset `o` lives at `_ring[o % cap]` (before the ring has wrapped,
        # `_ring` is simply the whole output so far).
        self._ring = bytearray()
        self._total = 0
        self._spool_cap = spool_bytes if spool_path is not None else 0
        self._spooled = 0
        self._spool_path = spool_path
        self._fd: int | None = None
        self._readers = 0
        self._closed = False
        self._sealed = False
        self._budget = budget
        # Why the spool stopped before its cap ("spool_budget"), if it did.
        self.spool_stopped = ""
        if spool_path is not None and spool_bytes > 0:
            try:
                self._fd = os.open(
                    spool_path,
                    os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o600,
                )
            except OSError as exc:
                log.warning("process output spool unavailable", extra={"detail": exc.strerror})
                self._spool_cap = 0

    @property
    def total(self) -> int:
        """Bytes the process has written so far."""
        return self._total

    @property
    def ring_start(self) -> int:
        """The oldest offset the ring still holds."""
        if self._sealed:
            return self._total
        return max(0, self._total - self._ring_cap)

    @property
    def spooled(self) -> int:
        """Bytes `[0, spooled)` are in the spool file."""
        return self._spooled

    def oldest_available(self, cursor: int) -> int:
        """The first offset at or after `cursor` whose byte is still held."""
        if cursor < self._spooled or cursor >= self.ring_start:
            return cursor
        return self.ring_start

    # ------------------------------------------------------------------ writing

    def append(self, data: bytes) -> None:
        if not data or self._closed or self._sealed:
            return
        self._spool(data)
        self._ring_append(data)
        self._total += len(data)

    def _spool(self, data: bytes) -> None:
        room = self._spool_cap - self._spooled
        if room <= 0 or self._fd is None:
            return
        view = memoryview(data)[:room]
        if self._budget is not None:
            granted = self._budget.grant(len(view))
            if granted < len(view):
                # The server-wide budget (or the journal's reserve) is reached: the spool
                # ends here; the ring goes on, and reads past it report the gap.
                self.spool_stopped = (
                    "spool_share"
                    if isinstance(self._budget, SessionSpoolBudget)
                    and self._budget.share_left() == 0
                    and self._budget.share < self._budget.limit
                    else "spool_budget"
                )
                self._spool_cap = self._spooled + granted
                view = view[:granted]
        try:
            while view:
                written = os.write(self._fd, view)
                self._spooled += written
                view = view[written:]
        except OSError as exc:
            # A full disk must not stop the process or its ring; the spool just ends here,
            # and reads past it report the gap.
            log.warning("process output spool stopped", extra={"detail": exc.strerror})
            if self._budget is not None:
                self._budget.give_back(len(view))
            self._spool_cap = self._spooled

    def _ring_append(self, data: bytes) -> None:
        cap = self._ring_cap
        end = self._total + len(data)
        if end <= cap:
            self._ring += data
            return
        if len(self._ring) < cap:
            self._ring.extend(bytes(cap - len(self._ring)))
        view = memoryview(data)
        if len(view) > cap:
            view = view[len(view) - cap :]
        pos = (end - len(view)) % cap
        first = min(len(view), cap - pos)
        self._ring[pos : pos + first] = view[:first]
        if first < len(view):
            self._ring[: len(view) - first] = view[first:]

    def _ring_read(self, start: int, size: int) -> bytes:
        cap = self._ring_cap
        if len(self._ring) < cap:
            return bytes(self._ring[start : start + size])
        pos = start % cap
        first = min(size, cap - pos)
        if first == size:
            return bytes(self._ring[pos : pos + size])
        return bytes(self._ring[pos:]) + bytes(self._ring[: size - first])

    # ------------------------------------------------------------------ reading

    async def read(self, cursor: int, limit: int) -> OutputChunk:
        """Up to `limit` bytes from `cursor` (see the module docstring for where they come
        from). Raises CursorAhead when `cursor` is past the end."""
        if cursor < 0 or limit < 1:
            raise ValueError("the cursor must be >= 0 and the limit >= 1")
        if cursor > self._total:
            raise CursorAhead(cursor, self._total)
        start = self.oldest_available(cursor)
        gap = start != cursor
        if start >= self.ring_start:
            size = min(limit, self._total - start)
            return OutputChunk(self._ring_read(start, size), start, gap, self._total)
        data = await self._spool_read(start, min(limit, self._spooled - start))
        end = start + len(data)
        # The spool part may run on into the ring (the usual case once the ring holds the end).
        if len(data) < limit and self.ring_start <= end < self._total:
            data += self._ring_read(end, min(limit - len(data), self._total - end))
        return OutputChunk(data, start, gap, self._total)

    async def _spool_read(self, offset: int, size: int) -> bytes:
        fd = self._fd
        if fd is None or size <= 0:
            return b""
        self._readers += 1
        try:
            if size <= INLINE_SPOOL_READ_BYTES:
                return _pread_all(fd, size, offset)
            return await anyio.to_thread.run_sync(_pread_all, fd, size, offset)
        finally:
            self._readers -= 1
            if self._closed and self._readers == 0:
                self._close_fd()

    def seal(self) -> None:
        """The output is complete (the process ended). When the spool holds all of it, the
        ring's memory is released and reads come from the spool."""
        if self._fd is not None and self._spooled == self._total:
            self._sealed = True
            self._ring = bytearray()

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Release the ring and remove the spool file (a read in progress finishes first)."""
        if self._closed:
            return
        self._closed = True
        self._ring = bytearray()
        if self._spool_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._spool_path)
            if self._budget is not None:
                self._budget.give_back(self._spooled)
        if self._readers == 0:
            self._close_fd()

    def _close_fd(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    parts: list[bytes] = []
    while size > 0:
        piece = os.pread(fd, size, offset)
        if not piece:
            break
        parts.append(piece)
        size -= len(piece)
        offset += len(piece)
    return b"".join(parts)
