"""The client half of MCP's tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`) over
the `mcp` SDK's client extension hooks, wire shapes as FastMCP's `fastmcp-tasks` has them: a
`tools/call` answered with `resultType: "task"` is polled with `tasks/get` until it ends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import anyio
import mcp_types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

TASKS = "io.modelcontextprotocol/tasks"


class _TaskFields(mcp_types.Result):
    model_config = ConfigDict(populate_by_name=True)
    task_id: str = Field(alias="taskId")
    status: Literal["working", "input_required", "completed", "failed", "cancelled"]
    created_at: str = Field(alias="createdAt")
    last_updated_at: str = Field(alias="lastUpdatedAt")
    ttl_ms: int | None = Field(default=None, alias="ttlMs")
    status_message: str | None = Field(default=None, alias="statusMessage")
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class CreatedTask(_TaskFields):
    result_type: Literal["task"] = Field(alias="resultType")


class TaskState(_TaskFields):
    result_type: Literal["complete"] = Field(alias="resultType")
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskIdParams(mcp_types.RequestParams):
    model_config = ConfigDict(populate_by_name=True)
    task_id: str = Field(serialization_alias="taskId")


class GetTask(mcp_types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams


class CancelTask(mcp_types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams


async def get_task(session: ClientSession, task_id: str) -> TaskState:
    return await session.send_request(GetTask(params=TaskIdParams(task_id=task_id)), TaskState)


async def cancel_task(session: ClientSession, task_id: str) -> None:
    await session.send_request(CancelTask(params=TaskIdParams(task_id=task_id)), mcp_types.Result)


class TasksClient(ClientExtension):
    """Polls a task to its end (at the interval the server asks, at most `bound` seconds);
    `cancel_after` polls, it cancels the task instead. `created` and `seen` record what the
    server said."""

    identifier = TASKS

    def __init__(self, cancel_after: int | None = None, bound: float = 60.0) -> None:
        self.cancel_after = cancel_after
        self.bound = bound
        self.created: list[CreatedTask] = []
        self.seen: list[TaskState] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (
            ResultClaim(
                result_type="task",
                model=CreatedTask,
                resolve=self._resolve,
                protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS),
            ),
        )

    async def _resolve(self, created: CreatedTask, ctx: ClaimContext) -> mcp_types.CallToolResult:
        self.created.append(created)
        with anyio.fail_after(self.bound):
            while True:
                state = await get_task(ctx.session, created.task_id)
                self.seen.append(state)
                if state.status == "completed":
                    assert state.result is not None
                    return mcp_types.CallToolResult.model_validate(state.result)
                if state.status in ("failed", "cancelled"):
                    return mcp_types.CallToolResult(
                        content=[mcp_types.TextContent(text=f"task {state.status}")],
                        is_error=True,
                    )
                if self.cancel_after is not None and len(self.seen) >= self.cancel_after:
                    await cancel_task(ctx.session, created.task_id)
                await anyio.sleep((state.poll_interval_ms or 1000) / 1000)
