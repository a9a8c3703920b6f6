"""The client's view of callgate resources: frozen pydantic models built from the wire messages."""

from __future__ import annotations

import copy
import enum
import json as jsonlib
import warnings
from datetime import datetime

from pydantic import BaseModel, ConfigDict, JsonValue

__all__ = [
    "Decision",
    "DecisionKind",
    "Denial",
    "DenialKind",
    "InvokeResult",
    "PendingApproval",
    "PendingQuestion",
    "Requirement",
    "Resolved",
    "Rule",
    "RuleCandidate",
    "RuleEffect",
    "SandboxMode",
    "Session",
    "State",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class State(enum.StrEnum):
    """Where a tool call is in its lifecycle (proto `State` without the `STATE_` prefix).

    `UNSPECIFIED` stands for the proto zero value and for any value this client does not
    know yet (a newer server), so that reading a call never fails on a new state.
    """

    UNSPECIFIED = "unspecified"
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
        """True for the states a call never leaves."""
        return self in _TERMINAL_STATES


_TERMINAL_STATES = frozenset(
    {State.DENIED, State.SUCCEEDED, State.FAILED, State.CANCELLED, State.EXPIRED}
)


class DenialKind(enum.StrEnum):
    """Why a call was denied (proto `DenialKind` without the `DENIAL_KIND_` prefix)."""

    UNSPECIFIED = "unspecified"
    OUT_OF_SCOPE = "out_of_scope"
    REFUSED = "refused"
    APPROVAL_REQUIRED = "approval_required"
    APPROVAL_TIMEOUT = "approval_timeout"
    APPROVER_DENIED = "approver_denied"


class SandboxMode(enum.StrEnum):
    """How a session's commands are confined (proto `SandboxMode` without its prefix)."""

    UNSPECIFIED = "unspecified"
    NONE = "none"
    BWRAP = "bwrap"


class Session(_Frozen):
    """One agent's working context on the server."""

    session_id: str
    workspace: str
    default_loop_id: str
    sandbox_mode: SandboxMode
    create_time: datetime | None
    labels: dict[str, str]
    sandbox_warning: str
    # How each command is bounded: "cgroup-v2", "cgroup-v1", "rlimit" or "none".
    sandbox_limits: str = ""
    # The name it was opened with (reopened by it), or "".
    name: str = ""
    last_used_time: datetime | None = None
    # Whether approvers may dry-run its commands: "on_request", "gated", "off" or
    # "unavailable: <why>".
    dry_run: str = ""


class Requirement(_Frozen):
    """One capability a call needs; what the gate evaluates."""

    kind: str
    scope: str
    match: str
    description: str
    # Only a human may approve it, each time: decide the call with APPROVE_ONCE or DENY.
    human_only: bool = False


class Decision(_Frozen):
    """Who or what approved a call (`decided_by` is "policy" or an approver's name)."""

    decided_by: str
    rule_ids: tuple[str, ...]
    decide_time: datetime | None
    reason: str
    # Allowed only by read-only command families: the command ran in the read-only sandbox.
    read_only: bool = False


class Denial(_Frozen):
    """Why a call was denied."""

    kind: DenialKind
    description: str


# `json` is the wire name of the structured result and the name callers expect; it
# deliberately replaces pydantic's deprecated `BaseModel.json()` on this model only.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "json"', category=UserWarning)

    class ToolResult(_Frozen):
        """What a tool produced; `is_error` means the tool ran and failed (not an RPC error)."""

        is_error: bool
        error_code: str
        text: str
        json: str  # type: ignore[assignment]  # the proto field's name; see the comment above
        exit_code: int | None
        omitted_bytes: int

        def parsed_json(self) -> JsonValue:
            """The structured result decoded, or None when the tool returned none."""
            if not self.json:
                return None
            value: JsonValue = jsonlib.loads(self.json)
            return value


class Preview(_Frozen):
    """What a call would do, as its approver is shown it (ToolCall.preview): bounded and
    escaped by the server, covered by the digest. `kind` is "diff", "content", "command",
    "request" or "skill"; `text` is lines each ending in a newline."""

    kind: str
    text: str
    omitted_bytes: int


class ToolCall(_Frozen):
    """One use of a tool, identified by the execution ID minted at Prepare."""

    execution_id: str
    session_id: str
    loop_id: str
    tool_name: str
    state: State
    summary: str
    requirements: tuple[Requirement, ...]
    digest: str
    decision: Decision | None
    denial: Denial | None
    result: ToolResult | None
    create_time: datetime | None
    update_time: datetime | None
    expire_time: datetime | None
    # The batch (one model turn) the call was prepared in; empty when it stands alone.
    batch_id: str = ""
    # Set while the call is prepared, awaiting approval or approved; None once it ended.
    preview: Preview | None = None


class InvokeResult(_Frozen):
    """The answer to Invoke: the call in its final state and its result."""

    call: ToolCall
    result: ToolResult


class ToolAnnotations(_Frozen):
    """What a tool's calls do, as its definition declares it (MCP's tool annotations). Hints
    only: the server's gate decides every call on its requirements."""

    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = False


class ToolSpec(_Frozen):
    """A tool the session offers, with the JSON Schema of its arguments and its annotations."""

    name: str
    description: str
    input_schema: dict[str, JsonValue]
    requirement_kinds: tuple[str, ...]
    annotations: ToolAnnotations = ToolAnnotations()

    def to_openai(self) -> dict[str, JsonValue]:
        """The tool in OpenAI's function-calling format (an entry of `tools`)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.input_schema),
            },
        }

    def to_anthropic(self) -> dict[str, JsonValue]:
        """The tool in Anthropic's tool-use format (an entry of `tools`)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": copy.deepcopy(self.input_schema),
        }


class DecisionKind(enum.StrEnum):
    """What an approver decides (proto `DecisionKind` without the `DECISION_KIND_` prefix)."""

    APPROVE_ONCE = "approve_once"
    APPROVE_FOR_SESSION = "approve_for_session"
    APPROVE_ALWAYS = "approve_always"
    DENY = "deny"
    # Apply exactly the change set of the call's last dry run (give its effect digest).
    APPLY_CHANGES = "apply_changes"


class RuleEffect(enum.StrEnum):
    """Whether a rule allows or denies (proto `RuleEffect` without the `RULE_EFFECT_` prefix)."""

    UNSPECIFIED = "unspecified"
    ALLOW = "allow"
    DENY = "deny"


class RuleCandidate(_Frozen):
    """An allow rule that an APPROVE_FOR_SESSION or APPROVE_ALWAYS decision would save."""

    kind: str
    match: str
    description: str


class FileChange(_Frozen):
    """One path a dry run found the call would change (relative to the workspace)."""

    path: str
    # "created", "modified", "deleted", "mode", "directory" or "symlink"
    kind: str
    # A unified diff for text; else what changes (size and digest, a mode, a link's target).
    detail: str
    mode: int = 0
    size: int = 0


class ChangeSet(_Frozen):
    """What a dry run found a pending call would change, shown to approvers only. Apply
    exactly this with `Approvals.apply_changes(..., effect_digest)`."""

    changes: tuple[FileChange, ...]
    omitted_changes: int
    exit_code: int | None
    output_head: str
    output_tail: str
    omitted_output_bytes: int
    # Why it cannot be applied (only approving the command remains); "" when it can.
    unrepresentable: str
    # Why the dry run did not complete; "" when it ran.
    failure: str
    effect_digest: str
    requested_by: str
    time: datetime | None

    @property
    def applicable(self) -> bool:
        return not self.unrepresentable and not self.failure


class PendingApproval(_Frozen):
    """A call waiting for a human decision, with everything an approver needs to decide it.

    Decide with `call.digest`: the digest of exactly what is shown here.
    """

    call: ToolCall
    candidates: tuple[RuleCandidate, ...]
    unmet: tuple[Requirement, ...]
    command: str
    working_directory: str
    requested_by: str
    workspace: str
    deadline: datetime | None
    # Why it has no dry run ("" when an approver may ask for one), and its last one's changes.
    dry_run_refusal: str = "not offered"
    change_set: ChangeSet | None = None

    @property
    def execution_id(self) -> str:
        """The pending call's execution ID."""
        return self.call.execution_id


class PendingQuestion(_Frozen):
    """An AskUser question waiting for an answer; with `choices`, answer one of them or
    "other"."""

    execution_id: str
    session_id: str
    question: str
    choices: tuple[str, ...]
    requested_by: str
    deadline: datetime | None


class Resolved(_Frozen):
    """An approval or question that is no longer pending, the call's state now, who decided
    (empty when nobody did) and how it ended."""

    execution_id: str
    state: State
    decided_by: str = ""
    reason: str = ""


class AuditEvent(_Frozen):
    """One audit journal record (see the README for the kinds and their data)."""

    seq: int
    run_id: str
    time: datetime
    kind: str
    session_id: str
    execution_id: str
    principal: str
    # The event's details: IDs, names, outcomes; never arguments, contents or output.
    data: dict[str, JsonValue]


class Rule(_Frozen):
    """A stored allow or deny; `scope` is "" (config), "session:<id>" or "workspace:<root>"."""

    rule_id: str
    effect: RuleEffect
    kind: str
    match: str
    scope: str
    origin: str
    create_time: datetime | None
