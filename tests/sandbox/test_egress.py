"""The bubblewrap runner with the egress proxy, against real bubblewrap: a command has no network
of its own, finds its proxy on its own loopback when it was approved for network (the listener
made by a thread's setns as root, or by the namespace helper as any user), reaches exactly its
approved endpoints through it, and a command of the server run as a non-root user does too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import pytest

from callgate.server.net.addresses import Endpoint
from callgate.server.net.egress import (
    Allowance,
    ConnectionRecord,
    EgressCall,
    EgressProxy,
    EgressSettings,
)
from callgate.server.sandbox import netns
from callgate.server.sandbox.bwrap import BwrapCommand, BwrapRunner
from callgate.server.sandbox.runner import CommandStartError
from tests.sandbox.helpers import Layout, finish, make_layout
from tests.support.egress import counting_server
from tests.support.sandbox import bwrap_only, bwrap_path

pytestmark = [pytest.mark.anyio, *bwrap_only]

ROOT = Path(__file__).resolve().parent.parent.parent
AS_USER = Path(__file__).with_name("egress_as_user.py")


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return make_layout(tmp_path)


@pytest.fixture(params=["setns", "helper"])
def how(request: pytest.FixtureRequest) -> str:
    if request.param == "setns" and os.geteuid() != 0:
        pytest.skip("a thread's setns needs root")
    return str(request.param)


def egress_runner(how: str, records: list[ConnectionRecord]) -> tuple[BwrapRunner, EgressProxy]:
    path = bwrap_path()
    assert path is not None
    proxy = EgressProxy(EgressSettings.build(["127.0.0.0/8"]))
    runner = BwrapRunner(path, egress=proxy, record=records.append)
    runner.listeners = netns.Listeners(how)
    return runner, proxy


def call_for(*targets: str) -> EgressCall:
    return EgressCall(
        "s-1", "x-1", tuple(Allowance(Endpoint.parse(t), "rule r-1") for t in targets)
    )


async def run(runner: BwrapRunner, layout: Layout, command: str, **changes: object) -> str:
    running = await runner.start(layout.spec(command, **changes))
    code, out = await finish(running)
    await running.terminate_tree(0)
    await running.aclose()
    return out.decode() + f"[{code}]"


async def test_an_approved_command_reaches_its_endpoint_through_its_proxy_only(
    layout: Layout, how: str
) -> None:
    records: list[ConnectionRecord] = []
    runner, proxy = egress_runner(how, records)
    try:
        with counting_server("approved") as approved, counting_server("other") as other:
            target = f"127.0.0.1:{approved.port}"
            command = (
                'echo "proxy=$HTTP_PROXY $https_proxy $ALL_PROXY no=${NO_PROXY-unset}"; '
                f"curl -sS -m 5 http://{target}/; "
                f"curl -sS -m 5 http://127.0.0.1:{other.port}/; "
                f"(exec 3<>/dev/tcp/127.0.0.1/{approved.port}) 2>/dev/null && echo direct; "
                "true"
            )
            running = await runner.start(layout.spec(command, egress=call_for(target)))
            assert isinstance(running, BwrapCommand)
            code, out = await finish(running)
            await running.terminate_tree(0)
            await running.aclose()
    finally:
        proxy.stop()
    text = out.decode()
    assert code == 0
    url = netns.PROXY_URL
    assert f"proxy={url} {url} {url} no=unset" in text
    assert "approved\n" in text
    assert f"callgate refused 127.0.0.1:{other.port}: not approved for this command." in text
    assert "direct" not in text
    assert (approved.accepted, other.accepted) == (1, 0)
    assert running.network_refused == (
        (f"127.0.0.1:{other.port}", "not approved for this command"),
    )
    report = running.egress_report
    assert report is not None
    assert report.connections == 2
    assert [(r.port, r.allowed, r.rule, r.refusal) for r in records] == [
        (approved.port, True, "rule r-1", ""),
        (other.port, False, "", "not_approved"),
    ]


async def test_without_an_egress_call_there_is_no_proxy_and_no_network(layout: Layout) -> None:
    records: list[ConnectionRecord] = []
    runner, proxy = egress_runner("auto", records)
    try:
        with counting_server("host") as server:
            command = (
                'echo "proxy=${HTTP_PROXY-none}"; '
                f"curl -sS -m 5 -x {netns.PROXY_URL} http://127.0.0.1:{server.port}/ "
                "|| echo refused"
            )
            text = await run(runner, layout, command)
            read_only = await run(
                runner,
                layout,
                command,
                egress=call_for(f"127.0.0.1:{server.port}"),
                read_only=True,
            )
    finally:
        proxy.stop()
    for output in (text, read_only):
        assert "proxy=none" in output
        assert "refused" in output
    assert server.accepted == 0
    assert records == []


async def test_a_failed_listener_leaves_the_command_unstarted(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command waits at its start gate for its proxy; when the listener cannot be made it
    never runs (it could not reach its hosts, and it would not be what was approved)."""
    records: list[ConnectionRecord] = []
    runner, proxy = egress_runner("auto", records)

    def refuse(init_pid: int, init_fd: int) -> object:
        raise netns.ListenerError("refused for the test")

    monkeypatch.setattr(runner.listeners, "listen_in", refuse)
    marker = layout.workspace / "ran"
    try:
        with pytest.raises(CommandStartError, match="network could not be set up"):
            await runner.start(layout.spec(f"touch {marker}", egress=call_for("127.0.0.1:9")))
    finally:
        proxy.stop()
    await anyio.sleep(0.2)  # had it started, the command would have run by now
    assert not marker.exists()


async def test_a_runner_without_a_proxy_refuses_a_command_that_needs_one(layout: Layout) -> None:
    path = bwrap_path()
    assert path is not None
    runner = BwrapRunner(path)
    with pytest.raises(CommandStartError, match="no egress proxy"):
        await runner.start(layout.spec("true", egress=call_for("127.0.0.1:9")))


def _system_python() -> str | None:
    """A Python that a non-root user can run with this checkout's packages on its path (the
    venv's own may live in root's home), of the same version."""
    candidate = shutil.which("python3", path="/usr/bin:/usr/local/bin")
    if candidate is None:
        return None
    version = subprocess.run(
        [candidate, "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return candidate if version == str(sys.version_info[:2]) else None


def test_as_a_non_root_user_the_helper_makes_the_listener() -> None:
    """The server as a user without privilege (`nobody`): bubblewrap makes a user namespace,
    the namespace helper joins it to make the listener, and the command reaches exactly its
    approved endpoint."""
    python = _system_python()
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or python is None or setpriv is None:
        pytest.skip("needs root (to become nobody), setpriv and a system Python 3 like this one")
    site = next(Path(sys.prefix, "lib").glob("python3*/site-packages"))
    # Outside pytest's temporary directories, which only root may enter.
    base = Path(tempfile.mkdtemp(prefix="callgate-egress-", dir="/var/tmp"))
    try:
        os.chown(base, 65534, 65534)
        done = _as_nobody(setpriv, python, base, site)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if done.returncode == 3:
        pytest.skip(f"bubblewrap does not work for a non-root user here: {done.stdout.strip()}")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["how"] == "helper"
    assert "approved\n" in result["output"]
    assert "not approved for this command" in result["output"]
    assert "direct" not in result["output"]
    assert result["accepted"] == [1, 0]


def _as_nobody(
    setpriv: str, python: str, base: Path, site: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", python, str(AS_USER)],
        cwd=base,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}:{site}",
            "EGRESS_BASE": str(base),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
