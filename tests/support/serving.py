"""Waiting for a `callgate serve` subprocess to say it is serving."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from callgate.server.sandbox.proctree import children_of


def wait_until_serving(process: subprocess.Popen[str], seconds: float = 60) -> list[str]:
    """Read the server's stderr until its "serving on" line; returns the lines read. Fails the
    test when the server exits first or does not get there within `seconds` (then it is
    killed: a server that hangs without a word must not hang the test)."""
    assert process.stderr is not None
    stderr = process.stderr
    startup: list[str] = []
    serving = threading.Event()

    def read() -> None:
        for line in stderr:
            startup.append(line)
            if "serving on" in line:
                serving.set()
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(seconds)
    if reader.is_alive():
        process.kill()  # our own child
        reader.join(seconds)
        pytest.fail(f"callgate serve did not start within {seconds:g} s:\n" + "".join(startup))
    if not serving.is_set():
        pytest.fail("callgate serve exited before serving:\n" + "".join(startup))
    return startup


CALLGATE = str(Path(sys.executable).with_name("callgate"))
UNSHARE = shutil.which("unshare")
START_TIMEOUT = 60.0
"""Seconds a `callgate serve` subprocess may take to serve or to stop on a loaded machine."""


@dataclass(frozen=True)
class NamespacedServer:
    """A `callgate serve` that is PID 1 of a PID namespace of its own (`unshare --pid`)."""

    target: str
    token: str
    pid: int
    """The server's PID as seen from here (it is 1 in its own namespace)."""
    state_dir: Path


def needs_unshare() -> None:
    """Skip unless unshare(1) and root can give a server a PID namespace of its own."""
    if UNSHARE is None or os.geteuid() != 0:
        pytest.skip("needs unshare(1) and root to give the server a PID namespace of its own")


@contextmanager
def namespaced_server(config: str) -> Iterator[NamespacedServer]:
    """Serve with `config` (TOML) in a fresh PID namespace, with a workspace, state directory
    and socket of its own; stopped (SIGTERM, then SIGKILL) and removed on the way out."""
    needs_unshare()
    assert UNSHARE is not None
    root = Path(tempfile.mkdtemp(prefix="cgpid", dir="/tmp"))  # short: the socket lives here
    (root / "w").mkdir()
    (root / "callgate.toml").write_text(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    # --kill-child: the server goes with unshare, whatever happens to the test.
    unshare = [UNSHARE, "--pid", "--fork", "--mount-proc", "--kill-child"]
    serve = [CALLGATE, "serve", "--config", str(root / "callgate.toml")]
    places = ["--listen", f"unix://{root}/s.sock", "--workspace", str(root / "w")]
    process = subprocess.Popen(
        [*unshare, *serve, *places, "--state-dir", str(root / "s")],
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
        yield NamespacedServer(f"unix://{root}/s.sock", token, server, root / "s")
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
