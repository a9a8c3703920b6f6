"""Graceful shutdown of a real `callgate serve` process (design section 7): SIGTERM with a
sandboxed `sleep 100` running ends it CANCELLED within the grace period, the process tree is
gone, the journal has the outcome, and the server exits 0."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from callgate.client import CallgateClient, ServerUnavailableError, State
from callgate.server.commands.matching import normalize_command
from tests.support.sandbox import bwrap_only, processes_containing

CALLGATE = str(Path(sys.executable).with_name("callgate"))
GRACE_SECONDS = 1.0

pytestmark = [pytest.mark.anyio, *bwrap_only]


@pytest.fixture
def server_dir() -> Iterator[Path]:
    work = Path(tempfile.mkdtemp(prefix="cgstop", dir="/tmp"))  # short: the socket lives here
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def test_sigterm_cancels_a_running_call_kills_its_tree_and_exits_zero(
    server_dir: Path,
) -> None:
    # `sleep 100.<random digits>`: a 100 s sleep that /proc can tell apart from anyone else's.
    marker = f"100.{secrets.randbelow(10**9):09d}"
    command = f"sleep {marker}"
    workspace = server_dir / "ws"
    workspace.mkdir()
    config = server_dir / "callgate.toml"
    config.write_text(
        f"shutdown_grace_seconds = {GRACE_SECONDS}\n"
        "[[rules]]\n"
        'effect = "allow"\n'
        'kind = "command.execute"\n'
        f"match = {normalize_command(command)!r}\n"
    )
    socket = server_dir / "s.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    process = subprocess.Popen(  # noqa: ASYNC220  # its exit is waited for in a thread
        [
            CALLGATE,
            "serve",
            "--config",
            str(config),
            "--listen",
            f"unix://{socket}",
            "--workspace",
            str(workspace),
            "--state-dir",
            str(server_dir / "state"),
            "--sandbox",
            "bwrap",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        with anyio.fail_after(60):
            while "serving on" not in (
                line := await anyio.to_thread.run_sync(process.stderr.readline)
            ):
                assert line, "callgate serve exited before serving"
        token = (server_dir / "state/tokens/agent").read_text().strip()
        async with CallgateClient(f"unix://{socket}", token=token) as client:
            session = await client.open_session()
            call = await session.prepare("Bash", {"command": command}, evaluate=True)
            results = []

            async def invoke() -> None:
                results.append(await session.invoke(call.execution_id))

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(invoke)
                with anyio.fail_after(60):
                    while not processes_containing(marker):  # noqa: ASYNC110  # /proc: polled
                        await anyio.sleep(0.02)
                signalled = time.monotonic()
                process.send_signal(signal.SIGTERM)
            (result,) = results
            # The answer came back (not a dropped RPC): the call was cancelled by the drain.
            assert result.call.state is State.CANCELLED
            with pytest.raises(ServerUnavailableError):
                await session.prepare("Bash", {"command": command})
        exit_code = await anyio.to_thread.run_sync(lambda: process.wait(timeout=60))
        elapsed = time.monotonic() - signalled
        assert exit_code == 0
        # Grace, then the tree's kill and confirmation: well under the 5 s answer window.
        assert elapsed < GRACE_SECONDS + 4, elapsed
        assert processes_containing(marker) == []
        stderr = process.stderr.read()
        assert "shutting down" in stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    journal = sqlite3.connect(f"file:{server_dir / 'state/journal.db'}?mode=ro", uri=True)
    try:
        rows = journal.execute(
            "SELECT kind, data FROM events WHERE execution_id = ? ORDER BY seq",
            (call.execution_id,),
        ).fetchall()
    finally:
        journal.close()
    assert [kind for kind, _ in rows][-2:] == ["call.invoked", "call.finished"]
    assert '"state":"cancelled"' in rows[-1][1]
