"""WriteFile: atomic creation and overwrite, read-before-write, modes and error codes."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from callgate.server.core.tool import LoopState, ToolContext, ToolLimits
from callgate.server.tools.files.file_tools import ReadFile, WriteFile
from tests.tools.drive import execute, invalid_field, make_context

pytestmark = pytest.mark.anyio


async def test_write_file_creates_a_new_file_with_its_parents(
    workspace: Path, ctx: ToolContext
) -> None:
    """A new file needs no read; missing parent directories are created; mode is 0644."""
    result = await execute(WriteFile(), {"path": "a/b/new.txt", "content": "héllo\n"}, ctx)
    assert not result.is_error
    assert result.text == "wrote a/b/new.txt (7 bytes)"
    target = workspace / "a/b/new.txt"
    assert target.read_text() == "héllo\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


async def test_write_file_leaves_no_temporary_files_behind(
    workspace: Path, ctx: ToolContext
) -> None:
    """Only the target appears in its directory after a create and an overwrite."""
    await execute(WriteFile(), {"path": "f.txt", "content": "1"}, ctx)
    await execute(WriteFile(), {"path": "f.txt", "content": "2"}, ctx)
    assert os.listdir(workspace) == ["f.txt"]


async def test_write_file_refuses_to_overwrite_an_unread_file(
    workspace: Path, ctx: ToolContext
) -> None:
    """Overwriting needs a full read by this loop first: stale_read, file unchanged."""
    (workspace / "f.txt").write_text("original")
    result = await execute(WriteFile(), {"path": "f.txt", "content": "clobber"}, ctx)
    assert result.error_code == "stale_read"
    assert (workspace / "f.txt").read_text() == "original"


async def test_write_file_refuses_after_a_partial_read(workspace: Path, ctx: ToolContext) -> None:
    """A ranged read does not count as having read the file."""
    (workspace / "f.txt").write_text("1\n2\n3\n")
    await execute(ReadFile(), {"path": "f.txt", "end_line": 1}, ctx)
    result = await execute(WriteFile(), {"path": "f.txt", "content": "x"}, ctx)
    assert result.error_code == "stale_read"


async def test_write_file_refuses_when_the_file_changed_since_it_was_read(
    workspace: Path, ctx: ToolContext
) -> None:
    """A change by anyone else after the read makes the read stale."""
    (workspace / "f.txt").write_text("v1")
    await execute(ReadFile(), {"path": "f.txt"}, ctx)
    (workspace / "f.txt").write_text("v1 edited elsewhere")
    result = await execute(WriteFile(), {"path": "f.txt", "content": "v2"}, ctx)
    assert result.error_code == "stale_read"
    assert (workspace / "f.txt").read_text() == "v1 edited elsewhere"


async def test_write_file_overwrites_after_a_full_read_and_keeps_the_mode(
    workspace: Path, ctx: ToolContext
) -> None:
    """After a current full read the write replaces the file and keeps its mode."""
    target = workspace / "run.sh"
    target.write_text("echo 1\n")
    target.chmod(0o750)
    await execute(ReadFile(), {"path": "run.sh"}, ctx)
    result = await execute(WriteFile(), {"path": "run.sh", "content": "echo 2\n"}, ctx)
    assert not result.is_error
    assert target.read_text() == "echo 2\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750


async def test_the_same_loop_may_write_again_after_its_own_write(
    workspace: Path, ctx: ToolContext
) -> None:
    """A successful write records the new content as observed."""
    await execute(WriteFile(), {"path": "f.txt", "content": "one"}, ctx)
    assert ctx.loop.observations[str(workspace / "f.txt")] == hashlib.sha256(b"one").hexdigest()
    second = await execute(WriteFile(), {"path": "f.txt", "content": "two"}, ctx)
    assert not second.is_error
    assert (workspace / "f.txt").read_text() == "two"


async def test_another_loops_read_does_not_allow_this_loop_to_write(workspace: Path) -> None:
    """Observations are per loop: a second loop that never read the file gets stale_read."""
    reader = make_context(workspace, loop=LoopState("reader"))
    writer = make_context(workspace, loop=LoopState("writer"))
    (workspace / "shared.txt").write_text("v1")
    await execute(ReadFile(), {"path": "shared.txt"}, reader)
    refused = await execute(WriteFile(), {"path": "shared.txt", "content": "v2"}, writer)
    assert refused.error_code == "stale_read"
    allowed = await execute(WriteFile(), {"path": "shared.txt", "content": "v2"}, reader)
    assert not allowed.is_error


async def test_a_concurrent_creator_loses_with_already_exists(
    workspace: Path, ctx: ToolContext
) -> None:
    """Two creations of the same new file: the first wins, the second fails cleanly."""
    other = make_context(workspace, loop=LoopState("other"))
    tool = WriteFile()
    first = tool.prepare({"path": "new.txt", "content": "first"}, ctx)
    second = tool.prepare({"path": "new.txt", "content": "second"}, other)
    assert not (await tool.invoke(first.artifact, ctx)).is_error
    lost = await tool.invoke(second.artifact, other)
    assert lost.error_code == "already_exists"
    assert (workspace / "new.txt").read_text() == "first"


async def test_a_creation_does_not_replace_a_file_that_appeared_even_after_a_read(
    workspace: Path, ctx: ToolContext
) -> None:
    """A call approved as a creation never overwrites, whatever happened meanwhile."""
    tool = WriteFile()
    prepared = tool.prepare({"path": "new.txt", "content": "mine"}, ctx)
    (workspace / "new.txt").write_text("theirs")
    await execute(ReadFile(), {"path": "new.txt"}, ctx)
    result = await tool.invoke(prepared.artifact, ctx)
    assert result.error_code == "already_exists"
    assert (workspace / "new.txt").read_text() == "theirs"


async def test_write_file_over_a_directory_is_not_a_file(workspace: Path, ctx: ToolContext) -> None:
    """An existing directory at the path is refused."""
    (workspace / "d").mkdir()
    result = await execute(WriteFile(), {"path": "d", "content": "x"}, ctx)
    assert result.error_code == "not_a_file"
    assert (workspace / "d").is_dir()


async def test_write_file_below_a_regular_file_is_not_a_directory(
    workspace: Path, ctx: ToolContext
) -> None:
    """A parent that is a file cannot hold the new file."""
    (workspace / "f").write_text("x")
    result = await execute(WriteFile(), {"path": "f/new.txt", "content": "x"}, ctx)
    assert result.error_code == "not_a_directory"
    assert (workspace / "f").read_text() == "x"


async def test_write_file_to_a_protected_path_is_write_denied_at_run(
    workspace: Path, ctx: ToolContext
) -> None:
    """Even past the gate, secrets are never written or created."""
    (workspace / ".env").write_text("TOKEN=1\n")
    result = await execute(WriteFile(), {"path": ".env", "content": "TOKEN=2\n"}, ctx)
    assert result.error_code == "write_denied"
    assert (workspace / ".env").read_text() == "TOKEN=1\n"
    created = await execute(WriteFile(), {"path": "keys/server.pem", "content": "k"}, ctx)
    assert created.error_code == "write_denied"
    assert not (workspace / "keys").exists()


def test_write_file_summary_and_requirement_never_carry_the_content(
    workspace: Path, ctx: ToolContext
) -> None:
    """Summary `WriteFile <rel>`, one filesystem.write requirement, no content anywhere."""
    prepared = WriteFile().prepare({"path": "docs/x.md", "content": "TOP-SECRET"}, ctx)
    canonical = str(workspace / "docs/x.md")
    assert prepared.summary == "WriteFile docs/x.md"
    [requirement] = prepared.requirements
    assert (requirement.kind, requirement.scope, requirement.match) == (
        "filesystem.write",
        canonical,
        canonical,
    )
    assert "TOP-SECRET" not in repr(prepared.requirements) + repr(prepared.candidates)
    assert [(c.kind, c.match) for c in prepared.candidates] == [("filesystem.write", canonical)]


def test_write_file_content_over_the_cap_is_refused_at_prepare(workspace: Path) -> None:
    """Content larger than the write cap fails Prepare on arguments.content."""
    ctx = make_context(workspace, limits=ToolLimits(write_max_bytes=4))
    assert invalid_field(WriteFile(), {"path": "f", "content": "12345"}, ctx) == (
        "arguments.content"
    )


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"path": "f.txt"}, "arguments.content"),
        ({"content": "x"}, "arguments.path"),
        ({"path": "f.txt", "content": 5}, "arguments.content"),
        ({"path": "f.txt", "content": "x", "mode": "0777"}, "arguments.mode"),
        ({"path": ".", "content": "x"}, "arguments.path"),
    ],
)
def test_write_file_rejects_bad_arguments_at_prepare(
    ctx: ToolContext, arguments: dict[str, object], field: str
) -> None:
    """Missing, mistyped and unknown fields, and the workspace root itself, fail Prepare."""
    assert invalid_field(WriteFile(), arguments, ctx) == field
