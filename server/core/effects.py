"""What a dry run found a call would change (issue: approve the effect, not the text).

A tool that can dry-run its calls (`DryRunnable`: Bash) runs one in a stricter sandbox whose
writes land in an overlay the server owns, and reports a `DryRunOutcome`: the `ChangeSet` an
approver is shown, the bytes the effect digest covers, and an opaque plan the tool applies
later, if an approver chose "apply exactly this", without running the command again.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from .models import ToolResult
from .tool import Artifact, ToolContext

__all__ = [
    "ChangeSet",
    "DryRunOutcome",
    "DryRunSettings",
    "DryRunnable",
    "FileChange",
    "effect_digest",
]


@dataclass(frozen=True, slots=True)
class FileChange:
    """One path the call would change, relative to the workspace."""

    path: str
    # "created", "modified", "deleted", "mode", "directory" (created), "symlink"
    kind: str
    # A unified diff (text files), or a line saying what changes (binary content, a mode, a
    # symlink's target); escaped and bounded when shown.
    detail: str = ""
    mode: int | None = None  # the permission bits after the change
    size: int = 0  # the new content's size in bytes


@dataclass(frozen=True, slots=True)
class ChangeSet:
    """What an approver sees of a dry run (never the agent, before a decision)."""

    changes: tuple[FileChange, ...]
    exit_code: int | None
    output_head: str
    output_tail: str
    omitted_output_bytes: int
    # Why this change set cannot be applied (device nodes, hard links, over the size cap, a
    # symlink out of the workspace...): only approving the command remains. "" when it can.
    unrepresentable: str = ""
    # Why the dry run did not complete (timed out, could not start); "" when it ran.
    failure: str = ""
    # Changed paths left out of `changes` by the bound on what is shown.
    omitted_changes: int = 0
    effect_digest: str = ""
    requested_by: str = ""
    time: datetime | None = None


@dataclass(frozen=True, slots=True)
class DryRunOutcome:
    """A tool's report of one dry run: what to show, what the effect digest covers, and the
    plan the tool applies (None when nothing can be applied)."""

    change_set: ChangeSet
    covered: bytes
    plan: object | None
    # What the plan holds in memory (the files' new content, the output), in bytes.
    plan_bytes: int = 0


@dataclass(frozen=True, slots=True)
class DryRunSettings:
    """`[bash] dry_run_*`: how long a dry run may take, and how much it may write."""

    timeout_seconds: float = 30.0
    max_bytes: int = 64 << 20
    max_paths: int = 10_000


@runtime_checkable
class DryRunnable(Protocol):
    """A tool whose calls can be dry-run and whose recorded effect can be applied."""

    def dry_run_refusal(self, artifact: Artifact) -> str:
        """Why this call cannot be dry-run ("" when it can)."""
        ...

    async def dry_run(
        self, artifact: Artifact, ctx: ToolContext, settings: DryRunSettings
    ) -> DryRunOutcome: ...

    async def apply(self, artifact: Artifact, plan: object, ctx: ToolContext) -> ToolResult:
        """Apply a recorded plan: all of it, or nothing when the workspace changed since."""
        ...


def effect_digest(secret: bytes, call_digest: str, covered: bytes) -> str:
    """The effect digest: keyed with the server's secret, so nobody outside the server can
    compute one for a guess; bound to the call's own digest."""
    mac = hmac.new(secret, call_digest.encode() + b"\0", hashlib.sha256)
    mac.update(covered)
    return mac.hexdigest()
