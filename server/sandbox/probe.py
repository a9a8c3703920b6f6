"""Startup self-test: does bubblewrap really work here (containers may forbid namespaces), and
does it load the commands' seccomp filter?"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass

from callgate.server.core.models import SandboxMode

from .seccomp import SeccompProgram, SeccompUnavailable, build_program

log = logging.getLogger(__name__)

_PROBE_ARGS = (
    "--ro-bind", "/", "/",
    "--dev", "/dev",
    "--proc", "/proc",
    "--tmpfs", "/tmp",  # noqa: S108  # a private tmpfs inside the sandbox, not a host path
    "--unshare-all",
    "--die-with-parent",
    "--new-session",
)  # fmt: skip


class SandboxUnavailable(Exception):
    """`sandbox = "bwrap"` was required but bubblewrap does not work on this machine."""


@dataclass(frozen=True, slots=True)
class SandboxStatus:
    mode: SandboxMode
    bwrap_path: str | None
    warning: str
    # The commands' seccomp filter, loaded by bubblewrap in the self-test; None without one.
    seccomp: SeccompProgram | None = None


def bwrap_works(bwrap: str, seccomp: SeccompProgram | None = None) -> tuple[bool, str]:
    passed: list[int] = []
    try:
        argv = [bwrap, *_PROBE_ARGS]
        if seccomp is not None:
            passed.append(seccomp.open_fd())
            argv += ["--seccomp", str(passed[0])]
        completed = subprocess.run(
            [*argv, "--", "true"], capture_output=True, timeout=10, check=False, pass_fds=passed
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bubblewrap could not start ({type(exc).__name__})"
    finally:
        for fd in passed:
            os.close(fd)
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
        assert bwrap is not None
        return _with_seccomp(requested, bwrap)
    if requested == "bwrap":
        raise SandboxUnavailable(f"sandbox = bwrap was required, but {problem}")
    warning = f"{problem}; commands run UNSANDBOXED"
    log.warning("sandbox unavailable", extra={"detail": warning})
    return SandboxStatus(SandboxMode.NONE, None, warning)


def _with_seccomp(requested: str, bwrap: str) -> SandboxStatus:
    """Working bubblewrap: build the filter and check that bubblewrap loads it. Without one
    the sandbox still runs (auto), with a warning, or the server refuses (bwrap required)."""
    try:
        program = build_program()
        ok, problem = bwrap_works(bwrap, program)
    except SeccompUnavailable as exc:
        ok, problem = False, str(exc)
    if ok:
        return SandboxStatus(SandboxMode.BWRAP, bwrap, "", program)
    if requested == "bwrap":
        raise SandboxUnavailable(f"sandbox = bwrap was required, but its seccomp filter: {problem}")
    warning = (
        f"no seccomp filter ({problem}): sandboxed commands can set setuid bits on the files "
        "they write"
    )
    log.warning("sandbox without seccomp filter", extra={"detail": warning})
    return SandboxStatus(SandboxMode.BWRAP, bwrap, warning)
