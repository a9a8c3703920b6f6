"""What both runners share: starting the process with its output pipe, and the parts of a
running command that do not depend on the confinement (output, stdin, exit code)."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from collections.abc import Mapping, Sequence

import anyio
import anyio.abc
from anyio.abc import ByteReceiveStream, ByteSendStream

from .pipes import PipeReceiveStream, output_pipe
from .runner import CommandStartError

log = logging.getLogger(__name__)

# After SIGKILL a process ends as soon as the kernel gets to it; only a task stuck in an
# uninterruptible sleep (a hung network filesystem) takes longer. Past this, give up waiting.
KILL_CONFIRM_SECONDS = 30.0


def exit_status(returncode: int) -> int:
    """A shell-style exit status: asyncio reports death by signal N as -N; a shell says 128+N."""
    return 128 - returncode if returncode < 0 else returncode


async def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None,
    stdin: bool,
    pass_fds: Sequence[int] = (),
) -> tuple[anyio.abc.Process, PipeReceiveStream]:
    """Start `argv` in a new session with stdout and stderr on one fresh pipe; returns the
    process and the pipe's read end. Raises CommandStartError when it cannot start."""
    read_fd, write_fd = output_pipe()
    try:
        process = await anyio.open_process(
            list(argv),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            cwd=cwd,
            env=dict(env),
            # Its own session and process group: a terminal's ^C for the server never
            # reaches it directly, and the unconfined runner signals the group.
            start_new_session=True,
            pass_fds=pass_fds,
        )
    except OSError as exc:
        os.close(read_fd)
        log.error("could not start a command", extra={"detail": f"{argv[0]}: {exc.strerror}"})
        raise CommandStartError(f"The command could not be started ({exc.strerror}).") from None
    finally:
        os.close(write_fd)
    return process, PipeReceiveStream(read_fd)


class LaunchedCommand:
    """A started process: combined output, optional stdin, exit status. Subclasses decide
    what its process tree is and how it is signalled."""

    def __init__(self, process: anyio.abc.Process, output: PipeReceiveStream) -> None:
        self._process = process
        self._output = output

    @property
    def output(self) -> ByteReceiveStream:
        return self._output

    @property
    def stdin(self) -> ByteSendStream | None:
        return self._process.stdin

    @property
    def returncode(self) -> int | None:
        code = self._process.returncode
        return None if code is None else exit_status(code)

    async def wait(self) -> int:
        """Wait for the command's own process to exit (128+N for death by signal N)."""
        code = exit_status(await self._process.wait())
        self._exited()
        return code

    def _exited(self) -> None:
        """Called once the process has exited: release what was held for signalling."""

    async def _wait_bounded(self, seconds: float) -> bool:
        """Wait up to `seconds` for the process to exit; True when it did."""
        with anyio.move_on_after(seconds):
            await self.wait()
        return self._process.returncode is not None

    async def aclose(self) -> None:
        """Close stdin and the output pipe (the process itself is left as it is)."""
        if self._process.stdin is not None:
            with contextlib.suppress(Exception):
                await self._process.stdin.aclose()
        await self._output.aclose()
