"""Skill end to end: gated by default, allowed by a context.load rule, snapshot semantics,
the per-session ListTools description and refused input, through a real server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import grpc
import pytest

from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.support.calls import invoke, open_session, prepare
from tests.support.server import Harness, serve
from tests.support.status import failure

pytestmark = pytest.mark.anyio


def write_skill(root: Path, name: str, description: str = "Does things.", body: str = "") -> Path:
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "SKILL.md"
    path.write_text(f"---\nname: {name}\ndescription: {description}\n---\n{body}")
    return path


def allow(*names: str) -> list[dict[str, str]]:
    """Config rules that allow loading exactly these skills."""
    return [{"effect": "allow", "kind": "context.load", "match": f"skill:{n}"} for n in names]


async def test_loading_a_skill_is_gated_by_default(harness: Harness) -> None:
    """Interactive: AWAITING_APPROVAL with the context.load requirement and its candidate."""
    write_skill(harness.workspace / ".skills", "deploy")
    session_id = await open_session(harness.stub())
    call = await prepare(harness.stub(), session_id, "Skill", {"name": "deploy"}, evaluate=True)
    assert call.state == cpb.STATE_AWAITING_APPROVAL
    assert call.summary == "Skill deploy"
    assert [(r.kind, r.match) for r in call.requirements] == [("context.load", "skill:deploy")]


async def test_headless_denies_an_unapproved_skill(headless: Harness) -> None:
    """Headless: no approver, so a gated skill is DENIED (approval required) at once."""
    write_skill(headless.workspace / ".skills", "deploy")
    session_id = await open_session(headless.stub())
    call = await prepare(headless.stub(), session_id, "Skill", {"name": "deploy"}, evaluate=True)
    assert call.state == cpb.STATE_DENIED
    assert call.denial.kind == cpb.DENIAL_KIND_APPROVAL_REQUIRED


async def test_an_allowed_skill_returns_the_body_snapshotted_at_prepare(tmp_path: Path) -> None:
    """With an allow rule the call is approved; editing SKILL.md after Prepare changes nothing."""
    async with serve(tmp_path, rules=allow("deploy")) as harness:
        path = write_skill(harness.workspace / ".skills", "deploy", body="original\n")
        session_id = await open_session(harness.stub())
        call = await prepare(harness.stub(), session_id, "Skill", {"name": "deploy"}, evaluate=True)
        assert call.state == cpb.STATE_APPROVED
        path.write_text("---\nname: deploy\ndescription: Changed.\n---\nchanged\n")
        result = await invoke(harness.stub(), session_id, call.execution_id)
        assert result.call.state == cpb.STATE_SUCCEEDED
        assert result.result.text == "original\n"
        assert json.loads(result.result.json)["description"] == "Does things."


async def test_an_allow_rule_covers_only_its_own_skill(tmp_path: Path) -> None:
    """skill:deploy does not approve skill:other."""
    async with serve(tmp_path, rules=allow("deploy")) as harness:
        write_skill(harness.workspace / ".skills", "other")
        session_id = await open_session(harness.stub())
        call = await prepare(harness.stub(), session_id, "Skill", {"name": "other"}, evaluate=True)
        assert call.state == cpb.STATE_AWAITING_APPROVAL


async def test_the_configured_skills_directory_serves_skills(tmp_path: Path) -> None:
    """`[skills] directory` supplies skills the workspace does not have."""
    configured = tmp_path / "server-skills"
    write_skill(configured, "lint", "Lint the code.", "Run ruff.\n")
    async with serve(
        tmp_path, rules=allow("lint"), skills={"directory": str(configured)}
    ) as harness:
        session_id = await open_session(harness.stub())
        call = await prepare(harness.stub(), session_id, "Skill", {"name": "lint"}, evaluate=True)
        assert call.state == cpb.STATE_APPROVED
        assert call.requirements[0].description == "load skill lint (skills directory)"
        result = await invoke(harness.stub(), session_id, call.execution_id)
        assert result.result.text == "Run ruff.\n"


async def test_list_tools_describes_the_sessions_skills(harness: Harness) -> None:
    """The Skill tool's description lists the session workspace's valid skills, sorted."""
    write_skill(harness.workspace / ".skills", "zeta", "Last.")
    write_skill(harness.workspace / ".skills", "alpha", "First.")
    broken = harness.workspace / ".skills" / "broken"
    broken.mkdir()
    (broken / "SKILL.md").write_text("no front matter\n")
    session_id = await open_session(harness.stub())
    response = await harness.stub().ListTools(tpb.ListToolsRequest(session_id=session_id))
    (info,) = [tool for tool in response.tools if tool.name == "Skill"]
    assert list(info.requirement_kinds) == ["context.load"]
    listing = info.description.split("Available skills:\n", 1)[1].splitlines()
    assert listing == ["- alpha: First.", "- zeta: Last."]


async def test_list_tools_follows_each_sessions_workspace(tmp_path: Path) -> None:
    """Two sessions in different workspaces see their own skills."""
    other = Path(os.path.realpath(tmp_path / "other"))
    other.mkdir()
    write_skill(other / ".skills", "elsewhere", "Only in the other workspace.")
    async with serve(tmp_path, allowed_roots=[str(other)]) as harness:
        write_skill(harness.workspace / ".skills", "here", "Only in the main workspace.")
        stub = harness.stub()
        descriptions = []
        for workspace in ("", str(other)):
            session_id = await open_session(stub, workspace)
            response = await stub.ListTools(tpb.ListToolsRequest(session_id=session_id))
            (info,) = [tool for tool in response.tools if tool.name == "Skill"]
            descriptions.append(info.description)
        assert "- here:" in descriptions[0]
        assert "elsewhere" not in descriptions[0]
        assert "- elsewhere:" in descriptions[1]
        assert "- here:" not in descriptions[1]


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param('{"name": "Upper"}', id="bad-pattern"),
        pytest.param('{"name": "../x"}', id="traversal"),
        pytest.param('{"name": 1}', id="wrong-type"),
        pytest.param("{}", id="missing"),
        pytest.param('{"name": "absent"}', id="no-such-skill"),
        pytest.param('{"name": "linked"}', id="symlinked-skill"),
        pytest.param('{"name": "big"}', id="oversized"),
        pytest.param('{"name": "mismatch"}', id="name-mismatch"),
    ],
)
async def test_bad_skill_calls_are_arguments_invalid_on_name(
    harness: Harness, tmp_path: Path, arguments: str
) -> None:
    """Prepare answers INVALID_ARGUMENT / ARGUMENTS_INVALID with a violation on `name`."""
    skills = harness.workspace / ".skills"
    write_skill(tmp_path / "real", "linked")
    skills.mkdir()
    (skills / "linked").symlink_to(tmp_path / "real" / "linked")
    write_skill(skills, "big", body="x" * (64 << 10))
    path = write_skill(skills, "mismatch")
    path.write_text("---\nname: other\ndescription: d\n---\n")
    session_id = await open_session(harness.stub())
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await prepare(harness.stub(), session_id, "Skill", arguments, evaluate=True)
    problem = failure(raised.value)
    assert (problem.code, problem.reason) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "ARGUMENTS_INVALID",
    )
    assert problem.fields == ["arguments.name"]
    assert str(tmp_path / "real") not in problem.message
