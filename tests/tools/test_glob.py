"""Glob: pattern semantics, order, caps, noise, symlinks, protected paths and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from callgate.server.core.tool import ToolContext, ToolLimits
from callgate.server.tools.search.glob_tool import Glob
from tests.tools.drive import execute, invalid_field, make_context

pytestmark = pytest.mark.anyio


def make_files(root: Path, *paths: str) -> None:
    for rel in paths:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel + "\n")


async def glob_lines(ctx: ToolContext, **arguments: object) -> list[str]:
    result = await execute(Glob(), dict(arguments), ctx)
    assert not result.is_error, result.text
    return result.text.split("\n")


async def test_glob_star_star_spans_directories_and_star_stays_in_one(
    workspace: Path, ctx: ToolContext
) -> None:
    """`**/*.py` finds Python files at any depth; `*.py` only at the root."""
    make_files(workspace, "top.py", "src/a.py", "src/deep/er/b.py", "src/c.txt")
    assert await glob_lines(ctx, pattern="**/*.py") == ["src/a.py", "src/deep/er/b.py", "top.py"]
    assert await glob_lines(ctx, pattern="*.py") == ["top.py"]
    assert await glob_lines(ctx, pattern="src/**") == [
        "src/a.py",
        "src/c.txt",
        "src/deep/er/b.py",
    ]


async def test_glob_orders_paths_component_by_component(workspace: Path, ctx: ToolContext) -> None:
    """Paths sort by their components, so a directory's files stay together."""
    make_files(workspace, "a-c.txt", "a/b.txt", "a b.txt", "B.txt")
    assert await glob_lines(ctx, pattern="**") == ["B.txt", "a/b.txt", "a b.txt", "a-c.txt"]


async def test_glob_alternatives_and_question_marks(workspace: Path, ctx: ToolContext) -> None:
    """`{a,b}` picks alternatives and `?` matches one character of a name."""
    make_files(workspace, "x.md", "y.txt", "z.rst", "ab.md", "a/q.md")
    assert await glob_lines(ctx, pattern="*.{md,txt}") == ["ab.md", "x.md", "y.txt"]
    assert await glob_lines(ctx, pattern="?.md") == ["x.md"]
    assert await glob_lines(ctx, pattern="{a/*,?}.md") == ["a/q.md", "x.md"]


async def test_glob_under_a_root_lists_workspace_relative_paths(
    workspace: Path, ctx: ToolContext
) -> None:
    """With root, the pattern is relative to it and results stay workspace-relative."""
    make_files(workspace, "pkg/src/m.py", "other/m.py")
    prepared = Glob().prepare({"pattern": "**/*.py", "root": "pkg"}, ctx)
    assert prepared.summary == "Glob **/*.py in pkg"
    [requirement] = prepared.requirements
    tree = "tree:" + str(workspace / "pkg")
    assert (requirement.kind, requirement.scope, requirement.match) == (
        "filesystem.read",
        tree,
        tree,
    )
    assert [(c.kind, c.match) for c in prepared.candidates] == [("filesystem.read", tree)]
    assert await glob_lines(ctx, pattern="**/*.py", root="pkg") == ["pkg/src/m.py"]


async def test_glob_skips_noise_directories(workspace: Path, ctx: ToolContext) -> None:
    """.git, node_modules, __pycache__, .venv and caches are never walked."""
    make_files(
        workspace,
        "app.py",
        ".git/hooks/x.py",
        "node_modules/p/i.py",
        "src/__pycache__/m.py",
        ".venv/lib/s.py",
        ".mypy_cache/c.py",
    )
    assert await glob_lines(ctx, pattern="**/*.py") == ["app.py"]
    assert await glob_lines(ctx, pattern="node_modules/**") == [
        "no files match node_modules/** in ."
    ]


async def test_glob_never_lists_protected_paths(workspace: Path, ctx: ToolContext) -> None:
    """.env files, keys and .ssh contents are omitted, also when reached through a symlink."""
    make_files(workspace, "visible.txt", ".env", "sub/.env.local", ".ssh/id_rsa", "tls/app.key")
    (workspace / "alias.txt").symlink_to(".env")
    assert await glob_lines(ctx, pattern="**") == ["visible.txt"]
    assert await glob_lines(ctx, pattern="**/.env*") == ["no files match **/.env* in ."]


async def test_glob_does_not_follow_directory_symlinks(
    workspace: Path, ctx: ToolContext, outside: Path
) -> None:
    """A symlink to a directory (inside or outside) is not walked."""
    make_files(workspace, "real/f.txt")
    (workspace / "loop").symlink_to("real")
    (workspace / "out").symlink_to(outside)
    assert await glob_lines(ctx, pattern="**") == ["real/f.txt"]


async def test_glob_lists_file_symlinks_that_stay_inside(
    workspace: Path, ctx: ToolContext, outside: Path
) -> None:
    """A symlink to a workspace file is listed; one leading outside or dangling is not."""
    make_files(workspace, "real.txt")
    (workspace / "link.txt").symlink_to("real.txt")
    (workspace / "escape.txt").symlink_to(outside / "secret.txt")
    (workspace / "dangling.txt").symlink_to("missing.txt")
    assert await glob_lines(ctx, pattern="*.txt") == ["link.txt", "real.txt"]


async def test_glob_caps_results_with_a_notice(workspace: Path) -> None:
    """Past the cap the first paths in order are shown, then a notice."""
    ctx = make_context(workspace, limits=ToolLimits(glob_max_results=3))
    make_files(workspace, *(f"f{n}.txt" for n in range(5)))
    lines = await glob_lines(ctx, pattern="*.txt")
    assert lines[:3] == ["f0.txt", "f1.txt", "f2.txt"]
    assert len(lines) == 4
    assert "first 3" in lines[3]


async def test_glob_without_matches_says_so(workspace: Path, ctx: ToolContext) -> None:
    """No match is a successful, explicit answer."""
    result = await execute(Glob(), {"pattern": "*.nothing"}, ctx)
    assert (result.is_error, result.text) == (False, "no files match *.nothing in .")


async def test_glob_that_runs_out_of_time_is_timed_out(workspace: Path, ctx: ToolContext) -> None:
    """A walk past its deadline stops with timed_out."""
    make_files(workspace, "a.txt")
    result = await execute(Glob(timeout_seconds=0), {"pattern": "**"}, ctx)
    assert result.error_code == "timed_out"


async def test_glob_of_a_protected_root_is_read_denied_at_run(
    workspace: Path, ctx: ToolContext
) -> None:
    """A protected directory is never listed, even past the gate."""
    make_files(workspace, ".ssh/config")
    result = await execute(Glob(), {"pattern": "*", "root": ".ssh"}, ctx)
    assert result.error_code == "read_denied"
    assert "config" not in result.text


@pytest.mark.parametrize(
    "pattern",
    [
        "",
        "/etc/*",
        "../*",
        "a/../b",
        "./a",
        "[ab].py",
        "a\\*",
        "!x",
        "a**",
        "**b/c",
        "a//b",
        "a/",
        "{a",
        "a}",
        "{a,{b}}",
        "{a,b}" * 7,
        "a\nb",
    ],
)
def test_glob_rejects_patterns_outside_its_dialect(ctx: ToolContext, pattern: str) -> None:
    """Absolute, escaping, bracketed, negated and malformed patterns fail on arguments.pattern."""
    assert invalid_field(Glob(), {"pattern": pattern}, ctx) == "arguments.pattern"


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"pattern": "*", "root": "missing"}, "arguments.root"),
        ({"pattern": "*", "root": "file.txt"}, "arguments.root"),
        ({"pattern": "*", "root": 3}, "arguments.root"),
        ({"pattern": 3}, "arguments.pattern"),
        ({}, "arguments.pattern"),
        ({"pattern": "*", "path": "."}, "arguments.path"),
    ],
)
def test_glob_rejects_bad_arguments_at_prepare(
    workspace: Path, ctx: ToolContext, arguments: dict[str, object], field: str
) -> None:
    """The root must be an existing directory; wrong types and unknown fields fail."""
    make_files(workspace, "file.txt")
    assert invalid_field(Glob(), arguments, ctx) == field


async def test_glob_of_a_root_removed_or_replaced_since_prepare_fails(
    workspace: Path, ctx: ToolContext
) -> None:
    """A root deleted after Prepare is file_not_found; one replaced by a file not_a_directory."""
    make_files(workspace, "d/a.txt", "e/b.txt")
    gone = Glob().prepare({"pattern": "*", "root": "d"}, ctx)
    replaced = Glob().prepare({"pattern": "*", "root": "e"}, ctx)
    (workspace / "d/a.txt").unlink()
    (workspace / "d").rmdir()
    (workspace / "e/b.txt").unlink()
    (workspace / "e").rmdir()
    (workspace / "e").write_text("now a file")
    assert (await Glob().invoke(gone.artifact, ctx)).error_code == "file_not_found"
    assert (await Glob().invoke(replaced.artifact, ctx)).error_code == "not_a_directory"
