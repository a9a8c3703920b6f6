"""The server's state directory (tokens, journal, rules, sockets, session files): outside every
workspace root, owned by the server's user, mode 0700 with 0600 files (design section 7).

What an earlier run, another tool or an operator left there is fixed when it is ours (modes
changed through a descriptor, never through a symlink) and refused when it is not: an entry
owned by another user, a symlink, a hard-linked file or anything but a directory, regular file
or socket stops the server with one line naming `state_dir` and the path.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from callgate.server.config import ConfigError

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600
# Session files are removed at every start (App._sweep_session_dirs, which never follows a
# symlink); what a sandboxed command left in its session HOME is not ours to judge, so only
# this directory itself is checked, not its contents.
SESSIONS = "sessions"


def check_placement(
    state_dir: Path, roots: Sequence[tuple[str, Path]], suggestion: Path | None
) -> None:
    """Refuse a state directory inside a workspace root, or a root inside the state directory.
    `roots` pairs each canonical root with its config key; `suggestion` (the per-user default)
    is proposed as the fix when it lies outside every root."""
    for key, root in roots:
        if state_dir.is_relative_to(root):
            fix = (
                f"e.g. --state-dir {suggestion}"
                if suggestion is not None and not _inside_any(suggestion, roots)
                else "with --state-dir, or serve a narrower workspace"
            )
            raise ConfigError(
                f"config key state_dir: {state_dir} lies inside the {_what(key)} {root}, where "
                f"tools could read its tokens; choose a state directory outside it, {fix}"
            )
        if root.is_relative_to(state_dir):
            raise ConfigError(
                f"config key {key}: {root} lies inside the state directory {state_dir}, whose "
                "tokens tools could then read; choose a state directory outside it with --state-dir"
            )


def _inside_any(path: Path, roots: Sequence[tuple[str, Path]]) -> bool:
    return any(path.is_relative_to(root) or root.is_relative_to(path) for _, root in roots)


def _what(key: str) -> str:
    return "workspace" if key == "workspace" else f"allowed root ({key})"


def prepare(state_dir: Path) -> None:
    """Create the state directory (0700) if needed, then make everything in it private."""
    try:
        state_dir.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(state_dir, DIRECTORY_MODE)
        fd = os.open(state_dir, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if not stat.S_ISDIR(info.st_mode) and not stat.S_ISLNK(info.st_mode):
                _refuse(state_dir, "is not a directory; choose another state directory")
            _secure(fd, info, state_dir)
            _secure_tree(fd, state_dir, top=True)
        finally:
            os.close(fd)
    except OSError as exc:
        raise ConfigError(
            f"config key state_dir: {state_dir} cannot be prepared ({exc.strerror}); "
            "choose a directory this user can create and own"
        ) from None


def create_private_file(path: Path) -> None:
    """Create `path` empty with mode 0600 unless it exists (never through a symlink), so that
    SQLite, which gives its -wal and -shm files the database's mode, keeps all of them 0600."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except OSError as exc:
        raise ConfigError(
            f"config key state_dir: {path} cannot be created ({exc.strerror})"
        ) from None
    os.close(fd)


def _secure(fd: int, info: os.stat_result, path: Path) -> None:
    """Refuse what is not ours or not of a kind we keep; fix the mode of what is. `fd` is an
    O_PATH descriptor of the entry itself (opened without following a symlink)."""
    if stat.S_ISLNK(info.st_mode):
        _refuse(path, "is a symbolic link; remove it")
    if info.st_uid != os.geteuid():
        _refuse(path, f"is owned by uid {info.st_uid}, not by this server's uid {os.geteuid()}")
    if stat.S_ISDIR(info.st_mode):
        mode = DIRECTORY_MODE
    elif stat.S_ISREG(info.st_mode):
        if info.st_nlink > 1:
            _refuse(path, "has other hard links, which would keep its contents reachable")
        mode = FILE_MODE
    elif stat.S_ISSOCK(info.st_mode):
        return  # the socket keeps its mode (0660 by design): the 0700 directory is the barrier
    else:
        _refuse(path, "is neither a directory, a regular file nor a socket; remove it")
    if stat.S_IMODE(info.st_mode) != mode:
        # Through the descriptor's /proc link: the inode just checked, whatever the name
        # points to by now (an O_PATH descriptor refuses fchmod).
        os.chmod(f"/proc/self/fd/{fd}", mode)


def _secure_tree(path_fd: int, path: Path, *, top: bool) -> None:
    """Secure every entry below the directory `path_fd` (an O_PATH descriptor) names."""
    listing = os.open(f"/proc/self/fd/{path_fd}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with os.scandir(listing) as entries:
            names = [entry.name for entry in entries]
        for name in names:
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=listing)
            except FileNotFoundError:
                continue  # removed meanwhile
            try:
                info = os.fstat(fd)
                _secure(fd, info, path / name)
                if stat.S_ISDIR(info.st_mode) and not (top and name == SESSIONS):
                    _secure_tree(fd, path / name, top=False)
            finally:
                os.close(fd)
    finally:
        os.close(listing)


def _refuse(path: Path, problem: str) -> NoReturn:
    raise ConfigError(f"config key state_dir: {path} {problem}")
