"""Tool-call records: the state machine's data, snapshots, and the digest.

A record is mutated only by the lifecycle on the event loop, with no await between a check
and the transition it guards; that is what makes APPROVED -> RUNNING atomic (single use).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import anyio

from .effects import ChangeSet
from .models import Decision, Denial, Preview, Requirement, RuleCandidate, State, ToolResult
from .tool import Artifact, Prepared


def compute_digest(tool_name: str, prepared: Prepared, batch_id: str = "") -> str:
    """SHA-256 over the canonical encoding of the frozen artifact, its request and what the
    approver is shown of it (the preview, the batch, the rules a remembered decision offers)."""
    preview = prepared.preview
    document: dict[str, object] = {
        "tool": tool_name,
        "summary": prepared.summary,
        "requirements": [
            [r.kind, r.scope, r.match, r.description, r.human_only] for r in prepared.requirements
        ],
        "artifact": prepared.artifact.model_dump(mode="json"),
    }
    # Added only when present, so that digests of calls without them are unchanged.
    if preview is not None:
        document["preview"] = [preview.kind, preview.text, preview.omitted_bytes]
    if batch_id:
        document["batch_id"] = batch_id
    if prepared.candidates:
        # The rules a session or always decision may save are part of what was shown.
        document["candidates"] = [[c.kind, c.match, c.description] for c in prepared.candidates]
    encoded = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class CallSnapshot:
    """An immutable view of a call, safe to hand to the RPC layer."""

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
    create_time: datetime
    update_time: datetime
    expire_time: datetime | None
    batch_id: str = ""
    preview: Preview | None = None


@dataclass(eq=False, slots=True)
class CallRecord:
    execution_id: str
    session_id: str
    loop_id: str
    tool_name: str
    summary: str
    requirements: tuple[Requirement, ...]
    candidates: tuple[RuleCandidate, ...]
    # What Invoke runs; let go (None) once the call ends (core/retention.py).
    artifact: Artifact | None
    digest: str
    create_time: datetime
    update_time: datetime
    # Monotonic deadlines: expiry for PREPARED/APPROVED, approval timeout for AWAITING.
    deadline: float | None
    expire_time: datetime | None
    state: State = State.PREPARED
    decision: Decision | None = None
    denial: Denial | None = None
    result: ToolResult | None = None
    prepare_request_id: str = ""
    invoke_request_id: str = ""
    # Called once, when the call first reaches a terminal state (open-call accounting).
    on_terminal: Callable[[], None] | None = None
    cancel_scope: anyio.CancelScope | None = None
    cancel_requested: bool = False
    # Events made only when someone waits (most calls are never waited on, and an anyio
    # Event costs a backend lookup): `finished_event` (a terminal state, for an Invoke replay)
    # and `decided_event` (the first decision, for Approve(wait)).
    _finished: anyio.Event | None = None
    _decided: anyio.Event | None = None
    # What the approver is shown for a command (Prepared.command / working_directory).
    command: str = ""
    working_directory: str = ""
    # Called once when the call leaves AWAITING_APPROVAL (the approval board resolves it).
    on_unpending: Callable[[CallRecord], None] | None = None
    # True while an approver's decision is being made durable (APPROVE_ALWAYS writes its
    # rules first): other deciders are refused and the approval timeout waits for it.
    deciding: bool = False
    # Called after every state change with the previous state (the audit journal).
    on_change: Callable[[CallRecord, State], None] | None = None
    # Monotonic time the call started RUNNING (the journaled duration).
    run_started: float | None = None
    # The batch (one model turn) the call was prepared in, and what the approver is shown;
    # the preview goes once the call ends (core/retention.py).
    batch_id: str = ""
    preview: Preview | None = None
    # Created only when someone watches the call, so the hot path pays nothing otherwise.
    _changed: anyio.Event | None = None
    # The last dry run (core/dry_runs.py): what approvers were shown, and the tool's plan to
    # apply it; `apply_plan` once an approver chose "apply exactly this" (Invoke applies it
    # instead of running the call). Let go once the call ends (core/retention.py).
    dry_run: ChangeSet | None = None
    dry_run_plan: object | None = None
    apply_plan: object | None = None

    def snapshot(self) -> CallSnapshot:
        return CallSnapshot(
            execution_id=self.execution_id,
            session_id=self.session_id,
            loop_id=self.loop_id,
            tool_name=self.tool_name,
            state=self.state,
            summary=self.summary,
            requirements=self.requirements,
            digest=self.digest,
            decision=self.decision,
            denial=self.denial,
            result=self.result,
            create_time=self.create_time,
            update_time=self.update_time,
            expire_time=self.expire_time if self.state in _EXPIRING else None,
            batch_id=self.batch_id,
            preview=self.preview,
        )

    def finished_event(self) -> anyio.Event:
        """An event set once the call is in a terminal state (already set if it is)."""
        if self._finished is None:
            self._finished = anyio.Event()
            if self.state.is_terminal:
                self._finished.set()
        return self._finished

    def decided_event(self) -> anyio.Event:
        """An event set at the call's first decision (already set if it was decided)."""
        if self._decided is None:
            self._decided = anyio.Event()
            if self.state not in _UNDECIDED:
                self._decided.set()
        return self._decided

    def changed(self) -> anyio.Event:
        """An event set at the next state change (take it before reading the state)."""
        event = self._changed
        if event is None:
            event = self._changed = anyio.Event()
        return event

    def move(self, state: State, now: datetime) -> None:
        previous = self.state
        was_terminal = previous.is_terminal
        self.state = state
        self.update_time = now
        if state.is_terminal:
            self.deadline = None
            self.cancel_scope = None
            if self._finished is not None:
                self._finished.set()
            if not was_terminal and self.on_terminal is not None:
                self.on_terminal()
        if self._decided is not None and state not in _UNDECIDED:
            self._decided.set()
        if self.on_change is not None:
            self.on_change(self, previous)
        if previous is State.AWAITING_APPROVAL and self.on_unpending is not None:
            hook, self.on_unpending = self.on_unpending, None
            hook(self)
        event = self._changed
        if event is not None:
            self._changed = None
            event.set()


# States whose snapshot shows `expire_time`: expiry, or (awaiting) the approval deadline.
_EXPIRING = frozenset({State.PREPARED, State.APPROVED, State.AWAITING_APPROVAL})
# A call in any other state has been decided (RUNNING and after imply APPROVED).
_UNDECIDED = frozenset({State.PREPARED, State.AWAITING_APPROVAL})
