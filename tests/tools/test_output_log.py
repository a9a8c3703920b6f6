"""OutputLog: ring + append-only spool addressed by absolute cursors; gaps are reported."""

from __future__ import annotations

import os
import random
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.server.tools.processes.output_log import CursorAhead, OutputLog

pytestmark = pytest.mark.anyio

KIB = 1 << 10


def pseudo_random(size: int, seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(size)  # noqa: S311 - reproducible test data, not secrets


def fill(log: OutputLog, data: bytes, pieces: list[int]) -> None:
    offset = 0
    for size in pieces:
        log.append(data[offset : offset + size])
        offset += size
    log.append(data[offset:])


async def read_all(log: OutputLog, limit: int, cursor: int = 0) -> tuple[bytes, list[int]]:
    """Follow next cursors to the end; returns the bytes and the offsets where gaps began."""
    out = bytearray()
    gaps: list[int] = []
    while cursor < log.total:
        chunk = await log.read(cursor, limit)
        if chunk.gap:
            gaps.append(cursor)
        out += chunk.data
        cursor = chunk.end
    return bytes(out), gaps


async def test_everything_reads_back_losslessly_while_the_spool_holds_it(tmp_path: Path) -> None:
    """With a spool larger than the output, reading with cursors reassembles it exactly."""
    data = pseudo_random(3_000_000)
    log = OutputLog(64 * KIB, tmp_path / "p.out", 16 << 20)
    fill(log, data, [1, 4095, 70_000, 65_536, 3, 1_000_000])
    assert log.total == len(data)
    for limit in (1, 777, 32 * KIB, 1 << 20):
        back, gaps = await read_all(log, limit, cursor=0 if limit > 1 else len(data) - 5000)
        assert gaps == []
        assert back == (data if limit > 1 else data[-5000:])


async def test_a_gap_is_reported_once_ring_and_spool_are_exceeded(tmp_path: Path) -> None:
    """Ring 64 KiB + spool 256 KiB over 1 MB: the head comes from the spool, then one gap,
    then the tail from the ring, never a silent jump."""
    data = pseudo_random(1_000_000)
    log = OutputLog(64 * KIB, tmp_path / "p.out", 256 * KIB)
    fill(log, data, [10_000] * 50)
    back, gaps = await read_all(log, 32 * KIB)
    assert gaps == [256 * KIB]
    assert back == data[: 256 * KIB] + data[-64 * KIB :]
    dropped = await log.read(300_000, 10)
    assert dropped.gap
    assert dropped.start == len(data) - 64 * KIB
    assert dropped.data == data[dropped.start : dropped.start + 10]


async def test_a_cursor_past_the_end_is_refused_and_the_end_is_empty(tmp_path: Path) -> None:
    """Cursor == total reads nothing (no gap); cursor > total raises CursorAhead."""
    log = OutputLog(64 * KIB, tmp_path / "p.out", KIB)
    log.append(b"hello")
    end = await log.read(5, 100)
    assert (end.data, end.gap, end.start) == (b"", False, 5)
    with pytest.raises(CursorAhead) as raised:
        await log.read(6, 100)
    assert (raised.value.cursor, raised.value.total) == (6, 5)


async def test_the_spool_is_append_only_and_removed_at_close(tmp_path: Path) -> None:
    """The spool file holds exactly the first spool_bytes, in one inode that only grew, and
    closing the log removes it."""
    path = tmp_path / "p.out"
    log = OutputLog(4 * KIB, path, 10_000)
    inode = path.stat().st_ino
    data = pseudo_random(50_000)
    fill(log, data, [3000] * 10)
    assert path.stat().st_ino == inode
    assert path.read_bytes() == data[:10_000]
    assert path.stat().st_mode & 0o777 == 0o600
    log.close()
    assert not path.exists()


async def test_without_a_spool_the_ring_alone_reports_what_it_lost() -> None:
    """No state directory: reading from 0 after overflow starts at the ring with a gap."""
    data = pseudo_random(10_000)
    log = OutputLog(KIB, None, 64 << 20)
    fill(log, data, [5000])
    chunk = await log.read(0, 100_000)
    assert chunk.gap
    assert chunk.start == 10_000 - KIB
    assert chunk.data == data[-KIB:]


async def test_large_spool_reads_run_in_a_worker_thread_and_match(tmp_path: Path) -> None:
    """A 1 MiB read from the spool (beyond the inline threshold) returns the same bytes."""
    data = pseudo_random(3 << 20)
    log = OutputLog(64 * KIB, tmp_path / "p.out", 64 << 20)
    fill(log, data, [])
    chunk = await log.read(1000, 1 << 20)
    assert chunk.data == data[1000 : 1000 + (1 << 20)]
    assert not chunk.gap
    log.close()
    assert not os.path.exists(tmp_path / "p.out")


@settings(max_examples=60, deadline=None)
@given(
    ring=st.integers(1, 300),
    spool=st.integers(0, 400),
    pieces=st.lists(st.integers(0, 250), max_size=12),
    cursor_at=st.floats(0, 1),
    limit=st.integers(1, 500),
)
def test_every_read_returns_the_bytes_at_its_offsets(
    tmp_path_factory: pytest.TempPathFactory,
    ring: int,
    spool: int,
    pieces: list[int],
    cursor_at: float,
    limit: int,
) -> None:
    """For any caps, chunking, cursor and limit: the data is exactly the stream's bytes at
    [start, end), start == cursor unless those bytes are gone (then gap and start is the
    oldest byte still held)."""
    data = pseudo_random(sum(pieces), seed=len(pieces))
    log = OutputLog(ring, tmp_path_factory.mktemp("spool") / "p.out", spool)
    fill(log, data, pieces)
    cursor = int(cursor_at * len(data))
    chunk = anyio.run(log.read, cursor, limit)
    held = cursor < min(spool, len(data)) or cursor >= len(data) - ring
    assert chunk.gap == (not held)
    assert chunk.start == (cursor if held else max(0, len(data) - ring))
    assert chunk.data == data[chunk.start : chunk.start + len(chunk.data)]
    assert len(chunk.data) == min(limit, len(data) - chunk.start) or (
        # A spool read stops where the spool ends when the ring does not continue it.
        chunk.start < spool and chunk.end == min(spool, len(data))
    )
    log.close()


async def test_a_sealed_log_reads_from_the_spool_and_frees_the_ring(tmp_path: Path) -> None:
    """Once complete and wholly spooled, the ring is released and every read still returns
    the same bytes; a log whose spool is short keeps its ring."""
    data = pseudo_random(200_000)
    log = OutputLog(64 * KIB, tmp_path / "p.out", 1 << 20)
    fill(log, data, [70_000])
    log.seal()
    assert log.ring_start == log.total
    back, gaps = await read_all(log, 50_000)
    assert (back, gaps) == (data, [])
    short = OutputLog(64 * KIB, tmp_path / "q.out", 100)
    fill(short, data, [])
    short.seal()
    tail = await short.read(len(data) - 10, 100)
    assert (tail.data, tail.gap) == (data[-10:], False)
