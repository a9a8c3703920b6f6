"""Attacks on the MCP tasks extension (cli/mcp_tasks.py, and its wiring in cli/mcp_bridge.py)
from the agent's seat. A client that declares the extension gets a task for a gated call, and it
may poll, cancel or update that task, repeat the call with or without tasks, race tasks/cancel
against the approver, abort its own tasks/cancel, or send malformed task requests. Whatever it
does, a call is prepared once and runs at most once, a task that reads "cancelled" names a call
that never ran (and never will), and the bridge keeps serving."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar, Final, cast

import anyio
import grpc
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.extension import ClaimContext
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict

from callgate.cli.mcp_bridge import McpBridge, default_session_name
from callgate.cli.mcp_tasks import MAX_TASKS, TASKS_EXTENSION, TaskParams
from callgate.client import CallgateClient
from callgate.client.models import State
from callgate.v1 import approval_service_pb2 as apb
from tests.support.approvals import Watcher, approver, decide
from tests.support.mcp_http import bridge_args, bridge_env, prepared_calls, stdio_bridge, text_of
from tests.support.mcp_tasks import CreatedTask, TasksClient, get_task
from tests.support.server import Harness, serve
from tests.support.tools import Note

pytestmark = pytest.mark.anyio

APPROVE = apb.DECISION_KIND_APPROVE_ONCE
BOUND = 30.0
_META: Final[dict[str, Any]] = {
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}}
}


class _TaskCtx:
    """A 2026-07-28 request that declares the tasks extension."""

    protocol_version = "2026-07-28"
    params: ClassVar[dict[str, Any]] = {"_meta": _META}
    meta = None
    request = None


class _PlainCtx:
    """A 2026-07-28 request that does not declare it."""

    protocol_version = "2026-07-28"
    params: ClassVar[dict[str, Any]] = {}
    meta = None
    request = None


def _params(name: str, arguments: dict[str, Any]) -> types.CallToolRequestParams:
    return types.CallToolRequestParams(name=name, arguments=arguments)


@pytest.fixture
async def note_harness(tmp_path: Path) -> AsyncIterator[Harness]:
    async with serve(tmp_path, extra_tools=[Note()]) as running:
        running.workspace.joinpath("notes.txt").write_text("")
        yield running


async def _bridge(
    client: CallgateClient, harness: Harness, pending_after: float = 0.2
) -> McpBridge:
    session = await client.open_session("", name=default_session_name(harness.tokens["agent"]))
    return McpBridge(session, 600.0, pending_after)  # no ledger: memory only


async def _task(bridge: McpBridge, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    with anyio.fail_after(BOUND):
        params = _params(tool, arguments)
        created = await bridge._on_call_tool(_TaskCtx(), params)  # type: ignore[arg-type]
    assert isinstance(created, dict), created
    assert created["resultType"] == "task", created
    return created


async def _plain(bridge: McpBridge, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
    with anyio.fail_after(BOUND):
        params = _params(tool, arguments)
        answer = await bridge._on_call_tool(_PlainCtx(), params)  # type: ignore[arg-type]
    assert isinstance(answer, types.CallToolResult)
    return answer


async def _get(bridge: McpBridge, task_id: str) -> dict[str, Any]:
    params = TaskParams(taskId=task_id)
    state: dict[str, Any] = await bridge._tasks_get(_TaskCtx(), params)  # type: ignore[arg-type]
    return state


async def _cancel(bridge: McpBridge, task_id: str) -> None:
    await bridge._tasks_cancel(_TaskCtx(), TaskParams(taskId=task_id))  # type: ignore[arg-type]


async def _cancel_after(bridge: McpBridge, task_id: str, delay: float) -> None:
    await anyio.sleep(delay)  # the race's offset: this sleep is the attack
    await _cancel(bridge, task_id)


async def _until_ended(bridge: McpBridge, task_id: str) -> dict[str, Any]:
    """The task's state once the bridge's coroutine that drives it has ended."""
    runner = bridge._tasks._tasks[task_id].runner
    with anyio.fail_after(BOUND):
        await asyncio.wait({runner})
    return await _get(bridge, task_id)


async def _pending_approval(harness: Harness) -> apb.PendingApproval:
    watcher = Watcher(approver(harness))
    try:
        return await watcher.approval()
    finally:
        watcher.cancel()


def _lines(harness: Harness) -> list[str]:
    return harness.workspace.joinpath("notes.txt").read_text().splitlines()


# ----------------------------------------------------------------- T1: task + non-task repeat


async def test_t1_task_and_concurrent_plain_repeats_run_once(note_harness: Harness) -> None:
    """Attack: a gated call made as a task, then repeated without the extension, as a second
    task, and by plain repeats racing the approval. Promise: every request follows the one
    call: it is prepared once and runs once."""
    harness = note_harness
    arguments = {"text": "once"}
    answers: list[str] = []
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        bridge = await _bridge(client, harness)
        created = await _task(bridge, "Note", arguments)
        pending = await _pending_approval(harness)
        first = await _plain(bridge, "Note", arguments)  # a pending answer, same call
        answers.append(str(first.structured_content))
        second_task = await _task(bridge, "Note", arguments)

        async def repeat_until_outcome() -> None:
            # After the outcome was delivered, the same call is a new one: stop there.
            for _ in range(40):
                r = await _plain(bridge, "Note", arguments)
                answers.append(f"{r.structured_content} {text_of(r)[:40]}")
                if (r.structured_content or {}).get("status") not in (
                    "awaiting_approval",
                    "running",
                ):
                    return

        async with anyio.create_task_group() as tg:
            tg.start_soon(repeat_until_outcome)
            await decide(approver(harness), pending.call, APPROVE)
        ended = [await _until_ended(bridge, t["taskId"]) for t in (created, second_task)]
    observed = f"tasks {[e['status'] for e in ended]}; answers {answers[:6]}"
    assert _lines(harness) == ["once"], observed
    assert await prepared_calls(harness, "Note") == 1, observed


# ----------------------------------------------------------------- T2: cancel racing approval


def _cancelled_but_not_withdrawn(status: str, state: State, ran: bool) -> bool:
    """A task that reads "cancelled" although its call ran, or could still run."""
    return status == "cancelled" and (ran or state is not State.CANCELLED)


@pytest.mark.parametrize("delay", [0.0, 0.001, 0.003, 0.01, 0.03])
async def test_t2_cancel_racing_approval_never_reports_cancelled_for_a_call_that_ran(
    note_harness: Harness, delay: float
) -> None:
    """Attack: tasks/cancel sent `delay` seconds after the approver approves (a race sweep:
    the delays are the attack). Promise: a task that reads "cancelled" names a call the server
    withdrew, which never ran and never will; otherwise the task ends with the outcome.
    Was broken: the task read "cancelled" while the approved call ran."""
    harness = note_harness
    arguments = {"text": f"race-{delay}"}
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        bridge = await _bridge(client, harness)
        created = await _task(bridge, "Note", arguments)
        pending = await _pending_approval(harness)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_after, bridge, created["taskId"], delay)
            with contextlib.suppress(grpc.aio.AioRpcError):  # the cancel came first
                await decide(approver(harness), pending.call, APPROVE)
        ended = await _until_ended(bridge, created["taskId"])
        # The task has ended, so the call's state is final: nothing to wait for.
        call = await bridge._session.get_call(pending.call.execution_id)
    ran = _lines(harness)
    assert not _cancelled_but_not_withdrawn(ended["status"], call.state, bool(ran)), (
        f"the task says cancelled but the call is {call.state}, lines={ran}"
    )


async def test_t2c_cancel_racing_approval_sweep_without_any_injected_delay(
    note_harness: Harness,
) -> None:
    """Attack: T2 swept finely, with no test double: the approval and tasks/cancel about
    1.5-5 ms apart, 40 times (the sleeps are the attack). Promise: in no iteration does the
    task read "cancelled" for a call that ran or could still run."""
    harness = note_harness
    outcomes: list[tuple[float, str, State, bool]] = []
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        bridge = await _bridge(client, harness)
        for i in range(40):
            delay = 0.0015 + i * 0.0000875
            arguments = {"text": f"r{i}", "file": f"n{i}.txt"}
            created = await _task(bridge, "Note", arguments)
            pending = await _pending_approval(harness)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_after, bridge, created["taskId"], delay)
                with contextlib.suppress(grpc.aio.AioRpcError):  # the cancel came first
                    await decide(approver(harness), pending.call, APPROVE)
            ended = await _until_ended(bridge, created["taskId"])
            call = await bridge._session.get_call(pending.call.execution_id)
            ran = (harness.workspace / f"n{i}.txt").exists()
            outcomes.append((round(delay, 5), ended["status"], call.state, ran))
    bad = [o for o in outcomes if _cancelled_but_not_withdrawn(*o[1:])]
    summary: dict[tuple[str, str, bool], int] = {}
    for _, status, state, ran in outcomes:
        summary[(status, str(state), ran)] = summary.get((status, str(state), ran), 0) + 1
    assert not bad, (
        f"{len(bad)}/40: the task says cancelled but the call was not withdrawn: {bad}; "
        f"(task status, call state, ran): count -> {summary}"
    )


# ----------------------------------------------------------------- T3: repeat after cancel


async def test_t3_repeat_after_cancel_is_a_new_call_that_waits_for_its_own_approval(
    note_harness: Harness,
) -> None:
    """Attack: the agent cancels a task whose call waits for an approver, then makes the same
    call again, plain and as a task. Promise: the task reads "cancelled"; the repeat is a new
    call awaiting its own approval (never the withdrawn one), and nothing runs."""
    harness = note_harness
    arguments = {"text": "after-cancel"}
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        bridge = await _bridge(client, harness)
        created = await _task(bridge, "Note", arguments)
        pending = await _pending_approval(harness)
        await _cancel(bridge, created["taskId"])
        ended = await _get(bridge, created["taskId"])
        again = await _plain(bridge, "Note", arguments)
        again_task = await _task(bridge, "Note", arguments)
    assert ended["status"] == "cancelled"
    assert again.structured_content is not None
    assert again.structured_content.get("status") == "awaiting_approval", again
    assert again.structured_content["execution_id"] != pending.call.execution_id
    assert again_task["status"] == "working"
    assert _lines(harness) == []


# ----------------------------------------------------------------- T4: many tasks


async def test_t4_tasks_are_bounded(note_harness: Harness) -> None:
    """Attack: MAX_TASKS + 76 tasks for one undecided call. Promise: the bridge keeps at most
    MAX_TASKS (the oldest are forgotten) and the call is prepared once."""
    harness = note_harness
    arguments = {"text": "many"}
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        bridge = await _bridge(client, harness)
        first = await _task(bridge, "Note", arguments)
        for _ in range(MAX_TASKS + 76):
            await _task(bridge, "Note", arguments)
        size = len(bridge._tasks._tasks)
        with pytest.raises(MCPError, match="No task"):
            await _get(bridge, first["taskId"])  # evicted
        for task in list(bridge._tasks._tasks.values()):
            task.runner.cancel()
    assert size <= MAX_TASKS
    assert await prepared_calls(harness, "Note") == 1


# ----------------------------------------------------------------- T5: malformed requests


class _RawParams(types.RequestParams):
    model_config = ConfigDict(extra="allow")


class _Raw(types.Request[_RawParams | None, str]):
    method: str
    params: _RawParams | None = None


async def _raw(session: Any, method: str, params: dict[str, Any] | None) -> str:
    """Any request, as sent; the answer as text, or the JSON-RPC error."""
    request = _Raw(method=method, params=_RawParams(**params) if params is not None else None)
    try:
        with anyio.fail_after(BOUND):
            result = await session.send_request(request, types.Result)
        return f"ok {result.model_dump(by_alias=True, exclude_none=True)}"[:200]
    except MCPError as exc:
        return f"MCPError {exc.error.code}: {str(exc)[:140]}"


async def test_t5_malformed_task_requests_get_clear_errors_and_the_bridge_lives(
    harness: Harness, tmp_path: Path
) -> None:
    """Attack: malformed task requests to a bridge process on the 2026-07-28 protocol: no
    params, IDs of the wrong type or 1 MiB long, unknown tasks, deep input responses, and the
    tasks/list the bridge does not offer. Promise: each is a JSON-RPC error, and the bridge
    keeps serving tools/list and tools/call."""
    command, *args = bridge_args(harness, tmp_path, "--pending-after", "0.3")
    params = StdioServerParameters(command=command, args=args, env=bridge_env())
    seen: dict[str, str] = {}
    async with Client(params, extensions=[TasksClient()]) as client:
        s = client.session
        seen["get no params"] = await _raw(s, "tasks/get", None)
        seen["get {}"] = await _raw(s, "tasks/get", {})
        seen["get int id"] = await _raw(s, "tasks/get", {"taskId": 7})
        seen["get null id"] = await _raw(s, "tasks/get", {"taskId": None})
        seen["get 1MiB id"] = await _raw(s, "tasks/get", {"taskId": "A" * (1 << 20)})
        seen["get list id"] = await _raw(s, "tasks/get", {"taskId": ["x"] * 100000})
        seen["cancel unknown"] = await _raw(s, "tasks/cancel", {"taskId": "task_nope"})
        seen["update unknown"] = await _raw(
            s, "tasks/update", {"taskId": "task_nope", "inputResponses": {}}
        )
        seen["update no inputs"] = await _raw(s, "tasks/update", {"taskId": "task_nope"})
        seen["update deep"] = await _raw(
            s, "tasks/update", {"taskId": "t", "inputResponses": {"a": [[[[[[[[[[1]]]]]]]]]]}}
        )
        seen["tasks/list"] = await _raw(s, "tasks/list", {})
        with anyio.fail_after(BOUND):
            tools = await client.list_tools()
        with anyio.fail_after(BOUND):
            (harness.workspace / "alive.txt").write_text("y")
            read = await client.call_tool("ReadFile", {"path": "alive.txt"})
    assert tools.tools
    assert not read.is_error, text_of(read)
    for key, value in seen.items():
        assert value.startswith("MCPError"), f"{key}: {value}"


class _NotedTasks(TasksClient):
    """A TasksClient that says when the bridge answered with a task, and which."""

    def __init__(self, bound: float) -> None:
        super().__init__(cancel_after=None, bound=bound)
        self.task_ids: list[str] = []
        self.answered = anyio.Event()

    async def _resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        self.task_ids.append(created.task_id)
        self.answered.set()
        return await super()._resolve(created, ctx)


async def test_t5b_tasks_update_on_a_real_task_is_refused_and_changes_nothing(
    harness: Harness, tmp_path: Path
) -> None:
    """Attack: tasks/update with input responses on a real task whose call waits for an
    approver. Promise: refused as invalid params (a callgate task never asks its client for
    input; approvers decide through callgate), and the task stays working, its call not run."""
    command, *args = bridge_args(harness, tmp_path, "--pending-after", "0.3")
    params = StdioServerParameters(command=command, args=args, env=bridge_env())
    tasks = _NotedTasks(bound=BOUND)
    watcher = Watcher(approver(harness))
    try:
        async with (
            Client(params, extensions=[tasks]) as client,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(client.call_tool, "WriteFile", {"path": "u.txt", "content": "u"})
            await watcher.approval()
            with anyio.fail_after(BOUND):
                await tasks.answered.wait()
            task_id = tasks.task_ids[0]
            refused = await _raw(
                client.session,
                "tasks/update",
                {"taskId": task_id, "inputResponses": {"x": {"action": "accept"}}},
            )
            state = await get_task(client.session, task_id)
            tg.cancel_scope.cancel()  # the call itself is not this test's business
    finally:
        watcher.cancel()
    assert refused.startswith("MCPError -32602"), refused
    assert state.status == "working", state
    assert not (harness.workspace / "u.txt").exists()


# ----------------------------------------------------------------- T6: legacy protocol


async def test_t6_legacy_connection_has_no_task_methods(harness: Harness, tmp_path: Path) -> None:
    """Attack: a client on the pre-2026 protocol sends tasks/get, tasks/cancel and tasks/update
    with the extension claimed in `_meta`, and claims it on a tools/call too. Promise: the task
    methods do not exist on that connection, and the gated call gets an ordinary pending
    answer, not a task."""
    seen: dict[str, str] = {}
    async with stdio_bridge(harness, tmp_path, "--pending-after", "0.3") as session:
        assert session.protocol_version != "2026-07-28", session.protocol_version
        meta = {"_meta": _META}
        seen["get"] = await _raw(session, "tasks/get", {"taskId": "task_x", **meta})
        seen["cancel"] = await _raw(session, "tasks/cancel", {"taskId": "task_x", **meta})
        seen["update"] = await _raw(
            session, "tasks/update", {"taskId": "task_x", "inputResponses": {}, **meta}
        )
        with anyio.fail_after(BOUND):
            result = await session.call_tool(
                "WriteFile",
                {"path": "legacy.txt", "content": "x"},
                meta=cast(types.RequestParamsMeta, _META),
            )
    assert all(v.startswith("MCPError -32601") for v in seen.values()), seen
    assert (result.structured_content or {}).get("status") == "awaiting_approval", result


# ----------------------------------------------------------------- T7: cancel of the cancel


async def test_t7_an_aborted_tasks_cancel_still_withdraws_the_call(
    note_harness: Harness,
) -> None:
    """Attack: tasks/cancel is itself a request its client can abort (notifications/cancelled);
    here it is aborted while the bridge withdraws the call from the approvers. Promise: the
    withdrawal completes anyway: the task reads "cancelled", the call can no longer be approved,
    nothing runs, and a repeat is a new call.
    Was broken: an abort after the task ended but before the withdrawal left the call waiting;
    approved, a plain repeat ran it although its task read "cancelled"."""
    harness = note_harness
    arguments = {"text": "ghost"}
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        bridge = await _bridge(client, harness)
        created = await _task(bridge, "Note", arguments)
        pending = await _pending_approval(harness)
        task = bridge._tasks._tasks[created["taskId"]]
        real_withdraw = task.withdraw
        request = anyio.CancelScope()  # the tasks/cancel request's handler

        async def withdraw_while_aborted() -> bool:
            request.cancel()  # the client aborts the request: from the next await on
            return await real_withdraw()

        task.withdraw = withdraw_while_aborted
        with request:
            await _cancel(bridge, created["taskId"])
        state = await _get(bridge, created["taskId"])
        with pytest.raises(grpc.aio.AioRpcError, match="The call is cancelled"):
            await decide(approver(harness), pending.call, APPROVE)
        repeat = await _plain(bridge, "Note", arguments)
    assert request.cancel_called
    assert state["status"] == "cancelled"
    assert not _lines(harness)
    assert (repeat.structured_content or {}).get("status") == "awaiting_approval", repeat


# ----------------------------------------------------------------- T2b: cancel after the run


@pytest.mark.parametrize(
    "kind",
    [APPROVE, apb.DECISION_KIND_APPROVE_FOR_SESSION],
    ids=["approve-once", "approve-for-session"],
)
async def test_t2b_cancel_after_the_run_ended_but_before_the_bridge_saw_it(
    note_harness: Harness, kind: apb.DecisionKind.ValueType
) -> None:
    """Attack: tasks/cancel, and a plain repeat, land between the server ending the run and the
    bridge seeing the Invoke answer (network latency; held here by a test double in the
    bridge's session until the test lets it through). Promise: the task never reads
    "cancelled" for the call that ran; it ends with the outcome, and the repeat follows the
    same call: one call, one run, even with an approve-for-session decision.
    Was broken: the task read "cancelled", and the repeat was a new call, which a session
    approval then ran a second time without anyone being asked."""
    harness = note_harness
    arguments = {"text": "ran"}
    async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as client:
        bridge = await _bridge(client, harness)
        session = bridge._session
        real_invoke = session.invoke
        run_ended = anyio.Event()
        deliver = anyio.Event()

        async def delayed_answer(*args: Any, **kwargs: Any) -> Any:
            answer = await real_invoke(*args, **kwargs)
            run_ended.set()  # the server answered: the run has ended there
            await deliver.wait()  # ... and the answer is still on its way to the bridge
            return answer

        session.invoke = delayed_answer  # type: ignore[method-assign]
        created = await _task(bridge, "Note", arguments)
        pending = await _pending_approval(harness)
        await decide(approver(harness), pending.call, kind)
        with anyio.fail_after(BOUND):
            await run_ended.wait()
        await _cancel(bridge, created["taskId"])
        state = await _get(bridge, created["taskId"])
        repeat = await _plain(bridge, "Note", arguments)
        deliver.set()
        ended = await _until_ended(bridge, created["taskId"])
    prepared = await prepared_calls(harness, "Note")
    observed = (
        f"task after the cancel={state['status']}, at its end={ended['status']}; "
        f"repeat -> {repeat.structured_content} {text_of(repeat)[:60]!r}; "
        f"lines={_lines(harness)}; prepared={prepared}"
    )
    assert state["status"] != "cancelled", f"the task says cancelled but the call ran: {observed}"
    assert ended["status"] == "completed", observed
    assert _lines(harness) == ["ran"], observed
    assert prepared == 1, observed
