"""The one registry of tools: names to plugin instances, with their descriptions and schemas."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable

from callgate.server.core.errors import NotFound
from callgate.server.core.models import ToolInfo
from callgate.server.core.paths import Workspace
from callgate.server.core.tool import SessionDescribed, ToolPlugin

AnyTool = ToolPlugin


class ToolRegistry:
    """Holds the tools a server offers. Built once in the composition root."""

    def __init__(self, tools: Iterable[AnyTool] = ()) -> None:
        self._tools: dict[str, AnyTool] = {}
        self._infos: dict[str, ToolInfo] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: AnyTool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        self._tools[tool.name] = tool
        schema = tool.arguments.model_json_schema()
        schema.pop("title", None)
        self._infos[tool.name] = ToolInfo(
            name=tool.name,
            description=tool.description,
            input_schema_json=json.dumps(schema, sort_keys=True),
            requirement_kinds=tool.requirement_kinds,
        )

    def get(self, name: str) -> AnyTool:
        tool = self._tools.get(name)
        if tool is None:
            raise NotFound(
                "TOOL_NOT_FOUND",
                "No tool has that name; ListTools shows the available tools.",
                metadata={"tool_name": name[:64]},
            )
        return tool

    def infos(self, workspace: Workspace | None = None) -> list[ToolInfo]:
        """Every tool's info, sorted by name. With a session's `workspace`, a tool that
        describes itself per session (`SessionDescribed`) gets that description."""
        infos: list[ToolInfo] = []
        for name in sorted(self._infos):
            info = self._infos[name]
            tool = self._tools[name]
            if workspace is not None and isinstance(tool, SessionDescribed):
                info = dataclasses.replace(info, description=tool.describe(workspace))
            infos.append(info)
        return infos
