"""Value types of the domain: states, requirements, decisions, denials and tool results."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime


class State(enum.StrEnum):
    """Lifecycle state of a tool call (design section 2)."""

    PREPARED = "prepared"
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    DENIED = "denied"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({State.DENIED, State.SUCCEEDED, State.FAILED, State.CANCELLED, State.EXPIRED})


class DenialKind(enum.StrEnum):
    OUT_OF_SCOPE = "out_of_scope"
    REFUSED = "refused"
    APPROVAL_REQUIRED = "approval_required"
    APPROVAL_TIMEOUT = "approval_timeout"
    APPROVER_DENIED = "approver_denied"


class SandboxMode(enum.StrEnum):
    NONE = "none"
    BWRAP = "bwrap"


class RequirementKind(enum.StrEnum):
    """The capability kinds the gate knows. Any other kind string is denied."""

    FILESYSTEM_READ = "filesystem.read"
    FILESYSTEM_WRITE = "filesystem.write"
    COMMAND_EXECUTE = "command.execute"
    NETWORK = "network"
    CONTEXT_LOAD = "context.load"
    PROCESS_INPUT = "process.input"


class Access(enum.StrEnum):
    """What an access default or a gate evaluation says of a requirement."""

    ALLOW = "allow"
    GATED = "gated"
    DENY = "deny"


TREE_PREFIX = "tree:"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One capability a call needs. `kind` is a plain string so unknown kinds reach the gate
    (which denies them) instead of failing somewhere less visible.

    `human_only` marks a requirement no policy may meet: neither an Allow access default nor
    an allow rule approves it, and no rule is ever offered or saved for it (a write to a file
    that makes programs run code, such as `.git/config`). Only tools set it, from the
    canonical path; the gate also derives it on its own, so a tool that forgets cannot
    weaken it."""

    kind: str
    scope: str
    match: str
    description: str
    human_only: bool = False


@dataclass(frozen=True, slots=True)
class RuleCandidate:
    """An allow rule an "approve for session/always" decision would save."""

    kind: str
    match: str
    description: str


@dataclass(frozen=True, slots=True)
class Decision:
    decided_by: str
    rule_ids: tuple[str, ...]
    decide_time: datetime
    reason: str
    # The call was allowed by read-only command families only (no human saw this exact call):
    # its command runs in the read-only sandbox (gate.Verdict.read_only).
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class Denial:
    kind: DenialKind
    description: str


@dataclass(frozen=True, slots=True)
class Preview:
    """What a call would do, as the approver sees it (core/preview.py): bounded, escaped and
    covered by the digest."""

    kind: str
    text: str
    omitted_bytes: int = 0


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool produced. A tool-level failure is a result with is_error, not an exception."""

    text: str
    is_error: bool = False
    error_code: str = ""
    json: str = ""
    exit_code: int | None = None
    omitted_bytes: int = 0

    @classmethod
    def error(cls, code: str, text: str, *, omitted_bytes: int = 0) -> ToolResult:
        return cls(text=text, is_error=True, error_code=code, omitted_bytes=omitted_bytes)


@dataclass(frozen=True, slots=True)
class ToolAnnotations:
    """What a tool's calls do, for clients that show or sort tools (MCP's tool annotations).
    Hints only: the gate decides on each call's requirements, never on these."""

    read_only: bool = False  # changes nothing outside the server
    destructive: bool = False  # may delete or overwrite (meaningful when not read-only)
    idempotent: bool = False  # the same call twice has no further effect
    open_world: bool = False  # reaches beyond the workspace (the network, other programs)


@dataclass(frozen=True, slots=True)
class ToolInfo:
    name: str
    description: str
    input_schema_json: str
    requirement_kinds: tuple[str, ...] = field(default_factory=tuple)
    annotations: ToolAnnotations = field(default_factory=ToolAnnotations)
