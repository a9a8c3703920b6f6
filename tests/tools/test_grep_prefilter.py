"""The in-server Grep skips a file when the pattern, searched over its whole text in multi-line
mode, finds nothing: that must never skip a file holding a matching line (a false "maybe" only
costs the line-by-line look). Checked over generated texts and a set of patterns that stress
anchors, classes, case and line ends; patterns that would not be safe get no prefilter."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.server.tools.search.patterns import compile_grep_regex, whole_text_prefilter

PATTERNS = [
    r"^foo",
    r"foo$",
    r"^$",
    r"^\s*$",
    r"\bfoo\b",
    r"f.o",
    r"(?s)f.o",
    r"(?i)FOO",
    r"[a-f]+\d",
    r"^(foo|bar)\s+\w+$",
    r"x*",
    r"\r$",
    r"é",
    r"\x{1F600}",
    r"\Bo",
]

LINES = st.lists(st.text(alphabet="fobarxé \t\r0123456789😀", max_size=12), min_size=0, max_size=8)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("ignore_case", [False, True])
@settings(max_examples=60, deadline=None)
@given(lines=LINES)
def test_a_file_with_a_matching_line_is_never_skipped(
    pattern: str, ignore_case: bool, lines: list[str]
) -> None:
    line = compile_grep_regex(pattern, ignore_case)
    whole = whole_text_prefilter(pattern, ignore_case)
    assert whole is not None
    text = "\n".join(lines) + ("\n" if lines else "")
    if any(line.search(one) is not None for one in lines):
        assert whole.search(text) is not None, (pattern, lines)


@pytest.mark.parametrize("pattern", [r"\Afoo", r"(?m)^foo", r"(?-m)^foo", r"(?im)foo"])
def test_patterns_that_could_miss_get_no_prefilter(pattern: str) -> None:
    assert whole_text_prefilter(pattern, False) is None
