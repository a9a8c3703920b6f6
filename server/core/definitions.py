"""Tool definitions: how tools are constructed, apart from how they are invoked (design
section 10).

A definition has a stable name, the services it needs as flags, the annotations of each tool it
builds, and a build function that receives the bindings: the session and loop it builds for and
the services it declared, and nothing else. Asking the bindings for a service the definition did
not declare is a `DefinitionBuildError`, and so is a declared service the server cannot provide:
the registry checks every definition when the server starts, so a server never runs with a
partly built tool.

Builds are fresh. A definition whose scope is `LOOP` is built again for every agent loop, one
whose scope is `SESSION` once per session and shared by its loops; state that several tools
share lives inside one build (a bundle: the four task tools over one loop's task graph) or in a
session resource, never in a definition.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from .models import ToolAnnotations
from .tool import ToolPlugin

T = TypeVar("T")

__all__ = [
    "Bindings",
    "BuildScope",
    "DefinitionBuildError",
    "Service",
    "ToolAnnotations",
    "ToolDefinition",
    "single",
]


class Service(enum.Flag):
    """What a definition needs from the server, beyond the session and loop it is built for."""

    NONE = 0
    # Where commands run: the sandbox runner and what the server adds to every command.
    COMMANDS = enum.auto()
    # The session's process supervisors (background commands and the Process tools).
    PROCESSES = enum.auto()
    # The approval board, for questions to a human.
    APPROVAL_BOARD = enum.auto()
    # The network client: requests to approved hosts, with Fetch's address policy.
    NETWORK = enum.auto()
    # Confinement for helper processes that read workspace content (Grep's ripgrep).
    HELPERS = enum.auto()
    # The configured skills directory.
    SKILLS = enum.auto()
    # The definition's own settings: the table `[tools.settings.<definition name>]`.
    SETTINGS = enum.auto()


class BuildScope(enum.Enum):
    """How often a definition is built."""

    LOOP = "loop"  # fresh tools for every agent loop
    SESSION = "session"  # fresh tools for every session, shared by its loops


class DefinitionBuildError(Exception):
    """A definition cannot be built: a service it needs is missing, or what it built is not
    what it declared. Raised when the server starts; the message names the definition."""

    def __init__(self, definition: str, problem: str) -> None:
        super().__init__(f"tool definition {definition!r}: {problem}")
        self.definition = definition


@dataclass(frozen=True, slots=True)
class Bindings:
    """What one build receives: the session and loop it builds for (empty for the build the
    server does at start to describe the tools) and the services the definition declared."""

    definition: str
    session_id: str
    loop_id: str
    declared: Service
    services: Mapping[Service, object]

    def service(self, flag: Service, kind: type[T]) -> T:
        """The declared service `flag`, checked to be a `kind`."""
        if flag not in self.declared:
            raise DefinitionBuildError(
                self.definition, f"it uses the service {flag.name} but does not declare it"
            )
        value = self.services.get(flag)
        if not isinstance(value, kind):
            raise DefinitionBuildError(
                self.definition, f"the server provides no {flag.name} service"
            )
        return value


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A blueprint for one tool or a bundle of tools.

    `annotations` names every tool the build returns (a build that returns other names is a
    `DefinitionBuildError`), so the server knows a definition's tools before building it.
    """

    name: str
    build: Callable[[Bindings], Sequence[ToolPlugin]]
    annotations: Mapping[str, ToolAnnotations]
    requires: Service = Service.NONE
    scope: BuildScope = BuildScope.LOOP
    # A definition loaded from the `callgate.tools` entry point group, not shipped with callgate.
    plugin: bool = field(default=False, compare=False)

    def missing(self, provided: Service) -> Service:
        """The declared services the server does not provide."""
        return self.requires & ~provided

    def build_for(
        self, session_id: str, loop_id: str, services: Mapping[Service, object]
    ) -> list[ToolPlugin]:
        """Build the tools, checked against what the definition declares."""
        bindings = Bindings(self.name, session_id, loop_id, self.requires, services)
        try:
            tools = list(self.build(bindings))
        except DefinitionBuildError:
            raise
        except Exception as exc:
            raise DefinitionBuildError(
                self.name, f"its build failed: {type(exc).__name__}: {exc}"
            ) from exc
        names = [tool.name for tool in tools]
        if sorted(names) != sorted(self.annotations):
            raise DefinitionBuildError(
                self.name,
                f"it built {sorted(names)} but declares {sorted(self.annotations)}",
            )
        return tools


def single(
    name: str,
    build: Callable[[Bindings], ToolPlugin],
    annotations: ToolAnnotations,
    requires: Service = Service.NONE,
    scope: BuildScope = BuildScope.LOOP,
) -> ToolDefinition:
    """A definition of one tool, named after it."""
    return ToolDefinition(
        name=name,
        build=lambda bindings: [build(bindings)],
        annotations={name: annotations},
        requires=requires,
        scope=scope,
    )
