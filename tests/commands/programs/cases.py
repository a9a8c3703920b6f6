"""The shape of the per-program test tables: a command, the family it is checked against,
whether that family covers it, and the candidates an "always" decision would offer."""

from __future__ import annotations

from dataclasses import dataclass

from callgate.server.commands.matching import command_allowed, parse_family, rule_candidates

EXACT = "exact"
"""Candidates: the exact command only."""
FAMILY = "family"
"""Candidates: the exact command and the family the case names."""


@dataclass(frozen=True)
class Case:
    command: str
    family: str
    covered: bool
    candidates: str = EXACT

    def __str__(self) -> str:
        return f"{self.command} | {self.family}"


def case(command: str, family: str, covered: bool, candidates: str = EXACT) -> Case:
    return Case(command, family, covered, candidates)


def check(item: Case) -> None:
    """The family covers the command or not, and the candidates are as the case says."""
    assert command_allowed(item.command, (), [parse_family(item.family)]) is item.covered, item
    offered = rule_candidates(item.command)
    if item.candidates == FAMILY:
        assert offered[1:] == [item.family], (item, offered)
    else:
        assert offered[1:] == [], (item, offered)
