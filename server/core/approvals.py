"""The approver's operations (design section 4.4): decide gated calls, answer AskUser questions, and
manage session and workspace rules. Requires the approver role on every method.

A decision is checked and applied with no await in between, so when several approvers
decide the same call exactly one wins and the others get CALL_STATE_INVALID. The one
exception is APPROVE_ALWAYS, which first makes its rules durable: the call is claimed
(`CallRecord.deciding`) for the duration of the write, and a failed write approves nothing.
A call with a human-only requirement (`Gate.needs_human`) takes only APPROVE_ONCE or DENY:
APPROVE_FOR_SESSION and APPROVE_ALWAYS are refused with APPROVE_ONCE_ONLY.
"""

from __future__ import annotations

import enum
import logging
import os
import secrets
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from .board import PendingApproval, Subscription
from .calls import CallRecord, CallSnapshot
from .errors import CallgateError, FailedPrecondition, InternalError, NotFound, request_invalid
from .lifecycle import Lifecycle
from .models import RequirementKind, RuleCandidate, State
from .paths import is_within
from .principals import Principal, Role
from .rules import CONFIG_ORIGIN, Effect, Rule, RuleBook, RulePatternError, normalize_pattern

log = logging.getLogger(__name__)

MAX_NOTE_CHARS = 4096
MAX_ANSWER_CHARS = 16_384
MAX_BATCH_DECISIONS = 100


class ApproverDecision(enum.StrEnum):
    APPROVE_ONCE = "approve_once"
    APPROVE_FOR_SESSION = "approve_for_session"
    APPROVE_ALWAYS = "approve_always"
    DENY = "deny"
    # Apply exactly the change set of the call's last dry run (bound to its effect digest):
    # Invoke writes it and never runs the command again.
    APPLY_CHANGES = "apply_changes"


class RuleStore(Protocol):
    """Where workspace rules are persisted. Both methods return only once durable."""

    async def add(self, rules: Sequence[Rule]) -> None: ...
    async def delete(self, rule_id: str) -> None: ...


def _new_rule_id() -> str:
    return "rule_" + secrets.token_urlsafe(12)


class Approvals:
    """Decide, Answer and the rule operations over the lifecycle, the rule book and the
    durable rule store."""

    def __init__(self, lifecycle: Lifecycle, rules: RuleBook, store: RuleStore) -> None:
        self.lifecycle = lifecycle
        self.rules = rules
        self.store = store

    def watch(self, principal: Principal) -> AbstractContextManager[Subscription]:
        """Subscribe to the approval board (pending items first, then every change)."""
        principal.require(Role.APPROVER)
        return self.lifecycle.board.subscribe()

    def pending(self, principal: Principal, execution_id: str) -> PendingApproval:
        """One call awaiting approval, as the board shows it (CALL_NOT_FOUND otherwise)."""
        principal.require(Role.APPROVER)
        if not execution_id:
            raise request_invalid("execution_id", "the execution_id is required")
        pending = self.lifecycle.board.pending_approval(execution_id)
        if pending is None:
            raise NotFound(
                "CALL_NOT_FOUND",
                "No call with that ID is awaiting approval; WatchApprovals lists those that are.",
            )
        return pending

    # ------------------------------------------------------------------ decisions

    async def decide(
        self,
        principal: Principal,
        execution_id: str,
        digest: str,
        kind: ApproverDecision | None,
        note: str,
        chosen: Sequence[tuple[str, str]] = (),
        effect: str = "",
    ) -> CallSnapshot:
        """Decide one call; `chosen` are the (kind, match) rules a session or always decision
        saves, each one offered for the call (empty: every offered one); `effect` the effect
        digest an APPLY_CHANGES decision is bound to."""
        principal.require(Role.APPROVER)
        record, decision = self._checked(principal, execution_id, digest, kind, note, effect=effect)
        rules = self._rules(principal, record, decision, chosen)
        return (await self._apply(principal, [(record, decision, note)], [rules]))[0]

    async def decide_batch(
        self,
        principal: Principal,
        requests: Sequence[
            tuple[str, str, ApproverDecision | None, str, Sequence[tuple[str, str]], str]
        ],
    ) -> list[CallSnapshot]:
        """Decide every (execution_id, digest, kind, note, chosen rules) or none: each is
        checked as Decide checks it, all before any is applied, and the error names the
        request that failed. Every call must belong to one session (BATCH_SPANS_SESSIONS)."""
        principal.require(Role.APPROVER)
        if not requests:
            raise request_invalid("requests", "a batch needs at least one decision")
        if len(requests) > MAX_BATCH_DECISIONS:
            raise request_invalid(
                "requests", f"a batch holds at most {MAX_BATCH_DECISIONS} decisions"
            )
        checked: list[tuple[CallRecord, ApproverDecision, str]] = []
        rules: list[list[Rule]] = []
        seen: set[str] = set()
        for index, (execution_id, digest, kind, note, chosen, effect) in enumerate(requests):
            where = f"requests[{index}]."
            if execution_id in seen:
                raise request_invalid(where + "execution_id", "the call is named twice")
            seen.add(execution_id)
            try:
                record, decision = self._checked(
                    principal, execution_id, digest, kind, note, where, effect
                )
                rules.append(self._rules(principal, record, decision, chosen))
            except CallgateError as exc:
                exc.metadata.setdefault("execution_id", execution_id)
                exc.metadata.setdefault("index", str(index))
                exc.message = f"{where[:-1]} ({execution_id}): {exc.message}"
                raise
            checked.append((record, decision, note))
        sessions = {record.session_id for record, _, _ in checked}
        if len(sessions) > 1:
            # A batch is one session's turn, decided as shown: calls of several sessions are
            # several decisions, each seen with its own session.
            raise FailedPrecondition(
                "BATCH_SPANS_SESSIONS",
                "The calls belong to more than one session; decide each session's calls "
                "in a batch of its own.",
                metadata={"sessions": str(len(sessions))},
            )
        return await self._apply(principal, checked, rules)

    def _checked(
        self,
        principal: Principal,
        execution_id: str,
        digest: str,
        kind: ApproverDecision | None,
        note: str,
        where: str = "",
        effect: str = "",
    ) -> tuple[CallRecord, ApproverDecision]:
        """Every check of one decision, with no await: the call, its state, the digest, the
        effect digest of an APPLY_CHANGES, and whether a rule may come of it."""
        if not execution_id:
            raise request_invalid(where + "execution_id", "the execution_id is required")
        if not digest:
            raise request_invalid(where + "digest", "the digest the approver was shown is required")
        if kind is None:
            raise request_invalid(where + "kind", "the decision kind is required")
        if len(note) > MAX_NOTE_CHARS:
            raise request_invalid(
                where + "note", f"the note may hold at most {MAX_NOTE_CHARS} characters"
            )
        _, record = self.lifecycle.find_call(principal, execution_id)
        _check_decidable(record)
        if digest != record.digest:
            raise FailedPrecondition(
                "DIGEST_MISMATCH",
                "The digest is not the call's digest; decide on the call as it is shown now.",
            )
        if kind is ApproverDecision.APPLY_CHANGES:
            _check_effect(record, effect, where)
        elif effect:
            raise request_invalid(
                where + "effect_digest", "an effect digest goes only with APPLY_CHANGES"
            )
        if kind in (ApproverDecision.APPROVE_FOR_SESSION, ApproverDecision.APPROVE_ALWAYS) and any(
            self.lifecycle.gate.needs_human(r) for r in record.requirements
        ):
            # Refused rather than quietly approved once: the approver asked for a rule, and
            # must learn that none may ever cover this call before approving it.
            raise FailedPrecondition(
                "APPROVE_ONCE_ONLY",
                "The call writes a file that makes programs run code, which only a human may "
                "approve each time; decide it with APPROVE_ONCE or DENY.",
                metadata={"execution_id": execution_id},
            )
        return record, kind

    def _rules(
        self,
        principal: Principal,
        record: CallRecord,
        kind: ApproverDecision,
        chosen: Sequence[tuple[str, str]] = (),
    ) -> list[Rule]:
        """The allow rules a session or always decision saves: the candidates offered for the
        call (covered by its digest), or those of them the approver chose. A chosen rule that
        was not offered is refused (RULE_NOT_OFFERED), and with it the whole decision."""
        remembered = (ApproverDecision.APPROVE_FOR_SESSION, ApproverDecision.APPROVE_ALWAYS)
        if kind not in remembered:
            if chosen:
                raise request_invalid(
                    "rules", "rules are saved only with APPROVE_FOR_SESSION or APPROVE_ALWAYS"
                )
            return []
        pending = self.lifecycle.board.pending_approval(record.execution_id)
        offered: tuple[RuleCandidate, ...] = pending.candidates if pending is not None else ()
        if chosen:
            # Compared exactly, as offered (candidates are already canonical): normalizing a
            # path here would resolve it again, and a symlink swapped in since could turn a
            # narrow choice into a broader offered rule.
            by_key = {(c.kind, c.match): c for c in offered}
            picked: dict[tuple[str, str], RuleCandidate] = {}
            for rule_kind, match in chosen:
                candidate = by_key.get((rule_kind, match))
                if candidate is None:
                    raise FailedPrecondition(
                        "RULE_NOT_OFFERED",
                        "A chosen rule was not offered for this call; save only rules shown "
                        "with it (PendingApproval.candidates).",
                        metadata={"execution_id": record.execution_id, "kind": rule_kind[:64]},
                    )
                picked[(candidate.kind, candidate.match)] = candidate
            offered = tuple(picked.values())
        candidates = offered
        if kind is ApproverDecision.APPROVE_FOR_SESSION:
            scope = f"session:{record.session_id}"
        else:
            scope = f"workspace:{self.lifecycle.call_workspace(record)}"
        now = self.lifecycle.clock.now()
        return [
            Rule(_new_rule_id(), Effect.ALLOW, c.kind, c.match, scope, principal.name, now)
            for c in candidates
        ]

    async def _apply(
        self,
        principal: Principal,
        checked: Sequence[tuple[CallRecord, ApproverDecision, str]],
        rules: Sequence[list[Rule]],
    ) -> list[CallSnapshot]:
        """Apply checked decisions with the rules each saves. Workspace rules are made durable
        first, with the calls claimed meanwhile; then every call is re-checked and all are
        decided with no await in between, so a batch is decided whole or not at all."""
        durable = [
            rule
            for (_, kind, _), saved in zip(checked, rules, strict=True)
            if kind is ApproverDecision.APPROVE_ALWAYS
            for rule in saved
        ]
        if durable:
            for record, _, _ in checked:
                record.deciding = True
            try:
                await self._persist(durable)
            finally:
                for record, _, _ in checked:
                    record.deciding = False
        for saved in rules:
            for rule in saved:
                self.rules.add(rule)
                self._journal_rule("rule.created", rule, principal)
        # A cancel may have come while the rules were written; they stay (they were decided).
        for record, _, _ in checked:
            _check_decidable(record)
        for record, kind, _ in checked:
            if kind is ApproverDecision.APPLY_CHANGES:
                record.apply_plan = record.dry_run_plan
        snapshots = [
            self.lifecycle.decide_by_human(
                record,
                principal.name,
                kind is not ApproverDecision.DENY,
                _applying(record, note) if kind is ApproverDecision.APPLY_CHANGES else note,
                tuple(r.rule_id for r in saved),
            )
            for (record, kind, note), saved in zip(checked, rules, strict=True)
        ]
        if any(rules):
            self.lifecycle.reevaluate_pending()
        return snapshots

    async def _persist(self, rules: Sequence[Rule]) -> None:
        try:
            await self.store.add(rules)
        except CallgateError:
            raise
        except Exception:
            log.exception("persisting rules failed; nothing was approved")
            raise InternalError() from None

    # ------------------------------------------------------------------ questions

    def answer(self, principal: Principal, execution_id: str, answer: str) -> None:
        principal.require(Role.APPROVER)
        if not execution_id:
            raise request_invalid("execution_id", "the execution_id is required")
        board = self.lifecycle.board
        question = board.question(execution_id)
        if question is None:
            self.lifecycle.find_call(principal, execution_id)
            raise FailedPrecondition(
                "CALL_STATE_INVALID",
                "The call has no question waiting for an answer.",
            )
        if not answer:
            raise request_invalid("answer", "the answer must not be empty")
        if len(answer) > MAX_ANSWER_CHARS:
            raise request_invalid(
                "answer", f"the answer may hold at most {MAX_ANSWER_CHARS} characters"
            )
        choices = question.item.choices
        if choices and answer not in choices and answer != "other":
            raise request_invalid("answer", "the answer must be one of the choices or 'other'")
        question.answer = answer
        question.answered.set()
        board.resolve(execution_id, State.SUCCEEDED)

    # ------------------------------------------------------------------ rules

    def list_rules(self, principal: Principal, session_id: str) -> list[Rule]:
        principal.require(Role.APPROVER)
        if not session_id:
            return self.rules.all()
        root = self.lifecycle.session_workspace(principal, session_id)
        return [r for r in self.rules.all() if r.applies_to(session_id, root)]

    async def create_rule(
        self, principal: Principal, effect: Effect | None, kind: str, match: str, scope: str
    ) -> Rule:
        principal.require(Role.APPROVER)
        if effect is None:
            raise request_invalid("effect", "the effect must be allow or deny")
        try:
            RequirementKind(kind)
        except ValueError:
            known = ", ".join(k.value for k in RequirementKind)
            raise request_invalid("kind", f"the kind must be one of {known}") from None
        try:
            pattern = normalize_pattern(kind, match)
        except RulePatternError as exc:
            raise request_invalid("match", str(exc)) from None
        scope = self._check_scope(principal, scope)
        rule = Rule(
            _new_rule_id(), effect, kind, pattern, scope, principal.name, self.lifecycle.clock.now()
        )
        if scope.startswith("workspace:"):
            await self._persist([rule])
        self.rules.add(rule)
        self._journal_rule("rule.created", rule, principal)
        self.lifecycle.reevaluate_pending()
        return rule

    async def delete_rule(self, principal: Principal, rule_id: str) -> None:
        principal.require(Role.APPROVER)
        if not rule_id:
            raise request_invalid("rule_id", "the rule_id is required")
        rule = self.rules.get(rule_id)
        if rule is None:
            raise NotFound("RULE_NOT_FOUND", "No rule has that ID; ListRules shows the rules.")
        if not rule.scope or rule.origin == CONFIG_ORIGIN:
            raise FailedPrecondition(
                "RULE_READ_ONLY",
                "Config rules are read-only; change the server's configuration file instead.",
                metadata={"rule_id": rule_id},
            )
        if rule.scope.startswith("workspace:"):
            try:
                await self.store.delete(rule_id)
            except CallgateError:
                raise
            except Exception:
                log.exception("deleting a persisted rule failed; the rule stays")
                raise InternalError() from None
        self.rules.remove(rule_id)
        self._journal_rule("rule.deleted", rule, principal)

    def _journal_rule(self, kind: str, rule: Rule, principal: Principal) -> None:
        self.lifecycle.journal.record(
            kind,
            principal=principal.name,
            data={
                "rule_id": rule.rule_id,
                "effect": rule.effect.value,
                "kind": rule.kind,
                "match": rule.match,
                "scope": rule.scope,
            },
        )

    def _check_scope(self, principal: Principal, scope: str) -> str:
        if scope.startswith("session:"):
            try:
                self.lifecycle.session_workspace(principal, scope.removeprefix("session:"))
            except NotFound:
                raise request_invalid("scope", "no open session has that ID") from None
            return scope
        if scope.startswith("workspace:"):
            root = scope.removeprefix("workspace:")
            if (
                "\x00" in root
                or not os.path.isabs(root)
                or os.path.realpath(root) != root
                or not os.path.isdir(root)
            ):
                raise request_invalid(
                    "scope", "a workspace scope needs an absolute, canonical directory"
                )
            allowed = self.lifecycle.settings.allowed_roots
            if not any(is_within(root, a) for a in allowed):
                raise request_invalid("scope", "the workspace is outside the allowed roots")
            return scope
        raise request_invalid("scope", "the scope must be session:<id> or workspace:<root>")


def _check_decidable(record: CallRecord) -> None:
    if record.state is not State.AWAITING_APPROVAL or record.deciding:
        raise FailedPrecondition(
            "CALL_STATE_INVALID",
            f"The call is {record.state.value}; only a call awaiting approval can be decided."
            if not record.deciding
            else "Another approver is deciding this call.",
            metadata={"state": record.state.value},
        )


def _check_effect(record: CallRecord, effect: str, where: str) -> None:
    """APPLY_CHANGES is bound to the last dry run's effect digest, and needs a change set that
    can be applied."""
    if not effect:
        raise request_invalid(
            where + "effect_digest", "APPLY_CHANGES needs the effect digest of the dry run shown"
        )
    if record.dry_run is None or effect != record.dry_run.effect_digest:
        raise FailedPrecondition(
            "EFFECT_MISMATCH",
            "The effect digest is not that of the call's last dry run; decide on the change set "
            "as it is shown now.",
        )
    if record.dry_run_plan is None:
        why = record.dry_run.unrepresentable or record.dry_run.failure or "nothing to apply"
        raise FailedPrecondition(
            "NOTHING_TO_APPLY",
            f"The dry run's changes cannot be applied ({why}); approve or deny the command.",
        )


def _applying(record: CallRecord, note: str) -> str:
    assert record.dry_run is not None
    words = f"apply exactly the dry run's changes (effect {record.dry_run.effect_digest[:12]})"
    return f"{words}: {note}" if note else words
