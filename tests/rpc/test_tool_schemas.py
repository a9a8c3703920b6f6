"""The argument schemas ListTools gives clients accept what the server accepts (the string forms
of integers, numbers and booleans a model often sends), and stay fit for OpenAI's strict mode
wherever the tool's arguments allow it (free-form maps never can)."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest

from callgate.v1 import tool_service_pb2
from tests.support.calls import open_session, prepare
from tests.support.server import Harness

pytestmark = pytest.mark.anyio

# Tools whose arguments hold a free-form map (headers, cursors, metadata): no strict schema.
MAPS = {"Fetch", "ProcessOutput", "TaskCreate", "TaskUpdate"}


async def schemas(harness: Harness) -> dict[str, dict[str, Any]]:
    stub = harness.stub()
    session = await open_session(stub)
    listed = await stub.ListTools(tool_service_pb2.ListToolsRequest(session_id=session))
    return {tool.name: json.loads(tool.input_schema_json) for tool in listed.tools}


async def test_the_schema_takes_the_string_forms_the_server_takes(harness: Harness) -> None:
    (harness.workspace / "lines.txt").write_text("one\ntwo\n")
    read_file = (await schemas(harness))["ReadFile"]
    sent = {"path": "lines.txt", "start_line": "2", "end_line": 2}
    jsonschema.validate(sent, read_file)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"path": "lines.txt", "start_line": "two"}, read_file)
    call = await prepare(harness.stub(), await open_session(harness.stub()), "ReadFile", sent)
    assert call.summary


async def test_schemas_are_strict_compatible_where_the_arguments_allow(harness: Harness) -> None:
    strict_schema = pytest.importorskip("agents.strict_schema")
    found = await schemas(harness)
    assert found.keys() >= MAPS
    for name, schema in found.items():
        if name in MAPS:
            continue
        strict_schema.ensure_strict_json_schema(copy.deepcopy(schema))
