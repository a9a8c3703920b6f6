"""How a call is decided: by policy (the gate's verdict), by a human, or by its deadline
passing (expiry and approval timeouts, applied lazily) (design sections 2 and 4)."""

from __future__ import annotations

from datetime import timedelta

from .board import ApprovalBoard, PendingApproval
from .calls import CallRecord, CallSnapshot
from .gate import Gate, Verdict
from .models import Access, Decision, Denial, DenialKind, State
from .rules import offered_candidates
from .sessions import Clock, LifecycleSettings, Session
from .telemetry import Decider, DecisionOutcome, Telemetry


class CallDecisions:
    """Moves calls out of PREPARED and AWAITING_APPROVAL; the lifecycle owns the rest."""

    def __init__(
        self,
        settings: LifecycleSettings,
        gate: Gate,
        board: ApprovalBoard,
        clock: Clock,
        telemetry: Telemetry,
    ) -> None:
        self.settings = settings
        self.gate = gate
        self.board = board
        self.clock = clock
        self.telemetry = telemetry

    def decide_by_human(
        self,
        record: CallRecord,
        decided_by: str,
        approve: bool,
        note: str,
        rule_ids: tuple[str, ...] = (),
    ) -> CallSnapshot:
        """Apply an approver's decision to a call AWAITING_APPROVAL (checked by the caller
        with no await since)."""
        now = self.clock.now()
        if approve:
            reason = f"approved by {decided_by}" + (f": {note}" if note else "")
            record.decision = Decision(decided_by, rule_ids, now, reason)
            record.deadline = self.clock.monotonic() + self.settings.call_ttl_seconds
            record.expire_time = now + timedelta(seconds=self.settings.call_ttl_seconds)
            record.move(State.APPROVED, now)
            self.telemetry.decided(DecisionOutcome.APPROVED, Decider.HUMAN)
        else:
            reason = f"denied by {decided_by}" + (f": {note}" if note else "")
            record.decision = Decision(decided_by, (), now, reason)
            record.denial = Denial(
                DenialKind.APPROVER_DENIED,
                "An approver denied the call" + (f": {note}" if note else "."),
            )
            record.move(State.DENIED, now)
            self.telemetry.decided(DecisionOutcome.DENIED, Decider.HUMAN)
        return record.snapshot()

    def settle_by_policy(self, record: CallRecord, verdict: Verdict) -> bool:
        """Apply an Allow or Deny verdict; False when the verdict leaves it to a human."""
        now = self.clock.now()
        if verdict.access is Access.ALLOW:
            record.decision = Decision(
                "policy", verdict.rule_ids, now, verdict.reason, read_only=verdict.read_only
            )
            record.deadline = self.clock.monotonic() + self.settings.call_ttl_seconds
            record.expire_time = now + timedelta(seconds=self.settings.call_ttl_seconds)
            record.move(State.APPROVED, now)
            self.telemetry.decided(DecisionOutcome.APPROVED, Decider.POLICY)
            return True
        if verdict.access is Access.DENY:
            assert verdict.denial is not None
            record.denial = verdict.denial
            record.move(State.DENIED, now)
            self.telemetry.decided(DecisionOutcome.DENIED, Decider.POLICY)
            return True
        return False

    def decide_by_policy(self, session: Session, record: CallRecord) -> None:
        verdict = self.gate.evaluate(
            record.requirements, session.session_id, session.workspace.root
        )
        if self.settle_by_policy(record, verdict):
            return
        now = self.clock.now()
        if self.settings.headless:
            record.denial = Denial(
                DenialKind.APPROVAL_REQUIRED,
                "The call needs a human approval and this server runs headless: "
                + "; ".join(r.description for r in verdict.unmet)
                + ".",
            )
            record.move(State.DENIED, now)
            self.telemetry.decided(DecisionOutcome.DENIED, Decider.POLICY)
        else:
            timeout = self.settings.approval_timeout_seconds
            record.deadline = self.clock.monotonic() + timeout
            record.expire_time = now + timedelta(seconds=timeout)
            record.move(State.AWAITING_APPROVAL, now)
            record.on_unpending = self.resolve_pending
            # No approver watching is not a reason to deny: one may connect before the
            # approval timeout, and the agent can wait or watch the call meanwhile.
            self.board.publish(
                PendingApproval(
                    call=record.snapshot(),
                    candidates=offered_candidates(record.candidates, verdict.unmet),
                    unmet=verdict.unmet,
                    command=record.command,
                    working_directory=record.working_directory,
                    requested_by=session.owner,
                    workspace=session.workspace.root,
                    deadline=now + timedelta(seconds=timeout),
                )
            )

    def resolve_pending(self, record: CallRecord) -> None:
        decision, denial = record.decision, record.denial
        if decision is not None and decision.decided_by != "policy":
            decided_by, reason = decision.decided_by, decision.reason
        else:
            decided_by = ""
            reason = denial.description if denial is not None else record.state.value.lower()
        self.board.resolve(record.execution_id, record.state, decided_by, reason)

    def refresh(self, record: CallRecord) -> None:
        """Apply expiry and approval timeouts that are due."""
        if record.deadline is None or self.clock.monotonic() < record.deadline:
            return
        if record.deciding:
            # An approver's decision is being made durable; it decides the call either way.
            return
        now = self.clock.now()
        if record.state in (State.PREPARED, State.APPROVED):
            record.move(State.EXPIRED, now)
        elif record.state is State.AWAITING_APPROVAL:
            record.denial = Denial(
                DenialKind.APPROVAL_TIMEOUT, "No approver decided within the approval timeout."
            )
            record.move(State.DENIED, now)
            self.telemetry.decided(DecisionOutcome.TIMED_OUT, Decider.POLICY)
