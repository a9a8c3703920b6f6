"""Limits inside the sandbox: one command could start hundreds of processes
and take all the memory. Now every command runs in its own cgroup (pids, memory) with rlimits
(CPU time, file size); running into one ends it as a normal result with a stable error code,
and the server and other sessions go on. Adversarial commands run only in bubblewrap, and the
fork bomb only once the pids limit is proven in force."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from callgate.v1 import tool_service_pb2 as tpb
from tests.support.calls import open_session, run
from tests.support.sandbox import bwrap_only
from tests.support.server import Harness, serve

pytestmark = [pytest.mark.anyio, *bwrap_only]

ALLOW = {"command": "allow"}


async def limits_trailer(harness: Harness) -> str:
    async with grpc.aio.insecure_channel(harness.tcp_target) as channel:
        call = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        await call
        return str(dict(await call.trailing_metadata() or ()).get("callgate-sandbox-limits", ""))


async def bash(harness: Harness, session: str, command: str, limit: float = 20) -> Any:
    response = await run(harness.stub(), session, "Bash", {"command": command, "timeout": limit})
    return response.result


async def leftover_cgroups(harness: Harness) -> list[Path]:
    """The commands' cgroups still there once the limiter's sweep had a few chances (the
    kernel empties a finished sandbox's PID namespace asynchronously); the next command's,
    made ahead of it, is not one of them."""
    limiter = harness.app.limiter
    spare = set(limiter._spare.directories) if limiter._spare is not None else set()
    for _ in range(100):
        limiter.sweep()
        left = [p for parent in limiter._parents for p in parent.glob("cmd-*") if p not in spare]
        if not left:
            break
        await asyncio.sleep(0.05)
    return left


async def test_processes_are_bounded_and_a_fork_bomb_ends_as_a_result(tmp_path: Path) -> None:
    limits = {"pids": 64}
    async with serve(tmp_path, sandbox="bwrap", access=ALLOW, command_limits=limits) as harness:
        assert await limits_trailer(harness) in ("cgroup-v1", "cgroup-v2")
        session = await open_session(harness.stub())
        # Bounded: 150 sleeps, counted; the old code ran all of them.
        spawner = (
            "n=0; for i in $(seq 1 150); do (sleep 3 &) 2>/dev/null && n=$((n+1)); done; "
            "ls -d /proc/[0-9]* | wc -l"
        )
        result = await bash(harness, session, spawner)
        running = int(result.text.split()[0])
        assert running <= 64, result.text
        assert result.error_code == "pids_limit", result.text
        # The limit is proven in force: now the bomb, with a 5 s time limit besides.
        bomb = await bash(harness, session, ":(){ :|:& };:; sleep 2", limit=5)
        assert bomb.is_error
        assert bomb.error_code == "pids_limit", bomb.text
        # The server and another session are unaffected.
        other = await open_session(harness.stub())
        ok = await bash(harness, other, "echo fine")
        assert not ok.is_error
        assert ok.text.startswith("fine")
        assert await leftover_cgroups(harness) == []


async def test_a_memory_hog_is_killed_inside_its_cgroup(tmp_path: Path) -> None:
    limits = {"memory_bytes": 64 << 20}
    async with serve(tmp_path, sandbox="bwrap", access=ALLOW, command_limits=limits) as harness:
        session = await open_session(harness.stub())
        hog = await bash(harness, session, "python3 -c \"b = b'x' * 400_000_000; print(len(b))\"")
        assert hog.is_error, hog.text
        assert hog.error_code == "memory_limit", hog.text
        ok = await bash(harness, session, "echo fine")
        assert ok.text.startswith("fine")
        assert await leftover_cgroups(harness) == []


async def test_cpu_time_and_file_size_are_bounded(tmp_path: Path) -> None:
    limits = {"cpu_seconds": 1, "file_size_bytes": 1 << 20}
    async with serve(tmp_path, sandbox="bwrap", access=ALLOW, command_limits=limits) as harness:
        session = await open_session(harness.stub())
        burner = await bash(harness, session, "while :; do :; done")
        assert burner.error_code == "cpu_limit", burner.text
        writer = await bash(harness, session, "head -c 5000000 /dev/zero > big.bin")
        assert writer.error_code == "file_size_limit", writer.text
        assert (harness.workspace / "big.bin").stat().st_size == 1 << 20


async def test_without_cgroups_rlimits_still_bound_cpu_and_file_size(tmp_path: Path) -> None:
    limits = {"mechanism": "rlimit", "file_size_bytes": 1 << 20}
    async with serve(tmp_path, sandbox="bwrap", access=ALLOW, command_limits=limits) as harness:
        assert await limits_trailer(harness) == "rlimit"
        session = await open_session(harness.stub())
        writer = await bash(harness, session, "head -c 5000000 /dev/zero > big.bin")
        assert writer.error_code == "file_size_limit", writer.text
        got = await harness.stub().GetSession(tpb.GetSessionRequest(session_id=session))
        assert got.session.sandbox_limits == "rlimit"


def test_the_limits_settings_are_validated() -> None:
    from callgate.server.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="pids"):
        load_config(None, {"command_limits": {"pids": 0}}, environ={})
    with pytest.raises(ConfigError, match="mechanism"):
        load_config(None, {"command_limits": {"mechanism": "magic"}}, environ={})
    assert json.dumps(load_config(None, {}, environ={}).command_limits.model_dump())
