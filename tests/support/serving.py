"""Waiting for a `callgate serve` subprocess to say it is serving."""

from __future__ import annotations

import subprocess
import time

import pytest


def wait_until_serving(process: subprocess.Popen[str], seconds: float = 20) -> list[str]:
    """Read the server's stderr until its "serving on" line; returns the lines read. Fails the
    test when the server exits first or does not get there within `seconds`."""
    assert process.stderr is not None
    deadline = time.monotonic() + seconds
    startup: list[str] = []
    for line in process.stderr:
        startup.append(line)
        if "serving on" in line:
            return startup
        assert time.monotonic() < deadline, "callgate serve did not start"
    pytest.fail("callgate serve exited before serving:\n" + "".join(startup))
