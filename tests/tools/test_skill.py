"""Skill: sources and precedence, safe reading, front matter, snapshots and the listing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from callgate.server.core.definitions import Service
from callgate.server.core.errors import InvalidArgument
from callgate.server.core.models import RuleCandidate
from callgate.server.core.paths import DEFAULT_DENIED_GLOBS, ProtectedPaths, Workspace
from callgate.server.core.tool import SessionDescribed, ToolContext
from callgate.server.tools.catalog import skill_definition
from callgate.server.tools.registry import ToolRegistry
from callgate.server.tools.services import SkillSource
from callgate.server.tools.skill import (
    MAX_DESCRIPTION_CHARS,
    MAX_LISTED_SKILLS,
    MAX_SKILL_BYTES,
    Skill,
    SkillArtifact,
)
from tests.tools.drive import execute, invalid_field

pytestmark = pytest.mark.anyio


def skill_text(name: str, description: str = "Does things.", body: str = "Step one.\n") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}"


def write_skill(root: Path, name: str, text: str | None = None) -> Path:
    """Write `<root>/<name>/SKILL.md` (a well-formed skill unless `text` is given)."""
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "SKILL.md"
    path.write_text(skill_text(name) if text is None else text)
    return path


def refusal(tool: Skill, name: str, ctx: ToolContext) -> InvalidArgument:
    """Prepare must refuse with ARGUMENTS_INVALID on `name`; return the error."""
    with pytest.raises(InvalidArgument) as raised:
        tool.prepare({"name": name}, ctx)
    assert raised.value.reason == "ARGUMENTS_INVALID"
    assert [v.field for v in raised.value.violations] == ["arguments.name"]
    return raised.value


@pytest.fixture
def skills(workspace: Path) -> Path:
    return workspace / ".skills"


@pytest.fixture
def configured(tmp_path: Path) -> Path:
    path = tmp_path / "configured-skills"
    path.mkdir()
    return Path(os.path.realpath(path))


async def test_a_workspace_skill_loads_its_body(skills: Path, ctx: ToolContext) -> None:
    """The result text is the body after the front matter; JSON carries name and source."""
    write_skill(skills, "deploy", skill_text("deploy", "Ship it.", "Run make.\nThen push.\n"))
    result = await execute(Skill(), {"name": "deploy"}, ctx)
    assert not result.is_error
    assert result.text == "Run make.\nThen push.\n"
    assert json.loads(result.json) == {
        "name": "deploy",
        "description": "Ship it.",
        "source": "workspace",
    }


def test_prepare_requires_context_load_for_exactly_that_skill(
    skills: Path, ctx: ToolContext
) -> None:
    """One context.load requirement (scope "", match skill:<name>) and the same candidate."""
    write_skill(skills, "deploy")
    prepared = Skill().prepare({"name": "deploy"}, ctx)
    assert prepared.summary == "Skill deploy"
    (requirement,) = prepared.requirements
    assert (requirement.kind, requirement.scope, requirement.match) == (
        "context.load",
        "",
        "skill:deploy",
    )
    assert requirement.description == "load skill deploy (workspace)"
    assert prepared.candidates == (
        RuleCandidate("context.load", "skill:deploy", "load skill deploy (workspace)"),
    )


async def test_invoke_returns_the_body_snapshotted_at_prepare(
    skills: Path, ctx: ToolContext
) -> None:
    """Changing or deleting SKILL.md after Prepare does not change what Invoke returns."""
    path = write_skill(skills, "deploy", skill_text("deploy", body="original\n"))
    tool = Skill()
    prepared = tool.prepare({"name": "deploy"}, ctx)
    path.write_text(skill_text("deploy", body="changed\n"))
    assert (await tool.invoke(prepared.artifact, ctx)).text == "original\n"
    path.unlink()
    assert (await tool.invoke(prepared.artifact, ctx)).text == "original\n"
    assert isinstance(prepared.artifact, SkillArtifact)
    assert prepared.artifact.body == "original\n"


async def test_the_configured_directory_is_used_when_the_workspace_lacks_the_skill(
    configured: Path, ctx: ToolContext
) -> None:
    """A skill only in the configured directory loads, with that source in the requirement."""
    write_skill(configured, "lint", skill_text("lint", body="configured\n"))
    tool = Skill(str(configured))
    prepared = tool.prepare({"name": "lint"}, ctx)
    assert prepared.requirements[0].description == "load skill lint (skills directory)"
    assert (await tool.invoke(prepared.artifact, ctx)).text == "configured\n"


async def test_a_workspace_skill_shadows_the_configured_one(
    skills: Path, configured: Path, ctx: ToolContext
) -> None:
    """Workspace first: the same name in both sources loads the workspace's."""
    write_skill(skills, "lint", skill_text("lint", body="workspace\n"))
    write_skill(configured, "lint", skill_text("lint", body="configured\n"))
    result = await execute(Skill(str(configured)), {"name": "lint"}, ctx)
    assert result.text == "workspace\n"


def test_a_broken_workspace_skill_does_not_fall_back(
    skills: Path, configured: Path, ctx: ToolContext
) -> None:
    """A workspace skill that exists but is invalid is refused, not replaced."""
    write_skill(skills, "lint", "no front matter\n")
    write_skill(configured, "lint")
    refusal(Skill(str(configured)), "lint", ctx)


def test_a_missing_skill_is_refused_on_name(
    skills: Path, configured: Path, ctx: ToolContext
) -> None:
    """No source holds the skill → ARGUMENTS_INVALID on `name`, no host path in the text."""
    skills.mkdir()
    error = refusal(Skill(str(configured)), "absent", ctx)
    assert str(configured) not in str(error)


def test_no_skills_directory_at_all_is_a_missing_skill(ctx: ToolContext) -> None:
    """Without .skills and without a configured directory, every name is missing."""
    refusal(Skill(), "anything", ctx)


def test_a_symlinked_skill_file_is_refused(skills: Path, tmp_path: Path, ctx: ToolContext) -> None:
    """SKILL.md itself may not be a symlink, even to a valid skill file."""
    target = tmp_path / "elsewhere.md"
    target.write_text(skill_text("deploy"))
    (skills / "deploy").mkdir(parents=True)
    (skills / "deploy" / "SKILL.md").symlink_to(target)
    error = refusal(Skill(), "deploy", ctx)
    assert str(tmp_path) not in str(error)


def test_a_symlinked_skill_directory_is_refused(
    skills: Path, tmp_path: Path, ctx: ToolContext
) -> None:
    """The skill's directory may not be a symlink."""
    write_skill(tmp_path / "real", "deploy")
    skills.mkdir()
    (skills / "deploy").symlink_to(tmp_path / "real" / "deploy")
    refusal(Skill(), "deploy", ctx)


def test_a_symlinked_skills_directory_is_refused(
    workspace: Path, tmp_path: Path, ctx: ToolContext
) -> None:
    """The workspace's .skills itself may not be a symlink."""
    write_skill(tmp_path / "real", "deploy")
    (workspace / ".skills").symlink_to(tmp_path / "real")
    refusal(Skill(), "deploy", ctx)


def test_a_symlink_inside_the_configured_directory_is_refused(
    configured: Path, tmp_path: Path, ctx: ToolContext
) -> None:
    """Below the configured root nothing may be a symlink either."""
    write_skill(tmp_path / "real", "deploy")
    (configured / "deploy").symlink_to(tmp_path / "real" / "deploy")
    refusal(Skill(str(configured)), "deploy", ctx)


async def test_a_symlinked_configured_root_is_resolved_once(
    configured: Path, tmp_path: Path, ctx: ToolContext
) -> None:
    """The configured directory itself may be a symlink (the administrator chose it)."""
    write_skill(configured, "deploy")
    link = tmp_path / "link-to-skills"
    link.symlink_to(configured)
    assert not (await execute(Skill(str(link)), {"name": "deploy"}, ctx)).is_error


def test_a_skill_file_that_is_not_a_regular_file_is_refused(skills: Path, ctx: ToolContext) -> None:
    """A directory or a FIFO named SKILL.md is refused (and a FIFO never blocks)."""
    (skills / "dir" / "SKILL.md").mkdir(parents=True)
    refusal(Skill(), "dir", ctx)
    (skills / "fifo").mkdir()
    os.mkfifo(skills / "fifo" / "SKILL.md")
    refusal(Skill(), "fifo", ctx)


def test_an_oversized_skill_file_is_refused(skills: Path, ctx: ToolContext) -> None:
    """More than 64 KiB is refused; exactly 64 KiB loads."""
    header = skill_text("big", body="")
    write_skill(skills, "big", header + "x" * (MAX_SKILL_BYTES - len(header) + 1))
    refusal(Skill(), "big", ctx)
    write_skill(skills, "big", header + "x" * (MAX_SKILL_BYTES - len(header)))
    Skill().prepare({"name": "big"}, ctx)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("Just a body.\n", id="no-front-matter"),
        pytest.param("---\nname: s\ndescription: d\n", id="unclosed"),
        pytest.param("---\ndescription: d\n---\nbody", id="no-name"),
        pytest.param("---\nname: s\n---\nbody", id="no-description"),
        pytest.param("---\nname: s\ndescription:\n---\nbody", id="empty-description"),
        pytest.param(
            f"---\nname: s\ndescription: {'d' * (MAX_DESCRIPTION_CHARS + 1)}\n---\n",
            id="long-description",
        ),
        pytest.param("---\nname: s\nname: s\ndescription: d\n---\n", id="duplicate-key"),
        pytest.param("---\nname: s\ndescription: >\n  folded\n---\n", id="multi-line"),
        pytest.param("---\nname: s\njust words\ndescription: d\n---\n", id="not-key-value"),
        pytest.param('---\nname: "s\ndescription: d\n---\n', id="unterminated-quote"),
        pytest.param('---\nname: s\ndescription: "a\\tb"\n---\n', id="escape"),
        pytest.param("---\nname: other\ndescription: d\n---\n", id="name-mismatch"),
        pytest.param("---\nname: s\ndescription: d\n---\nnul\x00", id="nul-byte"),
    ],
)
def test_bad_front_matter_is_refused(skills: Path, ctx: ToolContext, text: str) -> None:
    """Malformed front matter, a name that differs from the request, or binary content."""
    write_skill(skills, "s", text)
    refusal(Skill(), "s", ctx)


def test_invalid_utf8_is_refused(skills: Path, ctx: ToolContext) -> None:
    """SKILL.md must be UTF-8."""
    path = write_skill(skills, "s")
    path.write_bytes(b"---\nname: s\ndescription: \xff\n---\n")
    refusal(Skill(), "s", ctx)


async def test_lenient_front_matter_forms_are_accepted(skills: Path, ctx: ToolContext) -> None:
    """Quotes, comments, blank lines, CRLF and unknown keys with nested values all parse."""
    text = (
        "---\r\n"
        "# a comment\r\n"
        "name: 's'\r\n"
        "\r\n"
        'description: "Quoted: with a colon"\r\n'
        "license: MIT\r\n"
        "allowed-tools:\r\n"
        "- Bash\r\n"
        "metadata:\r\n"
        "  version: 2\r\n"
        "---\r\n"
        "body\r\n"
    )
    write_skill(skills, "s", text)
    result = await execute(Skill(), {"name": "s"}, ctx)
    assert result.text == "body\r\n"
    assert json.loads(result.json)["description"] == "Quoted: with a colon"


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({"name": "Upper"}, id="upper-case"),
        pytest.param({"name": ""}, id="empty"),
        pytest.param({"name": "-leading-dash"}, id="leading-dash"),
        pytest.param({"name": "a" * 65}, id="too-long"),
        pytest.param({"name": "../etc"}, id="traversal"),
        pytest.param({"name": "a/b"}, id="slash"),
        pytest.param({"name": "a\n"}, id="trailing-newline"),
        pytest.param({"name": 3}, id="wrong-type"),
        pytest.param({}, id="missing"),
    ],
)
def test_bad_names_are_refused_on_name(ctx: ToolContext, raw: dict[str, object]) -> None:
    """Names outside ^[a-z0-9][a-z0-9_-]{0,63}$ are ARGUMENTS_INVALID on `name`."""
    assert invalid_field(Skill(), raw, ctx) == "arguments.name"


def test_unknown_arguments_are_refused(ctx: ToolContext) -> None:
    """Extra fields are rejected like every tool's."""
    assert invalid_field(Skill(), {"name": "a", "extra": 1}, ctx) == "arguments.extra"


def test_the_description_lists_the_sessions_skills(
    skills: Path, configured: Path, workspace: Path
) -> None:
    """Sorted `name: description` lines from both sources; invalid files and names skipped."""
    write_skill(skills, "zeta", skill_text("zeta", "Last one."))
    write_skill(skills, "alpha", skill_text("alpha", "First one."))
    write_skill(skills, "broken", "no front matter\n")
    write_skill(skills, "Bad-Name", skill_text("Bad-Name"))
    write_skill(configured, "mid", skill_text("mid", "From the server."))
    write_skill(configured, "alpha", skill_text("alpha", "Shadowed."))
    write_skill(configured, "broken", skill_text("broken", "Shadowed by a broken one."))
    text = Skill(str(configured)).describe(
        Workspace(str(workspace), ProtectedPaths(DEFAULT_DENIED_GLOBS))
    )
    listing = text.split("Available skills:\n", 1)[1].splitlines()
    assert listing == ["- alpha: First one.", "- mid: From the server.", "- zeta: Last one."]
    assert str(configured) not in text


def test_the_listing_is_capped(skills: Path, workspace: Path) -> None:
    """At most MAX_LISTED_SKILLS entries, then a line saying how many more there are."""
    for n in range(MAX_LISTED_SKILLS + 3):
        write_skill(skills, f"s{n:03d}")
    text = Skill().describe(Workspace(str(workspace), ProtectedPaths(DEFAULT_DENIED_GLOBS)))
    lines = text.split("Available skills:\n", 1)[1].splitlines()
    assert len(lines) == MAX_LISTED_SKILLS + 1
    assert lines[0].startswith("- s000:")
    assert "3 more" in lines[-1]


def test_the_registry_describes_skill_per_workspace(skills: Path, workspace: Path) -> None:
    """ToolRegistry.infos(workspace) uses describe(); without a workspace, the static text."""
    write_skill(skills, "deploy", skill_text("deploy", "Ship it."))
    services = {Service.SKILLS: SkillSource(None)}
    registry = ToolRegistry([skill_definition()], services)
    (tool,) = skill_definition().build_for("s", "l", services)
    assert isinstance(tool, SessionDescribed)
    ws = Workspace(str(workspace), ProtectedPaths(DEFAULT_DENIED_GLOBS))
    (info,) = registry.infos(ws)
    assert "- deploy: Ship it." in info.description
    assert info.requirement_kinds == ("context.load",)
    (static,) = registry.infos()
    assert static.description == Skill.description


def test_no_skills_says_so(workspace: Path) -> None:
    """An empty listing is stated rather than left blank."""
    text = Skill().describe(Workspace(str(workspace), ProtectedPaths(DEFAULT_DENIED_GLOBS)))
    assert "No skills are available" in text
