"""The unconfined runner (`sandbox = none`, or `auto` without a working bubblewrap): `bash -c`
in its own session and process group, a clean environment, nothing else.

This is weaker than bubblewrap on purpose and says so at start and in every Session:
- the command sees and may change everything the server's user may (the state directory and
  its token files included), and the network is open;
- its tree is its process group. A process that leaves the group (`setsid`, a daemon's double
  fork with setsid(2)) escapes it: it is neither signalled nor waited for. Bash refuses the
  `setsid` command word in unconfined mode, but any program may call setsid(2) itself.
- a process group is named by a number: it is signalled with killpg only while its leader
  (our child) is unreaped, which keeps the number from being reused; after that, each member
  is found in /proc, checked to be in the group, and signalled through a pidfd. (Once every
  member is gone the number could in principle be reused before the next look; the group is
  then marked gone and never looked for again.)
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal

import anyio

from callgate.server.core.models import SandboxMode

from . import proctree
from .launch import KILL_CONFIRM_SECONDS, Child, LaunchedCommand, spawn
from .limits import CommandLimiter, Placement, placed
from .pipes import PipeReceiveStream, PipeSendStream
from .runner import CommandSpec

log = logging.getLogger(__name__)

BASH = "/bin/bash"
# How often the group is looked at while waiting for its last members to go.
_GROUP_POLL_SECONDS = 0.01


class UnconfinedCommand(LaunchedCommand):
    """A command whose tree is its process group (see the module docstring)."""

    def __init__(
        self,
        child: Child,
        output: PipeReceiveStream,
        stdin: PipeSendStream | None,
        limits: tuple[CommandLimiter, Placement] | None = None,
    ) -> None:
        super().__init__(child, output, stdin, limits)
        # start_new_session: the child leads a new session and process group.
        self._pgid = child.pid
        self._group_gone = False

    def signal_tree(self, signum: int) -> None:
        if self._group_gone:
            return
        if self._child.returncode is None:
            # The leader is unreaped, so the group's number is still ours.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._pgid, signum)
            return
        if proctree.signal_group_members(self._pgid, signum) == 0:
            self._group_gone = True

    def _tree_alive(self) -> bool:
        if self._group_gone:
            return False
        if self._child.returncode is None:
            return True
        if proctree.live_group_members(self._pgid):
            return True
        self._group_gone = True
        return False

    async def _until_gone(self, seconds: float, *, resignal: int = 0) -> bool:
        """Wait up to `seconds` for the leader to exit and the group to empty; with
        `resignal`, send that signal again on every look (members forked meanwhile)."""
        with anyio.move_on_after(seconds):
            while self._tree_alive():
                if resignal:
                    self.signal_tree(resignal)
                if self._child.returncode is None:
                    with anyio.move_on_after(_GROUP_POLL_SECONDS):
                        await self.wait()
                else:
                    await anyio.sleep(_GROUP_POLL_SECONDS)
        return not self._tree_alive()

    async def _terminate_tree(self, grace: float) -> None:
        if not self._tree_alive():
            return
        if grace > 0:
            self.signal_tree(signal.SIGTERM)
            if await self._until_gone(grace):
                return
        if not await self._until_gone(KILL_CONFIRM_SECONDS, resignal=signal.SIGKILL):
            log.error("a command's process group did not end after SIGKILL")


class UnconfinedRunner:
    """Starts commands without confinement (see the module docstring)."""

    def __init__(self, limiter: CommandLimiter | None = None) -> None:
        self.limiter = limiter

    @property
    def mode(self) -> SandboxMode:
        return SandboxMode.NONE

    async def start(self, spec: CommandSpec) -> UnconfinedCommand:
        argv = [BASH, "-c", spec.command]
        limits = None
        if self.limiter is not None:
            placement = await placed(self.limiter)
            argv = self.limiter.wrap(argv, placement)
            limits = (self.limiter, placement)
        try:
            child, output, stdin = await spawn(
                argv, env=spec.env, cwd=spec.workdir, stdin=spec.stdin
            )
        except BaseException:
            if limits is not None:
                limits[1].release()
            raise
        return UnconfinedCommand(child, output, stdin, limits)
