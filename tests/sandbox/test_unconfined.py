"""The unconfined runner: a clean environment and a process-group tree that ends when told."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from callgate.server.core.models import SandboxMode
from callgate.server.sandbox.unconfined import UnconfinedRunner
from tests.sandbox.helpers import Layout, finish, make_layout, read_until, started
from tests.support.sandbox import sleep_marker, sleeper, sleeper_running

pytestmark = pytest.mark.anyio


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return make_layout(tmp_path)


async def test_runs_bash_in_the_workdir_with_only_the_spec_environment(layout: Layout) -> None:
    """cwd is the workdir and the environment is the spec's, not the server's."""
    os.environ["CALLGATE_TEST_LEAK"] = "leaked"
    try:
        code, out = await finish(await UnconfinedRunner().start(layout.spec("pwd; env")))
    finally:
        del os.environ["CALLGATE_TEST_LEAK"]
    lines = out.decode().splitlines()
    assert code == 0
    assert lines[0] == str(layout.workspace)
    assert {line.split("=", 1)[0] for line in lines[1:]} == {
        "PATH",
        "HOME",
        "TMPDIR",
        "PWD",
        "SHLVL",
        "_",
    }
    assert UnconfinedRunner().mode is SandboxMode.NONE


async def test_exit_status_follows_the_shell_convention(layout: Layout) -> None:
    """Death by signal N is reported as 128+N."""
    assert (await finish(await UnconfinedRunner().start(layout.spec("kill -TERM $$"))))[0] == 143


async def test_terminate_tree_ends_the_process_group(layout: Layout) -> None:
    """A background job and a double fork within the group end with it; terminate_tree
    returns only once they are gone."""
    first, second = sleep_marker(), sleep_marker()
    command = f"{sleeper(first)} & ({sleeper(second)} &); wait"
    async with started(UnconfinedRunner(), layout.spec(command)) as running:
        seen = bytearray()
        for marker in (first, second):
            await read_until(running, f"up {marker}\n".encode(), seen)
        await running.terminate_tree(2.0)
        for marker in (first, second):
            assert sleeper_running(marker) == []


async def test_leftovers_after_the_leader_exits_are_ended(layout: Layout) -> None:
    """Once the shell has exited, terminate_tree still finds and ends the rest of its group."""
    marker = sleep_marker()
    async with started(UnconfinedRunner(), layout.spec(f"{sleeper(marker)} &")) as running:
        await read_until(running, f"up {marker}\n".encode(), bytearray())
        assert await running.wait() == 0
        assert sleeper_running(marker)
        await running.terminate_tree(2.0)
        assert sleeper_running(marker) == []


async def test_sigkill_follows_an_ignored_sigterm(layout: Layout) -> None:
    """A group that ignores SIGTERM is killed after the grace period."""
    marker = sleep_marker()
    command = f"trap '' TERM; {sleeper(marker)}"
    async with started(UnconfinedRunner(), layout.spec(command)) as running:
        await read_until(running, f"up {marker}\n".encode(), bytearray())
        await running.terminate_tree(0.2)
        assert running.returncode == 128 + signal.SIGKILL
        assert sleeper_running(marker) == []
