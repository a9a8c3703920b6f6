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

import array
import contextlib
import os
import stat
import threading
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
    # `.git` directories without a `hooks` directory (`git init` makes one; see missing_hooks).
    missing_hooks: list[str] = field(default_factory=list)
    # FIFOs, sockets and device nodes: channels to processes outside a sandbox (a dry run
    # masks them: it may not write to or wait on anything outside its overlay).
    specials: list[str] = field(default_factory=list)
    entries: int = 0
    # Directories read by this walk (the others were unchanged since the scanner's last walk).
    listed: int = 0

    def is_protected_inode(self, info: os.stat_result) -> bool:
        return info.st_ino in self.protected_inodes


# A directory whose ctime is this close to the moment it was listed may change again within the
# same timestamp tick without its ctime moving: it is listed again on the next walk.
_RACY_NS = 2_000_000_000
# How many walked trees (workspace, declared trees) a scanner remembers.
_MAX_ROOTS = 8


@dataclass(slots=True)
class _Listing:
    """What one directory contributes, valid while the directory's identity and its mtime and
    ctime are unchanged (any entry added, removed or renamed changes both; ctime cannot be set
    by a process)."""

    key: tuple[int, int, int, int]
    racy: bool
    entries: int = 0
    masked: list[str] = field(default_factory=list)
    readonly: list[str] = field(default_factory=list)
    protected_inodes: list[int] = field(default_factory=list)
    # Inode numbers of the ordinary files (8 bytes each: a large tree is remembered cheaply);
    # their names are read again only for a directory holding another name of a secret.
    file_inodes: array.array[int] = field(default_factory=lambda: array.array("Q"))
    links: list[str] = field(default_factory=list)
    subdirs: list[tuple[str, bool]] = field(default_factory=list)
    # `.git/hooks` where a `.git` directory has none: a command could create hooks there.
    missing_hooks: list[str] = field(default_factory=list)
    specials: list[str] = field(default_factory=list)


class TreeScanner:
    """Walks trees completely, remembering each directory's listing until the directory changes:
    the first walk of a tree reads every directory, later walks stat each directory once and
    list only the changed ones (and re-resolve every symlink). One per session; thread-safe."""

    def __init__(self, protected: ProtectedPaths) -> None:
        self._protected = protected
        self._roots: dict[str, dict[tuple[str, bool], _Listing]] = {}
        self._lock = threading.Lock()

    def scan(self, root: str, *, seconds: float = DEFAULT_SCAN_SECONDS) -> TreeExposure:
        """Walk canonical directory `root`. Raises ScanOverBudget past `seconds`."""
        with self._lock:
            old = self._roots.pop(root, {})
            fresh: dict[tuple[str, bool], _Listing] = {}
            found = self._walk(root, seconds, old, fresh)
            self._roots[root] = fresh
            while len(self._roots) > _MAX_ROOTS:
                del self._roots[next(iter(self._roots))]
            return found

    def _walk(
        self,
        root: str,
        seconds: float,
        old: dict[tuple[str, bool], _Listing],
        fresh: dict[tuple[str, bool], _Listing],
    ) -> TreeExposure:
        protected = self._protected
        found = TreeExposure()
        deadline = time.monotonic() + seconds
        root = root.rstrip("/") or "/"
        hidden_root = protected.is_protected(root)
        if hidden_root:
            found.masked.append(root)
        stack = [(root, hidden_root)]
        links: list[str] = []
        while stack:
            path, hidden = stack.pop()
            listing = self._current(path, hidden, old.get((path, hidden)), found)
            if time.monotonic() > deadline:
                raise ScanOverBudget
            if listing is None:
                continue
            fresh[(path, hidden)] = listing
            found.entries += listing.entries
            found.masked += listing.masked
            found.readonly += listing.readonly
            found.missing_hooks += listing.missing_hooks
            found.specials += listing.specials
            found.protected_inodes.update(listing.protected_inodes)
            links += listing.links
            stack += listing.subdirs
        for link in links:
            _symlink_target(link, protected, found)
        if found.protected_inodes:
            inodes = found.protected_inodes
            for (path, _), listing in fresh.items():
                if any(inode in inodes for inode in listing.file_inodes):
                    found.masked += _names_with_inodes(path, inodes)
        return found

    def _current(
        self, path: str, hidden: bool, cached: _Listing | None, found: TreeExposure
    ) -> _Listing | None:
        """The listing of directory `path`: the cached one while it is still valid. None when
        it is gone or no longer a directory; a directory that cannot be read is masked whole
        (fail closed: a command could otherwise `chmod` it back and read what it holds)."""
        try:
            info = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            return _unreadable(path, hidden)
        if not stat.S_ISDIR(info.st_mode):
            return None
        key = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
        if cached is not None and cached.key == key and not cached.racy:
            return cached
        found.listed += 1
        return _list_directory(path, hidden, key, self._protected)


def _list_directory(
    path: str, hidden: bool, key: tuple[int, int, int, int], protected: ProtectedPaths
) -> _Listing | None:
    listed_ns = time.time_ns()
    try:
        fd = os.open(path, _DIRECTORY_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return _unreadable(path, hidden)
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != key[:2]:
            return _unreadable(path, hidden)  # swapped since the stat: covered, not trusted
        with os.scandir(fd) as listing:
            entries = list(listing)
        result = _Listing(key=key, racy=key[3] >= listed_ns - _RACY_NS, entries=len(entries))
        if (
            not hidden
            and os.path.basename(path).lower() == ".git"
            and not any(e.name.lower() == "hooks" for e in entries)
        ):
            result.missing_hooks.append(f"{path}/hooks")
        prefix = path if path != "/" else ""
        names = protected.children(path)
        for entry in entries:
            child = f"{prefix}/{entry.name}"
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_link = not is_dir and entry.is_symlink()
                inode = entry.inode()
            except OSError:
                if not hidden:
                    result.masked.append(child)  # cannot tell what it is: covered
                continue
            secret = hidden or names.is_protected(entry.name)
            if secret and not hidden:
                result.masked.append(child)
            if is_link:
                result.links.append(child)
            elif is_dir:
                if not secret and names.is_readonly(entry.name):
                    result.readonly.append(child)
                result.subdirs.append((child, secret))
            elif secret:
                result.protected_inodes.append(inode)
                with contextlib.suppress(OSError):
                    stat_ino = os.stat(entry.name, dir_fd=fd, follow_symlinks=False).st_ino
                    result.protected_inodes.append(stat_ino)
            else:
                result.file_inodes.append(inode)
                if not entry.is_file(follow_symlinks=False):
                    result.specials.append(child)
                # A `.git` file (`gitdir: …`) sends git to a config elsewhere: read-only too.
                if names.needs_human_to_write(entry.name):
                    result.readonly.append(child)
        return result
    except OSError:
        return _unreadable(path, hidden)
    finally:
        os.close(fd)


def _names_with_inodes(directory: str, inodes: set[int]) -> list[str]:
    """The ordinary files of `directory` whose inode is one of `inodes` (other names of
    secrets). A directory that cannot be read again is covered whole (fail closed)."""
    try:
        fd = os.open(directory, _DIRECTORY_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError:
        return [directory]
    try:
        with os.scandir(fd) as listing:
            prefix = directory if directory != "/" else ""
            return [
                f"{prefix}/{entry.name}"
                for entry in listing
                if entry.inode() in inodes and not entry.is_dir(follow_symlinks=False)
            ]
    except OSError:
        return [directory]
    finally:
        os.close(fd)


def _unreadable(path: str, hidden: bool) -> _Listing:
    """A directory the walk could not read: masked whole (inside a protected directory it is
    covered already), and listed again on the next walk."""
    return _Listing(key=(0, 0, 0, 0), racy=True, masked=[] if hidden else [path])


def scan_tree(
    root: str, protected: ProtectedPaths, *, seconds: float = DEFAULT_SCAN_SECONDS
) -> TreeExposure:
    """Walk canonical directory `root` completely, remembering nothing."""
    return TreeScanner(protected).scan(root, seconds=seconds)


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
        scanner: TreeScanner,
        root: str,
        seconds: float = DEFAULT_SCAN_SECONDS,
        exposure: TreeExposure | None = None,
    ) -> None:
        self._scanner = scanner
        self._root = root
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
                self._exposure = self._scanner.scan(self._root, seconds=self._seconds)
            except ScanOverBudget:
                self._over_budget = True
        return self._over_budget or (
            self._exposure is not None and self._exposure.is_protected_inode(info)
        )
