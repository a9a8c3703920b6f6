"""Grep's scanner, shared by both engines: one file's matching lines with context, within the
match and byte caps, and the result text."""

from __future__ import annotations

import io
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ...core.models import ToolResult
from ...sandbox.fsaccess import read_up_to
from ..common import display
from .walk import SearchTimedOut, check_deadline

MAX_LINE_CHARS = 1000


@dataclass(slots=True)
class GrepOutput:
    """The lines found so far, within the match and byte caps."""

    max_matches: int
    max_bytes: int
    context: int
    lines: list[str] = field(default_factory=list)
    size: int = 0
    matches: int = 0
    more_matches: bool = False
    over_bytes: bool = False
    # Set from the event loop when the call is cancelled or times out: the worker thread
    # searching stops at its next check instead of running on (and holding shutdown).
    abandoned: bool = False

    @property
    def full(self) -> bool:
        return self.more_matches or self.over_bytes


def _clip(text: str) -> str:
    if len(text) <= MAX_LINE_CHARS:
        return text
    return text[:MAX_LINE_CHARS] + f" [… {len(text) - MAX_LINE_CHARS} more chars]"


class _FileScan:
    """The output lines one file contributes, held back until the whole file has been read:
    a file that turns out not to be UTF-8 text (a NUL byte, an invalid sequence) adds
    nothing, wherever that shows."""

    def __init__(self, rel: str, out: GrepOutput) -> None:
        self.shown = display(rel)
        self.out = out
        self.pending: list[str] = []
        self.size = out.size
        self.matches = out.matches
        self.more = False
        self.over = False
        self.collecting = True
        self.before: deque[tuple[int, str]] = deque(maxlen=out.context)
        self.after = 0
        self.last = 0  # the last line number added

    def feed(self, number: int, text: str, hit: bool) -> None:
        out = self.out
        if hit:
            if self.matches == out.max_matches:
                self.more = True
                self.collecting = False
                return
            group = [*self.before, (number, text)]
            self.before.clear()
            for index, (line_number, line_text) in enumerate(group):
                if not self._add(line_number, line_text, hit=index == len(group) - 1):
                    return
            self.matches += 1
            self.after = out.context
        elif self.after:
            self.after -= 1
            self._add(number, text, hit=False)
        elif out.context:
            self.before.append((number, text))

    def _add(self, number: int, text: str, *, hit: bool) -> bool:
        entries: list[str] = []
        first_here = not self.last
        if self.out.context and (self.out.lines if first_here else number > self.last + 1):
            entries.append("--")
        mark = ":" if hit else "-"
        entries.append(f"{self.shown}{mark}{number}{mark}{_clip(text)}")
        cost = sum(len(entry.encode("utf-8")) + 1 for entry in entries)
        if self.size + cost > self.out.max_bytes:
            self.over = True
            self.collecting = False
            return False
        self.pending.extend(entries)
        self.size += cost
        self.last = number
        return True

    def commit(self) -> None:
        out = self.out
        out.lines.extend(self.pending)
        out.size = self.size
        out.matches = self.matches
        out.more_matches = out.more_matches or self.more
        out.over_bytes = out.over_bytes or self.over


PREFILTER_BYTES = 1 << 20
"""Files up to this size are read whole first and skipped when no line can match."""


def scan_file(
    fd: int,
    rel: str,
    is_hit: Callable[[int, str], bool],
    out: GrepOutput,
    deadline: float,
    prefilter: Callable[[str], object | None] | None = None,
) -> None:
    """Search one open file and add its lines to `out` (all of them, or none if the file is
    not UTF-8 text). `is_hit` decides whether a line matches. `prefilter`, a search of the
    whole text that finds a match wherever a line would (the pattern in multi-line mode),
    lets a file without one be skipped without its lines being looked at one by one."""
    check_deadline(deadline)
    if out.abandoned:
        raise SearchTimedOut
    if prefilter is not None and not _may_match(fd, prefilter):
        return
    reader = io.BufferedReader(io.FileIO(fd, "rb", closefd=False), 1 << 16)
    scan = _FileScan(rel, out)
    for number, raw in enumerate(reader, start=1):
        if number % 4096 == 0:
            check_deadline(deadline)
            if out.abandoned:
                raise SearchTimedOut
        if b"\x00" in raw:
            return
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return
        if scan.collecting:
            text = text.removesuffix("\n")
            scan.feed(number, text, is_hit(number, text))
    scan.commit()


def _may_match(fd: int, prefilter: Callable[[str], object | None]) -> bool:
    """False when the file (up to PREFILTER_BYTES) is not text or holds no match at all;
    True otherwise, with the file's offset back at its start."""
    data = read_up_to(fd, PREFILTER_BYTES)
    if data is None:  # larger: its lines are looked at as they come
        os.lseek(fd, 0, os.SEEK_SET)
        return True
    if b"\x00" in data:
        return False
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    if prefilter(text) is None:
        return False
    os.lseek(fd, 0, os.SEEK_SET)
    return True


def grep_result(out: GrepOutput, rel: str) -> ToolResult:
    if not out.lines:
        return ToolResult(text=f"no matches in {display(rel)}")
    lines = list(out.lines)
    if out.more_matches:
        lines.append(
            f"[stopped after {out.max_matches} matches; more exist: narrow the pattern, "
            "path or glob]"
        )
    if out.over_bytes:
        lines.append(f"[output capped at {out.max_bytes} bytes; narrow the pattern, path or glob]")
    return ToolResult(text="\n".join(lines))
