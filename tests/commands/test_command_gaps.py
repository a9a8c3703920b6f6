"""What a deny family still cannot see (README, "What command rules do not see"): each test
pins today's behaviour, so a change in what is caught is a deliberate change of this list.

A deny on `Bash(rm:*)` catches rm under any spelling and wrapper, and what the program table
knows to delete files (`unlink`, `rmdir`, `shred -u`, `find -delete`, `git clean`, `git rm`,
`rsync --delete`, `tar --remove-files`, `zip -m`, `gzip`). It cannot see into code that is
not on the command line, and it does not treat overwriting or moving as deleting."""

from __future__ import annotations

import pytest

from callgate.server.commands.matching import command_allowed, command_denied, parse_family

RM = [parse_family("Bash(rm:*)")]


def denied(command: str) -> bool:
    return command_denied(command, (), RM)


@pytest.mark.parametrize(
    "command",
    [
        "rm x",
        "/bin/rm x",
        "sudo rm x",
        "xargs rm < list",
        "timeout 5 rm x",
        "env A=1 rm x",
        "bash -c 'rm x'",
        "find . -exec rm {} ;",
        "find . -name x -delete",
        "unlink x",
        "git clean -fdx",
        "git -C sub clean -f",
        "git rm x",
        "git reset --hard",
        "git stash drop",
        "$cmd x",
    ],
)
def test_what_a_deny_on_rm_catches(command: str) -> None:
    assert denied(command)


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("bash cleanup.sh", "a script run by name: its contents are not on the command line"),
        ("sh ./cleanup.sh", "a script run by name"),
        ("./cleanup.sh", "a program in the workspace"),
        ("source cleanup.sh", "a file read by the shell"),
        ("make clean", "a Makefile's recipes"),
        ("npm run clean", "a package.json script"),
        ("python -c 'import os; os.remove(\"x\")'", "an interpreter's code string"),
        ("perl -e 'unlink \"x\"'", "an interpreter's code string"),
        ('node -e \'require("fs").rmSync("x")\'', "an interpreter's code string"),
        ("awk 'BEGIN { system(\"rm x\") }'", "awk's system(): a code string"),
        ("ssh host rm x", "a command run on another machine"),
        ("docker exec box rm x", "a command run in a container"),
        ("mv x /tmp/x", "moving is not deleting"),
        ("truncate -s 0 x", "overwriting is not deleting"),
        ("cp /dev/null x", "overwriting is not deleting"),
        ("git checkout -- x", "discarding changes is not deleting files"),
    ],
)
def test_what_a_deny_on_rm_does_not_see(command: str, why: str) -> None:
    """Gaps: an exact deny rule, a deny on the program itself (`Bash(python:*)`), or the
    sandbox's read-only files are what stops these."""
    assert not denied(command), why


def test_an_allow_family_over_an_unlisted_program_covers_it_as_before() -> None:
    """A program the table does not list is opaque: a family naming it covers any arguments
    (the operator's words imply whatever the program does); none is offered as a candidate."""
    assert command_allowed("pytest -x --lf tests", (), [parse_family("Bash(pytest:*)")])
    assert command_allowed("./gradlew build --scan", (), [parse_family("Bash(./gradlew:*)")])


@pytest.mark.parametrize(
    ("family", "command", "expected"),
    [
        ("Bash(rm:*)", "gzip notes.txt", True),
        ("Bash(gzip:*)", "rm x", False),
        ("Bash(git clean:*)", "rm x", False),
        ("Bash(unlink:*)", "find . -delete", True),
        ("Bash(curl:*)", "wget https://example.com", True),
        ("Bash(wget:*)", "curl https://example.com", True),
        ("Bash(chmod:*)", "chown u x", True),
        ("Bash(rm -r:*)", "unlink x", False),
        ("Bash(rm -r:*)", "rm -R -f x", True),
    ],
)
def test_only_the_programs_that_name_an_action_stand_for_it(
    family: str, command: str, expected: bool
) -> None:
    """`Bash(rm:*)` stands for deleting; a deny over a program that merely also deletes
    (gzip, git clean) denies only that program, and a family with options denies the same
    program with those options in any spelling."""
    assert command_denied(command, (), [parse_family(family)]) is expected


def test_warnings_are_capped_for_a_huge_command() -> None:
    """A command with thousands of unknown options gives at most MAX_WARNINGS lines, the last
    counting the rest: the approval (and its digest) stays bounded."""
    from callgate.server.commands.matching import MAX_WARNINGS, command_warnings

    command = "git log " + " ".join(f"--unknown-{i}" for i in range(2000))
    lines = command_warnings(command)
    assert len(lines) == MAX_WARNINGS
    assert lines[-1] == f"… and {2000 - MAX_WARNINGS + 1} more"
