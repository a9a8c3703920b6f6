"""Small real tools and a hand-driven clock for lifecycle tests (test doubles, not mocks)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio

from callgate.server.core.errors import InternalError
from callgate.server.core.models import Requirement, RequirementKind, RuleCandidate, ToolResult
from callgate.server.core.tool import Arguments, Artifact, Prepared, Tool, ToolContext
from callgate.server.tools.registry import ToolRegistry

NOTES_FILE = "notes.txt"
UNKNOWN_KIND = "teleport.beam"


class ManualClock:
    """A `Clock` that moves only when a test advances it."""

    def __init__(self, start: datetime = datetime(2030, 1, 1, tzinfo=UTC)) -> None:
        self._monotonic = 1000.0
        self._now = start

    def monotonic(self) -> float:
        return self._monotonic

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._monotonic += seconds
        self._now += timedelta(seconds=seconds)


def _write_requirement(path: str, relative: str) -> Requirement:
    return Requirement(RequirementKind.FILESYSTEM_WRITE, path, path, f"write {relative}")


def _append_line(path: str, text: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text + "\n")


class NoteArguments(Arguments):
    text: str
    file: str = NOTES_FILE


class NoteArtifact(Artifact):
    path: str
    text: str


class Note(Tool[NoteArguments, NoteArtifact]):
    """Appends one line to a file in the workspace (default `notes.txt`): a visible effect
    whose line count says how often the call ran. Gated by default (filesystem.write)."""

    name = "Note"
    description = "Append a line of text to a notes file in the workspace."
    arguments = NoteArguments
    artifact = NoteArtifact
    requirement_kinds = (RequirementKind.FILESYSTEM_WRITE.value,)

    def prepare_args(self, args: NoteArguments, ctx: ToolContext) -> Prepared:
        path = ctx.workspace.resolve(args.file, "file")
        relative = ctx.workspace.relative(path)
        return Prepared(
            summary=f"Note {relative}",
            requirements=(_write_requirement(path, relative),),
            artifact=NoteArtifact(path=path, text=args.text),
            candidates=(RuleCandidate(RequirementKind.FILESYSTEM_WRITE, path, relative),),
        )

    async def run(self, artifact: NoteArtifact, ctx: ToolContext) -> ToolResult:
        _append_line(artifact.path, artifact.text)
        return ToolResult(text=f"noted {len(artifact.text)} characters")


class PeekArguments(Arguments):
    path: str


class PeekArtifact(Artifact):
    path: str


class Peek(Tool[PeekArguments, PeekArtifact]):
    """Reads a workspace file (filesystem.read, allowed by default); a missing file is a
    tool-level error, so it also reaches FAILED."""

    name = "Peek"
    description = "Return the content of a file in the workspace."
    arguments = PeekArguments
    artifact = PeekArtifact
    requirement_kinds = (RequirementKind.FILESYSTEM_READ.value,)

    def prepare_args(self, args: PeekArguments, ctx: ToolContext) -> Prepared:
        path = ctx.workspace.resolve(args.path, "path")
        relative = ctx.workspace.relative(path)
        requirement = Requirement(RequirementKind.FILESYSTEM_READ, path, path, f"read {relative}")
        return Prepared(
            summary=f"Peek {relative}",
            requirements=(requirement,),
            artifact=PeekArtifact(path=path),
        )

    async def run(self, artifact: PeekArtifact, ctx: ToolContext) -> ToolResult:
        try:
            with open(artifact.path, encoding="utf-8") as handle:
                return ToolResult(text=handle.read())
        except FileNotFoundError:
            return ToolResult.error(
                "file_not_found", f"{ctx.workspace.relative(artifact.path)} does not exist."
            )


class NoArguments(Arguments):
    pass


class NoArtifact(Artifact):
    pass


class Slow(Tool[NoArguments, NoArtifact]):
    """Needs nothing (allowed by default) and runs until `release` is set, so a test can hold a
    call in RUNNING and cancel it deterministically. `started` is set once a run has begun."""

    name = "Slow"
    description = "Wait until the test releases the call."
    arguments = NoArguments
    artifact = NoArtifact
    requirement_kinds = ()

    def __init__(self, release: anyio.Event) -> None:
        self.release = release
        self.started = anyio.Event()
        self.finished_runs = 0

    def prepare_args(self, args: NoArguments, ctx: ToolContext) -> Prepared:
        return Prepared(summary="Slow", requirements=(), artifact=NoArtifact())

    async def run(self, artifact: NoArtifact, ctx: ToolContext) -> ToolResult:
        self.started.set()
        await self.release.wait()
        self.finished_runs += 1
        return ToolResult(text="released")


class Beam(Tool[NoArguments, NoArtifact]):
    """Emits a requirement of a kind the gate does not know (which must be denied)."""

    name = "Beam"
    description = "Ask for a capability the gate has never heard of."
    arguments = NoArguments
    artifact = NoArtifact
    requirement_kinds = (UNKNOWN_KIND,)

    def prepare_args(self, args: NoArguments, ctx: ToolContext) -> Prepared:
        requirement = Requirement(UNKNOWN_KIND, "", "anywhere", "beam somewhere")
        return Prepared(summary="Beam", requirements=(requirement,), artifact=NoArtifact())

    async def run(self, artifact: NoArtifact, ctx: ToolContext) -> ToolResult:
        raise AssertionError("a call with an unknown requirement kind must never run")


class Crash(Tool[NoArguments, NoArtifact]):
    """Needs nothing and fails at run time: with a bare exception (`domain_error=False`) or
    with a domain error such as a tool raising InternalError."""

    name = "Crash"
    description = "Fail while running."
    arguments = NoArguments
    artifact = NoArtifact
    requirement_kinds = ()

    def __init__(self, *, domain_error: bool) -> None:
        self.domain_error = domain_error

    def prepare_args(self, args: NoArguments, ctx: ToolContext) -> Prepared:
        return Prepared(summary="Crash", requirements=(), artifact=NoArtifact())

    async def run(self, artifact: NoArtifact, ctx: ToolContext) -> ToolResult:
        if self.domain_error:
            raise InternalError()
        raise RuntimeError("the tool broke")


def registry(*extra: Tool[NoArguments, NoArtifact]) -> ToolRegistry:
    """Note, Peek and Beam, plus any extra tools (Slow, Crash) a test builds itself."""
    return ToolRegistry([Note(), Peek(), Beam(), *extra])
