"""Skill: load a named skill's instructions into the agent's context (design section 5).

A skill is `<name>/SKILL.md` beneath a source root: first the session workspace's `.skills`
directory, then the configured skills directory. A workspace skill shadows a configured one
of the same name; a workspace skill that exists but is broken is an error, never a silent
fall-back to the other source. The file must be a regular file of at most 64 KiB of UTF-8,
opened component by component without following any symlink beneath the source root
(`fsaccess`), and start with front matter:

    ---
    name: <the requested name>
    description: <one line, at most 1024 characters>
    ---
    <body>

Front matter is a strict subset of YAML: `key: value` lines, optionally quoted values, blank
lines and `#` comments. Other keys (`license`, `allowed-tools`, ...) are accepted and ignored,
indented or `- item` lines beneath them too; `name` and `description` must be plain one-line
values. Prepare snapshots the body into the artifact, so Invoke returns exactly what was
approved even if the file changes meanwhile. ListTools lists the skills a session can load.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from typing import Annotated, ClassVar

from pydantic import Field

from callgate.server.core.errors import arguments_invalid
from callgate.server.core.models import Requirement, RequirementKind, RuleCandidate, ToolResult
from callgate.server.core.paths import Workspace
from callgate.server.core.preview import bounded
from callgate.server.core.tool import Arguments, Artifact, Prepared, Tool, ToolContext

from ..sandbox import fsaccess
from ..sandbox.fsaccess import PathChanged

SKILL_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
SKILL_FILE = "SKILL.md"
WORKSPACE_SKILLS = ".skills"
MAX_SKILL_BYTES = 64 << 10
MAX_DESCRIPTION_CHARS = 1024
# ListTools lists at most this many skills, and reads at most this many candidate files for
# it per source (ListTools reads them inline; a directory of junk must not make it slow).
MAX_LISTED_SKILLS = 50
MAX_SCANNED_SKILLS = 200
SKILL_PREVIEW_LINES = 20
"""How many of a skill's first lines its preview shows the approver."""

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\Z")
_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_-]*\Z")
_FENCE = "---"
_WORKSPACE_SOURCE = "workspace"
_DIRECTORY_SOURCE = "skills directory"


class SkillArguments(Arguments):
    name: Annotated[str, Field(pattern=SKILL_NAME_PATTERN)] = Field(
        description="The skill to load: one of the names listed in this tool's description."
    )


class SkillArtifact(Artifact):
    name: str
    # "workspace" or "skills directory": where the skill was found.
    source: str
    description: str
    body: str


class SkillFileInvalid(Exception):
    """A SKILL.md that exists but cannot be used; the message is one sentence, no host path."""


@dataclass(frozen=True, slots=True)
class SkillDocument:
    name: str
    description: str
    body: str


@dataclass(frozen=True, slots=True)
class _Source:
    """A directory of `<name>/SKILL.md` skills: `base` is where symlink-free opening starts
    (the workspace root for `.skills`, so `.skills` itself may not be a symlink) and
    `directory` the skills directory at or below it."""

    label: str
    base: str
    directory: str
    # How messages name the directory (never a host path outside the workspace).
    shown: str

    def skill_file(self, name: str) -> str:
        return f"{self.directory.rstrip('/')}/{name}/{SKILL_FILE}"


def parse_skill(text: str, expected_name: str) -> SkillDocument:
    """Split a SKILL.md into its front matter fields and its body. Raises SkillFileInvalid."""
    lines = text.split("\n")
    if lines[0].rstrip("\r") != _FENCE:
        raise SkillFileInvalid("it does not start with a '---' front matter line")
    fields: dict[str, str] = {}
    last_key = ""
    for index in range(1, len(lines)):
        line = lines[index].rstrip("\r")
        if line == _FENCE:
            body = "\n".join(lines[index + 1 :])
            break
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0] in " \t" or line.startswith("- "):
            # A nested or list value; only keys we ignore may have one.
            if last_key in ("", "name", "description"):
                raise SkillFileInvalid(
                    f"front matter line {index + 1} is indented; name and description must "
                    "be one-line values"
                )
            continue
        key, colon, value = line.partition(":")
        if not colon or not _KEY.match(key):
            raise SkillFileInvalid(f"front matter line {index + 1} is not a 'key: value' line")
        if key in fields:
            raise SkillFileInvalid(f"the front matter key {key!r} appears twice")
        fields[key] = _scalar(value.strip(), index + 1)
        last_key = key
    else:
        raise SkillFileInvalid("its front matter has no closing '---' line")
    name = fields.get("name", "")
    if not name:
        raise SkillFileInvalid("its front matter has no name")
    if name != expected_name:
        raise SkillFileInvalid(f"its front matter names it {name[:64]!r}, not {expected_name!r}")
    description = fields.get("description", "")
    if not description:
        raise SkillFileInvalid("its front matter has no description")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise SkillFileInvalid(f"its description is longer than {MAX_DESCRIPTION_CHARS} characters")
    if not description.isprintable():
        raise SkillFileInvalid("its description holds control characters")
    return SkillDocument(name=name, description=description, body=body)


def _scalar(value: str, line: int) -> str:
    """A plain or quoted one-line YAML scalar (no escapes inside double quotes)."""
    if value[:1] in ("'", '"'):
        quote = value[0]
        if len(value) < 2 or value[-1] != quote:
            raise SkillFileInvalid(f"front matter line {line} has an unterminated quoted value")
        inner = value[1:-1]
        if quote == "'":
            if "'" in inner.replace("''", ""):
                raise SkillFileInvalid(f"front matter line {line} has a stray quote")
            return inner.replace("''", "'")
        if '"' in inner or "\\" in inner:
            raise SkillFileInvalid(
                f"front matter line {line} uses escapes, which are not supported"
            )
        return inner
    return value


def _read_skill(source: _Source, name: str) -> str:
    """The text of `<source>/<name>/SKILL.md`. FileNotFoundError when the skill is not there
    at all; SkillFileInvalid when something is there that is not a usable skill file."""
    try:
        fd = fsaccess.open_beneath(source.base, source.skill_file(name))
    except FileNotFoundError:
        raise
    except PathChanged:
        raise SkillFileInvalid(
            "a symbolic link is on its path; skills must not be symlinks"
        ) from None
    except NotADirectoryError:
        raise SkillFileInvalid("a component of its path is not a directory") from None
    except OSError as exc:
        raise SkillFileInvalid(f"it cannot be opened ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SkillFileInvalid("it is not a regular file")
        if info.st_size > MAX_SKILL_BYTES:
            raise SkillFileInvalid(f"it is larger than {MAX_SKILL_BYTES} bytes")
        try:
            data = fsaccess.read_up_to(fd, MAX_SKILL_BYTES)
        except OSError as exc:
            raise SkillFileInvalid(f"it cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if data is None:
        raise SkillFileInvalid(f"it is larger than {MAX_SKILL_BYTES} bytes")
    if b"\x00" in data:
        raise SkillFileInvalid("it holds NUL bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillFileInvalid("it is not valid UTF-8") from None


class Skill(Tool[SkillArguments, SkillArtifact]):
    name: ClassVar[str] = "Skill"
    description: ClassVar[str] = (
        "Load a skill: a named set of instructions from the workspace's .skills/<name>/"
        "SKILL.md or the server's skills directory (the workspace's shadows the server's). "
        "The result text is the skill's instructions; follow them for the task at hand."
    )
    arguments: ClassVar[type[Arguments]] = SkillArguments
    artifact: ClassVar[type[Artifact]] = SkillArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = (RequirementKind.CONTEXT_LOAD.value,)

    def __init__(self, skills_dir: str | None = None) -> None:
        # Resolved once: the configured root itself may be a symlink; nothing below it may.
        self.skills_dir = os.path.realpath(skills_dir) if skills_dir else None

    def _sources(self, workspace: Workspace) -> list[_Source]:
        sources = [
            _Source(
                _WORKSPACE_SOURCE,
                workspace.root,
                os.path.join(workspace.root, WORKSPACE_SKILLS),
                f"{WORKSPACE_SKILLS}/",
            )
        ]
        if self.skills_dir is not None:
            sources.append(
                _Source(_DIRECTORY_SOURCE, self.skills_dir, self.skills_dir, "skills directory: ")
            )
        return sources

    @staticmethod
    def _load_from(workspace: Workspace, source: _Source, name: str) -> SkillDocument:
        """Raises FileNotFoundError (not in this source) or SkillFileInvalid."""
        if workspace.protected.is_protected(source.skill_file(name)):
            raise SkillFileInvalid("it is in a protected location")
        return parse_skill(_read_skill(source, name), name)

    def _load(self, workspace: Workspace, name: str) -> tuple[_Source, SkillDocument]:
        for source in self._sources(workspace):
            try:
                return source, self._load_from(workspace, source, name)
            except FileNotFoundError:
                continue
            except SkillFileInvalid as exc:
                shown = f"{source.shown}{name}/{SKILL_FILE}"
                raise arguments_invalid(
                    "name", f"skill {name!r} ({shown}) cannot be loaded: {exc}"
                ) from None
        raise arguments_invalid(
            "name", f"no skill is named {name!r}; this tool's description lists the skills"
        )

    @staticmethod
    def _names(source: _Source) -> list[str]:
        """The plausible skill names in a source directory, sorted; none when unreadable."""
        try:
            fd = fsaccess.open_directory(source.base, source.directory)
        except (OSError, PathChanged):
            return []
        try:
            entries = os.listdir(fd)
        except OSError:
            return []
        finally:
            os.close(fd)
        return sorted(entry for entry in entries if _NAME.match(entry))

    def prepare_args(self, args: SkillArguments, ctx: ToolContext) -> Prepared:
        name = args.name
        if not _NAME.match(name):
            raise arguments_invalid("name", "a skill name is lower-case letters, digits, - and _")
        source, document = self._load(ctx.workspace, name)
        match = f"skill:{name}"
        description = f"load skill {name} ({source.label})"
        kind = RequirementKind.CONTEXT_LOAD.value
        lines = document.body.split("\n")
        preview = bounded(
            "skill",
            [
                f"skill {name} ({source.label}): {document.description}",
                f"its first lines ({len(lines)} in all):",
            ],
            lines[:SKILL_PREVIEW_LINES],
            ctx.limits.preview_max_bytes,
        )
        return Prepared(
            summary=f"Skill {name}",
            requirements=(Requirement(kind=kind, scope="", match=match, description=description),),
            artifact=SkillArtifact(
                name=name,
                source=source.label,
                description=document.description,
                body=document.body,
            ),
            candidates=(RuleCandidate(kind=kind, match=match, description=description),),
            preview=preview,
        )

    async def run(self, artifact: SkillArtifact, ctx: ToolContext) -> ToolResult:
        return ToolResult(
            text=artifact.body,
            json=json.dumps(
                {
                    "name": artifact.name,
                    "description": artifact.description,
                    "source": artifact.source,
                }
            ),
        )

    def available(self, workspace: Workspace) -> list[SkillDocument]:
        """The usable skills of `workspace` and the skills directory, sorted by name; a
        workspace skill shadows a configured one; invalid skill files are left out."""
        found: dict[str, SkillDocument] = {}
        shadowed: set[str] = set()
        for source in self._sources(workspace):
            for name in self._names(source)[:MAX_SCANNED_SKILLS]:
                if name in found or name in shadowed:
                    continue
                try:
                    document = self._load_from(workspace, source, name)
                except FileNotFoundError:
                    continue
                except SkillFileInvalid:
                    # A broken workspace skill still shadows the configured one (Prepare
                    # would refuse it rather than fall back), so that one is not listed.
                    shadowed.add(name)
                    continue
                found[name] = document
        return [found[name] for name in sorted(found)]

    def describe(self, workspace: Workspace) -> str:
        """This tool's description for a session in `workspace`, listing its skills."""
        skills = self.available(workspace)
        if not skills:
            return f"{self.description}\n\nNo skills are available in this session."
        lines = [f"- {s.name}: {s.description}" for s in skills[:MAX_LISTED_SKILLS]]
        if len(skills) > MAX_LISTED_SKILLS:
            lines.append(f"({len(skills) - MAX_LISTED_SKILLS} more skills are not listed.)")
        return f"{self.description}\n\nAvailable skills:\n" + "\n".join(lines)
