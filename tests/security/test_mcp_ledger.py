"""The pending-call ledger a bridge shares with the agent's next bridge process: what it holds
decides nothing. A planted entry (another tool's call, another session's call, nonsense) is
dropped, a symlink in its place is never followed, and the ledger stays bounded."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from callgate.cli.mcp_bridge import McpBridge, call_key, default_session_name
from callgate.cli.mcp_pending import LEDGER_MAX, Ledger, LedgerEntry
from callgate.client import CallgateClient
from callgate.v1 import approval_service_pb2 as apb
from tests.support.approvals import Watcher, approver, decide
from tests.support.mcp_http import prepared_calls, text_of
from tests.support.server import Harness

pytestmark = pytest.mark.anyio

BOUND = 30.0


class _Ctx:
    meta = None
    request = None


def _params(name: str, arguments: dict[str, Any]) -> types.CallToolRequestParams:
    return types.CallToolRequestParams(name=name, arguments=arguments)


def _entry(execution_id: str) -> LedgerEntry:
    return LedgerEntry(str(uuid.uuid4()), execution_id, "", str(uuid.uuid4()), time.time())


async def _bridge(harness: Harness, client: CallgateClient, ledger: Ledger) -> McpBridge:
    session = await client.open_session("", name=default_session_name(harness.tokens["agent"]))
    return McpBridge(session, 600.0, 0.2, ledger=ledger)


async def test_an_entry_naming_a_call_of_another_tool_is_dropped_and_nothing_runs_twice(
    harness: Harness, tmp_path: Path
) -> None:
    """The agent plants the ledger entry of an approved WriteFile under the call key of another
    call: the server refuses the entry's request ID for other arguments (its fingerprint), the
    bridge drops the entry and prepares the call asked for, which the gate decides on its own;
    the WriteFile is not run by it."""
    ledger = Ledger(tmp_path / "ledger", "s", 3600)
    watcher = Watcher(approver(harness))
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        bridge = await _bridge(harness, client, ledger)
        write = {"path": "a.txt", "content": "a\n"}
        with anyio.fail_after(BOUND):
            first = await bridge.call_tool(_Ctx(), _params("WriteFile", write))  # type: ignore[arg-type]
        assert first.structured_content is not None
        execution_id = first.structured_content["execution_id"]
        try:
            pending = await watcher.approval(execution_id)
        finally:
            watcher.cancel()
        await decide(approver(harness), pending.call, apb.DECISION_KIND_APPROVE_ONCE)
        other = {"path": "a.txt"}
        planted = ledger.find(call_key("WriteFile", write))
        assert planted is not None
        assert planted.execution_id == execution_id
        ledger.put(call_key("ReadFile", other), planted)
        fresh = await _bridge(harness, client, ledger)
        with anyio.fail_after(BOUND):
            read = await fresh.call_tool(_Ctx(), _params("ReadFile", other))  # type: ignore[arg-type]
    assert read.is_error
    assert "does not exist" in text_of(read), text_of(read)
    assert ledger.find(call_key("ReadFile", other)) is None
    assert not (harness.workspace / "a.txt").exists()  # the approved write was not run by it
    assert await prepared_calls(harness, "ReadFile") == 1


async def test_an_entry_naming_an_unknown_call_prepares_afresh(
    harness: Harness, tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger", "s", 3600)
    arguments = {"path": "b.txt"}
    (harness.workspace / "b.txt").write_text("b\n")
    ledger.put(call_key("ReadFile", arguments), _entry("call_doesnotexist"))
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        bridge = await _bridge(harness, client, ledger)
        with anyio.fail_after(BOUND):
            read = await bridge.call_tool(_Ctx(), _params("ReadFile", arguments))  # type: ignore[arg-type]
    assert not read.is_error, text_of(read)
    assert ledger.find(call_key("ReadFile", arguments)) is None


def test_a_symlink_in_place_of_the_ledger_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    directory = tmp_path / "ledger"
    directory.mkdir(mode=0o700)
    (directory / "s.json").symlink_to(victim)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        Ledger(directory, "s", 3600).put("k", _entry("call_x"))
    assert victim.read_text() == "precious\n"


def test_a_malformed_ledger_is_empty_and_entries_are_checked(tmp_path: Path) -> None:
    directory = tmp_path / "ledger"
    directory.mkdir(mode=0o700)
    path = directory / "s.json"
    path.write_text("{not json")
    ledger = Ledger(directory, "s", 3600)
    assert ledger.find("k") is None
    path.write_text(
        json.dumps({"k": ["p", "../../etc", "", "r", 1e18], "j": ["p", "call_x", "", "r", "now"]})
    )
    assert ledger.find("k") is None
    assert ledger.find("j") is None
    ledger.put("k", _entry("call_x"))
    assert ledger.find("k") is not None
    path.write_text("[" * 100_000)  # too deep for the JSON decoder: empty, not a crash
    assert ledger.find("k") is None
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_the_ledger_keeps_at_most_its_bound(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger", "s", 3600)
    for n in range(LEDGER_MAX + 5):
        ledger.put(f"k{n}", _entry(f"call_{n}"))
    assert ledger.find("k0") is None
    assert ledger.find(f"k{LEDGER_MAX + 4}") is not None


def test_a_session_name_cannot_leave_the_ledger_directory(tmp_path: Path) -> None:
    for name in ("../x", "", ".hidden", "a/b"):
        with pytest.raises(ValueError, match="plain name"):
            Ledger(tmp_path, name, 3600)


def test_an_empty_or_absent_ledger_is_known_empty_without_reading_it(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger", "s", 3600)
    assert not ledger.may_hold()  # no file yet
    ledger.put("k", _entry("call_x"))
    assert ledger.may_hold()
    ledger.drop("k")
    assert not ledger.may_hold()  # "{}" left
