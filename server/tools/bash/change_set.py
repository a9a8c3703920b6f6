"""A dry run's upper layer turned into a change set, and that change set applied.

`plan_changes` compares each path of the upper layer (`sandbox/overlay.py`) with the workspace
as it is after the dry run (read beneath the root without following a symlink) and makes one
`Step` per change, each with what it found there (`Before`): kind, device, inode, size,
modification time and content hash of a file, the target of a symlink, a digest of the whole
tree of a directory to delete. `apply_plan` first checks every step's `Before` against the
workspace as it is now; if any path differs, nothing is applied (`stale_workspace`, naming the
first). Then it applies, deletions deepest first, then directories, files and links (each
file written to a temporary name and renamed over, so no file is ever half-written), then
modes, every path opened from the root one component at a time without following a symlink.

What it cannot represent leaves only command approval: special files, hard links, more paths
than the bound, a symlink whose target leaves the workspace (refused again at apply).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import shutil
import stat
from collections.abc import Iterable
from dataclasses import dataclass

from ...core.effects import FileChange
from ...core.paths import Workspace
from ...core.preview import diff_preview, escape
from ...sandbox import fsaccess
from ...sandbox.overlay import UpperEntry

__all__ = ["Before", "Plan", "Step", "apply_plan", "before_of", "plan_changes"]

_TEXT_LIMIT = 1 << 20  # files above this are described, not diffed
_TREE_LIMIT = 10_000


class Unrepresentable(Exception):
    """The dry run changed something a change set cannot carry; the message says what."""


class Stale(Exception):
    """A path differs from what the dry run saw; the message names it."""


@dataclass(frozen=True, slots=True)
class Before:
    """A workspace path as the dry run left it."""

    kind: str  # "absent", "file", "directory", "symlink", "other"
    device: int = 0
    inode: int = 0
    size: int = 0
    mtime_ns: int = 0
    digest: str = ""  # a file's content, a directory tree's listing, a symlink's target

    def as_list(self) -> list[object]:
        return [self.kind, self.device, self.inode, self.size, self.mtime_ns, self.digest]


@dataclass(frozen=True, slots=True)
class Step:
    path: str  # relative to the workspace
    action: str  # "delete", "mkdir", "write", "symlink", "chmod"
    before: Before
    content: bytes = b""
    mode: int = 0
    target: str = ""


@dataclass(frozen=True, slots=True)
class Plan:
    steps: tuple[Step, ...]


def _canonical(root: str, path: str) -> str:
    return root.rstrip("/") + "/" + path


def before_of(root: str, path: str, *, tree: bool = False) -> Before:
    """What `path` (relative to `root`) is now, read without following a symlink; with
    `tree`, a directory with a digest of everything under it (a directory to delete: what is
    deleted must be what the approver saw)."""
    canonical = _canonical(root, path)
    parent, name = os.path.split(canonical)
    try:
        dir_fd = fsaccess.open_directory(root, parent)
    except FileNotFoundError:
        return Before("absent")
    except (NotADirectoryError, fsaccess.PathChanged):
        return Before("other", digest="parent")
    try:
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return Before("absent")
        common = (info.st_dev, info.st_ino)
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(name, dir_fd=dir_fd)
            return Before("symlink", *common, 0, 0, target)
        if stat.S_ISDIR(info.st_mode):
            fd = fsaccess.open_step(dir_fd, name, os.O_RDONLY | os.O_DIRECTORY)
            try:
                return Before("directory", *common, 0, 0, _tree_digest(fd) if tree else "")
            finally:
                os.close(fd)
        if stat.S_ISREG(info.st_mode):
            fd = fsaccess.open_step(dir_fd, name, fsaccess.READ_FLAGS)
            try:
                opened = os.fstat(fd)
                if (opened.st_dev, opened.st_ino) != common:
                    return Before("other", *common)
                digest = hashlib.sha256()
                while chunk := os.read(fd, 1 << 20):
                    digest.update(chunk)
            finally:
                os.close(fd)
            return Before("file", *common, info.st_size, info.st_mtime_ns, digest.hexdigest())
        return Before("other", *common)
    finally:
        os.close(dir_fd)


def _tree_digest(dir_fd: int) -> str:
    """A digest of everything under a directory: names, kinds, modes, sizes, inodes and
    modification times (not contents: any write changes a file's mtime or size)."""
    digest = hashlib.sha256()
    count = 0
    stack = [(os.dup(dir_fd), "")]
    try:
        while stack:
            fd, prefix = stack.pop()
            try:
                for name in sorted(os.listdir(fd)):
                    count += 1
                    if count > _TREE_LIMIT:
                        raise Unrepresentable(
                            f"a deleted directory holds more than {_TREE_LIMIT} paths"
                        )
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    digest.update(
                        json.dumps(
                            [prefix + name, info.st_mode, info.st_size, info.st_ino,
                             info.st_mtime_ns]
                        ).encode()
                    )  # fmt: skip
                    if stat.S_ISDIR(info.st_mode):
                        child = fsaccess.open_step(fd, name, os.O_RDONLY | os.O_DIRECTORY)
                        stack.append((child, prefix + name + "/"))
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)
    return digest.hexdigest()


def _read_lower(root: str, path: str) -> bytes | None:
    try:
        fd = fsaccess.open_beneath(root, _canonical(root, path))
    except (OSError, fsaccess.PathChanged):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return fsaccess.read_up_to(fd, 64 << 20)
    finally:
        os.close(fd)


def _lower_children(root: str, path: str) -> list[str]:
    try:
        fd = fsaccess.open_directory(root, _canonical(root, path).rstrip("/"))
    except (OSError, fsaccess.PathChanged):
        return []
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def escapes(path: str, target: str) -> bool:
    """Whether a symlink at `path` (relative) pointing at `target` leads out of the workspace
    (judged on the text: an absolute target always does)."""
    if target.startswith("/"):
        return True
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    return joined == ".." or joined.startswith("../")


def plan_changes(root: str, entries: Iterable[UpperEntry]) -> list[Step]:
    """The steps that make the workspace what the dry run left; raises Unrepresentable."""
    steps: list[Step] = []

    def deleting(path: str, before: Before) -> Step:
        if before.kind == "directory":  # only a deleted directory is walked whole
            before = before_of(root, path, tree=True)
        return Step(path, "delete", before)

    for entry in entries:
        before = before_of(root, entry.path)
        if entry.kind == "special":
            raise Unrepresentable(f"{entry.path} is a special file (a FIFO, socket or device)")
        if entry.kind == "whiteout":
            if before.kind != "absent":
                steps.append(deleting(entry.path, before))
            continue
        if entry.kind == "directory":
            if before.kind == "directory":
                if entry.opaque:
                    # It replaced the lower directory: what the lower held is gone, except
                    # what the upper layer holds again (its own steps follow).
                    for child in _lower_children(root, entry.path):
                        child_path = f"{entry.path}/{child}"
                        steps.append(deleting(child_path, before_of(root, child_path)))
                if stat.S_IMODE(_mode_of(root, entry.path)) != entry.mode:
                    steps.append(Step(entry.path, "chmod", before, mode=entry.mode))
                continue
            if before.kind != "absent":
                steps.append(deleting(entry.path, before))
            steps.append(Step(entry.path, "mkdir", Before("absent"), mode=entry.mode))
            continue
        if entry.kind == "symlink":
            if before.kind == "symlink" and before.digest == entry.target:
                continue
            if before.kind == "directory":
                steps.append(deleting(entry.path, before))
                before = Before("absent")
            steps.append(Step(entry.path, "symlink", before, target=entry.target))
            continue
        if entry.links > 1:
            raise Unrepresentable(f"{entry.path} is a hard link")
        if before.kind == "file":
            same = hashlib.sha256(entry.content).hexdigest() == before.digest
            if same:
                if stat.S_IMODE(_mode_of(root, entry.path)) != entry.mode:
                    steps.append(Step(entry.path, "chmod", before, mode=entry.mode))
                continue
        elif before.kind == "directory":
            steps.append(deleting(entry.path, before))
            before = Before("absent")
        steps.append(Step(entry.path, "write", before, entry.content, entry.mode))
    return steps


def _mode_of(root: str, path: str) -> int:
    canonical = _canonical(root, path)
    parent, name = os.path.split(canonical)
    try:
        dir_fd = fsaccess.open_directory(root, parent)
    except (OSError, fsaccess.PathChanged):
        return 0
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        return 0
    finally:
        os.close(dir_fd)


def describe(root: str, steps: list[Step], max_bytes: int) -> list[FileChange]:
    """The change set's lines, one per changed path (a delete followed by a write or mkdir
    of the same path is one replacement)."""
    changes: list[FileChange] = []
    for step in steps:
        if step.action == "delete":
            what = "a directory and all it holds" if step.before.kind == "directory" else ""
            changes.append(FileChange(step.path, "deleted", what))
        elif step.action == "mkdir":
            changes.append(FileChange(step.path, "directory", "", step.mode))
        elif step.action == "symlink":
            note = (
                " (points out of the workspace: refused at apply)"
                if escapes(step.path, step.target)
                else ""
            )
            changes.append(FileChange(step.path, "symlink", f"-> {step.target}{note}"))
        elif step.action == "chmod":
            changes.append(FileChange(step.path, "mode", f"mode {step.mode:04o}", step.mode))
        else:
            changes.append(_file_change(root, step, max_bytes))
    return [
        FileChange(
            escape(c.path)[0],
            c.kind,
            c.detail if c.kind in ("created", "modified") else escape(c.detail)[0],
            c.mode,
            c.size,
        )
        for c in changes
    ]


def _file_change(root: str, step: Step, max_bytes: int) -> FileChange:
    created = step.before.kind != "file"
    before = b"" if created else (_read_lower(root, step.path) or b"")
    kind = "created" if created else "modified"
    text = _text(step.content)
    old = _text(before)
    if text is None or old is None or max(len(step.content), len(before)) > _TEXT_LIMIT:
        detail = escape(
            f"binary or large content: {len(step.content)} bytes, sha256 "
            f"{hashlib.sha256(step.content).hexdigest()}"
        )[0]
    else:
        detail = diff_preview(step.path, old, text, max_bytes).text
    return FileChange(step.path, kind, detail, step.mode, len(step.content))


def _text(data: bytes) -> str | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def covered(steps: list[Step]) -> list[object]:
    """What the effect digest covers of the steps: every path, action, mode, target, the new
    content's hash and what was there before."""
    return [
        [s.path, s.action, s.mode, s.target, hashlib.sha256(s.content).hexdigest(),
         s.before.as_list()]
        for s in steps
    ]  # fmt: skip


# ---------------------------------------------------------------------------------- apply


def check_protected(workspace: Workspace, steps: list[Step]) -> None:
    """Raise Unrepresentable when a step touches a protected path (a secret, or a file that
    makes programs run code): the server writes those for nobody; approving the command
    remains."""
    for step in steps:
        canonical = _canonical(workspace.root, step.path)
        protected = workspace.protected
        if protected.is_protected(canonical) or protected.needs_human_to_write(canonical):
            raise Unrepresentable(
                f"{step.path} is a protected path (a secret, or a file that makes programs "
                "run code)"
            )


def check_plan(root: str, plan: Plan) -> None:
    """Raise Stale (naming the first path) unless every step still finds what the dry run
    saw, and Unrepresentable for a symlink out of the workspace."""
    for step in plan.steps:
        if step.action == "symlink" and escapes(step.path, step.target):
            raise Unrepresentable(f"{step.path} would be a symlink out of the workspace")
    seen: set[str] = set()
    for step in plan.steps:
        if step.path in seen:
            continue  # a replaced path: checked at its first step
        seen.add(step.path)
        if before_of(root, step.path, tree=step.action == "delete") != step.before:
            raise Stale(step.path)


def apply_plan(root: str, plan: Plan) -> list[str]:
    """Apply a checked plan; returns the paths changed, in order."""
    order = {"delete": 0, "mkdir": 1, "write": 2, "symlink": 2, "chmod": 3}
    steps = sorted(
        enumerate(plan.steps),
        key=lambda item: (
            order[item[1].action],
            -item[1].path.count("/") if item[1].action == "delete" else item[1].path.count("/"),
            item[0],
        ),
    )
    applied: list[str] = []
    for _, step in steps:
        _apply_step(root, step)
        applied.append(step.path)
    return applied


def _apply_step(root: str, step: Step) -> None:
    parent, name = os.path.split(_canonical(root, step.path))
    dir_fd = fsaccess.open_directory(root, parent)
    try:
        if step.action == "delete":
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(name, dir_fd=dir_fd)
            else:
                os.unlink(name, dir_fd=dir_fd)
        elif step.action == "mkdir":
            os.mkdir(name, step.mode, dir_fd=dir_fd)
            fd = fsaccess.open_step(dir_fd, name, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fchmod(fd, step.mode)
            finally:
                os.close(fd)
        elif step.action == "write":
            _write(dir_fd, name, step.content, step.mode)
        elif step.action == "symlink":
            temporary = f".callgate-{os.urandom(8).hex()}.lnk"
            os.symlink(step.target, temporary, dir_fd=dir_fd)
            try:
                os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=dir_fd)
                raise
        elif step.action == "chmod":
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            flags = os.O_RDONLY | (os.O_DIRECTORY if stat.S_ISDIR(info.st_mode) else os.O_NONBLOCK)
            fd = fsaccess.open_step(dir_fd, name, flags)
            try:
                os.fchmod(fd, step.mode)
            finally:
                os.close(fd)
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _write(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """Write `data` to a temporary file and rename it over `name`, with `mode`; the owner of a
    file it replaces is kept, and a symlink found there (checked as the dry run saw it) is
    replaced, never followed."""
    try:
        existing: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        existing = None
    if existing is not None and stat.S_ISREG(existing.st_mode):
        fsaccess.replace_file(dir_fd, name, data, existing)
    else:
        if existing is not None:
            os.unlink(name, dir_fd=dir_fd)
        try:
            fsaccess.create_file(dir_fd, name, data)
        except FileExistsError as exc:
            raise Stale(name) from exc
    fd = fsaccess.open_step(dir_fd, name, fsaccess.READ_FLAGS)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
