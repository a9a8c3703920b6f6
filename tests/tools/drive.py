"""Driving a tool directly: a ToolContext over a real workspace, Prepare then Invoke."""

from __future__ import annotations

from pathlib import Path

import pytest

from callgate.server.core.errors import InvalidArgument
from callgate.server.core.models import ToolResult
from callgate.server.core.paths import DEFAULT_DENIED_GLOBS, ProtectedPaths, Workspace
from callgate.server.core.resources import SessionResources
from callgate.server.core.tool import LoopState, ToolContext, ToolLimits, ToolPlugin


def make_context(
    root: Path, *, loop: LoopState | None = None, limits: ToolLimits | None = None
) -> ToolContext:
    return ToolContext(
        session_id="s",
        loop=loop or LoopState("l"),
        workspace=Workspace(str(root), ProtectedPaths(DEFAULT_DENIED_GLOBS)),
        limits=limits or ToolLimits(),
        resources=SessionResources("s", None, None),
    )


async def execute(tool: ToolPlugin, raw: dict[str, object], ctx: ToolContext) -> ToolResult:
    """Prepare and invoke one call, as the lifecycle does once the gate approved it."""
    prepared = tool.prepare(raw, ctx)
    return await tool.invoke(prepared.artifact, ctx)


def invalid_field(tool: ToolPlugin, raw: dict[str, object], ctx: ToolContext) -> str:
    """Prepare must fail with ARGUMENTS_INVALID; return the field it names."""
    with pytest.raises(InvalidArgument) as raised:
        tool.prepare(raw, ctx)
    assert raised.value.reason == "ARGUMENTS_INVALID"
    return raised.value.violations[0].field


def tree_snapshot(root: Path) -> dict[str, bytes | str]:
    """Every path below root with its content (files) or link target (symlinks)."""
    snapshot: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            snapshot[rel] = "-> " + str(path.readlink())
        elif path.is_file():
            snapshot[rel] = path.read_bytes()
        else:
            snapshot[rel] = "dir"
    return snapshot
