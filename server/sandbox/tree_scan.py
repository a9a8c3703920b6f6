"""What of a directory tree a confined process may not read or may not change, found by one
complete walk: secrets (protected paths) to mask, files that make programs run code to make
read-only, and every other name of a protected file (hard links).

The walk has no depth or entry limit and skips nothing (`.git`, `node_modules` and virtualenvs
included): a secret is either found or the walk says it ran out of time (`ScanOverBudget`), and
the caller then refuses the command rather than run it half-masked.

Why hard links: a second name of `.env` (`notes.txt`) is the same file under a name no glob
matches. Every regular file's inode number comes free with the directory listing (`d_ino`), so
the walk keeps them and, at the end, masks each name whose inode is a protected file's. For the
protected files themselves `lstat` adds `st_ino` too (the two agree on every local filesystem;
on overlayfs they may not, and comparing against both masks more, never less).

Race-safety: directories are opened one component at a time with `O_NOFOLLOW` from the root's
fd (`fsaccess.open_step`), so a directory swapped for a symlink during the walk is not entered;
a symlink found in the tree is resolved (`realpath`) only to mask its target when that target is
protected. Sandboxes are built from the result, so what changes after the walk is seen in the
sandbox as it is then: a new name can only come from a process that can read the file, and
protected files are masked in every sandbox.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from dataclasses import dataclass, field

from ..core.paths import ProtectedPaths

DEFAULT_SCAN_SECONDS = 5.0
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ScanOverBudget(Exception):
    """The tree could not be walked completely within the time budget."""


@dataclass(slots=True)
class TreeExposure:
    """The result of one walk. Paths are canonical absolute host paths.

    `masked`: protected files and directories, other names (hard links) of protected files,
    and protected targets of symlinks in the tree. `readonly`: files and directories that run
    code (`ProtectedPaths.is_readonly`), outside masked directories. `protected_inodes`: the
    inode numbers of every protected file (for checks after an open: `is_protected_inode`).
    """

    masked: list[str] = field(default_factory=list)
    readonly: list[str] = field(default_factory=list)
    protected_inodes: set[int] = field(default_factory=set)
    entries: int = 0

    def is_protected_inode(self, info: os.stat_result) -> bool:
        return info.st_ino in self.protected_inodes


def scan_tree(
    root: str, protected: ProtectedPaths, *, seconds: float = DEFAULT_SCAN_SECONDS
) -> TreeExposure:
    """Walk canonical directory `root` completely. Raises ScanOverBudget past `seconds`."""
    found = TreeExposure()
    deadline = time.monotonic() + seconds
    if protected.is_protected(root):
        found.masked.append(root)
    try:
        top = os.open(root, _DIRECTORY_FLAGS)
    except OSError:
        return found
    # (fd, path, inside a protected directory)
    stack: list[tuple[int, str, bool]] = [(top, root.rstrip("/") or "/", found.masked == [root])]
    # Regular files outside protected places: (d_ino, path), matched against protected inodes.
    files: list[tuple[int, str]] = []
    count = 0
    try:
        while stack:
            fd, directory, hidden = stack.pop()
            try:
                count = _scan_directory(
                    fd, directory, hidden, protected, found, stack, files, count
                )
                if time.monotonic() > deadline:
                    raise ScanOverBudget
            finally:
                os.close(fd)
    except BaseException:
        for fd, _, _ in stack:
            os.close(fd)
        raise
    found.entries = count
    if found.protected_inodes:
        found.masked += [path for inode, path in files if inode in found.protected_inodes]
    return found


def _scan_directory(
    fd: int,
    directory: str,
    hidden: bool,
    protected: ProtectedPaths,
    found: TreeExposure,
    stack: list[tuple[int, str, bool]],
    files: list[tuple[int, str]],
    count: int,
) -> int:
    """List one open directory into `found`, `files` and `stack`; returns the entry count."""
    try:
        with os.scandir(fd) as listing:
            entries = list(listing)
    except OSError:
        return count
    prefix = directory if directory != "/" else ""
    for entry in entries:
        count += 1
        path = f"{prefix}/{entry.name}"
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            is_link = not is_dir and entry.is_symlink()
            inode = entry.inode()
        except OSError:
            continue
        secret = hidden or protected.is_protected(path)
        if secret and not hidden:
            found.masked.append(path)
        if is_link:
            _symlink_target(path, protected, found)
        elif is_dir:
            if not secret and protected.is_readonly(path):
                found.readonly.append(path)
            try:
                child = os.open(entry.name, _DIRECTORY_FLAGS, dir_fd=fd)
            except OSError:
                continue
            stack.append((child, path, secret))
        elif secret:
            found.protected_inodes.add(inode)
            with contextlib.suppress(OSError):
                found.protected_inodes.add(
                    os.stat(entry.name, dir_fd=fd, follow_symlinks=False).st_ino
                )
        else:
            files.append((inode, path))
            if protected.is_readonly(path):
                found.readonly.append(path)
    return count


def _symlink_target(path: str, protected: ProtectedPaths, found: TreeExposure) -> None:
    """A symlink whose target is protected: mask the target (it may lie outside the tree)."""
    target = os.path.realpath(path)
    if target != path and protected.is_protected(target) and os.path.lexists(target):
        try:
            if stat.S_ISLNK(os.lstat(target).st_mode):
                return  # a dangling chain: nothing to read behind it
        except OSError:
            return
        found.masked.append(target)


class LinkGuard:
    """Answers whether an open regular file is another name (a hard link) of a protected file.
    A file with one name is answered at once (its name was checked already); the first file
    with several names costs one walk of the workspace, kept for the rest of the tool call.
    A walk over its budget answers True: such a file is not read (fail closed)."""

    def __init__(
        self,
        root: str,
        protected: ProtectedPaths,
        seconds: float = DEFAULT_SCAN_SECONDS,
        exposure: TreeExposure | None = None,
    ) -> None:
        self._root = root
        self._protected = protected
        self._seconds = seconds
        self._exposure = exposure
        self._over_budget = False

    def needs_walk(self, info: os.stat_result) -> bool:
        """True when answering for `info` will walk the tree (call it off the event loop)."""
        return info.st_nlink > 1 and self._exposure is None and not self._over_budget

    def is_protected(self, info: os.stat_result) -> bool:
        if info.st_nlink <= 1:
            return False
        if self._exposure is None and not self._over_budget:
            try:
                self._exposure = scan_tree(self._root, self._protected, seconds=self._seconds)
            except ScanOverBudget:
                self._over_budget = True
        return self._over_budget or (
            self._exposure is not None and self._exposure.is_protected_inode(info)
        )
