"""One side of bench/confinement.py: a `callgate serve --sandbox bwrap` per workspace, measured
through the client library, on command from the parent over stdin/stdout.

The parent starts this script twice, with PYTHONPATH pointing at the `src` of the tree it
measures (the commit before the confinement, and the current one), so both sides run this
very code against servers started the same way. It imports only what both trees have: the
client (`CallgateClient`, `session.run`) and the `serve` command's config file; the bare
`scan_tree` timing exists on the current side only.

Protocol, one JSON object a line. Start: `{"ready": true, "callgate": <its __init__.py>}` once
every server is SERVING.
Then per request `{"op": "grep"|"bash"|"read"|"scan", "workspace": NAME, "count": N}` the
answer `{"samples_ns": [...]}` (plus `"detail"` for "scan"), or `{"error": "..."}`. End of
stdin stops the servers.

Usage (by the parent): confinement_driver.py --scratch DIR --workspace NAME=PATH [...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

import callgate
from callgate.client import CallgateClient

TOOL_SERVICE: Final = "callgate.v1.ToolService"
START_TIMEOUT: Final = 30.0
CALL_TIMEOUT: Final = 60.0
STOP_TIMEOUT: Final = 5.0
NEEDLE: Final = "CGBENCH_NEEDLE"
"""The Grep pattern; the parent's workspace holds it in NEEDLE_FILES files, one line each."""
READ_FILE: Final = "file4k.txt"
SCAN_SECONDS: Final = 120.0


class DriverError(Exception):
    """A server failed to start or a call did not return what it should."""


@dataclass
class Workspace:
    name: str
    path: Path
    state: Path
    expected_matches: int


def write_config(side: Path, workspace: Workspace, socket: Path) -> Path:
    """Headless, bubblewrap, `true` allowed by a rule; reads in the workspace (ReadFile, Grep)
    are allowed by the access defaults."""
    side.mkdir(parents=True)
    config = side / "callgate.toml"
    config.write_text(
        f'listen = ["unix://{socket}"]\n'
        f'workspace = "{workspace.path}"\n'
        f'state_dir = "{workspace.state}"\n'
        'sandbox = "bwrap"\n'
        'approval_mode = "headless"\n'
        'log_level = "warning"\n\n'
        '[[rules]]\neffect = "allow"\nkind = "command.execute"\nmatch = "true"\n',
        encoding="utf-8",
    )
    return config


@asynccontextmanager
async def callgate_server(side: Path, workspace: Workspace) -> AsyncIterator[tuple[str, str]]:
    """`python -m callgate.cli.main serve` of whichever tree is on PYTHONPATH; yields
    (target, agent token)."""
    socket = side / "cg.sock"
    config = write_config(side, workspace, socket)
    log_path = side / "server.log"
    with log_path.open("w", encoding="utf-8") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "callgate.cli.main",
            "serve",
            "--config",
            str(config),
            cwd=side,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        try:
            target = f"unix://{socket}"
            await wait_until_serving(process, target, log_path)
            token = (workspace.state / "tokens" / "agent").read_text(encoding="utf-8").strip()
            yield target, token
        finally:
            if process.returncode is None:
                process.terminate()
                try:
                    await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
                except TimeoutError:
                    process.kill()
                    await process.wait()


async def wait_until_serving(process: asyncio.subprocess.Process, target: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    request = health_pb2.HealthCheckRequest(service=TOOL_SERVICE)
    async with grpc.aio.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            if process.returncode is not None:
                tail = log.read_text(errors="replace")[-2000:]  # noqa: ASYNC240  # a failure path
                raise DriverError(f"callgate serve exited with {process.returncode}:\n{tail}")
            try:
                response = await health.Check(request, timeout=1.0)
                if response.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise DriverError(f"callgate serve was not SERVING within {START_TIMEOUT} s")
            await asyncio.sleep(0.05)


Operation = Callable[[], Awaitable[None]]


class Driver:
    def __init__(self) -> None:
        self.operations: dict[tuple[str, str], Operation] = {}
        self.workspaces: dict[str, Workspace] = {}

    async def open(self, stack: AsyncExitStack, scratch: Path, workspace: Workspace) -> None:
        target, token = await stack.enter_async_context(
            callgate_server(scratch / workspace.name, workspace)
        )
        client = await stack.enter_async_context(CallgateClient(target, token=token))
        session = await stack.enter_async_context(client.open_session())
        self.workspaces[workspace.name] = workspace

        async def grep() -> None:
            result = await session.run("Grep", {"pattern": NEEDLE})
            lines = [line for line in result.text.splitlines() if NEEDLE in line]
            if result.is_error or len(lines) != workspace.expected_matches:
                raise DriverError(f"Grep {workspace.name}: {result.text[:300]!r}")

        async def bash() -> None:
            result = await session.run("Bash", {"command": "true"})
            if result.is_error or result.exit_code != 0:
                raise DriverError(f"Bash true {workspace.name}: {result.text[:300]!r}")

        async def read() -> None:
            result = await session.run("ReadFile", {"path": READ_FILE})
            if result.is_error or "line 64" not in result.text:
                raise DriverError(f"ReadFile {workspace.name}: {result.text[:300]!r}")

        for op, operation in (("grep", grep), ("bash", bash), ("read", read)):
            self.operations[(op, workspace.name)] = operation

    async def samples(self, op: str, name: str, count: int) -> list[int]:
        operation = self.operations[(op, name)]
        taken: list[int] = []
        for _ in range(count):
            async with asyncio.timeout(CALL_TIMEOUT):
                started = time.perf_counter_ns()
                await operation()
                taken.append(time.perf_counter_ns() - started)
        return taken

    def scan(self, name: str, count: int) -> tuple[list[int], str]:
        """Bare `scan_tree` of the workspace with the server's default globs (current tree
        only), in this thread: what each Grep and Bash call adds before its sandbox starts."""
        from callgate.server.core.paths import (
            DEFAULT_DENIED_GLOBS,
            DEFAULT_READONLY_GLOBS,
            ProtectedPaths,
        )
        from callgate.server.sandbox.tree_scan import TreeScanner, scan_tree

        workspace = self.workspaces[name]
        root = os.path.realpath(workspace.path)
        state = str(workspace.state)
        protected = ProtectedPaths(DEFAULT_DENIED_GLOBS, [state], DEFAULT_READONLY_GLOBS)
        taken: list[int] = []
        detail = ""
        for _ in range(count):
            started = time.perf_counter_ns()
            found = scan_tree(root, protected, seconds=SCAN_SECONDS)
            taken.append(time.perf_counter_ns() - started)
            detail = (
                f"{found.entries} entries, {len(found.masked)} masked, "
                f"{len(found.readonly)} read-only"
            )
        # What each call pays once the session's scanner has walked the tree and nothing
        # changed: a stat per directory (the cold walk above lists every directory).
        scanner = TreeScanner(protected)
        scanner.scan(root, seconds=SCAN_SECONDS)
        warm: list[int] = []
        for _ in range(max(count, 5)):
            started = time.perf_counter_ns()
            scanner.scan(root, seconds=SCAN_SECONDS)
            warm.append(time.perf_counter_ns() - started)
        warm.sort()
        detail += f"; remembered, tree unchanged: p50 {warm[len(warm) // 2] / 1e6:.1f} ms"
        return taken, detail

    async def serve_requests(self) -> None:
        while line := await asyncio.to_thread(sys.stdin.readline):
            request = json.loads(line)
            op, name, count = request["op"], request["workspace"], int(request["count"])
            try:
                if op == "scan":
                    taken, detail = self.scan(name, count)
                    answer: dict[str, object] = {"samples_ns": taken, "detail": detail}
                else:
                    answer = {"samples_ns": await self.samples(op, name, count)}
            except (DriverError, ImportError, TimeoutError) as exc:
                answer = {"error": f"{op} {name}: {type(exc).__name__}: {exc}"}
            reply(answer)


def reply(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def parse_workspace(text: str) -> tuple[str, Path, int]:
    name, _, rest = text.partition("=")
    path, _, matches = rest.rpartition(":")
    if not name or not path or not matches.isdigit():
        raise argparse.ArgumentTypeError("expected NAME=PATH:MATCHES")
    return name, Path(path), int(matches)


async def run(args: argparse.Namespace) -> None:
    scratch: Path = args.scratch
    driver = Driver()
    async with AsyncExitStack() as stack:
        for name, path, matches in args.workspace:
            workspace = Workspace(name, path, scratch / name / "state", matches)
            await driver.open(stack, scratch, workspace)
        # The parent checks that this tree is the one it meant (an editable install must not win).
        reply({"ready": True, "callgate": callgate.__file__})
        await driver.serve_requests()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scratch", type=Path, required=True, help="this side's own directory")
    parser.add_argument(
        "--workspace",
        type=parse_workspace,
        action="append",
        required=True,
        help="NAME=PATH:MATCHES, MATCHES the Grep lines expected",
    )
    args = parser.parse_args()
    try:
        asyncio.run(run(args))
    except DriverError as exc:
        reply({"error": str(exc)})
        sys.exit(1)


if __name__ == "__main__":
    main()
