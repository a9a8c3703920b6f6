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
        if command in _SED_LABELLED:
            # GNU: a label ends at a newline or a semicolon.
            while self.peek() and self.peek() not in ";\n":
                self.i += 1
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
        if command == "v":
            while self.peek() and self.peek() not in ";\n":
                self.i += 1
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

_AWK_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
# A regular expression literal where awk expects an operand: after start, `(`, `,`, `!`, `~`,
# `{`, `;`, `&&`, `||`, a newline or a blank after one of these.
_AWK_REGEX = re.compile(r"(^|[(,!~{;&|\n]\s*)/(?:[^/\\\n]|\\.)*/")
_AWK_CODE = re.compile(r"\bsystem\b|@|\|")
_AWK_INPUT = re.compile(r"\bgetline\b")
_AWK_PRINT = re.compile(r"\b(print|printf)\b")


def awk_program(text: str) -> tuple[tuple[Effect, str], ...]:
    """POSIX awk and gawk 5.2 program text (gawk manual §5.6 "Redirecting Output of print and
    printf", §4.10 "Explicit Input with getline", §9.1.4 "system", §2.7 "@load"): `system`,
    pipes, `getline`, `@load`/`@include` run code or read what the words do not say; `>` in a
    program that prints may write a file. Anything else only reads its input."""
    stripped = _AWK_REGEX.sub(r"\1//", _AWK_STRING.sub('""', text))
    if '"' in stripped.replace('""', ""):
        return ((Effect.UNKNOWN, "program with a string that could not be read"),)
    found: list[tuple[Effect, str]] = []
    for match in _AWK_CODE.finditer(stripped.replace("||", "  ")):
        word = match.group(0)
        found.append((Effect.CODE, f"program uses `{word}` (runs a command or loads code)"))
        break
    if _AWK_INPUT.search(stripped):
        found.append((Effect.UNKNOWN, "program uses `getline` (reads input the words do not name)"))
    if ">" in stripped and _AWK_PRINT.search(stripped):
        found.append((Effect.WRITE, "program prints with `>` (may write a file)"))
    return tuple(found)
