"""examples/agent_loop.py as a user runs it: against `callgate serve`, with an approver."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import aclosing
from pathlib import Path

import anyio
import pytest

from callgate.client import CallgateClient, DecisionKind, PendingApproval, default_state_dir
from tests.support.serving import wait_until_serving

CALLGATE = str(Path(sys.executable).with_name("callgate"))
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_loop.py"


@pytest.fixture
def server_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`callgate serve` (sandbox auto) with a fresh directory as its workspace and its state
    in the default place under a fresh $XDG_STATE_HOME."""
    work = Path(tempfile.mkdtemp(prefix="cgex", dir="/tmp"))  # short: the socket path lives here
    xdg = Path(tempfile.mkdtemp(prefix="cgxdg", dir="/tmp"))
    monkeypatch.setenv("XDG_STATE_HOME", str(xdg))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    listen = f"unix://{default_state_dir() / 'callgate.sock'}"
    process = subprocess.Popen(
        [CALLGATE, "serve", "--listen", listen, "--sandbox", "auto"],
        cwd=work,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_serving(process)
        assert process.stderr is not None
        # Keep reading the log so that a chatty server never blocks on a full pipe.
        threading.Thread(target=process.stderr.read, daemon=True).start()
        yield work
    finally:
        process.terminate()
        try:
            assert process.wait(timeout=20) == 0
        finally:
            process.kill()
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(xdg, ignore_errors=True)


async def _approve_every_call(client: CallgateClient, approved: list[str]) -> None:
    """A test approver: approves each pending call once, with the digest it was shown."""
    async with aclosing(client.approvals.watch()) as items:
        async for item in items:
            if isinstance(item, PendingApproval):
                await client.approvals.decide(
                    item.execution_id, item.call.digest, DecisionKind.APPROVE_ONCE
                )
                approved.append(item.call.tool_name)


@pytest.mark.anyio
async def test_the_example_agent_fixes_the_sample_after_approval(server_dir: Path) -> None:
    """The scripted agent (with no --target or --token-file: it finds the server's default
    state directory) reads, edits (approved) and runs the tests with Bash (approved); the file
    is fixed and the final report says the tests passed."""
    target = f"unix://{default_state_dir() / 'callgate.sock'}"
    tokens = default_state_dir() / "tokens"
    project = server_dir / "project"
    approved: list[str] = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    command = [sys.executable, str(EXAMPLE), "--workspace", str(project)]
    approver_token = (tokens / "approver").read_text().strip()
    async with (
        CallgateClient(target, token=approver_token) as approver,
        anyio.create_task_group() as group,
    ):
        group.start_soon(_approve_every_call, approver, approved)
        with anyio.fail_after(60):
            done = await anyio.run_process(command, cwd=server_dir, env=env, check=False)
        group.cancel_scope.cancel()
    stdout = done.stdout.decode()
    assert done.returncode == 0, stdout + done.stderr.decode()
    assert approved == ["EditFile", "Bash"]
    assert "return a + b" in (project / "calc.py").read_text()
    report = stdout.splitlines()[-1]
    assert report.startswith("REPORT: Edited calc.py")
    assert "the tests passed (2 passed, 0 failed)" in report
