"""A server that is PID 1 of its PID namespace, as in the sidecar image (`ENTRYPOINT
["callgate"]`, no init in front of it).

PID 1 inherits every orphan of its namespace. bubblewrap's outer process exits with its
command's status as soon as the sandbox's init reports it, without waiting for that init, so
each sandboxed command hands the server one orphan: left unreaped, a zombie per command, until
the container can start no more processes (an agent gets there with allowed calls alone). The
server reaps them, and only them: the exit statuses it waits for itself stay right.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from callgate.client import CallgateClient
from callgate.server.sandbox.proctree import children_of, read_stat
from tests.support.sandbox import bwrap_only
from tests.support.serving import wait_until_serving

pytestmark = [pytest.mark.anyio, *bwrap_only]

CALLGATE = str(Path(sys.executable).with_name("callgate"))
UNSHARE = shutil.which("unshare")
START_TIMEOUT = 20.0
SETTLE_TIMEOUT = 5.0
"""Seconds a last SIGCHLD may take to be handled."""


@dataclass(frozen=True)
class Pid1Server:
    target: str
    token: str
    pid: int
    """The server's PID as seen from here (it is 1 in its own namespace)."""


@pytest.fixture
def pid1_server() -> Iterator[Pid1Server]:
    if UNSHARE is None or os.geteuid() != 0:
        pytest.skip("needs unshare(1) and root to give the server a PID namespace of its own")
    root = Path(tempfile.mkdtemp(prefix="cgpid1", dir="/tmp"))  # short: the socket lives here
    (root / "w").mkdir()
    config = root / "callgate.toml"
    config.write_text(
        'approval_mode = "headless"\nsandbox = "bwrap"\n\n[access]\ncommand = "allow"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    # --kill-child: the server goes with unshare, whatever happens to the test.
    unshare = [UNSHARE, "--pid", "--fork", "--mount-proc", "--kill-child"]
    serve = [CALLGATE, "serve", "--config", str(config), "--listen", f"unix://{root}/s.sock"]
    places = ["--workspace", str(root / "w"), "--state-dir", str(root / "s")]
    process = subprocess.Popen(
        [*unshare, *serve, *places],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_serving(process, START_TIMEOUT)
        (server,) = children_of(process.pid)
        token = (root / "s" / "tokens" / "agent").read_text().strip()
        yield Pid1Server(f"unix://{root}/s.sock", token, server)
    finally:
        if process.poll() is None:
            for child in children_of(process.pid):  # the server; unshare then exits
                os.kill(child, signal.SIGTERM)
            try:
                process.wait(timeout=START_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=START_TIMEOUT)
        shutil.rmtree(root, ignore_errors=True)


def zombie_children(pid: int) -> list[int]:
    return [
        child
        for child in children_of(pid)
        if (stat := read_stat(child)) is not None and stat.is_zombie
    ]


async def test_a_pid1_server_reaps_the_sandboxes_inits_and_keeps_every_exit_status(
    pid1_server: Pid1Server,
) -> None:
    """Twenty sandboxed commands and a Grep (whose ripgrep runs in a sandbox too) leave no
    zombie behind, and each command's own exit status is the one reported."""
    async with (
        CallgateClient(pid1_server.target, token=pid1_server.token) as client,
        client.open_session() as session,
    ):
        for number in range(20):
            code = number % 4
            result = await session.run("Bash", {"command": f"exit {code}"})
            assert result.exit_code == code, result
        grep = await session.run("Grep", {"pattern": "nothing-here"})
        assert not grep.is_error, grep
    with anyio.fail_after(SETTLE_TIMEOUT):
        while zombie_children(pid1_server.pid):  # noqa: ASYNC110  # /proc: polled
            await anyio.sleep(0.05)
    assert read_stat(pid1_server.pid) is not None
