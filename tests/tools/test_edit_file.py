"""EditFile: exact replacement, match errors, read-before-write, caps and the diff preview."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from callgate.server.core.tool import ToolContext, ToolLimits
from callgate.server.tools.files.file_tools import EditFile, ReadFile
from tests.tools.drive import execute, invalid_field, make_context

pytestmark = pytest.mark.anyio


async def read_then_edit(ctx: ToolContext, path: str, **edit: object) -> str:
    """Read `path` in full, edit it, and return the result text (asserting success)."""
    await execute(ReadFile(), {"path": path}, ctx)
    result = await execute(EditFile(), {"path": path, **edit}, ctx)
    assert not result.is_error, result.text
    return result.text


async def test_edit_file_replaces_the_one_occurrence_and_shows_a_diff(
    workspace: Path, ctx: ToolContext
) -> None:
    """The text changes in place; the result is a unified diff with 2 lines of context."""
    (workspace / "a.py").write_text("".join(f"line{n}\n" for n in range(1, 11)))
    text = await read_then_edit(ctx, "a.py", old="line5\n", new="five\n")
    assert (workspace / "a.py").read_text().split("\n")[4] == "five"
    assert text.split("\n") == [
        "edited a.py (1 replacement)",
        "@@ -3,5 +3,5 @@",
        " line3",
        " line4",
        "-line5",
        "+five",
        " line6",
        " line7",
    ]


async def test_edit_file_without_a_match_is_no_match(workspace: Path, ctx: ToolContext) -> None:
    """`old` must occur; otherwise no_match and the file is unchanged."""
    (workspace / "a.txt").write_text("alpha\n")
    await execute(ReadFile(), {"path": "a.txt"}, ctx)
    result = await execute(EditFile(), {"path": "a.txt", "old": "beta", "new": "x"}, ctx)
    assert result.error_code == "no_match"
    assert (workspace / "a.txt").read_text() == "alpha\n"


async def test_edit_file_with_several_matches_is_ambiguous_and_gives_the_count(
    workspace: Path, ctx: ToolContext
) -> None:
    """Several occurrences without replace_all: ambiguous_match naming how many."""
    (workspace / "a.txt").write_text("x = 1\nx = 1\nx = 1\n")
    await execute(ReadFile(), {"path": "a.txt"}, ctx)
    result = await execute(EditFile(), {"path": "a.txt", "old": "x = 1", "new": "x = 2"}, ctx)
    assert result.error_code == "ambiguous_match"
    assert "3" in result.text
    assert (workspace / "a.txt").read_text() == "x = 1\nx = 1\nx = 1\n"


async def test_edit_file_replace_all_changes_every_occurrence(
    workspace: Path, ctx: ToolContext
) -> None:
    """replace_all replaces each occurrence and says how many."""
    (workspace / "a.txt").write_text("x = 1\ny\nx = 1\n")
    text = await read_then_edit(ctx, "a.txt", old="x = 1", new="x = 2", replace_all=True)
    assert (workspace / "a.txt").read_text() == "x = 2\ny\nx = 2\n"
    assert text.startswith("edited a.txt (2 replacements)")


async def test_edit_file_needs_a_full_read_first(workspace: Path, ctx: ToolContext) -> None:
    """Editing a file this loop has not read is stale_read."""
    (workspace / "a.txt").write_text("alpha\n")
    result = await execute(EditFile(), {"path": "a.txt", "old": "alpha", "new": "beta"}, ctx)
    assert result.error_code == "stale_read"
    assert (workspace / "a.txt").read_text() == "alpha\n"


async def test_edit_file_refuses_a_file_changed_since_it_was_read(
    workspace: Path, ctx: ToolContext
) -> None:
    """A change after the read makes the edit stale."""
    (workspace / "a.txt").write_text("alpha\n")
    await execute(ReadFile(), {"path": "a.txt"}, ctx)
    (workspace / "a.txt").write_text("alpha\nmore\n")
    result = await execute(EditFile(), {"path": "a.txt", "old": "alpha", "new": "beta"}, ctx)
    assert result.error_code == "stale_read"
    assert (workspace / "a.txt").read_text() == "alpha\nmore\n"


async def test_consecutive_edits_by_the_same_loop_need_no_new_read(
    workspace: Path, ctx: ToolContext
) -> None:
    """An edit records the new content as observed, so the next edit may follow at once."""
    (workspace / "a.txt").write_text("one two\n")
    await read_then_edit(ctx, "a.txt", old="one", new="1")
    second = await execute(EditFile(), {"path": "a.txt", "old": "two", "new": "2"}, ctx)
    assert not second.is_error
    assert (workspace / "a.txt").read_text() == "1 2\n"


async def test_edit_file_keeps_the_mode_and_undecodable_bytes(
    workspace: Path, ctx: ToolContext
) -> None:
    """Bytes that are not UTF-8 survive an edit elsewhere in the file; the mode is kept."""
    target = workspace / "mixed.txt"
    target.write_bytes(b"caf\xe9\nname = old\n")
    target.chmod(0o600)
    await read_then_edit(ctx, "mixed.txt", old="old", new="new")
    assert target.read_bytes() == b"caf\xe9\nname = new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


async def test_edit_file_of_a_missing_file_is_file_not_found(ctx: ToolContext) -> None:
    """There is nothing to edit at a path that does not exist."""
    result = await execute(EditFile(), {"path": "gone.txt", "old": "a", "new": "b"}, ctx)
    assert result.error_code == "file_not_found"


async def test_edit_file_of_a_directory_is_not_a_file(workspace: Path, ctx: ToolContext) -> None:
    """A directory cannot be edited."""
    (workspace / "d").mkdir()
    result = await execute(EditFile(), {"path": "d", "old": "a", "new": "b"}, ctx)
    assert result.error_code == "not_a_file"


async def test_edit_file_refuses_files_and_results_over_the_cap(workspace: Path) -> None:
    """The 1 MiB cap (here 16 bytes) applies to the file and to the edited result."""
    ctx = make_context(workspace, limits=ToolLimits(edit_max_bytes=16))
    (workspace / "big.txt").write_text("x" * 17)
    too_big = await execute(EditFile(), {"path": "big.txt", "old": "x", "new": "y"}, ctx)
    assert too_big.error_code == "too_large"
    (workspace / "small.txt").write_text("abc\n")
    await execute(ReadFile(), {"path": "small.txt"}, ctx)
    grows = await execute(EditFile(), {"path": "small.txt", "old": "b", "new": "b" * 20}, ctx)
    assert grows.error_code == "too_large"
    assert (workspace / "small.txt").read_text() == "abc\n"


async def test_edit_file_to_a_protected_path_is_write_denied_at_run(
    workspace: Path, ctx: ToolContext
) -> None:
    """Secrets are never edited, even past the gate."""
    (workspace / ".env").write_text("TOKEN=1\n")
    result = await execute(EditFile(), {"path": ".env", "old": "1", "new": "2"}, ctx)
    assert result.error_code == "write_denied"
    assert (workspace / ".env").read_text() == "TOKEN=1\n"


async def test_the_diff_preview_is_capped(workspace: Path, ctx: ToolContext) -> None:
    """A change touching many lines shows a bounded preview with a notice."""
    (workspace / "a.txt").write_text("".join(f"v{n} = 0\n" for n in range(200)))
    text = await read_then_edit(ctx, "a.txt", old=" = 0", new=" = 1", replace_all=True)
    lines = text.split("\n")
    assert len(lines) <= 62
    assert "more diff lines" in lines[-1]


def test_edit_file_summary_never_carries_old_or_new(workspace: Path, ctx: ToolContext) -> None:
    """Summary `EditFile <rel>`; one filesystem.write requirement on the canonical path."""
    prepared = EditFile().prepare({"path": "a.txt", "old": "PASSWORD1", "new": "PASSWORD2"}, ctx)
    assert prepared.summary == "EditFile a.txt"
    [requirement] = prepared.requirements
    assert (requirement.kind, requirement.match) == ("filesystem.write", str(workspace / "a.txt"))
    assert "PASSWORD" not in repr(prepared.requirements) + repr(prepared.candidates)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"path": "a.txt", "old": "", "new": "x"}, "arguments.old"),
        ({"path": "a.txt", "old": "same", "new": "same"}, "arguments.new"),
        ({"path": "a.txt", "old": "a"}, "arguments.new"),
        ({"path": "a.txt", "old": "a", "new": "b", "replace_all": "yes"}, "arguments.replace_all"),
        ({"path": "a.txt", "old": "a", "new": "b", "count": 2}, "arguments.count"),
        ({"path": ["a.txt"], "old": "a", "new": "b"}, "arguments.path"),
    ],
)
def test_edit_file_rejects_bad_arguments_at_prepare(
    ctx: ToolContext, arguments: dict[str, object], field: str
) -> None:
    """Empty or unchanged text, missing, mistyped and unknown fields fail Prepare."""
    assert invalid_field(EditFile(), arguments, ctx) == field
