"""callgate.v1.ApprovalService: each handler converts, calls one Approvals method, converts
back. WatchApprovals writes the board's items until the client goes away."""

from __future__ import annotations

from typing import assert_never

from callgate.server.core.approvals import Approvals, ApproverDecision
from callgate.server.core.board import PendingApproval, PendingQuestion, Resolved
from callgate.server.core.dry_runs import DryRuns
from callgate.server.core.effects import ChangeSet
from callgate.server.core.rules import Effect, Rule
from callgate.v1 import approval_service_pb2 as pb

from .convert import call_to_proto, requirement_to_proto, state_to_proto, timestamp
from .handlers import Call, StreamHandler, UnaryHandler, acknowledged


def decision_from_proto(kind: pb.DecisionKind.ValueType) -> ApproverDecision | None:
    """The core decision kind; None for UNSPECIFIED or a value this server does not know."""
    return _DECISIONS.get(kind)


_DECISIONS: dict[int, ApproverDecision] = {
    pb.DECISION_KIND_APPROVE_ONCE: ApproverDecision.APPROVE_ONCE,
    pb.DECISION_KIND_APPROVE_FOR_SESSION: ApproverDecision.APPROVE_FOR_SESSION,
    pb.DECISION_KIND_APPROVE_ALWAYS: ApproverDecision.APPROVE_ALWAYS,
    pb.DECISION_KIND_DENY: ApproverDecision.DENY,
    pb.DECISION_KIND_APPLY_CHANGES: ApproverDecision.APPLY_CHANGES,
}

_EFFECTS: dict[int, Effect] = {
    pb.RULE_EFFECT_ALLOW: Effect.ALLOW,
    pb.RULE_EFFECT_DENY: Effect.DENY,
}


def effect_to_proto(effect: Effect) -> pb.RuleEffect.ValueType:
    match effect:
        case Effect.ALLOW:
            return pb.RULE_EFFECT_ALLOW
        case Effect.DENY:
            return pb.RULE_EFFECT_DENY
        case _:
            assert_never(effect)


def rule_to_proto(rule: Rule) -> pb.Rule:
    return pb.Rule(
        rule_id=rule.rule_id,
        effect=effect_to_proto(rule.effect),
        kind=rule.kind,
        match=rule.match,
        scope=rule.scope,
        origin=rule.origin,
        create_time=timestamp(rule.create_time),
    )


def change_set_to_proto(change_set: ChangeSet) -> pb.ChangeSet:
    """A change set as approvers see it (its text escaped like previews by the tool)."""
    message = pb.ChangeSet(
        changes=[
            pb.FileChange(
                path=c.path,
                kind=c.kind,
                detail=c.detail,
                mode=c.mode or 0,
                size=c.size,
            )
            for c in change_set.changes
        ],
        omitted_changes=change_set.omitted_changes,
        output_head=change_set.output_head,
        output_tail=change_set.output_tail,
        omitted_output_bytes=change_set.omitted_output_bytes,
        unrepresentable=change_set.unrepresentable,
        failure=change_set.failure,
        effect_digest=change_set.effect_digest,
        requested_by=change_set.requested_by,
    )
    if change_set.exit_code is not None:
        message.exit_code = change_set.exit_code
    if change_set.time is not None:
        message.time.CopyFrom(timestamp(change_set.time))
    return message


def item_to_proto(item: PendingApproval | PendingQuestion | Resolved) -> pb.WatchApprovalsResponse:
    if isinstance(item, PendingApproval):
        return pb.WatchApprovalsResponse(
            approval=pb.PendingApproval(
                dry_run_refusal=item.dry_run_refusal,
                change_set=change_set_to_proto(item.change_set)
                if item.change_set is not None
                else None,
                call=call_to_proto(item.call),
                candidates=[
                    pb.RuleCandidate(kind=c.kind, match=c.match, description=c.description)
                    for c in item.candidates
                ],
                unmet=[requirement_to_proto(r) for r in item.unmet],
                command=item.command,
                working_directory=item.working_directory,
                requested_by=item.requested_by,
                workspace=item.workspace,
                deadline=timestamp(item.deadline),
            )
        )
    if isinstance(item, PendingQuestion):
        return pb.WatchApprovalsResponse(
            question=pb.PendingQuestion(
                execution_id=item.execution_id,
                session_id=item.session_id,
                question=item.question,
                choices=item.choices,
                requested_by=item.requested_by,
                deadline=timestamp(item.deadline),
            )
        )
    return pb.WatchApprovalsResponse(
        resolved=pb.Resolved(
            execution_id=item.execution_id,
            state=state_to_proto(item.state),
            decided_by=item.decided_by,
            reason=item.reason,
        )
    )


class ApprovalServicer:
    """Handlers for every ApprovalService method."""

    def __init__(self, approvals: Approvals, dry_runs: DryRuns) -> None:
        self.approvals = approvals
        self.dry_runs = dry_runs

    def handlers(self) -> dict[str, UnaryHandler | StreamHandler]:
        commit = self.approvals.lifecycle.journal.commit
        return {
            "WatchApprovals": self.watch_approvals,
            "GetPendingApproval": self.get_pending_approval,
            "Decide": acknowledged(self.decide, commit),
            "DecideBatch": acknowledged(self.decide_batch, commit),
            "DryRun": acknowledged(self.dry_run, commit),
            "Answer": acknowledged(self.answer, commit),
            "ListRules": self.list_rules,
            "CreateRule": acknowledged(self.create_rule, commit),
            "DeleteRule": acknowledged(self.delete_rule, commit),
        }

    async def watch_approvals(self, request: pb.WatchApprovalsRequest, call: Call) -> None:
        with self.approvals.watch(call.principal) as subscription:
            while True:
                item = await subscription.next()
                await call.context.write(item_to_proto(item))

    async def get_pending_approval(
        self, request: pb.GetPendingApprovalRequest, call: Call
    ) -> pb.GetPendingApprovalResponse:
        pending = self.approvals.pending(call.principal, request.execution_id)
        return pb.GetPendingApprovalResponse(approval=item_to_proto(pending).approval)

    async def decide(self, request: pb.DecideRequest, call: Call) -> pb.DecideResponse:
        snapshot = await self.approvals.decide(
            call.principal,
            request.execution_id,
            request.digest,
            decision_from_proto(request.kind),
            request.note,
            [(rule.kind, rule.match) for rule in request.rules],
            request.effect_digest,
        )
        return pb.DecideResponse(call=call_to_proto(snapshot))

    async def dry_run(self, request: pb.DryRunRequest, call: Call) -> pb.DryRunResponse:
        change_set = await self.dry_runs.run(call.principal, request.execution_id, request.digest)
        return pb.DryRunResponse(change_set=change_set_to_proto(change_set))

    async def decide_batch(
        self, request: pb.DecideBatchRequest, call: Call
    ) -> pb.DecideBatchResponse:
        snapshots = await self.approvals.decide_batch(
            call.principal,
            [
                (
                    r.execution_id,
                    r.digest,
                    decision_from_proto(r.kind),
                    r.note,
                    [(rule.kind, rule.match) for rule in r.rules],
                    r.effect_digest,
                )
                for r in request.requests
            ],
        )
        return pb.DecideBatchResponse(calls=[call_to_proto(s) for s in snapshots])

    async def answer(self, request: pb.AnswerRequest, call: Call) -> pb.AnswerResponse:
        self.approvals.answer(call.principal, request.execution_id, request.answer)
        return pb.AnswerResponse()

    async def list_rules(self, request: pb.ListRulesRequest, call: Call) -> pb.ListRulesResponse:
        rules = self.approvals.list_rules(call.principal, request.session_id)
        return pb.ListRulesResponse(rules=[rule_to_proto(r) for r in rules])

    async def create_rule(self, request: pb.CreateRuleRequest, call: Call) -> pb.CreateRuleResponse:
        rule = await self.approvals.create_rule(
            call.principal,
            _EFFECTS.get(request.effect),
            request.kind,
            request.match,
            request.scope,
        )
        return pb.CreateRuleResponse(rule=rule_to_proto(rule))

    async def delete_rule(self, request: pb.DeleteRuleRequest, call: Call) -> pb.DeleteRuleResponse:
        await self.approvals.delete_rule(call.principal, request.rule_id)
        return pb.DeleteRuleResponse()
