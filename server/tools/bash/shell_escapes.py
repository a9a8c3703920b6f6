"""What in a shell command would escape process supervision (`nohup`, `setsid`, `&`, ...),
found with the shell grammar, literal `bash -c` strings included."""

from __future__ import annotations

import functools
import posixpath
import re

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from ...commands import WordKind, parse_command

_ESCAPE_WORDS = frozenset({"nohup", "setsid", "disown", "coproc", "bg"})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh"})
_SHELL_COMMAND_FLAG = re.compile(r"-[A-Za-z]*c[A-Za-z]*")
_MAX_COMMAND_STRING_DEPTH = 4


@functools.cache
def _parser() -> Parser:
    # Built on first use (no work at import time); used from the event loop thread only.
    return Parser(Language(tree_sitter_bash.language()))


def _has_async_operator(command: str) -> bool | None:
    """True when `&` runs something asynchronously anywhere in the parse tree (substitutions
    and subshells included); None when the command does not parse."""
    tree = _parser().parse(command.encode("utf-8"))
    if tree.root_node.has_error:
        return None
    stack: list[Node] = [tree.root_node]
    while stack:
        node = stack.pop()
        if not node.is_named and node.type == "&":
            return True
        stack.extend(node.children)
    return False


def supervision_escape(command: str, *, depth: int = 0) -> str | None:
    """What in `command` would escape a supervisor (a sentence fragment), or None."""
    found = _has_async_operator(command)
    if found is None:
        return "a command that does not parse"
    if found:
        return "`&` (a command left running asynchronously)"
    for segment in parse_command(command).segments:
        for start in segment.starts:
            if start >= len(segment.words) or not segment.kinds[start].is_literal:
                continue
            word = posixpath.basename(segment.words[start])
            if word in _ESCAPE_WORDS:
                return f"`{word}`"
            string = _command_string(segment.words, segment.kinds, start)
            if string is None:
                continue
            if depth >= _MAX_COMMAND_STRING_DEPTH or not string:
                return "a nested command string too deep or not literal"
            nested = supervision_escape(string, depth=depth + 1)
            if nested is not None:
                return nested
    return None


def _command_string(words: tuple[str, ...], kinds: tuple[WordKind, ...], start: int) -> str | None:
    """The command string a shell at `start` is given with `-c` ("" when it is not literal),
    the joined arguments of `eval`, or None when the segment runs no command string."""
    head = posixpath.basename(words[start])
    if head == "eval":
        rest = range(start + 1, len(words))
        if not all(kinds[i].is_literal for i in rest):
            return ""
        return " ".join(words[i] for i in rest)
    if head not in _SHELLS:
        return None
    for index in range(start + 1, len(words)):
        if kinds[index].is_literal and _SHELL_COMMAND_FLAG.fullmatch(words[index]):
            if index + 1 < len(words) and kinds[index + 1].is_literal:
                return words[index + 1]
            return ""
    return None


def uses_setsid(command: str) -> bool:
    for segment in parse_command(command).segments:
        for start in segment.starts:
            if (
                start < len(segment.words)
                and segment.kinds[start].is_literal
                and posixpath.basename(segment.words[start]) == "setsid"
            ):
                return True
    return False
