"""The approver's side of callgate: watch pending calls and questions, decide, manage rules.

An approver is its own principal with its own token, so it uses its own client:

async with CallgateClient(target, token=approver_token) as client:
    async for item in client.approvals.watch():
        if isinstance(item, PendingApproval):
            await client.approvals.decide(item.execution_id, item.call.digest,
                                          DecisionKind.APPROVE_ONCE)
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING

from callgate.client.conversion import (
    DECISION_KINDS,
    ApprovalItem,
    approval_item_from_proto,
    call_from_proto,
    change_set_from_proto,
    pending_approval_from_proto,
    rule_effect_to_proto,
    rule_from_proto,
)
from callgate.client.errors import ProtocolError
from callgate.client.models import (
    ChangeSet,
    DecisionKind,
    PendingApproval,
    Rule,
    RuleEffect,
    ToolCall,
)
from callgate.client.transport import Transport
from callgate.v1 import approval_service_pb2

if TYPE_CHECKING:
    from callgate.v1.approval_service_pb2_grpc import ApprovalServiceAsyncStub

__all__ = ["ApprovalItem", "Approvals"]


class Approvals:
    """ApprovalService through one client: `CallgateClient.approvals`. Every method needs a
    principal with the approver role; an agent token gets `PermissionDeniedError`."""

    def __init__(self, stub: ApprovalServiceAsyncStub, transport: Transport) -> None:
        self._stub = stub
        self._transport = transport

    async def watch(self) -> AsyncGenerator[ApprovalItem, None]:
        """Yields every pending approval and question: those pending now (oldest first), then
        each new one, and a `Resolved` when one stops being pending. Never ends on its own;
        leaving the iteration (best inside `contextlib.aclosing`) cancels the stream."""
        async with aclosing(
            self._transport.server_stream(
                self._stub.WatchApprovals, approval_service_pb2.WatchApprovalsRequest()
            )
        ) as responses:
            async for response in responses:
                item = approval_item_from_proto(response)
                if item is not None:  # None: an item kind from a newer server, skipped.
                    yield item

    async def pending(self, execution_id: str) -> PendingApproval:
        """One call awaiting approval, in full (its preview included); CallNotFoundError when
        no call with that ID is awaiting approval."""
        response = await self._transport.unary(
            self._stub.GetPendingApproval,
            approval_service_pb2.GetPendingApprovalRequest(execution_id=execution_id),
        )
        if not response.HasField("approval"):
            raise ProtocolError(f"The server answered for {execution_id} without the call.")
        return pending_approval_from_proto(response.approval)

    async def decide(
        self,
        execution_id: str,
        digest: str,
        kind: DecisionKind,
        note: str = "",
        rules: Sequence[tuple[str, str]] = (),
    ) -> ToolCall:
        """Decides a call AWAITING_APPROVAL and returns the call as decided.

        `digest` must be the digest shown to the human (`PendingApproval.call.digest`); a
        different one is refused with reason DIGEST_MISMATCH. A call decided meanwhile by
        someone else is refused with CALL_STATE_INVALID. For DENY, `note` becomes the denial
        description the agent sees. With a session or always decision, `rules` are the
        (kind, match) rules to save, each as offered (`PendingApproval.candidates`; empty:
        all of them); one that was not offered is refused with RULE_NOT_OFFERED.
        """
        response = await self._transport.unary(
            self._stub.Decide,
            approval_service_pb2.DecideRequest(
                execution_id=execution_id,
                digest=digest,
                kind=DECISION_KINDS[DecisionKind(kind)],
                note=note,
                rules=[
                    approval_service_pb2.RuleCandidate(kind=rule_kind, match=match)
                    for rule_kind, match in rules
                ],
            ),
        )
        if not response.HasField("call"):
            raise ProtocolError(f"The server answered Decide of {execution_id} without the call.")
        return call_from_proto(response.call)

    async def dry_run(self, execution_id: str, digest: str) -> ChangeSet:
        """Runs a pending call once in the dry-run sandbox (nothing reaches the workspace) and
        returns what it would change; watchers get the approval again with it. Offered when
        `PendingApproval.dry_run_refusal` is empty; DRY_RUN_BUSY while another dry run of the
        session is under way."""
        response = await self._transport.unary(
            self._stub.DryRun,
            approval_service_pb2.DryRunRequest(execution_id=execution_id, digest=digest),
        )
        if not response.HasField("change_set"):
            raise ProtocolError(f"The server answered DryRun of {execution_id} without changes.")
        return change_set_from_proto(response.change_set)

    async def apply_changes(
        self, execution_id: str, digest: str, effect_digest: str, note: str = ""
    ) -> ToolCall:
        """Decides "apply exactly this": the call's Invoke writes the change set its last dry
        run showed (`effect_digest`), never running the command again; the write fails
        `stale_workspace` (and writes nothing) when a changed path was edited since."""
        response = await self._transport.unary(
            self._stub.Decide,
            approval_service_pb2.DecideRequest(
                execution_id=execution_id,
                digest=digest,
                kind=approval_service_pb2.DECISION_KIND_APPLY_CHANGES,
                note=note,
                effect_digest=effect_digest,
            ),
        )
        if not response.HasField("call"):
            raise ProtocolError(f"The server answered Decide of {execution_id} without the call.")
        return call_from_proto(response.call)

    async def decide_batch(
        self, calls: Sequence[tuple[str, str]], kind: DecisionKind, note: str = ""
    ) -> list[ToolCall]:
        """Decides several calls AWAITING_APPROVAL of one session in one action, each
        `(execution_id, digest)` bound to the digest shown: all of them or none. If one fails
        its checks (a stale digest: DIGEST_MISMATCH; decided meanwhile: CALL_STATE_INVALID;
        calls of several sessions: BATCH_SPANS_SESSIONS), nothing is decided and the error
        names it. Returns the calls as decided, in order."""
        decision = DECISION_KINDS[DecisionKind(kind)]
        response = await self._transport.unary(
            self._stub.DecideBatch,
            approval_service_pb2.DecideBatchRequest(
                requests=[
                    approval_service_pb2.DecideRequest(
                        execution_id=execution_id, digest=digest, kind=decision, note=note
                    )
                    for execution_id, digest in calls
                ]
            ),
        )
        if len(response.calls) != len(calls):
            raise ProtocolError("The server answered DecideBatch without every call.")
        return [call_from_proto(call) for call in response.calls]

    async def answer(self, execution_id: str, answer: str) -> None:
        """Answers a pending AskUser question (with choices: one of them, or "other")."""
        await self._transport.unary(
            self._stub.Answer,
            approval_service_pb2.AnswerRequest(execution_id=execution_id, answer=answer),
        )

    async def list_rules(self, session_id: str = "") -> list[Rule]:
        """The rules in force (config, workspace and session rules); with `session_id`, only
        those that apply to that session."""
        response = await self._transport.unary(
            self._stub.ListRules, approval_service_pb2.ListRulesRequest(session_id=session_id)
        )
        return [rule_from_proto(rule) for rule in response.rules]

    async def create_rule(self, effect: RuleEffect, kind: str, match: str, scope: str) -> Rule:
        """Creates a rule; `scope` is "session:<id>" or "workspace:<absolute root>". A
        workspace rule is stored durably before this returns."""
        response = await self._transport.unary(
            self._stub.CreateRule,
            approval_service_pb2.CreateRuleRequest(
                effect=rule_effect_to_proto(RuleEffect(effect)),
                kind=kind,
                match=match,
                scope=scope,
            ),
        )
        if not response.HasField("rule"):
            raise ProtocolError("The server answered CreateRule without the rule.")
        return rule_from_proto(response.rule)

    async def delete_rule(self, rule_id: str) -> None:
        """Deletes a session or workspace rule; a config rule raises `RuleReadOnlyError`."""
        await self._transport.unary(
            self._stub.DeleteRule, approval_service_pb2.DeleteRuleRequest(rule_id=rule_id)
        )
