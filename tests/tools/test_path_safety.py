"""Path safety across the five file tools: containment at Prepare, symlinks swapped in
before Invoke, final-component symlinks, and Prepare having no effect."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.server.core.errors import InvalidArgument
from callgate.server.core.tool import Prepared, ToolContext, ToolPlugin
from callgate.server.tools.files.file_tools import EditFile, ReadFile, WriteFile
from callgate.server.tools.search.glob_tool import Glob
from callgate.server.tools.search.grep_tool import Grep
from tests.tools.drive import execute, invalid_field, make_context, tree_snapshot

pytestmark = pytest.mark.anyio

# (tool, the field holding its path, the other arguments it needs)
PATH_TOOLS: list[tuple[ToolPlugin, str, dict[str, object]]] = [
    (ReadFile(), "path", {}),
    (WriteFile(), "path", {"content": "pwned"}),
    (EditFile(), "path", {"old": "outside", "new": "pwned"}),
    (Glob(), "root", {"pattern": "*"}),
    (Grep(None), "path", {"pattern": "data"}),
]
TOOL_IDS = [tool.name for tool, _, _ in PATH_TOOLS]


@pytest.mark.parametrize(("tool", "field", "extra"), PATH_TOOLS, ids=TOOL_IDS)
@pytest.mark.parametrize(
    "escape",
    ["../outside/secret.txt", "sub/../../outside", "/etc/passwd", "{outside}", "escape/secret.txt"],
)
def test_paths_leaving_the_workspace_fail_at_prepare(
    workspace: Path,
    outside: Path,
    ctx: ToolContext,
    tool: ToolPlugin,
    field: str,
    extra: dict[str, object],
    escape: str,
) -> None:
    """`../`, absolute paths and symlinked directories that leave the workspace are refused."""
    (workspace / "sub").mkdir()
    (workspace / "escape").symlink_to(outside)
    raw = escape.format(outside=outside)
    before = tree_snapshot(outside)
    assert invalid_field(tool, {field: raw, **extra}, ctx) == f"arguments.{field}"
    assert tree_snapshot(outside) == before


async def test_an_absolute_path_inside_the_workspace_is_accepted(
    workspace: Path, ctx: ToolContext
) -> None:
    """An absolute path is fine when it resolves inside the workspace."""
    (workspace / "a.txt").write_text("inside\n")
    result = await execute(ReadFile(), {"path": str(workspace / "a.txt")}, ctx)
    assert result.text == "     1\tinside"


@pytest.mark.parametrize(
    ("tool", "extra"),
    [(ReadFile(), {}), (WriteFile(), {"content": "x"}), (EditFile(), {"old": "a", "new": "b"})],
    ids=["ReadFile", "WriteFile", "EditFile"],
)
def test_a_final_component_symlink_is_refused_at_prepare(
    workspace: Path, ctx: ToolContext, tool: ToolPlugin, extra: dict[str, object]
) -> None:
    """The file tools never act through a symlink named as the file, even one inside."""
    (workspace / "target.txt").write_text("a\n")
    (workspace / "link.txt").symlink_to("target.txt")
    assert invalid_field(tool, {"path": "link.txt", **extra}, ctx) == "arguments.path"


def _swap_for_symlink(path: Path, target: Path) -> None:
    """Replace `path` (file or directory) by a symlink to `target`, keeping the original."""
    path.rename(path.with_name(path.name + ".orig"))
    path.symlink_to(target)


@pytest.mark.parametrize(("tool", "field", "extra"), PATH_TOOLS, ids=TOOL_IDS)
async def test_a_directory_swapped_for_a_symlink_before_invoke_is_resolution_changed(
    workspace: Path,
    outside: Path,
    ctx: ToolContext,
    tool: ToolPlugin,
    field: str,
    extra: dict[str, object],
) -> None:
    """Invoke re-resolves the path: a directory now leading outside fails with no effect."""
    (workspace / "d").mkdir()
    (workspace / "d/secret.txt").write_text("inside data\n")
    (outside / "data").write_text("outside data\n")
    await execute(ReadFile(), {"path": "d/secret.txt"}, ctx)
    raw = "d" if field == "root" or tool.name == "Grep" else "d/secret.txt"
    prepared = tool.prepare({field: raw, **extra}, ctx)
    _swap_for_symlink(workspace / "d", outside)
    before = tree_snapshot(outside)
    result = await tool.invoke(prepared.artifact, ctx)
    assert (result.is_error, result.error_code) == (True, "resolution_changed")
    assert "outside data" not in result.text
    assert tree_snapshot(outside) == before


@pytest.mark.parametrize(
    ("tool", "extra"),
    [
        (ReadFile(), {}),
        (WriteFile(), {"content": "pwned"}),
        (EditFile(), {"old": "inside", "new": "pwned"}),
        (Grep(None), {"pattern": "data"}),
    ],
    ids=["ReadFile", "WriteFile", "EditFile", "Grep"],
)
@pytest.mark.parametrize("where", ["inside", "outside"])
async def test_a_file_swapped_for_a_symlink_before_invoke_is_resolution_changed(
    workspace: Path,
    outside: Path,
    ctx: ToolContext,
    tool: ToolPlugin,
    extra: dict[str, object],
    where: str,
) -> None:
    """A file replaced by a symlink (to a workspace file or outside) is neither read nor
    written through."""
    (workspace / "f.txt").write_text("inside data\n")
    (workspace / "other.txt").write_text("other data\n")
    await execute(ReadFile(), {"path": "f.txt"}, ctx)
    prepared = tool.prepare({"path": "f.txt", **extra}, ctx)
    target = outside / "secret.txt" if where == "outside" else workspace / "other.txt"
    _swap_for_symlink(workspace / "f.txt", target)
    before = {**tree_snapshot(outside), **tree_snapshot(workspace)}
    result = await tool.invoke(prepared.artifact, ctx)
    assert result.error_code == "resolution_changed"
    assert "data" not in result.text
    assert {**tree_snapshot(outside), **tree_snapshot(workspace)} == before


async def test_a_new_files_missing_parent_appearing_as_a_symlink_is_refused(
    workspace: Path, outside: Path, ctx: ToolContext
) -> None:
    """A parent directory that did not exist at Prepare and now leads outside: no effect."""
    prepared = WriteFile().prepare({"path": "new/x.txt", "content": "pwned"}, ctx)
    (workspace / "new").symlink_to(outside)
    result = await WriteFile().invoke(prepared.artifact, ctx)
    assert result.error_code == "resolution_changed"
    assert sorted(os.listdir(outside)) == ["secret.txt"]


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        (ReadFile(), {"path": "f.txt"}),
        (WriteFile(), {"path": "a/b/new.txt", "content": "x"}),
        (WriteFile(), {"path": "f.txt", "content": "x"}),
        (EditFile(), {"path": "f.txt", "old": "inside", "new": "x"}),
        (Glob(), {"pattern": "**", "root": "d"}),
        (Grep(None), {"pattern": "inside", "path": "d"}),
    ],
    ids=["ReadFile", "WriteFile-new", "WriteFile-existing", "EditFile", "Glob", "Grep"],
)
def test_prepare_has_no_effect(
    workspace: Path, ctx: ToolContext, tool: ToolPlugin, arguments: dict[str, object]
) -> None:
    """Prepare creates, changes and records nothing."""
    (workspace / "f.txt").write_text("inside\n")
    (workspace / "d").mkdir()
    before = tree_snapshot(workspace)
    tool.prepare(arguments, ctx)
    assert tree_snapshot(workspace) == before
    assert ctx.loop.observations == {}


def _prepare_or_refuse(
    tool: ToolPlugin, arguments: dict[str, object], ctx: ToolContext
) -> Prepared | None:
    """Prepare, or None when Prepare refused the arguments (and with no other error)."""
    try:
        return tool.prepare(arguments, ctx)
    except InvalidArgument as exc:
        if exc.reason != "ARGUMENTS_INVALID":
            raise
        return None


COMPONENTS = ["..", ".", "d", "f.txt", "in_link", "out_link", "file_link", "missing"]


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=6), absolute=st.booleans())
def test_no_generated_path_reaches_outside_or_through_a_final_symlink(
    parts: list[str], absolute: bool
) -> None:
    """Whatever a path is made of, Prepare either refuses it or yields a canonical path
    inside the workspace whose last component is not a symlink."""
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(os.path.realpath(scratch))
        workspace, outside = base / "ws", base / "outside"
        (workspace / "d").mkdir(parents=True)
        outside.mkdir()
        (workspace / "f.txt").write_text("x")
        (workspace / "d/f.txt").write_text("x")
        (workspace / "in_link").symlink_to("d")
        (workspace / "d/in_link").symlink_to(".")
        (workspace / "out_link").symlink_to(outside)
        (workspace / "d/out_link").symlink_to(outside)
        (workspace / "file_link").symlink_to("f.txt")
        (workspace / "d/file_link").symlink_to("f.txt")
        ctx = make_context(workspace)
        raw = "/".join(parts)
        if absolute:
            raw = f"{workspace}/{raw}"
        for tool, extra in ((ReadFile(), {}), (WriteFile(), {"content": "x"})):
            prepared = _prepare_or_refuse(tool, {"path": raw, **extra}, ctx)
            if prepared is None:
                continue
            [requirement] = prepared.requirements
            canonical = requirement.match
            assert canonical.startswith(str(workspace) + "/")
            assert not os.path.islink(canonical)
            assert os.path.realpath(canonical) == canonical
