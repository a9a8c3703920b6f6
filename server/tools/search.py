"""The search tools: Glob (file paths by pattern) and Grep (lines by regex), DESIGN section 5.

Both walk below an approved root without following symlinks, in name order, skipping noise
directories (`NOISE_NAMES`) and never showing a protected path. Grep runs ripgrep when it
has one and searches in Python otherwise, with the same output either way: ripgrep only
says which lines match; which files are eligible, the context, the order, the caps and the
format are all decided here, by code both engines share.

Pattern dialects, checked at Prepare so that both engines accept exactly the same input:

- Path globs (Glob `pattern`, Grep `glob`): `*` and `?` stay inside one path component,
  `**` as a whole component spans directories, `{a,b}` alternatives (not nested). No
  `[...]`, backslashes or leading `!`. A Glob pattern is matched against the path relative
  to its root; a Grep glob without `/` is matched against file names at any depth, one with
  `/` against the path relative to the searched directory (ripgrep's rule).
- Grep regexes: the subset that Python `re` and ripgrep's Rust regex both read the same
  way. Refused: lookaround, backreferences, atomic groups, possessive quantifiers,
  conditionals, comments, `\\Z`, octal escapes, escapes of characters that are not regex
  metacharacters, a `{` that does not start a repetition, repetitions over 1000, nested
  classes and class set operations (`&&`, `--`, `~~`), inline flags other than `i`, `m`,
  `s`, and line breaks (a match never spans lines). `\\s` means Unicode White_Space in both.
  Outside ASCII, `\\w`, `\\d` and `\\b` follow each engine's Unicode tables, which agree for
  letters and decimal digits.
- Files that are not UTF-8 text (a NUL byte or an invalid sequence anywhere) are skipped.
"""

from __future__ import annotations

import contextlib
import enum
import io
import os
import re
import signal
import stat
import subprocess
import time
import warnings
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Annotated, ClassVar

import anyio
import anyio.abc
import anyio.to_thread
from pydantic import Field

from callgate.server.core.errors import arguments_invalid
from callgate.server.core.models import (
    TREE_PREFIX,
    Requirement,
    RequirementKind,
    RuleCandidate,
    ToolResult,
)
from callgate.server.core.paths import ProtectedPaths, real_path
from callgate.server.core.tool import Arguments, Artifact, Prepared, Tool, ToolContext

from . import fsaccess
from .files import INLINE_READ_BYTES, changed_result, display, resolution_changed
from .fsaccess import PathChanged

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
GLOB_TIMEOUT_SECONDS = 30.0
MAX_PATTERN_CHARS = 1000
MAX_GLOB_ALTERNATIVES = 64
MAX_REPEAT = 1000
MAX_LINE_CHARS = 1000
SUMMARY_PATTERN_CHARS = 80
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY
# Characters that may stand in a protected-path glob handed to ripgrep as an exclusion: with
# these, ripgrep's glob dialect and ours agree, so ripgrep never excludes more than we do.
_RG_SAFE_GLOB = re.compile(r"\*\*/[^\[\]{}\\!]+\Z")


class _TimedOut(Exception):
    pass


def _short(pattern: str) -> str:
    pattern = display(pattern)
    if len(pattern) <= SUMMARY_PATTERN_CHARS:
        return pattern
    return pattern[: SUMMARY_PATTERN_CHARS - 1] + "…"


def _tree_requirement(canonical: str) -> Requirement:
    match = TREE_PREFIX + canonical
    return Requirement(
        kind=RequirementKind.FILESYSTEM_READ.value,
        scope=match,
        match=match,
        description=f"read files below {canonical}",
    )


def _check_deadline(deadline: float) -> None:
    if time.monotonic() >= deadline:
        raise _TimedOut


# Path globs ----------------------------------------------------------------------------------


def _expand_braces(pattern: str, field_name: str) -> list[str]:
    alternatives = [""]
    position = 0
    while position < len(pattern):
        char = pattern[position]
        if char == "}":
            raise arguments_invalid(field_name, "the pattern has a } without a {")
        if char != "{":
            alternatives = [prefix + char for prefix in alternatives]
            position += 1
            continue
        close = pattern.find("}", position + 1)
        if close == -1:
            raise arguments_invalid(field_name, "the pattern has a { without a }")
        body = pattern[position + 1 : close]
        if "{" in body:
            raise arguments_invalid(field_name, "{...} alternatives cannot be nested")
        alternatives = [prefix + option for prefix in alternatives for option in body.split(",")]
        if len(alternatives) > MAX_GLOB_ALTERNATIVES:
            raise arguments_invalid(
                field_name, f"the pattern expands to more than {MAX_GLOB_ALTERNATIVES} globs"
            )
        position = close + 1
    return alternatives


def expand_glob(pattern: str, field_name: str) -> list[str]:
    """Check a path glob against the dialect above; return its `{a,b}` expansions."""
    if not pattern:
        raise arguments_invalid(field_name, "the pattern is empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise arguments_invalid(field_name, f"the pattern is longer than {MAX_PATTERN_CHARS}")
    if not pattern.isprintable():
        raise arguments_invalid(field_name, "the pattern holds control characters")
    if any(char in pattern for char in "[]\\"):
        raise arguments_invalid(
            field_name, "[...] classes and backslashes are not supported; use * and ?"
        )
    if pattern.startswith("!"):
        raise arguments_invalid(field_name, "negated patterns (!...) are not supported")
    expansions = _expand_braces(pattern, field_name)
    for expansion in expansions:
        if expansion.startswith("/"):
            raise arguments_invalid(field_name, "the pattern is relative; it cannot start with /")
        parts = expansion.split("/")
        if "" in parts:
            raise arguments_invalid(field_name, "the pattern has an empty path component")
        if "." in parts or ".." in parts:
            raise arguments_invalid(field_name, "the pattern cannot hold . or .. components")
        if any("**" in part and part != "**" for part in parts):
            raise arguments_invalid(
                field_name, "** must be a whole path component, as in src/**/*.py"
            )
    return expansions


def _glob_body(expansion: str) -> str:
    parts = expansion.split("/")
    out: list[str] = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            out.append("(?s:.*)" if last else "(?:(?s:.*)/)?")
            continue
        for char in part:
            out.append("[^/]*" if char == "*" else "[^/]" if char == "?" else re.escape(char))
        if not last:
            out.append("/")
    return "".join(out)


def _compile_globs(expansions: list[str]) -> re.Pattern[str] | None:
    if not expansions:
        return None
    return re.compile("(?:" + "|".join(_glob_body(e) for e in expansions) + r")\Z")


@dataclass(frozen=True, slots=True)
class GrepGlob:
    """A Grep `glob` filter: name globs match file names, path globs relative paths."""

    expansions: tuple[str, ...]
    name_regex: re.Pattern[str] | None
    path_regex: re.Pattern[str] | None

    @classmethod
    def parse(cls, pattern: str) -> GrepGlob:
        expansions = expand_glob(pattern, "glob")
        return cls(
            expansions=tuple(expansions),
            name_regex=_compile_globs([e for e in expansions if "/" not in e]),
            path_regex=_compile_globs([e for e in expansions if "/" in e]),
        )

    def matches(self, rel: str) -> bool:
        name = rel.rsplit("/", 1)[-1]
        if self.name_regex is not None and self.name_regex.match(name):
            return True
        return self.path_regex is not None and self.path_regex.match(rel) is not None


# Grep regexes --------------------------------------------------------------------------------

_PUNCTUATION_ESCAPES = frozenset("\\.+*?()|[]{}^$#&-~")
_LETTER_ESCAPES = frozenset("dDwWsSbBAtrfvaxuU")
_CLASS_LETTER_ESCAPES = frozenset("dDwWsStrfvaxuU")
# Unicode White_Space, which is what Rust's \s means (Python's adds \x1c-\x1f).
_WHITE_SPACE = "\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
_GROUP_OPENING = re.compile(r"\(\?(?::|P<[A-Za-z_][A-Za-z0-9_]*>|[ims]*(?:-[ims]+)?[:)])")
_REPETITION = re.compile(r"\{([0-9]+)(?:,([0-9]*))?\}")


class PatternUnsupported(ValueError):
    """A Grep regex outside the common dialect; the message says why."""


def _group_problem(rest: str) -> str:
    if rest.startswith(("(?=", "(?!", "(?<=", "(?<!")):
        return "lookaround is not supported"
    if rest.startswith("(?P="):
        return "backreferences are not supported"
    if rest.startswith("(?<"):
        return "write named groups as (?P<name>...) with an ASCII name"
    if rest.startswith("(?P<"):
        return "group names must be ASCII letters, digits and _"
    return "only (...), (?:...), (?P<name>...) and the flags i, m, s are supported in groups"


def _translate_escape(escaped: str, in_class: bool) -> str:
    """The Python form of the escape `\\<escaped>`."""
    if escaped.isdigit():
        raise PatternUnsupported("backreferences and octal escapes are not supported")
    if escaped == "n":
        raise PatternUnsupported("a match never spans lines; remove \\n")
    if escaped in _PUNCTUATION_ESCAPES:
        return "\\" + escaped
    if not (escaped.isascii() and escaped.isalpha()):
        raise PatternUnsupported(
            f"escape only regex metacharacters; write {escaped} without the backslash"
        )
    if escaped not in (_CLASS_LETTER_ESCAPES if in_class else _LETTER_ESCAPES):
        raise PatternUnsupported(f"the escape \\{escaped} is not supported here")
    if escaped == "s":
        return _WHITE_SPACE if in_class else f"[{_WHITE_SPACE}]"
    if escaped == "S":
        if in_class:
            raise PatternUnsupported("\\S inside [...] is not supported")
        return f"[^{_WHITE_SPACE}]"
    return "\\" + escaped


class _RegexTranslator:
    """One pass over a Grep regex, token by token (see `grep_python_regex`)."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.position = 0
        self.out: list[str] = []
        self.in_class = False
        self.class_start = 0
        self.quantified = False  # the previous token was a quantifier

    def translate(self) -> str:
        pattern = self.pattern
        while self.position < len(pattern):
            char = pattern[self.position]
            if char == "\n":
                raise PatternUnsupported("a match never spans lines; remove the line break")
            if char == "\\":
                if self.position + 1 == len(pattern):
                    raise PatternUnsupported("the pattern ends with a lone backslash")
                self._emit(_translate_escape(pattern[self.position + 1], self.in_class), 2)
            elif self.in_class:
                self._class_member(char)
            elif char == "[":
                self._open_class()
            elif char == "(" and pattern.startswith("(?", self.position):
                self._group()
            elif char == "{":
                self._repetition()
            elif char == "+" and self.quantified:
                raise PatternUnsupported("possessive quantifiers (*+, ++, ?+) are not supported")
            elif char == "?" and self.quantified:
                # A lazy quantifier: which lines match does not depend on it.
                self._emit(char, 1)
            else:
                self._emit(char, 1, quantifier=char in "*+?")
        return "".join(self.out)

    def _emit(self, text: str, consumed: int, *, quantifier: bool = False) -> None:
        self.out.append(text)
        self.position += consumed
        self.quantified = quantifier

    def _class_member(self, char: str) -> None:
        if char == "]" and self.position > self.class_start:
            self.in_class = False
        elif char == "[":
            raise PatternUnsupported("nested classes are not supported; write \\[ inside [...]")
        elif self.pattern.startswith(("&&", "--", "~~"), self.position):
            raise PatternUnsupported("class set operations (&&, --, ~~) are not supported")
        self._emit(char, 1)

    def _open_class(self) -> None:
        self.in_class = True
        negated = self.pattern.startswith("[^", self.position)
        self._emit("[^" if negated else "[", 2 if negated else 1)
        self.class_start = self.position  # a ] right here is a literal ]

    def _group(self) -> None:
        opening = _GROUP_OPENING.match(self.pattern, self.position)
        if opening is None:
            raise PatternUnsupported(_group_problem(self.pattern[self.position :]))
        self._emit(opening.group(0), len(opening.group(0)))

    def _repetition(self) -> None:
        repetition = _REPETITION.match(self.pattern, self.position)
        if repetition is None:
            raise PatternUnsupported(
                "a { must start a repetition such as {2} or {1,3}; write \\{ for the character"
            )
        if any(int(bound) > MAX_REPEAT for bound in repetition.groups() if bound):
            raise PatternUnsupported(f"repetitions are limited to {MAX_REPEAT}")
        self._emit(repetition.group(0), len(repetition.group(0)), quantifier=True)


def grep_python_regex(pattern: str) -> str:
    """Translate a Grep regex into the Python regex that matches the same lines as ripgrep;
    raises PatternUnsupported for anything outside the common dialect."""
    return _RegexTranslator(pattern).translate()


def compile_grep_regex(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    """The Python regex for a Grep pattern; PatternUnsupported when either engine would
    refuse it or read it differently."""
    translated = grep_python_regex(pattern)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return re.compile(translated, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise PatternUnsupported(f"invalid regex: {exc.msg}") from None
        except (FutureWarning, DeprecationWarning):
            raise PatternUnsupported("the pattern is ambiguous between regex dialects") from None


# Walking -------------------------------------------------------------------------------------


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _kind_now(path: str) -> str:
    """ "directory", "file" or "missing": one stat, inline (cheaper than a thread hand-off)."""
    if os.path.isdir(path):
        return "directory"
    return "file" if os.path.lexists(path) else "missing"


def _gone(rel: str) -> ToolResult:
    return ToolResult.error("file_not_found", f"{display(rel)} no longer exists.")


def _join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}"


def walk_entries(
    top_fd: int, top: str, protected: ProtectedPaths, deadline: float
) -> Generator[tuple[str, str, int, os.DirEntry[str]], None, None]:
    """Every non-directory entry below the open directory `top_fd` (canonical path `top`):
    (path relative to top, absolute path, fd of its directory, entry), depth first in name
    order. Noise and protected names and names that are not UTF-8 are skipped; directory
    symlinks are never followed. Raises _TimedOut past `deadline`."""
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
            _check_deadline(deadline)
            name = entry.name
            if name in NOISE_NAMES or not _is_utf8(name):
                continue
            entry_path = _join(absolute, name)
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
                child = fsaccess.open_step(fd, name, _DIRECTORY_FLAGS)
            except (OSError, PathChanged):
                continue
            push(child, entry_path, entry_rel)
    finally:
        for fd, *_ in stack:
            if fd != top_fd:
                os.close(fd)


# Glob ----------------------------------------------------------------------------------------


class GlobArguments(Arguments):
    pattern: str = Field(
        description=(
            "Path glob relative to root: * and ? within a name, ** for any directories, "
            "{a,b} alternatives; e.g. src/**/*.py or *.{md,txt}."
        )
    )
    root: str | None = Field(
        default=None, description="Directory to search, relative to the workspace root."
    )


class GlobArtifact(Artifact):
    root: str | None
    canonical_root: str
    pattern: str


def _literal_prefix(expansions: list[str]) -> list[str]:
    """The leading path components every expansion shares and that hold no wildcard."""
    split = [e.split("/")[:-1] for e in expansions]
    prefix: list[str] = []
    for parts in zip(*split, strict=False):
        first = parts[0]
        if any(part != first for part in parts) or any(c in first for c in "*?"):
            break
        prefix.append(first)
    return prefix


@dataclass(slots=True)
class _GlobFound:
    paths: list[str] = field(default_factory=list)
    more: bool = False


def _glob_walk(
    ctx: ToolContext, root: str, expansions: list[str], limit: int, deadline: float
) -> _GlobFound:
    workspace = ctx.workspace
    regex = _compile_globs(expansions)
    assert regex is not None
    found = _GlobFound()
    prefix = _literal_prefix(expansions)
    start = root
    for part in prefix:
        start = _join(start, part)
        if part in NOISE_NAMES or workspace.protected.is_protected(start):
            return found
    try:
        top_fd = fsaccess.open_directory(workspace.root, start)
    except (OSError, PathChanged):
        return found
    shown_prefix = "" if root == workspace.root else workspace.relative(root) + "/"
    lead = "/".join(prefix) + "/" if prefix else ""
    try:
        with contextlib.closing(
            walk_entries(top_fd, start, workspace.protected, deadline)
        ) as entries:
            for below, entry_path, _, entry in entries:
                rel = lead + below
                if not regex.match(rel) or not _globbable(entry, entry_path, ctx):
                    continue
                if len(found.paths) == limit:
                    found.more = True
                    break
                found.paths.append(shown_prefix + rel)
    finally:
        os.close(top_fd)
    return found


def _globbable(entry: os.DirEntry[str], entry_path: str, ctx: ToolContext) -> bool:
    """Regular files, and symlinks to regular files that stay inside the workspace and are
    not protected; everything else (directories, devices, dangling links) is not listed."""
    try:
        if entry.is_file(follow_symlinks=False):
            return True
        if not entry.is_symlink():
            return False
    except OSError:
        return False
    target = real_path(entry_path)
    return (
        target is not None
        and ctx.workspace.contains(target)
        and not ctx.workspace.protected.is_protected(target)
        and os.path.isfile(target)
    )


class Glob(Tool[GlobArguments, GlobArtifact]):
    name: ClassVar[str] = "Glob"
    description: ClassVar[str] = (
        "List files whose path (relative to root, default the workspace root) matches a "
        "glob: * and ? within a name, ** across directories, {a,b} alternatives. Paths come "
        "sorted and workspace-relative, at most 500. Noise directories (.git, node_modules, "
        "__pycache__, .venv, caches) are skipped and directory symlinks are not followed."
    )
    arguments: ClassVar[type[Arguments]] = GlobArguments
    artifact: ClassVar[type[Artifact]] = GlobArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = (RequirementKind.FILESYSTEM_READ.value,)

    def __init__(self, timeout_seconds: float = GLOB_TIMEOUT_SECONDS) -> None:
        self.timeout_seconds = timeout_seconds

    def prepare_args(self, args: GlobArguments, ctx: ToolContext) -> Prepared:
        expand_glob(args.pattern, "pattern")
        if args.root is None:
            canonical = ctx.workspace.root
        else:
            canonical = ctx.workspace.resolve(args.root, "root")
            if not os.path.isdir(canonical):
                raise arguments_invalid("root", "the root is not a directory")
        requirement = _tree_requirement(canonical)
        rel = display(ctx.workspace.relative(canonical))
        return Prepared(
            summary=f"Glob {_short(args.pattern)} in {rel}",
            requirements=(requirement,),
            artifact=GlobArtifact(root=args.root, canonical_root=canonical, pattern=args.pattern),
            candidates=(
                RuleCandidate(requirement.kind, requirement.match, requirement.description),
            ),
        )

    async def run(self, artifact: GlobArtifact, ctx: ToolContext) -> ToolResult:
        root = artifact.canonical_root
        rel_root = display(ctx.workspace.relative(root))
        if artifact.root is not None:
            changed = resolution_changed(ctx, artifact.root, root)
            if changed is not None:
                return changed
        if ctx.workspace.protected.is_protected(root):
            return ToolResult.error("read_denied", f"{rel_root} is protected and never listed.")
        kind = _kind_now(root)
        if kind == "missing":
            return _gone(rel_root)
        if kind != "directory":
            return ToolResult.error("not_a_directory", f"{rel_root} is no longer a directory.")
        expansions = expand_glob(artifact.pattern, "pattern")
        limit = ctx.limits.glob_max_results
        deadline = time.monotonic() + self.timeout_seconds
        try:
            found = await anyio.to_thread.run_sync(
                _glob_walk, ctx, root, expansions, limit, deadline
            )
        except _TimedOut:
            return ToolResult.error(
                "timed_out",
                f"Glob did not finish within {self.timeout_seconds:g} seconds; "
                "narrow the pattern or root.",
            )
        if not found.paths:
            return ToolResult(text=f"no files match {display(artifact.pattern)} in {rel_root}")
        lines = [display(path) for path in found.paths]
        if found.more:
            lines.append(
                f"[showing the first {limit} paths; more match: narrow the pattern or root]"
            )
        return ToolResult(text="\n".join(lines))


# Grep ----------------------------------------------------------------------------------------


class GrepArguments(Arguments):
    pattern: str = Field(
        min_length=1,
        max_length=MAX_PATTERN_CHARS,
        description="Regular expression matched against each line (common Rust/Python subset).",
    )
    path: str | None = Field(
        default=None,
        description="Directory or file to search, relative to the workspace root.",
    )
    glob: str | None = Field(
        default=None,
        description="Only files matching this glob: a name glob such as *.py or *.{ts,tsx}, "
        "or a path glob relative to path such as src/**/*.py.",
    )
    ignore_case: bool = Field(default=False, description="Match case-insensitively.")
    context_lines: Annotated[int, Field(ge=0, le=10)] = Field(
        default=0, description="Lines of context shown before and after each match."
    )
    max_matches: Annotated[int, Field(ge=1, le=200)] = Field(
        default=200, description="Stop after this many matching lines."
    )


class GrepArtifact(Artifact):
    path: str | None
    canonical: str
    is_directory: bool
    pattern: str
    glob: str | None
    ignore_case: bool
    context_lines: int
    max_matches: int


@dataclass(slots=True)
class GrepOutput:
    """The lines found so far, within the match and byte caps."""

    max_matches: int
    max_bytes: int
    context: int
    lines: list[str] = field(default_factory=list)
    size: int = 0
    matches: int = 0
    more_matches: bool = False
    over_bytes: bool = False

    @property
    def full(self) -> bool:
        return self.more_matches or self.over_bytes


def _clip(text: str) -> str:
    if len(text) <= MAX_LINE_CHARS:
        return text
    return text[:MAX_LINE_CHARS] + f" [… {len(text) - MAX_LINE_CHARS} more chars]"


class _FileScan:
    """The output lines one file contributes, held back until the whole file has been read:
    a file that turns out not to be UTF-8 text (a NUL byte, an invalid sequence) adds
    nothing, wherever that shows."""

    def __init__(self, rel: str, out: GrepOutput) -> None:
        self.shown = display(rel)
        self.out = out
        self.pending: list[str] = []
        self.size = out.size
        self.matches = out.matches
        self.more = False
        self.over = False
        self.collecting = True
        self.before: deque[tuple[int, str]] = deque(maxlen=out.context)
        self.after = 0
        self.last = 0  # the last line number added

    def feed(self, number: int, text: str, hit: bool) -> None:
        out = self.out
        if hit:
            if self.matches == out.max_matches:
                self.more = True
                self.collecting = False
                return
            group = [*self.before, (number, text)]
            self.before.clear()
            for index, (line_number, line_text) in enumerate(group):
                if not self._add(line_number, line_text, hit=index == len(group) - 1):
                    return
            self.matches += 1
            self.after = out.context
        elif self.after:
            self.after -= 1
            self._add(number, text, hit=False)
        elif out.context:
            self.before.append((number, text))

    def _add(self, number: int, text: str, *, hit: bool) -> bool:
        entries: list[str] = []
        first_here = not self.last
        if self.out.context and (self.out.lines if first_here else number > self.last + 1):
            entries.append("--")
        mark = ":" if hit else "-"
        entries.append(f"{self.shown}{mark}{number}{mark}{_clip(text)}")
        cost = sum(len(entry.encode("utf-8")) + 1 for entry in entries)
        if self.size + cost > self.out.max_bytes:
            self.over = True
            self.collecting = False
            return False
        self.pending.extend(entries)
        self.size += cost
        self.last = number
        return True

    def commit(self) -> None:
        out = self.out
        out.lines.extend(self.pending)
        out.size = self.size
        out.matches = self.matches
        out.more_matches = out.more_matches or self.more
        out.over_bytes = out.over_bytes or self.over


def scan_file(
    fd: int, rel: str, is_hit: Callable[[int, str], bool], out: GrepOutput, deadline: float
) -> None:
    """Search one open file and add its lines to `out` (all of them, or none if the file is
    not UTF-8 text). `is_hit` decides whether a line matches."""
    _check_deadline(deadline)
    reader = io.BufferedReader(io.FileIO(fd, "rb", closefd=False), 1 << 16)
    scan = _FileScan(rel, out)
    for number, raw in enumerate(reader, start=1):
        if number % 4096 == 0:
            _check_deadline(deadline)
        if b"\x00" in raw:
            return
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return
        if scan.collecting:
            text = text.removesuffix("\n")
            scan.feed(number, text, is_hit(number, text))
    scan.commit()


def _grep_result(out: GrepOutput, rel: str) -> ToolResult:
    if not out.lines:
        return ToolResult(text=f"no matches in {display(rel)}")
    lines = list(out.lines)
    if out.more_matches:
        lines.append(
            f"[stopped after {out.max_matches} matches; more exist: narrow the pattern, "
            "path or glob]"
        )
    if out.over_bytes:
        lines.append(f"[output capped at {out.max_bytes} bytes; narrow the pattern, path or glob]")
    return ToolResult(text="\n".join(lines))


@dataclass(frozen=True, slots=True)
class _GrepPlan:
    """Everything one Grep run needs, shared by both engines."""

    ctx: ToolContext
    target: str
    is_directory: bool
    shown_prefix: str
    glob: GrepGlob | None
    out: GrepOutput
    deadline: float

    def admissible(self, rel: str) -> bool:
        """Whether ripgrep's report of `rel` (relative to the searched directory) names a
        file the Python walk would also search."""
        current = self.target
        for part in rel.split("/"):
            if part in NOISE_NAMES or part in ("", ".", ".."):
                return False
            current = _join(current, part)
            if self.ctx.workspace.protected.is_protected(current):
                return False
        return self.glob is None or self.glob.matches(rel)


def _python_search(plan: _GrepPlan, regex: re.Pattern[str]) -> None:
    """The pure-Python engine: walk, filter and scan, in the same order as ripgrep."""

    def is_hit(_: int, text: str) -> bool:
        return regex.search(text) is not None

    root = plan.ctx.workspace.root
    _check_deadline(plan.deadline)
    if not plan.is_directory:
        try:
            fd = fsaccess.open_beneath(root, plan.target)
        except (OSError, PathChanged):
            return
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                scan_file(fd, plan.shown_prefix, is_hit, plan.out, plan.deadline)
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
                    if stat.S_ISREG(os.fstat(fd).st_mode):
                        scan_file(fd, plan.shown_prefix + rel, is_hit, plan.out, plan.deadline)
                finally:
                    os.close(fd)
                if plan.out.full:
                    return
    finally:
        os.close(top_fd)


def _rg_exclusions(protected: ProtectedPaths) -> list[str]:
    globs = [f"--glob=!{name}" for name in sorted(NOISE_NAMES)]
    # Protected globs keep ripgrep from even reading secrets; the filter here stays the
    # authority (`_GrepPlan.admissible`), so only globs whose dialects agree are passed.
    globs += [f"--glob=!{g}" for g in protected.globs if _RG_SAFE_GLOB.match(g)]
    return globs


class Grep(Tool[GrepArguments, GrepArtifact]):
    name: ClassVar[str] = "Grep"
    description: ClassVar[str] = (
        "Search file contents with a regular expression, line by line. Output lines are "
        "`path:line:text` (context lines `path-line-text`), sorted by path then line, at "
        "most 200 matches and 64 KiB. path may be a directory (default the workspace root) "
        "or one file; glob narrows the files (*.py, *.{ts,tsx}, src/**/*.go). Lookaround and "
        "backreferences are not supported; binary and non-UTF-8 files are skipped."
    )
    arguments: ClassVar[type[Arguments]] = GrepArguments
    artifact: ClassVar[type[Artifact]] = GrepArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = (RequirementKind.FILESYSTEM_READ.value,)

    def __init__(self, rg_path: str | None) -> None:
        """`rg_path` is the ripgrep executable, or None to always search in Python."""
        self.rg_path = rg_path

    def prepare_args(self, args: GrepArguments, ctx: ToolContext) -> Prepared:
        try:
            compile_grep_regex(args.pattern, args.ignore_case)
        except PatternUnsupported as exc:
            raise arguments_invalid("pattern", str(exc)) from None
        if args.path is None:
            canonical = ctx.workspace.root
        else:
            canonical = ctx.workspace.resolve(args.path, "path")
        if os.path.isdir(canonical):
            is_directory = True
        elif os.path.isfile(canonical):
            is_directory = False
        else:
            raise arguments_invalid("path", "the path is neither a directory nor a file")
        if args.glob is not None:
            if not is_directory:
                raise arguments_invalid("glob", "glob applies only when path is a directory")
            GrepGlob.parse(args.glob)
        if is_directory:
            requirement = _tree_requirement(canonical)
        else:
            requirement = Requirement(
                kind=RequirementKind.FILESYSTEM_READ.value,
                scope=canonical,
                match=canonical,
                description=f"read {canonical}",
            )
        rel = display(ctx.workspace.relative(canonical))
        return Prepared(
            summary=f"Grep {_short(args.pattern)} in {rel}",
            requirements=(requirement,),
            artifact=GrepArtifact(
                path=args.path,
                canonical=canonical,
                is_directory=is_directory,
                pattern=args.pattern,
                glob=args.glob,
                ignore_case=args.ignore_case,
                context_lines=args.context_lines,
                max_matches=min(args.max_matches, ctx.limits.grep_max_matches),
            ),
            candidates=(
                RuleCandidate(requirement.kind, requirement.match, requirement.description),
            ),
        )

    async def run(self, artifact: GrepArtifact, ctx: ToolContext) -> ToolResult:
        target = artifact.canonical
        workspace = ctx.workspace
        rel = workspace.relative(target)
        if artifact.path is not None:
            changed = resolution_changed(ctx, artifact.path, target)
            if changed is not None:
                return changed
        if workspace.protected.is_protected(target):
            return ToolResult.error("read_denied", f"{display(rel)} is protected and never read.")
        kind = _kind_now(target)
        if kind == "missing":
            return _gone(rel)
        if (kind == "directory") != artifact.is_directory:
            return changed_result(ctx, target)
        timeout = ctx.limits.grep_timeout_seconds
        if artifact.is_directory:
            shown_prefix = "" if target == workspace.root else rel + "/"
        else:
            shown_prefix = rel
        plan = _GrepPlan(
            ctx=ctx,
            target=target,
            is_directory=artifact.is_directory,
            shown_prefix=shown_prefix,
            glob=GrepGlob.parse(artifact.glob) if artifact.glob is not None else None,
            out=GrepOutput(
                max_matches=artifact.max_matches,
                max_bytes=ctx.limits.grep_max_bytes,
                context=artifact.context_lines,
            ),
            deadline=time.monotonic() + timeout,
        )
        try:
            failure = None
            if self.rg_path is None:
                await self._search_in_python(artifact, plan)
            else:
                failure = await self._search_with_ripgrep(self.rg_path, artifact, plan)
        except _TimedOut:
            return ToolResult.error(
                "timed_out",
                f"Grep did not finish within {timeout:g} seconds; "
                "narrow the pattern, path or glob.",
            )
        if failure is not None:
            return failure
        return _grep_result(plan.out, rel)

    async def _search_in_python(self, artifact: GrepArtifact, plan: _GrepPlan) -> None:
        regex = compile_grep_regex(artifact.pattern, artifact.ignore_case)
        remaining = plan.deadline - time.monotonic()
        with anyio.move_on_after(max(remaining, 0)) as scope:
            # Abandoned on timeout: the walk also checks the deadline and stops by itself.
            await anyio.to_thread.run_sync(_python_search, plan, regex, abandon_on_cancel=True)
        if scope.cancelled_caught:
            raise _TimedOut

    async def _search_with_ripgrep(
        self, rg_path: str, artifact: GrepArtifact, plan: _GrepPlan
    ) -> ToolResult | None:
        max_count = artifact.max_matches + 1
        argv = [
            rg_path,
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
            f"--max-count={max_count}",
            "--ignore-case" if artifact.ignore_case else "--case-sensitive",
        ]
        if plan.is_directory:
            if plan.glob is not None:
                argv += [f"--glob={g}" for g in plan.glob.expansions]
            # Exclusions last: a later glob wins, so a user glob cannot re-include them.
            argv += _rg_exclusions(plan.ctx.workspace.protected)
            cwd, operand = plan.target, "."
        else:
            cwd, name = os.path.split(plan.target)
            operand = "./" + name
        argv += ["--", artifact.pattern, operand]
        try:
            process = await anyio.open_process(
                argv,
                cwd=cwd,
                env={"LC_ALL": "C"},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError:
            # ripgrep vanished since start-up: the Python engine gives the same answer.
            await self._search_in_python(artifact, plan)
            return None
        errors = bytearray()
        ending = _Ending.DONE
        try:
            remaining = plan.deadline - time.monotonic()
            with anyio.move_on_after(max(remaining, 0)) as scope:
                async with anyio.create_task_group() as group:
                    assert process.stderr is not None
                    group.start_soon(_drain, process.stderr, errors)
                    ending = await self._consume(process, plan)
                    if ending is not _Ending.DONE:
                        _kill(process)
        finally:
            _kill(process)
            with anyio.CancelScope(shield=True):
                await process.aclose()
        if scope.cancelled_caught or ending is _Ending.TIMED_OUT:
            raise _TimedOut
        if (
            ending is _Ending.DONE
            and process.returncode == 2
            and not plan.out.lines
            and b"regex" in bytes(errors).lower()
        ):
            return ToolResult.error(
                "pattern_unsupported",
                "ripgrep could not compile the pattern; simplify it.",
            )
        return None

    async def _consume(self, process: anyio.abc.Process, plan: _GrepPlan) -> _Ending:
        """Read ripgrep's `path NUL line:...` records and scan file by file until ripgrep
        ends, the output is full, or the deadline passes."""
        assert process.stdout is not None
        pending = b""
        current: bytes | None = None
        hits: list[int] = []
        try:
            async for chunk in process.stdout:
                pending += chunk
                *records, pending = pending.split(b"\n")
                for record in records:
                    path, separator, rest = record.partition(b"\x00")
                    number = rest.partition(b":")[0]
                    if not separator or not number.isdigit():
                        continue
                    if path != current:
                        if current is not None and await self._ripgrep_file(current, hits, plan):
                            return _Ending.FULL
                        current, hits = path, []
                    hits.append(int(number))
            if current is not None and await self._ripgrep_file(current, hits, plan):
                return _Ending.FULL
        except _TimedOut:
            return _Ending.TIMED_OUT
        return _Ending.DONE

    async def _ripgrep_file(self, path: bytes, hits: list[int], plan: _GrepPlan) -> bool:
        """Scan one file ripgrep reported; True when the output is now full."""
        if plan.is_directory:
            try:
                rel = path.decode("utf-8").removeprefix("./")
            except UnicodeDecodeError:
                return False
            if not plan.admissible(rel):
                return False
            absolute, shown = _join(plan.target, rel), plan.shown_prefix + rel
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
            if info.st_size <= INLINE_READ_BYTES:
                scan_file(fd, shown, is_hit, plan.out, plan.deadline)
            else:
                await anyio.to_thread.run_sync(
                    scan_file, fd, shown, is_hit, plan.out, plan.deadline
                )
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
