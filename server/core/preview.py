"""Previews: what a call would do, as its approver is shown it before deciding.

A tool builds its preview at Prepare, from the frozen artifact (and, for a write, the file
content the artifact is bound to), and the digest covers it: an approver decides on exactly
what they saw. Every preview is

- **bounded**: at most `max_bytes` of text, cut at a line; `omitted_bytes` counts the bytes
  of the source (content or diff lines) left out, so nothing is hidden silently;
- **escaped**: control characters (C0 but tab and newline, DEL, C1: so ESC and CR), format
  characters (bidi overrides and isolates, zero-width characters, BOM), line and paragraph
  separators, non-ASCII spaces, private-use, surrogate and unassigned code points are shown
  as `\\xNN`, `\\uNNNN` or `\\UNNNNNNNN`. A literal backslash is left as it is; a preview
  that escaped anything starts with a line saying how many characters it escaped, so
  without that line every backslash shown is one the text really holds (the house rule of
  the terminal approver, `cli/display.py`);
- **cheap**: linear in the content (a diff of a large change is one hunk, not a search).

Kinds: "diff" (unified diff against the current file), "content" (a new file's content),
"command", "request", "skill".
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from .models import Preview

__all__ = [
    "DEFAULT_PREVIEW_MAX_BYTES",
    "Window",
    "bounded",
    "changed_window",
    "content_preview",
    "diff_preview",
    "escape",
    "matched_hunks",
    "whole_hunk",
]

DEFAULT_PREVIEW_MAX_BYTES: Final = 64 << 10
"""The default bound on a preview's text (ToolLimits.preview_max_bytes)."""

CONTEXT_LINES: Final = 3
"""Unchanged lines shown around each change, as `diff -u`."""

MATCH_WINDOW_LINES: Final = 2000
"""Past this many lines on either side of the window of change (the common head and tail
taken off), the diff is one hunk removing the old lines and adding the new ones: always
correct, and linear, where a line-matching search would cost more."""

_SUSPECT: Final = re.compile(r"[^\t\n\x20-\x7e]")
_HIDDEN_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _escaped(char: str) -> str | None:
    """The escape of a hidden or terminal-controlling character; None for any other."""
    category = unicodedata.category(char)
    if category not in _HIDDEN_CATEGORIES and not (category == "Zs" and char != " "):
        return None
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def escape(text: str) -> tuple[str, int]:
    """`text` with every hidden or terminal-controlling character escaped (tab and newline
    kept), and how many characters were escaped."""
    if _SUSPECT.search(text) is None:
        return text, 0
    count = 0

    def replace(match: re.Match[str]) -> str:
        nonlocal count
        escaped = _escaped(match.group())
        if escaped is None:
            return match.group()  # a letter or mark outside ASCII: shown as it is
        count += 1
        return escaped

    return _SUSPECT.sub(replace, text), count


def _utf8_size(line: str) -> int:
    return len(line.encode("utf-8", "surrogatepass")) + 1


def bounded(kind: str, header: Iterable[str], lines: Iterable[str], max_bytes: int) -> Preview:
    """A preview of `header` lines (always kept) and `lines`, escaped, cut at `max_bytes`."""
    shown: list[str] = []
    hidden = 0
    size = 0
    omitted = 0
    for line in header:
        text, count = escape(line)
        hidden += count
        shown.append(text)
        size += _utf8_size(text)
    full = False
    for line in lines:
        if full:
            omitted += _utf8_size(line)
            continue
        text, count = escape(line)
        if size + _utf8_size(text) > max_bytes:
            full = True
            omitted += _utf8_size(line)
            continue
        hidden += count
        shown.append(text)
        size += _utf8_size(text)
    if omitted:
        shown.append(f"[… {omitted} more bytes not shown]")
    if hidden:
        shown.insert(
            0,
            f"[{hidden} control or invisible character(s) below are shown escaped "
            "(\\xNN, \\uNNNN); look closely before deciding]",
        )
    return Preview(kind=kind, text="".join(line + "\n" for line in shown), omitted_bytes=omitted)


def _split(text: str) -> list[str]:
    """Lines without their newline; a final newline does not make an extra empty line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def content_preview(header: Iterable[str], content: str, max_bytes: int) -> Preview:
    """The content of a new file (or a body), under `header`."""
    lines = _split(content)
    notes = list(header)
    if content and not content.endswith("\n"):
        notes.append("(no newline at the end of the content)")
    return bounded("content", notes, lines, max_bytes)


@dataclass(frozen=True, slots=True)
class Window:
    """Where two line lists differ: from `low` on, `old` and `new` hold the differing lines
    with up to `context` unchanged lines before and after (`lead` and `trail` of them)."""

    low: int
    lead: int
    trail: int
    old: list[str]
    new: list[str]

    @property
    def span(self) -> int:
        return max(len(self.old), len(self.new))


def changed_window(old: list[str], new: list[str], context: int) -> Window | None:
    """The window of change (the common head and tail taken off, linear); None if equal."""
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    if head == len(old) == len(new):
        return None
    low = max(0, head - context)
    keep = max(0, tail - context)
    return Window(
        low, head - low, tail - keep, old[low : len(old) - keep], new[low : len(new) - keep]
    )


def whole_hunk(window: Window) -> Iterator[str]:
    """One hunk: the context, every old line removed, every new line added (linear)."""
    end_old = len(window.old) - window.trail
    end_new = len(window.new) - window.trail
    low = window.low
    yield (
        f"@@ -{low + 1},{len(window.old)} +{low + 1},{len(window.new)} @@"
        " (a large change: shown as a whole)"
    )
    yield from (" " + line for line in window.old[: window.lead])
    yield from ("-" + line for line in window.old[window.lead : end_old])
    yield from ("+" + line for line in window.new[window.lead : end_new])
    yield from (" " + line for line in window.old[end_old:])


def matched_hunks(window: Window, context: int) -> Iterator[str]:
    """Unified-diff hunks of the window, lines matched by difflib. With autojunk, a line that
    is frequent in a long window is no anchor, so lines repeated by design (an attacker's
    "ab"/"ba" file) cannot make the match quadratic: measured 1 ms where autojunk=False took
    over 100 s on 2,000 lines; under 200 lines (no autojunk) at most ~60 ms."""
    matcher = difflib.SequenceMatcher(None, window.old, window.new, autojunk=True)
    low = window.low
    for group in matcher.get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        old_start, old_end = first[1], last[2]
        new_start, new_end = first[3], last[4]
        yield (
            f"@@ -{low + old_start + 1},{old_end - old_start} "
            f"+{low + new_start + 1},{new_end - new_start} @@"
        )
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in window.old[i1:i2])
                continue
            if tag in ("replace", "delete"):
                yield from ("-" + line for line in window.old[i1:i2])
            if tag in ("replace", "insert"):
                yield from ("+" + line for line in window.new[j1:j2])


def _hunks(old: list[str], new: list[str]) -> Iterator[str]:
    window = changed_window(old, new, CONTEXT_LINES)
    if window is None:
        return
    if window.span > MATCH_WINDOW_LINES:
        yield from whole_hunk(window)
    else:
        yield from matched_hunks(window, CONTEXT_LINES)


def diff_preview(name: str, before: str, after: str, max_bytes: int) -> Preview:
    """A unified diff of `before` to `after` (the file `name`), with 3 lines of context."""
    header = [f"--- a/{name}", f"+++ b/{name}"]
    notes: list[str] = []
    if before.endswith("\n") != after.endswith("\n") and (before or after):
        ends = "ends" if after.endswith("\n") else "does not end"
        notes.append(f"(the newline at the end changes: the new content {ends} with one)")
    lines = list(_hunks(_split(before), _split(after)))
    if not lines and not notes:
        notes.append("(no change: the new content is the current content)")
    return bounded("diff", header + notes, lines, max_bytes)
