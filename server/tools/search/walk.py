"""What Glob and Grep share: the walk below an approved root (no symlinks followed, name order,
noise directories skipped, protected paths never shown), deadlines and the tree requirement."""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Iterator
from operator import attrgetter

from ...core.models import TREE_PREFIX, Requirement, RequirementKind, ToolResult
from ...core.paths import ProtectedPaths
from ...sandbox import fsaccess
from ...sandbox.fsaccess import PathChanged
from ..common import display

NOISE_NAMES: frozenset[str] = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".bzr",
        "node_modules",
        "__pycache__",
        ".venv",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
        ".hypothesis",
    }
)
SUMMARY_PATTERN_CHARS = 80
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY


class SearchTimedOut(Exception):
    pass


def short_pattern(pattern: str) -> str:
    pattern = display(pattern)
    if len(pattern) <= SUMMARY_PATTERN_CHARS:
        return pattern
    return pattern[: SUMMARY_PATTERN_CHARS - 1] + "…"


def tree_requirement(canonical: str) -> Requirement:
    match = TREE_PREFIX + canonical
    return Requirement(
        kind=RequirementKind.FILESYSTEM_READ.value,
        scope=match,
        match=match,
        description=f"read files below {display(canonical)}",
    )


def check_deadline(deadline: float) -> None:
    if time.monotonic() >= deadline:
        raise SearchTimedOut


# Walking -------------------------------------------------------------------------------------


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def kind_now(path: str) -> str:
    """ "directory", "file" or "missing": one stat, inline (cheaper than a thread hand-off)."""
    if os.path.isdir(path):
        return "directory"
    return "file" if os.path.lexists(path) else "missing"


def gone(rel: str) -> ToolResult:
    return ToolResult.error("file_not_found", f"{display(rel)} no longer exists.")


def join_path(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}"


def walk_entries(
    top_fd: int, top: str, protected: ProtectedPaths, deadline: float
) -> Generator[tuple[str, str, int, os.DirEntry[str]], None, None]:
    """Every non-directory entry below the open directory `top_fd` (canonical path `top`):
    (path relative to top, absolute path, fd of its directory, entry), depth first in name
    order. Noise and protected names and names that are not UTF-8 are skipped; directory
    symlinks are never followed. Raises SearchTimedOut past `deadline`."""
    stack: list[tuple[int, str, str, Iterator[os.DirEntry[str]]]] = []

    def push(fd: int, absolute: str, rel: str) -> None:
        try:
            with os.scandir(fd) as listing:
                entries = sorted(listing, key=attrgetter("name"))
        except OSError:
            entries = []
        stack.append((fd, absolute, rel, iter(entries)))

    push(top_fd, top, "")
    try:
        while stack:
            fd, absolute, rel, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                if fd != top_fd:
                    os.close(fd)
                continue
            check_deadline(deadline)
            name = entry.name
            if name in NOISE_NAMES or not _is_utf8(name):
                continue
            entry_path = join_path(absolute, name)
            if protected.is_protected(entry_path):
                continue
            entry_rel = f"{rel}/{name}" if rel else name
            try:
                is_directory = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if not is_directory:
                yield entry_rel, entry_path, fd, entry
                continue
            try:
                child = fsaccess.open_step(fd, name, DIRECTORY_FLAGS)
            except (OSError, PathChanged):
                continue
            push(child, entry_path, entry_rel)
    finally:
        for fd, *_ in stack:
            if fd != top_fd:
                os.close(fd)
