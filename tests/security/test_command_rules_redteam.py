"""Red team of the program-aware command rules, from the agent's seat: scripts that
the sed and awk readers took for read-only while the real program writes a file or runs a
command, so that an allow family an approver saved on a harmless command (`Bash(sed:*)`,
`Bash(awk:*)`) covered them.

Each bypass was first confirmed for real inside bubblewrap (`--ro-bind / /`, a temp dir as the
only writable place, `--unshare-all`, `--die-with-parent`), with GNU sed 4.9 and mawk
1.3.4-20200120 (Debian 12's `awk`), a `notes.txt` holding two lines: the docstrings say what
the command did there. These are pure unit tests of the rules; nothing here runs a program.
"""

from __future__ import annotations

import pytest

from callgate.server.commands.matching import command_allowed, parse_family
from callgate.server.commands.programs import Effect
from callgate.server.commands.programs.scripts import awk_program, sed_script


def _covered(command: str, family: str) -> bool:
    return command_allowed(command, (), [parse_family(family)])


# ---------------------------------------------------------------- sed: labels end at a blank


@pytest.mark.parametrize(
    "command",
    [
        # Confirmed: creates `out` and writes both lines to it (exit 0).
        "sed -n ':x w out' notes.txt",
        # Confirmed: creates `pwn` (the `e` command runs `touch pwn` for each line).
        "sed -n ':x e touch pwn' notes.txt",
        # Confirmed: creates `out` although sed then fails ("can't find label for jump to
        # `x'"): `w` files are opened while the script is compiled.
        "sed -n 'bx w out' notes.txt",
        "sed -n 'tx W out' notes.txt",
        "sed -n 'Tx\tw out' notes.txt",
        # Confirmed: creates `out2` (`v` reads its version like a label).
        "sed -n 'v 4.2 w out2' notes.txt",
        "sed -n -e ':a s/x/y/w out' notes.txt",
    ],
)
def test_a_sed_label_ends_at_a_blank_and_the_next_command_is_read(command: str) -> None:
    """GNU sed 4.9's read_label ends a label (`:a`, `b a`, `t a`, `T a`) and `v`'s version at
    whitespace or `;`, and what follows is the next command; the reader skipped to the end of
    the line, so `Bash(sed:*)` covered `sed -n ':x w out'`, which writes `out`."""
    assert not _covered(command, "Bash(sed:*)")


@pytest.mark.parametrize(
    "command",
    [
        "sed -n ':a;N;$!ba;p' notes.txt",
        "sed ':a\nN\n$!ba\ns/\\n/ /g' notes.txt",
        "sed -n '/x/{:a n;p;ba}' notes.txt",
        "sed -n 'v 4.2' notes.txt",
    ],
)
def test_read_only_sed_scripts_with_labels_stay_covered(command: str) -> None:
    """The fix reads the command after a label; scripts that only branch and print stay
    covered."""
    assert _covered(command, "Bash(sed:*)")


def test_a_sed_label_followed_by_a_write_is_a_finding() -> None:
    assert (Effect.WRITE, "script command `w` (writes a file)") in sed_script(":x w out")
    assert sed_script(":a;N;$!ba;p") == ()


# ---------------------------------------------------------------- awk: strings, regexps, lines


@pytest.mark.parametrize(
    "command",
    [
        # Confirmed: creates `pwn1`. The reader took `/ ; system(...) ; y = /` for a regular
        # expression (a `/` after `;`), but awk's `/;/` had already closed at that `/`.
        "awk '{ x = /;/ ; system(\"touch pwn1\") ; y = /x/ }' notes.txt",
        # Confirmed: creates `pwn2`. Strings were removed before regular expressions, so
        # `"/ { print } { system("` was taken for one string.
        'awk \'/"/ { print } { system("touch pwn2") } /"/\' notes.txt',
        'awk \'$0 ~ /"/ { print > "out" } /"/\' notes.txt',
        "awk '!/;/ ; system(\"id\") ; z = /x/' notes.txt",
    ],
)
def test_awk_code_between_regular_expressions_is_read(command: str) -> None:
    """awk's lexer reads strings and regular expressions in one left-to-right pass; the
    reader's two regex substitutions could hide `system` (or `>`) inside what they took for a
    string or a regular expression, and `Bash(awk:*)` covered a program that runs a command."""
    assert not _covered(command, "Bash(awk:*)")


def test_an_awk_statement_continued_with_a_backslash_newline_is_read() -> None:
    """Confirmed: `{ x = 1 \\<newline>/ 2 ; system("touch pwn3") ; y = 3 / 4 }` creates
    `pwn3`: the backslash-newline joins the lines, so `/ 2 ; … ; y = 3 /` is two divisions,
    which the reader took for a regular expression after a newline."""
    for joined in ("\\\n", "\\\r\n"):
        program = "{ x = 1 " + joined + '/ 2 ; system("touch pwn3") ; y = 3 / 4 }'
        assert any(effect is Effect.CODE for effect, _ in awk_program(program)), joined


@pytest.mark.parametrize(
    "program",
    [
        '/[[:alpha:]/"]/ ; system("id") ; /"/',
        '/[/]/ { system("id") }',
        '{ print length / 2 ; system("id") ; y = 1 / 2 }',
    ],
)
def test_an_awk_slash_the_awks_read_differently_is_not_read(program: str) -> None:
    """A `/` inside brackets of a regular expression (gawk reads it inside, other awks end
    the expression there) or after parenless `length` (a division or a regular expression,
    by awk) is not read: the program is unknown, never read-only."""
    assert awk_program(program)


@pytest.mark.parametrize(
    "command",
    [
        "awk '{print $1}' notes.txt",
        "awk -F: '/^root/ { print $1 / 2, NR }' notes.txt",
        "awk '/a|b/ && !/c\\/d/ { n++ } END { print n / NR }' notes.txt",
        "awk '{ s = \"a/b;c\" ; print s, length($0) / 2 }' notes.txt",
        "awk '# a comment with \" and /\n{ print }' notes.txt",
        "awk '/[[:space:]]+$/ { print NR \": \" $0 }' notes.txt",
        "awk '$3 > 10' notes.txt",
    ],
)
def test_read_only_awk_programs_stay_covered(command: str) -> None:
    """The lexer keeps what only reads covered: divisions, regular expressions with `|`,
    strings with `/` and `;`, comments, bracket classes, comparisons without print."""
    assert _covered(command, "Bash(awk:*)")
