"""No call blocks the loop.

The attack: with ripgrep off (or absent, or not confinable), Grep searched with Python `re`,
which backtracks; `(a+)+$` over lines of a's ending in b took exponential time while holding
the GIL, so every RPC froze (over 30 s) and SIGTERM was not acted on. Grep's Python engine and
the globs now match with RE2 (linear time), the search runs in a worker thread that checks its
deadline, and SIGTERM ends the server within its grace whatever a Grep is doing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from callgate.client import CallgateClient, State
from callgate.server.commands.matching import Family, command_allowed, command_denied
from callgate.server.commands.shell_parse import parse_command
from callgate.server.core.preview import diff_preview as preview_diff
from callgate.server.tools.files.file_tools import diff_preview as files_diff
from callgate.server.tools.search.patterns import compile_grep_regex

CALLGATE = str(Path(sys.executable).with_name("callgate"))
GRACE_SECONDS = 1.0
NASTY_LINE = "a" * 30 + "b\n"  # `(a+)+$`: 2^30 backtracking steps per line in Python `re`

pytestmark = pytest.mark.anyio


@dataclass
class Served:
    process: subprocess.Popen[str]
    target: str
    token: str


@pytest.fixture
def server_dir() -> Iterator[Path]:
    work = Path(tempfile.mkdtemp(prefix="cgloop", dir="/tmp"))  # short: the socket lives here
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


@asynccontextmanager
async def callgate_serve(server_dir: Path, lines: int) -> AsyncIterator[Served]:
    """A `callgate serve` process with ripgrep off over a workspace of nasty lines; killed
    on the way out if it is still there (the old code ignored SIGTERM)."""
    workspace = server_dir / "ws"
    workspace.mkdir()
    (workspace / "nasty.txt").write_text(NASTY_LINE * lines)
    config = server_dir / "callgate.toml"
    config.write_text(f"shutdown_grace_seconds = {GRACE_SECONDS}\n[tools]\nripgrep = false\n")
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
            "none",
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
        yield Served(process, f"unix://{socket}", token)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


async def health_latencies(target: str, seconds: float) -> list[float]:
    """Health checks one after another for `seconds`; each is bounded at 5 s."""
    latencies: list[float] = []
    request = health_pb2.HealthCheckRequest(service="callgate.v1.ToolService")
    async with grpc.aio.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            started = time.monotonic()
            try:
                await health.Check(request, timeout=5.0)
            except grpc.aio.AioRpcError:
                latencies.append(5.0)
                break
            latencies.append(time.monotonic() - started)
            await anyio.sleep(0.01)
    return latencies


async def test_a_catastrophic_pattern_does_not_freeze_the_server(server_dir: Path) -> None:
    async with (
        callgate_serve(server_dir, lines=200) as served,
        CallgateClient(served.target, token=served.token) as client,
    ):
        session = await client.open_session()
        outcome: list[str] = []

        async def grep() -> None:
            result = await session.run("Grep", {"pattern": "(a+)+$", "path": "."})
            outcome.append(result.text)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(grep)
            await anyio.sleep(0.2)
            latencies = await health_latencies(served.target, 2.0)
            with anyio.fail_after(20):
                while not outcome:  # noqa: ASYNC110  # the Grep's task appends its result
                    await anyio.sleep(0.05)
        assert max(latencies) < 1.0, max(latencies)
        assert outcome[0].startswith("no matches")


async def test_sigterm_ends_the_server_within_its_grace_during_a_long_grep(
    server_dir: Path,
) -> None:
    # ~64 MiB of nasty lines: seconds of work for RE2, forever for backtracking.
    async with callgate_serve(server_dir, lines=2_000_000) as served:
        async with CallgateClient(served.target, token=served.token) as client:
            session = await client.open_session()
            grep = await session.prepare("Grep", {"pattern": "(a+)+$", "path": "."}, evaluate=True)
            assert grep.state is State.APPROVED, grep.state
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(session.invoke, grep.execution_id)
                # The signal must find the search running, however long it takes to start.
                with anyio.fail_after(60):
                    async with aclosing(session.watch_call(grep.execution_id)) as changes:
                        async for seen in changes:
                            if seen.state is not State.APPROVED:
                                break
                assert seen.state is State.RUNNING, seen.state
                signalled = time.monotonic()
                served.process.send_signal(signal.SIGTERM)
                code = await anyio.to_thread.run_sync(lambda: served.process.wait(timeout=30))
                elapsed = time.monotonic() - signalled
                tasks.cancel_scope.cancel()
        assert code == 0
        assert elapsed < GRACE_SECONDS + 2.0, elapsed


@pytest.mark.parametrize(
    ("pattern", "line", "matches"),
    [
        ("(a+)+$", "a" * 5000 + "b", False),
        ("(a|aa)*c", "a" * 5000, False),
        ("(x+x+)+y", "x" * 5000, False),
        ("^(\\w+\\s?)*$", "word " * 2000 + "!", False),
        ("\\d+", "١٢٣", True),  # Arabic-Indic digits are \d in ripgrep, and now here
        ("\\w", "é", True),
        ("\\s", "\u2003", True),
        ("\\x{1F600}", "😀", True),
    ],
)
def test_the_python_engine_is_linear_and_speaks_ripgreps_dialect(
    pattern: str, line: str, matches: bool
) -> None:
    regex = compile_grep_regex(pattern, ignore_case=False)
    started = time.monotonic()
    assert (regex.search(line) is not None) is matches
    assert time.monotonic() - started < 2.0  # did not hang (backtracking takes years)


@pytest.mark.parametrize(
    "command",
    [
        "a|" * 32000 + "a",
        "$(" * 10000 + "x" + ")" * 10000,
        "git log " + "--x " * 15000,
        "bash -c '" + "a|" * 3000 + "a' | bash -c '" + "b|" * 3000 + "b'",
    ],
)
def test_a_huge_command_is_not_read_and_so_fails_closed(command: str) -> None:
    """Reading a 64 KiB command of thousands of segments or options held the loop for up to a
    second per Prepare (tree-sitter keeps the GIL). Past MAX_SYNTAX_NODES it is not read: no
    allow family covers it and every deny family matches it."""
    parse_command.cache_clear()
    started = time.monotonic()
    parsed = parse_command(command)
    assert time.monotonic() - started < 2.0  # did not hang
    assert any(
        len(segment.words) == 1 and segment.words[0] in command for segment in parsed.segments
    )
    families = [Family(("git", "log")), Family(("a",))]
    assert not command_allowed(command, (), families)
    assert command_denied(command, (), [Family(("rm",))])


def test_a_diff_of_lines_repeated_by_design_is_not_quadratic() -> None:
    """An agent reads a file of 1,900 "ab" lines, then writes (or edits it into) alternating
    "ab"/"ba" lines: difflib without autojunk matched those for over 100 s on the loop (the
    WriteFile preview at Prepare, and EditFile's result diff). One diff engine
    (core/preview.py) serves both and never does that."""
    before, after = "ab\n" * 1900, "ab\nba\n" * 950
    started = time.monotonic()
    preview = preview_diff("f.txt", before, after, 64 << 10)
    result = files_diff(before, after)
    assert time.monotonic() - started < 2.0  # did not hang (it took minutes)
    assert preview.text.startswith("--- a/f.txt\n+++ b/f.txt\n@@ ")
    assert "+ba" in preview.text
    assert result.startswith("@@ -1,1901 +1,1901 @@\n")  # correct, if not minimal
