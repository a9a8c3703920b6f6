"""Tools of one's own: what a tool plugin imports, and how the server loads plugins.

A plugin is a Python distribution with an entry point in the group `callgate.tools` whose
object is a `ToolDefinition` (or a function returning one). The server loads only the plugins
its configuration names (`[tools] plugins = ["name"]`); an installed plugin that is not named is
never imported. A plugin's tools go through the same Prepare, validation, freezing, gate, digest,
preview and journal as callgate's own: a plugin describes what a call needs (its requirements,
of kinds the gate knows or that `[access] kinds` configures) and runs only the artifact it froze.
A plugin that cannot be loaded or built stops the server with the error; one that raises while a
call runs ends that call with a tool error (`internal_error`), never the server.

docs/plugins.md shows a whole plugin (examples/websearch) and the tests a tool must have.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from collections.abc import Iterable, Sequence

from .config import ConfigError
from .core.definitions import (
    Bindings,
    BuildScope,
    DefinitionBuildError,
    Service,
    ToolAnnotations,
    ToolDefinition,
    single,
)
from .core.errors import InvalidArgument, arguments_invalid
from .core.models import Preview, Requirement, RequirementKind, RuleCandidate, ToolResult
from .core.tool import Arguments, Artifact, Prepared, Tool, ToolContext
from .tools.network import HttpAccess, HttpResponse, NetworkRefused, network_target
from .tools.services import Settings

ENTRY_POINT_GROUP = "callgate.tools"

__all__ = [
    "ENTRY_POINT_GROUP",
    "Arguments",
    "Artifact",
    "Bindings",
    "BuildScope",
    "DefinitionBuildError",
    "HttpAccess",
    "HttpResponse",
    "InvalidArgument",
    "NetworkRefused",
    "Prepared",
    "Preview",
    "Requirement",
    "RequirementKind",
    "RuleCandidate",
    "Service",
    "Settings",
    "Tool",
    "ToolAnnotations",
    "ToolContext",
    "ToolDefinition",
    "ToolResult",
    "arguments_invalid",
    "load_plugins",
    "network_target",
    "single",
]


def load_plugins(
    names: Sequence[str],
    entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
) -> list[ToolDefinition]:
    """The definitions of the plugins `names` (`[tools] plugins`), in that order, from the
    installed `callgate.tools` entry points (or `entry_points`). Only those named are
    imported."""
    installed = {
        entry.name: entry
        for entry in (
            entry_points
            if entry_points is not None
            else importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        )
    }
    definitions: list[ToolDefinition] = []
    for name in names:
        entry = installed.get(name)
        if entry is None:
            shown = ", ".join(sorted(installed)) or "none"
            raise ConfigError(
                f"config key tools.plugins: no installed plugin is named {name!r} "
                f"(installed {ENTRY_POINT_GROUP} entry points: {shown})"
            )
        try:
            loaded = entry.load()
            if callable(loaded) and not isinstance(loaded, ToolDefinition):
                loaded = loaded()
        except Exception as exc:
            raise DefinitionBuildError(
                name, f"its entry point {entry.value} failed to load: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(loaded, ToolDefinition):
            raise DefinitionBuildError(
                name, f"its entry point {entry.value} is not a callgate ToolDefinition"
            )
        if loaded.name != name:
            raise DefinitionBuildError(
                name, f"its entry point names a definition called {loaded.name!r}"
            )
        definitions.append(dataclasses.replace(loaded, plugin=True))
    return definitions
