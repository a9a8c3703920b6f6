"""The shape of the program knowledge base: what one program, subcommand or option does.

Each `Program` is one reviewed entry of the table (`table_*.py`), with the manual it was read
from. An entry says what the program does with no options (`effects`), what each option it
knows does, what its operands are (files it reads, files it writes, a script, a command it
runs, a subcommand) and how it parses its words (`Style`). `reading.read` applies the table to
the words of one command; the command rules (`commands`) decide from that reading.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


class Effect(enum.Enum):
    """What running a program (or using one of its options) can do."""

    READ = "read-only"
    WRITE = "writes files"
    DELETE = "deletes files"
    CODE = "runs code"
    NETWORK = "reaches the network"
    UNKNOWN = "unknown"


READ_ONLY = frozenset({Effect.READ})
EVERYTHING = frozenset({Effect.READ, Effect.WRITE, Effect.DELETE, Effect.CODE, Effect.NETWORK})


class Takes(enum.Enum):
    """Whether an option takes a value, and how it is given."""

    NOTHING = "nothing"
    """A flag: `-n`, `--quiet`. `--quiet=x` is not this option."""
    VALUE = "value"
    """A required value, attached (`-ofile`, `--output=file`) or the next word (`-o file`)."""
    ATTACHED = "attached"
    """An optional value, only ever attached (`-i.bak`, `--color=always`); the next word is not
    taken."""


class Operands(enum.Enum):
    """What the words that are not options are to a program."""

    FILES = "files"
    """Files (or other plain values) the program reads: nothing beyond its `effects`."""
    SCRIPT = "script"
    """The first operand is a script in the program's language (sed, awk), unless an option
    gave one; `Program.script` reads it. The rest are files."""
    COMMAND = "command"
    """From the first operand on (after `Program.leading_operands` values, e.g. timeout's
    duration) the words are a command, read with the table in turn."""
    SUBCOMMAND = "subcommand"
    """The first operand names an entry of `Program.subcommands`; the rest belongs to it."""
    REMOTE = "remote"
    """The first operand is a host; any further words are a command run there (ssh)."""


class Style(enum.Enum):
    """How a program tells options from operands."""

    GNU = "gnu"
    """getopt_long with permutation: options anywhere until `--`; `-abc` is `-a -b -c`."""
    POSIX = "posix"
    """Options only before the first operand (getopt without permutation, interpreters,
    wrappers, programs with subcommands)."""
    FIND = "find"
    """find's expression: leading -H/-L/-P/-D/-O, starting points, then primaries that each
    take a fixed number of words (`-exec` up to `;` or `+`)."""
    TAR = "tar"
    """GNU style, and a first word without a dash is a cluster of old-style letters (`tar tf
    x.tar`, `tar xzf x.tgz`) whose values follow in order."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the words of a command do beyond reading, or that the table does not know."""

    effect: Effect
    what: str
    """Words for the approver: "sed script command `e`", "git log option --output"."""
    position: int
    """The index of the word it was found in, in the words read."""


ScriptReader = Callable[[str], tuple[tuple[Effect, str], ...]]
"""Reads a script (sed, awk) and says what it does beyond reading: (effect, words) pairs."""


@dataclass(frozen=True, slots=True)
class Option:
    """One option of a program, under every name it has (`-o`, `--output`)."""

    names: tuple[str, ...]
    takes: Takes = Takes.NOTHING
    effect: Effect = Effect.READ
    what: str = ""
    """What it does beyond reading, in words ("writes the log to the named file")."""
    example: str = "1"
    """A value the ground-truth test passes it (when it takes one)."""
    mode: frozenset[Effect] | None = None
    """A mode switch (`tar -t`, `unzip -l`): replaces the program's own effects. Several mode
    switches add up."""
    actions: frozenset[str] = frozenset()
    """What it does, named for deny equivalence (`find -delete` does `delete`)."""
    script: bool = False
    """Its value is a script (`sed -e`): the script is read, and no operand is one."""
    until: tuple[str, ...] = ()
    """It takes every following word up to one of these (`find -exec … ;`)."""
    ends_options: bool = False
    """Every word after it (and its value) is an operand of what it runs (`python -c`)."""

    @property
    def name(self) -> str:
        return self.names[-1] if self.names[-1].startswith("--") else self.names[0]


@dataclass(frozen=True, slots=True)
class Program:
    """One program, or one subcommand of one (`git log`)."""

    name: str
    manual: str
    """Where its entry was read from: the manual page and section (`sed(1), GNU sed 4.9 manual,
    §2.2 Command-Line Options`)."""
    effects: frozenset[Effect] = READ_ONLY
    """What it does with no options and its operands."""
    options: tuple[Option, ...] = ()
    operands: Operands = Operands.FILES
    operand_effect: Effect | None = None
    """What giving it any operand does beyond `effects` (`git branch NAME` creates a branch)."""
    style: Style = Style.GNU
    subcommands: Mapping[str, Program] = field(default_factory=dict)
    script: ScriptReader | None = None
    leading_operands: int = 0
    """For `Operands.COMMAND`: values before the command (`timeout 5 cmd`)."""
    assignments: bool = False
    """For `Operands.COMMAND`: leading `NAME=value` words set the command's environment."""
    numeric_flags: bool = False
    """`-5` means a count (`head -5`, `tail -20`)."""
    negatable: bool = False
    """`--no-X` turns a known long option `--X` off (git's parse-options)."""
    actions: frozenset[str] = frozenset()
    """What the program itself does, named for deny equivalence (`rm` does `delete`)."""
    covers: str = ""
    """Words for the approver on what a family over this entry covers; default from `name`."""
    aliases: tuple[str, ...] = ()
    """Other command names for this entry (`gawk` for `awk`, `egrep` for `grep`)."""
    max_read_operands: int | None = None
    """For `Operands.FILES`: how many operands the program only reads; any further operand is
    a file it writes (`uniq INPUT OUTPUT`, `xxd INFILE OUTFILE`). A glob or unquoted expansion
    among the operands may stand for any number of them."""
    value_prefix: str = ""
    """An operand starting with it is a value that only reads, which `operand_effect` does not
    concern (date's `+FORMAT`; any other date operand sets the clock)."""
    short_values_follow: bool = False
    """A short option's value is always the next word, even inside a cluster and even when
    letters follow it (tree: `-Lo 2 out` is `-L 2 -o out`)."""

    @property
    def read_only(self) -> bool:
        """True when the program with no options only reads: families over it may be offered."""
        return (
            self.effects == READ_ONLY
            and self.operand_effect in (None, Effect.READ)
            and self.operands in (Operands.FILES, Operands.SCRIPT)
            and not self.subcommands
        )
