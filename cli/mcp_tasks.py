"""MCP's tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) for `callgate mcp`.

A client that declares the extension on a `tools/call` (MCP 2026-07-28: in the request's
`_meta` client capabilities) is answered, when its call waits for an approver, with a task
(`resultType: "task"`) instead of a wait: it polls `tasks/get` (status `working` with the words
a progress notification would carry, then `completed` with the call's result) and may withdraw
the call with `tasks/cancel`. The task is driven by a coroutine of the bridge's own, so that
nothing depends on the client staying connected; `tasks/update` is refused (a callgate call never
asks its client for input: approvals go through callgate's approval channel).

Task IDs are random (128 bits) and kept at most `MAX_TASKS` at once, each for `TASK_TTL` after
it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import METHOD_NOT_FOUND, MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

__all__ = [
    "MAX_TASKS",
    "POLL_INTERVAL_MS",
    "TASKS_EXTENSION",
    "TASK_TTL",
    "TaskTable",
    "opted_in",
]

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
MAX_TASKS: Final = 1024
TASK_TTL: Final = 3600.0
"""Seconds a task's outcome is kept after it ended."""
POLL_INTERVAL_MS: Final = 1000

_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"

TaskStatus = Literal["working", "completed", "failed", "cancelled"]


def opted_in(ctx: ServerRequestContext[Any]) -> bool:
    """Whether the request declares the tasks extension (only the 2026-07-28 era has
    per-request extension capabilities)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    params = ctx.params if isinstance(ctx.params, Mapping) else {}
    meta = params.get("_meta")
    capabilities = meta.get(_CAPABILITIES_KEY) if isinstance(meta, Mapping) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(extensions, Mapping) and isinstance(extensions.get(TASKS_EXTENSION), Mapping)


class TaskParams(types.RequestParams):
    """`tasks/get` and `tasks/cancel`: the task's ID."""

    model_config = ConfigDict(populate_by_name=True)
    task_id: str = Field(alias="taskId", max_length=64)


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any] = Field(alias="inputResponses")


def _stamp(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")


@dataclass(eq=False)
class _Task:
    task_id: str
    runner: asyncio.Task[types.CallToolResult]
    describe: Callable[[], str]
    withdraw: Callable[[], Awaitable[bool]]
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    status: TaskStatus = "working"
    result: types.CallToolResult | None = None
    error: str = ""

    def settle(self) -> None:
        """Take the runner's outcome once it ended."""
        if self.status != "working" or not self.runner.done():
            return
        self.updated = time.time()
        if self.runner.cancelled():
            self.status = "cancelled"
            return
        exc = self.runner.exception()
        if exc is not None:
            self.status, self.error = "failed", str(exc) or type(exc).__name__
        else:
            self.status, self.result = "completed", self.runner.result()

    def fields(self) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": _stamp(self.created),
            "lastUpdatedAt": _stamp(self.updated),
            "ttlMs": int(TASK_TTL * 1000),
            "pollIntervalMs": POLL_INTERVAL_MS,
        }
        if self.status == "working":
            shown["statusMessage"] = self.describe()
        return shown


class TaskTable:
    """The tasks of one bridge, by ID."""

    def __init__(self) -> None:
        self._tasks: OrderedDict[str, _Task] = OrderedDict()

    def start(
        self,
        drive: Coroutine[Any, Any, types.CallToolResult],
        describe: Callable[[], str],
        withdraw: Callable[[], Awaitable[bool]],
    ) -> dict[str, Any]:
        """A task driven by `drive`; its creation result (`resultType: "task"`)."""
        self._forget_ended()
        task = _Task(
            "task_" + secrets.token_hex(16), asyncio.ensure_future(drive), describe, withdraw
        )
        self._tasks[task.task_id] = task
        while len(self._tasks) > MAX_TASKS:
            _, oldest = self._tasks.popitem(last=False)
            oldest.runner.cancel()
        return {"resultType": "task", **task.fields()}

    async def get(self, ctx: ServerRequestContext[Any], params: TaskParams) -> dict[str, Any]:
        task = self._task(ctx, params.task_id)
        task.settle()
        shown = task.fields()
        if task.status == "completed" and task.result is not None:
            shown["result"] = task.result.model_dump(by_alias=True, mode="json", exclude_none=True)
        elif task.status == "failed":
            shown["error"] = {"code": -32603, "message": task.error}
        return shown

    async def cancel(self, ctx: ServerRequestContext[Any], params: TaskParams) -> dict[str, Any]:
        """Cancel the call on the server first (undecided: withdrawn from the approvers;
        running: stopped), then end the task as that left it: "cancelled" only when the call
        never ran; one that ran or runs ends with its outcome (never reported as cancelled
        when it took effect). Shielded: a client giving up on this request changes nothing."""
        task = self._task(ctx, params.task_id)
        task.settle()
        if task.status != "working":
            return {}
        with anyio.CancelScope(shield=True):
            withdrawn = await task.withdraw()
            if withdrawn and task.status == "working" and not task.runner.done():
                task.runner.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task.runner
                task.status, task.updated = "cancelled", time.time()
        return {}

    async def update(self, ctx: ServerRequestContext[Any], params: UpdateTaskParams) -> None:
        self._task(ctx, params.task_id)
        raise MCPError(
            code=-32602,
            message="A callgate task never asks for input; approvers decide through callgate.",
        )

    def _task(self, ctx: ServerRequestContext[Any], task_id: str) -> _Task:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            raise MCPError(code=METHOD_NOT_FOUND, message="Method not found")
        if not opted_in(ctx):
            raise MCPError(
                code=MISSING_REQUIRED_CLIENT_CAPABILITY,
                message=f"Declare the tasks extension ({TASKS_EXTENSION}) on this request.",
            )
        task = self._tasks.get(task_id)
        if task is None:
            raise MCPError(code=-32602, message=f"No task {task_id[:64]!r} (unknown or expired).")
        return task

    def _forget_ended(self) -> None:
        oldest = time.time() - TASK_TTL
        for task_id, task in list(self._tasks.items()):
            task.settle()
            if task.status != "working" and task.updated < oldest:
                del self._tasks[task_id]
