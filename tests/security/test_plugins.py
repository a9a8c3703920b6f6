"""Tools of one's own go through the same gate, attacked from the agent's seat.

A plugin is installed as pip installs one (a `*.dist-info` with a `callgate.tools` entry point)
on a directory the server's Python searches. The agent holds only its token: it can prepare,
approve (ask) and invoke, nothing more. What must hold:
- only the plugins the configuration names are imported;
- a plugin call runs only after Prepare and the gate, exactly as prepared (never raw JSON);
- a kind the gate does not know is denied unless the configuration gives it an access value;
- a plugin that raises while a call runs ends that call with a tool error, not the server;
- a plugin that cannot be built stops the start, naming it.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from callgate.server.config import ConfigError, load_config
from callgate.server.core.definitions import DefinitionBuildError
from callgate.server.plugins import ENTRY_POINT_GROUP, load_plugins
from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.support import plugins
from tests.support.approvals import approver, decide
from tests.support.calls import invoke, open_session, prepare
from tests.support.server import Harness, serve
from tests.support.serving import CALLGATE
from tests.support.status import failure

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


def _entry(name: str, target: str) -> importlib.metadata.EntryPoint:
    return importlib.metadata.EntryPoint(name=name, value=target, group=ENTRY_POINT_GROUP)


@pytest.fixture(autouse=True)
def _clean_records() -> None:
    plugins.STASHED_RAW.clear()
    plugins.RUNS.clear()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on the Python path to install plugins into."""
    directory = tmp_path / "site"
    directory.mkdir()
    monkeypatch.syspath_prepend(str(directory))
    return directory


@pytest.fixture
async def echo_server(tmp_path: Path, site: Path) -> AsyncIterator[Harness]:
    plugins.install_plugin(site, "echo", "tests.support.plugins:echo")
    async with serve(tmp_path, tools={"plugins": ["echo"]}) as harness:
        yield harness


def test_an_installed_plugin_that_is_not_named_is_never_imported() -> None:
    module = "tests.support.plugin_never_imported"
    sys.modules.pop(module, None)
    loaded = load_plugins(
        ["echo"],
        [_entry("echo", "tests.support.plugins:echo"), _entry("other", f"{module}:definition")],
    )
    assert [definition.name for definition in loaded] == ["echo"]
    assert all(definition.plugin for definition in loaded)
    assert module not in sys.modules


def test_a_name_no_installed_plugin_has_stops_the_start() -> None:
    with pytest.raises(ConfigError, match=r"tools\.plugins: no installed plugin is named 'nope'"):
        load_plugins(["nope"], [_entry("echo", "tests.support.plugins:echo")])


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("tests.support.plugins:not_a_definition", "is not a callgate ToolDefinition"),
        ("tests.support.no_such_module:definition", "failed to load"),
    ],
)
def test_an_entry_point_that_is_not_a_definition_stops_the_start(target: str, problem: str) -> None:
    with pytest.raises(DefinitionBuildError, match=problem):
        load_plugins(["echo"], [_entry("echo", target)])


async def test_unnamed_plugins_offer_no_tools(tmp_path: Path, site: Path) -> None:
    """Installed, not named in [tools] plugins: ListTools does not know it, Prepare neither."""
    plugins.install_plugin(site, "echo", "tests.support.plugins:echo")
    async with serve(tmp_path) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        listed = await stub.ListTools(tpb.ListToolsRequest(session_id=session))
        assert "Echo" not in [tool.name for tool in listed.tools]
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await prepare(stub, session, "Echo", {"value": "x"})
        assert failure(raised.value).reason == "TOOL_NOT_FOUND"


async def test_a_named_plugin_is_listed_with_its_annotations(echo_server: Harness) -> None:
    stub = echo_server.stub()
    session = await open_session(stub)
    listed = await stub.ListTools(tpb.ListToolsRequest(session_id=session))
    (echo,) = [tool for tool in listed.tools if tool.name == "Echo"]
    assert echo.annotations.read_only


async def test_a_plugin_call_runs_what_was_prepared_not_the_raw_arguments(
    echo_server: Harness,
) -> None:
    """The plugin kept the raw arguments it was given at Prepare; changing them afterwards (as
    a careless plugin or anything else holding them might) does not change what runs."""
    stub = echo_server.stub()
    session = await open_session(stub)
    call = await prepare(stub, session, "Echo", {"value": "prepared"}, evaluate=True)
    assert call.state == cpb.STATE_APPROVED
    (raw,) = plugins.STASHED_RAW
    raw["value"] = "changed after Prepare"
    result = (await invoke(stub, session, call.execution_id)).result
    assert result.text == "prepared"
    assert plugins.RUNS == ["prepared"]


async def test_a_gated_plugin_call_cannot_run_before_an_approver_decides(
    tmp_path: Path, site: Path
) -> None:
    plugins.install_plugin(site, "echo", "tests.support.plugins:echo_network")
    async with serve(tmp_path, tools={"plugins": ["echo"]}) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        call = await prepare(stub, session, "Echo", {"value": "unapproved"}, evaluate=True)
        assert call.state == cpb.STATE_AWAITING_APPROVAL
        for execution_id in (call.execution_id, "call_" + "0" * 32):
            with pytest.raises(grpc.aio.AioRpcError):
                await invoke(stub, session, execution_id)
        assert plugins.RUNS == []
        # The agent cannot approve its own gated call either.
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await decide(approver(harness, "agent"), call, apb.DECISION_KIND_APPROVE_ONCE)
        assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert plugins.RUNS == []
        decided = await decide(approver(harness), call, apb.DECISION_KIND_APPROVE_ONCE)
        assert decided.state == cpb.STATE_APPROVED
        assert (await invoke(stub, session, call.execution_id)).result.text == "unapproved"
        assert plugins.RUNS == ["unapproved"]


async def test_a_kind_the_gate_does_not_know_is_denied_unless_configured(
    tmp_path: Path, site: Path
) -> None:
    plugins.install_plugin(site, "echo", "tests.support.plugins:echo_query")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with serve(tmp_path / "a", tools={"plugins": ["echo"]}) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        call = await prepare(stub, session, "Echo", {"value": "q"}, evaluate=True)
        assert call.state == cpb.STATE_DENIED
        assert "unknown" in call.denial.description
    access = {"kinds": {plugins.PLUGIN_KIND: "allow"}}
    async with serve(tmp_path / "b", tools={"plugins": ["echo"]}, access=access) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        call = await prepare(stub, session, "Echo", {"value": "q"}, evaluate=True)
        assert call.state == cpb.STATE_APPROVED
        assert (await invoke(stub, session, call.execution_id)).result.text == "q"
    assert plugins.RUNS == ["q"]


async def test_a_plugin_asking_for_more_than_it_declares_is_refused_at_prepare(
    tmp_path: Path, site: Path
) -> None:
    """ListTools says what a tool's calls may need; a call that needs more is not kept."""
    plugins.install_plugin(site, "echo", "tests.support.plugins:echo_undeclared")
    async with serve(tmp_path, tools={"plugins": ["echo"]}) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await prepare(stub, session, "Echo", {"value": "x"}, evaluate=True)
        assert raised.value.code() == grpc.StatusCode.INTERNAL
        listed = await stub.ListCalls(tpb.ListCallsRequest(session_id=session))
        assert list(listed.calls) == []
    assert plugins.RUNS == []


def test_a_plugin_kind_may_not_take_the_name_of_callgates_own() -> None:
    with pytest.raises(ConfigError, match="callgate's own kind"):
        load_config(None, {"access": {"kinds": {"network": "allow"}}}, environ={})


async def test_a_plugin_that_raises_while_running_is_a_tool_error(echo_server: Harness) -> None:
    stub = echo_server.stub()
    session = await open_session(stub)
    call = await prepare(stub, session, "Echo", {"value": "crash"}, evaluate=True)
    result = (await invoke(stub, session, call.execution_id)).result
    assert result.is_error
    assert result.error_code == "internal_error"
    assert "the plugin broke" not in result.text  # details stay in the server's log
    after = await prepare(stub, session, "Echo", {"value": "still serving"}, evaluate=True)
    assert (await invoke(stub, session, after.execution_id)).result.text == "still serving"


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("tests.support.plugins:broken", "its build failed: ValueError: set [tools.settings"),
        ("tests.support.plugins:needs_undeclared", "uses the service NETWORK"),
    ],
)
def test_a_plugin_that_cannot_be_built_stops_serve_naming_it(
    tmp_path: Path, site: Path, target: str, said: str
) -> None:
    """`callgate serve` itself, with the plugin installed on its PYTHONPATH."""
    plugins.install_plugin(site, "echo", target)
    work = tmp_path / "work"
    work.mkdir()
    config = tmp_path / "callgate.toml"
    config.write_text('[tools]\nplugins = ["echo"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    done = subprocess.run(
        [CALLGATE, "serve", "--config", str(config), "--state-dir", str(tmp_path / "state")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("callgate: tool definition 'echo': "), done.stderr
    assert said in last
