"""Per-command limits on processes, memory, CPU time and file size (issue 13, DESIGN section 6).

One command could start hundreds of processes or take all the memory: nothing bounded it.
Every command (sandboxed or not, foreground or supervised) is bounded from its first
instruction; the server never runs `preexec_fn` (unsafe with threads):
- sandboxed, bubblewrap holds the sandbox's init before it starts the command (`--block-fd`)
  while the server writes the init's PID into the command's cgroups and sets its rlimits
  (`prlimit`), `apply` below: no extra process;
- unconfined, the command starts through a short `bash` step that places itself in the
  cgroups and sets its rlimits, then execs the command (`wrap`).

Mechanisms, chosen at start (`[command_limits] mechanism`, default `auto`):
- `cgroup-v2`: a delegated unified hierarchy the server can write (`pids.max`, `memory.max`,
  `memory.swap.max = 0`);
- `cgroup-v1`: the `pids` and `memory` controllers mounted separately, as on these machines
  (`pids.max`, `memory.limit_in_bytes`, `memory.memsw.limit_in_bytes` when swap accounting
  is on). The kernel's OOM killer then kills inside the command's cgroup only;
- `rlimit`: no writable cgroups. RLIMIT_AS bounds each process's memory; there is no bound on
  the number of processes when the server runs as root (the kernel ignores RLIMIT_NPROC for
  root), which health and GetSession make visible by naming the mechanism.
CPU time (RLIMIT_CPU, per process: SIGXCPU, then SIGKILL) and file size (RLIMIT_FSIZE:
SIGXFSZ / EFBIG) are rlimits under every mechanism: cgroups bound CPU rate, not time.

A command's cgroups are `<controller>/callgate-<server pid>-<random>/cmd-<n>`, removed once its
tree is gone (what hit a limit is read first); the server's own parent goes at shutdown, and
parents left by a server that died are removed at start.

Making, joining and removing cgroups may wait for the kernel (a cgroup v1 migration waits for
an RCU grace period: ~11 ms at p90 while other sandboxes are torn down, and removing ended
commands' cgroups took up to 180 ms under load), so the runners call `place`, `apply` and
`prepare_next` in a worker thread, never on the event loop; `CommandLimiter` is safe to use
from several threads.

The watchdog (`Watchdog`): with cgroups, one process per server, started with the first
sandboxed command, blocked reading a pipe whose only write end the server holds. When the
server dies (kill -9 included) the read returns and the watchdog kills every process in the
server's command cgroups until they are empty, then removes them. Since a sandboxed command
is in its cgroups before it runs its first instruction, this is the kill -9 guarantee with no
process per command (the fallback without cgroups is the per-command lifeline, bwrap.py).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import resource
import secrets
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
BASH = "/bin/bash"
_V1_CONTROLLERS = ("pids", "memory")
# Exit statuses of a shell whose command died of SIGXCPU / SIGXFSZ (or bash itself did).
_SIGNALLED = {128 + signal.SIGXCPU: "cpu_limit", 128 + signal.SIGXFSZ: "file_size_limit"}


@dataclass(frozen=True, slots=True)
class CommandLimits:
    pids: int = 512
    memory_bytes: int = 2 << 30
    cpu_seconds: int = 600
    file_size_bytes: int = 1 << 30


class Placement:
    """One command's cgroups (none under `rlimit`): read after the command, then removed."""

    def __init__(self, directories: Sequence[Path], version: int) -> None:
        self.directories = tuple(directories)
        self.version = version
        self.hit: str | None = None
        self._released = False

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.directories]

    def _read(self, directory: Path, name: str) -> str:
        try:
            return (directory / name).read_text()
        except OSError:
            return ""

    def _limit_hit(self) -> str | None:
        for directory in self.directories:
            if self.version == 2:
                events = _counters(self._read(directory, "memory.events"))
                if events.get("oom_kill", 0) or events.get("oom", 0):
                    return "memory_limit"
                if _counters(self._read(directory, "pids.events")).get("max", 0):
                    return "pids_limit"
            elif directory.parent.parent.name == "memory":
                oom = _counters(self._read(directory, "memory.oom_control"))
                if oom.get("oom_kill", 0) or oom.get("under_oom", 0):
                    return "memory_limit"
            elif directory.parent.parent.name == "pids" and _counters(
                self._read(directory, "pids.events")
            ).get("max", 0):
                return "pids_limit"
        return None

    def settle(self) -> None:
        """Record what hit a limit, once the command's tree is gone."""
        if self.hit is None and not self._released:
            self.hit = self._limit_hit()

    def release(self) -> bool:
        """Record what hit a limit and remove the cgroups; False when a process is still in
        one (it is killed, and the removal is left to `CommandLimiter.sweep`)."""
        if self._released:
            return True
        self.settle()
        removed = True
        for directory in self.directories:
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                _kill_members(directory)
                removed = False
        self._released = removed
        return removed


async def placed(limiter: CommandLimiter) -> Placement:
    """`limiter.place()` in a worker thread (it may make and remove cgroups). The thread is
    never abandoned: a caller cancelled meanwhile still gets the placement (the cancellation
    comes at its next checkpoint), and releases it on its way out."""
    return await anyio.to_thread.run_sync(limiter.place)


def exit_limit(exit_code: int | None) -> str | None:
    """The limit an exit status says the command hit (CPU time, file size), if any."""
    return _SIGNALLED.get(exit_code) if exit_code is not None else None


class CommandLimiter:
    """Chooses the mechanism at start and wraps each command's argv (see the docstring)."""

    def __init__(self, limits: CommandLimits, mechanism: str = "auto") -> None:
        self.limits = limits
        self.mechanism = "none"
        self._parents: list[Path] = []
        self._version = 0
        self._counter = itertools.count(1)
        # Ended commands' cgroups, handed over from the event loop (`leftover`, no lock: a
        # deque's append is atomic), and those the sweep could not remove yet.
        self._ended: deque[Placement] = deque()
        self._leftovers: list[Placement] = []
        self._watchdog: Watchdog | None = None
        # A command's cgroups made ahead of it (prepare_next); never used by two commands.
        self._spare: Placement | None = None
        # Held by whichever thread makes or removes cgroups (`place`, `prepare_next`, `sweep`).
        self._lock = threading.Lock()
        if mechanism == "none":
            return
        if mechanism in ("auto", "cgroup"):
            self._setup_cgroups()
        if self.mechanism == "none":
            if mechanism == "cgroup":
                raise RuntimeError("no writable cgroup hierarchy for command limits")
            self.mechanism = "rlimit"

    def _setup_cgroups(self) -> None:
        # Unique per server object: tests run several servers in one process.
        name = f"callgate-{os.getpid()}-{secrets.token_hex(4)}"
        unified = CGROUP_ROOT / "cgroup.controllers"
        try:
            if unified.exists():
                controllers = unified.read_text().split()
                if {"pids", "memory"} <= set(controllers):
                    _remove_stale([CGROUP_ROOT])
                    parent = CGROUP_ROOT / name
                    parent.mkdir(exist_ok=True)
                    (parent / "cgroup.subtree_control").write_text("+pids +memory")
                    self._parents, self._version, self.mechanism = [parent], 2, "cgroup-v2"
                return
            roots = [CGROUP_ROOT / c for c in _V1_CONTROLLERS]
            if all((r / "cgroup.procs").exists() for r in roots):
                _remove_stale(roots)
                parents = [r / name for r in roots]
                for parent in parents:
                    parent.mkdir(exist_ok=True)
                self._parents, self._version, self.mechanism = parents, 1, "cgroup-v1"
        except OSError as exc:
            log.warning(
                "cgroups are not writable here; commands get rlimits only",
                extra={"detail": str(exc)},
            )
            self._parents = []

    def place(self) -> Placement:
        """The next command's cgroups (none under `rlimit`): the ones `prepare_next` made
        ahead, or new ones."""
        if not self._parents:
            return Placement((), 0)
        with self._lock:
            spare, self._spare = self._spare, None
            if spare is not None:
                return spare
            self._sweep_locked()
            return self._create()

    def prepare_next(self) -> None:
        """While a command runs: remove the cgroups of commands that have ended and make the
        next command's, so that neither is on that command's way (about half a millisecond)."""
        with self._lock:
            self._sweep_locked()
            if self._parents and self._spare is None:
                try:
                    self._spare = self._create()
                except OSError as exc:  # the next command tries again itself
                    log.warning("could not prepare a command's cgroups", extra={"detail": str(exc)})

    def _create(self) -> Placement:
        name = f"cmd-{next(self._counter)}"
        directories: list[Path] = []
        try:
            for parent in self._parents:
                directory = parent / name
                directory.mkdir()
                directories.append(directory)
                self._configure(directory)
        except OSError:
            Placement(directories, self._version).release()
            raise
        return Placement(directories, self._version)

    def _configure(self, directory: Path) -> None:
        limits = self.limits
        if self._version == 2:
            (directory / "pids.max").write_text(str(limits.pids))
            (directory / "memory.max").write_text(str(limits.memory_bytes))
            with contextlib.suppress(OSError):
                (directory / "memory.swap.max").write_text("0")
        elif directory.parent.parent.name == "pids":
            (directory / "pids.max").write_text(str(limits.pids))
        else:
            (directory / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
            with contextlib.suppress(OSError):  # present only with swap accounting
                (directory / "memory.memsw.limit_in_bytes").write_text(str(limits.memory_bytes))

    def wrap(self, argv: Sequence[str], placement: Placement) -> list[str]:
        """`argv` behind the bash step that joins the cgroups, sets the rlimits and execs."""
        limits = self.limits
        steps = [f"echo $$ > {path}" for path in placement.procs_files()]
        if self.mechanism == "rlimit":
            steps.append(f"ulimit -v {max(1, limits.memory_bytes // 1024)}")
        # SIGXCPU at the soft limit (the result says cpu_limit), SIGKILL a second later.
        steps.append(f"ulimit -S -t {limits.cpu_seconds}")
        steps.append(f"ulimit -H -t {limits.cpu_seconds + 1}")
        # In POSIX mode `ulimit -f` counts 512-byte blocks (and -v KiB).
        steps.append(f"ulimit -f {max(1, limits.file_size_bytes // 512)}")
        script = " && ".join(steps) + ' && exec "$@"'
        # --posix: this shell must not run BASH_ENV (the sandbox's lifeline script is for the
        # command's own bash, inside the sandbox).
        return [BASH, "--posix", "-c", script, "callgate-limits", *argv]

    def apply(self, pid: int, placement: Placement) -> None:
        """Bound `pid` and all it will start: a sandbox's init held before it runs the command
        (bubblewrap's `--block-fd`), so nothing has escaped the bounds yet. Raises OSError."""
        limits = self.limits
        for path in placement.procs_files():
            with open(path, "w") as procs:
                procs.write(str(pid))
        if self.mechanism == "rlimit":
            resource.prlimit(pid, resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        # SIGXCPU at the soft limit (the result says cpu_limit), SIGKILL a second later.
        cpu = (limits.cpu_seconds, limits.cpu_seconds + 1)
        resource.prlimit(pid, resource.RLIMIT_CPU, cpu)
        size = max(512, limits.file_size_bytes)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (size, size))

    def guarded(self) -> bool:
        """Whether the watchdog guards this server's commands (it is started on first use,
        and again if it was killed); False without cgroups."""
        if not self._parents:
            return False
        if self._watchdog is None or not self._watchdog.alive():
            if self._watchdog is not None:
                log.warning("the command watchdog was gone; starting it again")
            try:
                self._watchdog = Watchdog(self._parents)
            except OSError as exc:
                log.warning("the command watchdog could not start", extra={"detail": str(exc)})
                self._watchdog = None
                return False
        return True

    def sweep(self) -> None:
        """Remove the cgroups of commands whose last process has gone since."""
        with self._lock:
            self._sweep_locked()

    def _sweep_locked(self) -> None:
        while self._ended:
            self._leftovers.append(self._ended.popleft())
        if self._leftovers:
            self._leftovers = [p for p in self._leftovers if not p.release()]

    def leftover(self, placement: Placement) -> None:
        """Hand an ended command's cgroups to the next sweep (called on the event loop)."""
        self._ended.append(placement)

    def close(self) -> None:
        """At shutdown: every command's cgroups, then the server's own parents."""
        if self._watchdog is not None:
            self._watchdog.close()
            self._watchdog = None
        # Under the lock: a command's start still in a worker thread makes nothing after this.
        with self._lock:
            self._sweep_locked()
            self._spare = None  # removed with the rest below
            for parent in self._parents:
                for child in parent.glob("cmd-*"):
                    _kill_members(child)
                    with contextlib.suppress(OSError):
                        child.rmdir()
                with contextlib.suppress(OSError):
                    parent.rmdir()


# The watchdog (see the module docstring). Its stdin is the pipe; "$@" are the server's cgroup
# parents. SIGTERM, SIGINT and SIGHUP are ignored: only the server's end closing ends it.
WATCHDOG_SCRIPT = """trap '' TERM INT HUP
read -r _
for _pass in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
 _left=
 for _parent in "$@"; do
  for _cgroup in "$_parent"/cmd-*; do
   [ -d "$_cgroup" ] || continue
   [ -w "$_cgroup/cgroup.kill" ] && echo 1 > "$_cgroup/cgroup.kill" 2>/dev/null
   while read -r _pid; do _left=1; kill -KILL "$_pid" 2>/dev/null; done < "$_cgroup/cgroup.procs"
  done
 done
 [ -z "$_left" ] && break
 sleep 0.05
done
for _parent in "$@"; do rmdir "$_parent"/cmd-* "$_parent" 2>/dev/null; done
exit 0
"""
# At shutdown: how long the watchdog may take to find nothing left and exit.
WATCHDOG_CLOSE_SECONDS = 5.0


class Watchdog:
    """Kills every command of this server when the server is gone (see the module docstring).
    The pipe's write end is close-on-exec, so no command or helper ever holds it."""

    def __init__(self, parents: Sequence[Path]) -> None:
        self._process = subprocess.Popen(  # a fixed script over the server's own cgroups
            [BASH, "--posix", "-c", WATCHDOG_SCRIPT, "callgate-watchdog", *map(str, parents)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
            # Its own session: a terminal's ^C, or a signal to the server's process group,
            # does not reach it.
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self._process.pid

    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> None:
        """As if the server had died: the watchdog kills what is left, then exits."""
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(WATCHDOG_CLOSE_SECONDS)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def _counters(text: str) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            values[key] = int(value)
    return values


def _kill_members(directory: Path) -> None:
    try:
        pids = (directory / "cgroup.procs").read_text().split()
    except OSError:
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
            os.kill(int(pid), signal.SIGKILL)


def _remove_stale(roots: Sequence[Path]) -> None:
    """Parents (and their commands' cgroups) of callgate servers that are no longer running."""
    for root in roots:
        for parent in root.glob("callgate-*"):
            pid = parent.name.split("-")[1] if parent.name.count("-") >= 1 else ""
            if not pid.isdigit() or int(pid) == os.getpid() or Path(f"/proc/{pid}").exists():
                continue
            for child in parent.glob("cmd-*"):
                _kill_members(child)
                with contextlib.suppress(OSError):
                    child.rmdir()
            with contextlib.suppress(OSError):
                parent.rmdir()
