"""Safe text for process output: control sequences stripped, invalid UTF-8 replaced, and the
unfinished tail of a chunk recognised so it can be read whole next time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from callgate.server.tools.processes.terminal_text import safe_text, unfinished_tail


def test_colours_titles_and_cursor_moves_are_removed() -> None:
    """CSI (colours, cursor moves), OSC (window title, hyperlinks) and two-byte escapes go;
    the words stay."""
    raw = (
        b"\x1b[1;31mred\x1b[0m \x1b]0;title\x07plain \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\"
        b" \x1b(Bcharset \x1b=keypad \x1b[2K\x1b[1Gdone"
    )
    assert safe_text(raw) == "red plain link charset keypad done"


def test_controls_other_than_newline_and_tab_are_removed() -> None:
    """\\r, backspace, bell, NUL, DEL and C1 controls (a C1 CSI with its sequence) are dropped;
    \\n and \\t are kept."""
    raw = b"a\tb\r\nc\x08d\x07e\x00f\x7fg\xc2\x9b1mh\xc2\x85i\n"
    assert safe_text(raw) == "a\tb\ncdefghi\n"


def test_invalid_utf8_is_replaced_and_valid_text_kept() -> None:
    """Invalid bytes become U+FFFD; non-ASCII text passes unchanged."""
    assert safe_text(b"caf\xc3\xa9 \xff\xfe ok \xe2\x9c\x93") == "café \ufffd\ufffd ok ✓"


def test_an_unterminated_string_sequence_does_not_swallow_the_output() -> None:
    """ESC ] without a terminator loses only its introducer."""
    assert safe_text(b"\x1b]not a title\nline two\n") == "not a title\nline two\n"


def test_unfinished_tail_finds_cut_characters_and_escapes() -> None:
    """A cut multi-byte character or escape sequence at the end is counted; complete ones
    are not."""
    assert unfinished_tail(b"abc") == 0
    assert unfinished_tail("é".encode()[:1]) == 1
    assert unfinished_tail(b"x" + "✓".encode()[:2]) == 2
    assert unfinished_tail(b"x" + "😀".encode()[:3]) == 3
    assert unfinished_tail("x😀".encode()) == 0
    assert unfinished_tail(b"x\x1b") == 1
    assert unfinished_tail(b"x\x1b[1;3") == 5
    assert unfinished_tail(b"x\x1b[1;31m") == 0
    assert unfinished_tail(b"x\x1b]0;title\x1b") == 10
    assert unfinished_tail(b"x\x1b]0;title\x07") == 0


@given(st.binary(max_size=200))
def test_safe_text_never_contains_control_characters(raw: bytes) -> None:
    """Whatever the bytes, the text has no ESC, no C0 other than \\n and \\t, no DEL, no C1."""
    text = safe_text(raw)
    assert all(ch in "\n\t" or not (ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F) for ch in text)
