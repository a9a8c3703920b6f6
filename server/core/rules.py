"""Allow and deny rules, and how a rule pattern covers a requirement's `match` value.

Pattern forms (design section 4.2): an exact canonical path or `tree:<root>` for filesystem
kinds, `Network(host:port)` for network (`*.domain` for every host below a domain, port `*`
for any; the older `tcp://host:port` is read as the same rule), an exact normalized command or a
`Bash(<tokens>:*)` family for command.execute, `skill:<name>` for context.load, and an exact value
for process.input. Command rules are matched by `commands`: allow rules under-match (every shell
segment covered, collectively by all applicable allow rules: `RuleBook.allowing`), deny rules
over-match (any segment anywhere).
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from ..commands import (
    CommandMatcher,
    CommandPatternError,
    command_pattern,
    denied_program,
    is_family_pattern,
    normalize_command,
)
from ..commands import parse_family as parse_command_family
from ..net.addresses import Endpoint
from .models import TREE_PREFIX, Requirement, RequirementKind, RuleCandidate
from .paths import is_within


class Effect(enum.StrEnum):
    ALLOW = "allow"
    DENY = "deny"


CONFIG_ORIGIN = "config"

TCP_PREFIX = "tcp://"
NETWORK_RULE = re.compile(r"\ANetwork\((?P<endpoint>[^()]*)\)\Z")
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
        return f"Network({network_pattern(match)})"
    if requirement_kind is RequirementKind.CONTEXT_LOAD:
        if not _SKILL.match(match):
            raise RulePatternError("a context.load pattern must be skill:<name>")
        return match
    if requirement_kind is RequirementKind.COMMAND_EXECUTE:
        try:
            return command_pattern(match)
        except CommandPatternError as exc:
            raise RulePatternError(str(exc)) from None
    return match


def network_pattern(match: str) -> Endpoint:
    """The endpoint a network rule pattern names: `Network(host:port)` or the older
    `tcp://host:port` (host may be `*.domain`, port `*`). Raises RulePatternError."""
    found = NETWORK_RULE.match(match)
    if found is not None:
        inner = found["endpoint"]
    elif match.lower().startswith(TCP_PREFIX):
        inner = match[len(TCP_PREFIX) :]
    else:
        raise RulePatternError(
            "a network pattern is Network(host:port), e.g. Network(pypi.org:443), "
            "Network(*.example.org:443) or Network(example.org:*)"
        )
    try:
        return Endpoint.parse(inner, wildcard=True, any_port=True)
    except ValueError as exc:
        raise RulePatternError(f"a network pattern's endpoint is not valid: {exc}") from None


def network_requirement(match: str) -> Endpoint | None:
    """The endpoint of a network requirement's match, which must be canonical
    `tcp://host:port` (host may be `*.domain` for a declared wildcard; the port is concrete);
    None otherwise."""
    if not match.startswith(TCP_PREFIX):
        return None
    try:
        endpoint = Endpoint.parse(match[len(TCP_PREFIX) :], wildcard=True)
    except ValueError:
        return None
    return endpoint if f"{TCP_PREFIX}{endpoint}" == match else None


def is_network_target(match: str) -> bool:
    """True when `match` is a canonical network requirement (`network_requirement`): the only
    form a requirement may carry, so rules compare exactly."""
    return network_requirement(match) is not None


def shown_pattern(kind: str, match: str) -> str:
    """A stored rule's pattern in its current form (a network rule saved as `tcp://host:port`
    reads as `Network(host:port)`); unchanged when it does not parse."""
    if kind != RequirementKind.NETWORK:
        return match
    try:
        return normalize_pattern(kind, match)
    except RulePatternError:
        return match


def pattern_covers(kind: str, pattern: str, match: str) -> bool:
    """True when a (normalized) rule pattern of `kind` covers a requirement's match value, with
    allow semantics (for commands: one pattern alone covers every segment)."""
    if kind in _FILESYSTEM_KINDS:
        if pattern.startswith(TREE_PREFIX):
            root = pattern.removeprefix(TREE_PREFIX)
            target = match.removeprefix(TREE_PREFIX)
            return is_within(target, root)
        return pattern == match
    if kind == RequirementKind.NETWORK:
        try:
            endpoint = network_pattern(pattern)
        except RulePatternError:
            return False
        wanted = network_requirement(match)
        if wanted is None:
            # A candidate compared with another pattern (offered_candidates) is a pattern too.
            try:
                wanted = network_pattern(match)
            except RulePatternError:
                return False
        return endpoint.covers(wanted)
    if kind == RequirementKind.COMMAND_EXECUTE:
        return _command_matcher([pattern]).allows(match)
    return pattern == match


def pattern_denies(kind: str, pattern: str, match: str) -> bool:
    """True when a (normalized) deny pattern of `kind` refuses a requirement's match value. Only
    commands differ from `pattern_covers`: a deny family matches any segment anywhere."""
    if kind == RequirementKind.COMMAND_EXECUTE:
        return _command_matcher([pattern]).denies(match)
    if kind == RequirementKind.NETWORK:
        return _network_overlaps(pattern, match)
    return pattern_covers(kind, pattern, match)


def _network_overlaps(pattern: str, match: str) -> bool:
    """Whether a network deny pattern refuses a requirement: it covers it, or the requirement
    is a declared wildcard (`*.example.org:443`) under which a denied host lies."""
    if pattern_covers(RequirementKind.NETWORK, pattern, match):
        return True
    try:
        denied = network_pattern(pattern)
    except RulePatternError:
        return False
    wanted = network_requirement(match)
    if wanted is None or not wanted.is_wildcard:
        return False
    if denied.port is not None and denied.port != wanted.port:
        return False
    return Endpoint(wanted.host, None).covers(Endpoint(denied.host, wanted.port))


def _canonical_command_pattern(pattern: str) -> str:
    if is_family_pattern(pattern):
        return parse_command_family(pattern).pattern
    return normalize_command(pattern)


def _command_matcher(patterns: Iterable[str]) -> CommandMatcher:
    exact: list[str] = []
    families = []
    for pattern in patterns:
        if is_family_pattern(pattern):
            # A stored family that no longer parses raises: the gate then denies the call.
            families.append(parse_command_family(pattern))
        else:
            exact.append(pattern)
    return CommandMatcher(exact, families)


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
        """Whether this rule alone covers `requirement`, with its effect's semantics."""
        if requirement.kind != self.kind:
            return False
        if self.effect is Effect.DENY and requirement.match.startswith(TREE_PREFIX):
            # Fail closed: a tree request that contains a denied path is refused as a whole
            # (narrow the request), so tree-listing tools never reveal what a rule denies.
            denied = self.match.removeprefix(TREE_PREFIX)
            if is_within(denied, requirement.match.removeprefix(TREE_PREFIX)):
                return True
        if self.effect is Effect.DENY:
            return pattern_denies(self.kind, self.match, requirement.match)
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

    def get(self, rule_id: str) -> Rule | None:
        return self._rules.get(rule_id)

    def remove_scope(self, scope: str) -> None:
        """Forget every rule of one scope (a session's rules when it closes)."""
        for rule_id in [r.rule_id for r in self._rules.values() if r.scope == scope]:
            del self._rules[rule_id]

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

    def allowing(
        self,
        requirement: Requirement,
        session_id: str,
        workspace_root: str,
        *,
        families: bool = True,
    ) -> list[Rule]:
        """The allow rules that cover `requirement`, or [] when it is not covered.

        A command is covered collectively: an exact rule, or every shell segment by one of the
        applicable families (different segments by different rules), and all of those rules are
        returned; with `families` False only exact rules count (no sandbox holds a family).
        Every other kind is covered rule by rule, as `matching` does.
        """
        if requirement.kind != RequirementKind.COMMAND_EXECUTE:
            return self.matching(Effect.ALLOW, requirement, session_id, workspace_root)
        rules = [
            rule
            for rule in self._rules.values()
            if rule.effect is Effect.ALLOW
            and rule.kind == requirement.kind
            and rule.applies_to(session_id, workspace_root)
            and (families or not is_family_pattern(rule.match))
        ]
        used = set(_command_matcher(rule.match for rule in rules).allowing(requirement.match))
        return [rule for rule in rules if _canonical_command_pattern(rule.match) in used]

    def denied_programs(self, session_id: str, workspace_root: str) -> frozenset[str]:
        """The programs the deny families in force name (`Bash(rm:*)`: rm), whose files every
        sandboxed command of that session has masked (`commands.denied_program`)."""
        names = set()
        for rule in self._rules.values():
            if (
                rule.effect is Effect.DENY
                and rule.kind == RequirementKind.COMMAND_EXECUTE
                and is_family_pattern(rule.match)
                and rule.applies_to(session_id, workspace_root)
            ):
                name = denied_program(rule.match)
                if name is not None:
                    names.add(name)
        return frozenset(names)


def offered_candidates(
    candidates: Iterable[RuleCandidate], unmet: Iterable[Requirement]
) -> tuple[RuleCandidate, ...]:
    """The candidates an approver is offered: those that cover at least one unmet
    requirement, in their normalized form, never a pattern over every path or command (the
    tools never propose one; this refuses it again should one slip through). None at all
    when a requirement is human-only: such a call is approved once or denied, never by a
    session or always decision (`Approvals.decide` refuses those)."""
    unmet = tuple(unmet)
    if any(r.human_only for r in unmet):
        return ()
    offered: dict[tuple[str, str], RuleCandidate] = {}
    for candidate in candidates:
        try:
            pattern = normalize_pattern(candidate.kind, candidate.match)
        except RulePatternError:
            continue
        if _too_wide(candidate.kind, pattern):
            continue
        if any(
            r.kind == candidate.kind and pattern_covers(r.kind, pattern, r.match) for r in unmet
        ):
            offered.setdefault(
                (candidate.kind, pattern),
                RuleCandidate(candidate.kind, pattern, candidate.description),
            )
    return tuple(offered.values())


def _too_wide(kind: str, pattern: str) -> bool:
    if kind in _FILESYSTEM_KINDS:
        return pattern.removeprefix(TREE_PREFIX) == "/"
    if kind == RequirementKind.COMMAND_EXECUTE and is_family_pattern(pattern):
        return not parse_command_family(pattern).tokens
    return False
