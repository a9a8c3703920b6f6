"""The server's own CPU per allowed call: a real `callgate serve` (headless, Unix socket, no
sandbox needed) answers `--calls` ReadFiles of a 4 KiB file through the client's
`session.run` (one message on the Exchange stream), one at a time after `--warmup` calls; the
server process's user and system CPU time (`/proc/<pid>/stat`) over them, divided by their
number, against the wall time per call in the same run.

Target (the one-message issue): at most 0.45 ms of server CPU per call.

Usage: python -m bench.cpu [--calls N] [--warmup N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Final, TextIO

from bench.run import FILE_NAME, BenchmarkError, start_callgate, write_fixture
from callgate.client import CallgateClient

TARGET_MS: Final = 0.45


def server_pid(root: Path) -> int:
    """The `callgate serve` process listening in `root` (started by `start_callgate`)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and f"unix://{root}/cg.sock".encode() in argv:
            return int(entry.name)
    raise BenchmarkError("the server's process was not found")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(root: Path, log: TextIO, calls: int, warmup: int) -> tuple[float, float]:
    async with AsyncExitStack() as stack:
        target, token = await start_callgate(stack, root, root / "ws", root / "state", log)
        pid = server_pid(root)
        async with (
            CallgateClient(target, token=token) as client,
            client.open_session() as session,
        ):
            for _ in range(warmup):
                await session.run("ReadFile", {"path": FILE_NAME})
            cpu, wall = cpu_seconds(pid), time.perf_counter()
            for _ in range(calls):
                result = await session.run("ReadFile", {"path": FILE_NAME})
                if result.is_error:
                    raise BenchmarkError(f"ReadFile failed: {result.text[:200]!r}")
            cpu, wall = cpu_seconds(pid) - cpu, time.perf_counter() - wall
    return cpu * 1000 / calls, wall * 1000 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=3000, help="measured calls")
    parser.add_argument("--warmup", type=int, default=300, help="calls before measuring")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cgbench-cpu-") as scratch:
        root = Path(scratch).resolve()
        (root / "ws").mkdir()
        write_fixture(root / "ws")
        with (root / "callgate.log").open("w") as log:
            try:
                cpu, wall = asyncio.run(measure(root, log, args.calls, args.warmup))
            except BenchmarkError as exc:
                sys.exit(f"benchmark failed: {exc}")
    verdict = "PASS" if cpu <= TARGET_MS else "FAIL"
    print("| measure | value | target | result |\n|---|---:|---:|---|")
    print(
        f"| server CPU per allowed ReadFile 4 KiB ({args.calls} calls) | {cpu:.3f} ms "
        f"| ≤ {TARGET_MS} ms | {verdict} |"
    )
    print(f"| wall time per call, same run | {wall:.3f} ms | — | — |")


if __name__ == "__main__":
    main()
