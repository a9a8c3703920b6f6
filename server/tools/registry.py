"""The one registry of tools: the definitions a server offers, checked when it starts, and the
tools they build for each session and loop, with their descriptions and schemas."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping

from ..core.arguments import lenient_schema
from ..core.definitions import (
    BuildScope,
    DefinitionBuildError,
    Service,
    ToolAnnotations,
    ToolDefinition,
)
from ..core.models import ToolInfo
from ..core.paths import Workspace
from ..core.tool import SessionDescribed, ToolPlugin
from .services import Settings

AnyTool = ToolPlugin


def instance_definition(tool: ToolPlugin) -> ToolDefinition:
    """A definition that hands out one existing tool object: for a tool that keeps no state of
    its own (tests register such tools directly)."""
    return ToolDefinition(
        name=tool.name, build=lambda bindings: [tool], annotations={tool.name: ToolAnnotations()}
    )


class ToolRegistry:
    """Holds the definitions a server offers. Built once, in the composition root, with the
    services the server provides: a definition that needs a service the server does not provide,
    that fails to build, or that builds other tools than it declares stops the start with a
    `DefinitionBuildError`; a tool name offered twice too."""

    def __init__(
        self,
        definitions: Iterable[ToolDefinition | ToolPlugin] = (),
        services: Mapping[Service, object] | None = None,
        settings: Mapping[str, Mapping[str, object]] | None = None,
    ) -> None:
        self._services = dict(services or {})
        self._settings = dict(settings or {})
        self._provided = Service.SETTINGS
        for flag in self._services:
            self._provided |= flag
        self._definitions: list[ToolDefinition] = []
        self._by_tool: dict[str, ToolDefinition] = {}
        self._described: dict[str, ToolPlugin] = {}
        self._infos: dict[str, ToolInfo] = {}
        for definition in definitions:
            self.register(definition)

    def register(self, definition: ToolDefinition | ToolPlugin) -> None:
        if not isinstance(definition, ToolDefinition):
            definition = instance_definition(definition)
        missing = definition.missing(self._provided)
        if missing:
            names = ", ".join(flag.name or "" for flag in Service if flag and flag in missing)
            raise DefinitionBuildError(
                definition.name, f"it needs the {names} service, which this server does not provide"
            )
        # One build at start: checks the definition and describes its tools to ListTools.
        tools = definition.build_for("", "", self._services_for(definition))
        for tool in tools:
            if tool.name in self._by_tool:
                raise DefinitionBuildError(
                    definition.name,
                    f"its tool {tool.name!r} is already offered by "
                    f"{self._by_tool[tool.name].name!r}",
                )
        self._definitions.append(definition)
        for tool in tools:
            self._by_tool[tool.name] = definition
            self._described[tool.name] = tool
            schema = lenient_schema(tool.arguments.model_json_schema())
            schema.pop("title", None)
            self._infos[tool.name] = ToolInfo(
                name=tool.name,
                description=tool.description,
                input_schema_json=json.dumps(schema, sort_keys=True),
                requirement_kinds=tool.requirement_kinds,
                annotations=definition.annotations[tool.name],
            )

    def _services_for(self, definition: ToolDefinition) -> dict[Service, object]:
        services = dict(self._services)
        services[Service.SETTINGS] = Settings(self._settings.get(definition.name))
        return services

    def build(self, session_id: str, loop_id: str, scope: BuildScope) -> dict[str, ToolPlugin]:
        """Fresh tools of every definition of `scope` for a session (`loop_id` empty) or a
        loop, by name."""
        built: dict[str, ToolPlugin] = {}
        for definition in self._definitions:
            if definition.scope is scope:
                for tool in definition.build_for(
                    session_id, loop_id, self._services_for(definition)
                ):
                    built[tool.name] = tool
        return built

    def infos(self, workspace: Workspace | None = None) -> list[ToolInfo]:
        """Every tool's info, sorted by name. With a session's `workspace`, a tool that
        describes itself per session (`SessionDescribed`) gets that description."""
        infos: list[ToolInfo] = []
        for name in sorted(self._infos):
            info = self._infos[name]
            tool = self._described[name]
            if workspace is not None and isinstance(tool, SessionDescribed):
                info = dataclasses.replace(info, description=tool.describe(workspace))
            infos.append(info)
        return infos
