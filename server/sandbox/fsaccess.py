"""Symlink-safe file access beneath a workspace root, and atomic no-clobber writes.

Prepare resolves a path to its canonical form; between then and the effect, a directory or the
file itself may be swapped for a symbolic link. Everything here therefore opens a canonical
path one component at a time from the workspace root with `O_NOFOLLOW` and `dir_fd`, so a
symlink found on the way is an error (`PathChanged`), never a redirection.

Writes go to a temporary file in the target's directory which is fsynced and then renamed
over an existing file (keeping its mode and, where permitted, its owner) or hard-linked to a
new name, which fails if that name appeared meanwhile: a concurrent creator loses cleanly.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat

from ..core.paths import is_within

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK so that opening a FIFO to find out what it is never blocks.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
NEW_FILE_MODE = 0o644
NEW_DIRECTORY_MODE = 0o755
_CHUNK = 1 << 16


class PathChanged(Exception):
    """A component of a canonical path is now a symbolic link (or not the kind it was)."""


def components(root: str, canonical: str) -> list[str]:
    """The names leading from `root` to `canonical`; empty when they are the same."""
    if not is_within(canonical, root):
        raise ValueError("the path is not inside the root")
    if canonical == root:
        return []
    return canonical[len(root.rstrip("/")) + 1 :].split("/")


def open_step(dir_fd: int, name: str, flags: int, mode: int = 0) -> int:
    """Open one name below `dir_fd` without following a symlink there."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathChanged from None
        if exc.errno == errno.ENOTDIR and flags & os.O_DIRECTORY:
            # Linux reports a symlink opened with O_DIRECTORY|O_NOFOLLOW as ENOTDIR.
            with contextlib.suppress(OSError):
                if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                    raise PathChanged from None
        raise


def open_directory(root: str, canonical: str, *, create: bool = False) -> int:
    """Open directory `canonical` (at or below `root`) without following any symlink below
    `root`. With `create`, missing directories are made (mode 0755 less the umask)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in components(root, canonical):
            try:
                next_fd = open_step(fd, name, _DIRECTORY_FLAGS)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, NEW_DIRECTORY_MODE, dir_fd=fd)
                next_fd = open_step(fd, name, _DIRECTORY_FLAGS)
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_beneath(root: str, canonical: str, flags: int = READ_FLAGS) -> int:
    """Open the file `canonical` strictly below `root`; no component may be a symlink."""
    parent, name = os.path.split(canonical)
    if not name or canonical == root:
        raise IsADirectoryError(errno.EISDIR, "the workspace root is not a file")
    dir_fd = open_directory(root, parent)
    try:
        return open_step(dir_fd, name, flags)
    finally:
        os.close(dir_fd)


def read_up_to(fd: int, limit: int) -> bytes | None:
    """Read `fd` to its end; None when it holds more than `limit` bytes."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            return None


def _write_temporary(dir_fd: int, data: bytes, like: os.stat_result | None) -> str:
    """Write `data` to a fresh, fsynced temporary file in `dir_fd`; return its name."""
    name = f".callgate-{secrets.token_hex(8)}.tmp"
    fd = os.open(
        name,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=dir_fd,
    )
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if like is None:
            os.fchmod(fd, NEW_FILE_MODE)
        else:
            os.fchmod(fd, stat.S_IMODE(like.st_mode))
            # A server running as root must not take over the agent's files; elsewhere
            # chown is not permitted and the file simply stays ours.
            with contextlib.suppress(PermissionError):
                os.fchown(fd, like.st_uid, like.st_gid)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        raise
    os.close(fd)
    return name


def create_file(dir_fd: int, name: str, data: bytes) -> None:
    """Atomically create `name` (mode 0644) holding `data`. Raises FileExistsError when the
    name exists, whatever it is (a symlink included): nothing is overwritten."""
    temporary = _write_temporary(dir_fd, data, None)
    try:
        os.link(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
    os.fsync(dir_fd)


def replace_file(dir_fd: int, name: str, data: bytes, like: os.stat_result) -> None:
    """Atomically replace `name` with `data`, keeping the mode (and owner) of `like`. The
    rename replaces a directory entry: a symlink found there is replaced, never followed."""
    temporary = _write_temporary(dir_fd, data, like)
    try:
        os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


def names_symlink(root: str, raw: str) -> bool:
    """True when the last component of the path the agent wrote is a symbolic link.

    Directories on the way may be symlinks (they are resolved and shown canonically); the
    file itself may not, so that the name the agent used is the file that is touched.
    """
    joined = raw if raw.startswith("/") else os.path.join(root, raw)
    parent, name = os.path.split(joined.rstrip("/") or "/")
    if name in ("", ".", ".."):
        return False
    return os.path.islink(os.path.join(os.path.realpath(parent), name))
