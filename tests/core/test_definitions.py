"""Tool definitions (core/definitions.py, tools/registry.py): explicit services, checked when
the server starts, fresh builds, bundles over one store."""

from __future__ import annotations

import pytest

from callgate.server.core.definitions import (
    Bindings,
    BuildScope,
    DefinitionBuildError,
    Service,
    ToolAnnotations,
    ToolDefinition,
)
from callgate.server.core.tool import ToolPlugin
from callgate.server.tools.catalog import builtin_definitions, task_definition
from callgate.server.tools.registry import ToolRegistry
from tests.support.tools import Note, Peek


def _note(bindings: Bindings) -> list[ToolPlugin]:
    return [Note()]


def test_a_definition_needing_a_service_the_server_lacks_stops_the_start() -> None:
    """The error names the definition and the service; nothing is registered."""
    definition = ToolDefinition(
        name="notes",
        build=_note,
        annotations={"Note": ToolAnnotations()},
        requires=Service.NETWORK,
    )
    with pytest.raises(DefinitionBuildError) as raised:
        ToolRegistry([definition], services={})
    assert "'notes'" in str(raised.value)
    assert "NETWORK" in str(raised.value)


def test_callgates_own_definitions_need_every_service_the_server_provides() -> None:
    """Started with one service missing, the built-in families refuse to build, naming it:
    no tool falls back to a default of its own (Fetch once built its own HTTP backend)."""
    with pytest.raises(DefinitionBuildError) as raised:
        ToolRegistry(builtin_definitions(60.0, headless=False), services={})
    assert "service" in str(raised.value)


def test_a_build_that_uses_a_service_it_did_not_declare_fails() -> None:
    def build(bindings: Bindings) -> list[ToolPlugin]:
        bindings.service(Service.NETWORK, object)
        return [Note()]

    definition = ToolDefinition(name="sneaky", build=build, annotations={"Note": ToolAnnotations()})
    with pytest.raises(DefinitionBuildError, match="does not declare it"):
        ToolRegistry([definition], services={Service.NETWORK: object()})


def test_a_service_of_the_wrong_kind_is_refused() -> None:
    def build(bindings: Bindings) -> list[ToolPlugin]:
        bindings.service(Service.NETWORK, str)
        return [Note()]

    definition = ToolDefinition(
        name="typed",
        build=build,
        annotations={"Note": ToolAnnotations()},
        requires=Service.NETWORK,
    )
    with pytest.raises(DefinitionBuildError, match="provides no NETWORK service"):
        ToolRegistry([definition], services={Service.NETWORK: 42})


def test_a_build_must_return_exactly_the_tools_it_declares() -> None:
    definition = ToolDefinition(
        name="liar",
        build=lambda bindings: [Note(), Peek()],
        annotations={"Note": ToolAnnotations()},
    )
    with pytest.raises(DefinitionBuildError, match="declares"):
        ToolRegistry([definition])


def test_a_build_that_raises_is_a_build_error_naming_the_definition() -> None:
    def build(bindings: Bindings) -> list[ToolPlugin]:
        raise ValueError("set the endpoint")

    definition = ToolDefinition(name="broken", build=build, annotations={"Note": ToolAnnotations()})
    with pytest.raises(DefinitionBuildError, match=r"'broken'.*set the endpoint"):
        ToolRegistry([definition])


def test_two_definitions_cannot_offer_the_same_tool_name() -> None:
    first = ToolDefinition(name="a", build=_note, annotations={"Note": ToolAnnotations()})
    second = ToolDefinition(name="b", build=_note, annotations={"Note": ToolAnnotations()})
    with pytest.raises(DefinitionBuildError, match="already offered by 'a'"):
        ToolRegistry([first, second])


def test_builds_are_fresh_per_loop_and_a_bundle_shares_one_store() -> None:
    """The task bundle: the four tools of one build share one graph; another loop's build
    has a graph of its own."""
    registry = ToolRegistry([task_definition()])
    first = registry.build("ses_1", "loop_a", BuildScope.LOOP)
    second = registry.build("ses_1", "loop_b", BuildScope.LOOP)
    assert sorted(first) == ["TaskCreate", "TaskGet", "TaskList", "TaskUpdate"]
    graphs = {id(tool.graph) for tool in first.values()}  # type: ignore[attr-defined]
    assert len(graphs) == 1
    assert first["TaskCreate"] is not second["TaskCreate"]
    assert first["TaskCreate"].graph is not second["TaskCreate"].graph  # type: ignore[attr-defined]


def test_session_scoped_definitions_build_once_per_session() -> None:
    built: list[tuple[str, str]] = []

    def build(bindings: Bindings) -> list[ToolPlugin]:
        built.append((bindings.session_id, bindings.loop_id))
        return [Note()]

    definition = ToolDefinition(
        name="per-session",
        build=build,
        annotations={"Note": ToolAnnotations()},
        scope=BuildScope.SESSION,
    )
    registry = ToolRegistry([definition])
    assert registry.build("ses_1", "loop_a", BuildScope.LOOP) == {}
    assert sorted(registry.build("ses_1", "", BuildScope.SESSION)) == ["Note"]
    assert built == [("", ""), ("ses_1", "")]  # the start's check, then the session


def test_annotations_reach_tool_info() -> None:
    registry = ToolRegistry(builtin_definitions(60.0, headless=False)[:1])
    infos = {info.name: info.annotations for info in registry.infos()}
    assert infos["ReadFile"] == ToolAnnotations(read_only=True, idempotent=True)
    assert infos["EditFile"].destructive
