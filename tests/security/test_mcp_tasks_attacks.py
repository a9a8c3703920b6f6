"""Attacks on the bridge's tasks extension from the agent's seat: guessing a task, asking about
one without declaring the extension, and forcing a task onto the pre-2026 protocol."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from callgate.cli.mcp_tasks import TASKS_EXTENSION
from tests.support.mcp_http import bridge_args, bridge_env, stdio_bridge
from tests.support.mcp_tasks import TasksClient, get_task
from tests.support.server import Harness

pytestmark = pytest.mark.anyio

BOUND = 30.0


def _params(harness: Harness, tmp_path: Path) -> StdioServerParameters:
    command, *args = bridge_args(harness, tmp_path, "--pending-after", "0.3")
    return StdioServerParameters(command=command, args=args, env=bridge_env())


async def test_a_guessed_task_id_is_unknown(harness: Harness, tmp_path: Path) -> None:
    async with Client(_params(harness, tmp_path), extensions=[TasksClient()]) as client:
        with anyio.fail_after(BOUND), pytest.raises(MCPError, match="No task") as raised:
            await get_task(client.session, "task_" + "0" * 32)
    assert raised.value.error.code == -32602


async def test_tasks_get_without_the_extension_declared_is_refused(
    harness: Harness, tmp_path: Path
) -> None:
    async with Client(_params(harness, tmp_path)) as client:
        with anyio.fail_after(BOUND), pytest.raises(MCPError, match="Declare the tasks") as raised:
            await get_task(client.session, "task_" + "0" * 32)
    assert raised.value.error.code == -32021


async def test_a_pre_2026_client_claiming_the_extension_in_meta_gets_no_task(
    harness: Harness, tmp_path: Path
) -> None:
    """The 2025-11-25 result surface has no task shape: a client that writes the modern
    capability key into `_meta` by hand still gets an ordinary (pending) result."""
    meta: Any = {
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}}
    }
    async with stdio_bridge(harness, tmp_path, "--pending-after", "0.3") as session:
        with anyio.fail_after(BOUND):
            result = await session.call_tool(
                "WriteFile", {"path": "x.txt", "content": "x"}, meta=meta
            )
    assert result.structured_content is not None
    assert result.structured_content["status"] == "awaiting_approval"
