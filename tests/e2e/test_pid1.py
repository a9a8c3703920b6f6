"""A server that is PID 1 of its PID namespace, as in the sidecar image (`ENTRYPOINT
["callgate"]`, no init in front of it).

PID 1 inherits every orphan of its namespace. bubblewrap's outer process exits with its
command's status as soon as the sandbox's init reports it, without waiting for that init, so
each sandboxed command hands the server one orphan: left unreaped, a zombie per command, until
the container can start no more processes (an agent gets there with allowed calls alone). The
server reaps them, and only them: the exit statuses it waits for itself stay right.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from callgate.client import CallgateClient
from callgate.server.sandbox.proctree import children_of, read_stat
from tests.support.sandbox import bwrap_only
from tests.support.serving import NamespacedServer, namespaced_server

pytestmark = [pytest.mark.anyio, *bwrap_only]

SETTLE_TIMEOUT = 5.0
"""Seconds a last SIGCHLD may take to be handled."""
CONFIG = (
    'approval_mode = "headless"\nsandbox = "bwrap"\n\n[access]\ncommand = "allow"\n\n'
    "[tools]\nripgrep = true\n"
)


@pytest.fixture
def pid1_server() -> Iterator[NamespacedServer]:
    with namespaced_server(CONFIG) as server:
        yield server


def zombie_children(pid: int) -> list[int]:
    return [
        child
        for child in children_of(pid)
        if (stat := read_stat(child)) is not None and stat.is_zombie
    ]


async def test_a_pid1_server_reaps_the_sandboxes_inits_and_keeps_every_exit_status(
    pid1_server: NamespacedServer,
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
