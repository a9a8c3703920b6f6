"""The program table as a whole: every entry cites its manual and says what its effectful
options do; no option name is listed twice in one entry (the later one would hide the first);
and, for every read-only entry, a family covers a drawn option combination exactly when every
drawn option only reads."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.server.commands.matching import command_allowed, parse_family, rule_candidates
from callgate.server.commands.programs import TABLE, Effect, Operands, Option, Program, Style, Takes
from callgate.server.commands.programs.reading import option_names


def entries() -> Iterator[tuple[tuple[str, ...], Program]]:
    """Every entry of the table with the words that name it (`("git", "log")`)."""

    def walk(path: tuple[str, ...], entry: Program) -> Iterator[tuple[tuple[str, ...], Program]]:
        yield path, entry
        for name, sub in entry.subcommands.items():
            yield from walk((*path, name), sub)

    seen: set[int] = set()
    for name, entry in TABLE.items():
        if id(entry) in seen:
            continue
        seen.add(id(entry))
        yield from walk((name,), entry)


ENTRIES = list(entries())
IDS = [" ".join(path) for path, _ in ENTRIES]


@pytest.mark.parametrize(("path", "entry"), ENTRIES, ids=IDS)
def test_every_entry_cites_its_manual(path: tuple[str, ...], entry: Program) -> None:
    assert "(" in entry.manual, (path, "cite the manual page: name(section), version, section")
    assert len(entry.manual) > 12


# Names listed twice in one entry with different meanings, where the later listing (the
# subcommand's own option, parsed by git before the shared revision and diff options) wins.
OVERRIDES: dict[tuple[str, ...], set[str]] = {
    ("git", "shortlog"): {"-n"},
    ("git", "pull"): {"--signoff"},
    ("git", "format-patch"): {"-n", "-v", "--cc"},
}


def _meaning(option: Option) -> tuple[object, ...]:
    return (
        option.takes,
        option.effect,
        option.mode,
        option.actions,
        option.until,
        option.ends_options,
        option.script,
    )


@pytest.mark.parametrize(("path", "entry"), ENTRIES, ids=IDS)
def test_no_option_name_means_two_things_in_one_entry(
    path: tuple[str, ...], entry: Program
) -> None:
    """A name listed twice (shared option groups overlap) must mean the same both times, or be
    a reviewed override (`OVERRIDES`), where the later listing is the one the reader uses."""
    first: dict[str, Option] = {}
    conflicting: set[str] = set()
    for option in entry.options:
        for name in option.names:
            if name in first and _meaning(first[name]) != _meaning(option):
                conflicting.add(name)
            first.setdefault(name, option)
    assert conflicting == OVERRIDES.get(path, set()), path
    names = option_names(entry)
    for name in conflicting:
        last = [option for option in entry.options if name in option.names][-1]
        assert names[name] is last


@pytest.mark.parametrize(("path", "entry"), ENTRIES, ids=IDS)
def test_every_option_that_does_more_than_read_says_what(
    path: tuple[str, ...], entry: Program
) -> None:
    for option in entry.options:
        assert all(name.startswith("-") for name in option.names), (path, option.names)
        if option.effect is not Effect.READ:
            assert option.what, (path, option.names, "say what it does")


def _read_only(option: Option) -> bool:
    return option.effect is Effect.READ and option.mode in (None, frozenset({Effect.READ}))


def _spelled(entry: Program, option: Option, data: st.DataObject) -> list[str]:
    name = data.draw(st.sampled_from(option.names))
    if option.takes is Takes.NOTHING or option.until:
        return [name]
    value = option.example or "1"
    if option.takes is Takes.ATTACHED:
        if not option.example:
            return [name]
        return [f"{name}={value}" if name.startswith("--") else f"{name}{value}"]
    if data.draw(st.booleans()) or (entry.short_values_follow and not name.startswith("--")):
        return [name, value]
    return [f"{name}={value}" if name.startswith("--") else f"{name}{value}"]


CANDIDATE_ENTRIES = [
    (path, entry)
    for path, entry in ENTRIES
    if entry.read_only and entry.style is not Style.FIND and entry.operands is not Operands.SCRIPT
]


@pytest.mark.parametrize(
    ("path", "entry"), CANDIDATE_ENTRIES, ids=[" ".join(p) for p, _ in CANDIDATE_ENTRIES]
)
@settings(max_examples=40, deadline=None, derandomize=True)
@given(data=st.data())
def test_a_read_only_family_covers_exactly_the_read_only_option_combinations(
    path: tuple[str, ...], entry: Program, data: st.DataObject
) -> None:
    """Options drawn from the entry (any effect, any spelling), a file operand: the family over
    the entry covers the command exactly when every drawn option only reads, and then the
    family is what "always" offers."""
    usable = [o for o in entry.options if not o.until and not o.ends_options and not o.script]
    if not usable:
        pytest.skip("no options to draw")
    drawn = data.draw(st.lists(st.sampled_from(usable), max_size=4, unique_by=id))
    words = [word for option in drawn for word in _spelled(entry, option, data)]
    values_look_like_options = any(
        option.takes is not Takes.NOTHING and (option.example or "1").startswith("-")
        for option in drawn
    )
    if values_look_like_options:
        return
    command = shlex.join([*path, *words, "notes.txt"])
    family = parse_family(f"Bash({' '.join(path)}:*)")
    expected = all(_read_only(option) for option in drawn)
    assert command_allowed(command, (), [family]) is expected, (command, drawn)
    if expected:
        assert rule_candidates(command)[1:] == [family.pattern], command
