"""The files of programs that deny families name, masked in every sandboxed command.

A deny family that is nothing but a program (`Bash(rm:*)`) is held at exec, not only read from the
text: every file in the sandbox's PATH directories that is that program's file (the same device
and inode, whatever the name or symlink that reaches it: `/bin/rm` is `/usr/bin/rm` where `/bin`
links to `/usr/bin`) is covered by `/dev/null` in the sandbox. Then no spelling runs it, nor the
ELF loader (`ld-linux-x86-64.so.2 /usr/bin/rm` reads an empty file), nor a copy (a copy of it is
empty). Packages also ship a program's own copy outside PATH (`/usr/lib/git-core/git` beside
`/usr/bin/git`, with the `git-*` links to it): a file of that name one level below `/usr/lib`
or `/usr/libexec` (and their `/usr/local` twins) is masked too, with every entry of its
directory that is the same file. Another program that does the same thing (`unlink`, a Python
one-liner), or a copy made before the rule, is not masked: deny families read the text for
those.

Looking the files up walks the PATH directories (about 2 ms for a full /usr/bin here), so the
answer is kept until a directory's modification time or the names change.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterable, Sequence

# Where packages keep programs' own copies, one directory level down (`/usr/lib/git-core/git`).
LIBRARY_ROOTS = ("/usr/lib", "/usr/libexec", "/usr/local/lib", "/usr/local/libexec")
# (names, ((directory, mtime_ns), ...)) -> the real paths to mask.
_Key = tuple[frozenset[str], tuple[tuple[str, int], ...]]


class ProgramMasks:
    """Finds (and remembers) the files to mask for a set of denied program names."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[_Key, tuple[str, ...]] = {}

    def key(self, names: frozenset[str], directories: Sequence[str]) -> _Key:
        seen: dict[str, int] = {}
        for directory in directories:
            real = os.path.realpath(directory)
            try:
                info = os.stat(real)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                seen.setdefault(real, info.st_mtime_ns)
        return names, tuple(seen.items())

    def cached(self, key: _Key) -> tuple[str, ...] | None:
        """The paths for `key` when they are known, else None (then `find`, in a thread)."""
        with self._lock:
            return self._cache.get(key)

    def find(self, key: _Key) -> tuple[str, ...]:
        """Walk the directories of `key` for the files of its names (blocking I/O)."""
        names, directories = key
        paths = _program_files(names, [d for d, _ in directories])
        with self._lock:
            if len(self._cache) > 64:
                self._cache.clear()  # rules changed many times: start again
            self._cache[key] = paths
        return paths


def _program_files(names: Iterable[str], directories: Sequence[str]) -> tuple[str, ...]:
    identities: set[tuple[int, int]] = set()
    names = [n for n in names if n and "/" not in n and n not in (".", "..")]
    directories = [*directories, *_library_homes(names)]
    for name in names:
        for directory in directories:
            try:
                info = os.stat(os.path.join(directory, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                identities.add((info.st_dev, info.st_ino))
    if not identities:
        return ()
    found: set[str] = set()
    for directory in directories:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat()  # through a symlink: what running that name executes
            except OSError:
                continue
            if (info.st_dev, info.st_ino) in identities:
                found.add(os.path.realpath(entry.path))
    return tuple(sorted(found))


def _library_homes(names: Sequence[str]) -> list[str]:
    """The directories one level below LIBRARY_ROOTS that hold a file of one of `names`."""
    homes: list[str] = []
    for root in LIBRARY_ROOTS:
        try:
            entries = list(os.scandir(root))
        except OSError:
            continue
        for entry in entries:
            try:
                if not entry.is_dir(follow_symlinks=False):
                    continue
            except OSError:
                continue
            if any(os.path.isfile(os.path.join(entry.path, name)) for name in names):
                homes.append(os.path.realpath(entry.path))
    return list(dict.fromkeys(homes))
