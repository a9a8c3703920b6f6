"""What the command rules know about programs, as data: shells and the flag that hands them a
command string, transparent wrappers (the next word is the command), interpreters and builtins
that run code, the commands whose arguments hold commands, and find's actions that run or
delete things. Read by the parse (`shell_parse`) and the rules (`commands`)."""

from __future__ import annotations

import posixpath
import re

SHELL_COMMAND_FLAG = re.compile(r"-[A-Za-z]*c[A-Za-z]*")

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "su"})
# Reserved words are here too: where tree-sitter misreads one as a command word
# (`! ! head`), the word after it is what bash runs.
RESERVED = frozenset(
    {"!", "{", "}", "[[", "]]", "if", "then", "else", "elif", "fi", "do", "done", "while"}
    | {"until", "for", "select", "case", "esac", "in", "function", "time", "coproc"}
)
WRAPPERS = RESERVED | frozenset(
    {
        "builtin",
        "busybox",
        "chroot",
        "command",
        "doas",
        "env",
        "exec",
        "fakeroot",
        "flock",
        "ionice",
        "nice",
        "nohup",
        "setsid",
        "stdbuf",
        "strace",
        "sudo",
        "taskset",
        "timeout",
        "unbuffer",
        "watch",
        "xargs",
    }
)
INTERPRETERS = re.compile(
    r"(python|pypy|perl|ruby|node|nodejs|deno|bun|php|lua|awk|gawk|mawk|nawk|Rscript|pwsh|"
    r"osascript|tclsh|expect)[0-9.]*"
)
CODE_BUILTINS = frozenset({"eval", "source", ".", "trap", "alias"})
# Commands whose arguments hold commands this module reads (see `_Analysis._launched`).
LAUNCHERS = SHELLS | {"eval", "watch", "trap", "find"}
FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
FIND_UNSAFE = FIND_EXEC | {"-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}


def runs_other_code(word: str) -> bool:
    base = posixpath.basename(word)
    return (
        base in SHELLS
        or base in WRAPPERS
        or base in CODE_BUILTINS
        or INTERPRETERS.fullmatch(base) is not None
    )
