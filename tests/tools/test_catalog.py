"""The file tool catalog: five tools the registry accepts, with schemas the model can read."""

from __future__ import annotations

import json

from callgate.server.core.definitions import Service
from callgate.server.tools.catalog import file_definition, search_definition
from callgate.server.tools.registry import ToolRegistry
from callgate.server.tools.search.grep_tool import Grep
from callgate.server.tools.services import HelperSandbox


def test_file_tools_are_the_five_file_tools_and_register() -> None:
    """ReadFile, WriteFile, EditFile, Glob and Grep register under their names."""
    registry = ToolRegistry(
        [file_definition(), search_definition()], {Service.HELPERS: HelperSandbox(None)}
    )
    infos = registry.infos()
    assert [info.name for info in infos] == ["EditFile", "Glob", "Grep", "ReadFile", "WriteFile"]
    kinds = {info.name: info.requirement_kinds for info in infos}
    assert kinds["WriteFile"] == ("filesystem.write",)
    assert kinds["Grep"] == ("filesystem.read",)
    for info in infos:
        schema = json.loads(info.input_schema_json)
        assert schema["additionalProperties"] is False
        assert all("description" in field for field in schema["properties"].values())


def test_grep_runs_ripgrep_only_when_it_can_confine_it() -> None:
    """The catalog hands the ripgrep and bubblewrap paths to Grep; without bubblewrap ripgrep
    is not used at all (the Python engine opens every file without following symlinks)."""
    for rg_path, bwrap, expected in [
        ("/usr/bin/rg", "/usr/bin/bwrap", "/usr/bin/rg"),
        ("/usr/bin/rg", None, None),
        (None, "/usr/bin/bwrap", None),
    ]:
        services = {Service.HELPERS: HelperSandbox(rg_path, bwrap)}
        [grep] = [
            tool
            for tool in search_definition().build_for("s", "l", services)
            if isinstance(tool, Grep)
        ]
        assert grep.rg_path == expected
