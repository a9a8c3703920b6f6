"""The kill -9 guarantee without a process per command.

A sandboxed command is held by bubblewrap (`--block-fd`) until the server has put its init in
the command's cgroups and set its rlimits; one watchdog per server kills everything in those
cgroups when the server's end of its pipe closes (the server died). The attacks, from the
agent's seat, are the server dying at the wrong moment: before a command was placed (it must
never run), and while commands run (they must all end, a background child included).
Everything here runs inside bubblewrap with its own PID namespace, only harmless `sleep`s.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from callgate.server.sandbox import bwrap as bwrap_module
from callgate.server.sandbox import limits as limits_module
from callgate.server.sandbox.bwrap import BwrapCommand, BwrapRunner
from callgate.server.sandbox.limits import CommandLimiter, CommandLimits
from tests.sandbox.helpers import BOUND, Layout, finish, make_layout, read_until, started
from tests.support.sandbox import bwrap_only, bwrap_path, processes_running, sleep_marker

pytestmark = [pytest.mark.anyio, *bwrap_only]

LIMITS = CommandLimits(pids=64, memory_bytes=256 << 20, cpu_seconds=7, file_size_bytes=1 << 20)


@pytest.fixture
def limiter() -> Iterator[CommandLimiter]:
    limiter = CommandLimiter(LIMITS, "auto")
    if limiter.mechanism not in ("cgroup-v1", "cgroup-v2"):
        limiter.close()
        pytest.skip("no writable cgroups here: the per-command lifeline guards instead")
    yield limiter
    limiter.close()


@pytest.fixture
def runner(limiter: CommandLimiter) -> BwrapRunner:
    path = bwrap_path()
    assert path is not None
    return BwrapRunner(path, lifeline=True, limiter=limiter)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return make_layout(tmp_path)


def ignored(pid: int) -> set[int]:
    """The signals a process ignores (SigIgn of /proc/PID/status)."""
    line = next(
        line
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("SigIgn:")
    )
    mask = int(line.split()[1], 16)
    return {number for number in range(1, 65) if mask >> (number - 1) & 1}


async def gone(*markers: str) -> None:
    with anyio.fail_after(BOUND):
        while any(processes_running("sleep", marker) for marker in markers):  # noqa: ASYNC110  # /proc: polled
            await anyio.sleep(0.01)


async def test_the_watchdog_guards_and_no_process_per_command_is_added(
    runner: BwrapRunner, layout: Layout
) -> None:
    """With cgroups the watchdog guards; the sandbox holds bubblewrap's init and bash only
    (no lifeline watcher), and the command sees neither the gate nor its descriptors."""
    assert runner.guard() == "watchdog"
    command = (
        'echo "env=${BASH_ENV-unset}"; set -- /proc/[0-9]*; echo "procs=$#"; '
        "echo fds $(ls /proc/$$/fd)"
    )
    async with started(runner, layout.spec(command)) as running:
        assert isinstance(running, BwrapCommand)
        assert running._lifeline is None
        code, out = await finish(running)
    assert code == 0, out
    # bash runs `ls` in a child of its own, whose own listing descriptor adds one entry.
    lines = out.decode().splitlines()
    assert lines[:2] == ["env=unset", "procs=2"], out
    fds = lines[2].split()[1:]
    assert fds[:3] == ["0", "1", "2"], out
    assert len(fds) == 4, out


async def test_the_command_is_bounded_from_its_first_instruction(
    runner: BwrapRunner, layout: Layout, limiter: CommandLimiter
) -> None:
    """The init was in the command's cgroups and under its rlimits before bash started."""
    command = "cat /proc/self/cgroup; ulimit -t; ulimit -f; ulimit -H -t"
    async with started(runner, layout.spec(command)) as running:
        code, out = await finish(running)
    assert code == 0, out
    text = out.decode()
    pids_line = next(line for line in text.splitlines() if ":pids:" in line or line[:3] == "0::")
    assert "cmd-" in pids_line or "/.." in pids_line or pids_line.endswith(":/"), text
    # In POSIX-less bash, `ulimit -f` counts 1024-byte blocks.
    assert text.splitlines()[-3:] == ["7", str((1 << 20) // 1024), "8"], text


async def test_a_command_never_runs_if_the_server_dies_before_it_is_bounded(
    runner: BwrapRunner, layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server dies after bubblewrap started but before it placed the init: its end of the
    gate closes without "go". bubblewrap goes on, but the command does not run."""
    monkeypatch.setattr(bwrap_module.StartGate, "open_gate", lambda self: None)
    marker = layout.workspace / "ran"
    async with started(runner, layout.spec(f"touch {marker}; sleep {sleep_marker()}")) as running:
        code, out = await finish(running)
    assert code == 125, out
    assert not marker.exists()


async def test_every_command_ends_when_the_servers_end_of_the_watchdog_closes(
    runner: BwrapRunner, layout: Layout, limiter: CommandLimiter
) -> None:
    """What the kernel does when the server dies (kill -9 included): the watchdog kills every
    process of every command, a background child included, removes the cgroups and exits.
    (Here the outer bubblewrap keeps its parent, the test, so nothing else would end them.)"""
    markers = [sleep_marker() for _ in range(4)]
    async with (
        started(
            runner, layout.spec(f"sleep {markers[0]} & echo up; exec sleep {markers[1]}")
        ) as one,
        started(
            runner, layout.spec(f"sleep {markers[2]} & echo up; exec sleep {markers[3]}")
        ) as two,
    ):
        for running in (one, two):
            await read_until(running, b"up\n", bytearray())
        with anyio.fail_after(BOUND):
            while not all(processes_running("sleep", m) for m in markers):  # noqa: ASYNC110  # /proc: polled
                await anyio.sleep(0.01)
        watchdog = limiter._watchdog
        assert watchdog is not None
        assert watchdog._process.stdin is not None
        watchdog._process.stdin.close()  # the server's end, as if the server had died
        with anyio.fail_after(BOUND):
            assert await one.wait() == 128 + signal.SIGKILL
            assert await two.wait() == 128 + signal.SIGKILL
        await gone(*markers)
        with anyio.fail_after(BOUND):
            while watchdog.alive():  # noqa: ASYNC110  # a child of ours: polled
                await anyio.sleep(0.01)
    assert not any(parent.exists() for parent in limiter._parents)


async def test_signals_do_not_stop_the_watchdog_and_a_dead_one_is_replaced(
    runner: BwrapRunner, limiter: CommandLimiter
) -> None:
    """^C or SIGTERM to the server's process group does not take the guard away before the
    server; a watchdog that was killed all the same is started again for the next command."""
    assert limiter.guarded()
    watchdog = limiter._watchdog
    assert watchdog is not None
    wanted = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    with anyio.fail_after(BOUND):
        while not wanted <= ignored(watchdog.pid):  # noqa: ASYNC110  # /proc: polled
            await anyio.sleep(0.01)  # its first line has not run yet
    for signum in wanted:
        os.kill(watchdog.pid, signum)
    await anyio.sleep(0.2)
    assert watchdog.alive()
    assert os.getpgid(watchdog.pid) != os.getpgid(0)  # its own session
    os.kill(watchdog.pid, signal.SIGKILL)
    with anyio.fail_after(BOUND):
        while watchdog.alive():  # noqa: ASYNC110  # a child of ours: polled
            await anyio.sleep(0.01)
    assert runner.guard() == "watchdog"
    assert limiter._watchdog is not None
    assert limiter._watchdog.pid != watchdog.pid
    assert limiter._watchdog.alive()


async def test_without_the_watchdogs_kill_the_commands_would_survive(
    runner: BwrapRunner, layout: Layout, limiter: CommandLimiter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: a watchdog that only waits (its kill removed) leaves a running command alive
    when the server's end closes, so the kill test's outcome is the watchdog's doing."""
    limiter.close()  # the fixture's watchdog goes; the next one runs the crippled script
    monkeypatch.setattr(limits_module, "WATCHDOG_SCRIPT", "trap '' TERM INT HUP\nread -r _\n")
    limiter = CommandLimiter(LIMITS, "cgroup")
    runner = BwrapRunner(runner.bwrap, lifeline=True, limiter=limiter)
    marker = sleep_marker()
    try:
        async with started(runner, layout.spec(f"echo up; exec sleep {marker}")) as running:
            await read_until(running, b"up\n", bytearray())
            watchdog = limiter._watchdog
            assert watchdog is not None
            assert watchdog._process.stdin is not None
            watchdog._process.stdin.close()
            await anyio.sleep(0.5)
            assert processes_running("sleep", marker)
    finally:
        limiter.close()
    await gone(marker)


async def test_the_next_commands_cgroups_are_made_while_one_runs_and_used_once(
    runner: BwrapRunner, layout: Layout, limiter: CommandLimiter
) -> None:
    """The cgroups of the next command are made (and bounded) while a command runs, so that
    neither their making nor the removal of ended ones is on a command's way; each command
    still gets cgroups of its own."""
    seen: list[str] = []
    for _ in range(3):
        spare = limiter._spare
        async with started(runner, layout.spec("cat /proc/self/cgroup")) as running:
            code, out = await finish(running)
        assert code == 0, out
        lines = out.decode().splitlines()
        line = next(line for line in lines if ":pids:" in line or line.startswith("0::"))
        seen.append(line.rsplit("/", 1)[-1])
        if spare is not None:  # the one made during the previous command
            assert seen[-1] == spare.directories[0].name
        made = limiter._spare
        assert made is not None
        assert made is not spare
        for directory in made.directories:
            if directory.parent.parent.name == "pids":
                assert (directory / "pids.max").read_text().strip() == str(LIMITS.pids)
    assert len(set(seen)) == 3
    assert all(name.startswith("cmd-") for name in seen)


async def test_making_joining_and_removing_cgroups_never_stalls_the_event_loop(
    runner: BwrapRunner, layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Making, joining and removing cgroups may wait for the kernel (a cgroup v1 migration
    waits for an RCU grace period: tens of milliseconds while other sandboxes are torn down).
    That waiting happens in a worker thread, so every other call on the server goes on
    meanwhile. Here each of those steps takes 1.5 s; the event loop never stops for
    as long as half of that."""
    slow = 1.5
    for owner, name in ((CommandLimiter, "apply"), (CommandLimiter, "_create")):
        original = getattr(owner, name)

        def slowed(
            self: object, *args: object, _original: Callable[..., object] = original
        ) -> object:
            time.sleep(slow)
            return _original(self, *args)

        monkeypatch.setattr(owner, name, slowed)
    original_release = limits_module.Placement.release

    def slow_release(self: limits_module.Placement) -> bool:
        time.sleep(slow)
        return original_release(self)

    monkeypatch.setattr(limits_module.Placement, "release", slow_release)
    gaps: list[float] = []

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await anyio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async with anyio.create_task_group() as group:
        group.start_soon(tick)
        for _ in range(3):  # the first makes its cgroups, the next ones sweep the ended ones
            async with started(runner, layout.spec("true")) as running:
                code, out = await finish(running)
            assert code == 0, out
        group.cancel_scope.cancel()
    assert gaps
    assert max(gaps) < slow / 2, f"the event loop stopped for {max(gaps):.3f} s"


async def test_a_start_cancelled_while_its_cgroups_are_made_leaves_none(
    runner: BwrapRunner, layout: Layout, limiter: CommandLimiter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cgroups are made in a worker thread; a start cancelled meanwhile still gets them
    and removes them on its way out: no command ran, and no cgroup is left."""
    original = CommandLimiter._create

    def slow_create(self: CommandLimiter) -> limits_module.Placement:
        time.sleep(0.3)
        return original(self)

    monkeypatch.setattr(CommandLimiter, "_create", slow_create)
    marker = layout.workspace / "ran"
    with anyio.move_on_after(0.1) as scope:
        await runner.start(layout.spec(f"touch {marker}"))
    assert scope.cancelled_caught
    await anyio.sleep(0.5)  # a thread abandoned to finish on its own would have made them now
    assert not marker.exists()
    parents = limiter._parents
    assert parents
    assert [child for parent in parents for child in parent.glob("cmd-*")] == []
