"""Process output made safe to show as text: invalid UTF-8 replaced, terminal control
sequences (ANSI CSI, OSC and other escapes) and control characters other than newline and
tab removed."""

from __future__ import annotations

import re

# Longest OSC/DCS-style string body that is recognised (and removed) as one sequence; a longer
# or unterminated one loses only its introducer, so stray bytes cannot swallow the output.
_MAX_STRING_SEQUENCE = 4096

_CONTROL = re.compile(
    # Every alternative starts with a control character: checked first, it lets the engine
    # skip ordinary text quickly.
    r"(?=[\x00-\x08\x0b-\x1f\x7f-\x9f])(?:"
    # CSI: ESC [ (or C1 CSI) parameters, intermediates, final byte.
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    # OSC, DCS, SOS, PM, APC strings, terminated by BEL or ST.
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])"
    rf"[^\x07\x1b\x9c]{{0,{_MAX_STRING_SEQUENCE}}}(?:\x07|\x1b\\|\x9c)"
    # Every other escape sequence: ESC, intermediates, final byte (ESC ( B, ESC =, ESC 7 ...).
    r"|\x1b[ -/]*[0-~]"
    # Remaining C0 controls (keeping \t and \n), DEL and C1 controls.
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f])"
)
# C0 controls (but \t and \n) and DEL as bytes; C1 controls in UTF-8 start with \xc2.
_C0_BYTES = bytes(b for b in range(0x20) if b not in b"\t\n") + b"\x7f"

# An escape sequence begun at the end of a chunk but not finished there.
_UNFINISHED_ESCAPE = re.compile(
    rb"\x1b(?:\[[0-?]*[ -/]*|[\]PX^_][^\x07\x1b]{0,%d}\x1b?|[ -/]*)\Z" % _MAX_STRING_SEQUENCE
)


def safe_text(data: bytes) -> str:
    """`data` as text: invalid UTF-8 replaced (U+FFFD), control sequences removed."""
    text = data.decode("utf-8", "replace")
    if b"\xc2" not in data and len(data.translate(None, _C0_BYTES)) == len(data):
        return text  # the common case, plain text: two C-speed scans instead of a regex
    return _CONTROL.sub("", text)


def unfinished_tail(data: bytes) -> int:
    """How many bytes at the end of `data` are an unfinished UTF-8 character or escape
    sequence: a reader that stops before them gets them whole with the next read."""
    tail = 0
    # UTF-8: a lead byte among the last three bytes whose sequence runs past the end.
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # not a continuation byte
            if _sequence_length(byte) > back:
                tail = back
            break
    window = data[-(_MAX_STRING_SEQUENCE + 8) :]
    match = _UNFINISHED_ESCAPE.search(window)
    if match is not None:
        tail = max(tail, len(window) - match.start())
    return tail


def _sequence_length(lead: int) -> int:
    if lead >> 5 == 0b110:
        return 2
    if lead >> 4 == 0b1110:
        return 3
    if lead >> 3 == 0b11110:
        return 4
    return 1
