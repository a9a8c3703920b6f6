"""The session's tree scanner (`sandbox.tree_scan.TreeScanner`): one per session, so that the
walk for secrets before each command and confined Grep lists only what changed since the last."""

from __future__ import annotations

from ..core.resources import ResourceKey
from ..core.tool import ToolContext
from ..sandbox.tree_scan import LinkGuard, TreeExposure, TreeScanner

TREE_SCANNER: ResourceKey[TreeScanner] = ResourceKey("tree_scanner")


def session_scanner(ctx: ToolContext) -> TreeScanner:
    return ctx.resources.get(TREE_SCANNER, lambda: TreeScanner(ctx.workspace.protected))


def link_guard(ctx: ToolContext, exposure: TreeExposure | None = None) -> LinkGuard:
    """A hard-link guard over the session's workspace (see `LinkGuard`)."""
    return LinkGuard(
        session_scanner(ctx), ctx.workspace.root, ctx.limits.scan_seconds, exposure=exposure
    )
