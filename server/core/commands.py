"""Shell-aware matching of `command.execute` rules: exact commands and `Bash(<tokens>:*)` families.

A command is parsed with tree-sitter-bash (never string prefixes or regexes) into *segments*: one
per command, split at `&&`, `||`, `;`, `|`, `&`, newlines, subshells and `{ …; }` groups, plus
the commands inside substitutions (`$(…)`, backticks, `<(…)`, `>(…)`) and inside literal command
strings (`bash -c '…'`, `eval …`, `trap '…'`, `watch '…'`, `find -exec … ;`), which are marked
nested. Allow under-matches and deny over-matches (DESIGN section 4.2):

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

The commands are split by `shell_parse`; what programs do with their words (shells,
wrappers, interpreters, find's actions) is the data in `program_table`.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .program_table import runs_other_code
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
    "command_pattern",
    "is_family_pattern",
    "normalize_command",
    "parse_command",
    "parse_family",
    "rule_candidates",
]

FAMILY_PREFIX = "Bash("
FAMILY_SUFFIX = ":*)"

_FAMILY_BODY = re.compile(r"[ A-Za-z0-9_.,/:@%+=-]*")
_SUBCOMMAND = re.compile(r"[a-z][a-z0-9_:-]*")

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
        """Allow semantics: a simple segment whose leading bare words equal the tokens."""
        count = len(self.tokens)
        if not segment.simple or len(segment.words) < count:
            return False
        return all(
            segment.kinds[i] is WordKind.BARE and segment.words[i] == token
            for i, token in enumerate(self.tokens)
        )

    def denies(self, segment: Segment) -> bool:
        """Deny semantics: the tokens match the segment's words at any of its starts."""
        return any(self._matches_at(segment, start) for start in segment.starts)

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

    Always the exact normalized command. Also, only when the command is one simple segment, a
    family over its command word and its first subcommand-like word (lower-case, no dots or
    slashes: `git log --oneline` gives `Bash(git log:*)`, `ls -la` gives `Bash(ls:*)`). No family
    is offered for a command word holding a `/` (it depends on the working directory), or for a
    shell, a transparent wrapper, an interpreter or a code-running builtin: a family over those
    would cover every command.
    """
    normalized = normalize_command(command)
    if not normalized:
        return []
    candidates = [normalized]
    parsed = parse_command(normalized)
    if not parsed.fully_understood or len(parsed.segments) != 1:
        return candidates
    (segment,) = parsed.segments
    if not segment.simple or segment.nested:
        return candidates
    head = segment.words[0]
    if "/" in head or runs_other_code(head):
        return candidates
    tokens = [head]
    if (
        len(segment.words) > 1
        and segment.kinds[1] is WordKind.BARE
        and _SUBCOMMAND.fullmatch(segment.words[1])
    ):
        tokens.append(segment.words[1])
    try:
        family = Family(tuple(tokens))
    except CommandPatternError:
        return candidates
    candidates.append(family.pattern)
    return candidates


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
