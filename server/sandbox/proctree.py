"""Process trees seen through /proc, signalled through pidfds so that a reused PID is never hit.

A PID names a process only while that process exists: once it is reaped the number may go to
another process. So a process that is not our own unreaped child is never signalled by number.
It is opened as a pidfd (which names one process for good), then checked through /proc to be
where we expect it (the child of a parent we already trust, or a member of our process group),
and signalled through the pidfd. The check is read while the pidfd's process may have died
and its number been reused; signalling through the pidfd then fails (ESRCH) instead of
reaching the newcomer, so a successful signal proves the check was about the right process.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections import deque
from dataclasses import dataclass

# A hard stop for walking a tree (a fork bomb should not keep a signal loop busy forever).
MAX_TREE_PROCESSES = 100_000


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of `/proc/<pid>/stat` that the tree walks use."""

    state: str
    ppid: int
    pgrp: int

    @property
    def is_zombie(self) -> bool:
        # Z: exited, waiting to be reaped; X: dead. Neither runs code or holds a pipe.
        return self.state in ("Z", "X")


def read_stat(pid: int) -> ProcStat | None:
    """The state, parent and process group of `pid`; None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    # `pid (comm) state ppid pgrp ...`: comm may hold spaces and parentheses.
    fields = raw[raw.rfind(b")") + 2 :].split()
    if len(fields) < 3:
        return None
    return ProcStat(fields[0].decode("ascii", "replace"), int(fields[1]), int(fields[2]))


def children_of(pid: int) -> list[int]:
    """The children of `pid` (every thread's), from `/proc/<pid>/task/*/children`."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as handle:
                found.extend(int(child) for child in handle.read().split())
        except OSError:
            continue
    return found


def in_nested_namespace(pid: int) -> bool:
    """Whether `pid` lives in a PID namespace below ours (NSpid lists more than one number)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            status = handle.read()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith(b"NSpid:"):
            return len(line.split()) > 2
    return False


def reap_orphaned_inits() -> int:
    """Reap this process's children that are zombies in a PID namespace below ours; return how
    many. Only a PID 1 (or subreaper) has such children: sandboxes' inits whose bubblewrap
    exited without waiting for them (see `App._reap_orphans`). Nothing this server waits for
    itself is taken: every process it starts is its child in its own namespace."""
    reaped = 0
    for pid in children_of(os.getpid()):
        stat = read_stat(pid)
        if stat is None or not stat.is_zombie or not in_nested_namespace(pid):
            continue
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                reaped += 1
    return reaped


def open_pidfd(pid: int) -> int | None:
    """A pidfd for `pid`, or None when no such process exists any more."""
    try:
        return os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        return None


def pidfd_signal(pidfd: int, signum: int) -> bool:
    """Send `signum` (0: only check) to the pidfd's process; False when it is gone."""
    try:
        signal.pidfd_send_signal(pidfd, signum)
    except (ProcessLookupError, OSError):
        return False
    return True


def close_fd(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def is_alive(pidfd: int) -> bool:
    return pidfd_signal(pidfd, 0)


def open_verified_child(pid: int, parent: int) -> int | None:
    """A pidfd for `pid` if it is a child of `parent` (by PID; the caller vouches that the
    number `parent` still names the process it trusts). None otherwise."""
    pidfd = open_pidfd(pid)
    if pidfd is None:
        return None
    stat = read_stat(pid)
    if stat is None or stat.ppid != parent or not is_alive(pidfd):
        os.close(pidfd)
        return None
    return pidfd


def signal_descendants(root_pid: int, root_pidfd: int, signum: int) -> int:
    """Send `signum` to every descendant of the root (not the root itself); returns how many
    processes it reached. The whole tree is collected first and signalled after, so a parent
    that dies of the signal cannot hide its children from the walk. Processes forked
    meanwhile may be missed: a caller that must end the whole tree finishes with SIGKILL to
    the root of a PID namespace."""
    tree = descendant_pidfds(root_pid, root_pidfd)
    try:
        return sum(1 for fd in tree if pidfd_signal(fd, signum))
    finally:
        for fd in tree:
            close_fd(fd)


def has_exited(pidfd: int) -> bool:
    """True once the process has terminated (a pidfd polls readable then, zombie or not)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def descendant_pidfds(root_pid: int, root_pidfd: int) -> list[int]:
    """Pidfds of every descendant of the root (the caller closes them)."""
    tree: list[int] = []
    try:
        # (pid, pidfd) of processes already verified to belong to the tree.
        queue: deque[tuple[int, int]] = deque([(root_pid, root_pidfd)])
        while queue and len(tree) < MAX_TREE_PROCESSES:
            parent, parent_fd = queue.popleft()
            children = children_of(parent)
            # The list is the parent's only if the parent still lives after it was read.
            if not is_alive(parent_fd):
                continue
            for child in children:
                child_fd = open_pidfd(child)
                if child_fd is None:
                    continue
                stat = read_stat(child)
                # The parent still lives, so the number `parent` is still the parent's; and a
                # live pidfd means its process is the one whose stat was read.
                if stat is None or stat.ppid != parent or not is_alive(parent_fd):
                    os.close(child_fd)
                    continue
                tree.append(child_fd)
                queue.append((child, child_fd))
    except BaseException:
        for fd in tree:
            close_fd(fd)
        raise
    return tree


def live_group_members(pgid: int) -> list[int]:
    """The PIDs of processes in process group `pgid` that have not exited (zombies are not
    counted: they run nothing and hold no pipe)."""
    members: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = read_stat(int(name))
        if stat is not None and stat.pgrp == pgid and not stat.is_zombie:
            members.append(int(name))
    return members


def signal_group_members(pgid: int, signum: int) -> int:
    """Send `signum` to every live member of process group `pgid`, each through a pidfd
    after checking its group; returns how many it reached."""
    reached = 0
    for pid in live_group_members(pgid):
        pidfd = open_pidfd(pid)
        if pidfd is None:
            continue
        try:
            stat = read_stat(pid)
            if stat is not None and stat.pgrp == pgid and pidfd_signal(pidfd, signum):
                reached += 1
        finally:
            os.close(pidfd)
    return reached
