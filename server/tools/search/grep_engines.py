"""Grep's two engines: ripgrep when the server has it, a pure-Python walk otherwise. ripgrep only
says which lines match; which files are eligible, the text, the order and the caps are
decided by the shared scanner (`grep_scan`), so both give the same output."""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import re
import signal
import stat
import subprocess
import time
from dataclasses import dataclass

import anyio
import anyio.abc
import anyio.to_thread

from ...core.models import ToolResult
from ...core.paths import ProtectedPaths
from ...core.tool import ToolContext
from ...sandbox import fsaccess
from ...sandbox.fsaccess import PathChanged
from ...sandbox.helper_view import helper_argv
from ...sandbox.seccomp import SeccompProgram
from ...sandbox.tree_scan import LinkGuard
from ..common import INLINE_READ_BYTES
from .grep_artifact import GrepArtifact
from .grep_scan import GrepOutput, scan_file
from .patterns import (
    GrepGlob,
    LineMatcher,
    PatternUnsupported,
    compile_grep_regex,
    grep_ripgrep_regex,
    whole_text_prefilter,
)
from .walk import NOISE_NAMES, SearchTimedOut, check_deadline, join_path, walk_entries

log = logging.getLogger(__name__)

# Characters that may stand in a protected-path glob handed to ripgrep as an exclusion: with
# these, ripgrep's glob dialect and ours agree, so ripgrep never excludes more than we do.
_RG_SAFE_GLOB = re.compile(r"\*\*/[^\[\]{}\\!]+\Z")


@dataclass(frozen=True, slots=True)
class RipgrepConfinement:
    """What runs ripgrep confined: its executable, bubblewrap, and the seccomp filter."""

    rg_path: str
    bwrap_path: str
    seccomp: SeccompProgram | None = None


@dataclass(frozen=True, slots=True)
class GrepPlan:
    """Everything one Grep run needs, shared by both engines."""

    ctx: ToolContext
    target: str
    is_directory: bool
    shown_prefix: str
    glob: GrepGlob | None
    out: GrepOutput
    # Refuses other names (hard links) of protected files, whatever their own name.
    links: LinkGuard
    deadline: float

    def admissible(self, rel: str) -> bool:
        """Whether ripgrep's report of `rel` (relative to the searched directory) names a
        file the Python walk would also search."""
        current = self.target
        for part in rel.split("/"):
            if part in NOISE_NAMES or part in ("", ".", ".."):
                return False
            current = join_path(current, part)
            if self.ctx.workspace.protected.is_protected(current):
                return False
        return self.glob is None or self.glob.matches(rel)


def python_search(plan: GrepPlan, regex: LineMatcher, whole: LineMatcher | None = None) -> None:
    """The in-server engine: walk, filter and scan, in the same order as ripgrep; `whole`
    (the pattern in multi-line mode) skips a file that holds no match without looking at its
    lines one by one."""

    def is_hit(_: int, text: str) -> bool:
        return regex.search(text) is not None

    prefilter = whole.search if whole is not None else None

    root = plan.ctx.workspace.root
    check_deadline(plan.deadline)
    if not plan.is_directory:
        try:
            fd = fsaccess.open_beneath(root, plan.target)
        except (OSError, PathChanged):
            return
        try:
            if _readable(fd, plan):
                scan_file(fd, plan.shown_prefix, is_hit, plan.out, plan.deadline, prefilter)
        finally:
            os.close(fd)
        return
    try:
        top_fd = fsaccess.open_directory(root, plan.target)
    except (OSError, PathChanged):
        return
    try:
        protected = plan.ctx.workspace.protected
        with contextlib.closing(
            walk_entries(top_fd, plan.target, protected, plan.deadline)
        ) as entries:
            for rel, _, dir_fd, entry in entries:
                if plan.glob is not None and not plan.glob.matches(rel):
                    continue
                try:
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    fd = fsaccess.open_step(dir_fd, entry.name, fsaccess.READ_FLAGS)
                except (OSError, PathChanged):
                    continue
                try:
                    if _readable(fd, plan):
                        scan_file(
                            fd,
                            plan.shown_prefix + rel,
                            is_hit,
                            plan.out,
                            plan.deadline,
                            prefilter,
                        )
                finally:
                    os.close(fd)
                if plan.out.full:
                    return
    finally:
        os.close(top_fd)


def _readable(fd: int, plan: GrepPlan) -> bool:
    """A regular file that is not another name of a protected file (called in a worker)."""
    info = os.fstat(fd)
    return stat.S_ISREG(info.st_mode) and not plan.links.is_protected(info)


def _rg_exclusions(protected: ProtectedPaths) -> list[str]:
    globs = [f"--glob=!{name}" for name in sorted(NOISE_NAMES)]
    # Protected globs keep ripgrep from even reading secrets; the filter here stays the
    # authority (`GrepPlan.admissible`), so only globs whose dialects agree are passed.
    globs += [f"--glob=!{g}" for g in protected.globs if _RG_SAFE_GLOB.match(g)]
    return globs


async def search_in_python(artifact: GrepArtifact, plan: GrepPlan) -> None:
    regex = compile_grep_regex(artifact.pattern, artifact.ignore_case)
    whole = whole_text_prefilter(artifact.pattern, artifact.ignore_case)
    remaining = plan.deadline - time.monotonic()
    with anyio.move_on_after(max(remaining, 0)) as scope:
        # Abandoned on timeout or cancellation (a CancelCall, the server's shutdown): the
        # worker sees `abandoned` (or its deadline) at its next check and stops by itself.
        try:
            await anyio.to_thread.run_sync(
                python_search, plan, regex, whole, abandon_on_cancel=True
            )
        finally:
            plan.out.abandoned = True
    if scope.cancelled_caught:
        raise SearchTimedOut


def _confined_argv(
    confinement: RipgrepConfinement,
    artifact: GrepArtifact,
    pattern: str,
    plan: GrepPlan,
    masked: list[str],
) -> tuple[list[str], list[int]]:
    """bubblewrap's argv running ripgrep for `pattern` (`grep_ripgrep_regex`) over the plan's
    target, and the fds it must be passed (the tree's, opened without following symlinks,
    and the seccomp filter's)."""
    argv = [
        confinement.rg_path,
        "--no-config",
        "--no-ignore",
        "--hidden",
        "--no-messages",
        "--sort=path",
        "--null",
        "--line-number",
        "--with-filename",
        "--no-heading",
        "--color=never",
        "--encoding=none",
        # Only line numbers are read from ripgrep: the text comes from our own read.
        "--max-columns=1",
        f"--max-count={artifact.max_matches + 1}",
        "--ignore-case" if artifact.ignore_case else "--case-sensitive",
    ]
    root = plan.ctx.workspace.root
    if plan.is_directory:
        if plan.glob is not None:
            argv += [f"--glob={g}" for g in plan.glob.expansions]
        # Exclusions last: a later glob wins, so a user glob cannot re-include them.
        argv += _rg_exclusions(plan.ctx.workspace.protected)
        cwd, operand = plan.target, "."
        tree_fd = fsaccess.open_directory(root, plan.target)
    else:
        cwd, name = os.path.split(plan.target)
        operand = "./" + name
        tree_fd = fsaccess.open_beneath(root, plan.target, os.O_PATH)
    argv += ["--", pattern, operand]
    seccomp_fd = None
    try:
        if confinement.seccomp is not None:
            seccomp_fd = confinement.seccomp.open_fd()
    except BaseException:
        os.close(tree_fd)
        raise
    argv = helper_argv(confinement.bwrap_path, plan.target, tree_fd, masked, cwd, argv, seccomp_fd)
    return argv, [tree_fd] if seccomp_fd is None else [tree_fd, seccomp_fd]


async def search_with_ripgrep(
    confinement: RipgrepConfinement, artifact: GrepArtifact, plan: GrepPlan, masked: list[str]
) -> ToolResult | None:
    """Run ripgrep confined to a view of the searched tree with `masked` covered
    (`helper_view`): a path it opens by name can never lead outside that tree."""
    if not os.access(confinement.rg_path, os.X_OK):
        # ripgrep vanished since start-up: the Python engine gives the same answer.
        await search_in_python(artifact, plan)
        return None
    try:
        pattern = grep_ripgrep_regex(artifact.pattern)
    except PatternUnsupported:
        return _pattern_unsupported()  # checked at Prepare: not reached
    try:
        argv, passed = _confined_argv(confinement, artifact, pattern, plan, masked)
    except (OSError, PathChanged):
        return None  # gone or swapped since the checks: nothing of it is searched
    try:
        process = await anyio.open_process(
            argv,
            cwd="/",
            env={"LC_ALL": "C"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=passed,
        )
    except OSError:
        # bubblewrap vanished since start-up: the Python engine gives the same answer.
        await search_in_python(artifact, plan)
        return None
    finally:
        for fd in passed:
            os.close(fd)
    errors = bytearray()
    ending = _Ending.DONE
    try:
        remaining = plan.deadline - time.monotonic()
        with anyio.move_on_after(max(remaining, 0)) as scope:
            async with anyio.create_task_group() as group:
                assert process.stderr is not None
                group.start_soon(_drain, process.stderr, errors)
                ending = await _consume(process, plan)
                if ending is not _Ending.DONE:
                    _kill(process)
    finally:
        _kill(process)
        with anyio.CancelScope(shield=True):
            await process.aclose()
    if scope.cancelled_caught or ending is _Ending.TIMED_OUT:
        raise SearchTimedOut
    if ending is _Ending.DONE and bytes(errors).startswith(b"bwrap:"):
        log.error("the confined search did not start", extra={"detail": bytes(errors[:200])})
        return ToolResult.error(
            "sandbox_failed", "The confined search could not start; nothing was searched."
        )
    if (
        ending is _Ending.DONE
        and process.returncode == 2
        and not plan.out.lines
        and b"regex" in bytes(errors).lower()
    ):
        return _pattern_unsupported()
    return None


def _pattern_unsupported() -> ToolResult:
    return ToolResult.error(
        "pattern_unsupported", "ripgrep could not compile the pattern; simplify it."
    )


# ripgrep's one non-record line (stdout, no NUL): after a match in a file that turns out to be
# binary, `<path>: WARNING: stopped searching binary file after match (found "\0" byte …)`.
_BINARY_WARNING = b": WARNING: stopped searching binary file"


def _records(pending: bytes, current: bytes | None) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """Split ripgrep's output into `(path, line:...)` records and what is left over. A record
    is `path NUL line:text NEWLINE`: split at the NUL first, since a file name may hold a
    newline (the text cannot: a line ends at one, and --max-columns=1 shortens it). A line
    with no NUL that starts with the previous record's path and the binary-file warning is
    skipped; any other newline before a NUL belongs to a file name."""
    records: list[tuple[bytes, bytes]] = []
    start = 0
    while True:
        nul = pending.find(b"\x00", start)
        newline = pending.find(b"\n", start)
        if newline >= 0 and (nul < 0 or newline < nul):
            last = records[-1][0] if records else current
            if last is not None and pending.startswith(last + _BINARY_WARNING, start):
                start = newline + 1
                continue
        end = pending.find(b"\n", nul + 1) if nul >= 0 else -1
        if end < 0:
            return records, pending[start:]
        records.append((pending[start:nul], pending[nul + 1 : end]))
        start = end + 1


async def _consume(process: anyio.abc.Process, plan: GrepPlan) -> _Ending:
    """Read ripgrep's `path NUL line:...` records and scan file by file until ripgrep
    ends, the output is full, or the deadline passes."""
    assert process.stdout is not None
    pending = b""
    current: bytes | None = None
    hits: list[int] = []
    try:
        async for chunk in process.stdout:
            pending += chunk
            records, pending = _records(pending, current)
            for path, rest in records:
                number = rest.partition(b":")[0]
                if not number.isdigit():
                    continue
                if path != current:
                    if current is not None and await _ripgrep_file(current, hits, plan):
                        return _Ending.FULL
                    current, hits = path, []
                hits.append(int(number))
        if current is not None and await _ripgrep_file(current, hits, plan):
            return _Ending.FULL
    except SearchTimedOut:
        return _Ending.TIMED_OUT
    return _Ending.DONE


async def _ripgrep_file(path: bytes, hits: list[int], plan: GrepPlan) -> bool:
    """Scan one file ripgrep reported; True when the output is now full."""
    if plan.is_directory:
        try:
            rel = path.decode("utf-8").removeprefix("./")
        except UnicodeDecodeError:
            return False
        if not plan.admissible(rel):
            return False
        absolute, shown = join_path(plan.target, rel), plan.shown_prefix + rel
    else:
        absolute, shown = plan.target, plan.shown_prefix
    try:
        fd = fsaccess.open_beneath(plan.ctx.workspace.root, absolute)
    except (OSError, PathChanged):
        return False
    lines = frozenset(hits)

    def is_hit(number: int, _: str) -> bool:
        return number in lines

    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return False
        if plan.links.needs_walk(info):
            protected = await anyio.to_thread.run_sync(plan.links.is_protected, info)
        else:
            protected = plan.links.is_protected(info)
        if protected:
            return False
        if info.st_size <= INLINE_READ_BYTES:
            scan_file(fd, shown, is_hit, plan.out, plan.deadline)
        else:
            await anyio.to_thread.run_sync(scan_file, fd, shown, is_hit, plan.out, plan.deadline)
    finally:
        os.close(fd)
    return plan.out.full


class _Ending(enum.Enum):
    """How reading ripgrep's output ended."""

    DONE = "done"
    FULL = "full"
    TIMED_OUT = "timed_out"


def _kill(process: anyio.abc.Process) -> None:
    # os.kill rather than Process.kill: Popen.send_signal polls first, which can reap the
    # child under asyncio's child watcher (that then logs "Unknown child process").
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
            os.kill(process.pid, signal.SIGKILL)


async def _drain(stream: anyio.abc.ByteReceiveStream, into: bytearray) -> None:
    """Keep ripgrep's stderr flowing; remember its first few KiB."""
    async for chunk in stream:
        if len(into) < 4096:
            into += chunk[: 4096 - len(into)]
