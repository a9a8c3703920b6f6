"""What every tool family shares: text made safe to show, the result for a path that no longer
resolves as approved, the result for an OS failure, and when a file is read inline."""

from __future__ import annotations

import hashlib

from ..core.errors import InvalidArgument
from ..core.models import ToolResult
from ..core.tool import ToolContext

# Reading this much or less is cheaper inline than a hand-off to a worker thread.
INLINE_READ_BYTES = 256 << 10


def display(text: str) -> str:
    """`text` made safe for a one-line summary or result: control characters escaped."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def resolution_changed(ctx: ToolContext, raw: str, canonical: str) -> ToolResult | None:
    """Re-resolve the path the agent wrote; an error result when it no longer leads to the
    canonical path that was approved (a symlink swapped in since Prepare, say)."""
    try:
        now = ctx.workspace.resolve(raw, "path")
    except InvalidArgument:
        now = None
    if now == canonical:
        return None
    return changed_result(ctx, canonical)


def changed_result(ctx: ToolContext, canonical: str) -> ToolResult:
    rel = display(ctx.workspace.relative(canonical))
    return ToolResult.error(
        "resolution_changed",
        f"{rel} no longer resolves to the path that was approved; nothing was done, "
        "prepare the call again.",
    )


def os_failure(exc: OSError, rel: str, action: str) -> ToolResult:
    """A tool-level error for an OS failure, without host paths (strerror has none)."""
    if isinstance(exc, PermissionError):
        return ToolResult.error(
            "permission_denied", f"The server is not permitted to {action} {display(rel)}."
        )
    reason = exc.strerror or "input/output error"
    return ToolResult.error("io_error", f"Could not {action} {display(rel)}: {reason}.")
