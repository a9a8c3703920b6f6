"""The lifeline of a sandboxed command (LIFELINE_SCRIPT in callgate.server.sandbox.bwrap): when
the server's end of it closes, as when the server dies, the whole sandbox ends; the command
itself never sees the mechanism; and the watcher's kill is refused outside PID 2.

Everything here runs inside bubblewrap with its own PID namespace."""

from __future__ import annotations

import logging
import os
import shlex
from pathlib import Path

import anyio
import pytest

from callgate.server.app import build_runner
from callgate.server.core.models import SandboxMode
from callgate.server.sandbox import bwrap as bwrap_module
from callgate.server.sandbox.bwrap import (
    LIFELINE_SCRIPT,
    BwrapCommand,
    BwrapRunner,
    lifeline_script,
    lifeline_works,
)
from callgate.server.sandbox.probe import SandboxStatus
from tests.sandbox.helpers import BOUND, Layout, finish, make_layout, read_until, started
from tests.support.sandbox import bwrap_only, bwrap_path, processes_running, sleep_marker

pytestmark = [pytest.mark.anyio, *bwrap_only]


@pytest.fixture
def runner() -> BwrapRunner:
    path = bwrap_path()
    assert path is not None
    return BwrapRunner(path)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return make_layout(tmp_path)


async def test_closing_the_servers_end_ends_the_whole_sandbox(
    runner: BwrapRunner, layout: Layout
) -> None:
    """What the kernel does to the write end when the server dies (kill -9 included): the
    watcher sees it and kills the sandbox's processes, a background child included."""
    marker, child = sleep_marker(), sleep_marker()
    command = f"sleep {child} & echo up; exec sleep {marker}"
    async with started(runner, layout.spec(command)) as running:
        assert isinstance(running, BwrapCommand)
        await read_until(running, b"up\n", bytearray())
        with anyio.fail_after(BOUND):
            while not (processes_running("sleep", marker) and processes_running("sleep", child)):  # noqa: ASYNC110  # /proc: polled
                await anyio.sleep(0.01)
        lifeline = running._lifeline  # the server's end: closed as if the server had died
        assert lifeline is not None
        running._lifeline = None
        os.close(lifeline)
        with anyio.fail_after(BOUND):
            code = await running.wait()
        assert code == 128 + 9  # the command was SIGKILLed
        with anyio.fail_after(BOUND):
            while processes_running("sleep", marker) or processes_running("sleep", child):  # noqa: ASYNC110  # /proc: polled
                await anyio.sleep(0.01)


async def test_the_command_never_sees_the_lifeline(runner: BwrapRunner, layout: Layout) -> None:
    """No BASH_ENV, no extra descriptors, no job, and `wait` returns at once."""
    command = 'echo "env=${BASH_ENV-unset}"; echo "jobs=$(jobs | wc -l)"; wait; ls -l /proc/$$/fd'
    async with started(runner, layout.spec(command)) as running:
        code, out = await finish(running)
    assert code == 0, out
    lines = out.decode().splitlines()
    assert lines[:2] == ["env=unset", "jobs=0"]
    # (bash runs the last command in its own process: `ls` lists itself, its own directory
    # descriptor on /proc included.)
    fds = sorted(
        line.split(" -> ")[0].split()[-1]
        for line in lines[2:]
        if " -> " in line and not line.split(" -> ")[1].startswith("/proc/")
    )
    assert fds == ["0", "1", "2"], out.decode()


async def test_the_watchers_kill_is_refused_unless_it_is_pid_2(
    runner: BwrapRunner, layout: Layout
) -> None:
    """The guard: the lifeline script run by a shell that is not PID 2 (here a nested bash in
    the sandbox, whose lifeline reads EOF at once) kills nothing."""
    script = layout.workspace / "lifeline.sh"
    script.write_bytes(lifeline_script(7, 8))
    command = (
        f"exec 7</dev/null 8</dev/null; sleep {sleep_marker()} & keep=$!; "
        f"watcher=$(BASH_ENV={shlex.quote(str(script))} bash -c 'echo $!'); "
        'while kill -0 "$watcher" 2>/dev/null; do :; done; '
        'kill -0 "$keep" && echo "still alive"; kill "$keep"'
    )
    async with started(runner, layout.spec(command)) as running:
        code, out = await finish(running)
    assert (code, out) == (0, b"still alive\n")


async def test_a_server_that_is_pid_1_needs_no_lifeline(layout: Layout) -> None:
    """The default follows whether this process is PID 1 of its namespace (then the kernel
    ends every sandbox with it); off, the command runs with nothing added."""
    path = bwrap_path()
    assert path is not None
    assert BwrapRunner(path).lifeline is (os.getpid() != 1)
    plain = BwrapRunner(path, lifeline=False)
    # Counted by bash itself (a glob, no child): a pipeline's processes may or may not have
    # started when /proc is listed.
    command = 'echo "env=${BASH_ENV-unset}"; set -- /proc/[0-9]*; echo $#'
    async with started(plain, layout.spec(command)) as running:
        assert isinstance(running, BwrapCommand)
        assert running._lifeline is None
        code, out = await finish(running)
    # bubblewrap's init and bash: no watcher.
    assert (code, out) == (0, b"env=unset\n2\n")


def test_the_startup_self_test_finds_whether_the_lifeline_works(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """It works here; where the watcher cannot fire (simulated: a guard no shell passes, as
    when a setuid bubblewrap's helper takes PID 2) the server turns it off and says so."""
    path = bwrap_path()
    assert path is not None
    assert lifeline_works(path)
    monkeypatch.setattr(
        bwrap_module, "LIFELINE_SCRIPT", LIFELINE_SCRIPT.replace('"$$" = 2', '"$$" = 0')
    )
    assert not lifeline_works(path)
    status = SandboxStatus(SandboxMode.BWRAP, path, "")
    with caplog.at_level(logging.WARNING):
        runner = build_runner(status)
    assert isinstance(runner, BwrapRunner)
    assert runner.lifeline is False
    assert "the sandbox lifeline does not work here" in caplog.text
