"""Driving a runner directly: a spec over real directories, and reading a command to its end."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
from anyio import EndOfStream

from callgate.server.sandbox.runner import CommandRunner, CommandSpec, RunningCommand

BOUND = 60.0
"""Seconds any one command in these tests may take before the test fails: far beyond what any
needs, since only a failure should get there and a loaded machine starts sandboxes slowly."""


@dataclass(frozen=True)
class Layout:
    """A workspace, a state directory with a session's HOME and TMPDIR, and a secret."""

    workspace: Path
    state: Path
    home: Path
    tmp: Path

    def spec(self, command: str, **changes: object) -> CommandSpec:
        spec = CommandSpec(
            command=command,
            workdir=str(self.workspace),
            workspace=str(self.workspace),
            home=str(self.home),
            tmp=str(self.tmp),
            env={"PATH": "/usr/bin:/bin", "HOME": str(self.home), "TMPDIR": str(self.tmp)},
            hidden_dirs=(str(self.state),),
        )
        return replace(spec, **changes)  # type: ignore[arg-type]  # test-chosen fields


def make_layout(base: Path) -> Layout:
    base = Path(os.path.realpath(base))
    workspace = base / "ws"
    state = base / "state"
    home = state / "sessions" / "s1" / "home"
    tmp = state / "sessions" / "s1" / "tmp"
    for directory in (workspace, home, tmp):
        directory.mkdir(parents=True, exist_ok=True)
    (state / "tokens").mkdir(exist_ok=True)
    (state / "tokens" / "agent").write_text("agent-token-value\n")
    return Layout(workspace, state, home, tmp)


async def read_until(running: RunningCommand, marker: bytes, seen: bytearray) -> None:
    """Read output into `seen` until it holds `marker` (bounded)."""
    with anyio.fail_after(BOUND):
        while marker not in seen:
            seen += await running.output.receive()


async def finish(running: RunningCommand, seen: bytearray | None = None) -> tuple[int, bytes]:
    """Read the output to its end and wait for the exit status (bounded)."""
    out = seen if seen is not None else bytearray()
    with anyio.fail_after(BOUND):
        try:
            while True:
                out += await running.output.receive()
        except EndOfStream:
            pass
        code = await running.wait()
    await running.output.aclose()
    return code, bytes(out)


@asynccontextmanager
async def started(runner: CommandRunner, spec: CommandSpec) -> AsyncIterator[RunningCommand]:
    """Start a command; whatever the test does, its tree is gone afterwards (a failed
    assertion must not leave a sleeper behind)."""
    running = await runner.start(spec)
    try:
        yield running
    finally:
        with anyio.CancelScope(shield=True):
            await running.terminate_tree(0)
            await running.output.aclose()
