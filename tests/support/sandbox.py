"""What sandbox tests share: whether bubblewrap works here, unique process markers, and a look
through /proc for processes that should be gone."""

from __future__ import annotations

import functools
import os
import secrets
import shlex
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest

from callgate.server.core.models import SandboxMode
from callgate.server.sandbox.probe import detect_sandbox


@functools.cache
def bwrap_path() -> str | None:
    """The bubblewrap executable when the startup self-test passes here, else None."""
    status = detect_sandbox("auto")
    return status.bwrap_path if status.mode is SandboxMode.BWRAP else None


bwrap_only = [
    pytest.mark.bwrap,
    pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap does not work on this machine"),
]
"""Marks for tests that need a working bubblewrap (`pytestmark = bwrap_only`)."""

_F = TypeVar("_F", bound=Callable[..., Any])


def needs_bwrap(test: _F) -> _F:
    """Marks one test as needing a working bubblewrap (`bwrap_only`, for a module that also
    has tests that do not)."""
    for mark in reversed(bwrap_only):
        test = mark(test)
    return test


def sleep_marker() -> str:
    """A `sleep` duration nobody else uses (`1000.<random>`), so /proc can find our sleeps."""
    return f"1000.{secrets.randbelow(10**9):09d}"


SLEEPER = "import sys, time; print('up', sys.argv[1], flush=True); time.sleep(1000)"
"""A process that says `up <marker>` only once it is itself running (unlike `cmd &; echo`)."""


def sleeper(marker: str) -> str:
    """A shell command starting a SLEEPER for `marker` (find it with `sleeper_running`)."""
    return f"python3 -c {shlex.quote(SLEEPER)} {marker}"


def sleeper_running(marker: str) -> list[int]:
    return processes_running("python3", "-c", SLEEPER, marker)


def live_processes() -> Iterator[tuple[int, bytes]]:
    """(PID, raw command line) of every live (non-zombie) process."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"/proc/{name}/stat", "rb") as handle:
                state = handle.read().rpartition(b")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            yield int(name), cmdline


def processes_running(*argv: str) -> list[int]:
    """PIDs of live (non-zombie) processes whose command line is exactly `argv`."""
    wanted = b"\x00".join(a.encode() for a in argv) + b"\x00"
    return [pid for pid, cmdline in live_processes() if cmdline == wanted]


def processes_containing(marker: str) -> list[int]:
    """PIDs of live (non-zombie) processes whose command line contains `marker`."""
    wanted = marker.encode()
    return [pid for pid, cmdline in live_processes() if wanted in cmdline]


@contextmanager
def listening_socket() -> Iterator[int]:
    """A real TCP listener on 127.0.0.1 (of the host's network namespace); yields its port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]
