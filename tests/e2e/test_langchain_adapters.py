"""langchain-mcp-adapters 0.3.2 (with mcp 1.30, from .venv-langchain, `make install-langchain`)
drives `callgate mcp` on its defaults: a new MCP session, hence a new bridge process, for every
tool call, and no request timeout. A scripted agent reads a file and overwrites it; an approver
decides the write after the first bridge has answered it as pending (and ended): the agent's
repeat, through another process, gets the outcome of that one call."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from callgate.v1 import approval_service_pb2 as apb
from tests.support.approvals import Watcher, approver, decide
from tests.support.mcp_http import bridge_args, bridge_env, prepared_calls
from tests.support.server import Harness

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv-langchain" / "bin" / "python"
AGENT = ROOT / "tests" / "compat" / "langchain_agent.py"
BOUND = 90.0
APPROVER_TAKES = 6.0  # past the bridge's 4 s pending answer


@pytest.mark.skipif(not PYTHON.exists(), reason="make install-langchain makes .venv-langchain")
async def test_langchain_adapters_read_then_overwrite_through_a_bridge_per_call(
    harness: Harness, tmp_path: Path
) -> None:
    (harness.workspace / "notes.txt").write_text("old\n")
    command, *args = bridge_args(harness, tmp_path)
    config = {"command": command, "args": args, "env": bridge_env(), "bound": BOUND}
    watcher = Watcher(approver(harness))
    done: list[anyio.abc.Process] = []
    try:
        with anyio.fail_after(BOUND + 30):
            async with (
                await anyio.open_process([str(PYTHON), str(AGENT), json.dumps(config)]) as agent,
                anyio.create_task_group() as tasks,
            ):
                output = bytearray()

                async def collect() -> None:
                    assert agent.stdout is not None
                    async for chunk in agent.stdout:
                        output.extend(chunk)

                tasks.start_soon(collect)
                pending = await watcher.approval()
                assert pending.call.tool_name == "WriteFile"
                await anyio.sleep(APPROVER_TAKES)
                assert (harness.workspace / "notes.txt").read_text() == "old\n"
                await decide(approver(harness), pending.call, apb.DECISION_KIND_APPROVE_ONCE)
                await agent.wait()
                done.append(agent)
    finally:
        watcher.cancel()
    answers = [json.loads(line) for line in output.decode().splitlines()]
    assert done[0].returncode == 0, answers
    assert "WriteFile" in answers[0]["text"]
    assert answers[1] == answers[1] | {"tool": "ReadFile", "error": False}
    assert "Make exactly the same call again" in answers[2]["text"]  # pending, first process
    assert answers[-1]["error"] is False, answers[-1]
    assert (harness.workspace / "notes.txt").read_text() == "new\n"
    assert await prepared_calls(harness, "WriteFile") == 1
