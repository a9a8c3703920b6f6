"""Per-command limits on processes, memory, CPU time and file size (design section 6).

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

A command's cgroups are `<base>/callgate-<instance>/cmd-<n>`, removed once its tree is gone
(what hit a limit is read first). `<base>` is the server's own cgroup under cgroup v1 (so that
commands stay inside whatever bounds the operator put the server in) and the hierarchy's root
under v2 (whose no-internal-process rule forbids children beside the server). `<instance>` is
random per run, never a PID: a server in another PID namespace cannot tell whether a PID names a
live server, so a name with a PID in it proves nothing.

Ownership (several servers on one host, each maybe in its own PID namespace): a server proves a
cgroup parent is its own by the record `<state_dir>/cgroups`, which lists the parents the runs of
that state directory made; the server writes it only while it holds the state directory's lock
(app.py). At start it removes what earlier runs recorded (no live server holds the lock, so they
are abandoned) and nothing else: it never looks at another server's cgroups. Processes are
killed through `cgroup.kill` where the kernel has it (v2); under v1 through a pidfd, only after
`/proc/<pid>/cgroup` shows the process is in the cgroup being emptied, and only when `/proc` is
this server's own PID namespace (PIDs are never acted on across namespaces).

Recovery: when the parents vanish anyway (an operator, or an older server's sweep), the next
command recreates them; when that fails too, the command is refused with `sandbox_unavailable`
(never an internal error), and health says which (`condition`).

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
import re
import resource
import secrets
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread

from .runner import LimitsUnavailable

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
BASH = "/bin/bash"
_V1_CONTROLLERS = ("pids", "memory")
# Exit statuses of a shell whose command died of SIGXCPU / SIGXFSZ (or bash itself did).
_SIGNALLED = {128 + signal.SIGXCPU: "cpu_limit", 128 + signal.SIGXFSZ: "file_size_limit"}
# The record of the cgroup parents a state directory's runs made (see the module docstring).
CGROUP_RECORD = "cgroups"
# A parent's name: "callgate-" and 16 random hex digits (an instance of the server).
_PARENT_NAME = re.compile(r"callgate-[0-9a-f]{16}")


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

    def intact(self) -> bool:
        """Whether its cgroups still exist (something outside the server may remove them)."""
        return all(d.is_dir() for d in self.directories)

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
            elif _controller(directory) == "memory":
                oom = _counters(self._read(directory, "memory.oom_control"))
                if oom.get("oom_kill", 0) or oom.get("under_oom", 0):
                    return "memory_limit"
            elif _controller(directory) == "pids" and _counters(
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

    def __init__(
        self, limits: CommandLimits, mechanism: str = "auto", record: Path | None = None
    ) -> None:
        self.limits = limits
        self.mechanism = "none"
        # "ok"; "recreated": the parents vanished and were made again; "unavailable": making
        # them failed, and commands are refused until a later command succeeds (health says it).
        self.condition = "ok"
        # `<state_dir>/cgroups` (see the module docstring); None: nothing recorded or swept
        # (benchmarks and tests that build a limiter without a server).
        self._record = record
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
        name = f"callgate-{secrets.token_hex(8)}"
        unified = CGROUP_ROOT / "cgroup.controllers"
        try:
            if unified.exists():
                controllers = unified.read_text().split()
                if {"pids", "memory"} <= set(controllers):
                    self._adopt([CGROUP_ROOT / name], 2)
                return
            roots = [CGROUP_ROOT / c for c in _V1_CONTROLLERS]
            if all((r / "cgroup.procs").exists() for r in roots):
                self._adopt([_own_cgroup(root) / name for root in roots], 1)
        except OSError as exc:
            log.warning(
                "cgroups are not writable here; commands get rlimits only",
                extra={"detail": str(exc)},
            )
            self._parents = []

    def _adopt(self, parents: list[Path], version: int) -> None:
        """Sweep what earlier runs of this state directory left, record `parents` as this
        run's, then make them."""
        left = _sweep_recorded(self._record) if self._record is not None else []
        if self._record is not None:
            _write_record(self._record, [*left, *parents])
        self._parents, self._version = parents, version
        self._make_parents()
        self.mechanism = f"cgroup-v{version}"

    def _make_parents(self) -> None:
        for parent in self._parents:
            parent.mkdir(exist_ok=True)
            if self._version == 2:
                (parent / "cgroup.subtree_control").write_text("+pids +memory")

    def place(self) -> Placement:
        """The next command's cgroups (none under `rlimit`): the ones `prepare_next` made
        ahead, or new ones."""
        if not self._parents:
            return Placement((), 0)
        with self._lock:
            spare, self._spare = self._spare, None
            if spare is not None and spare.intact():
                return spare
            if spare is not None:
                self._leftovers.append(spare)
            self._sweep_locked()
            return self._create_or_recover()

    def _create_or_recover(self) -> Placement:
        """A command's cgroups; when the parents have vanished, they are made again first.
        Raises LimitsUnavailable when neither works."""
        try:
            placement = self._create()
        except OSError:
            try:
                self._make_parents()
                placement = self._create()
            except OSError as exc:
                self.condition = "unavailable"
                log.error(
                    "the command cgroups are gone and cannot be made again",
                    extra={"detail": str(exc)},
                )
                raise LimitsUnavailable(
                    "The sandbox cannot bound this command: its cgroups are gone and could not "
                    "be made again; the server's health check says more."
                ) from None
            log.warning("the command cgroups had vanished; they were made again")
            self.condition = "recreated"
        if self.condition == "unavailable":
            self.condition = "recreated"
        return placement

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
        elif _controller(directory) == "pids":
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


def _controller(directory: Path) -> str:
    """The v1 controller whose hierarchy holds `directory` (its mount under CGROUP_ROOT)."""
    return directory.relative_to(CGROUP_ROOT).parts[0]


def _counters(text: str) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            values[key] = int(value)
    return values


def _kill_members(directory: Path) -> None:
    """SIGKILL every process in one of this server's cgroups: at once through `cgroup.kill`
    (v2), else one by one, each only once it is proven a member (`_kill_if_member`)."""
    try:
        (directory / "cgroup.kill").write_text("1")
        return
    except OSError:
        pass  # v1 has no cgroup.kill (or it is not writable here): one by one
    try:
        pids = (directory / "cgroup.procs").read_text().split()
    except OSError:
        return
    if not _proc_is_ours():
        return  # PIDs could not be checked against /proc: acting on them proves nothing
    marker = f"/{directory.parent.name}/{directory.name}"
    for pid in pids:
        if pid.isdigit() and int(pid) > 0:
            _kill_if_member(int(pid), marker)


def _kill_if_member(pid: int, marker: str) -> None:
    """SIGKILL `pid` if, and only if, it is in a cgroup whose path ends with `marker`. The
    pidfd holds the process: while it lives its PID is not reused, so the /proc read and the
    signal are about the same process (a process that ended meanwhile is not signalled)."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return  # gone already
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        if any(line.endswith(marker) for line in lines):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:
        pass  # ended meanwhile
    finally:
        os.close(pidfd)


def _proc_is_ours() -> bool:
    """Whether /proc is the procfs of this process's PID namespace (a container may mount
    another one), so that /proc/<pid> names the process a PID means here."""
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


def _own_cgroup(root: Path) -> Path:
    """The server's own cgroup in the v1 hierarchy mounted at `root` (where its commands'
    parent goes), or `root` when /proc/self/cgroup does not name one that is there."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if root.name in controllers.split(","):
                own = root / path.lstrip("/")
                if own.is_dir() and ".." not in own.parts:
                    return own
    return root


def _recorded(parent: Path) -> bool:
    """Whether a line of the record has the shape of a parent a run of this server made (the
    record lies in the private state directory; this is a second check, not the first)."""
    return (
        parent.is_absolute()
        and parent.is_relative_to(CGROUP_ROOT)
        and ".." not in parent.parts
        and _PARENT_NAME.fullmatch(parent.name) is not None
        and os.path.realpath(parent) == str(parent)
    )


# At start: how long the sweep waits for killed processes to leave an abandoned cgroup.
SWEEP_PASSES = 20
SWEEP_PAUSE_SECONDS = 0.05


def _sweep_recorded(record: Path) -> list[Path]:
    """Remove the cgroup parents that earlier runs of this state directory recorded (killing
    what is left in their commands' cgroups); returns those that could not be removed yet."""
    try:
        lines = record.read_text().splitlines()
    except FileNotFoundError:
        return []
    left: list[Path] = []
    for line in lines:
        parent = Path(line)
        if not _recorded(parent) or not parent.is_dir():
            continue
        for attempt in range(SWEEP_PASSES):
            if _remove_parent(parent):
                break
            if attempt + 1 < SWEEP_PASSES:
                time.sleep(SWEEP_PAUSE_SECONDS)  # killed processes take a moment to leave
        else:
            log.warning("an abandoned command cgroup could not be removed yet; kept for later")
            left.append(parent)
    return left


def _remove_parent(parent: Path) -> bool:
    for child in parent.glob("cmd-*"):
        _kill_members(child)
        with contextlib.suppress(OSError):
            child.rmdir()
    with contextlib.suppress(OSError):
        parent.rmdir()
    return not parent.exists()


def _write_record(record: Path, parents: Iterable[Path]) -> None:
    """Replace the record (0600, written aside and renamed: never half written)."""
    temporary = record.with_name(f".{record.name}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write("".join(f"{parent}\n" for parent in parents))
    os.replace(temporary, record)
