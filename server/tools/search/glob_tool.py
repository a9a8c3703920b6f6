"""The Glob tool: workspace file paths by pattern (design section 5)."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import ClassVar

import anyio
import anyio.abc
import anyio.to_thread
from pydantic import Field

from ...core.errors import arguments_invalid
from ...core.models import RequirementKind, RuleCandidate, ToolResult
from ...core.paths import real_path
from ...core.tool import Arguments, Artifact, Prepared, Tool, ToolContext
from ...sandbox import fsaccess
from ...sandbox.fsaccess import PathChanged
from ..common import display, resolution_changed
from .patterns import compile_path_globs, expand_glob
from .walk import (
    NOISE_NAMES,
    SearchTimedOut,
    gone,
    join_path,
    kind_now,
    short_pattern,
    tree_requirement,
    walk_entries,
)

GLOB_TIMEOUT_SECONDS = 30.0


class GlobArguments(Arguments):
    pattern: str = Field(
        description=(
            "Path glob relative to root: * and ? within a name, ** for any directories, "
            "{a,b} alternatives; e.g. src/**/*.py or *.{md,txt}."
        )
    )
    root: str | None = Field(
        default=None, description="Directory to search, relative to the workspace root."
    )


class GlobArtifact(Artifact):
    root: str | None
    canonical_root: str
    pattern: str


def _literal_prefix(expansions: list[str]) -> list[str]:
    """The leading path components every expansion shares and that hold no wildcard."""
    split = [e.split("/")[:-1] for e in expansions]
    prefix: list[str] = []
    for parts in zip(*split, strict=False):
        first = parts[0]
        if any(part != first for part in parts) or any(c in first for c in "*?"):
            break
        prefix.append(first)
    return prefix


@dataclass(slots=True)
class _GlobFound:
    paths: list[str] = field(default_factory=list)
    more: bool = False


def _glob_walk(
    ctx: ToolContext, root: str, expansions: list[str], limit: int, deadline: float
) -> _GlobFound:
    workspace = ctx.workspace
    regex = compile_path_globs(expansions)
    assert regex is not None
    found = _GlobFound()
    prefix = _literal_prefix(expansions)
    start = root
    for part in prefix:
        start = join_path(start, part)
        if part in NOISE_NAMES or workspace.protected.is_protected(start):
            return found
    try:
        top_fd = fsaccess.open_directory(workspace.root, start)
    except (OSError, PathChanged):
        return found
    shown_prefix = "" if root == workspace.root else workspace.relative(root) + "/"
    lead = "/".join(prefix) + "/" if prefix else ""
    try:
        with contextlib.closing(
            walk_entries(top_fd, start, workspace.protected, deadline)
        ) as entries:
            for below, entry_path, _, entry in entries:
                rel = lead + below
                if not regex.match(rel) or not _globbable(entry, entry_path, ctx):
                    continue
                if len(found.paths) == limit:
                    found.more = True
                    break
                found.paths.append(shown_prefix + rel)
    finally:
        os.close(top_fd)
    return found


def _globbable(entry: os.DirEntry[str], entry_path: str, ctx: ToolContext) -> bool:
    """Regular files, and symlinks to regular files that stay inside the workspace and are
    not protected; everything else (directories, devices, dangling links) is not listed."""
    try:
        if entry.is_file(follow_symlinks=False):
            return True
        if not entry.is_symlink():
            return False
    except OSError:
        return False
    target = real_path(entry_path)
    return (
        target is not None
        and ctx.workspace.contains(target)
        and not ctx.workspace.protected.is_protected(target)
        and os.path.isfile(target)
    )


class Glob(Tool[GlobArguments, GlobArtifact]):
    name: ClassVar[str] = "Glob"
    answer_only: ClassVar[bool] = True
    description: ClassVar[str] = (
        "List files whose path (relative to root, default the workspace root) matches a "
        "glob: * and ? within a name, ** across directories, {a,b} alternatives. Paths come "
        "sorted and workspace-relative, at most 500. Noise directories (.git, node_modules, "
        "__pycache__, .venv, caches) are skipped and directory symlinks are not followed."
    )
    arguments: ClassVar[type[Arguments]] = GlobArguments
    artifact: ClassVar[type[Artifact]] = GlobArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = (RequirementKind.FILESYSTEM_READ.value,)

    def __init__(self, timeout_seconds: float = GLOB_TIMEOUT_SECONDS) -> None:
        self.timeout_seconds = timeout_seconds

    def prepare_args(self, args: GlobArguments, ctx: ToolContext) -> Prepared:
        expand_glob(args.pattern, "pattern")
        if args.root is None:
            canonical = ctx.workspace.root
        else:
            canonical = ctx.workspace.resolve(args.root, "root")
            if not os.path.isdir(canonical):
                raise arguments_invalid("root", "the root is not a directory")
        requirement = tree_requirement(canonical)
        rel = display(ctx.workspace.relative(canonical))
        return Prepared(
            summary=f"Glob {short_pattern(args.pattern)} in {rel}",
            requirements=(requirement,),
            artifact=GlobArtifact(root=args.root, canonical_root=canonical, pattern=args.pattern),
            candidates=(
                RuleCandidate(requirement.kind, requirement.match, requirement.description),
            ),
        )

    async def run(self, artifact: GlobArtifact, ctx: ToolContext) -> ToolResult:
        root = artifact.canonical_root
        rel_root = display(ctx.workspace.relative(root))
        if artifact.root is not None:
            changed = resolution_changed(ctx, artifact.root, root)
            if changed is not None:
                return changed
        if ctx.workspace.protected.is_protected(root):
            return ToolResult.error("read_denied", f"{rel_root} is protected and never listed.")
        kind = kind_now(root)
        if kind == "missing":
            return gone(rel_root)
        if kind != "directory":
            return ToolResult.error("not_a_directory", f"{rel_root} is no longer a directory.")
        expansions = expand_glob(artifact.pattern, "pattern")
        limit = ctx.limits.glob_max_results
        deadline = time.monotonic() + self.timeout_seconds
        try:
            found = await anyio.to_thread.run_sync(
                _glob_walk, ctx, root, expansions, limit, deadline
            )
        except SearchTimedOut:
            return ToolResult.error(
                "timed_out",
                f"Glob did not finish within {self.timeout_seconds:g} seconds; "
                "narrow the pattern or root.",
            )
        if not found.paths:
            return ToolResult(text=f"no files match {display(artifact.pattern)} in {rel_root}")
        lines = [display(path) for path in found.paths]
        if found.more:
            lines.append(
                f"[showing the first {limit} paths; more match: narrow the pattern or root]"
            )
        return ToolResult(text="\n".join(lines))
