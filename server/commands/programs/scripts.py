"""Readers for the scripts some programs take as an operand: sed and awk.

Each returns what the script does beyond reading, as (effect, words) pairs; a script it cannot
parse is `Effect.UNKNOWN`. Both are allow-lists: a sed command or an awk construct not known to
only read is reported, so a family never covers a script these readers misunderstand.
"""

from __future__ import annotations

import re

from .model import Effect

_SED_READ_ONLY = frozenset("=dDgGhHlnNpPxzFqQ")
_SED_LABELLED = frozenset("btT:")
_SED_TEXT = frozenset("aic")
_SED_S_FLAGS = frozenset("gpiImM0123456789")


def sed_script(text: str) -> tuple[tuple[Effect, str], ...]:
    """GNU sed 4.9 script syntax (sed manual §3.2 "sed commands summary", §3.3 "The s
    Command", §3.8 "Multiple commands syntax")."""
    found: list[tuple[Effect, str]] = []
    try:
        _Sed(text, found).run()
    except _Unparsed as exc:
        found.append((Effect.UNKNOWN, f"script that could not be read ({exc})"))
    return tuple(found)


class _Unparsed(Exception):
    pass


class _Sed:
    def __init__(self, text: str, found: list[tuple[Effect, str]]) -> None:
        self.text = text
        self.i = 0
        self.found = found

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def run(self) -> None:
        text = self.text
        while True:
            while self.peek() and self.peek() in " \t\n;":
                self.i += 1
            if self.i >= len(text):
                return
            if self.peek() == "#":
                self.to_line_end()
                continue
            self.address()
            while self.peek() in (" ", "\t"):
                self.i += 1
            if self.peek() == "!":
                self.i += 1
                while self.peek() in (" ", "\t", "!"):
                    self.i += 1
            command = self.peek()
            if not command:
                raise _Unparsed("an address without a command")
            self.i += 1
            self.command(command)

    def to_line_end(self) -> str:
        end = self.text.find("\n", self.i)
        end = len(self.text) if end < 0 else end
        rest = self.text[self.i : end]
        self.i = end
        return rest

    def address(self) -> None:
        self.one_address()
        if self.peek() == ",":
            self.i += 1
            while self.peek() in (" ", "\t"):
                self.i += 1
            if self.peek() in ("+", "~"):
                self.i += 1
                self.number(required=True)
            else:
                self.one_address(required=True)

    def one_address(self, *, required: bool = False) -> None:
        char = self.peek()
        if char.isdigit():
            self.number(required=True)
            if self.peek() == "~":
                self.i += 1
                self.number(required=True)
        elif char == "$":
            self.i += 1
        elif char in {"/", "\\"}:
            if char == "\\":
                self.i += 1
                delimiter = self.peek()
                if not delimiter or delimiter in "\n\\":
                    raise _Unparsed("a bad address delimiter")
            else:
                delimiter = "/"
            self.i += 1
            self.delimited(delimiter)
            while self.peek() in ("I", "M"):
                self.i += 1
        elif required:
            raise _Unparsed("a missing address")

    def number(self, *, required: bool) -> None:
        start = self.i
        while self.peek().isdigit():
            self.i += 1
        if required and self.i == start:
            raise _Unparsed("a missing number")

    def delimited(self, delimiter: str) -> None:
        """Skip to after the next unescaped `delimiter` (GNU sed's match_slash)."""
        text = self.text
        while self.i < len(text):
            char = text[self.i]
            if char == "\\":
                self.i += 2
                continue
            if char == "\n" and delimiter != "\n":
                raise _Unparsed("a newline inside a regular expression")
            self.i += 1
            if char == delimiter:
                return
        raise _Unparsed("an unterminated regular expression")

    def label(self) -> None:
        """A label (`:a`, `b a`) or `v`'s version: GNU sed 4.9's read_label skips blanks, then
        ends the word at whitespace or a semicolon; what follows is the next command
        (`:a w out` is the label `a` and the command `w out`)."""
        while self.peek() in (" ", "\t"):
            self.i += 1
        while self.peek() and not self.peek().isspace() and self.peek() != ";":
            self.i += 1

    def end_of_command(self) -> None:
        while self.peek() in (" ", "\t"):
            self.i += 1
        if self.peek() == "#":
            self.to_line_end()
            return
        if self.peek() and self.peek() not in ";\n}":
            raise _Unparsed(f"text after a command: {self.text[self.i : self.i + 20]!r}")

    def command(self, command: str) -> None:
        if command in "{}":
            return
        if command in _SED_READ_ONLY:
            if command in "lqQL":
                while self.peek() in (" ", "\t"):
                    self.i += 1
                self.number(required=False)
            self.end_of_command()
            return
        if command in _SED_LABELLED or command == "v":
            self.label()
            return
        if command in _SED_TEXT:
            # `a text`, `a\` newline text: everything to the end of the line, with
            # backslash-newline continuing it.
            while self.i < len(self.text):
                char = self.text[self.i]
                if char == "\\":
                    self.i += 2
                    continue
                if char == "\n":
                    break
                self.i += 1
            return
        if command in "rR":
            self.to_line_end()
            return
        if command in "wW":
            self.found.append((Effect.WRITE, f"script command `{command}` (writes a file)"))
            self.to_line_end()
            return
        if command == "e":
            self.found.append((Effect.CODE, "script command `e` (runs a shell command)"))
            self.to_line_end()
            return
        if command == "s":
            self.substitute()
            return
        if command == "y":
            delimiter = self.peek()
            if not delimiter or delimiter in "\n\\":
                raise _Unparsed("a bad y delimiter")
            self.i += 1
            self.delimited(delimiter)
            self.delimited(delimiter)
            self.end_of_command()
            return
        raise _Unparsed(f"the command {command!r}")

    def substitute(self) -> None:
        delimiter = self.peek()
        if not delimiter or delimiter in "\n\\":
            raise _Unparsed("a bad s delimiter")
        self.i += 1
        self.delimited(delimiter)
        # The replacement may hold escaped newlines (multi-line replacement).
        text = self.text
        while self.i < len(text):
            char = text[self.i]
            if char == "\\":
                self.i += 2
                continue
            self.i += 1
            if char == delimiter:
                break
        else:
            raise _Unparsed("an unterminated replacement")
        while self.i < len(text):
            flag = text[self.i]
            if flag in _SED_S_FLAGS:
                self.i += 1
                continue
            if flag == "e":
                self.found.append((Effect.CODE, "`s` command flag `e` (runs the pattern space)"))
                self.i += 1
                continue
            if flag == "w":
                self.found.append((Effect.WRITE, "`s` command flag `w` (writes a file)"))
                self.i += 1
                self.to_line_end()
                return
            break
        self.end_of_command()


# ------------------------------------------------------------------ awk

_AWK_CODE = re.compile(r"\bsystem\b|@|\|")
_AWK_INPUT = re.compile(r"\bgetline\b")
_AWK_PRINT = re.compile(r"\b(print|printf)\b")
_AWK_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_AWK_NUMBER = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# Keywords after which a `/` starts a regular expression, as after an operator.
_AWK_KEYWORDS = frozenset(
    {
        *("BEGIN", "END", "BEGINFILE", "ENDFILE", "function", "func"),
        *("print", "printf", "return", "delete", "exit", "next", "nextfile"),
        *("if", "else", "while", "do", "for", "in", "switch", "case", "default"),
    }
)
# Words after which awks disagree on what `/` is: mawk reads a division after `getline`,
# gawk's grammar a regular expression after parenless `length` (and vice versa).
_AWK_AMBIGUOUS = frozenset({"getline", "length"})


def awk_program(text: str) -> tuple[tuple[Effect, str], ...]:
    """POSIX awk and gawk 5.2 program text (gawk manual §5.6 "Redirecting Output of print and
    printf", §4.10 "Explicit Input with getline", §9.1.4 "system", §2.7 "@load"): `system`,
    pipes, `getline`, `@load`/`@include` run code or read what the words do not say; `>` in a
    program that prints may write a file. Anything else only reads its input.

    The program is first read token by token the way awk's lexer does (`_awk_code`), so that
    the words checked are code, never the inside of a string, a regular expression or a
    comment: `x = /;/ ; system("id") ; y = /x/` and `/"/ { system("id") } /"/` both run `id`."""
    try:
        code = _awk_code(text)
    except _Unparsed as exc:
        return ((Effect.UNKNOWN, f"program that could not be read ({exc})"),)
    found: list[tuple[Effect, str]] = []
    for match in _AWK_CODE.finditer(code.replace("||", "  ")):
        word = match.group(0)
        found.append((Effect.CODE, f"program uses `{word}` (runs a command or loads code)"))
        break
    if _AWK_INPUT.search(code):
        found.append((Effect.UNKNOWN, "program uses `getline` (reads input the words do not name)"))
    if ">" in code and _AWK_PRINT.search(code):
        found.append((Effect.WRITE, "program prints with `>` (may write a file)"))
    return tuple(found)


def _awk_code(text: str) -> str:
    """The program's code with each string literal replaced by `""`, each regular expression
    literal by `//`, comments dropped and backslash-newlines joined (gawk manual §3.1, §3.3
    "Regular Expression Constants", §1.6 "awk Statements Versus Lines").

    A `/` starts a regular expression unless it follows an operand (a name, a number, a string,
    `)`, `]`, `++`, `--`, or another regular expression), as in gawk's and mawk's lexers. A
    `/` after a word the awks read differently, or inside brackets of a regular expression
    (`/[/]/`, which some awks end at the inner `/`), is not read."""
    out: list[str] = []
    operand = False
    ambiguous = False
    i = 0
    n = len(text)
    while i < n:
        char = text[i]
        if char == "\\" and text[i + 1 : i + 2] in ("\n", "\r"):
            # gawk also joins a backslash, carriage return and newline.
            end = i + 3 if text[i + 1 : i + 3] == "\r\n" else i + 2
            out.append(" ")
            i = end
            continue
        if char in " \t\r":
            out.append(" ")
            i += 1
            continue
        if char == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if char == '"':
            i = _awk_string(text, i)
            out.append('""')
            operand, ambiguous = True, False
            continue
        if char == "/" and not operand:
            if ambiguous:
                raise _Unparsed("a `/` that awks read differently after `getline` or `length`")
            i = _awk_regex(text, i)
            out.append("//")
            operand, ambiguous = True, False
            continue
        i, token, operand, ambiguous = _awk_token(text, i)
        out.append(token)
    return "".join(out)


def _awk_token(text: str, i: int) -> tuple[int, str, bool, bool]:
    """The token at `text[i]` (not a blank, comment, string or regular expression): where it
    ends, its text, whether it ends an operand, and whether a `/` after it is ambiguous."""
    word = _AWK_WORD.match(text, i)
    if word is not None:
        name = word.group(0)
        ambiguous = name in _AWK_AMBIGUOUS
        return word.end(), name, not ambiguous and name not in _AWK_KEYWORDS, ambiguous
    number = _AWK_NUMBER.match(text, i)
    if number is not None:
        return number.end(), number.group(0), True, False
    if text.startswith(("++", "--"), i):
        return i + 2, text[i : i + 2], True, False
    return i + 1, text[i], text[i] in ")]", False


def _awk_string(text: str, i: int) -> int:
    """The index after the string literal starting at `text[i]` (a `"`)."""
    j = i + 1
    while j < len(text):
        char = text[j]
        if char == "\\":
            j += 2
            continue
        if char == "\n":
            raise _Unparsed("a newline inside a string")
        if char == '"':
            return j + 1
        j += 1
    raise _Unparsed("an unterminated string")


def _awk_regex(text: str, i: int) -> int:
    """The index after the regular expression literal starting at `text[i]` (a `/`)."""
    j = i + 1
    bracket = False
    while j < len(text):
        char = text[j]
        if char == "\\":
            j += 2
            continue
        if char == "\n":
            raise _Unparsed("a newline inside a regular expression")
        if bracket:
            if char == "/":
                raise _Unparsed("a `/` inside brackets of a regular expression")
            if char == "[" and text[j + 1 : j + 2] in (":", ".", "="):
                close = text.find(text[j + 1] + "]", j + 2)
                if close < 0:
                    raise _Unparsed("an unterminated bracket expression")
                j = close + 2
                continue
            if char == "]":
                bracket = False
            j += 1
            continue
        if char == "[":
            bracket = True
            j += 1
            if text[j : j + 1] == "^":
                j += 1
            if text[j : j + 1] == "]":
                j += 1
            continue
        if char == "/":
            return j + 1
        j += 1
    raise _Unparsed("an unterminated regular expression")
