"""The tool plugin interface: prepare (validate, normalize, freeze; no effect) and invoke.

A tool never sees raw arguments at invocation: `Tool.invoke` receives only the frozen
artifact its own `prepare` produced. Per-loop state (file observations, task graphs) is held
by the loop and reached through the context, so tool objects themselves are stateless.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import ClassVar, Generic, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict

from .arguments import validate_arguments
from .errors import InternalError
from .models import Preview, Requirement, RuleCandidate, ToolResult
from .paths import Workspace
from .resources import SessionResources


class Arguments(BaseModel):
    """Base of every tool's argument model: strict, unknown fields rejected."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Artifact(BaseModel):
    """Base of every frozen artifact: immutable, canonically encodable for the digest."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True, slots=True)
class Prepared:
    """What Prepare produces: the request the gate sees and the artifact Invoke runs."""

    summary: str
    requirements: tuple[Requirement, ...]
    artifact: Artifact
    candidates: tuple[RuleCandidate, ...] = ()
    # For commands: the exact command that would run and its working directory, shown to
    # the approver (empty for other tools).
    command: str = ""
    working_directory: str = ""
    # What the call would do, shown to the approver and covered by the digest.
    preview: Preview | None = None


@dataclass(slots=True)
class LoopState:
    """State one agent loop owns. `observations` maps a canonical path to the SHA-256 (hex)
    of its content when the loop last read it in full (read-before-write); `tools` are the
    loop's tools, built for it from the server's definitions (core/definitions.py), the task
    tools with the loop's own task graph among them."""

    loop_id: str
    observations: MutableMapping[str, str] = field(default_factory=dict)
    tools: Mapping[str, ToolPlugin] = field(default_factory=dict)


OutputSink = Callable[[bytes], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ToolLimits:
    """Caps tools apply (design section 5 defaults; configurable)."""

    read_max_bytes: int = 1 << 20
    read_max_lines: int = 2000
    edit_max_bytes: int = 1 << 20
    write_max_bytes: int = 1 << 20
    glob_max_results: int = 500
    grep_max_matches: int = 200
    grep_max_bytes: int = 64 << 10
    grep_timeout_seconds: float = 30.0
    # How long the walk for secrets and files that run code may take before a command (or a
    # confined Grep) is refused rather than run with masks that might be incomplete.
    scan_seconds: float = 5.0
    # The bound on a call's preview (what the approver is shown before deciding).
    preview_max_bytes: int = 64 << 10


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may use at Prepare and at Invoke."""

    session_id: str
    loop: LoopState
    workspace: Workspace
    limits: ToolLimits
    # Session-scoped shared state (the process supervisor, the private directory).
    resources: SessionResources
    # Set at Invoke: the call being run.
    execution_id: str = ""
    # The principal that owns the session (shown to approvers, e.g. with an AskUser question).
    principal: str = ""
    # Set only at Invoke for InvokeStream: receives output chunks as they are produced.
    output: OutputSink | None = None
    # Set at Invoke from the call's decision: allowed by read-only families only, so a command
    # runs in the read-only sandbox (no writable bind, no network).
    read_only: bool = False
    # Set at Invoke: the programs deny families name (`Bash(rm:*)`: rm), masked in every
    # sandboxed command of the session.
    denied_programs: frozenset[str] = frozenset()
    # Set at Invoke: what approved each of the call's network requirements (by match):
    # `rule <id>`, `approved by <approver>` or `access default`, for the journal's records of
    # the connections it allows.
    network_origins: Mapping[str, str] = field(default_factory=dict)


ArgsT = TypeVar("ArgsT", bound=Arguments)
ArtifactT = TypeVar("ArtifactT", bound=Artifact)


class Tool(abc.ABC, Generic[ArgsT, ArtifactT]):
    """One tool. Subclasses set the class attributes and implement `prepare_args` / `run`."""

    name: ClassVar[str]
    description: ClassVar[str]
    arguments: ClassVar[type[Arguments]]
    artifact: ClassVar[type[Artifact]]
    requirement_kinds: ClassVar[tuple[str, ...]]
    # True for a tool that only reads (it changes, sends or asks nothing outside the server):
    # its answer is its only effect. A unary Invoke of it then commits `call.invoked` with
    # the call's end, in one transaction before the answer, rather than in one of its own
    # before it runs: nothing of it has left the server until the record is durable
    # (invariant 10), and the fast path saves a commit. Streamed, it commits first as all do.
    answer_only: ClassVar[bool] = False

    def prepare(self, raw: dict[str, object], ctx: ToolContext) -> Prepared:
        """Validate decoded JSON arguments and freeze the call. Raises InvalidArgument."""
        args = validate_arguments(self.arguments, raw)
        return self.prepare_args(args, ctx)  # type: ignore[arg-type]  # validated to ArgsT

    async def invoke(self, artifact: Artifact, ctx: ToolContext) -> ToolResult:
        """Run a frozen artifact this tool prepared."""
        if not isinstance(artifact, self.artifact):
            raise InternalError()
        return await self.run(artifact, ctx)  # type: ignore[arg-type]  # checked just above

    @abc.abstractmethod
    def prepare_args(self, args: ArgsT, ctx: ToolContext) -> Prepared:
        """Normalize validated arguments into requirements and a frozen artifact. No effect."""

    @abc.abstractmethod
    async def run(self, artifact: ArtifactT, ctx: ToolContext) -> ToolResult:
        """Perform the effect. Tool-level failures are returned as ToolResult.error(...)."""


class ToolPlugin(Protocol):
    """The erased view of a Tool that the registry and the lifecycle use."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def arguments(self) -> type[Arguments]: ...
    @property
    def requirement_kinds(self) -> tuple[str, ...]: ...
    @property
    def answer_only(self) -> bool: ...

    def prepare(self, raw: dict[str, object], ctx: ToolContext) -> Prepared: ...

    async def invoke(self, artifact: Artifact, ctx: ToolContext) -> ToolResult: ...


@runtime_checkable
class Warmable(Protocol):
    """A tool whose Prepare has heavy pure work (Bash: parsing a long command). `warm` does it
    in a worker thread first, from the raw JSON text, so that the synchronous Prepare on the
    event loop finds it cached; it has no effect and raises nothing (a bad argument is
    Prepare's to refuse)."""

    async def warm(self, arguments_json: str) -> None: ...


@runtime_checkable
class SessionDescribed(Protocol):
    """A tool whose description depends on the session (Skill lists the skills its workspace
    offers). ListTools uses `describe` instead of the static description when a tool has it."""

    def describe(self, workspace: Workspace) -> str: ...
