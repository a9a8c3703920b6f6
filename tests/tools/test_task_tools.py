"""The task tool catalog: four pure tools with strict schemas the model can read."""

from __future__ import annotations

import json

from callgate.server.tools.catalog import task_definition
from callgate.server.tools.registry import ToolRegistry


def test_task_tools_register_with_no_requirements_and_strict_schemas() -> None:
    """TaskCreate, TaskGet, TaskList and TaskUpdate need no approval and forbid extra fields."""
    infos = ToolRegistry([task_definition()]).infos()
    assert [info.name for info in infos] == ["TaskCreate", "TaskGet", "TaskList", "TaskUpdate"]
    for info in infos:
        assert info.requirement_kinds == ()
        schema = json.loads(info.input_schema_json)
        assert schema["additionalProperties"] is False
        assert all("description" in field for field in schema["properties"].values())
