"""Splitting a command line into segments with tree-sitter-bash, for the command rules
(`commands`): what is simple, what is understood, what runs nested.

Decisions:

- Simple: no substitution or parameter/arithmetic expansion, no assignment prefix, a bare
  command word (no quoting, escape, glob, brace or tilde), and no redirection except `2>&1`-style
  duplication between stdout and stderr and a standard stream to or from `/dev/null`. Arguments
  may be quoted, escaped or globbed: a family allows any trailing words, so expansion reaches
  nothing the agent could not type, and the positions a family compares must be bare anyway.
- Not simple although literal: a shell given a command string (`bash -c`, `sh -lc`, `su -c`, a
  glob among a shell's options), `eval`, and `find` with `-exec`, `-execdir`, `-ok`, `-okdir`,
  `-delete`, `-fprint*`, `-fls` or a globbed argument. So `bash -c '…'` is covered only by an
  exact rule (even `Bash(bash -c:*)` does not cover it), and `Bash(find:*)` never covers a find
  that runs or deletes things.
- Fully understood: no ERROR or MISSING node, and every statement is a command, pipeline, list,
  subshell, `{ …; }` group, redirected statement, assignment or comment (comments are ignored:
  bash never runs them). `if`/`while`/`for`/`case`, functions, `[[ … ]]`, `((…))`, `!`,
  `export`/`declare`/`unset` and heredocs are not modelled, nor are control characters,
  non-ASCII blanks (NBSP) and a backslash-newline glued to a word, which tree-sitter and bash may
  split differently. Such a command is allowed only by an exact rule; its commands are still
  segments for deny.
- Where tree-sitter is known to read differently from bash, the text is read again and the
  command is not understood: a newline or operator inside one command's span (it sometimes glues
  the next line on), two words with nothing between them, a comment starting inside a word,
  text after the first syntax error, words error recovery leaves outside any command, and the
  text with backslash-newlines removed.
- Command strings are parsed up to `MAX_NESTING` (4) levels deep, and at most `_MAX_PARSES`
  texts per command. A deeper, over-budget or non-literal command string (`bash -c "$x"`,
  `eval "$(…)"`) becomes an *unknown* segment that every deny family matches.
- When something in the command runs a shell on its stdin (`… | sh`, `bash <<EOF`), heredoc
  bodies, here-strings and every segment's arguments are parsed as commands too
  (`echo 'rm x' | sh`). Backticks in unquoted heredoc bodies (tree-sitter leaves them as text)
  are parsed.

Limits (a deny family cannot see into these): scripts and files run by name (`bash x.sh`,
`source f`, `make`), interpreters' code strings (`python -c`, `perl -e`, `awk 'BEGIN{system(…)}'`),
remote or container shells (`ssh host cmd`, `docker exec`), `env -S` and aliases. Options
placed between a deny family's tokens (`git -C dir push`) and other programs doing the same
thing (`unlink` for `rm`, `find -delete`) are seen by the rules through the program table
(`commands`, `programs`), not by this parse.
"""

from __future__ import annotations

import enum
import functools
import itertools
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from .program_table import (
    FIND_EXEC,
    FIND_UNSAFE,
    LAUNCHERS,
    SHELL_COMMAND_FLAG,
    SHELLS,
    WRAPPERS,
)

MAX_NESTING = 4
"""How many command strings deep (`bash -c "sh -c '…'"`) a command is parsed."""
_MAX_PARSES = 64
# The syntax nodes read per command (all its nested strings together), and a cheap bound
# checked before parsing: a command of more is not read (~50 ms of loop time at most).
MAX_SYNTAX_NODES = 4000
_OPERATOR_CHARACTERS = "|&;()<>`$"


def _rough_tokens(text: str) -> int:
    """A cheap estimate of the tokens tree-sitter would make of `text` (words and operators)."""
    return len(text.split()) + sum(text.count(char) for char in _OPERATOR_CHARACTERS)


BARE_WORD = re.compile(r"[A-Za-z0-9_.,/:@%+=-]+")

_GLUED_CONTINUATION = re.compile(r"[^ \t\n]\\\n")

# Characters that cannot appear unescaped inside one tree-sitter `word`; if one does, the
# parser and bash disagree about the text, and the word is treated as unknown.
_WORD_BREAKERS = frozenset("$`'\"()|&;<> \t\n")
_PATTERN_CHARS = frozenset("*?[]{}~")

_STRUCTURE = frozenset({"program", "list", "pipeline", "subshell", "compound_statement"})
_SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})
_UNDERSTOOD_STATEMENTS = frozenset(
    {*_STRUCTURE, "command", "redirected_statement", "variable_assignment", "comment"}
) | {"variable_assignments"}
_GAP = re.compile(rb"(?:[ \t]|\\\n)*")
_WORD_NODES = frozenset({"word", "number", "concatenation", "command_name"})
_OWN_SEGMENTS = frozenset(
    {
        "command",
        "redirected_statement",
        "declaration_command",
        "unset_command",
        "command_substitution",
        "process_substitution",
        "heredoc_redirect",
    }
)
_COMMENT_MAY_FOLLOW = frozenset(bytes([char]) for char in b" \t\n;&|()<>`")
_LOOSE_WORD_NODES = _WORD_NODES | {"string", "raw_string", "ansi_c_string", "variable_name"}
# Nodes bash reads as one word: nothing at all may stand between their children.
_TIGHT = frozenset({"simple_expansion", "concatenation", "command_name"})
# Nodes bash reads on one line: a newline between their children means tree-sitter glued on
# what bash reads as the next command (`<$\nrm` gives a redirect from `$rm`).
_GAPLESS = frozenset(
    {"command", "redirected_statement", "file_redirect", "herestring_redirect", "command_name"}
    | {"simple_expansion", "concatenation", "variable_assignment", "variable_assignments"}
)
_DEV_NULL_OPERATORS = frozenset({">", ">>", "&>", "&>>", "<"})
_STANDARD_STREAMS = frozenset({"", "0", "1", "2"})


class WordKind(enum.StrEnum):
    """What is known of one shell word before it runs."""

    BARE = "bare"
    """Unquoted, unescaped plain text (`git`, `--short`, `a/b.py`): the word is its text."""
    QUOTED = "quoted"
    """Literal after quote removal and escapes (`"a b"`, `'x'`, `a\\ b`, `é`)."""
    PATTERN = "pattern"
    """An unquoted glob, brace or tilde (`*.py`, `{a,b}`, `~/x`): filenames, any number of words."""
    DYNAMIC = "dynamic"
    """Exactly one word decided at run time (`"$x"`, `"$(cmd)"`, `$'\\x41'`)."""
    SPLIT = "split"
    """Any number of words decided at run time (`$x`, `$(cmd)`, anything not understood)."""

    @property
    def is_literal(self) -> bool:
        return self in (WordKind.BARE, WordKind.QUOTED)


_UNKNOWN_KINDS = frozenset({WordKind.PATTERN, WordKind.DYNAMIC, WordKind.SPLIT})
MANY_KINDS = frozenset({WordKind.PATTERN, WordKind.SPLIT})


@dataclass(frozen=True, slots=True)
class Segment:
    """One command of a parsed command line.

    `words` are the argv words: literal values with quoting removed where `kinds` says the word
    is literal, the source text otherwise. `simple` is True only for bare words a family may
    cover. `nested` marks commands found inside a substitution or a command string. `starts` are
    the word positions deny families are tried at (0, and every non-option word after a
    transparent wrapper or a word decided at run time).
    """

    words: tuple[str, ...]
    kinds: tuple[WordKind, ...]
    simple: bool
    nested: bool
    starts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    """A command line split into segments, and whether the parser understood all of it."""

    segments: tuple[Segment, ...]
    fully_understood: bool


def normalize_command(command: str) -> str:
    """The canonical text of a command: the `match` of its `command.execute` requirement.

    Only leading and trailing spaces, tabs and newlines are removed, and trailing ones are kept
    when removing them could change the command (after a backslash, or with a heredoc whose body
    may run to the end). Nothing inside is collapsed: exact rules compare this string.
    """
    normalized = command.lstrip(" \t\n")
    stripped = normalized.rstrip(" \t\n")
    trailing_backslashes = len(stripped) - len(stripped.rstrip("\\"))
    if trailing_backslashes % 2 == 1 or "<<" in stripped:
        return normalized
    return stripped


@functools.lru_cache(maxsize=512)
def parse_command(command: str) -> ParsedCommand:
    """Split a command line into segments with tree-sitter-bash (see the module docstring)."""
    analysis = _Analysis()
    try:
        command.encode("utf-8")
    except UnicodeEncodeError:
        analysis.unknown(command)
    else:
        analysis.parse(command, depth=0, nested=False)
    return ParsedCommand(tuple(dict.fromkeys(analysis.segments)), analysis.understood)


# ------------------------------------------------------------------ parsing


@functools.cache
def _language() -> Language:
    return Language(tree_sitter_bash.language())


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", errors="replace")


def _is_option(word: str, kind: WordKind) -> bool:
    return kind.is_literal and word.startswith("-")


def _understood_text(text: str) -> bool:
    """False for characters tree-sitter and bash may split differently (control characters,
    non-ASCII blanks such as NBSP) and for a backslash-newline glued to a word."""
    visible = text.replace("\t", "").replace("\n", "")
    return visible.isprintable() and not _GLUED_CONTINUATION.search(text)


@dataclass(slots=True)
class _Word:
    value: str
    kind: WordKind
    broken: bool = False
    """The parser put a character in one word that bash would split it at."""


def _unquoted(text: str) -> _Word:
    """An unquoted word piece: escapes removed; globs, braces and tildes make it a pattern."""
    value: list[str] = []
    escaped = pattern = False
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            if index + 1 >= len(text):
                return _Word(text, WordKind.SPLIT)
            if text[index + 1] != "\n":
                value.append(text[index + 1])
            escaped = True
            index += 2
            continue
        if char in _WORD_BREAKERS:
            return _Word(text, WordKind.SPLIT, broken=True)
        if char in _PATTERN_CHARS:
            pattern = True
        value.append(char)
        index += 1
    if pattern:
        return _Word(text, WordKind.PATTERN)
    literal = "".join(value)
    if not escaped and BARE_WORD.fullmatch(literal):
        return _Word(literal, WordKind.BARE)
    return _Word(literal, WordKind.QUOTED)


def _double_quoted(text: str) -> _Word:
    """A "…" string: literal when it holds no `$` or backtick; escapes as bash does them."""
    if len(text) < 2 or not (text.startswith('"') and text.endswith('"')):
        return _Word(text, WordKind.SPLIT)
    body = text[1:-1]
    value: list[str] = []
    index = 0
    while index < len(body):
        char = body[index]
        if char == "\\" and index + 1 < len(body) and body[index + 1] in '$`"\\\n':
            if body[index + 1] != "\n":
                value.append(body[index + 1])
            index += 2
            continue
        if char in "$`":
            return _Word(text, WordKind.DYNAMIC)
        value.append(char)
        index += 1
    return _Word("".join(value), WordKind.QUOTED)


def _word(node: Node) -> _Word:
    """What is known of one word node."""
    kind = node.type
    if kind in ("word", "number", "file_descriptor"):
        return _unquoted(_text(node))
    if kind == "raw_string":
        text = _text(node)
        if len(text) >= 2 and text.startswith("'") and text.endswith("'"):
            return _Word(text[1:-1], WordKind.QUOTED)
        return _Word(text, WordKind.SPLIT)
    if kind == "string":
        return _double_quoted(_text(node))
    if kind in ("ansi_c_string", "translated_string"):
        return _Word(_text(node), WordKind.DYNAMIC)
    if kind == "brace_expression":
        return _Word(_text(node), WordKind.PATTERN)
    if kind in ("concatenation", "command_name"):
        return _concatenation(node)
    return _Word(_text(node), WordKind.SPLIT)


def _concatenation(node: Node) -> _Word:
    parts = node.children
    if not parts:
        return _Word(_text(node), WordKind.SPLIT)
    if len(parts) == 1 and node.type == "command_name":
        return _word(parts[0])
    for before, after in itertools.pairwise(parts):
        if before.end_byte != after.start_byte:
            return _Word(_text(node), WordKind.SPLIT)
    return _joined([_word(part) for part in parts], _text(node))


def _joined(words: Sequence[_Word], text: str) -> _Word:
    """Pieces bash concatenates into one word (`a"b"'c'`, `x$y`)."""
    kinds = {word.kind for word in words}
    if any(word.broken for word in words):
        return _Word(text, WordKind.SPLIT, broken=True)
    if WordKind.SPLIT in kinds or {WordKind.PATTERN, WordKind.DYNAMIC} <= kinds:
        return _Word(text, WordKind.SPLIT)
    if WordKind.PATTERN in kinds:
        return _Word(text, WordKind.PATTERN)
    if WordKind.DYNAMIC in kinds:
        return _Word(text, WordKind.DYNAMIC)
    return _Word("".join(word.value for word in words), WordKind.QUOTED)


def _harmless_redirect(node: Node) -> bool:
    """`2>&1`-style duplication between standard streams, or a standard stream to /dev/null."""
    if node.type != "file_redirect":
        return False
    descriptor = ""
    operator = ""
    destinations: list[Node] = []
    for index, child in enumerate(node.children):
        name = node.field_name_for_child(index)
        if name == "descriptor":
            descriptor = _text(child)
        elif name == "destination":
            destinations.append(child)
        elif not child.is_named:
            operator = child.type
    if len(destinations) != 1 or descriptor not in _STANDARD_STREAMS or node.has_error:
        return False
    (target,) = destinations
    if operator == ">&":
        return target.type == "number" and _text(target) in ("1", "2")
    return (
        operator in _DEV_NULL_OPERATORS and target.type == "word" and _text(target) == "/dev/null"
    )


def _extra_destinations(redirect: Node) -> list[Node]:
    """Words tree-sitter files under a redirect that bash passes to the command: in
    `git > f push`, `push` is an argument of git."""
    if redirect.type != "file_redirect":
        return []
    words: list[Node] = []
    destinations: list[Node] = []
    for index, child in enumerate(redirect.children):
        name = redirect.field_name_for_child(index)
        if name == "descriptor" and not _text(child).isdigit():
            # `head -5>f`: bash takes only digits as a descriptor; -5 is an argument.
            words.append(child)
        elif name == "destination":
            destinations.append(child)
    return words + destinations[1:]


def _glued_at(node: Node) -> int | None:
    """Where, inside one command or redirection, tree-sitter glued lines that bash reads apart:
    the source between two children holds more than blanks and line continuations
    (`a | b | c\nd && e` gives a command `c d`), or a word holds a newline or an operator
    (`git\n\\rm x` gives git an argument "\n\\rm")."""
    source = node.text or b""
    children = node.children
    tight = node.type in _TIGHT
    for before, after in itertools.pairwise(children):
        gap = source[before.end_byte - node.start_byte : after.start_byte - node.start_byte]
        if (tight and gap) or not _GAP.fullmatch(gap):
            return before.end_byte
    for child in children:
        if child.type in _WORD_NODES and _word(child).broken:
            return child.start_byte
    return None


def _last_command(node: Node) -> Node | None:
    while node.type in ("list", "pipeline"):
        statements = [child for child in node.named_children if child.type != "comment"]
        if not statements:
            return None
        node = statements[-1]
    return node if node.type == "command" else None


def _starts(words: Sequence[str], kinds: Sequence[WordKind]) -> tuple[int, ...]:
    """Positions a deny family is tried at: 0, and, when the command word is a transparent
    wrapper or decided at run time (it may be one, or vanish), every later word that does not
    start with `-` (this also reaches a wrapper's wrapped wrapper: `sudo env rm`)."""
    if not words:
        return ()
    if kinds[0] not in _UNKNOWN_KINDS and posixpath.basename(words[0]) not in WRAPPERS:
        return (0,)
    return (0, *(i for i in range(1, len(words)) if not _is_option(words[i], kinds[i])))


def _runs_code_itself(words: Sequence[str], kinds: Sequence[WordKind], start: int) -> bool:
    """Whether the command at `start` is literal words that run other commands from their
    arguments: a shell with a command string, eval, or find with actions that run or delete."""
    base = posixpath.basename(words[start])
    if base not in SHELLS and base not in ("eval", "find"):
        return False
    rest = list(zip(words[start + 1 :], kinds[start + 1 :], strict=True))
    if base in SHELLS:
        return any(
            kind is WordKind.PATTERN
            or (kind.is_literal and (SHELL_COMMAND_FLAG.fullmatch(word) or word == "--command"))
            or (kind.is_literal and word.startswith("--command="))
            for word, kind in rest
        )
    if base == "eval":
        return True
    if base == "find":
        return any(
            kind is WordKind.PATTERN or (kind.is_literal and word in FIND_UNSAFE)
            for word, kind in rest
        )
    return False


@dataclass(slots=True)
class _Level:
    """What one parse level collects for the stdin-shell heuristic."""

    depth: int
    source: bytes = b""
    error_end: int = -1
    segments: list[Segment] = field(default_factory=list)
    data: list[str] = field(default_factory=list)
    stdin_shell: bool = False


class _Analysis:
    """Accumulates the segments of a command and its nested command strings."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.understood = True
        # Bounds the work on adversarial input: past it, the rest is unknown (fails closed).
        self.parses_left = _MAX_PARSES
        self.nodes_left = MAX_SYNTAX_NODES

    def unknown(self, text: str) -> None:
        """A command string that cannot be read: every deny family matches it."""
        self.understood = False
        self.segments.append(Segment((text,), (WordKind.SPLIT,), False, True, (0,)))

    def parse(self, text: str, *, depth: int, nested: bool, joined: bool = False) -> None:
        if depth > MAX_NESTING or self.parses_left <= 0:
            self.unknown(text)
            return
        self.parses_left -= 1
        if _rough_tokens(text) > max(self.nodes_left, 0):
            # Parsing and reading this much would hold the event loop (tree-sitter keeps the
            # GIL): it is not read at all, so no rule covers it and every deny rule matches.
            self.unknown(text)
            return
        if not _understood_text(text):
            self.understood = False
        source = text.encode("utf-8")
        tree = Parser(_language()).parse(source)
        self.nodes_left -= tree.root_node.descendant_count
        if self.nodes_left < 0:
            self.unknown(text)
            return
        level = _Level(depth, source)
        self._walk(tree.root_node, level, nested)
        if tree.root_node.has_error:
            # Error recovery files words bash runs outside any command (`[;git` gives a
            # test_command holding git): every word outside a command may start one. And
            # after the first error, the structure is in doubt: the rest is read on its own.
            self._loose_words(tree.root_node, level, nested)
            if level.error_end >= 0 and source[level.error_end :].strip():
                rest = source[level.error_end :].decode("utf-8", errors="replace")
                self.parse(rest, depth=depth + 1, nested=nested)
        if level.stdin_shell:
            # Something in this command runs a shell on its stdin: what could be fed to it
            # (heredocs, here-strings, the arguments of any command) is read as commands too.
            for data in level.data:
                self.parse(data, depth=depth + 1, nested=True)
            for segment in level.segments:
                arguments = [
                    word
                    for word, kind in zip(segment.words[1:], segment.kinds[1:], strict=True)
                    if kind.is_literal
                ]
                if arguments:
                    self.parse(" ".join(arguments), depth=depth + 1, nested=True)
        if "\\\n" in text and not joined:
            self.parse(text.replace("\\\n", ""), depth=depth, nested=nested, joined=True)

    def _walk(self, root: Node, level: _Level, nested: bool) -> None:
        # Iterative: a deeply nested command must not exhaust Python's recursion limit.
        # Items: node, nested, tainted (under a redirect that is not harmless), statement
        # (in a position where a statement stands).
        stack: list[tuple[Node, bool, bool, bool]] = [(root, nested, False, True)]
        extras: dict[int, list[Node]] = {}
        while stack:
            node, inside, tainted, statement = stack.pop()
            if node.is_error or node.is_missing:
                self.understood = False
            if node.is_error:
                if level.error_end < 0:
                    level.error_end = node.end_byte
                self._loose_words(node, level, inside)
            kind = node.type
            children_statement = False
            if kind in _GAPLESS:
                self._reread_glued(node, level, inside)
            if kind == "command":
                self._command(node, level, inside, tainted, extras.pop(node.id, []))
            elif kind == "redirected_statement":
                tainted = self._redirected(node, level, inside, tainted, extras)
                children_statement = True
            elif kind in _SUBSTITUTIONS:
                inside = True
                children_statement = True
            elif kind in _STRUCTURE:
                if node.child_count and node.children[0].type == "((":
                    # tree-sitter files an arithmetic command ((…)) as a compound statement.
                    self.understood = False
                children_statement = True
            elif kind in ("variable_assignment", "variable_assignments") and statement:
                self._add(level, Segment((), (), False, inside, ()))
            elif kind in ("declaration_command", "unset_command"):
                self.understood = False
                self._declaration(node, level, inside)
            elif kind == "heredoc_redirect":
                self.understood = False
                self._heredoc(node, level, inside)
            elif kind == "comment":
                self._comment(node, level, inside)
            elif statement and node.is_named and kind not in _UNDERSTOOD_STATEMENTS:
                self.understood = False
                children_statement = True
            for index in range(node.child_count - 1, -1, -1):
                child = node.children[index]
                child_statement = children_statement
                if kind == "redirected_statement":
                    child_statement = node.field_name_for_child(index) == "body"
                stack.append((child, inside, tainted, child_statement))

    def _reread_glued(self, node: Node, level: _Level, nested: bool) -> None:
        """Where the parser glued lines bash reads apart, parse the rest again on its own."""
        glued = _glued_at(node)
        if glued is None:
            return
        self.understood = False
        rest = (node.text or b"")[glued - node.start_byte :]
        self.parse(rest.decode("utf-8", errors="replace"), depth=level.depth + 1, nested=nested)

    def _redirected(
        self,
        node: Node,
        level: _Level,
        nested: bool,
        tainted: bool,
        extras: dict[int, list[Node]],
    ) -> bool:
        body: Node | None = None
        extra: list[Node] = []
        for index, child in enumerate(node.children):
            name = node.field_name_for_child(index)
            if name == "body":
                body = child
            elif name == "redirect":
                tainted = tainted or not _harmless_redirect(child)
                extra.extend(_extra_destinations(child))
                if child.type == "herestring_redirect":
                    self._herestring(child, level)
        if extra:
            target = _last_command(body) if body is not None else None
            if target is not None:
                extras.setdefault(target.id, []).extend(extra)
            else:
                words = [_word(word) for word in extra]
                self._add(
                    level,
                    Segment(
                        tuple(word.value for word in words),
                        tuple(word.kind for word in words),
                        False,
                        nested,
                        tuple(range(len(words))),
                    ),
                )
        return tainted

    def _command(
        self, node: Node, level: _Level, nested: bool, tainted: bool, extra: list[Node]
    ) -> None:
        word_nodes: list[Node] = []
        plain = not tainted
        loose = False
        redirect_end = -1
        for index, child in enumerate(node.children):
            name = node.field_name_for_child(index)
            if name in ("name", "argument"):
                if child.start_byte == redirect_end:
                    # `>[\\|x ls`: bash reads `[|x` as the file and runs ls; tree-sitter ends
                    # the file at `[` and runs `\\|x`. Word boundaries are in doubt, so any
                    # word may be the command.
                    self.understood = False
                    loose = True
                word_nodes.append(child)
            elif name == "redirect" or child.type.endswith("_redirect"):
                redirect_end = child.end_byte
                plain = plain and _harmless_redirect(child)
                word_nodes.extend(_extra_destinations(child))
                if child.type == "herestring_redirect":
                    self._herestring(child, level)
            elif child.type != "comment":
                # An assignment prefix (FOO=1 git …) or anything not modelled.
                plain = False
        words: list[_Word] = []
        source = node.text or b""
        word_start = previous_end = -1
        for word_node in word_nodes:
            word = _word(word_node)
            if word_node.start_byte == previous_end:
                # Nodes with nothing between them are one word to bash (`""\\rm` is rm), though
                # tree-sitter may file them as two.
                self.understood = False
                text = source[word_start - node.start_byte : word_node.end_byte - node.start_byte]
                words[-1] = _joined([words[-1], word], text.decode("utf-8", errors="replace"))
            else:
                words.append(word)
                word_start = word_node.start_byte
            previous_end = word_node.end_byte
        words.extend(_word(word) for word in extra)
        self._words(
            tuple(word.value for word in words),
            tuple(word.kind for word in words),
            level,
            nested=nested,
            plain=plain and not loose,
            loose=loose,
        )

    def _words(
        self,
        words: tuple[str, ...],
        kinds: tuple[WordKind, ...],
        level: _Level,
        *,
        nested: bool,
        plain: bool,
        loose: bool = False,
    ) -> None:
        """Add the segment for one command's words, and the commands its arguments run. With
        `loose`, every word not starting with `-` may be the command."""
        starts = _starts(words, kinds)
        if loose:
            starts = tuple(
                i for i in range(len(words)) if i == 0 or not _is_option(words[i], kinds[i])
            )
        simple = (
            plain
            and bool(words)
            and kinds[0] is WordKind.BARE
            and all(kind.is_literal or kind is WordKind.PATTERN for kind in kinds)
            and not any(_runs_code_itself(words, kinds, start) for start in starts)
        )
        self._add(level, Segment(words, kinds, simple, nested, starts))
        for start in starts:
            if kinds[start].is_literal and posixpath.basename(words[start]) in LAUNCHERS:
                self._launched(words[start:], kinds[start:], level)

    def _launched(self, words: Sequence[str], kinds: Sequence[WordKind], level: _Level) -> None:
        """Parse the command strings and -exec commands a launcher at words[0] runs."""
        base = posixpath.basename(words[0])
        depth = level.depth + 1
        rest = list(zip(words[1:], kinds[1:], strict=True))
        if base in SHELLS:
            flagged = False
            first = True
            for word, kind in rest:
                if kind.is_literal and word.startswith("--command="):
                    self.parse(word.removeprefix("--command="), depth=depth, nested=True)
                    flagged = True
                elif kind is WordKind.PATTERN or (
                    kind.is_literal and (SHELL_COMMAND_FLAG.fullmatch(word) or word == "--command")
                ):
                    flagged = True
                elif _is_option(word, kind):
                    continue
                elif flagged and kind.is_literal:
                    self.parse(word, depth=depth, nested=True)
                    first = False
                elif flagged and first:
                    self.unknown(word)
                    first = False
            if not flagged:
                level.stdin_shell = True
        elif base == "eval":
            if all(kind.is_literal for _, kind in rest):
                if rest:
                    self.parse(" ".join(word for word, _ in rest), depth=depth, nested=True)
            else:
                self.unknown(" ".join(word for word, _ in rest))
        elif base == "watch":
            # watch runs its arguments joined, through sh -c.
            arguments = [(w, k) for w, k in rest if not _is_option(w, k)]
            if not all(kind.is_literal for _, kind in arguments):
                self.unknown(" ".join(word for word, _ in arguments))
            for word, _ in arguments:
                self.parse(word, depth=depth, nested=True)
            if len(arguments) > 1:
                self.parse(" ".join(word for word, _ in arguments), depth=depth, nested=True)
        elif base == "trap":
            arguments = [(w, k) for w, k in rest if not _is_option(w, k)]
            if arguments:
                word, kind = arguments[0]
                if kind.is_literal:
                    self.parse(word, depth=depth, nested=True)
                else:
                    self.unknown(word)
        elif base == "find":
            self._find_actions(rest, level)

    def _find_actions(self, rest: list[tuple[str, WordKind]], level: _Level) -> None:
        index = 0
        while index < len(rest):
            word, kind = rest[index]
            index += 1
            if not (kind.is_literal and word in FIND_EXEC):
                continue
            action: list[tuple[str, WordKind]] = []
            while index < len(rest) and not (
                rest[index][1].is_literal and rest[index][0] in (";", "+")
            ):
                action.append(rest[index])
                index += 1
            if not action:
                continue
            if level.depth + 1 > MAX_NESTING:
                self.unknown(" ".join(w for w, _ in action))
                continue
            inner = _Level(level.depth + 1)
            self._words(
                tuple(w for w, _ in action),
                tuple(k for _, k in action),
                inner,
                nested=True,
                plain=False,
            )
            level.stdin_shell = level.stdin_shell or inner.stdin_shell

    def _loose_words(self, node: Node, level: _Level, nested: bool) -> None:
        """Error recovery leaves words outside any command (`a || b -c $(` keeps `b -c` loose
        in an ERROR node); bash may still run them, so for deny every one may start a command."""
        words: list[_Word] = []
        pending = list(reversed(node.children))
        while pending:
            child = pending.pop()
            if child.type == "variable_name":
                words.append(_Word(_text(child), WordKind.QUOTED))
            elif child.type in _LOOSE_WORD_NODES:
                words.append(_word(child))
            elif child.type in ("string_content", "heredoc_start"):
                # Text the parser lost track of (quotes it misplaced, a heredoc delimiter it
                # ran into `|git`): bash may read it as commands.
                self.parse(_text(child), depth=level.depth + 1, nested=nested)
            elif child.type not in _OWN_SEGMENTS and not child.is_error:
                pending.extend(reversed(child.children))
        if not words:
            return
        kinds = tuple(word.kind for word in words)
        values = tuple(word.value for word in words)
        starts = tuple(i for i in range(len(words)) if not _is_option(values[i], kinds[i]))
        self._add(level, Segment(values, kinds, False, nested, starts or (0,)))

    def _declaration(self, node: Node, level: _Level, nested: bool) -> None:
        """`export`, `declare`, `local`, `unset`…: a segment for deny, never simple."""
        keyword = node.children[0] if node.children else None
        if keyword is None:
            return
        words = [_Word(_text(keyword), WordKind.BARE)]
        words.extend(_word(child) for child in node.children[1:] if child.is_named)
        self._add(
            level,
            Segment(
                tuple(word.value for word in words),
                tuple(word.kind for word in words),
                False,
                nested,
                (0,),
            ),
        )

    def _comment(self, node: Node, level: _Level, nested: bool) -> None:
        """Where tree-sitter sees a comment that bash may not, read the text again.

        bash starts a comment only at the start of a word; tree-sitter sometimes starts one
        inside a word (`ls#;rm x`): the command is read again with that `#` as a plain
        character. Inside backticks bash ends the comment at the closing backtick; tree-sitter
        may run it to the end of the line (`` `#`rm x ``): what follows the backtick is read."""
        start = node.start_byte
        text = _text(node)
        if start > 0 and level.source[start - 1 : start] not in _COMMENT_MAY_FOLLOW:
            self.understood = False
            source = level.source[:start] + b"_" + level.source[start + 1 :]
            self.parse(
                source.decode("utf-8", errors="replace"), depth=level.depth + 1, nested=nested
            )
        if "`" in text:
            self.understood = False
            self.parse(text.split("`", 1)[1], depth=level.depth + 1, nested=nested)

    def _herestring(self, node: Node, level: _Level) -> None:
        for child in node.named_children:
            word = _word(child)
            if word.kind.is_literal:
                level.data.append(word.value)

    def _heredoc(self, node: Node, level: _Level, nested: bool) -> None:
        quoted = False
        for child in node.children:
            if child.type == "heredoc_start":
                quoted = any(char in _text(child) for char in "'\"\\")
            elif child.type == "heredoc_body":
                body = _text(child)
                level.data.append(body)
                if not quoted:
                    # tree-sitter parses $(…) in the body but leaves backticks as text.
                    for command in _backticked(body):
                        self.parse(command, depth=level.depth + 1, nested=True)

    def _add(self, level: _Level, segment: Segment) -> None:
        self.segments.append(segment)
        level.segments.append(segment)


def _backticked(text: str) -> list[str]:
    """The commands between unescaped backticks in an unquoted heredoc body."""
    commands: list[str] = []
    current: list[str] | None = None
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            if current is not None:
                current.append(text[index + 1])
            index += 2
            continue
        if char == "`":
            if current is None:
                current = []
            else:
                commands.append("".join(current))
                current = None
        elif current is not None:
            current.append(char)
        index += 1
    if current is not None:
        commands.append("".join(current))
    return commands
