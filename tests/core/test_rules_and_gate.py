"""Rule patterns and coverage, and the gate's evaluation order: deny wins, fail closed."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.server.commands.matching import WordKind, parse_command, parse_family
from callgate.server.core.gate import AccessDefaults, Gate, Verdict
from callgate.server.core.models import (
    Access,
    DenialKind,
    Requirement,
    RequirementKind,
    RuleCandidate,
)
from callgate.server.core.paths import DEFAULT_DENIED_GLOBS, ProtectedPaths
from callgate.server.core.rules import (
    Effect,
    Rule,
    RuleBook,
    RulePatternError,
    normalize_pattern,
    offered_candidates,
    pattern_covers,
    shown_pattern,
)

# A workspace root that does not exist here, so normalize_pattern's realpath leaves it alone.
WS = "/cgws-test-root"
SESSION = "ses_one"
READ = RequirementKind.FILESYSTEM_READ.value
WRITE = RequirementKind.FILESYSTEM_WRITE.value
COMMAND = RequirementKind.COMMAND_EXECUTE.value
NETWORK = RequirementKind.NETWORK.value
CONTEXT = RequirementKind.CONTEXT_LOAD.value
PROCESS = RequirementKind.PROCESS_INPUT.value
EPOCH = datetime(2030, 1, 1, tzinfo=UTC)


def requirement(kind: str, match: str, scope: str | None = None) -> Requirement:
    """A requirement as a tool would emit it: filesystem kinds route on their own match."""
    if scope is None:
        scope = match if kind in (READ, WRITE) else ""
    return Requirement(kind, scope, match, f"{kind} {match}")


def rule(effect: Effect, kind: str, match: str, scope: str = "", rule_id: str = "") -> Rule:
    pattern = normalize_pattern(kind, match)
    return Rule(
        rule_id or f"{effect}-{kind}-{pattern}-{scope}",
        effect,
        kind,
        pattern,
        scope,
        "config",
        EPOCH,
    )


def allow(kind: str, match: str, scope: str = "", rule_id: str = "") -> Rule:
    return rule(Effect.ALLOW, kind, match, scope, rule_id)


def deny(kind: str, match: str, scope: str = "", rule_id: str = "") -> Rule:
    return rule(Effect.DENY, kind, match, scope, rule_id)


def gate(rules: Sequence[Rule] = (), access: AccessDefaults | None = None) -> Gate:
    return Gate(access or AccessDefaults(), RuleBook(rules), ProtectedPaths(DEFAULT_DENIED_GLOBS))


def evaluate(
    requirements: Sequence[Requirement],
    rules: Sequence[Rule] = (),
    *,
    session_id: str = SESSION,
    root: str = WS,
) -> Verdict:
    return gate(rules).evaluate(requirements, session_id, root)


def denial_kind(verdict: Verdict) -> DenialKind:
    assert verdict.access is Access.DENY
    assert verdict.denial is not None
    return verdict.denial.kind


# ------------------------------------------------------------------ patterns


@pytest.mark.parametrize(
    ("pattern", "match", "covered"),
    [
        ("tree:/a", "/a", True),
        ("tree:/a", "/a/b", True),
        ("tree:/a", "tree:/a/b", True),
        ("tree:/a", "tree:/a", True),
        ("tree:/a", "/ab", False),
        ("tree:/a", "tree:/ab", False),
        ("tree:/a", "/", False),
        ("tree:/a/b", "tree:/a", False),
        ("tree:/", "/anything/at/all", True),
        ("/a", "/a", True),
        ("/a", "/a/b", False),
        ("/a", "tree:/a", False),
    ],
)
def test_path_patterns_cover_exact_paths_or_whole_trees(
    pattern: str, match: str, covered: bool
) -> None:
    """An exact path covers only itself; `tree:<root>` covers the root and below, by component."""
    for kind in (READ, WRITE):
        assert pattern_covers(kind, pattern, match) is covered


@pytest.mark.parametrize(
    ("pattern", "match", "covered"),
    [
        ("tcp://example.com:443", "tcp://example.com:443", True),
        ("tcp://example.com:443", "tcp://example.com:4430", False),
        ("tcp://example.com:443", "tcp://example.com.evil:443", False),
        ("tcp://example.com:*", "tcp://example.com:1", True),
        ("tcp://example.com:*", "tcp://example.com:65535", True),
        ("tcp://example.com:*", "tcp://example.com:", False),
        ("tcp://example.com:*", "tcp://example.com.evil:80", False),
        ("tcp://example.com:*", "tcp://other.com:80", False),
        ("tcp://[::1]:*", "tcp://[::1]:8080", True),
        ("Network(example.com:443)", "tcp://example.com:443", True),
        ("Network(example.com:443)", "tcp://a.example.com:443", False),
        ("Network(*.example.com:443)", "tcp://a.example.com:443", True),
        ("Network(*.example.com:443)", "tcp://b.a.example.com:443", True),
        ("Network(*.example.com:443)", "tcp://example.com:443", False),
        ("Network(*.example.com:443)", "tcp://aexample.com:443", False),
        ("Network(*.example.com:443)", "tcp://a.example.com:80", False),
        ("Network(*.example.com:443)", "tcp://*.a.example.com:443", True),
        ("Network(*.a.example.com:443)", "tcp://*.example.com:443", False),
        ("Network(a.example.com:443)", "tcp://*.example.com:443", False),
        ("Network(*.example.com:*)", "tcp://x.example.com:8443", True),
        ("Network(*.0.0.1:80)", "tcp://127.0.0.1:80", False),
    ],
)
def test_network_patterns_match_host_exactly_and_port_or_any_port(
    pattern: str, match: str, covered: bool
) -> None:
    """`Network(host:port)` (or `tcp://host:port`) is exact; `:*` widens only the port;
    `*.domain` covers hosts below the domain (never the domain itself, never an address)."""
    assert pattern_covers(NETWORK, pattern, match) is covered


def test_a_stored_tcp_rule_reads_in_the_network_form() -> None:
    """Rules saved before `Network(...)` keep working and are shown in the new form."""
    assert shown_pattern(NETWORK, "tcp://Example.com:443") == "Network(example.com:443)"
    assert shown_pattern(NETWORK, "tcp://broken") == "tcp://broken"
    assert shown_pattern(COMMAND, "tcp://x:1") == "tcp://x:1"


@pytest.mark.parametrize(
    ("pattern", "match", "denied"),
    [
        ("Network(a.example.com:443)", "tcp://*.example.com:443", True),
        ("Network(a.example.com:*)", "tcp://*.example.com:443", True),
        ("Network(a.example.com:80)", "tcp://*.example.com:443", False),
        ("Network(*.a.example.com:443)", "tcp://*.example.com:443", True),
        ("Network(example.com:443)", "tcp://*.example.com:443", False),
        ("Network(other.org:443)", "tcp://*.example.com:443", False),
    ],
)
def test_a_network_deny_refuses_a_declared_wildcard_that_holds_a_denied_host(
    pattern: str, match: str, denied: bool
) -> None:
    """Deny rules over-match: `*.example.com:443` asked for is refused when any host below it
    is denied, since the proxy would reach that host."""
    assert deny(NETWORK, pattern).covers(requirement(NETWORK, match)) is denied


def test_command_families_cover_every_segment_and_exact_commands_only_themselves() -> None:
    """A family alone covers a command whose every segment it covers; as a deny rule it refuses
    a command with any matching segment."""
    assert pattern_covers(COMMAND, "Bash(git log:*)", "git log --oneline")
    assert not pattern_covers(COMMAND, "Bash(git log:*)", "git log; rm x")
    assert deny(COMMAND, "Bash(rm:*)").covers(requirement(COMMAND, "git log; rm x"))
    assert not allow(COMMAND, "Bash(rm:*)").covers(requirement(COMMAND, "git log; rm x"))
    assert not deny(COMMAND, "Bash(rm:*)").covers(requirement(COMMAND, "git log"))


def test_other_kinds_are_covered_only_by_an_identical_pattern() -> None:
    """Exact commands, skills and process input are compared for equality."""
    assert pattern_covers(COMMAND, "git status", "git status")
    assert not pattern_covers(COMMAND, "git status", "git status --short")
    assert not pattern_covers(COMMAND, "git", "git status")
    assert pattern_covers(CONTEXT, "skill:pdf", "skill:pdf")
    assert not pattern_covers(CONTEXT, "skill:pdf", "skill:pdfx")


@given(
    root=st.lists(st.sampled_from(["a", "b", "ab"]), max_size=3),
    target=st.lists(st.sampled_from(["a", "b", "ab"]), max_size=4),
    tree_request=st.booleans(),
)
def test_tree_coverage_is_component_prefix(
    root: list[str], target: list[str], tree_request: bool
) -> None:
    """`tree:R` covers a path exactly when R's components are a prefix of the path's."""
    root_path = "/" + "/".join(root)
    match = "/" + "/".join(target)
    if tree_request:
        match = "tree:" + match
    assert pattern_covers(READ, "tree:" + root_path, match) is (target[: len(root)] == root)


@pytest.mark.parametrize(
    ("kind", "match", "normalized"),
    [
        (READ, "/a/./b/../c", "/a/c"),
        (WRITE, "tree:/a//b/", "tree:/a/b"),
        (NETWORK, "TCP://Example.COM:443", "Network(example.com:443)"),
        (NETWORK, "tcp://host:*", "Network(host:*)"),
        (NETWORK, "Network(Example.COM.:443)", "Network(example.com:443)"),
        (NETWORK, "Network(*.Example.org:443)", "Network(*.example.org:443)"),
        (NETWORK, "Network(2130706433:80)", "Network(127.0.0.1:80)"),
        (NETWORK, "Network([0:0::1]:80)", "Network([::1]:80)"),
        (CONTEXT, "skill:pdf-tools", "skill:pdf-tools"),
        (COMMAND, "git status", "git status"),
        (COMMAND, "  git status\n", "git status"),
        (COMMAND, "Bash(git  log:*)", "Bash(git log:*)"),
        (COMMAND, "Bash(npm run test:unit:*)", "Bash(npm run test:unit:*)"),
        (PROCESS, "cat", "cat"),
    ],
)
def test_valid_patterns_are_normalized(kind: str, match: str, normalized: str) -> None:
    """Rule patterns are stored in the same canonical form requirements use."""
    assert normalize_pattern(kind, match) == normalized


@pytest.mark.parametrize(
    ("kind", "match"),
    [
        (READ, ""),
        (READ, "/a\x00b"),
        (READ, "relative/path"),
        (READ, "tree:relative"),
        (WRITE, "tree:"),
        (NETWORK, "http://example.com:80"),
        (NETWORK, "tcp://example.com"),
        (NETWORK, "tcp://example.com:http"),
        (NETWORK, "tcp://example.com:123456"),
        (NETWORK, "tcp://exa mple.com:80"),
        (NETWORK, "Network(example.com)"),
        (NETWORK, "Network(*.org:443)"),
        (NETWORK, "Network(*:443)"),
        (NETWORK, "network(example.com:443)"),
        (NETWORK, "example.com:443"),
        (NETWORK, "Network(::1:80)"),
        (CONTEXT, "pdf"),
        (CONTEXT, "skill:"),
        (CONTEXT, "skill:Upper"),
        (COMMAND, " \n "),
        (COMMAND, "Bash(:*)"),
        (COMMAND, "Bash( :*)"),
        (COMMAND, "Bash(*)"),
        (COMMAND, "Bash(git log)"),
        (COMMAND, "Bash(git;rm:*)"),
        (COMMAND, "Bash(git $x:*)"),
        ("teleport.beam", "anything"),
        ("", "/a"),
    ],
)
def test_invalid_patterns_are_rejected(kind: str, match: str) -> None:
    """A pattern that does not fit its kind is refused instead of silently matching nothing."""
    with pytest.raises(RulePatternError):
        normalize_pattern(kind, match)


def test_a_deny_rule_covers_a_tree_request_that_contains_its_path() -> None:
    """Listing a tree that holds a denied path is refused as a whole; an allow rule for the same
    path does not stretch to the tree."""
    secret = f"{WS}/private/plan.txt"
    request = requirement(READ, f"tree:{WS}")
    assert deny(READ, secret).covers(request)
    assert deny(READ, f"tree:{WS}/private").covers(request)
    assert not allow(READ, secret).covers(request)
    assert not deny(READ, f"{WS}2/plan.txt").covers(request)
    assert not deny(WRITE, secret).covers(request)


def test_rule_scopes_select_session_workspace_or_everywhere() -> None:
    """A rule applies everywhere (no scope), in its session, or in its workspace root only."""
    assert allow(COMMAND, "ls").applies_to("any", "/any")
    session_rule = allow(COMMAND, "ls", scope=f"session:{SESSION}")
    assert session_rule.applies_to(SESSION, WS)
    assert not session_rule.applies_to("ses_other", WS)
    workspace_rule = allow(COMMAND, "ls", scope=f"workspace:{WS}")
    assert workspace_rule.applies_to("any", WS)
    assert not workspace_rule.applies_to("any", WS + "2")
    assert not workspace_rule.applies_to("any", WS + "/sub")
    assert not allow(COMMAND, "ls", scope="galaxy:far").applies_to(SESSION, WS)


def test_the_rule_book_adds_removes_and_lists_in_creation_order() -> None:
    """Rules are listable in a stable order and removable by ID."""
    first, second = allow(COMMAND, "ls", rule_id="r1"), deny(COMMAND, "rm", rule_id="r2")
    book = RuleBook([second, first])
    assert [r.rule_id for r in book.all()] == ["r1", "r2"]
    assert book.remove("r1") == first
    assert book.remove("r1") is None
    assert book.all() == [second]


# ------------------------------------------------------------------ the gate


@pytest.mark.parametrize(
    ("kind", "match", "expected"),
    [
        (READ, f"{WS}/src/app.py", Access.ALLOW),
        (READ, f"tree:{WS}/src", Access.ALLOW),
        (READ, f"tree:{WS}", Access.ALLOW),
        (WRITE, f"{WS}/src/app.py", Access.GATED),
        (READ, "/etc/hosts", Access.DENY),
        (READ, f"{WS}-sibling/file", Access.DENY),
        (READ, "tree:/", Access.DENY),
        (WRITE, "/etc/hosts", Access.DENY),
        (COMMAND, "git status", Access.GATED),
        (NETWORK, "tcp://example.com:443", Access.GATED),
        (CONTEXT, "skill:pdf", Access.GATED),
        (PROCESS, "cat", Access.ALLOW),
        ("teleport.beam", "anywhere", Access.DENY),
    ],
)
def test_access_defaults_route_each_kind_and_scope(kind: str, match: str, expected: Access) -> None:
    """Design section 4.1: reads inside allowed, writes inside gated, outside denied, the rest."""
    verdict = evaluate([requirement(kind, match)])
    assert verdict.access is expected
    if expected is Access.DENY:
        assert denial_kind(verdict) is DenialKind.OUT_OF_SCOPE
    if expected is Access.GATED:
        assert verdict.unmet == (requirement(kind, match),)


def test_access_defaults_are_configurable() -> None:
    """A stricter access table turns default-allowed reads into gated ones, and so on."""
    strict = AccessDefaults(workspace_read=Access.GATED, command=Access.DENY)
    verdict = gate(access=strict).evaluate([requirement(READ, f"{WS}/a")], SESSION, WS)
    assert verdict.access is Access.GATED
    verdict = gate(access=strict).evaluate([requirement(COMMAND, "ls")], SESSION, WS)
    assert denial_kind(verdict) is DenialKind.OUT_OF_SCOPE


def test_a_call_with_no_requirements_is_allowed() -> None:
    """Pure tools (task graph, questions) need no capability and pass by policy."""
    verdict = evaluate([])
    assert verdict.access is Access.ALLOW
    assert verdict.denial is None


def test_a_read_outside_the_scope_root_is_denied_even_when_the_match_is_inside() -> None:
    """Routing needs both the match and the scope inside the workspace."""
    verdict = evaluate([requirement(READ, f"{WS}/a", scope="/etc")])
    assert denial_kind(verdict) is DenialKind.OUT_OF_SCOPE


@pytest.mark.parametrize(
    "bad",
    [
        requirement("teleport.beam", "anywhere"),
        requirement("", "anything"),
        requirement(READ, "relative/path.txt"),
        requirement(READ, f"tree:{WS}/../etc"),
        requirement(READ, f"{WS}/a/../../etc/passwd"),
        requirement(WRITE, f"{WS}/./a"),
        requirement(WRITE, f"{WS}//a"),
        requirement(READ, f"{WS}/a", scope="relative"),
        requirement(READ, f"{WS}/a\x00b"),
        requirement(COMMAND, "ls", scope="\x00"),
        requirement(COMMAND, ""),
        requirement(COMMAND, "x" * 70_000),
        requirement(NETWORK, "tcp://EXAMPLE.com:443"),
        requirement(NETWORK, "https://example.com/"),
        requirement(NETWORK, "tcp://example.com:*"),
        requirement(NETWORK, "tcp://example.com:\u0664\u0664\u0663"),
    ],
    ids=[
        "unknown-kind",
        "empty-kind",
        "relative-path",
        "tree-dotdot",
        "dotdot",
        "dot-segment",
        "double-slash",
        "relative-scope",
        "nul-in-match",
        "nul-in-scope",
        "empty-match",
        "oversized-match",
        "uppercase-host",
        "url-not-target",
        "wildcard-port",
        "non-ascii-port",
    ],
)
def test_unknown_or_malformed_requirements_are_denied(bad: Requirement) -> None:
    """Step 1 fails closed: an unknown kind or a non-canonical target denies the whole call,
    even when an allow rule would cover everything else."""
    rules = [allow(kind, f"tree:{WS}") for kind in (READ, WRITE)]
    verdict = evaluate([requirement(COMMAND, "ls"), bad], rules)
    assert denial_kind(verdict) is DenialKind.OUT_OF_SCOPE


def test_a_non_normalized_network_target_cannot_slip_past_a_deny_rule() -> None:
    """A host spelled in capitals is not a different host: it is denied, never sent to a human."""
    verdict = evaluate(
        [requirement(NETWORK, "tcp://Example.COM:443")], [deny(NETWORK, "tcp://example.com:*")]
    )
    assert verdict.access is Access.DENY


@pytest.mark.parametrize(
    "match",
    [f"{WS}/.env", f"{WS}/config/.ssh/id_rsa", f"{WS}/certs/site.pem", f"tree:{WS}/.ssh"],
)
def test_protected_paths_are_refused_even_with_an_allow_rule(match: str) -> None:
    """Secrets are refused for every tool, before rules; an allow rule cannot open them."""
    for kind in (READ, WRITE):
        verdict = evaluate([requirement(kind, match)], [allow(kind, f"tree:{WS}")])
        assert denial_kind(verdict) is DenialKind.REFUSED


def test_a_tree_over_a_workspace_holding_secrets_is_not_refused_by_the_globs() -> None:
    """Only a tree rooted at (or inside) a protected directory is refused; listing tools filter
    the secret files beneath an ordinary tree themselves."""
    assert evaluate([requirement(READ, f"tree:{WS}")]).access is Access.ALLOW


def test_deny_beats_allow_for_the_same_requirement() -> None:
    """With an allow and a deny rule both covering a requirement, the call is refused."""
    command = requirement(COMMAND, "git push")
    rules = [allow(COMMAND, "git push", rule_id="ok"), deny(COMMAND, "git push", rule_id="no")]
    verdict = evaluate([command], rules)
    assert denial_kind(verdict) is DenialKind.REFUSED
    assert verdict.rule_ids == ("no",)


def test_a_deny_rule_refuses_a_default_allowed_requirement() -> None:
    """Deny rules are consulted for Allow requirements too, not only for gated ones."""
    read = requirement(READ, f"{WS}/notes/private.md")
    verdict = evaluate([read], [deny(READ, f"tree:{WS}/notes", rule_id="no-notes")])
    assert denial_kind(verdict) is DenialKind.REFUSED
    assert verdict.rule_ids == ("no-notes",)


def test_a_tree_request_containing_a_denied_path_is_refused() -> None:
    """Grep over the workspace is refused when a deny rule protects a file inside it."""
    verdict = evaluate(
        [requirement(READ, f"tree:{WS}")], [deny(READ, f"{WS}/src/keys.txt", rule_id="keys")]
    )
    assert denial_kind(verdict) is DenialKind.REFUSED
    assert verdict.rule_ids == ("keys",)


def test_one_denied_requirement_denies_the_whole_call() -> None:
    """Every other requirement being allowed does not save a call with one denied part."""
    rules = [allow(COMMAND, "make"), deny(NETWORK, "tcp://pypi.org:*")]
    verdict = evaluate(
        [requirement(COMMAND, "make"), requirement(NETWORK, "tcp://pypi.org:443")], rules
    )
    assert denial_kind(verdict) is DenialKind.REFUSED


def test_allow_rules_meet_gated_requirements_and_are_recorded() -> None:
    """Covered gated requirements pass by policy with the rule IDs; the rest stay unmet."""
    make, curl = requirement(COMMAND, "make"), requirement(NETWORK, "tcp://pypi.org:443")
    rules = [
        allow(COMMAND, "make", rule_id="make-ok"),
        allow(NETWORK, "tcp://pypi.org:*", rule_id="pypi"),
    ]
    verdict = evaluate([make, curl], rules)
    assert verdict.access is Access.ALLOW
    assert verdict.rule_ids == ("make-ok", "pypi")
    verdict = evaluate([make, curl], rules[:1])
    assert verdict.access is Access.GATED
    assert verdict.unmet == (curl,)
    assert verdict.rule_ids == ("make-ok",)


def test_session_scoped_rules_apply_only_to_their_session() -> None:
    """An approval saved for one session does not leak into another."""
    rules = [allow(COMMAND, "make", scope=f"session:{SESSION}")]
    make = [requirement(COMMAND, "make")]
    assert evaluate(make, rules).access is Access.ALLOW
    assert evaluate(make, rules, session_id="ses_two").access is Access.GATED
    denying = [deny(COMMAND, "make", scope="session:ses_two")]
    assert evaluate(make, denying).access is Access.GATED
    assert evaluate(make, denying, session_id="ses_two").access is Access.DENY


def test_workspace_scoped_rules_apply_only_to_their_root() -> None:
    """A persisted rule binds to its workspace root, not to other workspaces or subdirectories."""
    rules = [allow(WRITE, f"tree:{WS}", scope=f"workspace:{WS}")]
    write = [requirement(WRITE, f"{WS}/a.txt")]
    assert evaluate(write, rules).access is Access.ALLOW
    other = WS + "-other"
    other_rules = [allow(WRITE, f"tree:{other}", scope=f"workspace:{WS}")]
    assert evaluate([requirement(WRITE, f"{other}/a.txt")], other_rules, root=other).access is (
        Access.GATED
    )


def test_command_segments_may_be_met_by_different_allow_rules() -> None:
    """A chained command passes by policy when its segments are covered by different families,
    and every family used is recorded; one uncovered segment leaves it for a human."""
    rules = [
        allow(COMMAND, "Bash(git status:*)", rule_id="status"),
        allow(COMMAND, "Bash(head:*)", rule_id="head"),
        allow(COMMAND, "Bash(git log:*)", rule_id="unused"),
    ]
    verdict = evaluate([requirement(COMMAND, "git status | head -5")], rules)
    assert verdict.access is Access.ALLOW
    assert verdict.rule_ids == ("head", "status")
    chained = requirement(COMMAND, "git status | head -5; rm -rf x")
    verdict = evaluate([chained], rules)
    assert verdict.access is Access.GATED
    assert verdict.unmet == (chained,)


def test_a_deny_family_refuses_a_command_hidden_in_a_covered_one() -> None:
    """Deny families look inside substitutions and shell strings, and win over allow rules."""
    rules = [
        allow(COMMAND, "Bash(git status:*)", rule_id="ok"),
        allow(COMMAND, "git status $(rm -rf x)", rule_id="exact"),
        deny(COMMAND, "Bash(rm:*)", rule_id="no-rm"),
    ]
    for command in ("git status $(rm -rf x)", "git status; bash -c 'rm -rf x'"):
        verdict = evaluate([requirement(COMMAND, command)], rules)
        assert denial_kind(verdict) is DenialKind.REFUSED
        assert verdict.rule_ids == ("no-rm",)


def test_an_exact_command_rule_allows_what_families_cannot() -> None:
    """A command the parser cannot fully understand is met only by an identical exact rule."""
    command = 'git status "unterminated'
    families = [allow(COMMAND, "Bash(git status:*)")]
    assert evaluate([requirement(COMMAND, command)], families).access is Access.GATED
    exact = [*families, allow(COMMAND, command, rule_id="exact")]
    verdict = evaluate([requirement(COMMAND, command)], exact)
    assert verdict.access is Access.ALLOW
    assert verdict.rule_ids == ("exact",)


@pytest.mark.parametrize("command", [" git status", "git status\n", "\tls"])
def test_a_command_requirement_that_is_not_normalized_is_denied(command: str) -> None:
    """A command spelled with surrounding blanks would slip past an exact deny rule."""
    verdict = evaluate([requirement(COMMAND, command)], [allow(COMMAND, "Bash(git status:*)")])
    assert denial_kind(verdict) is DenialKind.OUT_OF_SCOPE


class ExplodingRuleBook(RuleBook):
    """A rule store that fails while being consulted."""

    def matching(
        self, effect: Effect, requirement: Requirement, session_id: str, workspace_root: str
    ) -> list[Rule]:
        raise RuntimeError("the rule store is unavailable")


def test_an_error_while_evaluating_denies_the_call() -> None:
    """The gate fails closed: an exception inside evaluation is a denial, not an approval."""
    broken = Gate(AccessDefaults(), ExplodingRuleBook(), ProtectedPaths(DEFAULT_DENIED_GLOBS))
    verdict = broken.evaluate([requirement(READ, f"{WS}/a")], SESSION, WS)
    assert denial_kind(verdict) is DenialKind.REFUSED


# ------------------------------------------------------------------ human-only writes

ALLOW_WRITES = AccessDefaults(workspace_write=Access.ALLOW)


# The allow rules a human-only write ignores, each built for the path written.
_ALLOWING: dict[str, Callable[[str], list[Rule]]] = {
    "allow-default": lambda path: [],
    "config-tree": lambda path: [allow(WRITE, f"tree:{WS}", rule_id="config-tree")],
    "always-tree": lambda path: [allow(WRITE, f"tree:{WS}", f"workspace:{WS}", "always-tree")],
    "session-tree": lambda path: [
        allow(WRITE, f"tree:{os.path.dirname(path)}", f"session:{SESSION}", "session-tree")
    ],
    "always-exact": lambda path: [allow(WRITE, path, f"workspace:{WS}", "always-exact")],
}


@pytest.mark.parametrize(
    "path", [f"{WS}/.git/config", f"{WS}/.git/hooks/pre-commit", f"{WS}/sub/.bashrc"]
)
@pytest.mark.parametrize("allowing", sorted(_ALLOWING))
def test_a_write_to_a_file_that_runs_code_is_never_approved_by_policy(
    path: str, allowing: str
) -> None:
    """An Allow default and any allow rule, exact or tree, leave it to a human, marked so."""
    verdict = gate(_ALLOWING[allowing](path), ALLOW_WRITES).evaluate(
        [requirement(WRITE, path)], SESSION, WS
    )
    assert verdict.access is Access.GATED
    assert [(r.match, r.human_only) for r in verdict.unmet] == [(path, True)]
    assert verdict.rule_ids == ()


def test_a_requirement_a_tool_marks_human_only_is_never_approved_by_policy() -> None:
    """The marker alone is honoured, whatever the path, the default or the rules."""
    marked = Requirement(WRITE, f"{WS}/notes.md", f"{WS}/notes.md", "write notes", True)
    verdict = gate([allow(WRITE, f"tree:{WS}")], ALLOW_WRITES).evaluate([marked], SESSION, WS)
    assert verdict.access is Access.GATED
    assert verdict.unmet == (marked,)


def test_deny_rules_and_deny_defaults_still_deny_a_human_only_write() -> None:
    """Human-only narrows what policy approves; it never turns a deny into a question."""
    write = requirement(WRITE, f"{WS}/.git/config")
    refused = gate([deny(WRITE, f"tree:{WS}/.git")], ALLOW_WRITES).evaluate([write], SESSION, WS)
    assert denial_kind(refused) is DenialKind.REFUSED
    no_writes = gate([allow(WRITE, f"tree:{WS}")], AccessDefaults(workspace_write=Access.DENY))
    assert denial_kind(no_writes.evaluate([write], SESSION, WS)) is DenialKind.OUT_OF_SCOPE


def test_an_ordinary_write_beside_a_human_only_one_is_still_met_by_policy() -> None:
    """Only the human-only requirement is left unmet, and it is the only one shown."""
    ordinary, config = requirement(WRITE, f"{WS}/a.txt"), requirement(WRITE, f"{WS}/.git/config")
    verdict = gate([allow(WRITE, f"tree:{WS}")]).evaluate([ordinary, config], SESSION, WS)
    assert verdict.access is Access.GATED
    assert [r.match for r in verdict.unmet] == [config.match]


def test_a_tree_write_over_the_workspace_is_not_human_only() -> None:
    """A Bash tree declaration stays rule-coverable: the sandbox keeps read-only files
    read-only inside any tree it grants."""
    verdict = gate([allow(WRITE, f"tree:{WS}")]).evaluate(
        [requirement(WRITE, f"tree:{WS}")], SESSION, WS
    )
    assert verdict.access is Access.ALLOW


def test_no_rule_candidate_is_offered_when_a_requirement_is_human_only() -> None:
    """Neither the exact path nor any other candidate of the call is offered for saving."""
    config = dataclasses.replace(requirement(WRITE, f"{WS}/.git/config"), human_only=True)
    command = requirement(COMMAND, "git status")
    candidates = [
        RuleCandidate(WRITE, config.match, "write"),
        RuleCandidate(COMMAND, "git status", "run"),
    ]
    assert offered_candidates(candidates, [config, command]) == ()
    assert [c.match for c in offered_candidates(candidates, [command])] == ["git status"]


# ------------------------------------------------------------------ gate properties

_PATHS = [WS, f"{WS}/a", f"{WS}/a/b", f"{WS}/b", f"{WS}/.env", f"{WS}/.git/config", "/elsewhere/x"]
_TARGETS: dict[str, list[str]] = {
    READ: _PATHS + [f"tree:{p}" for p in _PATHS],
    WRITE: _PATHS + [f"tree:{p}" for p in _PATHS],
    COMMAND: ["ls", "git status", "rm -rf /", "git status && ls -l", "ls; rm -rf /", "ls $(rm x)"],
    NETWORK: ["tcp://a.test:80", "tcp://a.test:443", "tcp://b.test:443"],
    CONTEXT: ["skill:pdf", "skill:web"],
    PROCESS: ["cat", "python3"],
}
_PATTERNS = {
    **_TARGETS,
    NETWORK: [*_TARGETS[NETWORK], "tcp://a.test:*", "tcp://b.test:*"],
    COMMAND: [*_TARGETS[COMMAND], "Bash(ls:*)", "Bash(git status:*)", "Bash(rm:*)"],
}
_SCOPES = ["", f"session:{SESSION}", "session:ses_two", f"workspace:{WS}", "workspace:/other"]

requirements = st.lists(
    st.sampled_from(sorted(_TARGETS)).flatmap(
        lambda kind: st.sampled_from(_TARGETS[kind]).map(lambda match: requirement(kind, match))
    )
    | st.just(requirement("teleport.beam", "anywhere")),
    max_size=4,
)


@st.composite
def rule_sets(
    draw: st.DrawFn, effects: Sequence[Effect] = (Effect.ALLOW, Effect.DENY)
) -> list[Rule]:
    count = draw(st.integers(0, 6))
    rules = []
    for index in range(count):
        kind = draw(st.sampled_from(sorted(_PATTERNS)))
        rules.append(
            rule(
                draw(st.sampled_from(effects)),
                kind,
                draw(st.sampled_from(_PATTERNS[kind])),
                draw(st.sampled_from(_SCOPES)),
                rule_id=f"r{index}",
            )
        )
    return rules


_RANK = {Access.DENY: 0, Access.GATED: 1, Access.ALLOW: 2}


@settings(max_examples=150, deadline=None)
@given(reqs=requirements, rules=rule_sets(), extra=rule_sets(effects=(Effect.DENY,)))
def test_adding_deny_rules_never_makes_a_verdict_more_permissive(
    reqs: list[Requirement], rules: list[Rule], extra: list[Rule]
) -> None:
    """More deny rules can only move a call towards DENY; a DENY stays a DENY."""
    before = evaluate(reqs, rules)
    extra = [
        Rule(f"x{r.rule_id}", r.effect, r.kind, r.match, r.scope, r.origin, r.create_time)
        for r in extra
    ]
    after = evaluate(reqs, rules + extra)
    assert _RANK[after.access] <= _RANK[before.access]


@settings(max_examples=150, deadline=None)
@given(reqs=requirements, rules=rule_sets())
def test_removing_allow_rules_never_makes_a_verdict_more_permissive(
    reqs: list[Requirement], rules: list[Rule]
) -> None:
    """Without allow rules a DENY stays DENY and nothing becomes ALLOW that was not before."""
    before = evaluate(reqs, rules)
    after = evaluate(reqs, [r for r in rules if r.effect is Effect.DENY])
    assert _RANK[after.access] <= _RANK[before.access]
    if before.access is Access.DENY:
        assert after.access is Access.DENY


@settings(max_examples=150, deadline=None)
@given(reqs=requirements, rules=rule_sets(), session_id=st.sampled_from([SESSION, "ses_two"]))
def test_an_allow_verdict_is_always_justified(
    reqs: list[Requirement], rules: list[Rule], session_id: str
) -> None:
    """ALLOW means: no applicable deny rule covers anything, nothing is protected, unknown or a
    write to a file that runs code, and every requirement is default-allowed inside the
    workspace or covered by an allow rule."""
    verdict = evaluate(reqs, rules, session_id=session_id)
    if verdict.access is not Access.ALLOW:
        return
    applicable = [r for r in rules if r.applies_to(session_id, WS)]
    protected = ProtectedPaths(DEFAULT_DENIED_GLOBS)
    for req in reqs:
        assert req.kind in _TARGETS
        assert not any(r.effect is Effect.DENY and r.covers(req) for r in applicable)
        path = req.match.removeprefix("tree:")
        if req.kind in (READ, WRITE):
            assert not protected.is_protected(path)
            assert path == WS or path.startswith(WS + "/")
        if req.kind == WRITE and not req.match.startswith("tree:"):
            assert not protected.is_readonly(path)
        default_allowed = req.kind in (READ, PROCESS)
        allowing = [r for r in applicable if r.effect is Effect.ALLOW]
        if req.kind == COMMAND:
            assert _commands_cover(req.match, [r.match for r in allowing])
            assert set(verdict.rule_ids) & {r.rule_id for r in allowing}
            continue
        assert default_allowed or any(r.covers(req) for r in allowing)
        assert default_allowed or set(verdict.rule_ids) & {
            r.rule_id for r in allowing if r.covers(req)
        }


def _commands_cover(command: str, patterns: Sequence[str]) -> bool:
    """An independent statement of command coverage: an identical exact pattern, or a fully
    understood parse whose every segment is simple and covered by some family."""
    if command in patterns:
        return True
    parsed = parse_command(command)
    families = [parse_family(p) for p in patterns if p.startswith("Bash(")]
    return (
        parsed.fully_understood
        and bool(parsed.segments)
        and all(
            segment.simple
            and any(
                segment.words[: len(f.tokens)] == f.tokens
                and all(k is WordKind.BARE for k in segment.kinds[: len(f.tokens)])
                for f in families
            )
            for segment in parsed.segments
        )
    )
