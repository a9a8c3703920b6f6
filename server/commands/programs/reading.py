"""Reading one command's words with the program table: which entry runs, what its options and
scripts do, and what the table does not know.

`read(words, kinds)` never fails: what it cannot tell becomes a `Finding` of `Effect.UNKNOWN`
(an option the table does not list, a glob where an option may stand, a script it cannot
parse). A program the table does not list is *opaque*: the reading says where it starts.

Option parsing follows the program's `Style`:

- long options: `--name`, `--name=value`, `--name value` (a required value); a long option the
  table does not list exactly is unknown (getopt_long and git accept unambiguous prefixes:
  `unknown_prefixes` says which known options such a word may abbreviate, for deny);
- short options: `-abc` is `-a -b -c`; the first one taking a value takes the rest of the word
  or else the next word (`-ofile`, `-o file`); an optional value is only ever attached; for a
  program whose short options always take the next word (`Program.short_values_follow`, tree)
  each value letter of a cluster takes the next unused word (`-Lo 2 out`);
- `--` ends the options; `-` alone is an operand; a glob whose expansion may start with `-`
  (`*`, `?x`, `[-]x`, `{-o,x}`) stands where an option may and is unknown unless after `--`;
- operands: `Program.operand_effect` applies to any operand but a literal one starting with
  `Program.value_prefix` (date's `+FORMAT`); past `Program.max_read_operands` an operand is a
  file the program writes (`uniq IN OUT`), and a glob or unquoted expansion may be several.
"""

from __future__ import annotations

import bisect
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..shell_parse import MANY_KINDS, WordKind
from .model import Effect, Finding, Operands, Option, Program, Style, Takes

_MAX_DEPTH = 8
# A glob that cannot expand to a word starting with `-`: it starts with a plain character
# that is not `-` (`src/*.py`, `./*`, `a*`).
_SAFE_GLOB_START = re.compile(r"[A-Za-z0-9_./,:@%+=~]")
_NUMBER = re.compile(r"[0-9]+")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_VERSIONED = re.compile(r"([A-Za-z][A-Za-z-]*?)[0-9][0-9.]*")


@dataclass(slots=True)
class Reading:
    """What one command's words do, as far as the table knows."""

    path: tuple[str, ...] = ()
    """The entry names reached: ("git", "log"); () when the program is not in the table."""
    entry: Program | None = None
    effects: set[Effect] = field(default_factory=set)
    """The effects of the entry and its mode switches (what the words `path` imply)."""
    findings: list[Finding] = field(default_factory=list)
    actions: set[str] = field(default_factory=set)
    options: set[str] = field(default_factory=set)
    """Canonical names of the options given (for deny families spelling an option)."""
    operands: list[str] = field(default_factory=list)
    opaque_at: int | None = None
    """The position of the first word of a program (or subcommand) the table does not list."""
    may_be_options: set[str] = field(default_factory=set)
    """For deny: actions of options an unknown or run-time word may be."""

    @property
    def all_effects(self) -> frozenset[Effect]:
        return frozenset(self.effects) | {f.effect for f in self.findings}

    def unknown_after(self, position: int) -> bool:
        """True when something at or after `position` is unknown or opaque."""
        if self.opaque_at is not None and self.opaque_at >= position:
            return True
        return any(f.effect is Effect.UNKNOWN and f.position >= position for f in self.findings)


def lookup(table: Mapping[str, Program], word: str, *, basename: bool = False) -> Program | None:
    """The entry for a command word: by its exact name (allow), or by basename (deny); a
    version suffix is ignored (`python3.11` is `python`)."""
    name = posixpath.basename(word) if basename else word
    entry = table.get(name)
    if entry is None:
        versioned = _VERSIONED.fullmatch(name)
        if versioned is not None:
            entry = table.get(versioned.group(1))
    return entry


def read(
    table: Mapping[str, Program],
    words: Sequence[str],
    kinds: Sequence[WordKind],
    *,
    basename: bool = False,
) -> Reading:
    """Read a command's words with the table (see the module docstring)."""
    reading = Reading()
    _Reader(table, words, kinds, reading, basename).command(0, 0)
    return reading


class _Reader:
    def __init__(
        self,
        table: Mapping[str, Program],
        words: Sequence[str],
        kinds: Sequence[WordKind],
        reading: Reading,
        basename: bool,
    ) -> None:
        self.table = table
        self.words = words
        self.kinds = kinds
        self.out = reading
        self.basename = basename
        self.mode: set[Effect] | None = None
        self.stop_options = False
        self.script_given = False

    # ------------------------------------------------------------ helpers

    def find(self, effect: Effect, what: str, position: int) -> None:
        self.out.findings.append(Finding(effect, what, position))

    def literal(self, i: int) -> bool:
        return self.kinds[i].is_literal

    def may_be_option(self, i: int) -> bool:
        """A word that is not literal and may turn out to start with `-`."""
        kind = self.kinds[i]
        if kind.is_literal:
            return False
        if kind is WordKind.PATTERN:
            return _SAFE_GLOB_START.match(self.words[i]) is None
        return True

    # ------------------------------------------------------------ commands

    def command(self, start: int, depth: int) -> None:
        if start >= len(self.words):
            return
        if depth > _MAX_DEPTH or not self.literal(start):
            self.out.opaque_at = start
            self.out.may_be_options.add("*")
            return
        entry = lookup(self.table, self.words[start], basename=self.basename)
        if entry is None:
            self.out.opaque_at = start
            return
        self.enter(entry)
        self.program(entry, start + 1, depth)

    def enter(self, entry: Program) -> None:
        self.out.path += (entry.name,)
        self.out.entry = entry
        self.out.effects = set(entry.effects)
        self.out.actions |= entry.actions
        self.mode = None

    def program(self, entry: Program, start: int, depth: int) -> None:
        if entry.style is Style.FIND:
            self.find_expression(entry, start)
            return
        operands = self.options(entry, start)
        self.operands(entry, operands, depth)

    # ------------------------------------------------------------ options

    def options(self, entry: Program, start: int) -> list[int]:
        """Read options from `start`; return the positions of operands (and, for a POSIX
        style program, of every word from its first operand on)."""
        long_names = option_names(entry)
        operands: list[int] = []
        self.script_given = False
        i = start
        words = self.words
        first = True
        while i < len(words):
            word = words[i]
            if not self.literal(i):
                if self.may_be_option(i) and not (entry.style is Style.POSIX and operands):
                    self.find(
                        Effect.UNKNOWN,
                        f"{self.label(entry)}: a word decided when it runs ({word[:40]}) may be "
                        "an option",
                        i,
                    )
                    self.out.may_be_options.update(_all_actions(entry))
                operands.append(i)
                if entry.style is Style.POSIX or entry.operands is Operands.SUBCOMMAND:
                    operands.extend(range(i + 1, len(words)))
                    break
                i += 1
                first = False
                continue
            if word == "--":
                operands.extend(range(i + 1, len(words)))
                break
            if entry.style is Style.TAR and first and not word.startswith("-") and word:
                i = self.short_cluster(entry, long_names, "-" + word, i, old_style=True)
                first = False
                continue
            first = False
            if word.startswith("--") and len(word) > 2:
                i = self.long_option(entry, long_names, word, i)
            elif word.startswith("-") and len(word) > 1:
                if entry.numeric_flags and _NUMBER.fullmatch(word[1:]):
                    i += 1
                    continue
                i = self.short_cluster(
                    entry, long_names, word, i, old_style=entry.short_values_follow
                )
            else:
                operands.append(i)
                if entry.style is Style.POSIX or entry.operands in (
                    Operands.SUBCOMMAND,
                    Operands.COMMAND,
                    Operands.REMOTE,
                ):
                    operands.extend(range(i + 1, len(words)))
                    break
                i += 1
                continue
            if self.stop_options:
                operands.extend(range(i, len(words)))
                break
        return operands

    def long_option(self, entry: Program, names: Mapping[str, Option], word: str, i: int) -> int:
        name, eq, value = word.partition("=")
        option = names.get(name)
        if option is None:
            positive = names.get("--" + name[5:]) if name.startswith("--no-") else None
            if entry.negatable and positive is not None and not eq:
                if positive.mode is not None:
                    # Turning a mode switch off (`--dry-run --no-dry-run`) gives back the
                    # entry's own effects, which the switch was there to avoid.
                    self.find(
                        Effect.UNKNOWN,
                        f"{self.label(entry)} option {name} (turns a mode switch off)",
                        i,
                    )
                return i + 1
            self.find(Effect.UNKNOWN, f"{self.label(entry)} option {name[:60]}", i)
            self.out.may_be_options.update(_prefix_actions(names, name))
            return i + 1
        if option.takes is Takes.NOTHING and eq:
            self.find(Effect.UNKNOWN, f"{self.label(entry)} option {name} given a value", i)
            return i + 1
        if option.takes is Takes.VALUE and not eq:
            if i + 1 >= len(self.words):
                self.apply(entry, option, None, i)
                return i + 1
            self.value_word(entry, option, i + 1)
            self.apply(entry, option, self.words[i + 1], i)
            return self.after(option, i + 2)
        self.apply(entry, option, value if eq else None, i)
        return self.after(option, i + 1)

    def short_cluster(
        self,
        entry: Program,
        names: Mapping[str, Option],
        word: str,
        i: int,
        *,
        old_style: bool = False,
    ) -> int:
        """`-abc`; with `old_style` (tar's first word, every cluster of tree) each letter's value
        is a later word."""
        next_word = i + 1
        j = 1
        while j < len(word):
            option = names.get("-" + word[j])
            if option is None:
                self.find(Effect.UNKNOWN, f"{self.label(entry)} option -{word[j]}", i)
                self.out.may_be_options.update(_all_actions(entry))
                return max(next_word, i + 1)
            if option.takes is Takes.NOTHING:
                self.apply(entry, option, None, i)
                j += 1
                continue
            if old_style and option.takes is Takes.VALUE:
                if next_word < len(self.words):
                    self.value_word(entry, option, next_word)
                    self.apply(entry, option, self.words[next_word], i)
                    next_word += 1
                else:
                    self.apply(entry, option, None, i)
                j += 1
                continue
            rest = word[j + 1 :]
            if rest or option.takes is Takes.ATTACHED:
                self.apply(entry, option, rest or None, i)
                return self.after(option, next_word)
            if next_word < len(self.words):
                self.value_word(entry, option, next_word)
                self.apply(entry, option, self.words[next_word], i)
                return self.after(option, next_word + 1)
            self.apply(entry, option, None, i)
            return i + 1
        return next_word

    def value_word(self, entry: Program, option: Option, i: int) -> None:
        """A value given as the next word: a script value must be literal to be read."""
        if option.script and not self.literal(i):
            self.find(
                Effect.UNKNOWN,
                f"{self.label(entry)}: a script decided when it runs",
                i,
            )

    def after(self, option: Option, i: int) -> int:
        if option.until:
            while i < len(self.words) and not (self.literal(i) and self.words[i] in option.until):
                i += 1
            return i + 1
        if option.ends_options:
            self.stop_options = True
        return i

    def apply(self, entry: Program, option: Option, value: str | None, i: int) -> None:
        self.out.options.add(option.name)
        self.out.actions |= option.actions
        if option.mode is not None:
            if self.mode is None:
                self.mode = set()
            self.mode |= option.mode
            self.out.effects = set(self.mode)
        if option.effect is not Effect.READ:
            self.find(option.effect, self.describe(entry, option), i)
        if option.script:
            self.script_given = True
            if value is not None and entry.script is not None and self.literal(i):
                self.script(entry, value, i)

    def describe(self, entry: Program, option: Option) -> str:
        kind = "primary" if entry.style is Style.FIND else "option"
        text = f"{self.label(entry)} {kind} {option.name}"
        return f"{text} ({option.what})" if option.what else text

    def label(self, entry: Program) -> str:
        return " ".join(self.out.path) or entry.name

    def script(self, entry: Program, text: str, i: int) -> None:
        assert entry.script is not None
        for effect, what in entry.script(text):
            self.find(effect, f"{self.label(entry)} {what}", i)

    # ------------------------------------------------------------ operands

    def operands(self, entry: Program, operands: list[int], depth: int) -> None:
        self.out.operands = [self.words[i] for i in operands]
        if entry.operands is Operands.SUBCOMMAND:
            if not operands:
                return
            first = operands[0]
            if not self.literal(first):
                self.out.opaque_at = first
                self.out.may_be_options.add("*")
                return
            sub = entry.subcommands.get(self.words[first])
            if sub is None:
                self.out.opaque_at = first
                return
            self.enter(sub)
            self.stop_options = False
            self.program(sub, first + 1, depth)
            return
        if entry.operands is Operands.SCRIPT and not self.script_given and operands:
            first = operands[0]
            if not self.literal(first):
                self.find(
                    Effect.UNKNOWN, f"{self.label(entry)}: a script decided when it runs", first
                )
            elif entry.script is not None:
                self.script(entry, self.words[first], first)
            operands = operands[1:]
        if entry.operands is Operands.COMMAND:
            rest = operands[entry.leading_operands :]
            if entry.assignments:
                while rest and self.literal(rest[0]) and _ASSIGNMENT.match(self.words[rest[0]]):
                    self.find(
                        Effect.CODE,
                        f"{self.label(entry)} sets the environment variable "
                        f"{self.words[rest[0]].partition('=')[0][:40]} "
                        "(variables such as LD_PRELOAD or GIT_EXTERNAL_DIFF run code)",
                        rest[0],
                    )
                    rest = rest[1:]
            if rest:
                self.stop_options = False
                self.command(rest[0], depth + 1)
            return
        if entry.operands is Operands.REMOTE:
            if len(operands) > 1:
                self.find(
                    Effect.CODE,
                    f"{self.label(entry)} runs a command on the remote host",
                    operands[1],
                )
            return
        if entry.max_read_operands is not None:
            self.written_operands(entry, entry.max_read_operands, operands)
        concerned = [i for i in operands if not self.plain_value(entry, i)]
        if concerned and entry.operand_effect not in (None, Effect.READ):
            assert entry.operand_effect is not None
            self.find(
                entry.operand_effect,
                f"{self.label(entry)} given {self.words[concerned[0]][:40]!r}",
                concerned[0],
            )

    def written_operands(self, entry: Program, limit: int, operands: list[int]) -> None:
        """Operands after the first `limit` are files the program writes (`uniq IN OUT`); a
        glob or unquoted expansion may stand for several operands, so it may make one."""
        if len(operands) > limit:
            at = operands[limit]
            self.find(
                Effect.WRITE,
                f"{self.label(entry)} writes its operand {self.words[at][:40]!r}",
                at,
            )
            return
        for at in operands:
            if self.kinds[at] in MANY_KINDS:
                self.find(
                    Effect.WRITE,
                    f"{self.label(entry)}: {self.words[at][:40]} may stand for several operands, "
                    f"and it writes any after the first {limit}",
                    at,
                )
                return

    def plain_value(self, entry: Program, i: int) -> bool:
        """A literal operand starting with the entry's `value_prefix` (date's `+FORMAT`)."""
        return (
            bool(entry.value_prefix)
            and self.literal(i)
            and self.words[i].startswith(entry.value_prefix)
        )

    # ------------------------------------------------------------ find

    def find_expression(self, entry: Program, start: int) -> None:
        names = option_names(entry)
        i = start
        words = self.words
        # Leading options: -H -L -P, -D debugopts, -Olevel.
        while i < len(words) and self.literal(i) and words[i] in ("-H", "-L", "-P", "-D"):
            i += 2 if words[i] == "-D" else 1
        while i < len(words) and self.literal(i) and words[i].startswith("-O"):
            i += 1
        # Starting points: up to the first word that starts an expression.
        while i < len(words):
            if self.literal(i) and (words[i].startswith("-") or words[i] in ("(", "!", ",", ")")):
                break
            if self.may_be_option(i):
                self.find(
                    Effect.UNKNOWN,
                    f"find: a word decided when it runs ({words[i][:40]}) may be a primary",
                    i,
                )
                self.out.may_be_options.update(_all_actions(entry))
            self.out.operands.append(words[i])
            i += 1
        while i < len(words):
            word = words[i]
            if not self.literal(i):
                self.find(
                    Effect.UNKNOWN,
                    f"find: a word decided when it runs ({word[:40]}) in the expression",
                    i,
                )
                self.out.may_be_options.update(_all_actions(entry))
                i += 1
                continue
            if word in ("(", ")", "!", ","):
                i += 1
                continue
            option = names.get(word)
            if option is None:
                self.find(Effect.UNKNOWN, f"find primary {word[:60]}", i)
                self.out.may_be_options.update(_prefix_actions(names, word))
                i += 1
                continue
            value = None
            end = i + 1
            if option.takes is Takes.VALUE:
                value = words[i + 1] if i + 1 < len(words) else None
                end = i + 2
            self.apply(entry, option, value, i)
            if option.until:
                end = i + 1
                while end < len(words) and not (self.literal(end) and words[end] in option.until):
                    end += 1
                end += 1
            i = end


_NAMES: dict[int, tuple[Program, Mapping[str, Option]]] = {}


def option_names(entry: Program) -> Mapping[str, Option]:
    """Every name of every option of `entry`, built once per entry (entries are constants).
    A name listed twice takes its later listing: entries list shared option groups first and
    their own options after (git parses a subcommand's own options before the shared ones)."""
    known = _NAMES.get(id(entry))
    if known is None or known[0] is not entry:
        known = (entry, {name: option for option in entry.options for name in option.names})
        _NAMES[id(entry)] = known
    return known[1]


def _all_actions(entry: Program) -> set[str]:
    return {action for option in entry.options for action in option.actions}


_SORTED: dict[int, tuple[Mapping[str, Option], list[str]]] = {}


def _prefix_actions(names: Mapping[str, Option], word: str) -> set[str]:
    """Actions of the known long options `word` may abbreviate (getopt_long, parse-options).
    The names are kept sorted, so a word costs a bisection, not a scan of every option."""
    if not word.startswith("-") or len(word) < 3:
        return set()
    known = _SORTED.get(id(names))
    if known is None or known[0] is not names:
        known = (names, sorted(names))
        _SORTED[id(names)] = known
    ordered = known[1]
    actions: set[str] = set()
    for index in range(bisect.bisect_right(ordered, word), len(ordered)):
        name = ordered[index]
        if not name.startswith(word):
            break
        actions.update(names[name].actions)
    return actions


__all__ = ["Reading", "lookup", "read"]
