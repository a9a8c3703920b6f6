"""Every approver decides exactly what it was shown.

The rules a "session" or "always" decision saves are part of the call's digest, and a decision
saves only rules that were offered for that digest: an approver (or anything holding its token)
cannot slip a wider rule into a decision. A batch is one session's turn: DecideBatch refuses a
list of calls from several sessions, so no other session's call rides along with a click.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from callgate.server.core.calls import compute_digest
from callgate.server.core.models import Requirement, RuleCandidate
from callgate.server.core.tool import Artifact, Prepared
from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.support.approvals import Watcher, approver
from tests.support.calls import open_session, prepare
from tests.support.server import Harness, serve
from tests.support.status import failure

pytestmark = pytest.mark.anyio

COMMAND = "git log --oneline"
ALWAYS = apb.DECISION_KIND_APPROVE_ALWAYS


async def _pending(harness: Harness, command: str = COMMAND) -> tuple[str, apb.PendingApproval]:
    watcher = Watcher(approver(harness))
    session = await open_session(harness.stub())
    call = await prepare(harness.stub(), session, "Bash", {"command": command}, evaluate=True)
    assert call.state == cpb.STATE_AWAITING_APPROVAL
    pending = await watcher.approval(call.execution_id)
    watcher.cancel()
    return session, pending


async def _rules(harness: Harness) -> list[str]:
    listed = await approver(harness).ListRules(apb.ListRulesRequest())
    return [rule.match for rule in listed.rules]


async def test_a_decision_saving_a_rule_that_was_not_offered_is_refused(tmp_path: Path) -> None:
    """An "always" decision naming a rule that was not among the call's candidates is refused
    (RULE_NOT_OFFERED): the call stays pending and no rule is saved."""
    async with serve(tmp_path) as harness:
        session, pending = await _pending(harness)
        offered = {(c.kind, c.match) for c in pending.candidates}
        assert ("command.execute", "Bash(git log:*)") in offered
        before = await _rules(harness)
        for wider in ("Bash(git:*)", "Bash(id:*)", "rm -rf ."):
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await approver(harness).Decide(
                    apb.DecideRequest(
                        execution_id=pending.call.execution_id,
                        digest=pending.call.digest,
                        kind=ALWAYS,
                        rules=[apb.RuleCandidate(kind="command.execute", match=wider)],
                    )
                )
            problem = failure(raised.value)
            assert (problem.code, problem.reason) == (
                grpc.StatusCode.FAILED_PRECONDITION,
                "RULE_NOT_OFFERED",
            )
        assert await _rules(harness) == before
        got = await harness.stub().GetCall(
            tpb.GetCallRequest(session_id=session, execution_id=pending.call.execution_id)
        )
        assert got.call.state == cpb.STATE_AWAITING_APPROVAL


async def test_a_decision_saves_exactly_the_offered_rules_it_names(tmp_path: Path) -> None:
    """Naming one of the offered rules saves that one only; naming none saves every offered
    one (what the terminal approver shows); rules with APPROVE_ONCE are refused."""
    async with serve(tmp_path) as harness:
        _, pending = await _pending(harness)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await approver(harness).Decide(
                apb.DecideRequest(
                    execution_id=pending.call.execution_id,
                    digest=pending.call.digest,
                    kind=apb.DECISION_KIND_APPROVE_ONCE,
                    rules=[apb.RuleCandidate(kind="command.execute", match="Bash(git log:*)")],
                )
            )
        assert failure(raised.value).reason == "REQUEST_INVALID"
        decided = await approver(harness).Decide(
            apb.DecideRequest(
                execution_id=pending.call.execution_id,
                digest=pending.call.digest,
                kind=apb.DECISION_KIND_APPROVE_FOR_SESSION,
                rules=[apb.RuleCandidate(kind="command.execute", match="Bash(git log:*)")],
            )
        )
        assert decided.call.state == cpb.STATE_APPROVED
        assert await _rules(harness) == ["Bash(git log:*)"]


def test_the_offered_rules_are_covered_by_the_digest() -> None:
    """Two calls that differ only in the rules a remembered decision would save have different
    digests, so an approval bound to one digest never saves the other's rules."""

    class Frozen(Artifact):
        command: str

    requirement = Requirement("command.execute", "", COMMAND, "run a command")

    def prepared(candidates: tuple[RuleCandidate, ...]) -> Prepared:
        return Prepared(
            summary="Bash: " + COMMAND,
            requirements=(requirement,),
            artifact=Frozen(command=COMMAND),
            candidates=candidates,
        )

    exact = RuleCandidate("command.execute", COMMAND, "exactly this command")
    family = RuleCandidate("command.execute", "Bash(git log:*)", "git log, read-only options")
    digests = {
        compute_digest("Bash", prepared(offered))
        for offered in ((exact,), (exact, family), (family,))
    }
    assert len(digests) == 3


async def test_a_batch_of_calls_from_two_sessions_is_refused(tmp_path: Path) -> None:
    """DecideBatch with calls of two sessions (the same batch_id in both) is refused
    (BATCH_SPANS_SESSIONS) and decides nothing."""
    async with serve(tmp_path) as harness:
        stub = harness.stub()
        calls = []
        for _ in range(2):
            session = await open_session(stub)
            call = await prepare(
                stub, session, "Bash", {"command": "make"}, evaluate=True, batch_id="turn-1"
            )
            assert call.state == cpb.STATE_AWAITING_APPROVAL
            calls.append((session, call))
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await approver(harness).DecideBatch(
                apb.DecideBatchRequest(
                    requests=[
                        apb.DecideRequest(
                            execution_id=call.execution_id,
                            digest=call.digest,
                            kind=apb.DECISION_KIND_APPROVE_ONCE,
                        )
                        for _, call in calls
                    ]
                )
            )
        problem = failure(raised.value)
        assert (problem.code, problem.reason) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "BATCH_SPANS_SESSIONS",
        )
        for session, call in calls:
            got = await stub.GetCall(
                tpb.GetCallRequest(session_id=session, execution_id=call.execution_id)
            )
            assert got.call.state == cpb.STATE_AWAITING_APPROVAL


async def test_a_pending_approval_is_fetched_whole_by_an_approver_only(tmp_path: Path) -> None:
    """GetPendingApproval returns the call as WatchApprovals showed it (its preview included)
    to an approver; an unknown or decided call is CALL_NOT_FOUND; the agent's token is refused."""
    async with serve(tmp_path) as harness:
        _, pending = await _pending(harness)
        got = await approver(harness).GetPendingApproval(
            apb.GetPendingApprovalRequest(execution_id=pending.call.execution_id)
        )
        assert got.approval.call.digest == pending.call.digest
        assert got.approval.call.preview.text == pending.call.preview.text
        assert list(got.approval.candidates) == list(pending.candidates)
        for role, execution_id, expected in (
            ("approver", "call_unknown", (grpc.StatusCode.NOT_FOUND, "CALL_NOT_FOUND")),
            (
                "agent",
                pending.call.execution_id,
                (grpc.StatusCode.PERMISSION_DENIED, "ROLE_REQUIRED"),
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await approver(harness, role).GetPendingApproval(
                    apb.GetPendingApprovalRequest(execution_id=execution_id)
                )
            problem = failure(raised.value)
            assert (problem.code, problem.reason) == expected


async def test_a_chosen_rule_is_matched_exactly_never_resolved_again(tmp_path: Path) -> None:
    """The approver chooses the narrow `tree:<ws>/sub` of the rules offered; the agent has
    since swapped `sub` for a symlink to the workspace. What is saved is exactly the rule chosen,
    never the broader `tree:<ws>` that resolving the choice again would give."""
    async with serve(tmp_path) as harness:
        (harness.workspace / "sub").mkdir()
        watcher = Watcher(approver(harness))
        session = await open_session(harness.stub())
        arguments: dict[str, object] = {
            "command": "echo hi",
            "access": {"write": ["tree:sub", "tree:."]},
        }
        call = await prepare(harness.stub(), session, "Bash", arguments, evaluate=True)
        pending = await watcher.approval(call.execution_id)
        watcher.cancel()
        root = str(harness.workspace.resolve())
        offered = {c.match for c in pending.candidates if c.kind == "filesystem.write"}
        assert {f"tree:{root}/sub", f"tree:{root}"} <= offered
        (harness.workspace / "sub").rmdir()
        (harness.workspace / "sub").symlink_to(harness.workspace)
        await approver(harness).Decide(
            apb.DecideRequest(
                execution_id=call.execution_id,
                digest=call.digest,
                kind=apb.DECISION_KIND_APPROVE_FOR_SESSION,
                rules=[apb.RuleCandidate(kind="filesystem.write", match=f"tree:{root}/sub")],
            )
        )
        assert await _rules(harness) == [f"tree:{root}/sub"]
