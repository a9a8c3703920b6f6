"""Shell-aware matching of `command.execute` rules: exact commands and `Bash(<tokens>:*)` families.

A command is parsed with tree-sitter-bash (never string prefixes or regexes) into *segments*: one
per command, split at `&&`, `||`, `;`, `|`, `&`, newlines, subshells and `{ …; }` groups, plus
the commands inside substitutions (`$(…)`, backticks, `<(…)`, `>(…)`) and inside literal command
strings (`bash -c '…'`, `eval …`, `trap '…'`, `watch '…'`, `find -exec … ;`), which are marked
nested. Allow under-matches and deny over-matches (design section 4.2):

- **Allow**: an exact rule equal to the normalized command; otherwise the parse must be fully
  understood and have at least one segment, and every segment (nested ones included) must be
  simple and covered by some family, different segments possibly by different families. A family
  covers a simple segment whose leading words are *bare* (unquoted, unescaped, no expansion or
  glob) and equal to its tokens: `/usr/bin/git` is not `git`, `git logx` is not `git log`.
- **Deny**: an exact rule equal to the normalized command, or a family matching the leading words
  of any segment anywhere, simple or not. Quoting is removed (`"rm"`, `r'm'`, `\\rm` are `rm`),
  the command word is compared by basename (`/bin/rm` is `rm`), a word decided at run time
  matches any token (an unquoted expansion or glob matches the rest of the family), and after a
  transparent wrapper (`WRAPPERS`: `sudo`, `env`, `timeout`, `nice`, `xargs`, `command`,
  `exec`, reserved words …) or a command word decided at run time, every later word that does
  not start with `-` is tried as the command too.

Both also read each segment with the program knowledge base (`programs`), one reviewed table
of what programs and their options do:

- **Allow** by a family also needs the segment's reading to stay within what the family's own
  words imply: every option known to the table for that program (and subcommand), and none
  that writes, deletes, runs code or reaches the network unless the family's words already do
  (`Bash(git log:*)` does not cover `git log --output=x`; `Bash(cp:*)` covers `cp -r a b`,
  since copying writes). Words that imply running code (`Bash(make:*)`, `Bash(python:*)`)
  imply everything code can do. A program the table does not list is opaque: a family naming
  it covers it as before (its words imply whatever that program does).
- **Deny** by a family also matches what the table knows to be equivalent: a family naming
  only a program that stands for an action (`rm`: delete) matches every segment whose reading
  has that action (`unlink`, `find -delete`, `git clean`, `rsync --delete`, …), and a family with
  options matches the same program and subcommand given those options in any spelling or
  order, after global options (`Bash(git push --force:*)` matches `git -C d push origin -f`).
- **Candidates** offer a family only for a program (and subcommand) the table lists as
  read-only, when the command seen is itself known and read-only; `family_words` says what it
  covers. **Warnings** (`command_warnings`) list what a command's options and scripts do
  beyond what its words suggest.

The commands are split by `shell_parse`; what programs do with their words (shells,
wrappers, interpreters, find's actions) is the data in `program_table` and `programs`.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .program_table import runs_other_code
from .programs import TABLE, Effect, Reading, lookup, read
from .programs.build import NAMED_BY
from .shell_parse import (
    BARE_WORD,
    MANY_KINDS,
    MAX_NESTING,
    ParsedCommand,
    Segment,
    WordKind,
    normalize_command,
    parse_command,
)

__all__ = [
    "MAX_NESTING",
    "CommandMatcher",
    "CommandPatternError",
    "Family",
    "ParsedCommand",
    "Segment",
    "WordKind",
    "command_allowed",
    "command_denied",
    "command_inert",
    "command_pattern",
    "command_warnings",
    "denied_program",
    "family_read_only",
    "family_words",
    "is_family_pattern",
    "normalize_command",
    "parse_command",
    "parse_family",
    "rule_candidates",
    "words_inert",
]

FAMILY_PREFIX = "Bash("
FAMILY_SUFFIX = ":*)"

_FAMILY_BODY = re.compile(r"[ A-Za-z0-9_.,/:@%+=-]*")

_MAX_FAMILY_TOKENS = 16


class CommandPatternError(ValueError):
    """A command rule pattern that is not an exact command or a valid `Bash(<tokens>:*)`."""


@dataclass(frozen=True, slots=True)
class Family:
    """`Bash(<tokens>:*)`: commands whose every segment starts with exactly these bare tokens."""

    tokens: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_tokens(self.tokens)

    @property
    def pattern(self) -> str:
        return f"{FAMILY_PREFIX}{' '.join(self.tokens)}{FAMILY_SUFFIX}"

    def covers(self, segment: Segment) -> bool:
        """Allow semantics: a simple segment whose leading bare words equal the tokens, and whose
        reading stays within what the tokens imply (see the module docstring)."""
        count = len(self.tokens)
        if not segment.simple or len(segment.words) < count:
            return False
        if not all(
            segment.kinds[i] is WordKind.BARE and segment.words[i] == token
            for i, token in enumerate(self.tokens)
        ):
            return False
        reading = _segment_reading(segment, 0, basename=False)
        if reading.opaque_at is not None and reading.opaque_at < count:
            return True
        if reading.unknown_after(count):
            return False
        implied = _implied(self.tokens)
        if Effect.CODE in implied:
            return True
        effects = set(reading.effects)
        effects.update(f.effect for f in reading.findings if f.position >= count)
        effects.discard(Effect.READ)
        return effects <= implied

    def denies(self, segment: Segment) -> bool:
        """Deny semantics: the tokens match the segment's words at any of its starts, or the
        segment does what the table knows the tokens to do (see the module docstring)."""
        if any(self._matches_at(segment, start) for start in segment.starts):
            return True
        shape = _deny_shape(self.tokens)
        if shape is None:
            return False
        path, options, actions = shape
        for start in segment.starts:
            reading = _segment_reading(segment, start, basename=True)
            if actions and (
                reading.actions & actions
                or reading.may_be_options & actions
                or "*" in reading.may_be_options
            ):
                return True
            if reading.path[: len(path)] == path and options <= reading.options:
                return True
        return False

    def _matches_at(self, segment: Segment, start: int) -> bool:
        for offset, token in enumerate(self.tokens):
            index = start + offset
            if index >= len(segment.words):
                return False
            kind = segment.kinds[index]
            if kind in MANY_KINDS:
                return True
            if kind is WordKind.DYNAMIC:
                continue
            word = segment.words[index]
            if offset == 0:
                if posixpath.basename(word) != posixpath.basename(token):
                    return False
            elif word != token:
                return False
        return True


class CommandMatcher:
    """Exact command patterns and families of one effect, matched with allow or deny semantics."""

    def __init__(self, exact: Iterable[str] = (), families: Iterable[Family] = ()) -> None:
        self.exact = frozenset(normalize_command(pattern) for pattern in exact)
        self.families = tuple(dict.fromkeys(families))

    def allowing(self, command: str) -> tuple[str, ...]:
        """The patterns that together allow `command`, or () when it is not allowed."""
        normalized = normalize_command(command)
        if normalized in self.exact:
            return (normalized,)
        parsed = parse_command(normalized)
        if not parsed.fully_understood or not parsed.segments:
            return ()
        used: dict[str, None] = {}
        for segment in parsed.segments:
            covering = [family for family in self.families if family.covers(segment)]
            if not covering:
                return ()
            used.update((family.pattern, None) for family in covering)
        return tuple(used)

    def denying(self, command: str) -> tuple[str, ...]:
        """The patterns that deny `command` (an exact match, or a family matching any segment)."""
        normalized = normalize_command(command)
        found = [normalized] if normalized in self.exact else []
        segments = parse_command(normalized).segments
        found.extend(
            family.pattern
            for family in self.families
            if any(family.denies(segment) for segment in segments)
        )
        return tuple(found)

    def allows(self, command: str) -> bool:
        return bool(self.allowing(command))

    def denies(self, command: str) -> bool:
        return bool(self.denying(command))


def command_allowed(command: str, exact: Iterable[str], families: Iterable[Family]) -> bool:
    """True when exact allow patterns or allow families cover `command` (see the module doc)."""
    return CommandMatcher(exact, families).allows(command)


def command_denied(command: str, exact: Iterable[str], families: Iterable[Family]) -> bool:
    """True when an exact deny pattern or a deny family matches `command` anywhere."""
    return CommandMatcher(exact, families).denies(command)


def is_family_pattern(pattern: str) -> bool:
    return pattern.startswith(FAMILY_PREFIX)


@functools.lru_cache(maxsize=1024)
def parse_family(pattern: str) -> Family:
    """Parse `Bash(<tokens>:*)`: one or more bare tokens separated by spaces, never zero."""
    if not (pattern.startswith(FAMILY_PREFIX) and pattern.endswith(FAMILY_SUFFIX)):
        raise CommandPatternError(
            "a command family must look like Bash(<command> <subcommand>:*), e.g. Bash(git log:*)"
        )
    body = pattern[len(FAMILY_PREFIX) : -len(FAMILY_SUFFIX)]
    if not _FAMILY_BODY.fullmatch(body):
        raise CommandPatternError(
            "a command family holds only plain words (letters, digits and _ . , / : @ % + = -) "
            "separated by spaces"
        )
    return Family(tuple(body.split()))


def command_pattern(pattern: str) -> str:
    """Validate a `command.execute` rule pattern and return its canonical form."""
    if is_family_pattern(pattern):
        return parse_family(pattern).pattern
    normalized = normalize_command(pattern)
    if not normalized:
        raise CommandPatternError("an exact command pattern must not be blank")
    return normalized


def rule_candidates(command: str) -> list[str]:
    """The allow patterns an "always" decision on `command` would save.

    Always the exact normalized command. Also, only when the command is one simple segment
    that the program table reads as known and read-only (a program, or a program and its
    subcommands, listed as read-only, with options all known to only read), a family over the
    program and subcommand words (`git log --oneline` gives `Bash(git log:*)`, `ls -la` gives
    `Bash(ls:*)`); `family_words` says what it covers. Nothing wider than what was seen: no
    family for a program that writes, deletes, runs code or reaches the network (`make test`,
    `npm test`, `cp`), for one the table does not list, for a command word holding a `/`, for
    a shell, a transparent wrapper, an interpreter or a code-running builtin, or for a command
    whose words are not provably inert (`words_inert`).
    """
    normalized = normalize_command(command)
    if not normalized:
        return []
    candidates = [normalized]
    parsed = parse_command(normalized)
    if not parsed.fully_understood or len(parsed.segments) != 1:
        return candidates
    (segment,) = parsed.segments
    if not segment.simple or segment.nested or not words_inert(normalized, segment):
        return candidates
    head = segment.words[0]
    if "/" in head or runs_other_code(head):
        return candidates
    reading = _segment_reading(segment, 0, basename=False)
    if (
        reading.entry is None
        or not reading.entry.read_only
        or reading.opaque_at is not None
        or reading.findings
        or reading.effects != {Effect.READ}
    ):
        return candidates
    tokens = tuple(segment.words[: len(reading.path)])
    if tokens != reading.path:
        return candidates  # global options stand between the program and its subcommand
    try:
        family = Family(tokens)
    except CommandPatternError:
        return candidates
    if family.covers(segment):
        candidates.append(family.pattern)
    return candidates


# What no inert word holds, quoted or not: expansions and substitutions (`$`, a backtick),
# array subscripts that bash evaluates as arithmetic (`test -v 'a[$(cmd)]'`, `printf -v`,
# `read`, `let`), escapes, and control characters.
_NOT_INERT = re.compile(r"[$`\[\]\\\x00-\x1f\x7f]")


def words_inert(command: str, segment: Segment) -> bool:
    """Whether the parse proves that no word of a one-segment command can run code however a
    program or a builtin reads it: every word plain text (bare, or quoted with nothing but plain
    characters inside) and no `$` or backtick anywhere in the text (redirections included).
    Only then is a family offered: a family covers later commands' words by their shape, and
    a word with a subscript or an expansion in it is code to bash wherever it lands."""
    if "$" in command or "`" in command:
        return False
    return all(
        not _NOT_INERT.search(word) and (kind.is_literal or _left_as_written(word, kind))
        for word, kind in zip(segment.words, segment.kinds, strict=True)
    )


_GLOB = frozenset("*?[]")
_BRACES = re.compile(r"\{([^{}]*)\}")


def _left_as_written(word: str, kind: WordKind) -> bool:
    """A word the parser calls a pattern that bash nevertheless leaves as it is: no glob
    character, no tilde where bash expands one (the start, after `=` or `:`), and no brace
    holding a comma or a `..` sequence (`HEAD~1`, `stash@{0}`). A glob is never inert: it
    expands to file names, which an agent chooses (`a[$(cmd)]` is a valid file name)."""
    if kind is not WordKind.PATTERN or _GLOB.intersection(word):
        return False
    if word.startswith("~") or "=~" in word or ":~" in word:
        return False
    return not any("," in inner or ".." in inner for inner in _BRACES.findall(word))


def command_inert(command: str) -> bool:
    """Whether every segment of a command has provably inert words (`words_inert`). A command
    that families allow outside the read-only sandbox must be: bash evaluates subscripts and
    expansions in some builtins' words (`test -v 'a[$(cmd)]'`), and there such code would run
    with the authority of the writing family beside it."""
    parsed = parse_command(normalize_command(command))
    return (
        parsed.fully_understood
        and bool(parsed.segments)
        and all(words_inert(command, segment) for segment in parsed.segments)
    )


@functools.lru_cache(maxsize=1024)
def family_read_only(pattern: str) -> bool:
    """Whether a family names only what the program table rates read-only: a known program (and
    subcommand) listed as read-only whose words imply no effect beyond reading, never a shell,
    wrapper, interpreter or code-running builtin. A command such a family allows (by policy, not
    by a human decision on that exact call) runs in the read-only sandbox, so the kernel holds
    what the family's name promises whatever the shell makes of the words."""
    family = parse_family(pattern)
    if runs_other_code(family.tokens[0]) or "/" in family.tokens[0]:
        return False
    reading = read(TABLE, family.tokens, (WordKind.BARE,) * len(family.tokens))
    if reading.entry is None or reading.opaque_at is not None or not reading.entry.read_only:
        return False
    return not _implied(family.tokens)


def denied_program(pattern: str) -> str | None:
    """The program a deny family names when it is nothing but a program (`Bash(rm:*)` names
    `rm`): its files are masked in every sandboxed command, so no spelling runs it. A family
    with more words (`Bash(rm -r:*)`, `Bash(git push:*)`) names no program to mask: those are
    matched on the text only."""
    family = parse_family(pattern)
    if len(family.tokens) != 1 or "=" in family.tokens[0]:
        return None
    return posixpath.basename(family.tokens[0]) or None


def family_words(pattern: str) -> str:
    """What a `Bash(…:*)` family allows, in words for the approver."""
    family = parse_family(pattern)
    entry = lookup(TABLE, family.tokens[0])
    reading = read(TABLE, family.tokens, (WordKind.BARE,) * len(family.tokens))
    if entry is None or reading.opaque_at is not None:
        return (
            f"run commands starting with `{' '.join(family.tokens)}`, with any arguments "
            "(callgate's program table does not list this program)"
        )
    implied = _implied(family.tokens)
    shown = " ".join(family.tokens)
    if Effect.CODE in implied:
        return (
            f"run `{shown}` with any options the program table knows (it runs code, which "
            "can do anything)"
        )
    if (
        reading.entry is not None
        and reading.entry.covers
        and len(family.tokens) == len(reading.path)
    ):
        return f"run {reading.entry.covers}"
    if not implied:
        return (
            f"run `{shown}` with read-only options only (never options that write files, "
            "run code or reach the network)"
        )
    allowed = ", ".join(sorted(effect.value for effect in implied))
    return f"run `{shown}` with options the program table knows, that do no more than: {allowed}"


MAX_WARNINGS = 12
"""At most this many warning lines are listed; the rest are counted."""


def command_warnings(command: str) -> tuple[str, ...]:
    """What a command's options and scripts do beyond what its words suggest, for the approver
    ("runs code: sed script command `e`"), one line per finding, in order, at most
    `MAX_WARNINGS` of them and a count of the rest."""
    lines: dict[str, None] = {}
    for segment in parse_command(normalize_command(command)).segments:
        for start in segment.starts[:1]:
            reading = _segment_reading(segment, start, basename=True)
            for finding in reading.findings:
                if finding.effect in reading.effects:
                    continue
                if finding.effect is Effect.UNKNOWN:
                    text = f"not known to callgate's program table: {finding.what}"
                else:
                    text = f"{finding.effect.value}: {finding.what}"
                lines[text] = None
    shown = tuple(lines)
    if len(shown) > MAX_WARNINGS:
        rest = len(shown) - MAX_WARNINGS + 1
        return (*shown[: MAX_WARNINGS - 1], f"… and {rest} more")
    return shown


def _segment_reading(segment: Segment, start: int, *, basename: bool) -> Reading:
    """The table's reading of a segment from word `start`: the command word looked up by its
    basename (deny) or as written (allow), which differ only for a word holding a `/`."""
    if start < len(segment.words) and "/" not in segment.words[start]:
        basename = True
    return _cached_reading(segment, start, basename)


@functools.lru_cache(maxsize=2048)
def _cached_reading(segment: Segment, start: int, basename: bool) -> Reading:
    return read(TABLE, segment.words[start:], segment.kinds[start:], basename=basename)


@functools.lru_cache(maxsize=1024)
def _implied(tokens: tuple[str, ...]) -> frozenset[Effect]:
    """What a family's own words imply: the effects of the entry they name and of the options
    among them (never READ, never UNKNOWN)."""
    reading = read(TABLE, tokens, (WordKind.BARE,) * len(tokens))
    implied = set(reading.effects) | {f.effect for f in reading.findings}
    implied -= {Effect.READ, Effect.UNKNOWN}
    return frozenset(implied)


@functools.lru_cache(maxsize=1024)
def _deny_shape(
    tokens: tuple[str, ...],
) -> tuple[tuple[str, ...], frozenset[str], frozenset[str]] | None:
    """For a deny family: the entry path its words name, the options among them, and the
    action it stands for when it is only a program that names one (`build.NAMED_BY`: rm,
    unlink, rmdir and shred stand for deleting, curl and wget for HTTP, chmod, chown and chgrp
    for permissions)."""
    reading = read(TABLE, tokens, (WordKind.BARE,) * len(tokens), basename=True)
    if not reading.path or reading.opaque_at is not None:
        return None
    if any(f.effect is Effect.UNKNOWN for f in reading.findings) or reading.operands:
        return None
    named = len(tokens) == 1 == len(reading.path)
    actions = frozenset(
        action for action, programs in NAMED_BY.items() if named and reading.path[0] in programs
    )
    return reading.path, frozenset(reading.options), actions


def _check_tokens(tokens: Sequence[str]) -> None:
    if not tokens:
        raise CommandPatternError(
            "a command family needs at least one word; a family over every command is refused"
        )
    if len(tokens) > _MAX_FAMILY_TOKENS:
        raise CommandPatternError(f"a command family has at most {_MAX_FAMILY_TOKENS} words")
    for token in tokens:
        if not BARE_WORD.fullmatch(token):
            raise CommandPatternError(
                f"the family word {token[:40]!r} holds a shell metacharacter; use plain words"
            )
    if "=" in tokens[0]:
        raise CommandPatternError("a command family must start with a command, not an assignment")
