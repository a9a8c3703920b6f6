"""The reader's rules on synthetic entries: negations, mode switches, clusters, values, `--`,
globs where options stand, and what is unknown."""

from __future__ import annotations

from callgate.server.commands.programs import Effect, Program, Takes, read
from callgate.server.commands.programs.build import does, flags, mode, values
from callgate.server.commands.shell_parse import parse_command

TOOL = Program(
    "tool",
    manual="tool(1), a synthetic entry for these tests",
    effects=frozenset({Effect.WRITE}),
    negatable=True,
    options=(
        *flags("-a --all", "--no-verify"),
        *values("-n --count", example="3"),
        mode("--dry-run", Effect.READ),
        does("-o --output", Effect.WRITE, "writes a file", takes=Takes.VALUE),
        does("--hook", Effect.CODE, "runs a hook"),
    ),
)
TABLE = {"tool": TOOL}


def reading(command: str) -> tuple[frozenset[Effect], list[tuple[str, str]]]:
    (segment,) = parse_command(command).segments
    result = read(TABLE, segment.words, segment.kinds)
    return frozenset(result.effects), [(f.effect.name, f.what) for f in result.findings]


def test_a_mode_switch_replaces_the_entry_effects() -> None:
    assert reading("tool --dry-run x") == (frozenset({Effect.READ}), [])


def test_turning_a_mode_switch_off_is_unknown() -> None:
    _, findings = reading("tool --dry-run --no-dry-run x")
    assert ("UNKNOWN", "tool option --no-dry-run (turns a mode switch off)") in findings


def test_negating_an_effectful_option_only_turns_it_off() -> None:
    assert reading("tool --no-hook x")[1] == []


def test_the_positive_of_a_listed_negation_is_unknown_unless_listed() -> None:
    assert reading("tool --verify x")[1] == [("UNKNOWN", "tool option --verify")]


def test_a_negation_given_a_value_is_unknown() -> None:
    assert reading("tool --no-all=1 x")[1] == [("UNKNOWN", "tool option --no-all")]


def test_values_in_every_spelling_and_clusters() -> None:
    for command in (
        "tool -ofile",
        "tool -o file",
        "tool --output=file",
        "tool --output file",
        "tool -aofile",
        "tool x -ao file",
    ):
        assert reading(command)[1] == [("WRITE", "tool option --output (writes a file)")], command


def test_a_value_is_never_read_as_an_option() -> None:
    assert reading("tool -n --hook x")[1] == []
    assert reading("tool --count --hook x")[1] == []


def test_after_double_dash_everything_is_an_operand() -> None:
    assert reading("tool -- --hook -o x")[1] == []


def test_a_glob_that_may_expand_to_an_option_is_unknown() -> None:
    assert reading("tool *")[1][0][0] == "UNKNOWN"
    assert reading("tool src/*")[1] == []
    assert reading("tool -- *")[1] == []


def test_an_abbreviation_is_unknown() -> None:
    assert reading("tool --out=x")[1] == [("UNKNOWN", "tool option --out")]
