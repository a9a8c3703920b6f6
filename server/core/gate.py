"""The gate: Deny, Gated or Allow for a call's requirements; deny always wins, fail closed.

Evaluation order (design section 4.3): validate the request; route every requirement to its
access value (protected paths first); any Deny ends it; then every deny rule before any allow
rule; gated requirements covered by allow rules are met; whatever is left needs a human.
A human-only requirement (a write to a file that makes programs run code) is never met by an
Allow default or an allow rule: it always goes to a human, or is denied headless.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..commands import command_inert, family_read_only, is_family_pattern, normalize_command
from .models import TREE_PREFIX, Access, Denial, DenialKind, Requirement, RequirementKind
from .paths import ProtectedPaths, is_within
from .rules import Effect, Rule, RuleBook, is_network_target

log = logging.getLogger(__name__)


_PLUGIN_KIND = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")


class AccessDefaults(BaseModel):
    """The `[access]` table: what each requirement kind gets before rules."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workspace_read: Access = Access.ALLOW
    workspace_write: Access = Access.GATED
    outside_read: Access = Access.DENY
    outside_write: Access = Access.DENY
    command: Access = Access.GATED
    network: Access = Access.GATED
    context_load: Access = Access.GATED
    process_input: Access = Access.ALLOW
    # Requirement kinds beyond callgate's own, which tool plugins may declare
    # (`"db.query" = "gated"`). A kind that is neither callgate's nor listed here is denied.
    kinds: dict[str, Access] = Field(default_factory=dict)

    @field_validator("kinds")
    @classmethod
    def _plugin_kinds(cls, kinds: dict[str, Access]) -> dict[str, Access]:
        for kind in kinds:
            if kind in {k.value for k in RequirementKind}:
                raise ValueError(f"{kind} is callgate's own kind; set its own key instead")
            if not _PLUGIN_KIND.fullmatch(kind):
                raise ValueError(f"{kind[:64]!r} is not a kind such as db.query")
        return kinds


@dataclass(frozen=True, slots=True)
class Verdict:
    """The gate's answer. `access` is ALLOW (approved by policy), GATED (a human must decide
    `unmet`, where human-only requirements carry `human_only`) or DENY (see `denial`)."""

    access: Access
    reason: str
    denial: Denial | None = None
    rule_ids: tuple[str, ...] = ()
    unmet: tuple[Requirement, ...] = ()
    # True when the call's command was allowed only by read-only families
    # (`commands.family_read_only`): it must run in the read-only sandbox.
    read_only: bool = False


# Bash commands may be up to 64 KiB; the match is the normalized command itself.
_MAX_MATCH = 65_536 + 1024


class Gate:
    """Evaluates requirements against access defaults, protected paths and rules."""

    def __init__(
        self,
        access: AccessDefaults,
        rules: RuleBook,
        protected: ProtectedPaths,
        *,
        families_enforced: bool = True,
    ) -> None:
        self.access = access
        self.rules = rules
        self.protected = protected
        # False where no sandbox holds what a `Bash(…:*)` family promises (no bubblewrap):
        # families then allow nothing by themselves, and only exact command rules meet a
        # command (a human saw exactly that text).
        self.families_enforced = families_enforced

    def evaluate(
        self, requirements: Sequence[Requirement], session_id: str, workspace_root: str
    ) -> Verdict:
        try:
            return self._evaluate(requirements, session_id, workspace_root)
        except Exception:
            log.exception("gate evaluation failed; denying")
            return _deny(
                DenialKind.REFUSED, "The gate could not evaluate the call, so it is denied."
            )

    def _evaluate(
        self, requirements: Sequence[Requirement], session_id: str, workspace_root: str
    ) -> Verdict:
        # 1. Validate.
        for requirement in requirements:
            problem = _invalid(requirement, self.access.kinds)
            if problem:
                return _deny(DenialKind.OUT_OF_SCOPE, problem)
        # 2. Route to access values; any Deny stops here.
        routed: list[tuple[Requirement, Access]] = []
        for requirement in requirements:
            if self._is_protected(requirement):
                return _deny(
                    DenialKind.REFUSED,
                    f"{requirement.description} touches a protected path (secrets or server "
                    "state), which no tool may use.",
                )
            access = self._route(requirement, workspace_root)
            if access is Access.DENY:
                return _deny(
                    DenialKind.OUT_OF_SCOPE,
                    f"{requirement.description} is outside what this server allows "
                    f"({requirement.kind} access is deny here).",
                )
            routed.append((requirement, access))
        # 3. Deny rules, before any allow rule.
        for requirement, _ in routed:
            denying = self.rules.matching(Effect.DENY, requirement, session_id, workspace_root)
            if denying:
                return Verdict(
                    access=Access.DENY,
                    reason="a deny rule matched",
                    denial=Denial(
                        DenialKind.REFUSED,
                        f"{requirement.description} is refused by rule {denying[0].rule_id}.",
                    ),
                    rule_ids=tuple(sorted(r.rule_id for r in denying)),
                )
        # 4. Allow rules meet gated requirements.
        used: set[str] = set()
        unmet: list[Requirement] = []
        # Commands met by rules, and whether every such rule is a read-only family.
        commands_by_rule = 0
        read_only = True
        for requirement, access in routed:
            if self.needs_human(requirement):
                # Neither the access default nor any allow rule meets it, however wide.
                unmet.append(dataclasses.replace(requirement, human_only=True))
                continue
            command = requirement.kind == RequirementKind.COMMAND_EXECUTE
            if access is Access.ALLOW:
                read_only = read_only and not command
                continue
            # Collective for commands: different shell segments may be met by different rules.
            allowing = self.rules.allowing(
                requirement, session_id, workspace_root, families=self.families_enforced
            )
            if command and allowing and not self._held(allowing, requirement.match):
                allowing = []
            if allowing:
                used.update(r.rule_id for r in allowing)
                if command:
                    commands_by_rule += 1
                    read_only = read_only and _read_only_families(allowing)
            else:
                unmet.append(requirement)
        if not unmet:
            reason = (
                "every requirement is allowed by the access defaults"
                if not used
                else "gated requirements are covered by allow rules"
            )
            return Verdict(
                access=Access.ALLOW,
                reason=reason,
                rule_ids=tuple(sorted(used)),
                read_only=read_only and commands_by_rule > 0,
            )
        return Verdict(
            access=Access.GATED,
            reason="a human approver must decide",
            rule_ids=tuple(sorted(used)),
            unmet=tuple(unmet),
        )

    @staticmethod
    def _held(allowing: Sequence[Rule], command: str) -> bool:
        """Whether what the allowing command rules promise is held: an exact rule (a human saw
        that text), read-only families only (the read-only sandbox holds them), or families
        of which some write or run code over a command whose words are provably inert. Else
        a word of a read-only family's segment could run code with the writing family's
        authority (`cd . && test -v 'a[$(rm x)]'` under Bash(cd:*) and Bash(test:*))."""
        if not all(is_family_pattern(r.match) for r in allowing):
            return True
        return _read_only_families(allowing) or command_inert(command)

    def _is_protected(self, requirement: Requirement) -> bool:
        if requirement.kind not in (
            RequirementKind.FILESYSTEM_READ,
            RequirementKind.FILESYSTEM_WRITE,
        ):
            return False
        return self.protected.is_protected(requirement.match.removeprefix(TREE_PREFIX))

    def needs_human(self, requirement: Requirement) -> bool:
        """True for a requirement only a human may approve: marked so by its tool, or a write
        to an exact path that makes programs run code (`ProtectedPaths.needs_human_to_write`),
        marked or not."""
        if requirement.human_only:
            return True
        if requirement.kind != RequirementKind.FILESYSTEM_WRITE:
            return False
        if requirement.match.startswith(TREE_PREFIX):
            # A tree write (a Bash declaration) leaves read-only files read-only in the sandbox.
            return False
        return self.protected.needs_human_to_write(requirement.match)

    def _route(self, requirement: Requirement, workspace_root: str) -> Access:
        kind = requirement.kind
        if kind in (RequirementKind.FILESYSTEM_READ, RequirementKind.FILESYSTEM_WRITE):
            path = requirement.match.removeprefix(TREE_PREFIX)
            inside = is_within(path, workspace_root) and is_within(
                requirement.scope.removeprefix(TREE_PREFIX), workspace_root
            )
            if kind == RequirementKind.FILESYSTEM_READ:
                return self.access.workspace_read if inside else self.access.outside_read
            return self.access.workspace_write if inside else self.access.outside_write
        if kind == RequirementKind.COMMAND_EXECUTE:
            return self.access.command
        if kind == RequirementKind.NETWORK:
            return self.access.network
        if kind == RequirementKind.CONTEXT_LOAD:
            return self.access.context_load
        if kind == RequirementKind.PROCESS_INPUT:
            return self.access.process_input
        return self.access.kinds.get(kind, Access.DENY)


def _read_only_families(rules: Sequence[Rule]) -> bool:
    return all(is_family_pattern(r.match) and family_read_only(r.match) for r in rules)


def _deny(kind: DenialKind, description: str) -> Verdict:
    return Verdict(access=Access.DENY, reason=description, denial=Denial(kind, description))


def _invalid(requirement: Requirement, plugin_kinds: Mapping[str, Access]) -> str:
    """Why a requirement is malformed, or "" when it is well formed."""
    if not requirement.match or len(requirement.match) > _MAX_MATCH:
        return "A requirement has an empty or oversized match value, so the call is denied."
    if "\x00" in requirement.match or "\x00" in requirement.scope:
        return "A requirement holds a NUL byte, so the call is denied."
    try:
        kind = RequirementKind(requirement.kind)
    except ValueError:
        if requirement.kind in plugin_kinds:
            return ""  # a plugin's kind: its configured access decides (no rules match it)
        return f"The requirement kind {requirement.kind[:64]!r} is unknown, so the call is denied."
    if not requirement.match or len(requirement.match) > _MAX_MATCH:
        return "A requirement has an empty or oversized match value, so the call is denied."
    if "\x00" in requirement.match or "\x00" in requirement.scope:
        return "A requirement holds a NUL byte, so the call is denied."
    if kind in (RequirementKind.FILESYSTEM_READ, RequirementKind.FILESYSTEM_WRITE):
        path = requirement.match.removeprefix(TREE_PREFIX)
        scope = requirement.scope.removeprefix(TREE_PREFIX)
        if not path.startswith("/") or not scope.startswith("/"):
            return "A filesystem requirement is not an absolute canonical path, so it is denied."
        if "/../" in path + "/" or "/./" in path + "/" or "//" in path:
            return "A filesystem requirement is not a canonical path, so it is denied."
    if kind is RequirementKind.COMMAND_EXECUTE and normalize_command(requirement.match) != (
        requirement.match
    ):
        # Exact rules compare normalized text; another spelling would slip past an exact deny.
        return "A command requirement is not in its normalized form, so it is denied."
    if kind is RequirementKind.NETWORK and not is_network_target(requirement.match):
        # A target in another spelling (capitals, a wildcard port) would slip past deny rules.
        return "A network requirement is not a normalized tcp://host:port, so it is denied."
    return ""
