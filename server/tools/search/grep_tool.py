"""The Grep tool: lines of workspace files by regex (design section 5)."""

from __future__ import annotations

import functools
import os
import time
from dataclasses import replace
from typing import ClassVar

import anyio.to_thread

from ...core.errors import arguments_invalid
from ...core.models import Requirement, RequirementKind, RuleCandidate, ToolResult
from ...core.tool import Arguments, Artifact, Prepared, Tool, ToolContext
from ...sandbox.seccomp import SeccompProgram
from ...sandbox.tree_scan import ScanOverBudget
from ..common import changed_result, display, resolution_changed
from ..workspace_scan import link_guard, session_scanner
from .grep_artifact import GrepArguments, GrepArtifact
from .grep_engines import GrepPlan, RipgrepConfinement, search_in_python, search_with_ripgrep
from .grep_scan import GrepOutput, grep_result
from .patterns import GrepGlob, PatternUnsupported, compile_grep_regex
from .walk import SearchTimedOut, gone, kind_now, short_pattern, tree_requirement


class Grep(Tool[GrepArguments, GrepArtifact]):
    name: ClassVar[str] = "Grep"
    answer_only: ClassVar[bool] = True
    description: ClassVar[str] = (
        "Search file contents with a regular expression, line by line. Output lines are "
        "`path:line:text` (context lines `path-line-text`), sorted by path then line, at "
        "most 200 matches and 64 KiB. path may be a directory (default the workspace root) "
        "or one file; glob narrows the files (*.py, *.{ts,tsx}, src/**/*.go). Lookaround and "
        "backreferences are not supported; binary and non-UTF-8 files are skipped."
    )
    arguments: ClassVar[type[Arguments]] = GrepArguments
    artifact: ClassVar[type[Artifact]] = GrepArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = (RequirementKind.FILESYSTEM_READ.value,)

    def __init__(
        self,
        rg_path: str | None,
        bwrap_path: str | None = None,
        seccomp: SeccompProgram | None = None,
    ) -> None:
        """`rg_path` is the ripgrep executable and `bwrap_path` bubblewrap, which confines it
        (under the commands' `seccomp` filter); without both Grep searches in Python (same
        output, slower): ripgrep opens paths by name, so it never runs with the server's
        authority over a workspace an agent can change."""
        self.rg_path = rg_path if bwrap_path is not None else None
        self.confinement = (
            RipgrepConfinement(rg_path, bwrap_path, seccomp)
            if rg_path is not None and bwrap_path is not None
            else None
        )

    def prepare_args(self, args: GrepArguments, ctx: ToolContext) -> Prepared:
        try:
            compile_grep_regex(args.pattern, args.ignore_case)
        except PatternUnsupported as exc:
            raise arguments_invalid("pattern", str(exc)) from None
        if args.path is None:
            canonical = ctx.workspace.root
        else:
            canonical = ctx.workspace.resolve(args.path, "path")
        if os.path.isdir(canonical):
            is_directory = True
        elif os.path.isfile(canonical):
            is_directory = False
        else:
            raise arguments_invalid("path", "the path is neither a directory nor a file")
        if args.glob is not None:
            if not is_directory:
                raise arguments_invalid("glob", "glob applies only when path is a directory")
            GrepGlob.parse(args.glob)
        if is_directory:
            requirement = tree_requirement(canonical)
        else:
            requirement = Requirement(
                kind=RequirementKind.FILESYSTEM_READ.value,
                scope=canonical,
                match=canonical,
                description=f"read {display(canonical)}",
            )
        rel = display(ctx.workspace.relative(canonical))
        return Prepared(
            summary=f"Grep {short_pattern(args.pattern)} in {rel}",
            requirements=(requirement,),
            artifact=GrepArtifact(
                path=args.path,
                canonical=canonical,
                is_directory=is_directory,
                pattern=args.pattern,
                glob=args.glob,
                ignore_case=args.ignore_case,
                context_lines=args.context_lines,
                max_matches=min(args.max_matches, ctx.limits.grep_max_matches),
            ),
            candidates=(
                RuleCandidate(requirement.kind, requirement.match, requirement.description),
            ),
        )

    async def run(self, artifact: GrepArtifact, ctx: ToolContext) -> ToolResult:
        target = artifact.canonical
        workspace = ctx.workspace
        rel = workspace.relative(target)
        if artifact.path is not None:
            changed = resolution_changed(ctx, artifact.path, target)
            if changed is not None:
                return changed
        if workspace.protected.is_protected(target):
            return ToolResult.error("read_denied", f"{display(rel)} is protected and never read.")
        kind = kind_now(target)
        if kind == "missing":
            return gone(rel)
        if (kind == "directory") != artifact.is_directory:
            return changed_result(ctx, target)
        timeout = ctx.limits.grep_timeout_seconds
        if artifact.is_directory:
            shown_prefix = "" if target == workspace.root else rel + "/"
        else:
            shown_prefix = rel
        plan = GrepPlan(
            ctx=ctx,
            target=target,
            is_directory=artifact.is_directory,
            shown_prefix=shown_prefix,
            glob=GrepGlob.parse(artifact.glob) if artifact.glob is not None else None,
            out=GrepOutput(
                max_matches=artifact.max_matches,
                max_bytes=ctx.limits.grep_max_bytes,
                context=artifact.context_lines,
            ),
            deadline=time.monotonic() + timeout,
            links=link_guard(ctx),
        )
        try:
            failure = None
            if self.confinement is None:
                await search_in_python(artifact, plan)
            else:
                failure = await self._search_confined(self.confinement, artifact, plan)
        except SearchTimedOut:
            return ToolResult.error(
                "timed_out",
                f"Grep did not finish within {timeout:g} seconds; "
                "narrow the pattern, path or glob.",
            )
        if failure is not None:
            return failure
        return grep_result(plan.out, rel)

    async def _search_confined(
        self, confinement: RipgrepConfinement, artifact: GrepArtifact, plan: GrepPlan
    ) -> ToolResult | None:
        """ripgrep in a view of the searched tree whose secrets, and other names of them, are
        masked: one walk of the workspace finds both (and answers the hard-link checks of the
        server's own reads)."""
        workspace = plan.ctx.workspace
        seconds = plan.ctx.limits.scan_seconds
        try:
            scanner = session_scanner(plan.ctx)
            exposure = await anyio.to_thread.run_sync(
                functools.partial(scanner.scan, workspace.root, seconds=seconds)
            )
        except ScanOverBudget:
            return ToolResult.error(
                "scan_timed_out",
                f"The workspace could not be checked for secrets within {seconds:g} seconds, so "
                "nothing was searched; use a smaller workspace or raise tools.scan_seconds.",
            )
        confined = replace(plan, links=link_guard(plan.ctx, exposure))
        return await search_with_ripgrep(confinement, artifact, confined, exposure.masked)
