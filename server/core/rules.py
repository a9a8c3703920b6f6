"""Allow and deny rules, and how a rule pattern covers a requirement's `match` value.

Pattern forms (DESIGN section 4.2): an exact canonical path or `tree:<root>` for filesystem
kinds, `tcp://host:port` (port may be `*`) for network, an exact normalized command for
command.execute, `skill:<name>` for context.load, and an exact value for process.input.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from .models import TREE_PREFIX, Requirement, RequirementKind
from .paths import is_within


class Effect(enum.StrEnum):
    ALLOW = "allow"
    DENY = "deny"


CONFIG_ORIGIN = "config"

_TCP = re.compile(r"\Atcp://(?P<host>[a-z0-9._\-]+|\[[0-9a-f:.]+\]):(?P<port>\*|[0-9]{1,5})\Z")
_SKILL = re.compile(r"\Askill:[a-z0-9][a-z0-9_-]{0,63}\Z")
_FILESYSTEM_KINDS = frozenset({RequirementKind.FILESYSTEM_READ, RequirementKind.FILESYSTEM_WRITE})


class RulePatternError(ValueError):
    """A rule pattern that does not fit its kind; the message says what form is expected."""


def normalize_pattern(kind: str, match: str) -> str:
    """Validate a rule pattern for its kind and return its canonical form."""
    if not match or "\x00" in match:
        raise RulePatternError("the match pattern is empty or holds a NUL byte")
    try:
        requirement_kind = RequirementKind(kind)
    except ValueError:
        known = ", ".join(k.value for k in RequirementKind)
        raise RulePatternError(f"unknown kind {kind!r}; use one of {known}") from None
    if requirement_kind in _FILESYSTEM_KINDS:
        tree = match.startswith(TREE_PREFIX)
        path = match.removeprefix(TREE_PREFIX)
        if not path.startswith("/"):
            raise RulePatternError("a path pattern must be absolute: /path or tree:/root")
        canonical = os.path.realpath(path)
        return TREE_PREFIX + canonical if tree else canonical
    if requirement_kind is RequirementKind.NETWORK:
        lowered = match.lower()
        if not _TCP.match(lowered):
            raise RulePatternError("a network pattern must be tcp://host:port (port may be *)")
        return lowered
    if requirement_kind is RequirementKind.CONTEXT_LOAD:
        if not _SKILL.match(match):
            raise RulePatternError("a context.load pattern must be skill:<name>")
        return match
    if requirement_kind is RequirementKind.COMMAND_EXECUTE and match.startswith("Bash("):
        raise RulePatternError(
            "command family patterns (Bash(...:*)) are not supported yet; use an exact command"
        )
    return match


def is_network_target(match: str) -> bool:
    """True when `match` is a normalized, concrete network target (`tcp://host:port`, lower
    case, ASCII port digits): the only form a requirement may carry, so rules compare exactly."""
    found = _TCP.match(match)
    return found is not None and found["port"] != "*"


def pattern_covers(kind: str, pattern: str, match: str) -> bool:
    """True when a (normalized) rule pattern of `kind` covers a requirement's match value."""
    if kind in _FILESYSTEM_KINDS:
        if pattern.startswith(TREE_PREFIX):
            root = pattern.removeprefix(TREE_PREFIX)
            target = match.removeprefix(TREE_PREFIX)
            return is_within(target, root)
        return pattern == match
    if kind == RequirementKind.NETWORK:
        if pattern.endswith(":*"):
            host_part = pattern[: -len("*")]
            rest = match.removeprefix(host_part)
            return match.startswith(host_part) and rest.isdigit()
        return pattern == match
    return pattern == match


@dataclass(frozen=True, slots=True)
class Rule:
    """A stored allow or deny. `scope` is "" (config, everywhere), `session:<id>` or
    `workspace:<root>`."""

    rule_id: str
    effect: Effect
    kind: str
    match: str
    scope: str
    origin: str
    create_time: datetime

    def applies_to(self, session_id: str, workspace_root: str) -> bool:
        if not self.scope:
            return True
        if self.scope.startswith("session:"):
            return self.scope == f"session:{session_id}"
        if self.scope.startswith("workspace:"):
            return self.scope == f"workspace:{workspace_root}"
        return False

    def covers(self, requirement: Requirement) -> bool:
        if requirement.kind != self.kind:
            return False
        if self.effect is Effect.DENY and requirement.match.startswith(TREE_PREFIX):
            # Fail closed: a tree request that contains a denied path is refused as a whole
            # (narrow the request), so tree-listing tools never reveal what a rule denies.
            denied = self.match.removeprefix(TREE_PREFIX)
            if is_within(denied, requirement.match.removeprefix(TREE_PREFIX)):
                return True
        return pattern_covers(self.kind, self.match, requirement.match)


class RuleBook:
    """The rules in force. Deny rules are always consulted before allow rules."""

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self._rules: dict[str, Rule] = {}
        for rule in rules:
            self.add(rule)

    def add(self, rule: Rule) -> None:
        self._rules[rule.rule_id] = rule

    def remove(self, rule_id: str) -> Rule | None:
        return self._rules.pop(rule_id, None)

    def all(self) -> list[Rule]:
        return sorted(self._rules.values(), key=lambda r: (r.create_time, r.rule_id))

    def matching(
        self, effect: Effect, requirement: Requirement, session_id: str, workspace_root: str
    ) -> list[Rule]:
        return [
            rule
            for rule in self._rules.values()
            if rule.effect is effect
            and rule.applies_to(session_id, workspace_root)
            and rule.covers(requirement)
        ]
