"""The file tools: ReadFile, WriteFile and EditFile (design section 5).

Prepare resolves the path to its canonical form inside the workspace and freezes it; Invoke
re-resolves the path the agent wrote, fails closed when it now points elsewhere, and opens
the canonical path component by component without following symlinks (`fsaccess`).
Overwriting needs a full read by the same loop whose SHA-256 still matches (`stale_read`).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import io
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, ClassVar

import anyio.to_thread
from pydantic import Field

from ...core.errors import arguments_invalid
from ...core.models import Preview, Requirement, RequirementKind, RuleCandidate, ToolResult
from ...core.preview import changed_window, content_preview, matched_hunks
from ...core.preview import diff_preview as preview_diff
from ...core.tool import Arguments, Artifact, Prepared, Tool, ToolContext
from ...sandbox import fsaccess
from ...sandbox.fsaccess import PathChanged
from ..common import (
    INLINE_READ_BYTES,
    changed_result,
    display,
    os_failure,
    resolution_changed,
    sha256_hex,
)
from ..workspace_scan import link_guard

# The diff preview of an edit: hunk context, and how much of the diff is shown.
DIFF_CONTEXT_LINES = 2
DIFF_MAX_LINES = 60
DIFF_MAX_BYTES = 8 << 10
DIFF_MAX_WINDOW_LINES = 2000
DIFF_MAX_LINE_CHARS = 300


def _file_requirement(kind: RequirementKind, verb: str, canonical: str) -> Requirement:
    return Requirement(
        kind=kind.value,
        scope=canonical,
        match=canonical,
        description=f"{verb} {display(canonical)}",
    )


# Why a write to a read-only file waits for a human, in the words the approver reads.
HUMAN_ONLY_WHY = "a file that makes programs run code; only a human can approve it, each time"


def _write_request(
    ctx: ToolContext, canonical: str
) -> tuple[Requirement, tuple[RuleCandidate, ...]]:
    """The requirement of a write to `canonical` and the rule it could be approved by; a
    file that makes programs run code (`ProtectedPaths.needs_human_to_write`) gets a
    human-only requirement that says why, and no rule candidate."""
    if ctx.workspace.protected.needs_human_to_write(canonical):
        requirement = Requirement(
            kind=RequirementKind.FILESYSTEM_WRITE.value,
            scope=canonical,
            match=canonical,
            description=f"write {display(canonical)} — {HUMAN_ONLY_WHY}",
            human_only=True,
        )
        return requirement, ()
    requirement = _file_requirement(RequirementKind.FILESYSTEM_WRITE, "write", canonical)
    return requirement, (RuleCandidate(requirement.kind, canonical, requirement.description),)


def _prepare_file_path(ctx: ToolContext, raw: str) -> str:
    """Resolve a file path argument; its last component may not be a symlink."""
    canonical = ctx.workspace.resolve(raw, "path")
    if canonical == ctx.workspace.root:
        raise arguments_invalid("path", "the path names the workspace root, not a file")
    if fsaccess.names_symlink(ctx.workspace.root, raw):
        target = display(ctx.workspace.relative(canonical))
        raise arguments_invalid(
            "path", f"the path is a symbolic link; name the file it points to ({target})"
        )
    return canonical


# ReadFile ------------------------------------------------------------------------------------


class ReadFileArguments(Arguments):
    path: str = Field(description="File to read, relative to the workspace root.")
    start_line: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="First line to show (1-based, inclusive)."
    )
    end_line: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="Last line to show (1-based, inclusive)."
    )


class ReadFileArtifact(Artifact):
    path: str
    canonical: str
    start_line: int | None
    end_line: int | None


@dataclass(slots=True)
class _Excerpt:
    """The lines of a file a read shows, and what it left out."""

    lines: list[bytes]
    first_line: int
    lines_read: int
    binary: bool = False
    reached_end: bool = False
    truncated: bool = False
    cut_line: bool = False
    omitted_bytes: int = 0
    digest: str | None = None


def _next_line(
    reader: io.BufferedReader[io.FileIO], update: Callable[[bytes], object], keep: int
) -> tuple[bytes, int, bool] | None:
    """Read one line: up to `keep` of its bytes, its length and whether it holds NUL. With
    `keep`, reading stops as soon as the line has `keep` bytes (the length is then a lower
    bound): a line too long to show is not read to its end."""
    kept = bytearray()
    length = 0
    nul = False
    while True:
        piece = reader.readline(1 << 16)
        if not piece:
            return (bytes(kept), length, nul) if length else None
        update(piece)
        length += len(piece)
        nul = nul or b"\x00" in piece
        if len(kept) < keep:
            kept += piece[: keep - len(kept)]
        if piece.endswith(b"\n") or (keep and length >= keep):
            return bytes(kept), length, nul


def _excerpt_from_bytes(data: bytes, start: int, end: int | None, max_lines: int) -> _Excerpt:
    """`read_excerpt` for a whole file already in memory, without NUL bytes (same results,
    without the per-line loop)."""
    excerpt = _Excerpt(lines=[], first_line=start, lines_read=0)
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    total = len(lines)
    last = total if end is None else min(end, total)
    stop = min(last, start - 1 + max_lines)
    excerpt.lines = lines[start - 1 : stop] if start <= stop else []
    if stop < last:
        excerpt.truncated = True
        excerpt.lines_read = stop
        shown_through = sum(len(line) + 1 for line in lines[:stop])
        excerpt.omitted_bytes = max(0, len(data) - shown_through)
        return excerpt
    excerpt.lines_read = last
    excerpt.reached_end = end is None or end > total
    if excerpt.reached_end and start == 1:
        excerpt.digest = hashlib.sha256(data).hexdigest()
    return excerpt


def read_excerpt(
    fd: int,
    size: int,
    start: int,
    end: int | None,
    max_lines: int,
    max_bytes: int,
    *,
    whole_file_read: bool = True,
) -> _Excerpt:
    """Read lines `start`..`end` of an open file within the caps, hashing what it reads."""
    if whole_file_read and 0 <= size <= max_bytes:
        # The common case, a file within the byte cap: one read, one hash, one split.
        data = os.pread(fd, max_bytes + 1, 0)
        # A NUL byte (binary) or a file that grew meanwhile takes the streaming path, which
        # decides exactly where reading stops.
        if len(data) <= max_bytes and b"\x00" not in data:
            return _excerpt_from_bytes(data, start, end, max_lines)
    reader = io.BufferedReader(io.FileIO(fd, "rb", closefd=False), 1 << 16)
    hasher = hashlib.sha256()
    excerpt = _Excerpt(lines=[], first_line=start, lines_read=0)
    shown_bytes = 0
    offset = 0
    while end is None or excerpt.lines_read < end:
        in_range = excerpt.lines_read + 1 >= start
        if in_range and len(excerpt.lines) == max_lines:
            if reader.peek(1):
                excerpt.truncated = True
            else:
                excerpt.reached_end = True
            break
        item = _next_line(reader, hasher.update, max_bytes - shown_bytes + 1 if in_range else 0)
        if item is None:
            excerpt.reached_end = True
            break
        data, length, nul = item
        if nul:
            excerpt.binary = True
            return excerpt
        excerpt.lines_read += 1
        if not in_range:
            offset += length
            continue
        if shown_bytes + length > max_bytes:
            excerpt.truncated = True
            if not excerpt.lines:
                # One line longer than the whole cap: show its beginning rather than nothing.
                excerpt.lines.append(data[:max_bytes])
                excerpt.cut_line = True
                offset += max_bytes
            break
        excerpt.lines.append(data[:-1] if data.endswith(b"\n") and len(data) == length else data)
        shown_bytes += length
        offset += length
    if excerpt.truncated:
        excerpt.omitted_bytes = max(0, size - offset)
    elif excerpt.reached_end and start == 1:
        excerpt.digest = hasher.hexdigest()
    return excerpt


def _render_excerpt(excerpt: _Excerpt, rel: str, limits_bytes: int) -> str:
    # One decode for all lines (a newline byte is never part of a UTF-8 sequence, so this is
    # the same as decoding line by line), one format per line.
    text = b"\n".join(excerpt.lines).decode("utf-8", "replace")
    first = excerpt.first_line
    numbers = range(first, first + len(excerpt.lines))
    numbered = (
        list(map("%6d\t%s".__mod__, zip(numbers, text.split("\n"), strict=True)))
        if excerpt.lines
        else []
    )
    if not numbered:
        if excerpt.lines_read == 0:
            return f"{rel} is empty."
        return (
            f"{rel} has {excerpt.lines_read} lines; there is nothing from line "
            f"{excerpt.first_line}."
        )
    if excerpt.truncated:
        last = excerpt.first_line + len(excerpt.lines) - 1
        if excerpt.cut_line:
            notice = (
                f"[truncated: line {last} is longer than {limits_bytes} bytes; showed its "
                f"first {limits_bytes} bytes, {excerpt.omitted_bytes} more bytes of the file "
                "were not read]"
            )
        else:
            notice = (
                f"[truncated: showed lines {excerpt.first_line}-{last}; the "
                f"{excerpt.omitted_bytes} bytes from line {last + 1} on were not read; "
                f"continue with start_line={last + 1}]"
            )
        numbered.append(notice)
    return "\n".join(numbered)


class ReadFile(Tool[ReadFileArguments, ReadFileArtifact]):
    name: ClassVar[str] = "ReadFile"
    answer_only: ClassVar[bool] = True
    description: ClassVar[str] = (
        "Read a text file in the workspace. Lines come numbered as `%6d<TAB>text`; at most "
        "2000 lines or 1 MiB are shown, with a notice saying what was left out. Use "
        "start_line/end_line (1-based, inclusive) to read part of a file. Reading a whole "
        "file is what allows WriteFile and EditFile to change it afterwards."
    )
    arguments: ClassVar[type[Arguments]] = ReadFileArguments
    artifact: ClassVar[type[Artifact]] = ReadFileArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = (RequirementKind.FILESYSTEM_READ.value,)

    def prepare_args(self, args: ReadFileArguments, ctx: ToolContext) -> Prepared:
        if (
            args.start_line is not None
            and args.end_line is not None
            and args.end_line < args.start_line
        ):
            raise arguments_invalid("end_line", "end_line must not be less than start_line")
        canonical = _prepare_file_path(ctx, args.path)
        rel = display(ctx.workspace.relative(canonical))
        summary = f"ReadFile {rel}"
        if args.start_line is not None or args.end_line is not None:
            first = args.start_line or 1
            last = "end" if args.end_line is None else str(args.end_line)
            summary += f" lines {first}-{last}"
        requirement = _file_requirement(RequirementKind.FILESYSTEM_READ, "read", canonical)
        return Prepared(
            summary=summary,
            requirements=(requirement,),
            artifact=ReadFileArtifact(
                path=args.path,
                canonical=canonical,
                start_line=args.start_line,
                end_line=args.end_line,
            ),
            candidates=(RuleCandidate(requirement.kind, canonical, requirement.description),),
        )

    async def run(self, artifact: ReadFileArtifact, ctx: ToolContext) -> ToolResult:
        canonical = artifact.canonical
        rel = display(ctx.workspace.relative(canonical))
        changed = resolution_changed(ctx, artifact.path, canonical)
        if changed is not None:
            return changed
        if ctx.workspace.protected.is_protected(canonical):
            return ToolResult.error("read_denied", f"{rel} is a protected path and is never read.")
        try:
            fd = fsaccess.open_beneath(ctx.workspace.root, canonical)
        except PathChanged:
            return changed_result(ctx, canonical)
        except (FileNotFoundError, NotADirectoryError):
            return ToolResult.error("file_not_found", f"{rel} does not exist.")
        except OSError as exc:
            return os_failure(exc, rel, "read")
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return ToolResult.error("not_a_file", f"{rel} is not a regular file.")
            if info.st_nlink > 1 and await _is_protected_link(ctx, info):
                return ToolResult.error(
                    "read_denied", f"{rel} is a protected path and is never read."
                )
            read = functools.partial(
                read_excerpt,
                fd,
                info.st_size,
                artifact.start_line or 1,
                artifact.end_line,
                ctx.limits.read_max_lines,
                ctx.limits.read_max_bytes,
            )
            if info.st_size <= INLINE_READ_BYTES:
                excerpt = read()
            else:
                excerpt = await anyio.to_thread.run_sync(read)
        except OSError as exc:
            return os_failure(exc, rel, "read")
        finally:
            os.close(fd)
        if excerpt.binary:
            return ToolResult.error(
                "is_binary", f"{rel} is a binary file (it contains NUL bytes); it is not shown."
            )
        if excerpt.digest is not None:
            ctx.loop.observations[canonical] = excerpt.digest
        return ToolResult(
            text=_render_excerpt(excerpt, rel, ctx.limits.read_max_bytes),
            omitted_bytes=excerpt.omitted_bytes,
        )


async def _is_protected_link(ctx: ToolContext, info: os.stat_result) -> bool:
    """A file with several names may be another name of a secret: one walk of the workspace
    (off the event loop) finds out; a walk over its budget counts as protected."""
    return await anyio.to_thread.run_sync(link_guard(ctx).is_protected, info)


# Writing -------------------------------------------------------------------------------------


def _stale(ctx: ToolContext, canonical: str, current: bytes | None) -> ToolResult | None:
    """The read-before-write check: None when this loop's full read of the file is current."""
    rel = display(ctx.workspace.relative(canonical))
    observed = ctx.loop.observations.get(canonical)
    if observed is None:
        return ToolResult.error(
            "stale_read",
            f"{rel} exists and this loop has not read it in full; read it with ReadFile first.",
        )
    if current is None or sha256_hex(current) != observed:
        return ToolResult.error(
            "stale_read",
            f"{rel} has changed since this loop last read it; read it again before changing it.",
        )
    return None


def _observed_content(ctx: ToolContext, canonical: str) -> tuple[str, str] | None:
    """The current content of `canonical` and its SHA-256, when this loop has read all of it
    and it has not changed since (what a write's preview diffs against: the agent has seen
    it); None otherwise (no file, not read, changed, not a regular file, too large)."""
    observed = ctx.loop.observations.get(canonical)
    if observed is None or ctx.workspace.protected.is_protected(canonical):
        return None
    try:
        fd = fsaccess.open_beneath(ctx.workspace.root, canonical)
    except (OSError, PathChanged):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = fsaccess.read_up_to(fd, max(ctx.limits.read_max_bytes, ctx.limits.edit_max_bytes))
    except OSError:
        return None
    finally:
        os.close(fd)
    if data is None or sha256_hex(data) != observed:
        return None
    return data.decode("utf-8", "surrogateescape"), observed


def _changed_since_prepare(ctx: ToolContext, base: str, current: bytes | None) -> ToolResult | None:
    """The preview binding: a write approved on a diff against `base` (a SHA-256) runs only
    on that content."""
    if not base or (current is not None and sha256_hex(current) == base):
        return None
    return ToolResult.error(
        "stale_read",
        "The file has changed since this call was prepared (the approver saw a diff against "
        "its earlier content); read it again and prepare the change again.",
    )


def _write_preview(
    ctx: ToolContext, canonical: str, creates: bool, content: str
) -> tuple[Preview, str]:
    """WriteFile's preview and the content hash it is bound to ("" when none)."""
    limit = ctx.limits.preview_max_bytes
    rel = display(ctx.workspace.relative(canonical))
    if creates:
        size = len(content.encode("utf-8"))
        return content_preview([f"new file {rel} ({size} bytes):"], content, limit), ""
    base = _observed_content(ctx, canonical)
    if base is None:
        header = [
            f"{rel} exists and this loop has not read its current content in full: the "
            "write will fail (stale_read) unless the loop reads it first. The new content:"
        ]
        return content_preview(header, content, limit), ""
    return preview_diff(rel, base[0], content, limit), base[1]


def _open_existing(dir_fd: int, name: str) -> tuple[int, os.stat_result] | None:
    """Open an existing regular file in `dir_fd`; None when it is not a regular file."""
    fd = fsaccess.open_step(dir_fd, name, fsaccess.READ_FLAGS)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return None
    return fd, info


class WriteFileArguments(Arguments):
    path: str = Field(description="File to write, relative to the workspace root.")
    content: str = Field(description="The complete new content of the file.")


class WriteFileArtifact(Artifact):
    path: str
    canonical: str
    content: str
    # True when the file did not exist at Prepare: the call was approved as a creation.
    creates: bool
    # SHA-256 of the content the approver's diff was made against ("" when none was shown):
    # the write runs only on that content.
    base_sha256: str = ""


class WriteFile(Tool[WriteFileArguments, WriteFileArtifact]):
    name: ClassVar[str] = "WriteFile"
    description: ClassVar[str] = (
        "Write a whole file in the workspace, creating missing parent directories. An "
        "existing file may be overwritten only after this loop has read it in full with "
        "ReadFile and it has not changed since. The write is atomic; the file keeps its mode "
        "(new files get 0644). Writing a file that makes programs run code (.git/config, git "
        "hooks, .gitmodules, shell startup files, editor and agent configuration) always "
        "waits for a human approver, whatever the policy."
    )
    arguments: ClassVar[type[Arguments]] = WriteFileArguments
    artifact: ClassVar[type[Artifact]] = WriteFileArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = (RequirementKind.FILESYSTEM_WRITE.value,)

    def prepare_args(self, args: WriteFileArguments, ctx: ToolContext) -> Prepared:
        size = len(args.content.encode("utf-8"))
        if size > ctx.limits.write_max_bytes:
            raise arguments_invalid(
                "content", f"the content is larger than {ctx.limits.write_max_bytes} bytes"
            )
        canonical = _prepare_file_path(ctx, args.path)
        requirement, candidates = _write_request(ctx, canonical)
        creates = not os.path.lexists(canonical)
        preview, base = _write_preview(ctx, canonical, creates, args.content)
        return Prepared(
            summary=f"WriteFile {display(ctx.workspace.relative(canonical))}",
            requirements=(requirement,),
            artifact=WriteFileArtifact(
                path=args.path,
                canonical=canonical,
                content=args.content,
                creates=creates,
                base_sha256=base,
            ),
            candidates=candidates,
            preview=preview,
        )

    async def run(self, artifact: WriteFileArtifact, ctx: ToolContext) -> ToolResult:
        async with ctx.resources.write_lock:  # never inside an apply of a dry run's changes
            return self._run(artifact, ctx)

    def _run(self, artifact: WriteFileArtifact, ctx: ToolContext) -> ToolResult:
        canonical = artifact.canonical
        rel = display(ctx.workspace.relative(canonical))
        changed = resolution_changed(ctx, artifact.path, canonical)
        if changed is not None:
            return changed
        if ctx.workspace.protected.is_protected(canonical):
            return ToolResult.error(
                "write_denied", f"{rel} is a protected path and is never written."
            )
        data = artifact.content.encode("utf-8")
        parent, name = os.path.split(canonical)
        try:
            dir_fd = fsaccess.open_directory(ctx.workspace.root, parent, create=True)
        except PathChanged:
            return changed_result(ctx, canonical)
        except (NotADirectoryError, FileExistsError):
            return ToolResult.error("not_a_directory", f"A parent of {rel} is not a directory.")
        except OSError as exc:
            return os_failure(exc, rel, "write")
        try:
            failure = self._write(artifact, ctx, dir_fd, name, data)
        except PathChanged:
            failure = changed_result(ctx, canonical)
        except OSError as exc:
            failure = os_failure(exc, rel, "write")
        finally:
            os.close(dir_fd)
        if failure is not None:
            return failure
        ctx.loop.observations[canonical] = sha256_hex(data)
        return ToolResult(text=f"wrote {rel} ({len(data)} bytes)")

    def _write(
        self, artifact: WriteFileArtifact, ctx: ToolContext, dir_fd: int, name: str, data: bytes
    ) -> ToolResult | None:
        canonical = artifact.canonical
        rel = display(ctx.workspace.relative(canonical))
        exists_result = ToolResult.error(
            "already_exists",
            f"{rel} was created by someone else after this call was prepared; read it and "
            "prepare the write again.",
        )
        try:
            opened = _open_existing(dir_fd, name)
        except FileNotFoundError:
            try:
                fsaccess.create_file(dir_fd, name, data)
            except FileExistsError:
                return exists_result
            return None
        if opened is None:
            return ToolResult.error("not_a_file", f"{rel} exists and is not a regular file.")
        fd, info = opened
        try:
            if artifact.creates:
                return exists_result
            limit = max(ctx.limits.read_max_bytes, ctx.limits.edit_max_bytes)
            current = fsaccess.read_up_to(fd, limit) if canonical in ctx.loop.observations else None
        finally:
            os.close(fd)
        stale = _stale(ctx, canonical, current) or _changed_since_prepare(
            ctx, artifact.base_sha256, current
        )
        if stale is not None:
            return stale
        fsaccess.replace_file(dir_fd, name, data, info)
        return None


# EditFile ------------------------------------------------------------------------------------


class EditFileArguments(Arguments):
    path: str = Field(description="File to edit, relative to the workspace root.")
    old: str = Field(description="Exact text to replace; must occur in the file.")
    new: str = Field(description="Replacement text.")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence instead of exactly one."
    )


class EditFileArtifact(Artifact):
    path: str
    canonical: str
    old: str
    new: str
    replace_all: bool
    # As WriteFileArtifact.base_sha256: the content the approver's diff was made against.
    base_sha256: str = ""


def _edited(before: str, old: str, new: str, replace_all: bool) -> tuple[str, int]:
    """The content after the edit and how many times `old` occurs (the edit applies only
    when that is 1, or any number with replace_all)."""
    count = before.count(old)
    if count == 0 or (count > 1 and not replace_all):
        return before, count
    return before.replace(old, new, -1 if replace_all else 1), count


def _edit_preview(ctx: ToolContext, canonical: str, args: EditFileArguments) -> tuple[Preview, str]:
    """EditFile's preview: the diff the edit makes to the content this loop read, and that
    content's hash; without one, what the edit would replace and why it would fail."""
    limit = ctx.limits.preview_max_bytes
    rel = display(ctx.workspace.relative(canonical))
    base = _observed_content(ctx, canonical)
    if base is not None:
        after, count = _edited(base[0], args.old, args.new, args.replace_all)
        if count == 1 or (count > 1 and args.replace_all):
            return preview_diff(rel, base[0], after, limit), base[1]
        why = (
            "old does not occur in it"
            if count == 0
            else f"old occurs {count} times in it and replace_all is not set"
        )
        note = f"the edit will fail: {why}. It would replace:"
    else:
        note = (
            f"this loop has not read the current {rel} in full: the edit will fail "
            "(stale_read) unless the loop reads it first. It would replace:"
        )
    old_lines = ["-" + line for line in args.old.split("\n")]
    new_lines = ["+" + line for line in args.new.split("\n")]
    header = [f"--- a/{rel}", f"+++ b/{rel}", f"({note})"]
    everything = "all occurrences" if args.replace_all else "one occurrence"
    return content_preview(
        header, "\n".join([f"@@ {everything} @@", *old_lines, *new_lines]), limit
    ), ""


def _clip_line(line: str) -> str:
    # Undecodable bytes were kept as surrogate escapes; show them as U+FFFD.
    line = line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if len(line) > DIFF_MAX_LINE_CHARS:
        return line[:DIFF_MAX_LINE_CHARS] + f"… [{len(line) - DIFF_MAX_LINE_CHARS} more chars]"
    return line


def diff_preview(before: str, after: str) -> str:
    """A compact unified diff (hunk headers and changed lines, 2 lines of context), capped."""
    window = changed_window(before.split("\n"), after.split("\n"), DIFF_CONTEXT_LINES)
    if window is not None and window.span > DIFF_MAX_WINDOW_LINES:
        return f"(no diff preview: the change spans about {len(window.new)} lines)"
    hunks = () if window is None else matched_hunks(window, DIFF_CONTEXT_LINES)
    out = [line[0] + _clip_line(line[1:]) if not line.startswith("@@") else line for line in hunks]
    shown: list[str] = []
    size = 0
    for line in out:
        size += len(line.encode("utf-8")) + 1
        if len(shown) == DIFF_MAX_LINES or size > DIFF_MAX_BYTES:
            shown.append(f"… ({len(out) - len(shown)} more diff lines)")
            break
        shown.append(line)
    return "\n".join(shown)


class EditFile(Tool[EditFileArguments, EditFileArtifact]):
    name: ClassVar[str] = "EditFile"
    description: ClassVar[str] = (
        "Replace exact text in a file: `old` must occur exactly once (or set replace_all). "
        "Requires that this loop has read the whole file with ReadFile and that it has not "
        "changed since. The write is atomic; the result is a short unified diff. Editing a "
        "file that makes programs run code (.git/config, git hooks, .gitmodules, shell "
        "startup files, editor and agent configuration) always waits for a human approver, "
        "whatever the policy."
    )
    arguments: ClassVar[type[Arguments]] = EditFileArguments
    artifact: ClassVar[type[Artifact]] = EditFileArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = (RequirementKind.FILESYSTEM_WRITE.value,)

    def prepare_args(self, args: EditFileArguments, ctx: ToolContext) -> Prepared:
        if not args.old:
            raise arguments_invalid("old", "old must not be empty")
        if args.old == args.new:
            raise arguments_invalid("new", "new is the same as old; the edit would change nothing")
        canonical = _prepare_file_path(ctx, args.path)
        requirement, candidates = _write_request(ctx, canonical)
        preview, base = _edit_preview(ctx, canonical, args)
        return Prepared(
            summary=f"EditFile {display(ctx.workspace.relative(canonical))}",
            requirements=(requirement,),
            artifact=EditFileArtifact(
                path=args.path,
                canonical=canonical,
                old=args.old,
                new=args.new,
                replace_all=args.replace_all,
                base_sha256=base,
            ),
            candidates=candidates,
            preview=preview,
        )

    async def run(self, artifact: EditFileArtifact, ctx: ToolContext) -> ToolResult:
        async with ctx.resources.write_lock:  # never inside an apply of a dry run's changes
            return self._run(artifact, ctx)

    def _run(self, artifact: EditFileArtifact, ctx: ToolContext) -> ToolResult:
        canonical = artifact.canonical
        rel = display(ctx.workspace.relative(canonical))
        changed = resolution_changed(ctx, artifact.path, canonical)
        if changed is not None:
            return changed
        if ctx.workspace.protected.is_protected(canonical):
            return ToolResult.error(
                "write_denied", f"{rel} is a protected path and is never written."
            )
        parent, name = os.path.split(canonical)
        try:
            dir_fd = fsaccess.open_directory(ctx.workspace.root, parent)
        except PathChanged:
            return changed_result(ctx, canonical)
        except (FileNotFoundError, NotADirectoryError):
            return ToolResult.error("file_not_found", f"{rel} does not exist.")
        except OSError as exc:
            return os_failure(exc, rel, "edit")
        try:
            return self._edit(artifact, ctx, dir_fd, name)
        except PathChanged:
            return changed_result(ctx, canonical)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return ToolResult.error("file_not_found", f"{rel} does not exist.")
            return os_failure(exc, rel, "edit")
        finally:
            os.close(dir_fd)

    def _edit(
        self, artifact: EditFileArtifact, ctx: ToolContext, dir_fd: int, name: str
    ) -> ToolResult:
        canonical = artifact.canonical
        rel = display(ctx.workspace.relative(canonical))
        cap = ctx.limits.edit_max_bytes
        opened = _open_existing(dir_fd, name)
        if opened is None:
            return ToolResult.error("not_a_file", f"{rel} is not a regular file.")
        fd, info = opened
        try:
            current = fsaccess.read_up_to(fd, cap)
        finally:
            os.close(fd)
        if current is None:
            return ToolResult.error(
                "too_large", f"{rel} is larger than {cap} bytes; EditFile cannot change it."
            )
        stale = _stale(ctx, canonical, current) or _changed_since_prepare(
            ctx, artifact.base_sha256, current
        )
        if stale is not None:
            return stale
        before = current.decode("utf-8", "surrogateescape")
        after, count = _edited(before, artifact.old, artifact.new, artifact.replace_all)
        if count == 0:
            return ToolResult.error("no_match", f"old does not occur in {rel}.")
        if count > 1 and not artifact.replace_all:
            return ToolResult.error(
                "ambiguous_match",
                f"old occurs {count} times in {rel}; add surrounding text to make it unique "
                "or set replace_all.",
            )
        data = after.encode("utf-8", "surrogateescape")
        if len(data) > cap:
            return ToolResult.error(
                "too_large", f"The edited {rel} would be larger than {cap} bytes."
            )
        fsaccess.replace_file(dir_fd, name, data, info)
        ctx.loop.observations[canonical] = sha256_hex(data)
        plural = "replacement" if count == 1 else "replacements"
        return ToolResult(text=f"edited {rel} ({count} {plural})\n{diff_preview(before, after)}")
