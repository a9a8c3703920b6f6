"""Ground truth for the program table: every command the rules classify as read-only and covered
by a read-only family really changes nothing when it runs.

For each read-only family over the table (`Bash(git log:*)`, `Bash(sed:*)`, and a read-only
mode switch such as `Bash(tar -t:*)`), the family's bare command and each of the entry's
read-only options alone run once, and Hypothesis draws option combinations in their spellings
(`--name=value`, `-xVALUE`, clusters, `--no-name`, before or after the operands) with operands
that make sense. Each command the family covers runs in bubblewrap against a copy of a fixture
workspace (a git repository, text files, archives); the workspace and HOME must be exactly as
before: every path's kind, inode, mode, size, mtime and content. A directory whose mtime alone
changed had a file created and removed in it (a lock file, a temporary object directory): that
is a write too.

A control shows the same harness sees the writes of commands the table does not call
read-only, and that no read-only family covers them; a fixed list of commands agents run every
day is checked like the drawn ones.

Drawn commands run only inside bubblewrap (see `ground_truth`); without a working bubblewrap
the module is skipped.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, assume, event, given, note, settings
from hypothesis import strategies as st

from callgate.server.commands.matching import (
    command_allowed,
    normalize_command,
    parse_command,
    parse_family,
    rule_candidates,
)
from callgate.server.commands.program_table import runs_other_code
from callgate.server.commands.programs import TABLE, read
from tests.security.ground_truth import (
    PER_COMMAND,
    SLOW_PER_COMMAND,
    ConfinedWorkspace,
    Target,
    build_workspace,
    commands,
    executable,
    single_option_commands,
    starts_slowly,
    targets,
)
from tests.support.sandbox import bwrap_only, bwrap_path

pytestmark = bwrap_only

TARGETS = targets()
PARAMS = [
    pytest.param(
        target,
        id=target.label,
        marks=[pytest.mark.slow] if starts_slowly(target.path[0]) else [],
    )
    for target in TARGETS
]
"""The targets; those whose program starts slowly (pip) are marked slow: each of their
commands takes tenths of a second, and `-m "not slow"` leaves them out."""
TOTAL_BATCHES = 700
"""Drawn batches across all families, so the module's runtime stays bounded as the table
grows (a batch costs one sandbox, ~10 ms, and a few ms per command)."""
EXAMPLES = max(5, min(40, TOTAL_BATCHES // max(1, len(TARGETS))))
SLOW_EXAMPLES = 2
"""Drawn batches for a target whose program starts slowly (its options also run one by one)."""
DRAWN_BATCH = 6
"""Commands drawn per Hypothesis example, run in one sandbox."""


@pytest.fixture(scope="module")
def confined(tmp_path_factory: pytest.TempPathFactory) -> ConfinedWorkspace:
    """One workspace copy for the module: each test gets it as pristine (`fresh`), and every
    run that changes it restores it."""
    base = tmp_path_factory.mktemp("ground-truth")
    build_workspace(base / "pristine")
    path = bwrap_path()
    assert path is not None  # the module is skipped otherwise
    return ConfinedWorkspace(path, base / "pristine", base)


@pytest.fixture
def workspace(confined: ConfinedWorkspace) -> ConfinedWorkspace:
    """The module's workspace copy, as pristine as when it was made."""
    return confined.fresh()


def _installed(program: str) -> None:
    if executable(program) is None:
        pytest.skip(f"{program} is not installed here (on callgate's PATH)")


def _per_command(target: Target) -> float:
    return SLOW_PER_COMMAND if starts_slowly(target.path[0]) else PER_COMMAND


@pytest.mark.parametrize("target", PARAMS)
def test_every_read_only_option_alone_changes_nothing(
    target: Target, workspace: ConfinedWorkspace
) -> None:
    """The family covers its bare command and the command with each option the table says only
    reads (alone, under its long name), and none of them changes anything when it runs."""
    _installed(target.path[0])
    family = parse_family(target.family)
    commands = single_option_commands(target)
    uncovered = [command for command in commands if not command_allowed(command, (), [family])]
    assert not uncovered, f"{target.family} does not cover {uncovered[:10]}"
    changed, _ = workspace.changes_of_each(commands, _per_command(target))
    assert not changed, "\n".join(changed)


@pytest.mark.parametrize("target", PARAMS)
def test_drawn_read_only_commands_change_nothing(
    target: Target, workspace: ConfinedWorkspace
) -> None:
    """Every drawn option combination the read-only family covers leaves the workspace copy
    and HOME exactly as they were (a command still running at its timeout is killed and
    checked the same way)."""
    _installed(target.path[0])
    family = parse_family(target.family)
    ran: list[str] = []

    @settings(
        max_examples=SLOW_EXAMPLES if starts_slowly(target.path[0]) else EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
        # No shrinking: the failure already names the command that changed something.
        phases=[Phase.explicit, Phase.generate],
    )
    @given(batch=st.lists(commands(target), min_size=1, max_size=DRAWN_BATCH, unique=True))
    def check(batch: list[str]) -> None:
        covered = [command for command in batch if command_allowed(command, (), [family])]
        for command in batch:
            if command not in covered:
                # Not a failure: the table does not know this combination as read-only (a
                # value that looks like an option, a flag not negatable in this spelling).
                event("not covered by the family")
                note(f"not covered by {target.family}: {command}")
        assume(covered)
        changed, statuses = workspace.changes_of_each(covered, _per_command(target))
        for status in statuses:
            event("killed at its timeout" if status is None else "ran")
        assert not changed, f"covered by {target.family}: " + "\n".join(changed)
        ran.extend(covered)

    check()
    assert ran, f"no drawn command was covered by {target.family}"


COMMON = (
    "git status",
    "git status --short",
    "git status -sb",
    "git log --oneline -5",
    "git log -p -1",
    "git log --stat --format=%H notes.txt",
    "git diff",
    "git diff HEAD~1",
    "git diff --stat",
    "git show HEAD --stat",
    "git show HEAD~1:notes.txt",
    "git blame notes.txt",
    "git ls-files",
    "git branch",
    "git tag",
    "git rev-parse HEAD",
    "git grep -n foo",
    "ls",
    "ls -la",
    "ls -R sub",
    "cat notes.txt",
    "head -n 3 notes.txt",
    "tail -n 2 notes.txt",
    "wc -l notes.txt",
    "grep -rn foo .",
    "rg foo",
    "rg -n --hidden line",
    "find . -name '*.py'",
    "find . -maxdepth 1 -type f",
    "sed -n 1,2p notes.txt",
    "awk -F, '{ print $1 }' data.csv",
    "sort notes.txt",
    "uniq notes.txt",
    "diff notes.txt a.py",
    "cut -d, -f1 data.csv",
    "stat notes.txt",
    "tar -tf archive.tar",
    "unzip -l archive.zip",
    "zcat notes.txt.gz",
)


@pytest.mark.parametrize("command", COMMON)
def test_common_read_only_commands_are_covered_and_change_nothing(
    command: str, workspace: ConfinedWorkspace
) -> None:
    """A command agents run every day, whose entry the table lists as read-only (and is not an
    interpreter such as awk, which is never offered a family), is offered the family over that
    entry, the family covers it, and running it changes nothing."""
    (segment,) = parse_command(normalize_command(command)).segments
    reading = read(TABLE, segment.words, segment.kinds)
    entry = reading.entry
    if entry is None or not entry.read_only or runs_other_code(segment.words[0]):
        assert rule_candidates(command)[1:] == [], command
        if entry is None or reading.opaque_at is not None:
            pytest.skip(f"the table does not list `{' '.join(reading.path) or command}` yet")
        pytest.skip(
            f"no family is offered for `{' '.join(reading.path)}` (not read-only, or "
            "an interpreter)"
        )
    family = f"Bash({' '.join(reading.path)}:*)"
    assert rule_candidates(command)[1:] == [family], command
    assert command_allowed(command, (), [parse_family(family)])
    _installed(segment.words[0])
    outcome = workspace.run(command)
    assert outcome.exit_code is not None, f"{command!r} did not end ({outcome})"
    changes = workspace.changes()
    assert not changes, f"{command!r}, covered by {family}, changed {changes} ({outcome})"


CHANGES = (
    ("touch -m -d 2001-01-01 notes.txt", "changed notes.txt (mtime)"),
    ("chmod g+w notes.txt", "changed notes.txt (mode)"),
    ("cp notes.txt n && mv n notes.txt", "changed notes.txt (inode, mtime)"),
    ("printf 'first line\\n' > notes.txt", "changed notes.txt (size, mtime, content)"),
    ("touch sub/t && rm sub/t", "changed sub (mtime: a file was created or removed in it)"),
    ("ln -s x sub/l", "created sub/l"),
    ("rm link.txt", "removed link.txt"),
    ('touch "$HOME/.history"', "created HOME/.history"),
)


@pytest.mark.parametrize(("command", "expected"), CHANGES, ids=[c for c, _ in CHANGES])
def test_the_harness_sees_every_kind_of_change(
    command: str, expected: str, workspace: ConfinedWorkspace
) -> None:
    """A change of mtime, mode, inode or content, a file created and removed again, a path
    created or removed, in the workspace or in HOME: the snapshot comparison names it."""
    outcome = workspace.run(command)
    assert outcome.exit_code == 0, (command, str(outcome))
    assert expected in workspace.changes(), workspace.changes()


WRITERS = (
    ("git log --output=x", "Bash(git log:*)"),
    ("sort -o out notes.txt", "Bash(sort:*)"),
    ("sed -i s/a/b/ notes.txt", "Bash(sed:*)"),
    ("find . -name x -fprint out", "Bash(find:*)"),
    ("find . -name notes.txt -delete", "Bash(find:*)"),
    ("sed -n '1w out' notes.txt", "Bash(sed:*)"),
)


@pytest.mark.parametrize(("command", "family"), WRITERS, ids=[c for c, _ in WRITERS])
def test_control_writers_change_the_workspace_and_are_not_covered(
    command: str, family: str, workspace: ConfinedWorkspace
) -> None:
    """The harness sees a write: each of these commands changes the workspace copy; and the
    read-only family over its program neither covers it nor is offered for it."""
    program = command.split(maxsplit=1)[0]
    _installed(program)
    outcome = workspace.run(command)
    assert outcome.exit_code == 0, (command, str(outcome))
    assert workspace.changes(), command
    if program not in TABLE:
        pytest.skip(f"{program} is not in the table yet: {family} covers any {program} command")
    assert not command_allowed(command, (), [parse_family(family)]), command
    assert rule_candidates(command)[1:] == [], command
