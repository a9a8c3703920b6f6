"""Startup self-test: does bubblewrap really work here (containers may forbid namespaces)?"""

from __future__ import annotations

import logging
import shutil
import subprocess
from dataclasses import dataclass

from callgate.server.core.models import SandboxMode

log = logging.getLogger(__name__)

_PROBE_ARGS = (
    "--ro-bind", "/", "/",
    "--dev", "/dev",
    "--proc", "/proc",
    "--tmpfs", "/tmp",  # noqa: S108  # a private tmpfs inside the sandbox, not a host path
    "--unshare-all",
    "--die-with-parent",
    "--new-session",
    "--", "true",
)  # fmt: skip


class SandboxUnavailable(Exception):
    """`sandbox = "bwrap"` was required but bubblewrap does not work on this machine."""


@dataclass(frozen=True, slots=True)
class SandboxStatus:
    mode: SandboxMode
    bwrap_path: str | None
    warning: str


def bwrap_works(bwrap: str) -> tuple[bool, str]:
    try:
        completed = subprocess.run(
            [bwrap, *_PROBE_ARGS], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bubblewrap could not start ({type(exc).__name__})"
    if completed.returncode != 0:
        first = completed.stderr.decode("utf-8", "replace").strip().splitlines()[:1]
        return False, "bubblewrap failed its self-test: " + (first[0] if first else "no output")
    return True, ""


def detect_sandbox(requested: str) -> SandboxStatus:
    """Resolve `auto | bwrap | none` to the mode in effect, with a warning when unconfined."""
    if requested == "none":
        return SandboxStatus(
            SandboxMode.NONE, None, "sandbox disabled by configuration: commands run unconfined"
        )
    bwrap = shutil.which("bwrap")
    ok, problem = bwrap_works(bwrap) if bwrap else (False, "bubblewrap (bwrap) is not installed")
    if ok:
        return SandboxStatus(SandboxMode.BWRAP, bwrap, "")
    if requested == "bwrap":
        raise SandboxUnavailable(f"sandbox = bwrap was required, but {problem}")
    warning = f"{problem}; commands run UNSANDBOXED"
    log.warning("sandbox unavailable", extra={"detail": warning})
    return SandboxStatus(SandboxMode.NONE, None, warning)
