"""Many servers on one host: a server touches only what it owns.

A server proves a host resource is its own by its state directory's lock plus a record kept
there (`<state_dir>/cgroups`), never by a PID in a name: a server in its own PID namespace (the
sidecar image's PID 1, a container sharing the host's cgroup tree) sees no other server in its
`/proc`, and the start-up sweep before this issue killed every other server's commands and
removed their cgroups. What it may still lose (an operator removing its cgroups) it makes again,
or it refuses commands with `sandbox_unavailable` and says so in health, never `internal_error`.
Every process and cgroup here is made by the test itself; commands are harmless, in bubblewrap.
"""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from callgate.server.app import App
from callgate.server.config import ConfigError, load_config
from callgate.server.sandbox.limits import CGROUP_RECORD, CommandLimiter, CommandLimits
from tests.support.calls import open_session, run
from tests.support.sandbox import bwrap_only, sleep_marker
from tests.support.server import Harness, serve
from tests.support.serving import namespaced_server

pytestmark = [pytest.mark.anyio, *bwrap_only]

ALLOW = {"command": "allow"}
NAMESPACED_CONFIG = 'approval_mode = "headless"\nsandbox = "bwrap"\n\n[access]\ncommand = "allow"\n'
LIMITS = CommandLimits(pids=64, memory_bytes=256 << 20, cpu_seconds=7, file_size_bytes=1 << 20)
CGROUP_ROOT = Path("/sys/fs/cgroup")
WAIT_SECONDS = 30.0
"""Bound of every wait here: reached only when something is wrong, even on a loaded machine."""


async def bash(harness: Harness, session: str, arguments: dict[str, Any]) -> Any:
    response = await run(harness.stub(), session, "Bash", {"timeout": 60, **arguments})
    return response.result


async def health_trailer(harness: Harness) -> dict[str, str]:
    async with grpc.aio.insecure_channel(harness.tcp_target) as channel:
        call = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        await call
        return {k: str(v) for k, v in await call.trailing_metadata() or ()}


def needs_cgroups(harness: Harness) -> None:
    if harness.app.limiter.mechanism not in ("cgroup-v1", "cgroup-v2"):
        pytest.skip("no writable cgroups here: nothing for servers to share")


async def remove_cgroups(parents: list[Path]) -> None:
    """Remove a server's command cgroups under it, as an operator (or an old sweep) might:
    each command's cgroup once its last process has left, then the parent."""
    for parent in parents:
        for child in parent.glob("cmd-*"):
            with anyio.fail_after(WAIT_SECONDS):
                # An ended sandbox's init leaves its cgroup a moment after the command's answer.
                while (child / "cgroup.procs").read_text().strip():  # noqa: ASYNC110  # polled
                    await anyio.sleep(0.01)
            child.rmdir()
        parent.rmdir()


async def test_a_server_in_its_own_pid_namespace_leaves_another_servers_commands_alone(
    tmp_path: Path,
) -> None:
    """A second server started in a PID namespace of its own, where the first server's PID
    means nothing, kills none of the first server's commands and removes none of its cgroups:
    its background command goes on and its next Bash call runs."""
    async with serve(tmp_path, sandbox="bwrap", access=ALLOW) as harness:
        needs_cgroups(harness)
        session = await open_session(harness.stub())
        marker = sleep_marker()
        started = await bash(harness, session, {"command": f"sleep {marker}", "background": True})
        process_id = json.loads(started.json)["process_id"]
        parents = list(harness.app.limiter._parents)
        with namespaced_server(NAMESPACED_CONFIG) as other:
            # The other server is serving: its start-up sweep is over.
            assert other.state_dir.joinpath(CGROUP_RECORD).exists()
            result = await bash(harness, session, {"command": "echo still-here"})
            assert not result.is_error, result
            assert result.text.startswith("still-here\n")
            assert all(parent.is_dir() for parent in parents)
            output = await run(harness.stub(), session, "ProcessOutput", {"process_id": process_id})
            assert json.loads(output.result.json)["status"] == "running"
        assert harness.app.limiter.condition == "ok"


async def test_a_server_whose_cgroups_vanish_makes_them_again(tmp_path: Path) -> None:
    """Its cgroup parents removed under it, the server's next Bash call runs (the parents are
    made again) and health says they were; never `internal_error`."""
    async with serve(tmp_path, sandbox="bwrap", access=ALLOW) as harness:
        needs_cgroups(harness)
        session = await open_session(harness.stub())
        assert (await bash(harness, session, {"command": "true"})).exit_code == 0
        assert (await health_trailer(harness))["callgate-sandbox-limits-condition"] == "ok"
        await remove_cgroups(list(harness.app.limiter._parents))
        result = await bash(harness, session, {"command": "echo again"})
        assert not result.is_error, result
        assert result.text.startswith("again\n")
        trailer = await health_trailer(harness)
        assert trailer["callgate-sandbox-limits-condition"] == "recreated"
        # And the limits are in force again: the command's own cgroup is one of the new ones.
        inside = await bash(harness, session, {"command": "cat /proc/self/cgroup"})
        assert any(parent.name in inside.text for parent in harness.app.limiter._parents)


async def test_a_server_that_cannot_make_its_cgroups_again_says_sandbox_unavailable(
    tmp_path: Path,
) -> None:
    """When its cgroups are gone and cannot be made again, a Bash call is refused with
    `sandbox_unavailable` (nothing runs) and health says `unavailable`; once they can be made
    again, commands run again."""
    async with serve(tmp_path, sandbox="bwrap", access=ALLOW) as harness:
        needs_cgroups(harness)
        limiter = harness.app.limiter
        session = await open_session(harness.stub())
        assert (await bash(harness, session, {"command": "true"})).exit_code == 0
        real = list(limiter._parents)
        await remove_cgroups(real)
        # Where no directory can be made: beneath a regular file.
        blocker = tmp_path / "not-a-directory"
        blocker.write_text("")
        limiter._parents = [blocker / parent.name for parent in real]
        witness = harness.workspace / "ran"
        result = await bash(harness, session, {"command": f"touch {witness}"})
        assert result.is_error
        assert result.error_code == "sandbox_unavailable", result
        assert not witness.exists()
        assert (await health_trailer(harness))["callgate-sandbox-limits-condition"] == (
            "unavailable"
        )
        limiter._parents = real
        result = await bash(harness, session, {"command": f"touch {witness}"})
        assert not result.is_error, result
        assert witness.exists()
        assert limiter.condition == "recreated"


@pytest.fixture
def cgroup_root() -> Path:
    """Where a limiter puts its parents for the pids controller (v2: the unified root)."""
    probe = CommandLimiter(LIMITS, "auto")
    try:
        if probe.mechanism == "cgroup-v2":
            return CGROUP_ROOT
        if probe.mechanism == "cgroup-v1":
            return next(p for p in probe._parents if "pids" in p.parts).parent
    finally:
        probe.close()
    pytest.skip("no writable cgroups here")


@pytest.fixture
def sleeper_in(cgroup_root: Path) -> Iterator[Any]:
    """Makes `<cgroup_root>/callgate-<random>/cmd-1` holding a `sleep` started here; removes
    whatever is left of both on the way out."""
    made: list[tuple[Path, subprocess.Popen[bytes]]] = []

    def make() -> tuple[Path, subprocess.Popen[bytes]]:
        parent = cgroup_root / f"callgate-{secrets.token_hex(8)}"
        (parent / "cmd-1").mkdir(parents=True)
        sleeper = subprocess.Popen(["/bin/sleep", sleep_marker()])
        (parent / "cmd-1" / "cgroup.procs").write_text(str(sleeper.pid))
        made.append((parent, sleeper))
        return parent, sleeper

    yield make
    for parent, sleeper in made:
        if sleeper.poll() is None:
            sleeper.send_signal(signal.SIGKILL)
        sleeper.wait(WAIT_SECONDS)
        for child in parent.glob("cmd-*"):
            child.rmdir()
        if parent.exists():
            parent.rmdir()


def test_a_server_removes_what_its_state_directory_recorded_and_nothing_else(
    tmp_path: Path, sleeper_in: Any
) -> None:
    """At start a server removes the cgroups an earlier run of its own state directory recorded
    (killing what was left in them), and leaves another server's cgroups and processes alone,
    although no live process of that server is visible to it."""
    abandoned, left_behind = sleeper_in()
    neighbour, neighbours_command = sleeper_in()
    record = tmp_path / CGROUP_RECORD
    record.write_text(f"{abandoned}\n/etc\n{CGROUP_ROOT}/../../etc/callgate-0123456789abcdef\n")
    limiter = CommandLimiter(LIMITS, "cgroup", record=record)
    try:
        assert left_behind.wait(WAIT_SECONDS) == -signal.SIGKILL
        assert not abandoned.exists()
        assert neighbours_command.poll() is None
        assert neighbour.is_dir()
        # The record now names this run's parents only.
        assert record.read_text().split() == [str(p) for p in limiter._parents]
        assert oct(record.stat().st_mode & 0o777) == "0o600"
    finally:
        limiter.close()
    assert neighbours_command.poll() is None


async def test_a_server_never_takes_a_socket_another_server_serves(tmp_path: Path) -> None:
    """A second server configured with a Unix socket the first serves refuses to start, and the
    first keeps serving on it; a socket nobody serves any more is replaced."""
    for name in ("first", "third"):
        (tmp_path / name).mkdir()
    async with serve(tmp_path / "first", sandbox="none") as harness:
        socket_path = harness.unix_target.removeprefix("unix://")
        second_dir = tmp_path / "second"
        (second_dir / "ws").mkdir(parents=True)
        config = load_config(
            None,
            {
                "listen": [f"unix://{socket_path}"],
                "workspace": str(second_dir / "ws"),
                "state_dir": str(second_dir / "state"),
                "sandbox": "none",
            },
            environ={},
        )
        second = App(config)
        with pytest.raises(ConfigError, match="in use by another server"):
            async with second.running():
                pytest.fail("the second server started on the first one's socket")
        async with grpc.aio.insecure_channel(f"unix:{socket_path}") as channel:
            answer = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=WAIT_SECONDS
            )
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        second.release()
    # A socket left by a server that is gone is stale: the next server replaces it.
    stale = Path(tempfile.mkdtemp(prefix="cg", dir="/tmp")) / "s.sock"
    try:
        left = socket.socket(socket.AF_UNIX)
        left.bind(str(stale))
        left.close()
        async with serve(tmp_path / "third", sandbox="none", listen=[f"unix://{stale}"]) as third:
            assert third.running.addresses == (f"unix://{stale}",)
    finally:
        shutil.rmtree(stale.parent, ignore_errors=True)
