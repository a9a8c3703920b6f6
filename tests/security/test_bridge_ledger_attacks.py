"""Attacks on the ledger of pending calls (cli/mcp_pending.py, and how cli/mcp_bridge.py follows
it) from the agent's seat. The agent runs as the bridge's user: it can write the ledger file,
hold its lock, start bridges whenever it likes and make the same call through several of them at
once. Whatever it does, a call runs at most once, a repeat gets its own call's outcome, and a
ledger the bridge cannot use is an empty one, never a failure of the bridge."""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from anyio.abc import TaskStatus
from mcp.shared.exceptions import MCPError

from callgate.cli.mcp_bridge import McpBridge, call_key, default_session_name
from callgate.cli.mcp_pending import Ledger, LedgerEntry, ledger_name
from callgate.client import CallgateClient
from callgate.client.models import State
from callgate.server.core.models import ToolResult
from callgate.server.core.tool import ToolContext
from callgate.v1 import approval_service_pb2 as apb
from tests.support.approvals import Watcher, approver, decide
from tests.support.mcp_http import prepared_calls, text_of
from tests.support.server import Harness, serve
from tests.support.tools import Note, NoteArtifact

pytestmark = pytest.mark.anyio

APPROVE = apb.DECISION_KIND_APPROVE_ONCE
BOUND = 30.0
PATIENT = 15.0
"""`pending_after` of a bridge whose client waits for the outcome."""
HOLD_AT_MOST = 5.0
"""Seconds L5 holds the ledger's lock if the test never gets to release it."""


class HeldNote(Note):
    """A gated write like Note that appends "start", waits until the test sets `release`, and
    appends "end". `started` is set when a run begins; `ended` when it ends, done or killed
    (killed: no "end"). Each "start" line is one run."""

    name = "HeldNote"
    description = "Append a line once released."

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.release = anyio.Event()
        self.ended = anyio.Event()

    async def run(self, artifact: NoteArtifact, ctx: ToolContext) -> ToolResult:
        _append(artifact.path, "start")
        self.started.set()
        try:
            await self.release.wait()
            _append(artifact.path, "end")
        finally:
            self.ended.set()
        return ToolResult(text="held and done")


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


class _Ctx:
    """A request context without progress token or HTTP request (a stdio client)."""

    meta = None
    request = None


def _params(name: str, arguments: dict[str, Any]) -> types.CallToolRequestParams:
    return types.CallToolRequestParams(name=name, arguments=arguments)


async def _bridge(
    client: CallgateClient, name: str, ledger: Ledger, pending_after: float = 0.2
) -> McpBridge:
    """A bridge over the agent's named session `name` (each one a process of its own, as far
    as the ledger is concerned)."""
    session = await client.open_session("", name=name)
    return McpBridge(session, 600.0, pending_after, ledger=ledger)


async def _call(bridge: McpBridge, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
    with anyio.fail_after(BOUND):
        return await bridge.call_tool(_Ctx(), _params(tool, arguments))  # type: ignore[arg-type]


async def _try(bridge: McpBridge, tool: str, arguments: dict[str, Any]) -> str:
    """The answer as text, or the protocol error the MCP client would get."""
    try:
        return _show(await _call(bridge, tool, arguments))
    except MCPError as exc:
        return f"MCPError {exc.error.code}: {exc}"


async def _approve(harness: Harness, execution_id: str) -> None:
    watcher = Watcher(approver(harness))
    try:
        pending = await watcher.approval(execution_id)
    finally:
        watcher.cancel()
    await decide(approver(harness), pending.call, APPROVE)


def _show(result: types.CallToolResult) -> str:
    return (
        f"is_error={result.is_error} sc={result.structured_content} text={text_of(result)[:200]!r}"
    )


def _status(result: types.CallToolResult) -> object:
    return (result.structured_content or {}).get("status")


def _execution_id(result: types.CallToolResult) -> object:
    return (result.structured_content or {}).get("execution_id")


def _file(harness: Harness, name: str) -> str | None:
    path = harness.workspace / name
    return path.read_text() if path.exists() else None


@pytest.fixture
async def note_harness(tmp_path: Path) -> AsyncIterator[Harness]:
    async with serve(tmp_path, extra_tools=[Note()]) as running:
        yield running


# ----------------------------------------------------------------- L1: same tool, other call


async def test_l1_planted_entry_for_same_tool_other_arguments_is_not_followed(
    harness: Harness, tmp_path: Path
) -> None:
    """Attack: the agent copies the ledger entry of an approved (not yet run) WriteFile b.txt
    to the call key of WriteFile a.txt. Promise: the a.txt call is a call of its own, prepared
    and decided on its own; it never gets, or causes, the b.txt call's run or outcome.
    Was broken: the bridge trusted the entry and answered the a.txt request with the b.txt call."""
    name = default_session_name(harness.tokens["agent"])
    ledger = Ledger(tmp_path / "ledger", name, 3600)
    b = {"path": "b.txt", "content": "B\n"}
    a = {"path": "a.txt", "content": "A\n"}
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        bridge = await _bridge(client, name, ledger)
        first = await _call(bridge, "WriteFile", b)
        assert first.structured_content is not None
        await _approve(harness, first.structured_content["execution_id"])
        entry = ledger.find(call_key("WriteFile", b))
        assert entry is not None
        ledger.put(call_key("WriteFile", a), entry)
        got = await _call(await _bridge(client, name, ledger), "WriteFile", a)
        later = await _call(await _bridge(client, name, ledger), "WriteFile", b)
    observed = (
        f"a.txt request: {_show(got)}; b.txt repeat: {_show(later)}; "
        f"a.txt={_file(harness, 'a.txt')!r} b.txt={_file(harness, 'b.txt')!r} "
        f"prepared WriteFile={await prepared_calls(harness, 'WriteFile')}"
    )
    assert _status(got) == "awaiting_approval" or _file(harness, "a.txt") is not None, (
        f"the a.txt request got the b.txt call: {observed}"
    )


async def test_l1b_planted_entry_with_fresh_invoke_id_leaves_b_its_own_outcome(
    harness: Harness, tmp_path: Path
) -> None:
    """Attack: as L1, with a fresh invoke request ID in the planted entry, so that following it
    would invoke the approved b.txt call under a new ID. Promise: the genuine repeat of b.txt
    (through the bridge that answered it as pending) still gets b.txt's own outcome.
    Was broken: the a.txt request ran b.txt, and b.txt's repeat then got an error instead."""
    name = default_session_name(harness.tokens["agent"])
    ledger = Ledger(tmp_path / "ledger", name, 3600)
    b = {"path": "b.txt", "content": "B\n"}
    a = {"path": "a.txt", "content": "A\n"}
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        bridge = await _bridge(client, name, ledger)
        first = await _call(bridge, "WriteFile", b)
        assert first.structured_content is not None
        await _approve(harness, first.structured_content["execution_id"])
        entry = ledger.find(call_key("WriteFile", b))
        assert entry is not None
        ledger.put(
            call_key("WriteFile", a),
            dataclasses.replace(entry, invoke_request_id=str(uuid.uuid4())),
        )
        got = await _call(await _bridge(client, name, ledger), "WriteFile", a)
        later = await _try(bridge, "WriteFile", b)  # the bridge that holds b.txt in memory
    assert later.startswith("is_error=False"), (
        f"b.txt's own repeat lost its outcome: {later}; the a.txt request got {_show(got)}; "
        f"a.txt={_file(harness, 'a.txt')!r} b.txt={_file(harness, 'b.txt')!r}"
    )


# ----------------------------------------------------------------- L2: concurrent resume race


async def test_l2_two_identical_calls_with_a_dead_ledger_entry_prepare_once(
    harness: Harness, tmp_path: Path
) -> None:
    """Attack: the ledger names a call the session does not have (closed, expired, planted),
    and two identical calls arrive at once (parallel tool calls of one turn). Promise: the call
    is prepared once, and both requests get that one call.
    Was broken: both found the entry dead and each prepared a call of its own."""
    name = default_session_name(harness.tokens["agent"])
    ledger = Ledger(tmp_path / "ledger", name, 3600)
    arguments = {"path": "twice.txt", "content": "x"}
    ledger.put(
        call_key("WriteFile", arguments),
        LedgerEntry(str(uuid.uuid4()), "call_doesnotexist", "", "r", time.time()),
    )
    results: list[types.CallToolResult] = []
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        bridge = await _bridge(client, name, ledger, pending_after=0.3)

        async def one() -> None:
            results.append(await _call(bridge, "WriteFile", arguments))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one)
            tg.start_soon(one)
    prepared = await prepared_calls(harness, "WriteFile")
    ids = [_execution_id(r) for r in results]
    assert prepared == 1, f"the same call was prepared {prepared} times: {ids}"


# ----------------------------------------------------------------- L3: shared --session name


async def test_l3_two_agents_with_one_session_name_do_not_touch_each_others_calls(
    harness: Harness, tmp_path: Path
) -> None:
    """Attack: two agents (two tokens; here `admin` as X and `agent` as Y) both run
    `callgate mcp --session work` with one ledger directory. Promise: each agent's bridges see
    only that agent's entries, so X's next bridge follows X's call and prepares nothing new.
    Was broken: both used `<dir>/work.json`; Y dropped X's entry, and X prepared its call twice."""
    ledger_dir = tmp_path / "ledger"
    arguments = {"path": "shared.txt", "content": "x\n"}
    async with (
        CallgateClient(harness.tcp_target, token=harness.tokens["admin"]) as x_client,
        CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as y_client,
    ):
        xn = ledger_name(harness.tokens["admin"], "work")
        yn = ledger_name(harness.tokens["agent"], "work")
        x1 = await _bridge(x_client, "work", Ledger(ledger_dir, xn, 3600))
        x_first = await _call(x1, "WriteFile", arguments)
        files_y_found = sorted(p.name for p in ledger_dir.iterdir())
        y = await _bridge(y_client, "work", Ledger(ledger_dir, yn, 3600))
        y_first = await _call(y, "WriteFile", arguments)
        x2 = await _bridge(x_client, "work", Ledger(ledger_dir, xn, 3600))  # X's next process
        x_again = await _call(x2, "WriteFile", arguments)
    x_ids = {_execution_id(x_first), _execution_id(x_again)}
    assert len(x_ids) == 1, (
        f"agent X's one call was prepared twice: {x_ids}; Y got {_execution_id(y_first)}; "
        f"ledger files when Y started: {files_y_found}"
    )


# ----------------------------------------------------------------- L4: deep JSON in the ledger


async def test_l4_a_deeply_nested_ledger_is_empty_not_a_crash(
    harness: Harness, tmp_path: Path
) -> None:
    """Attack: the agent writes 100k '[' into the ledger file. Promise: a malformed ledger is
    an empty one; an ungated read through the bridge is answered as usual.
    Was broken: json.loads raised RecursionError, which the ledger let through."""
    name = default_session_name(harness.tokens["agent"])
    directory = tmp_path / "ledger"
    directory.mkdir(mode=0o700)
    (directory / f"{name}.json").write_text("[" * 100_000)
    (harness.workspace / "r.txt").write_text("hello\n")
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        bridge = await _bridge(client, name, Ledger(directory, name, 3600))
        try:
            outcome = _show(await _call(bridge, "ReadFile", {"path": "r.txt"}))
        except Exception as exc:
            outcome = f"raised {type(exc).__name__}: {str(exc)[:120]}"
    assert outcome.startswith("is_error=False"), outcome


# ----------------------------------------------------------------- L5: flock held by someone


def _close_when_released(fd: int, release: threading.Event) -> None:
    release.wait(HOLD_AT_MOST)
    os.close(fd)  # releases the lock


async def _measure_stalls(
    gaps: list[float], *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Note how long each short sleep really took: a blocked event loop shows as a long gap.
    (Timing is what this measures, so it sleeps until cancelled.)"""
    last = time.monotonic()
    task_status.started()
    while True:
        await anyio.sleep(0.05)
        now = time.monotonic()
        gaps.append(now - last)
        last = now


async def test_l5_a_held_ledger_lock_does_not_freeze_the_bridge(
    harness: Harness, tmp_path: Path
) -> None:
    """Attack: a process of the bridge's user (the agent itself, or a stuck bridge) holds the
    ledger file's flock while the bridge serves a call. Promise: the bridge's event loop never
    waits for the lock (its other requests go on), and the call is answered once the bridge
    gives up on the ledger (`LOCK_WAIT`).
    Was broken: a blocking flock on the event loop froze the bridge for as long as it was held."""
    name = default_session_name(harness.tokens["agent"])
    directory = tmp_path / "ledger"
    ledger = Ledger(directory, name, 3600)
    ledger.put("k", LedgerEntry("p", "call_x", "", "r", time.time()))  # creates the file
    (harness.workspace / "r.txt").write_text("hello\n")
    fd = os.open(directory / f"{name}.json", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # free, so taken at once
    # Held until the call is answered; a thread lets it go after HOLD_AT_MOST seconds anyway,
    # so that a bridge blocking the event loop (the test's too) on the lock fails, not hangs.
    release = threading.Event()
    holder = threading.Thread(target=_close_when_released, args=(fd, release))
    holder.start()
    gaps: list[float] = []
    try:
        async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
            bridge = await _bridge(client, name, ledger)
            async with anyio.create_task_group() as tg:
                await tg.start(_measure_stalls, gaps)
                started = time.monotonic()
                got = await _call(bridge, "ReadFile", {"path": "r.txt"})
                took = time.monotonic() - started
                tg.cancel_scope.cancel()
    finally:
        release.set()
        holder.join()
    longest = max(gaps, default=0.0)
    assert longest < 1.0, f"the bridge's event loop was frozen for {longest:.2f}s"
    assert not got.is_error, f"after {took:.2f}s: {_show(got)}"


# ----------------------------------------------------------------- L6: stale outcome


async def test_l6_control_one_bridge_forgets_a_delivered_outcome(
    note_harness: Harness, tmp_path: Path
) -> None:
    """Control for L6: one bridge delivers a call's outcome once; the same call made later is
    a new call (awaiting its own approval)."""
    harness = note_harness
    name = default_session_name(harness.tokens["agent"])
    ledger = Ledger(tmp_path / "ledger", name, 3600)
    arguments = {"text": "ran"}
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        p1 = await _bridge(client, name, ledger)
        first = await _call(p1, "Note", arguments)
        assert first.structured_content is not None
        await _approve(harness, first.structured_content["execution_id"])
        outcome = await _call(p1, "Note", arguments)
        later = await _call(p1, "Note", arguments)
    assert _status(later) == "awaiting_approval", (
        f"outcome: {_show(outcome)}; later: {_show(later)}"
    )


async def test_l6_two_long_lived_bridges_do_not_deliver_an_old_outcome_to_a_new_call(
    note_harness: Harness, tmp_path: Path
) -> None:
    """Attack: P1 answers a call as pending; P2, another long-lived bridge of the agent, follows
    the ledger and delivers the outcome; then the agent makes the same call through P1, whose
    memory still holds the call. Promise (as one bridge behaves, see the control): a delivered
    outcome is forgotten everywhere; the later call is a new call.
    Was broken: P1 tried to approve the finished call and answered a protocol error, forever."""
    harness = note_harness
    name = default_session_name(harness.tokens["agent"])
    arguments = {"text": "ran"}
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        p1 = await _bridge(client, name, Ledger(tmp_path / "ledger", name, 3600))
        p2 = await _bridge(client, name, Ledger(tmp_path / "ledger", name, 3600))
        first = await _call(p1, "Note", arguments)
        assert first.structured_content is not None
        await _approve(harness, first.structured_content["execution_id"])
        outcome = await _call(p2, "Note", arguments)
        later = [await _try(p1, "Note", arguments) for _ in range(3)]
    lines = (harness.workspace / "notes.txt").read_text().splitlines()
    assert "awaiting_approval" in later[0], (
        f"the same call made later through P1 is not a new call: {later}; "
        f"P2 delivered {_show(outcome)}; notes.txt lines={lines}"
    )


# ----------------------------------------------------------------- L7: two processes, one entry


def _first(hook: Callable[[], None], real: Callable[..., Awaitable[Any]]) -> Any:
    """`real`, calling `hook` first."""

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        hook()
        return await real(*args, **kwargs)

    return wrapped


def _signal_invokes(bridges: list[McpBridge]) -> anyio.Event:
    """An event set once every one of `bridges` has sent its call's Invoke."""
    sent = anyio.Event()
    silent = set(range(len(bridges)))

    def invoking(index: int) -> None:
        silent.discard(index)
        if not silent:
            sent.set()

    for index, bridge in enumerate(bridges):
        session = bridge._session
        noted = _first(functools.partial(invoking, index), session.invoke)
        session.invoke = noted  # type: ignore[method-assign]
    return sent


async def test_l7_two_bridges_following_one_entry_run_it_once(tmp_path: Path) -> None:
    """Attack: P1 answers a call as pending; after approval P2 and P3 (fresh processes) follow
    its ledger entry at once while P1 is repeated too, all three invoking while the call runs.
    Promise: it is prepared once and runs once (the server retries one Invoke request ID), and
    each of the three gets its outcome."""
    tool = HeldNote()
    async with serve(tmp_path, extra_tools=[tool]) as harness:
        harness.workspace.joinpath("notes.txt").write_text("")
        name = default_session_name(harness.tokens["agent"])
        arguments = {"text": "x"}
        results: list[str] = []
        async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
            p1 = await _bridge(client, name, Ledger(tmp_path / "ledger", name, 3600))
            first = await _call(p1, "HeldNote", arguments)
            assert first.structured_content is not None
            await _approve(harness, first.structured_content["execution_id"])
            p1._pending_after = PATIENT  # its client now waits for the outcome
            bridges = [p1] + [
                await _bridge(client, name, Ledger(tmp_path / "ledger", name, 3600), PATIENT)
                for _ in range(2)
            ]
            all_invoked = _signal_invokes(bridges)

            async def one(bridge: McpBridge) -> None:
                results.append(_show(await _call(bridge, "HeldNote", arguments)))

            async with anyio.create_task_group() as tg:
                for bridge in bridges:
                    tg.start_soon(one, bridge)
                with anyio.fail_after(BOUND):
                    await tool.started.wait()
                    await all_invoked.wait()
                tool.release.set()
        text = harness.workspace.joinpath("notes.txt").read_text()
        assert text.count("start") == 1, f"notes={text!r}; answers: {results}"
        assert text.count("end") == 1, f"notes={text!r}; answers: {results}"
        assert await prepared_calls(harness, "HeldNote") == 1, results
        assert all("held and done" in r for r in results), (
            f"not every repeat got the outcome: {results}"
        )


# ----------------------------------------------------------------- L8: the wedge, one bridge


async def test_l8_an_approved_call_that_expired_before_the_repeat_gets_an_error_result(
    tmp_path: Path,
) -> None:
    """Attack: none but the clock. One bridge answers a gated call as pending; it is approved,
    and the model comes back after the call's time to be invoked (calls.ttl_seconds, 1 s here).
    Promise: a clear tool error (the call expired), then the call is forgotten, so the next
    repeat is a new call and not a protocol error.
    Was broken: the bridge tried to approve the expired call and answered a protocol error to
    every repeat for an hour."""
    async with serve(tmp_path, calls={"ttl_seconds": 1.0}) as harness:
        name = default_session_name(harness.tokens["agent"])
        arguments = {"path": "late.txt", "content": "x\n"}
        async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
            bridge = await _bridge(client, name, Ledger(tmp_path / "ledger", name, 3600))
            first = await _call(bridge, "WriteFile", arguments)
            assert first.structured_content is not None
            execution_id = first.structured_content["execution_id"]
            await _approve(harness, execution_id)
            # Expiry is a deadline on the server's clock that nothing announces: poll for it
            # through a session of the test's own (the bridge's view stays as it was).
            observer = await client.open_session("", name=name)
            with anyio.fail_after(BOUND):
                while True:
                    call = await observer.get_call(execution_id)
                    if call.state is State.EXPIRED:
                        break
                    await anyio.sleep(0.05)
            later = [await _try(bridge, "WriteFile", arguments) for _ in range(3)]
    assert later[0].startswith("is_error=True"), later
    assert "MCPError" not in later[1], later
    assert "awaiting_approval" in later[1], f"the next repeat is not a new call: {later}"
