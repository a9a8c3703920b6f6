"""The bubblewrap runner: every command in a fresh mount, PID, IPC, UTS and network namespace,
with the host read-only (design section 6).

What the command sees:
- `/` read-only; a fresh `/dev` (its own empty `/dev/shm`) and a fresh `/proc` of its own PID
  namespace, so no host process (the server's `/proc/<pid>/environ` included) is visible;
  `/proc/sys` and `/proc/sysrq-trigger` read-only (bubblewrap leaves them writable for a real
  root, and a write there changes the host kernel);
- private, empty `/tmp` and `/run` (the host's sockets live there: D-Bus, container runtimes,
  a callgate socket). If `/etc/resolv.conf` points into `/run`, that one file is bound back;
- `spec.hidden_dirs` (the server's state directory with its token files, the server user's
  home) as empty tmpfs: they would be readable under the read-only `/` otherwise;
- the workspace, the approved write declarations and the session's private HOME and TMPDIR
  writable; the approved read declarations read-only (they may lie in a hidden directory).
  In the read-only sandbox (`spec.read_only`: a command allowed by read-only families only)
  every one of those binds is read-only, TMPDIR is a throwaway tmpfs and there is no proxy;
- `spec.masked_paths` (secrets inside the workspace, the server's sockets, the files of
  programs deny families name: `program_masks.py`) covered: a
  directory by an empty tmpfs, anything else by `/dev/null` (bound `nodev`, so opening it
  fails with EACCES: the secret is neither read nor overwritten, and a socket is dead).

Mounts are ordered by path depth, so a mount over a directory always comes before mounts
inside it whatever their kind: the state directory is hidden after the workspace bind when it
lies inside the workspace, and the session's HOME (inside the state directory) is bound after
the state directory is hidden. A bind of exactly a hidden directory is dropped (hidden wins).

The process runs with no capabilities (`--cap-drop ALL`: bubblewrap started by root would
otherwise keep them all) and `no_new_privs` (bubblewrap always sets it), in a new session
(`--new-session`: no TIOCSTI into the server's terminal), and dies with the server
(`--die-with-parent`). When the runner has a seccomp program (`seccomp.py`: no setuid or
setgid bits, no device nodes, no ptrace, keyring, bpf, io_uring, new namespaces, ...),
bubblewrap loads it (`--seccomp FD`, a fresh pipe per spawn) just before it executes the
command. The environment is exactly `spec.env`, handed to bubblewrap through
execve rather than `--setenv` arguments: a command line is readable by every user of the host
(`/proc/<pid>/cmdline`), an environment only by the same user.

Network: none but loopback, ever. A command whose network requirements were approved
(`spec.egress`) finds the egress proxy on its loopback (netns.py: the listener is made in its
namespace while its init waits at the start gate) through HTTP_PROXY and friends; the proxy
(`net/egress.py`) reaches exactly the approved endpoints, and journals every connection.

Start and death of the server: with a limiter, bubblewrap holds its init (`--block-fd`) until
the server has put it in the command's cgroups and set its rlimits (START_GATE_SCRIPT); with
cgroups, the server's watchdog (limits.py) ends every command if the server dies; without,
each command gets a lifeline (LIFELINE_SCRIPT). `BwrapRunner.guard` says which.

Process tree: bubblewrap's own init is PID 1 of the sandbox (`--info-fd` reports its host PID)
and exits when the command exits; when a namespace's init exits the kernel kills every process
left in it, and the init's exit completes only after they are gone. So SIGKILL to the init
ends the whole tree, and the outer bubblewrap process (our child) exiting confirms it, since it
waits for the init. Other signals go to every descendant of the init (`proctree`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import anyio
import anyio.to_thread

from callgate.server.core.models import SandboxMode
from callgate.server.core.paths import is_within

from ..net.egress import ConnectionRecord, EgressCall, EgressHandle, EgressProxy, EgressReport
from . import fsaccess, netns, proctree
from .launch import KILL_CONFIRM_SECONDS, Child, LaunchedCommand, spawn
from .limits import CommandLimiter, Placement, placed
from .pipes import PipeReceiveStream, PipeSendStream
from .runner import CommandSpec, CommandStartError
from .seccomp import SeccompProgram

log = logging.getLogger(__name__)

BASH = "/bin/bash"
# The lifeline (the guard without cgroups; with them the watchdog of limits.py guards, with no
# process per command): bash runs this (through BASH_ENV, so no extra exec) before the command. It
# starts one watcher process blocked reading the command's lifeline pipe, takes it out of the
# job table (`wait` and `jobs` in the command never see it; `$!` does until the command
# starts a job of its own), and closes both fds and BASH_ENV for the command. The server
# holds the pipe's only write end until the command is over and never writes, so the read
# returns when the server dies (kill -9 included) or the command has ended; the watcher then
# kills every process of the sandbox's PID namespace (kill -1 reaches nothing outside it, nor
# its init), bubblewrap's init exits and the kernel ends the rest.
# Why: `--die-with-parent` is racy (containers/bubblewrap#633): bubblewrap arms the
# parent-death signal late in its setup, so a server killed within milliseconds of a spawn
# left that sandbox running its command with nobody to stop it. A one-time check when the
# command starts is not enough (measured: the arming can come after the command started).
# The watcher costs about 0.4 ms per command (one fork). The pipe is per command: a command
# that writes to its own lifeline (it can reopen it through /proc) only ends itself.
# Guard: the kill runs only when the shell is PID 2 (the first process after bubblewrap's
# init in a new PID namespace). On a host PID 2 is a kernel thread, never a shell, so a misuse
# outside a sandbox does nothing rather than signal every process of the host.
# Not covered: a server killed between bubblewrap's clone and the end of bubblewrap's own
# setup leaves the sandbox's init blocked in that setup for good; it never runs the command.
LIFELINE_SCRIPT = """unset BASH_ENV
(exec </dev/null >/dev/null 2>&1 {script}<&-
 read -r _ <&{lifeline}
 [ "$$" = 2 ] && kill -KILL -1) & disown 2>/dev/null
exec {lifeline}<&- {script}<&-
"""


@dataclass(slots=True)
class Lifeline:
    """One command's lifeline (see LIFELINE_SCRIPT): `write` is the server's end (close-on-exec,
    so no child ever holds it; the kernel closes it if the server dies); `passed` are the fds
    the sandbox gets (the read end, and the pipe holding the script), closed by the caller
    once the child has them; `env` makes bash run the script."""

    write: int
    passed: tuple[int, int]

    @classmethod
    def open(cls) -> Lifeline:
        opened: list[int] = []
        try:
            lifeline_read, lifeline_write = os.pipe2(os.O_CLOEXEC)
            opened += [lifeline_read, lifeline_write]
            script_read = _script_pipe(lambda fd: lifeline_script(lifeline_read, fd), opened)
        except BaseException:
            for fd in opened:
                os.close(fd)
            raise
        return cls(lifeline_write, (lifeline_read, script_read))

    @property
    def env(self) -> dict[str, str]:
        return _bash_env(self.passed[1])


def _script_pipe(render: Callable[[int], bytes], opened: list[int]) -> int:
    """A pipe holding the script `render` makes from the pipe's own read end (what bash reads
    through BASH_ENV); returns that read end, which stays in `opened` (the write end is closed
    once written: a few hundred bytes, which the pipe buffer takes without blocking)."""
    script_read, script_write = os.pipe2(os.O_CLOEXEC)
    opened += [script_read, script_write]
    os.write(script_write, render(script_read))
    os.close(opened.pop())
    return script_read


def _bash_env(script_fd: int) -> dict[str, str]:
    return {"BASH_ENV": f"/proc/self/fd/{script_fd}"}


# The start gate: with the watchdog guarding (limits.py), no process per command. bubblewrap
# holds the sandbox's init on `--block-fd` until the server has placed it in the command's
# cgroups and set its rlimits; the server then writes "xgo\n": bubblewrap takes one byte and
# starts the command, whose bash runs this (through BASH_ENV) first and reads the rest from a
# second descriptor of the same pipe. A server that dies before placing the init closes the
# pipe instead: bubblewrap, reading end-of-file, goes on, but bash finds no "go" and exits
# before the command runs, so nothing the watchdog cannot see ever runs.
START_GATE_SCRIPT = """unset BASH_ENV
IFS= read -r _go <&{gate} || exit 125
[ "$_go" = go ] || exit 125
unset _go
exec {gate}<&- {script}<&-
"""
START_GATE_BYTES = b"xgo\n"


@dataclass(slots=True)
class StartGate:
    """One command's start gate (see START_GATE_SCRIPT): `write` is the server's end (close-on-
    exec); `block` is bubblewrap's `--block-fd`; `passed` are the fds the sandbox gets (closed
    by the caller once the child has them); `env` makes bash run the script. Without `check`
    (the per-command lifeline guards instead, through BASH_ENV of its own) only the block."""

    write: int
    block: int
    passed: tuple[int, ...]
    env: dict[str, str]

    @classmethod
    def open(cls, *, check: bool = True) -> StartGate:
        opened: list[int] = []
        try:
            gate_read, gate_write = os.pipe2(os.O_CLOEXEC)
            opened += [gate_read, gate_write]
            if not check:
                return cls(gate_write, gate_read, (gate_read,), {})
            gate_again = os.dup(gate_read)  # bubblewrap closes its --block-fd after the read
            opened.append(gate_again)
            script_read = _script_pipe(
                lambda fd: START_GATE_SCRIPT.format(gate=gate_again, script=fd).encode(), opened
            )
        except BaseException:
            for fd in opened:
                os.close(fd)
            raise
        return cls(
            gate_write, gate_read, (gate_read, gate_again, script_read), _bash_env(script_read)
        )

    def open_gate(self) -> None:
        """Let the command run (its init is in its cgroups and under its rlimits)."""
        os.write(self.write, START_GATE_BYTES)


def lifeline_works(bwrap: str, seccomp: SeccompProgram | None = None) -> bool:
    """Startup self-test: a sandboxed `sleep` whose lifeline is cut at once must be killed
    (under the commands' seccomp filter, when there is one).
    It is not where bash is not PID 2 of the sandbox (bubblewrap installed setuid runs a
    helper there first): then the guard keeps the watcher from killing anything."""
    opened: list[int] = []  # all closed below: the cut, as if the server had died
    try:
        lifeline = Lifeline.open()
        opened += [*lifeline.passed, lifeline.write]
        argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        argv += ["--unshare-pid", "--die-with-parent", "--new-session"]
        if seccomp is not None:
            opened.append(seccomp.open_fd())
            argv += ["--seccomp", str(opened[-1])]
        argv += ["--", BASH, "-c", "sleep 2"]
        process = subprocess.Popen(  # a fixed, harmless command in a PID namespace
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin", **lifeline.env},
            pass_fds=[fd for fd in opened if fd != lifeline.write],
        )
    except OSError:
        return False
    finally:
        for fd in opened:
            os.close(fd)
    started = time.monotonic()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return False
    # Killed by the watcher: 128 + SIGKILL, reported by bubblewrap's init. bubblewrap failing
    # its own setup (a filter the kernel refuses, say) exits 1 and does not count.
    killed = process.returncode == 128 + signal.SIGKILL
    return killed and time.monotonic() - started < 1.5


def lifeline_script(lifeline_fd: int, script_fd: int) -> bytes:
    return LIFELINE_SCRIPT.format(lifeline=lifeline_fd, script=script_fd).encode()


# bubblewrap reports its init's PID within milliseconds; this only bounds a broken start.
INFO_TIMEOUT_SECONDS = 10.0
RESOLV_CONF = "/etc/resolv.conf"


@dataclass(frozen=True, slots=True, order=True)
class _Mount:
    """One mount of the plan: ordered by depth, then by kind (hide, read, write, mask)."""

    depth: int
    rank: int
    path: str
    args: tuple[str, ...]


_HIDE, _READ, _WRITE, _PIN, _READONLY, _MASK = range(6)


def _depth(path: str) -> int:
    return path.rstrip("/").count("/")


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False


def _mask(path: str) -> _Mount | None:
    """An empty tmpfs over a directory, the empty /dev/null over anything else; None when
    the path does not exist (nothing to hide)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISDIR(mode):
        return _Mount(_depth(path), _MASK, path, ("--tmpfs", path))
    return _Mount(_depth(path), _MASK, path, ("--ro-bind", "/dev/null", path))


def _host_view() -> list[str]:
    """The fixed part of the sandbox's filesystem (see the module docstring)."""
    args = [
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--ro-bind", "/proc/sys", "/proc/sys",
        "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger",
        "--tmpfs", "/tmp",  # noqa: S108  # a private tmpfs inside the sandbox, not a host path
    ]  # fmt: skip
    for run in ("/run", "/var/run"):
        if _is_dir(run) and not os.path.islink(run):
            args += ["--tmpfs", run]
    resolv = os.path.realpath(RESOLV_CONF)
    if resolv != RESOLV_CONF and is_within(resolv, "/run") and os.path.isfile(resolv):
        args += ["--ro-bind", resolv, resolv]
    return args


def mount_plan(spec: CommandSpec, anchors: Mapping[str, int] | None = None) -> list[str]:
    """The bubblewrap mount arguments for `spec`, after the fixed host view. `anchors` are fds
    the server opened without following symlinks (`open_anchors`) for the read-only paths and
    pinned directories: they are bound from the fd, never from a path a command could swap."""
    hidden = {d for d in spec.hidden_dirs if d != "/" and _is_dir(d)}
    writable = [spec.workspace, *spec.write_paths]
    mounts: list[_Mount] = [_Mount(_depth(d), _HIDE, d, ("--tmpfs", d)) for d in hidden]
    for path in spec.read_paths:
        # Already visible (and writable) through a write bind: a read bind would narrow it.
        if path in hidden or any(is_within(path, w) for w in writable):
            continue
        mounts.append(_Mount(_depth(path), _READ, path, ("--ro-bind", path, path)))
    binds = [spec.workspace, spec.home, spec.tmp]
    binds += [w for w in spec.write_paths if not is_within(w, spec.workspace)]
    for path in dict.fromkeys(binds):
        if path in hidden:
            continue
        if spec.dry_run is not None:
            # A dry run writes only into its overlay; HOME and TMPDIR are throwaway.
            if path == spec.workspace:
                mounts.append(
                    _Mount(_depth(path), _WRITE, path, ("--bind", spec.dry_run.merged, path))
                )
            elif path in (spec.home, spec.tmp):
                mounts.append(_Mount(_depth(path), _WRITE, path, ("--tmpfs", path)))
            else:
                mounts.append(_Mount(_depth(path), _WRITE, path, ("--ro-bind", path, path)))
        elif not spec.read_only:
            mounts.append(_Mount(_depth(path), _WRITE, path, ("--bind", path, path)))
        elif path == spec.tmp:
            # Read-only sandbox: TMPDIR is a throwaway tmpfs, gone with the command.
            mounts.append(_Mount(_depth(path), _WRITE, path, ("--tmpfs", path)))
        else:
            mounts.append(_Mount(_depth(path), _WRITE, path, ("--ro-bind", path, path)))
    for path, fd in (anchors or {}).items():
        rank = _READONLY if path in spec.readonly_paths else _PIN
        # A pinned directory inside a read-only one stays read-only.
        readonly = rank == _READONLY or any(is_within(path, r) for r in spec.readonly_paths)
        keep_readonly = readonly or spec.read_only or spec.dry_run is not None
        option = "--ro-bind-fd" if keep_readonly else "--bind-fd"
        mounts.append(_Mount(_depth(path), rank, path, (option, str(fd), path)))
    for path in dict.fromkeys(spec.masked_paths):
        # Inside a hidden directory a path is gone already; a mask would only add a mount.
        if path != "/" and not any(is_within(path, h) for h in hidden):
            mask = _mask(path)
            if mask is not None:
                mounts.append(mask)
    args: list[str] = []
    for mount in sorted(mounts):
        args.extend(mount.args)
    return args


def open_anchors(spec: CommandSpec) -> dict[str, int]:
    """Open every read-only path and pinned directory of `spec` below the writable tree that
    holds it, one component at a time without following a symlink (`fsaccess`). A path that
    is gone or changed kind is left out: there is nothing left there to protect. The caller
    closes the fds once the sandbox has them."""
    writable = [spec.workspace, *(w for w in spec.write_paths if _is_dir(w))]
    opened: dict[str, int] = {}
    try:
        for path in dict.fromkeys((*spec.pinned_dirs, *spec.readonly_paths)):
            root = next((w for w in writable if is_within(path, w) and path != w), None)
            if root is None:
                continue  # not writable in the sandbox: nothing to pin or protect
            fd = _open_anchor(root, path)
            if fd is not None:
                opened[path] = fd
    except BaseException:
        for fd in opened.values():
            os.close(fd)
        raise
    return opened


def _open_anchor(root: str, path: str) -> int | None:
    parent, name = os.path.split(path)
    try:
        dir_fd = fsaccess.open_directory(root, parent)
    except (OSError, fsaccess.PathChanged):
        return None
    try:
        fd = fsaccess.open_step(dir_fd, name, os.O_PATH)
    except (OSError, fsaccess.PathChanged):
        return None
    finally:
        os.close(dir_fd)
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return fd
    os.close(fd)  # a symlink (O_PATH|O_NOFOLLOW opens the link itself) or a special file
    return None


def bwrap_argv(
    bwrap: str,
    spec: CommandSpec,
    *,
    info_fd: int | None = None,
    anchors: Mapping[str, int] | None = None,
    seccomp_fd: int | None = None,
    block_fd: int | None = None,
) -> list[str]:
    """The whole bubblewrap command line for `spec` (an argv list, never a shell string);
    `seccomp_fd` holds the compiled filter (SeccompProgram.open_fd); with `block_fd` the
    sandbox's init waits for a byte there before it starts the command."""
    argv = [bwrap, *_host_view(), *mount_plan(spec, anchors)]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    argv += [
        "--unshare-net",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--chdir",
        spec.workdir,
    ]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    if block_fd is not None:
        argv += ["--block-fd", str(block_fd)]
    argv += ["--", BASH, "-c", spec.command]
    return argv


def _launch(spec: CommandSpec, argv: list[str]) -> tuple[list[str], list[int]]:
    """What to start for bubblewrap's `argv`, and the fds the child gets that stay ours: a dry
    run starts through the overlay helper, which execs bubblewrap (overlay.py)."""
    if spec.dry_run is None:
        return argv, []
    return spec.dry_run.helper_argv(argv), [spec.dry_run.fd]


def _check_sources(spec: CommandSpec) -> None:
    """Every bind source must exist: bubblewrap would fail with a message naming host paths."""
    directories = (spec.workspace, spec.workdir, spec.home, spec.tmp)
    if not all(_is_dir(d) for d in directories) or not all(
        os.path.exists(p) for p in (*spec.write_paths, *spec.read_paths)
    ):
        raise CommandStartError(
            "A directory or declared path the command needs does not exist any more; "
            "prepare the call again."
        )


async def _read_to_end(fd: int) -> bytes:
    os.set_blocking(fd, False)
    data = bytearray()
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            await anyio.wait_readable(fd)
            continue
        if not chunk:
            return bytes(data)
        data += chunk


class BwrapCommand(LaunchedCommand):
    """A command in a bubblewrap sandbox; its tree is the sandbox's PID namespace."""

    def __init__(
        self,
        child: Child,
        output: PipeReceiveStream,
        stdin: PipeSendStream | None,
        lifeline: int | None = None,
        limits: tuple[CommandLimiter, Placement] | None = None,
    ) -> None:
        super().__init__(child, output, stdin, limits)
        self._init_pid: int | None = None
        self._init_fd: int | None = None
        # The write end of the sandbox's lifeline pipe, held until the command is over.
        self._lifeline = lifeline
        # The proxy serving the command's listener, until the command is over; then its report.
        self._egress: tuple[EgressProxy, EgressHandle] | None = None
        self._egress_report: EgressReport | None = None

    @property
    def network_refused(self) -> tuple[tuple[str, str], ...]:
        if self._egress_report is not None:
            return self._egress_report.refused
        if self._egress is not None:
            return self._egress[1].refused_so_far()
        return ()

    @property
    def egress_report(self) -> EgressReport | None:
        """What the command did on the network, once it is over (None without a proxy)."""
        return self._egress_report

    async def terminate_tree(self, grace: float) -> None:
        try:
            await super().terminate_tree(grace)
        finally:
            await self._close_egress()

    async def _close_egress(self) -> None:
        """Stop serving the command's listener and end its connections: the tree is gone."""
        if self._egress is None:
            return
        proxy, handle = self._egress
        self._egress = None
        with anyio.CancelScope(shield=True):
            try:
                self._egress_report = await proxy.close(handle)
            except Exception:
                log.exception("the egress proxy could not close a command's listener")

    def _attach(self, info: bytes) -> None:
        """Remember the sandbox's init from bubblewrap's `--info-fd` report."""
        if self._child.returncode is not None:
            return  # already over, and the init with it
        try:
            pid = int(json.loads(info)["child-pid"])
        except (ValueError, KeyError, TypeError):
            return  # the sandbox never came up: the outer process is the whole tree
        # The init is the child of the outer bubblewrap, which is our unreaped child.
        self._init_fd = proctree.open_verified_child(pid, self._child.pid)
        if self._init_fd is not None:
            self._init_pid = pid

    def signal_tree(self, signum: int) -> None:
        if self._child.returncode is not None:
            return
        if self._init_fd is None or self._init_pid is None:
            # No sandbox init (yet): bubblewrap dying takes everything with it
            # (--die-with-parent), so the outer process stands for the tree.
            self._child.send_signal(signum)
        elif signum == signal.SIGKILL:
            # The kernel kills every process of a PID namespace whose init dies.
            proctree.pidfd_signal(self._init_fd, signal.SIGKILL)
        else:
            proctree.signal_descendants(self._init_pid, self._init_fd, signum)

    async def _terminate_tree(self, grace: float) -> None:
        if self._child.returncode is not None:
            self._exited()  # over (maybe nobody waited): release what signalling needed
            return
        # The kernel ends the rest of a PID namespace asynchronously once its init is gone, so
        # "gone" is confirmed per process: pidfds of the tree taken before signalling.
        members = (
            proctree.descendant_pidfds(self._init_pid, self._init_fd)
            if self._init_fd is not None and self._init_pid is not None
            else []
        )
        try:
            if grace > 0:
                self.signal_tree(signal.SIGTERM)
                if await self._wait_bounded(grace):
                    await _until_exited(members, KILL_CONFIRM_SECONDS)
                    return
            self.signal_tree(signal.SIGKILL)
            if not await self._wait_bounded(KILL_CONFIRM_SECONDS):
                log.error("a sandboxed command did not end after SIGKILL")
            await _until_exited(members, KILL_CONFIRM_SECONDS)
        finally:
            for fd in members:
                proctree.close_fd(fd)

    async def aclose(self) -> None:
        if self._child.returncode is not None:
            self._exited()
        await self._close_egress()
        await super().aclose()

    def _exited(self) -> None:
        proctree.close_fd(self._init_fd)
        self._init_fd = None
        proctree.close_fd(self._lifeline)
        self._lifeline = None


async def _until_exited(pidfds: list[int], limit: float) -> None:
    """Wait (bounded) until every process behind `pidfds` has terminated."""
    with anyio.move_on_after(limit) as scope:
        for fd in pidfds:
            if not proctree.has_exited(fd):
                await anyio.wait_readable(fd)
    if scope.cancelled_caught:
        log.error("a sandboxed process outlived its namespace's init")


def _guards(
    guard: str, limited: bool, passed: list[int], env: dict[str, str]
) -> tuple[Lifeline | None, StartGate | None]:
    """The command's lifeline (guard "lifeline": see LIFELINE_SCRIPT) and, when `limited`, its
    start gate (the init waits until its limits and its proxy are in place: see
    START_GATE_SCRIPT); their fds are added to `passed`, their variables to `env`."""
    lifeline = Lifeline.open() if guard == "lifeline" else None
    if lifeline is not None:
        passed += lifeline.passed
        env.update(lifeline.env)
    try:
        gate = StartGate.open(check=lifeline is None) if limited else None
    except BaseException:
        proctree.close_fd(lifeline.write if lifeline is not None else None)
        raise
    if gate is not None:
        passed += gate.passed
        env.update(gate.env)
    return lifeline, gate


def _log_connection(record: ConnectionRecord) -> None:
    log.info(
        "network connection",
        extra={"detail": f"{record.host}:{record.port} {record.refusal or 'allowed'}"},
    )


def _bound(limiter: CommandLimiter, init: int, placement: Placement, gate: StartGate) -> None:
    """Bound the held init, let it start the command, and make the next command's cgroups
    while it runs: one trip to a worker thread. Raises OSError, with the gate still shut."""
    limiter.apply(init, placement)
    gate.open_gate()
    limiter.prepare_next()


class BwrapRunner:
    """Starts commands under bubblewrap (see the module docstring)."""

    def __init__(
        self,
        bwrap: str,
        lifeline: bool | None = None,
        seccomp: SeccompProgram | None = None,
        limiter: CommandLimiter | None = None,
        egress: EgressProxy | None = None,
        record: Callable[[ConnectionRecord], None] | None = None,
    ) -> None:
        self.bwrap = bwrap
        # The server's egress proxy (net/egress.py), the only way out for a command approved
        # for network, and where its connection records go (the journal).
        self.egress = egress
        self.record: Callable[[ConnectionRecord], None] = record or _log_connection
        self.listeners = netns.Listeners()
        # Per-command pids, memory, CPU time and file size limits (limits.py); None: none.
        self.limiter = limiter
        # The commands' seccomp filter (seccomp.py), built once per server; None: no filter
        # (libseccomp missing, reported as a sandbox warning).
        self.seccomp = seccomp
        # Not needed when this server is PID 1 of its PID namespace (the sidecar image's
        # entrypoint): when it dies the kernel kills every process of that namespace and of
        # the sandboxes' namespaces inside it, with no race. Elsewhere it costs ~0.5 ms/spawn.
        self.lifeline = os.getpid() != 1 if lifeline is None else lifeline

    @property
    def mode(self) -> SandboxMode:
        return SandboxMode.BWRAP

    def argv(
        self,
        spec: CommandSpec,
        *,
        info_fd: int | None = None,
        anchors: Mapping[str, int] | None = None,
        seccomp_fd: int | None = None,
        block_fd: int | None = None,
    ) -> list[str]:
        return bwrap_argv(
            self.bwrap,
            spec,
            info_fd=info_fd,
            anchors=anchors,
            seccomp_fd=seccomp_fd,
            block_fd=block_fd,
        )

    def guard(self) -> str:
        """What ends this server's commands if it dies: "none" (not needed: the server is PID 1
        of its namespace), "watchdog" (limits.py: with cgroups, no process per command), or
        "lifeline" (LIFELINE_SCRIPT: a watcher per command)."""
        if not self.lifeline:
            return "none"
        if self.limiter is not None and self.limiter.guarded():
            return "watchdog"
        return "lifeline"

    async def _bring_up(
        self,
        command: BwrapCommand,
        info_read: int,
        gate: StartGate | None,
        placement: Placement | None,
        egress: EgressCall | None,
    ) -> None:
        """Take bubblewrap's report of its init; with a gate, give the held init its proxy
        listener and its limits, then let it start the command."""
        with anyio.fail_after(INFO_TIMEOUT_SECONDS):
            info = await _read_to_end(info_read)
        command._attach(info)
        init = command._init_pid
        if gate is None or init is None:
            return  # no init: bubblewrap failed before it, and reports why
        if egress is not None:
            await self._open_egress(command, egress)
        if placement is None or self.limiter is None:
            gate.open_gate()
            return
        try:
            # In a worker thread: joining cgroups may wait for the kernel (limits.py).
            await anyio.to_thread.run_sync(_bound, self.limiter, init, placement, gate)
        except OSError as exc:
            log.error("could not bound a command", extra={"detail": str(exc)})
            raise CommandStartError("The command's resource limits could not be set.") from None

    async def _open_egress(self, command: BwrapCommand, egress: EgressCall) -> None:
        """Make the proxy's listener in the held sandbox's namespace and have the proxy serve
        it for this call."""
        assert self.egress is not None
        assert command._init_pid is not None
        assert command._init_fd is not None
        try:
            listener = await anyio.to_thread.run_sync(
                self.listeners.listen_in, command._init_pid, command._init_fd
            )
        except netns.ListenerError as exc:
            log.error("could not give a command its proxy", extra={"detail": str(exc)})
            raise CommandStartError("The command's network could not be set up.") from None
        with anyio.CancelScope(shield=True):
            handle = await self.egress.open(listener, egress, self.record)
            command._egress = (self.egress, handle)

    def _egress_of(self, spec: CommandSpec, env: dict[str, str]) -> EgressCall | None:
        """The call a command's proxy serves (None: no network at all), its variables added to
        `env`."""
        egress = spec.egress if not (spec.read_only or spec.dry_run is not None) else None
        if egress is None:
            return None
        if self.egress is None:
            raise CommandStartError(
                "This server has no egress proxy, so no command can be given network."
            )
        env.update(netns.proxy_env())
        return egress

    async def start(self, spec: CommandSpec) -> BwrapCommand:
        _check_sources(spec)
        env = dict(spec.env)
        egress = self._egress_of(spec, env)
        passed: list[int] = []  # ours to close once the child has them (or on failure)
        info_read: int | None = None
        lifeline: Lifeline | None = None
        gate: StartGate | None = None
        guard = self.guard()
        placement = await placed(self.limiter) if self.limiter is not None else None
        try:
            info_read, info_write = os.pipe2(os.O_CLOEXEC)
            passed.append(info_write)
            anchors = open_anchors(spec)
            passed += anchors.values()
            seccomp_fd = None
            if self.seccomp is not None:
                # bubblewrap reads the program to its end: a fresh fd per spawn.
                seccomp_fd = self.seccomp.open_fd()
                passed.append(seccomp_fd)
            # The init waits at a start gate for its limits, and for its proxy's listener.
            gated = placement is not None or egress is not None
            lifeline, gate = _guards(guard, gated, passed, env)
            argv = self.argv(
                spec,
                info_fd=info_write,
                anchors=anchors,
                seccomp_fd=seccomp_fd,
                block_fd=gate.block if gate is not None else None,
            )
            argv, kept = _launch(spec, argv)
            child, output, stdin = await spawn(
                argv,
                env=env,
                cwd="/",
                stdin=spec.stdin,
                pass_fds=[*passed, *kept],
            )
        except BaseException:
            proctree.close_fd(info_read)
            proctree.close_fd(lifeline.write if lifeline is not None else None)
            proctree.close_fd(gate.write if gate is not None else None)
            if placement is not None:
                placement.release()
            raise
        finally:
            for fd in passed:
                os.close(fd)
        assert info_read is not None
        try:
            command = BwrapCommand(
                child,
                output,
                stdin,
                lifeline.write if lifeline is not None else None,
                (self.limiter, placement)
                if self.limiter is not None and placement is not None
                else None,
            )
            try:
                await self._bring_up(command, info_read, gate, placement, egress)
            except BaseException as exc:
                # Cancelled, stuck or unbounded while bubblewrap was starting: leave nothing.
                with anyio.CancelScope(shield=True):
                    await command.terminate_tree(0)
                    await command.aclose()
                if isinstance(exc, TimeoutError):
                    raise CommandStartError("The sandbox did not start in time.") from None
                raise
        finally:
            os.close(info_read)
            # Without "go" (bubblewrap failed before its init was known, or the start failed)
            # the command's bash exits before the command runs.
            proctree.close_fd(gate.write if gate is not None else None)
        return command
