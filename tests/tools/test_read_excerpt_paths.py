"""The in-memory read of a small file gives exactly what the streaming read gives."""

from __future__ import annotations

import os
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.server.tools.files.file_tools import read_excerpt

_lines = st.lists(
    st.sampled_from([b"", b"a", b"bb\r", b"\xff\xfe", b"text with spaces", b"x" * 40]),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(
    lines=_lines,
    trailing_newline=st.booleans(),
    nul=st.booleans(),
    start=st.integers(min_value=1, max_value=35),
    span=st.one_of(st.none(), st.integers(min_value=0, max_value=35)),
    max_lines=st.integers(min_value=1, max_value=40),
)
def test_whole_file_read_matches_the_streaming_read(
    lines: list[bytes],
    trailing_newline: bool,
    nul: bool,
    start: int,
    span: int | None,
    max_lines: int,
) -> None:
    """Lines, counts, truncation, end-of-file and the digest agree between both read paths."""
    data = b"\n".join(lines) + (b"\n" if trailing_newline and lines else b"")
    if nul:
        data += b"\x00"
    end = None if span is None else start + span
    with tempfile.TemporaryFile() as handle:
        handle.write(data)
        handle.flush()
        fd = handle.fileno()
        os.lseek(fd, 0, os.SEEK_SET)
        whole = read_excerpt(fd, len(data), start, end, max_lines, 1 << 20)
        os.lseek(fd, 0, os.SEEK_SET)
        streamed = read_excerpt(
            fd, len(data), start, end, max_lines, 1 << 20, whole_file_read=False
        )
    assert whole == streamed
