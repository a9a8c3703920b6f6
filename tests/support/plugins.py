"""Tool plugins for tests, installed the way pip installs a distribution: a `*.dist-info`
directory with a `callgate.tools` entry point, on a directory the server's Python searches."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from callgate.server.plugins import (
    Arguments,
    Artifact,
    Bindings,
    Prepared,
    Requirement,
    Service,
    Tool,
    ToolAnnotations,
    ToolContext,
    ToolDefinition,
    ToolResult,
)

# What the plugins saw, for the tests to look at: the raw arguments each Prepare received
# (kept, as a careless plugin might) and each value a run was given.
STASHED_RAW: list[dict[str, object]] = []
RUNS: list[str] = []
PLUGIN_KIND = "db.query"


def install_plugin(site: Path, name: str, target: str) -> None:
    """Install an entry point `name` = `target` (module:attribute) in group callgate.tools."""
    dist = site / f"{name.replace('-', '_')}_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[callgate.tools]\n{name} = {target}\n")


class EchoArguments(Arguments):
    value: str


class EchoArtifact(Artifact):
    value: str


class Echo(Tool[EchoArguments, EchoArtifact]):
    """Answers with the value it was prepared with. `kind` is the requirement its calls carry
    ("" for none: the policy approves them)."""

    name: ClassVar[str] = "Echo"
    description: ClassVar[str] = "Repeat a value."
    arguments: ClassVar[type[Arguments]] = EchoArguments
    artifact: ClassVar[type[Artifact]] = EchoArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = ()

    def __init__(self, kind: str = "") -> None:
        self.kind = kind

    def prepare(self, raw: dict[str, object], ctx: ToolContext) -> Prepared:
        STASHED_RAW.append(raw)  # a plugin that keeps what it was given
        return super().prepare(raw, ctx)

    def prepare_args(self, args: EchoArguments, ctx: ToolContext) -> Prepared:
        match = "tcp://search.example:443" if self.kind == "network" else f"query:{args.value}"
        requirements = (
            (Requirement(self.kind, "", match, f"query {args.value}"),) if self.kind else ()
        )
        return Prepared(
            summary="Echo", requirements=requirements, artifact=EchoArtifact(value=args.value)
        )

    async def run(self, artifact: EchoArtifact, ctx: ToolContext) -> ToolResult:
        RUNS.append(artifact.value)
        if artifact.value == "crash":
            raise RuntimeError("the plugin broke")
        return ToolResult(text=artifact.value)


class EchoNetwork(Echo):
    requirement_kinds: ClassVar[tuple[str, ...]] = ("network",)


class EchoQuery(Echo):
    requirement_kinds: ClassVar[tuple[str, ...]] = (PLUGIN_KIND,)


def _echo(tool: type[Echo], kind: str) -> ToolDefinition:
    return ToolDefinition(
        name="echo",
        build=lambda bindings: [tool(kind)],
        annotations={"Echo": ToolAnnotations(read_only=True)},
    )


echo = _echo(Echo, "")
"""A plugin whose calls need nothing: the policy approves them."""

echo_network = _echo(EchoNetwork, "network")
"""A plugin whose calls need a network requirement: gated by default."""

echo_query = _echo(EchoQuery, PLUGIN_KIND)
"""A plugin whose calls need a kind of its own, which the gate knows only when configured."""

echo_undeclared = _echo(Echo, "network")
"""A plugin that asks for a network requirement while declaring none (ListTools says none)."""


def _needs_network(bindings: Bindings) -> list[Echo]:
    bindings.service(Service.NETWORK, object)
    return [Echo()]


needs_undeclared = ToolDefinition(
    name="echo", build=_needs_network, annotations={"Echo": ToolAnnotations()}
)
"""A plugin that uses a service it does not declare."""


def _broken(bindings: Bindings) -> list[Echo]:
    raise ValueError("set [tools.settings.echo] endpoint")


broken = ToolDefinition(name="echo", build=_broken, annotations={"Echo": ToolAnnotations()})
"""A plugin whose build fails."""

not_a_definition = "a string, not a ToolDefinition"
