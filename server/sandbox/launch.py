"""What both runners share: starting the process with its pipes, reaping it, and the parts of a
running command that do not depend on the confinement (output, stdin, exit status).

A child is reaped through a pidfd watched by the event loop, not by asyncio's child watcher:
no thread per command (the watcher's thread and its hand-off cost a measurable part of a
short command), and no window in which the child is reaped but not yet known to be, so while
`returncode` is None the child's PID (and process group) cannot have gone to another process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from .limits import CommandLimiter, Placement, exit_limit
from .pipes import PipeReceiveStream, PipeSendStream, output_pipe
from .runner import CommandStartError

log = logging.getLogger(__name__)

# After SIGKILL a process ends as soon as the kernel gets to it; only a task stuck in an
# uninterruptible sleep (a hung network filesystem) takes longer. Past this, give up waiting.
KILL_CONFIRM_SECONDS = 30.0


def exit_status(returncode: int) -> int:
    """A shell-style exit status: death by signal N is reported as -N; a shell says 128+N."""
    return 128 - returncode if returncode < 0 else returncode


class Child:
    """A started child process, reaped by the event loop when its pidfd becomes readable."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.pid = popen.pid
        self._popen = popen
        # Nothing else reaps our children, so the PID is still this child's here.
        self._pidfd: int | None = os.pidfd_open(popen.pid)
        self.returncode: int | None = None
        self._exited = anyio.Event()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._pidfd, self._reap)

    def _reap(self) -> None:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere after all: the status is lost
            pid, status = self.pid, 255 << 8
        if pid == 0:
            return
        self.returncode = os.waitstatus_to_exitcode(status)
        # Popen must not try to reap it again (and warn) when it is collected.
        self._popen.returncode = self.returncode
        self._release()
        self._exited.set()

    def _release(self) -> None:
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    def send_signal(self, signum: int) -> None:
        """Signal the child itself; nothing happens once it has exited."""
        if self._pidfd is not None and self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signum)

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode


async def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None,
    stdin: bool,
    pass_fds: Sequence[int] = (),
) -> tuple[Child, PipeReceiveStream, PipeSendStream | None]:
    """Start `argv` in a new session with stdout and stderr on one fresh pipe and stdin from
    /dev/null (or a pipe with `stdin`); returns the child, the output's read end and stdin's
    write end. Raises CommandStartError when it cannot start."""
    await anyio.lowlevel.checkpoint()
    read_fd, write_fd = output_pipe()
    stdin_read, stdin_write = os.pipe2(os.O_CLOEXEC) if stdin else (None, None)
    try:
        # Inline, as asyncio's own subprocess transport does: Popen returns once the child
        # has exec'd (vfork), well under a millisecond.
        popen = subprocess.Popen(  # noqa: ASYNC220  # see above
            list(argv),
            stdin=subprocess.DEVNULL if stdin_read is None else stdin_read,
            stdout=write_fd,
            stderr=write_fd,
            cwd=cwd,
            env=dict(env),
            # Its own session and process group: a terminal's ^C for the server never
            # reaches it directly, and the unconfined runner signals the group.
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
    except OSError as exc:
        os.close(read_fd)
        if stdin_write is not None:
            os.close(stdin_write)
        log.error("could not start a command", extra={"detail": f"{argv[0]}: {exc.strerror}"})
        raise CommandStartError(f"The command could not be started ({exc.strerror}).") from None
    finally:
        os.close(write_fd)
        if stdin_read is not None:
            os.close(stdin_read)
    stdin_stream = None if stdin_write is None else PipeSendStream(stdin_write)
    return Child(popen), PipeReceiveStream(read_fd), stdin_stream


class LaunchedCommand:
    """A started process: combined output, optional stdin, exit status. Subclasses decide
    what its process tree is and how it is signalled."""

    def __init__(
        self,
        child: Child,
        output: PipeReceiveStream,
        stdin: PipeSendStream | None,
        limits: tuple[CommandLimiter, Placement] | None = None,
    ) -> None:
        self._child = child
        self._output = output
        self._stdin = stdin
        # The command's cgroups and the limiter that made them (sandbox/limits.py).
        self._limits = limits

    @property
    def limit_hit(self) -> str | None:
        """The limit the command ran into (`pids_limit`, `memory_limit`, `cpu_limit`,
        `file_size_limit`), once its tree is gone; None otherwise."""
        placement = self._limits[1] if self._limits is not None else None
        if placement is not None and placement.hit is not None:
            return placement.hit
        return exit_limit(self._child.returncode)

    @property
    def network_refused(self) -> tuple[tuple[str, str], ...]:
        """What the command's proxy refused (none here: see BwrapCommand)."""
        return ()

    async def terminate_tree(self, grace: float) -> None:
        """SIGTERM the tree, wait up to `grace` seconds, then SIGKILL; returns once every
        process of the tree is confirmed gone, and its cgroups with it."""
        try:
            await self._terminate_tree(grace)
        finally:
            if self._limits is not None:
                await self._release_limits(*self._limits)

    async def _release_limits(self, limiter: CommandLimiter, placement: Placement) -> None:
        """Read what limit the command hit, and leave its cgroups to the limiter's sweep (while
        the next command runs, and at shutdown): the kernel empties a PID namespace
        asynchronously, so a removal now may fail for a moment, and waiting here would cost
        every command ~20 ms."""
        placement.settle()
        limiter.leftover(placement)

    async def _terminate_tree(self, grace: float) -> None:
        raise NotImplementedError

    @property
    def output(self) -> ByteReceiveStream:
        return self._output

    @property
    def stdin(self) -> ByteSendStream | None:
        return self._stdin

    @property
    def returncode(self) -> int | None:
        code = self._child.returncode
        return None if code is None else exit_status(code)

    async def wait(self) -> int:
        """Wait for the command's own process to exit (128+N for death by signal N)."""
        code = exit_status(await self._child.wait())
        self._exited()
        return code

    def _exited(self) -> None:
        """Called once the process has exited: release what was held for signalling."""

    async def _wait_bounded(self, seconds: float) -> bool:
        """Wait up to `seconds` for the process to exit; True when it did."""
        with anyio.move_on_after(seconds):
            await self.wait()
        return self._child.returncode is not None

    async def aclose(self) -> None:
        """Close stdin and the output pipe (the process itself is left as it is)."""
        if self._stdin is not None:
            await self._stdin.aclose()
        await self._output.aclose()
