"""The human approval channel end to end: WatchApprovals, Decide, Approve(wait), WatchCall and
remembered rules, through real servers and the generated stubs."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Sequence
from pathlib import Path

import anyio
import grpc
import pytest

from callgate.server.core.rules import Rule
from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.support.approvals import Watcher, approver, decide, watch_call
from tests.support.calls import invoke, open_session, prepare
from tests.support.sandbox import needs_bwrap
from tests.support.server import Harness, serve
from tests.support.status import failure

pytestmark = pytest.mark.anyio

ONCE = apb.DECISION_KIND_APPROVE_ONCE
SESSION = apb.DECISION_KIND_APPROVE_FOR_SESSION
ALWAYS = apb.DECISION_KIND_APPROVE_ALWAYS
DENY = apb.DECISION_KIND_DENY


def _write(path: str = "a.txt", content: str = "hello") -> dict[str, object]:
    return {"path": path, "content": content}


async def _gated_write(harness: Harness, session_id: str, path: str = "a.txt") -> cpb.ToolCall:
    call = await prepare(harness.stub(), session_id, "WriteFile", _write(path), evaluate=True)
    assert call.state == cpb.STATE_AWAITING_APPROVAL
    return call


async def test_approve_once_runs_the_call_and_the_next_identical_call_waits_again(
    harness: Harness,
) -> None:
    """The approver sees the exact path and digest, approves once; only that call is approved."""
    stub = harness.stub()
    session_id = await open_session(stub)
    watcher = Watcher(approver(harness))
    call = await _gated_write(harness, session_id)
    pending = await watcher.approval(call.execution_id)
    target = os.path.realpath(harness.workspace / "a.txt")
    assert pending.call.digest == call.digest
    assert pending.call.tool_name == "WriteFile"
    assert [r.match for r in pending.unmet] == [target]
    assert [(c.kind, c.match) for c in pending.candidates] == [("filesystem.write", target)]
    assert pending.requested_by == "agent"
    assert pending.workspace == os.path.realpath(harness.workspace)
    assert pending.HasField("deadline")

    decided = await decide(approver(harness), pending.call, ONCE)
    assert decided.state == cpb.STATE_APPROVED
    assert decided.decision.decided_by == "approver"
    assert list(decided.decision.rule_ids) == []
    assert (await watcher.resolved(call.execution_id)).state == cpb.STATE_APPROVED

    result = await invoke(stub, session_id, call.execution_id)
    assert result.call.state == cpb.STATE_SUCCEEDED
    assert (harness.workspace / "a.txt").read_text() == "hello"
    again = await prepare(stub, session_id, "WriteFile", _write("b.txt"), evaluate=True)
    assert again.state == cpb.STATE_AWAITING_APPROVAL
    same = await _gated_write(harness, session_id, "c.txt")
    assert same.state == cpb.STATE_AWAITING_APPROVAL


async def test_watch_approvals_sends_current_items_first_then_new_ones(harness: Harness) -> None:
    """A new watcher gets what is pending now (oldest first), then each new approval."""
    session_id = await open_session(harness.stub())
    first = await _gated_write(harness, session_id, "1.txt")
    second = await _gated_write(harness, session_id, "2.txt")
    watcher = Watcher(approver(harness))
    assert (await watcher.next()).approval.call.execution_id == first.execution_id
    assert (await watcher.next()).approval.call.execution_id == second.execution_id
    third = await _gated_write(harness, session_id, "3.txt")
    assert (await watcher.next()).approval.call.execution_id == third.execution_id
    await harness.stub().CancelCall(
        tpb.CancelCallRequest(session_id=session_id, execution_id=first.execution_id)
    )
    resolved = (await watcher.next()).resolved
    assert (resolved.execution_id, resolved.state) == (first.execution_id, cpb.STATE_CANCELLED)


async def test_approve_with_wait_is_woken_by_the_decision(harness: Harness) -> None:
    """Approve(wait) returns as soon as an approver decides, with the approved call."""
    stub = harness.stub()
    session_id = await open_session(stub)
    call = await _gated_write(harness, session_id)
    results: list[cpb.ToolCall] = []

    async def wait_for_decision() -> None:
        request = tpb.ApproveRequest(session_id=session_id, execution_id=call.execution_id)
        request.wait.seconds = 30
        results.append((await stub.Approve(request, timeout=10)).call)

    watcher = Watcher(approver(harness))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(wait_for_decision)
            await watcher.approval(call.execution_id)
            await decide(approver(harness, "admin"), call, ONCE)
    assert results[0].state == cpb.STATE_APPROVED
    assert results[0].decision.decided_by == "admin"


async def test_deny_records_the_approver_and_shows_the_note_to_the_agent(harness: Harness) -> None:
    """DENY leaves the call DENIED / APPROVER_DENIED with the note in the description."""
    stub = harness.stub()
    session_id = await open_session(stub)
    call = await _gated_write(harness, session_id)
    denied = await decide(approver(harness), call, DENY, note="write to b.txt instead")
    assert denied.state == cpb.STATE_DENIED
    assert denied.denial.kind == cpb.DENIAL_KIND_APPROVER_DENIED
    assert "write to b.txt instead" in denied.denial.description
    assert denied.decision.decided_by == "approver"
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await invoke(stub, session_id, call.execution_id)
    assert failure(raised.value).reason == "CALL_DENIED"
    assert not (harness.workspace / "a.txt").exists()


async def test_digest_mismatch_leaves_the_call_untouched(harness: Harness) -> None:
    """A decision on another digest is refused with DIGEST_MISMATCH; the call still waits."""
    stub = harness.stub()
    session_id = await open_session(stub)
    call = await _gated_write(harness, session_id)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await approver(harness).Decide(
            apb.DecideRequest(execution_id=call.execution_id, digest="0" * 64, kind=ONCE)
        )
    problem = failure(raised.value)
    assert (problem.code, problem.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "DIGEST_MISMATCH",
    )
    now = await stub.GetCall(
        tpb.GetCallRequest(session_id=session_id, execution_id=call.execution_id)
    )
    assert now.call.state == cpb.STATE_AWAITING_APPROVAL


async def test_approval_timeout_denies_and_resolves_the_pending_item(tmp_path: Path) -> None:
    """Past approval.timeout the call is DENIED / APPROVAL_TIMEOUT, watchers see it resolved,
    and WatchCall ends with the denied call."""
    async with serve(tmp_path, approval={"timeout_seconds": 0.3}) as harness:
        stub = harness.stub()
        session_id = await open_session(stub)
        watcher = Watcher(approver(harness))
        call = await _gated_write(harness, session_id)
        states = await watch_call(stub, session_id, call.execution_id)
        assert [c.state for c in states] == [cpb.STATE_AWAITING_APPROVAL, cpb.STATE_DENIED]
        assert states[-1].denial.kind == cpb.DENIAL_KIND_APPROVAL_TIMEOUT
        assert (await watcher.resolved(call.execution_id)).state == cpb.STATE_DENIED

        other = await _gated_write(harness, session_id, "b.txt")
        request = tpb.ApproveRequest(session_id=session_id, execution_id=other.execution_id)
        request.wait.seconds = 30
        with anyio.fail_after(5):
            waited = (await stub.Approve(request)).call
        assert waited.state == cpb.STATE_DENIED
        assert waited.denial.kind == cpb.DENIAL_KIND_APPROVAL_TIMEOUT
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await decide(approver(harness), other, ONCE)
        assert failure(raised.value).reason == "CALL_STATE_INVALID"


async def test_headless_denies_gated_calls_at_once(headless: Harness) -> None:
    """Headless mode never waits: a gated call is DENIED / APPROVAL_REQUIRED."""
    session_id = await open_session(headless.stub())
    call = await prepare(headless.stub(), session_id, "WriteFile", _write(), evaluate=True)
    assert call.state == cpb.STATE_DENIED
    assert call.denial.kind == cpb.DENIAL_KIND_APPROVAL_REQUIRED


async def test_approve_for_session_covers_the_session_only(harness: Harness) -> None:
    """APPROVE_FOR_SESSION saves session rules: the same call is approved by policy in that
    session, not in another; the rules go away with the session."""
    stub = harness.stub()
    session_id = await open_session(stub)
    call = await _gated_write(harness, session_id)
    decided = await decide(approver(harness), call, SESSION)
    assert decided.state == cpb.STATE_APPROVED
    assert len(decided.decision.rule_ids) == 1
    rules = (await approver(harness).ListRules(apb.ListRulesRequest(session_id=session_id))).rules
    assert [(r.rule_id, r.scope, r.origin) for r in rules] == [
        (decided.decision.rule_ids[0], f"session:{session_id}", "approver")
    ]

    again = await prepare(stub, session_id, "WriteFile", _write(), evaluate=True)
    assert again.state == cpb.STATE_APPROVED
    assert again.decision.decided_by == "policy"
    assert list(again.decision.rule_ids) == list(decided.decision.rule_ids)
    other_session = await open_session(stub)
    assert (await _gated_write(harness, other_session)).state == cpb.STATE_AWAITING_APPROVAL

    await stub.CloseSession(tpb.CloseSessionRequest(session_id=session_id))
    remaining = (await approver(harness).ListRules(apb.ListRulesRequest())).rules
    assert list(remaining) == []


async def test_a_new_session_rule_approves_identical_pending_calls(harness: Harness) -> None:
    """Rules saved by a decision also settle other pending calls they now cover."""
    stub = harness.stub()
    session_id = await open_session(stub)
    first = await _gated_write(harness, session_id)
    second = await _gated_write(harness, session_id)
    await decide(approver(harness), first, SESSION)
    now = await stub.GetCall(
        tpb.GetCallRequest(session_id=session_id, execution_id=second.execution_id)
    )
    assert now.call.state == cpb.STATE_APPROVED
    assert now.call.decision.decided_by == "policy"


async def test_approve_always_is_persisted_and_survives_a_restart(tmp_path: Path) -> None:
    """APPROVE_ALWAYS persists workspace rules; after a restart they are listed and cover the
    same call in a new session."""
    async with serve(tmp_path) as harness:
        session_id = await open_session(harness.stub())
        call = await _gated_write(harness, session_id)
        decided = await decide(approver(harness), call, ALWAYS)
        assert decided.state == cpb.STATE_APPROVED
        (rule_id,) = decided.decision.rule_ids
        workspace = os.path.realpath(harness.workspace)
    async with serve(tmp_path) as harness:
        rules = (await approver(harness).ListRules(apb.ListRulesRequest())).rules
        assert [(r.rule_id, r.scope, r.origin, r.kind) for r in rules] == [
            (rule_id, f"workspace:{workspace}", "approver", "filesystem.write")
        ]
        session_id = await open_session(harness.stub())
        again = await prepare(harness.stub(), session_id, "WriteFile", _write(), evaluate=True)
        assert again.state == cpb.STATE_APPROVED
        assert list(again.decision.rule_ids) == [rule_id]


class _FailingStore:
    async def add(self, rules: Sequence[Rule]) -> None:
        raise OSError("disk full")

    async def delete(self, rule_id: str) -> None:
        raise OSError("disk full")


async def test_approve_always_approves_nothing_when_the_rules_cannot_be_stored(
    harness: Harness,
) -> None:
    """A failed rule write fails the decision: no rule, the call still awaits approval."""
    harness.app.approvals.store = _FailingStore()
    session_id = await open_session(harness.stub())
    call = await _gated_write(harness, session_id)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await decide(approver(harness), call, ALWAYS)
    assert failure(raised.value).code == grpc.StatusCode.INTERNAL
    assert list((await approver(harness).ListRules(apb.ListRulesRequest())).rules) == []
    now = await harness.stub().GetCall(
        tpb.GetCallRequest(session_id=session_id, execution_id=call.execution_id)
    )
    assert now.call.state == cpb.STATE_AWAITING_APPROVAL
    assert (await decide(approver(harness), call, ONCE)).state == cpb.STATE_APPROVED


async def test_deny_rules_beat_remembered_allow_rules(harness: Harness) -> None:
    """A deny rule refuses a call that a remembered (always) allow rule covers."""
    session_id = await open_session(harness.stub())
    call = await _gated_write(harness, session_id)
    await decide(approver(harness), call, ALWAYS)
    await approver(harness).CreateRule(
        apb.CreateRuleRequest(
            effect=apb.RULE_EFFECT_DENY,
            kind="filesystem.write",
            match=f"tree:{os.path.realpath(harness.workspace)}",
            scope=f"session:{session_id}",
        )
    )
    again = await prepare(harness.stub(), session_id, "WriteFile", _write(), evaluate=True)
    assert again.state == cpb.STATE_DENIED
    assert again.denial.kind == cpb.DENIAL_KIND_REFUSED
    # The remembered allow rule is still there; the deny rule simply wins.
    assert len((await approver(harness).ListRules(apb.ListRulesRequest())).rules) == 2


async def test_candidates_never_widen_to_any_command_or_path(harness: Harness) -> None:
    """Bash candidates are the exact command and a narrow family at most; a shell gets only
    the exact command; the approver sees the command and its working directory."""
    (harness.workspace / "sub").mkdir()
    session_id = await open_session(harness.stub())
    watcher = Watcher(approver(harness))
    git = await prepare(
        harness.stub(),
        session_id,
        "Bash",
        {"command": "git log --oneline", "workdir": "sub"},
        evaluate=True,
    )
    pending = await watcher.approval(git.execution_id)
    assert pending.command == "git log --oneline"
    assert pending.working_directory == os.path.realpath(harness.workspace / "sub")
    assert [c.match for c in pending.candidates] == ["git log --oneline", "Bash(git log:*)"]
    shell = await prepare(
        harness.stub(), session_id, "Bash", {"command": "bash -c 'ls /'"}, evaluate=True
    )
    pending = await watcher.approval(shell.execution_id)
    assert [c.match for c in pending.candidates] == [pending.command]
    for candidate in pending.candidates:
        assert candidate.match not in ("*", "/", "tree:/", "Bash(*)")


@needs_bwrap
async def test_only_candidates_for_unmet_requirements_are_offered(tmp_path: Path) -> None:
    """When the command is already allowed, only the network declaration is offered."""
    rule = {"effect": "allow", "kind": "command.execute", "match": "Bash(curl:*)"}
    # A family allows by itself only where the sandbox holds it.
    async with serve(tmp_path, rules=[rule], sandbox="bwrap") as harness:
        session_id = await open_session(harness.stub())
        watcher = Watcher(approver(harness))
        call = await prepare(
            harness.stub(),
            session_id,
            "Bash",
            {"command": "curl https://example.com", "access": {"network": ["example.com:443"]}},
            evaluate=True,
        )
        pending = await watcher.approval(call.execution_id)
        assert [(r.kind, r.match) for r in pending.unmet] == [("network", "tcp://example.com:443")]
        assert [(c.kind, c.match) for c in pending.candidates] == [
            ("network", "Network(example.com:443)")
        ]


async def test_two_approvers_deciding_twenty_agents_calls_decide_each_exactly_once(
    harness: Harness,
) -> None:
    """20 agents' pending calls, 2 approvers deciding all at once: one decision per call."""
    agents = [harness.stub() for _ in range(20)]
    sessions = [await open_session(stub) for stub in agents]
    calls: list[cpb.ToolCall] = []

    async def agent(index: int) -> None:
        calls.append(await _gated_write(harness, sessions[index], f"f{index}.txt"))

    async with anyio.create_task_group() as tasks:
        for index in range(20):
            tasks.start_soon(agent, index)
    wins: dict[str, list[str]] = {c.execution_id: [] for c in calls}
    losses: dict[str, list[str]] = {c.execution_id: [] for c in calls}

    async def approve_all(role: str, kind: apb.DecisionKind.ValueType) -> None:
        stub = approver(harness, role)
        watcher = Watcher(stub)
        pending = [await watcher.approval() for _ in range(20)]
        watcher.cancel()

        async def one(item: apb.PendingApproval) -> None:
            try:
                decided = await decide(stub, item.call, kind)
            except grpc.aio.AioRpcError as error:
                losses[item.call.execution_id].append(failure(error).reason)
            else:
                wins[item.call.execution_id].append(decided.decision.decided_by)

        async with anyio.create_task_group() as inner:
            for item in pending:
                inner.start_soon(one, item)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(approve_all, "approver", ONCE)
            tasks.start_soon(approve_all, "admin", DENY)
    assert all(len(w) == 1 for w in wins.values()), wins
    assert all(n == ["CALL_STATE_INVALID"] for n in losses.values()), losses
    for call in calls:
        session_id = call.session_id
        final = (
            await agents[0].GetCall(
                tpb.GetCallRequest(session_id=session_id, execution_id=call.execution_id)
            )
        ).call
        winner = wins[call.execution_id][0]
        assert final.decision.decided_by == winner
        expected = cpb.STATE_APPROVED if winner == "approver" else cpb.STATE_DENIED
        assert final.state == expected


async def test_watch_call_streams_changes_and_ends_after_the_terminal_state(
    harness: Harness,
) -> None:
    """WatchCall sends the current call, every change, and ends after SUCCEEDED."""
    stub = harness.stub()
    session_id = await open_session(stub)
    call = await _gated_write(harness, session_id)
    seen: list[list[cpb.ToolCall]] = []

    async def watch() -> None:
        seen.append(await watch_call(stub, session_id, call.execution_id))

    watcher = Watcher(approver(harness))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(watch)
        await watcher.approval(call.execution_id)
        await decide(approver(harness), call, ONCE)
        await invoke(stub, session_id, call.execution_id)
    states = [c.state for c in seen[0]]
    assert states[0] == cpb.STATE_AWAITING_APPROVAL
    assert states[-1] == cpb.STATE_SUCCEEDED
    assert cpb.STATE_APPROVED in states
    assert len(states) == len(set(states))


async def test_watch_call_of_another_session_is_not_found(harness: Harness) -> None:
    """A call is invisible from another session and to another principal."""
    stub = harness.stub()
    session_id = await open_session(stub)
    other = await open_session(stub)
    call = await _gated_write(harness, session_id)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await watch_call(stub, other, call.execution_id)
    assert failure(raised.value).reason == "CALL_NOT_FOUND"
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await watch_call(harness.stub("approver"), session_id, call.execution_id)
    assert failure(raised.value).code in (
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.PERMISSION_DENIED,
    )


async def test_an_agent_cannot_reach_any_approver_method(harness: Harness) -> None:
    """Every ApprovalService method refuses an agent with PERMISSION_DENIED / ROLE_REQUIRED."""
    stub = approver(harness, "agent")
    attempts: list[Awaitable[object]] = [
        stub.Decide(apb.DecideRequest(execution_id="x", digest="y", kind=ONCE)),
        stub.Answer(apb.AnswerRequest(execution_id="x", answer="y")),
        stub.ListRules(apb.ListRulesRequest()),
        stub.CreateRule(apb.CreateRuleRequest()),
        stub.DeleteRule(apb.DeleteRuleRequest(rule_id="x")),
    ]
    for attempt in attempts:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await attempt
        problem = failure(raised.value)
        assert (problem.code, problem.reason) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "ROLE_REQUIRED",
        )
    watcher = Watcher(stub)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await watcher.next()
    assert failure(raised.value).reason == "ROLE_REQUIRED"


@pytest.mark.parametrize(
    ("request_fields", "code", "reason", "field"),
    [
        ({"execution_id": "", "digest": "d", "kind": ONCE}, "INVALID_ARGUMENT", "REQUEST_INVALID",
         "execution_id"),
        ({"execution_id": "call_x", "digest": "", "kind": ONCE}, "INVALID_ARGUMENT",
         "REQUEST_INVALID", "digest"),
        ({"execution_id": "call_x", "digest": "d"}, "INVALID_ARGUMENT", "REQUEST_INVALID",
         "kind"),
        ({"execution_id": "call_x", "digest": "d", "kind": ONCE}, "NOT_FOUND", "CALL_NOT_FOUND",
         None),
    ],
)  # fmt: skip
async def test_bad_decide_requests_fail_clearly(
    harness: Harness, request_fields: dict[str, object], code: str, reason: str, field: str | None
) -> None:
    """Missing fields and unknown calls get stable codes, reasons and field violations."""
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await approver(harness).Decide(apb.DecideRequest(**request_fields))  # type: ignore[arg-type]
    problem = failure(raised.value)
    assert (problem.code.name, problem.reason) == (code, reason)
    if field is not None:
        assert problem.fields == [field]
