"""ApprovalService rule management: ListRules, CreateRule, DeleteRule."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest

from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.support.approvals import approver
from tests.support.calls import open_session, prepare
from tests.support.server import Harness, serve
from tests.support.status import failure

pytestmark = pytest.mark.anyio


def _rule(match: str, scope: str, kind: str = "filesystem.write") -> apb.CreateRuleRequest:
    return apb.CreateRuleRequest(effect=apb.RULE_EFFECT_ALLOW, kind=kind, match=match, scope=scope)


async def test_session_rules_are_created_listed_and_deleted(harness: Harness) -> None:
    """A session rule covers the session's calls until it is deleted."""
    session_id = await open_session(harness.stub())
    target = os.path.realpath(harness.workspace / "a.txt")
    stub = approver(harness)
    rule = (await stub.CreateRule(_rule(target, f"session:{session_id}"))).rule
    assert (rule.kind, rule.match, rule.origin) == ("filesystem.write", target, "approver")
    listed = (await stub.ListRules(apb.ListRulesRequest(session_id=session_id))).rules
    assert [r.rule_id for r in listed] == [rule.rule_id]
    args: dict[str, object] = {"path": "a.txt", "content": "x"}
    call = await prepare(harness.stub(), session_id, "WriteFile", args, evaluate=True)
    assert call.state == cpb.STATE_APPROVED
    await stub.DeleteRule(apb.DeleteRuleRequest(rule_id=rule.rule_id))
    call = await prepare(harness.stub(), session_id, "WriteFile", args, evaluate=True)
    assert call.state == cpb.STATE_AWAITING_APPROVAL
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.DeleteRule(apb.DeleteRuleRequest(rule_id=rule.rule_id))
    problem = failure(raised.value)
    assert (problem.code, problem.reason) == (grpc.StatusCode.NOT_FOUND, "RULE_NOT_FOUND")


async def test_workspace_rules_are_persisted_and_deletion_too(tmp_path: Path) -> None:
    """A workspace rule survives a restart; a deleted one does not come back."""
    async with serve(tmp_path) as harness:
        root = os.path.realpath(harness.workspace)
        stub = approver(harness, "admin")
        kept = (await stub.CreateRule(_rule(f"tree:{root}/src", f"workspace:{root}"))).rule
        dropped = (await stub.CreateRule(_rule(f"{root}/x", f"workspace:{root}"))).rule
        await stub.DeleteRule(apb.DeleteRuleRequest(rule_id=dropped.rule_id))
    async with serve(tmp_path) as harness:
        rules = (await approver(harness).ListRules(apb.ListRulesRequest())).rules
        assert [(r.rule_id, r.match, r.origin) for r in rules] == [
            (kept.rule_id, f"tree:{root}/src", "admin")
        ]


async def test_config_rules_are_listed_and_read_only(tmp_path: Path) -> None:
    """Config rules are listed with origin config and cannot be deleted."""
    config_rule = {"effect": "deny", "kind": "network", "match": "tcp://evil.example:*"}
    async with serve(tmp_path, rules=[config_rule]) as harness:
        stub = approver(harness)
        (rule,) = (await stub.ListRules(apb.ListRulesRequest())).rules
        assert (rule.origin, rule.scope, rule.effect) == ("config", "", apb.RULE_EFFECT_DENY)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.DeleteRule(apb.DeleteRuleRequest(rule_id=rule.rule_id))
        problem = failure(raised.value)
        assert (problem.code, problem.reason) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "RULE_READ_ONLY",
        )


async def test_a_created_rule_settles_pending_calls_it_covers(harness: Harness) -> None:
    """A new allow rule approves the pending calls it now covers."""
    session_id = await open_session(harness.stub())
    args: dict[str, object] = {"path": "a.txt", "content": "x"}
    call = await prepare(harness.stub(), session_id, "WriteFile", args, evaluate=True)
    assert call.state == cpb.STATE_AWAITING_APPROVAL
    target = os.path.realpath(harness.workspace / "a.txt")
    await approver(harness).CreateRule(_rule(target, f"session:{session_id}"))
    now = await harness.stub().GetCall(
        tpb.GetCallRequest(session_id=session_id, execution_id=call.execution_id)
    )
    assert now.call.state == cpb.STATE_APPROVED


@pytest.mark.parametrize(
    ("effect", "kind", "match", "scope", "field"),
    [
        (apb.RULE_EFFECT_UNSPECIFIED, "filesystem.write", "/x", "SESSION", "effect"),
        (apb.RULE_EFFECT_ALLOW, "filesystem.erase", "/x", "SESSION", "kind"),
        (apb.RULE_EFFECT_ALLOW, "filesystem.write", "relative/path", "SESSION", "match"),
        (apb.RULE_EFFECT_ALLOW, "network", "example.com", "SESSION", "match"),
        (apb.RULE_EFFECT_ALLOW, "command.execute", "Bash(:*)", "SESSION", "match"),
        (apb.RULE_EFFECT_ALLOW, "filesystem.write", "/x", "", "scope"),
        (apb.RULE_EFFECT_ALLOW, "filesystem.write", "/x", "session:ses_unknown", "scope"),
        (apb.RULE_EFFECT_ALLOW, "filesystem.write", "/x", "workspace:relative", "scope"),
        (apb.RULE_EFFECT_ALLOW, "filesystem.write", "/x", "workspace:/", "scope"),
        (apb.RULE_EFFECT_ALLOW, "filesystem.write", "/x", "WORKSPACE/../ws", "scope"),
    ],
)
async def test_bad_rules_are_refused_with_a_field_violation(
    harness: Harness, effect: int, kind: str, match: str, scope: str, field: str
) -> None:
    """Bad effects, kinds, patterns and scopes are INVALID_ARGUMENT / REQUEST_INVALID."""
    session_id = await open_session(harness.stub())
    root = os.path.realpath(harness.workspace)
    scope = scope.replace("SESSION", f"session:{session_id}").replace(
        "WORKSPACE", f"workspace:{root}"
    )
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await approver(harness).CreateRule(
            apb.CreateRuleRequest(effect=effect, kind=kind, match=match, scope=scope)  # type: ignore[arg-type]
        )
    problem = failure(raised.value)
    assert (problem.code, problem.reason, problem.fields) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "REQUEST_INVALID",
        [field],
    )
