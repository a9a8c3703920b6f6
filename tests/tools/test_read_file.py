"""ReadFile: numbered lines, ranges, caps with notices, error codes and observations."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from callgate.server.core.tool import ToolContext, ToolLimits
from callgate.server.tools.files.file_tools import ReadFile
from tests.tools.drive import execute, invalid_field, make_context

pytestmark = pytest.mark.anyio


async def test_read_file_numbers_every_line(workspace: Path, ctx: ToolContext) -> None:
    """Each line comes as `%6d<TAB>text`, without the trailing newline."""
    (workspace / "a.txt").write_text("alpha\nbeta\n")
    result = await execute(ReadFile(), {"path": "a.txt"}, ctx)
    assert not result.is_error
    assert result.text == "     1\talpha\n     2\tbeta"
    assert result.omitted_bytes == 0


async def test_read_file_shows_the_last_line_without_a_newline(
    workspace: Path, ctx: ToolContext
) -> None:
    """A final line with no newline is still a line."""
    (workspace / "a.txt").write_text("one\ntwo")
    result = await execute(ReadFile(), {"path": "a.txt"}, ctx)
    assert result.text == "     1\tone\n     2\ttwo"


async def test_read_file_shows_only_the_requested_range(workspace: Path, ctx: ToolContext) -> None:
    """start_line and end_line are 1-based and inclusive."""
    (workspace / "a.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    result = await execute(ReadFile(), {"path": "a.txt", "start_line": 3, "end_line": 5}, ctx)
    assert result.text == "     3\tline 3\n     4\tline 4\n     5\tline 5"
    tail = await execute(ReadFile(), {"path": "a.txt", "start_line": 9}, ctx)
    assert tail.text == "     9\tline 9\n    10\tline 10"


async def test_read_file_past_the_end_says_how_many_lines_there_are(
    workspace: Path, ctx: ToolContext
) -> None:
    """A range that starts after the last line is not an error; the text says why it is empty."""
    (workspace / "a.txt").write_text("x\ny\n")
    result = await execute(ReadFile(), {"path": "a.txt", "start_line": 5}, ctx)
    assert not result.is_error
    assert "2 lines" in result.text


async def test_read_file_of_an_empty_file_says_so(workspace: Path, ctx: ToolContext) -> None:
    """An empty file reads as a notice, and counts as read in full."""
    (workspace / "e.txt").write_bytes(b"")
    result = await execute(ReadFile(), {"path": "e.txt"}, ctx)
    assert not result.is_error
    assert "empty" in result.text
    assert ctx.loop.observations == {str(workspace / "e.txt"): hashlib.sha256(b"").hexdigest()}


async def test_read_file_caps_lines_and_says_what_was_omitted(workspace: Path) -> None:
    """Past the line cap the rest is omitted, with a notice and the omitted byte count."""
    ctx = make_context(workspace, limits=ToolLimits(read_max_lines=3))
    (workspace / "a.txt").write_text("l1\nl2\nl3\nl4\nl5\n")
    result = await execute(ReadFile(), {"path": "a.txt"}, ctx)
    lines = result.text.split("\n")
    assert lines[:3] == ["     1\tl1", "     2\tl2", "     3\tl3"]
    assert "truncated" in lines[3]
    assert "start_line=4" in lines[3]
    assert result.omitted_bytes == 6
    assert ctx.loop.observations == {}


async def test_read_file_at_exactly_the_line_cap_is_complete(workspace: Path) -> None:
    """A file with exactly as many lines as the cap is shown whole and counts as read."""
    ctx = make_context(workspace, limits=ToolLimits(read_max_lines=3))
    (workspace / "a.txt").write_text("l1\nl2\nl3\n")
    result = await execute(ReadFile(), {"path": "a.txt"}, ctx)
    assert result.text == "     1\tl1\n     2\tl2\n     3\tl3"
    assert str(workspace / "a.txt") in ctx.loop.observations


async def test_read_file_caps_bytes_and_says_what_was_omitted(workspace: Path) -> None:
    """Past the byte cap only whole lines are shown and the rest is counted as omitted."""
    ctx = make_context(workspace, limits=ToolLimits(read_max_bytes=10))
    (workspace / "a.txt").write_text("abcd\nefgh\nijkl\n")
    result = await execute(ReadFile(), {"path": "a.txt"}, ctx)
    assert result.text.split("\n")[:2] == ["     1\tabcd", "     2\tefgh"]
    assert "truncated" in result.text
    assert result.omitted_bytes == 5
    assert ctx.loop.observations == {}


async def test_read_file_cuts_a_line_longer_than_the_whole_cap(workspace: Path) -> None:
    """A single line longer than the byte cap is shown cut, never as nothing."""
    ctx = make_context(workspace, limits=ToolLimits(read_max_bytes=8))
    (workspace / "a.txt").write_text("0123456789abcdef\nnext\n")
    result = await execute(ReadFile(), {"path": "a.txt"}, ctx)
    assert result.text.startswith("     1\t01234567\n[truncated: line 1")
    assert result.omitted_bytes == 17 + 5 - 8


async def test_read_file_of_a_missing_file_is_file_not_found(ctx: ToolContext) -> None:
    """A path that does not exist fails at run with file_not_found."""
    result = await execute(ReadFile(), {"path": "nope.txt"}, ctx)
    assert (result.is_error, result.error_code) == (True, "file_not_found")


async def test_read_file_below_a_regular_file_is_file_not_found(
    workspace: Path, ctx: ToolContext
) -> None:
    """A path through a file (a.txt/b) does not exist."""
    (workspace / "a.txt").write_text("x")
    result = await execute(ReadFile(), {"path": "a.txt/b"}, ctx)
    assert result.error_code == "file_not_found"


async def test_read_file_of_a_directory_is_not_a_file(workspace: Path, ctx: ToolContext) -> None:
    """Directories are refused with not_a_file."""
    (workspace / "d").mkdir()
    result = await execute(ReadFile(), {"path": "d"}, ctx)
    assert result.error_code == "not_a_file"


async def test_read_file_of_a_fifo_is_refused_without_blocking(
    workspace: Path, ctx: ToolContext
) -> None:
    """A FIFO is not_a_file, and opening it to find out does not wait for a writer."""
    os.mkfifo(workspace / "pipe")
    result = await execute(ReadFile(), {"path": "pipe"}, ctx)
    assert result.error_code == "not_a_file"


async def test_read_file_refuses_binary_content_without_dumping_it(
    workspace: Path, ctx: ToolContext
) -> None:
    """A file with NUL bytes is is_binary and none of its bytes are shown."""
    (workspace / "b.bin").write_bytes(b"MAGIC\x00payload\n")
    result = await execute(ReadFile(), {"path": "b.bin"}, ctx)
    assert result.error_code == "is_binary"
    assert "MAGIC" not in result.text
    assert ctx.loop.observations == {}


async def test_read_file_of_a_protected_path_is_read_denied_at_run(
    workspace: Path, ctx: ToolContext
) -> None:
    """Even if a protected path got past the gate, the tool refuses to read it."""
    (workspace / ".env").write_text("TOKEN=hunter2\n")
    result = await execute(ReadFile(), {"path": ".env"}, ctx)
    assert result.error_code == "read_denied"
    assert "hunter2" not in result.text


async def test_a_full_read_records_the_content_hash(workspace: Path, ctx: ToolContext) -> None:
    """Reading a whole file records canonical path -> SHA-256 for the loop."""
    (workspace / "a.txt").write_bytes(b"content\n")
    await execute(ReadFile(), {"path": "./a.txt"}, ctx)
    assert ctx.loop.observations == {
        str(workspace / "a.txt"): hashlib.sha256(b"content\n").hexdigest()
    }


async def test_a_partial_read_records_no_observation(workspace: Path, ctx: ToolContext) -> None:
    """A range that leaves lines out does not count as reading the file."""
    (workspace / "a.txt").write_text("1\n2\n3\n")
    await execute(ReadFile(), {"path": "a.txt", "start_line": 2}, ctx)
    await execute(ReadFile(), {"path": "a.txt", "end_line": 2}, ctx)
    assert ctx.loop.observations == {}


async def test_a_read_from_line_one_to_the_end_is_a_full_read(
    workspace: Path, ctx: ToolContext
) -> None:
    """start_line=1 with no end_line shows every line, so it counts as a full read."""
    (workspace / "a.txt").write_text("1\n2\n")
    await execute(ReadFile(), {"path": "a.txt", "start_line": 1}, ctx)
    assert str(workspace / "a.txt") in ctx.loop.observations


async def test_read_file_invalid_text_is_shown_with_replacement_characters(
    workspace: Path, ctx: ToolContext
) -> None:
    """Bytes that are not UTF-8 are shown as U+FFFD, never as raw bytes."""
    (workspace / "latin.txt").write_bytes(b"caf\xe9\n")
    result = await execute(ReadFile(), {"path": "latin.txt"}, ctx)
    assert result.text == "     1\tcaf\ufffd"


async def test_read_file_large_files_are_read_in_a_worker_thread_with_the_same_result(
    workspace: Path, ctx: ToolContext
) -> None:
    """A file above the inline threshold reads the same way (lines and notice)."""
    body = "".join(f"{n:07d}\n" for n in range(1, 40001))
    (workspace / "big.txt").write_text(body)
    result = await execute(ReadFile(), {"path": "big.txt", "start_line": 39999}, ctx)
    assert result.text == " 39999\t0039999\n 40000\t0040000"
    capped = await execute(ReadFile(), {"path": "big.txt"}, ctx)
    assert capped.text.split("\n")[1999] == "  2000\t0002000"
    assert capped.omitted_bytes == len(body) - 2000 * 8


def test_read_file_summary_names_the_relative_path_and_range(
    workspace: Path, ctx: ToolContext
) -> None:
    """The summary is `ReadFile <rel>` plus ` lines A-B` for a range; never the content."""
    (workspace / "src").mkdir()
    (workspace / "src/app.py").write_text("SECRET_CONTENT\n")
    tool = ReadFile()
    assert tool.prepare({"path": "src/app.py"}, ctx).summary == "ReadFile src/app.py"
    ranged = tool.prepare({"path": "src/app.py", "start_line": 2, "end_line": 9}, ctx)
    assert ranged.summary == "ReadFile src/app.py lines 2-9"
    assert tool.prepare({"path": "src/app.py", "start_line": 4}, ctx).summary.endswith(
        "lines 4-end"
    )


def test_read_file_requires_reading_the_exact_canonical_path(
    workspace: Path, ctx: ToolContext
) -> None:
    """One filesystem.read requirement on the canonical path; the rule candidate is the same."""
    (workspace / "real").mkdir()
    (workspace / "real/f.txt").write_text("x")
    (workspace / "alias").symlink_to("real")
    prepared = ReadFile().prepare({"path": "alias/../alias/f.txt"}, ctx)
    canonical = str(workspace / "real/f.txt")
    [requirement] = prepared.requirements
    assert (requirement.kind, requirement.scope, requirement.match) == (
        "filesystem.read",
        canonical,
        canonical,
    )
    assert requirement.description == f"read {canonical}"
    assert [(c.kind, c.match) for c in prepared.candidates] == [("filesystem.read", canonical)]
    assert prepared.summary == "ReadFile real/f.txt"


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"path": "a.txt", "start_line": 0}, "arguments.start_line"),
        ({"path": "a.txt", "end_line": -1}, "arguments.end_line"),
        ({"path": "a.txt", "start_line": 5, "end_line": 4}, "arguments.end_line"),
        ({"path": "a.txt", "start_line": "one"}, "arguments.start_line"),
        ({"path": "a.txt", "start_line": True}, "arguments.start_line"),
        ({"path": "a.txt", "limit": 3}, "arguments.limit"),
        ({}, "arguments.path"),
        ({"path": 7}, "arguments.path"),
        ({"path": ""}, "arguments.path"),
    ],
)
def test_read_file_rejects_bad_arguments_at_prepare(
    ctx: ToolContext, arguments: dict[str, object], field: str
) -> None:
    """Bad ranges, wrong types, unknown and missing fields are ARGUMENTS_INVALID on the field."""
    assert invalid_field(ReadFile(), arguments, ctx) == field
