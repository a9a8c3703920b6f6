"""Shell-aware command rules: parsing into segments, allow under-matches, deny over-matches."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.server.commands.matching import (
    MAX_NESTING,
    CommandMatcher,
    CommandPatternError,
    Family,
    WordKind,
    command_allowed,
    command_denied,
    command_pattern,
    normalize_command,
    parse_command,
    parse_family,
    rule_candidates,
)
from tests.core.strategies import (
    ALLOW_FAMILIES,
    command_lines,
    compositions_with_an_uncovered_part,
    covered_compositions,
)


def families(*patterns: str) -> list[Family]:
    return [parse_family(pattern) for pattern in patterns]


def allowed(command: str, *patterns: str, exact: tuple[str, ...] = ()) -> bool:
    return command_allowed(command, exact, families(*patterns))


def denied(command: str, *patterns: str, exact: tuple[str, ...] = ()) -> bool:
    return command_denied(command, exact, families(*patterns))


# ------------------------------------------------------------------ parsing


def test_a_command_splits_into_segments_at_every_operator() -> None:
    """`&&`, `||`, `;`, `|`, `|&`, `&`, newlines, subshells and groups all start a new segment."""
    parsed = parse_command("a 1 && b || c; d | e |& f & g\nh; (i; j) && { k; }")
    assert parsed.fully_understood
    assert [s.words for s in parsed.segments] == [
        ("a", "1"),
        *[(word,) for word in "bcdefghijk"],
    ]
    assert all(s.simple and not s.nested for s in parsed.segments)


def test_plain_quoting_is_removed_from_argument_words() -> None:
    """`'a b'` and `"a b"` without expansions are the literal word `a b`; the segment stays
    simple because only the command word must be bare."""
    (segment,) = parse_command("""git commit -m 'a b' "c d" e\\ f""").segments
    assert segment.words == ("git", "commit", "-m", "a b", "c d", "e f")
    assert segment.kinds[:3] == (WordKind.BARE,) * 3
    assert segment.kinds[3:] == (WordKind.QUOTED,) * 3
    assert segment.simple
    assert not segment.nested


def test_commands_inside_substitutions_are_nested_segments() -> None:
    """`$(…)`, backticks, `<(…)` and `>(…)` contribute their commands, marked nested, and make
    the segment holding them non-simple."""
    parsed = parse_command('echo $(a) `b` <(c) >(d) "$(e)"')
    outer, *inner = parsed.segments
    assert outer.words[0] == "echo"
    assert not outer.simple
    assert [s.words for s in inner] == [("a",), ("b",), ("c",), ("d",), ("e",)]
    assert all(s.nested for s in inner)


def test_literal_shell_strings_are_parsed_as_nested_commands() -> None:
    """`bash -c`, `sh -lc`, `env bash -c`, `/bin/sh -c` and eval strings are read as commands,
    and their launcher is never simple."""
    for command in (
        "bash -c 'ls; rm x'",
        'sh -lc "ls; rm x"',
        "env bash -c 'ls; rm x'",
        "/bin/sh -c 'ls; rm x'",
        "eval 'ls; rm x'",
    ):
        parsed = parse_command(command)
        assert not parsed.segments[0].simple, command
        nested = [s.words for s in parsed.segments if s.nested]
        assert ("ls",) in nested, command
        assert ("rm", "x") in nested, command


def test_command_strings_are_parsed_only_to_a_bounded_depth() -> None:
    """Beyond MAX_NESTING levels a command string is unknown: not understood, and every deny
    family matches it; within the bound the innermost command is seen."""

    def nest(command: str, levels: int) -> str:
        for _ in range(levels):
            command = "bash -c " + "'" + command.replace("'", "'\"'\"'") + "'"
        return command

    within = nest("rm x", MAX_NESTING)
    assert denied(within, "Bash(rm:*)")
    assert not denied(within, "Bash(anything:*)")
    beyond = nest("ls", MAX_NESTING + 1)
    assert not parse_command(beyond).fully_understood
    assert denied(beyond, "Bash(anything:*)")


@pytest.mark.parametrize(
    "command",
    [
        "if true; then ls; fi",
        "for f in a; do ls; done",
        "while false; do ls; done",
        "case x in x) ls;; esac",
        "f() { ls; }; f",
        "[[ -f x ]] && ls",
        "! ls",
        "((x)) && ls",
        "export PATH=/tmp; ls",
        "cat <<EOF\nx\nEOF",
        'ls "unterminated',
        "ls )",
        "ls\rrm",
        "ls\u00a0-l",
        "l\\\ns",
    ],
)
def test_constructs_not_modelled_are_not_fully_understood(command: str) -> None:
    """Compound commands, functions, tests, declarations, heredocs, syntax errors and
    characters the parser may split differently from bash all fail closed."""
    assert not parse_command(command).fully_understood


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        "ls && ls || ls; ls | ls & ls",
        "(ls; ls) && { ls; }",
        "ls # a comment; rm x",
        "ls $(rm x)",
        "FOO=1 ls > out",
        "docker run \\\n  --rm image",
    ],
)
def test_modelled_constructs_are_fully_understood(command: str) -> None:
    """Lists, pipelines, groups, comments, substitutions, assignments and redirections are
    modelled (whether the segments are simple is a separate question)."""
    assert parse_command(command).fully_understood


def test_commands_the_parser_glues_across_lines_are_read_again_and_fail_closed() -> None:
    """tree-sitter-bash sometimes lexes the next line into the previous command; the glued part
    is parsed again on its own, so deny still sees it and allow fails closed."""
    for command in ("git status | head | head\nrm -rf x && ls", "git status\n\\rm -rf x"):
        parsed = parse_command(command)
        assert not parsed.fully_understood
        assert ("rm", "-rf", "x") in [s.words for s in parsed.segments]
        assert denied(command, "Bash(rm -rf:*)")
        assert not allowed(command, "Bash(git status:*)", "Bash(head:*)", "Bash(ls:*)")
    assert allowed(
        "git status | head\nls && ls", "Bash(git status:*)", "Bash(head:*)", "Bash(ls:*)"
    )


def test_parsing_is_cached_per_command_string() -> None:
    """The same command string parses to the same object, without parsing again."""
    assert parse_command("git status --short") is parse_command("git status --short")


def test_a_deeply_nested_command_parses_without_recursion_errors() -> None:
    """Hundreds of nested substitutions (deeper than Python's recursion limit allows a
    recursive walk) are walked iteratively; thousands are past MAX_SYNTAX_NODES and are not
    read at all (one unknown segment: fails closed)."""
    command = "echo " + "$(echo " * 600 + "x" + ")" * 600
    parsed = parse_command(command)
    assert len(parsed.segments) == 601
    assert not allowed(command, "Bash(echo:*)")
    deeper = "echo " + "$(echo " * 3000 + "x" + ")" * 3000
    assert parse_command(deeper).segments[0].words == (deeper,)
    assert not allowed(deeper, "Bash(echo:*)")


# ------------------------------------------------------------------ normalization


@pytest.mark.parametrize(
    ("command", "normalized"),
    [
        ("  git status \n", "git status"),
        ("\tls\t", "ls"),
        ("git  status", "git  status"),
        ("echo a\\ ", "echo a\\ "),
        ("echo a\\\\ ", "echo a\\\\"),
        ("cat <<EOF\nx  ", "cat <<EOF\nx  "),
        ("ls\r", "ls\r"),
        ("ls\u00a0", "ls\u00a0"),
    ],
)
def test_normalization_strips_only_blanks_that_cannot_matter(command: str, normalized: str) -> None:
    """Leading and trailing spaces, tabs and newlines go; nothing inside is collapsed, and a
    trailing blank that is escaped or may be heredoc text stays."""
    assert normalize_command(command) == normalized
    assert normalize_command(normalized) == normalized


# ------------------------------------------------------------------ families


@pytest.mark.parametrize(
    ("pattern", "tokens"),
    [
        ("Bash(git log:*)", ("git", "log")),
        ("Bash(npm run test:unit:*)", ("npm", "run", "test:unit")),
        ("Bash(./gradlew  build:*)", ("./gradlew", "build")),
        ("Bash(ls:*)", ("ls",)),
    ],
)
def test_families_parse_into_bare_tokens(pattern: str, tokens: tuple[str, ...]) -> None:
    """`Bash(<tokens>:*)` holds one or more plain words; its canonical form has single spaces."""
    family = parse_family(pattern)
    assert family.tokens == tokens
    assert family.pattern == f"Bash({' '.join(tokens)}:*)"
    assert command_pattern(pattern) == family.pattern


@pytest.mark.parametrize(
    "pattern",
    [
        "Bash(:*)",
        "Bash(   :*)",
        "Bash(*)",
        "Bash(*:*)",
        "Bash(git log)",
        "Bash(git log:* )",
        "Bash(git;rm:*)",
        "Bash(git && rm:*)",
        "Bash(git $x:*)",
        "Bash(g?t:*)",
        "Bash({git,rm}:*)",
        "Bash('git':*)",
        "Bash(git\tlog:*)",
        "Bash(git\nlog:*)",
        "Bash(~/bin/x:*)",
        "Bash(FOO=1 git:*)",
        "Bash(" + " ".join(["a"] * 17) + ":*)",
        "git log:*",
    ],
)
def test_invalid_families_are_rejected(pattern: str) -> None:
    """Zero tokens (a wildcard over every command), metacharacters and malformed wrappers are
    refused, never stored as something that matches more or less than it says."""
    with pytest.raises(CommandPatternError):
        parse_family(pattern)


def test_a_family_with_no_tokens_cannot_be_built() -> None:
    """Even constructed directly, a family over every command is refused."""
    with pytest.raises(CommandPatternError):
        Family(())


@pytest.mark.parametrize(
    ("command", "covered"),
    [
        ("git log", True),
        ("git log --oneline -5", True),
        ("git log 'a b' src/*.py ~/x", True),
        # A glob that may expand to an option-like file name (`--output=x.py`) is unknown.
        ("git log *.py", False),
        ("git logx", False),
        ("git", False),
        ("git -C x log", False),
        ("/usr/bin/git log", False),
        ('git "log"', False),
        ("git l\\og", False),
    ],
)
def test_a_family_covers_segments_starting_with_exactly_its_bare_tokens(
    command: str, covered: bool
) -> None:
    """Tokens compare literally with bare words: no path resolution, no quoting, no prefix of a
    longer word; any trailing words are allowed."""
    assert allowed(command, "Bash(git log:*)") is covered


# ------------------------------------------------------------------ allow


ADVERSARIAL = [
    # chaining
    "git status; rm -rf x",
    "git status && rm -rf x",
    "git status || rm x",
    "git status | sh",
    "git status & rm x",
    "git status\nrm x",
    "git status;rm x",
    "(git status; rm x)",
    "{ git status; rm x; }",
    # substitution and expansion
    "git status $(rm x)",
    "git status `rm x`",
    "git status <(rm x)",
    "git status >(rm x)",
    'git status "$(rm x)"',
    "git status $((1))",
    "git status $HOME",
    'git status "${x}"',
    # redirection
    "git status > file",
    "git status >> ~/.bashrc",
    "git status 2> f",
    "git status &> f",
    "git status > f 2>&1",
    "git status >& f",
    "git status 2>&-",
    "git status < secrets",
    "git status <<< x",
    "cat <<EOF\ngit status\nEOF",
    # environment prefixes
    "FOO=1 git status",
    "GIT_DIR=/x git status",
    "PATH=/tmp git status",
    "export PATH=/tmp; git status",
    # quoting tricks
    "g'i't status",
    '"git" status',
    "'git' status",
    "\\git status",
    "git\\ status",
    "git${IFS}status",
    "$'git' status",
    'git "status"',
    "gi\\\nt status",
    "git sta\\\ntus",
    # other binaries and expansions in the command word
    "/tmp/git status",
    "./git status",
    "/usr/bin/git status",
    "~/git status",
    "g?t status",
    "gi* status",
    "[g]it status",
    "{git,rm} status",
    # shells and compound statements
    "bash -c 'git status'",
    "bash -c 'git status; rm x'",
    'sh -c "git status"',
    "eval git status",
    "if true; then git status; fi",
    "git() { rm x; }; git status",
    "! git status",
    # unparseable input
    'git status "unterminated',
    "git status )",
    # odd characters
    "git status\r",
    "git\u00a0status",
    # nothing to run
    "",
    "# git status",
]


@pytest.mark.parametrize("command", ADVERSARIAL)
def test_adversarial_commands_are_not_covered_by_a_family(command: str) -> None:
    """Chaining, substitution, redirection, assignments, quoting tricks, other binaries, globs,
    shells and unparseable input never ride on `Bash(git status:*)`."""
    assert not allowed(command, "Bash(git status:*)")


@pytest.mark.parametrize(
    "command",
    ["bash -c 'git status'", "bash -c 'git status; rm x'", "sh -c 'git status'"],
)
def test_a_shell_command_string_is_not_covered_even_by_a_family_for_the_shell(
    command: str,
) -> None:
    """`bash -c …` is never simple: only an exact rule allows it, whatever families say."""
    assert not allowed(command, "Bash(bash -c:*)", "Bash(bash:*)", "Bash(sh:*)", "Bash(git:*)")
    assert allowed(command, exact=(command,))


@pytest.mark.parametrize(
    "command",
    [
        "find . -exec rm {} \\;",
        "find . -execdir rm {} +",
        "find . -ok rm {} \\;",
        "find . -name '*.pyc' -delete",
        "find . -fprint /tmp/out",
        "find . -e*",
    ],
)
def test_find_that_runs_or_deletes_is_never_covered_by_a_find_family(command: str) -> None:
    """`Bash(find:*)` covers searching, not -exec/-ok/-delete/-fprint (or a glob that could
    expand to them)."""
    assert not allowed(command, "Bash(find:*)", "Bash(rm:*)")
    assert allowed("find . -name '*.py' -type f", "Bash(find:*)")


@pytest.mark.parametrize(
    ("command", "patterns"),
    [
        ("git status", ("Bash(git status:*)",)),
        ("git status --short", ("Bash(git status:*)",)),
        ("git status && git log", ("Bash(git status:*)", "Bash(git log:*)")),
        ("git status | head -5", ("Bash(git status:*)", "Bash(head:*)")),
        ("git status 2>&1 | head -5", ("Bash(git status:*)", "Bash(head:*)")),
        ("git status 2>/dev/null", ("Bash(git status:*)",)),
        ("(git status; git log) && git status", ("Bash(git status:*)", "Bash(git log:*)")),
        ("git status # a comment; rm x", ("Bash(git status:*)",)),
        ("npm run test:unit -- --watch", ("Bash(npm run test:unit:*)",)),
        ("./gradlew build", ("Bash(./gradlew build:*)",)),
    ],
)
def test_commands_whose_every_segment_is_covered_are_allowed(
    command: str, patterns: tuple[str, ...]
) -> None:
    """Every segment simple and covered by some family (possibly different ones) is enough."""
    assert allowed(command, *patterns)


def test_an_exact_rule_covers_only_the_identical_normalized_command() -> None:
    """Exact rules compare the normalized text: surrounding blanks are ignored, nothing else."""
    command = 'git status "unterminated'
    assert allowed(command, exact=(command,))
    assert allowed(f"  {command}\n", exact=(command,))
    assert not allowed(command + " ", exact=(command + "x",))
    assert not allowed("git status", exact=("git  status",))


def test_the_matcher_reports_the_patterns_it_used() -> None:
    """Allowing names every family that covered some segment; nothing when not covered."""
    matcher = CommandMatcher(
        exact=["ls"], families=families("Bash(git status:*)", "Bash(head:*)", "Bash(git:*)")
    )
    assert matcher.allowing("ls") == ("ls",)
    assert set(matcher.allowing("git status | head")) == {
        "Bash(git status:*)",
        "Bash(git:*)",
        "Bash(head:*)",
    }
    assert matcher.allowing("git status | tail") == ()


@settings(max_examples=300, deadline=None)
@given(command=compositions_with_an_uncovered_part())
def test_an_uncovered_part_anywhere_prevents_family_coverage(command: str) -> None:
    """However covered segments are chained around it, one uncovered part keeps the command
    from being allowed by families."""
    assert not allowed(command, *ALLOW_FAMILIES)


@settings(max_examples=200, deadline=None)
@given(command=covered_compositions())
def test_covered_segments_chained_by_any_operator_are_allowed(command: str) -> None:
    """Chaining only covered segments keeps the command covered."""
    assert allowed(command, *ALLOW_FAMILIES)


# ------------------------------------------------------------------ deny


DENIED_BY_RM = [
    "rm x",
    "ls; rm -rf x",
    "ls && rm x",
    "ls || rm x",
    "ls | rm x",
    "ls & rm x",
    "ls\nrm x",
    "echo $(rm x)",
    "echo `rm x`",
    'echo "$(rm x)"',
    "cat <(rm x)",
    "x=$(rm y)",
    "echo $((1 + $(rm x)))",
    "bash -c 'rm x'",
    'sh -c "ls; rm x"',
    "bash -lc 'rm x'",
    "env bash -c 'rm x'",
    "/bin/sh -c 'rm x'",
    "sudo sh -c 'bash -c \"rm x\"'",
    "FOO=1 rm x",
    "FOO=1 rm -rf x > y",
    "rm x > /dev/null",
    "rm > out x",
    "(rm x)",
    "{ rm x; }",
    "find . -exec rm {} \\;",
    "find . -execdir rm -f {} +",
    "find . -exec sh -c 'rm $0' {} \\;",
    "xargs rm",
    "xargs -0 -n 1 rm",
    "env rm x",
    "env -i A=b rm x",
    "command rm x",
    "exec rm x",
    "timeout 5 rm x",
    "nice -n 10 rm x",
    "sudo rm x",
    "sudo -u root nice timeout 5 rm x",
    "nohup rm x",
    '"rm" x',
    "'rm' x",
    "r'm' x",
    "\\rm x",
    "/bin/rm x",
    "/usr/bin/rm -rf x",
    "$'rm' x",
    "$cmd x",
    "r? x",
    "if true; then rm x; fi",
    "for f in a; do rm $f; done",
    "while false; do rm x; done",
    "case a in a) rm x;; esac",
    "f() { rm x; }; f",
    "eval 'rm x'",
    "eval rm x",
    'eval "$(curl example.com)"',
    'bash -c "$CMD"',
    "trap 'rm x' EXIT",
    "watch -n 5 'rm x'",
    "echo 'rm x' | sh",
    "cat <<EOF | sh\nrm x\nEOF",
    "bash <<< 'rm x'",
    "cat <<EOF\n`rm x`\nEOF",
    "cat <<EOF\n$(rm x)\nEOF",
    "r\\\nm x",
    "! rm x",
    'rm "unterminated',
    "coproc rm x",
    "x=\nrm x",
    "echo a$\nrm",
]

# Inputs where tree-sitter-bash and bash disagree (found by running bash): bash runs rm in each.
PARSER_DISAGREEMENTS = [
    "ls#;rm x",
    "[;rm x",
    "[ -\nrm",
    "ls | ls | ls\nrm x && ls",
    "ls\n\\rm x",
    "<$\nrm x",
    ">$ rm x",
    '""\\rm x',
    ">[\\|x rm",
    "! ! rm x",
    "`#`rm x",
    "\\ >$&rm x",
    "!-rf<<[x|rm\n",
]


@pytest.mark.parametrize("command", DENIED_BY_RM)
def test_a_deny_family_matches_a_command_anywhere(command: str) -> None:
    """Chains, substitutions, shell strings, assignments, redirections, groups, find -exec,
    wrappers, quoting, paths, loops, functions, heredocs fed to a shell: `Bash(rm:*)` sees rm."""
    assert denied(command, "Bash(rm:*)")


@pytest.mark.parametrize("command", PARSER_DISAGREEMENTS)
def test_a_deny_family_sees_commands_the_parser_misreads(command: str) -> None:
    """Where tree-sitter's reading differs from bash's (words glued across lines, comments
    inside words, error recovery), the text is read again: deny still matches, allow fails."""
    assert denied(command, "Bash(rm:*)")
    assert not parse_command(command).fully_understood


@pytest.mark.parametrize(
    "command",
    [
        *PARSER_DISAGREEMENTS,
        # Not run: what reaches the network, waits forever or leaves the stand-ins' PATH.
        *(c for c in DENIED_BY_RM if not any(w in c for w in ("curl", "watch", "sudo"))),
        "git status | head -5; ls",
        "ls\nls -l",
    ],
)
def test_every_program_bash_runs_is_matched_by_its_deny_family(
    command: str, tmp_path: Path
) -> None:
    """Ground truth from bash itself: with logging stand-ins for rm, ls, git and head on PATH,
    every program the command really runs is matched by a deny family for its name, and a
    command allowed by families runs only programs those families cover."""
    ran = _run_with_stand_ins(command, tmp_path)
    for argv in ran:
        assert denied(command, f"Bash({argv[0]}:*)"), argv
    allow = ("Bash(ls:*)", "Bash(git status:*)", "Bash(head:*)")
    if allowed(command, *allow):
        assert all(argv[:1] in (["ls"], ["head"]) or argv[:2] == ["git", "status"] for argv in ran)


def _run_with_stand_ins(command: str, tmp_path: Path) -> list[list[str]]:
    bin_dir, work, log = tmp_path / "bin", tmp_path / "work", tmp_path / "log"
    bin_dir.mkdir()
    work.mkdir()
    log.touch()
    for name in ("rm", "ls", "git", "head"):
        stand_in = bin_dir / name
        stand_in.write_text(
            '#!/bin/sh\nprintf "%s\\037" "$(basename "$0")" "$@" >> "$CALLGATE_LOG"\n'
            'printf "\\036" >> "$CALLGATE_LOG"\n'
        )
        stand_in.chmod(0o755)
    environment = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CALLGATE_LOG": str(log), "HOME": str(work)}
    bash, bwrap = shutil.which("bash"), shutil.which("bwrap")
    assert bash is not None
    if bwrap is None:
        pytest.skip("bubblewrap is needed to run adversarial commands safely")
    # Adversarial commands run only inside a read-only sandbox whose one writable place is
    # this test's temporary directory: unconfined, a stray `> /usr/bin/x` would damage the host.
    confine = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    confine += ["--tmpfs", "/tmp", "--bind", str(tmp_path), str(tmp_path)]
    confine += ["--unshare-all", "--die-with-parent", "--new-session", "--chdir", str(work)]
    subprocess.run(
        [*confine, bash, "-c", command],
        cwd=work,
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=10,
        check=False,
    )
    records = log.read_text(errors="replace").split("\x1e")
    return [record.split("\x1f")[:-1] for record in records if record]


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        "echo rm",
        "echo 'rm x'",
        "git grep rm x",
        "cat <<'EOF'\n$(rm x)\nEOF",
        "grep -r 'rm -rf' .",
        "rmlint x",
        "ls # rm x",
    ],
)
def test_a_deny_family_does_not_match_mere_mentions(command: str) -> None:
    """Arguments, quoted text, other programs, quoted heredocs and comments are not commands.
    (Programs the table knows to delete, such as rmdir, are denied by equivalence instead.)"""
    assert not denied(command, "Bash(rm:*)")


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git push --force origin", True),
        ("git push origin", False),
        ("git push $flags origin", True),
        ('git push "$flag"', True),
        ("git $(echo push) --force", True),
        # The program table reads git's global options and the option in any spelling.
        ("git -C dir push --force", True),
        ("git -C dir push origin -f", True),
        ("git push origin main", False),
    ],
)
def test_multi_token_deny_families_treat_run_time_words_as_matching(
    command: str, expected: bool
) -> None:
    """Deny over-matches: a word decided at run time matches any token, and the program table
    sees the subcommand and the option after global options and in other spellings."""
    assert denied(command, "Bash(git push --force:*)") is expected


def test_an_exact_deny_rule_catches_only_the_exact_normalized_command() -> None:
    """An exact deny pattern equals the normalized command or nothing."""
    assert denied("rm -rf /", exact=("rm -rf /",))
    assert denied("  rm -rf /\n", exact=("rm -rf /",))
    assert not denied("rm -rf / ;", exact=("rm -rf /",))
    assert not denied("ls; rm -rf /", exact=("rm -rf /",))
    assert not denied("rm  -rf /", exact=("rm -rf /",))


def test_the_matcher_reports_every_pattern_that_denies() -> None:
    """Denying lists the exact pattern and every matching family."""
    matcher = CommandMatcher(exact=["ls; rm x"], families=families("Bash(rm:*)", "Bash(ls:*)"))
    assert matcher.denying("ls; rm x") == ("ls; rm x", "Bash(rm:*)", "Bash(ls:*)")
    assert matcher.denying("cat x") == ()


@settings(max_examples=300, deadline=None)
@given(line=command_lines, data=st.data())
def test_a_deny_family_matches_whenever_its_word_runs_as_a_command(
    line: tuple[str, frozenset[str]], data: st.DataObject
) -> None:
    """For generated command lines (chains, groups, substitutions, `bash -c` strings, loops,
    wrappers, quoted or path-qualified command words), a family over any program that runs
    denies the line."""
    command, words = line
    word = data.draw(st.sampled_from(sorted(words)))
    assert denied(command, f"Bash({word}:*)")


# ------------------------------------------------------------------ candidates


@pytest.mark.parametrize(
    ("command", "candidates"),
    [
        ("git log --oneline", ["git log --oneline", "Bash(git log:*)"]),
        ("  git status  ", ["git status", "Bash(git status:*)"]),
        # Only programs the table lists as read-only get a family.
        ("npm run test", ["npm run test"]),
        ("make test", ["make test"]),
        ("git log --output=x", ["git log --output=x"]),
        ("sed -n 1,2p notes.txt", ["sed -n 1,2p notes.txt", "Bash(sed:*)"]),
        ("sed -n '1e id' notes.txt", ["sed -n '1e id' notes.txt"]),
        ("git -C x log", ["git -C x log"]),
        ("git push", ["git push"]),
        ("ls -la", ["ls -la", "Bash(ls:*)"]),
        ("cat README.md", ["cat README.md", "Bash(cat:*)"]),
        ("git", ["git"]),
        ("git status && git log", ["git status && git log"]),
        ("git status | head", ["git status | head"]),
        ("git status > out", ["git status > out"]),
        ("FOO=1 make", ["FOO=1 make"]),
        ("./build.sh all", ["./build.sh all"]),
        ("/usr/bin/git log", ["/usr/bin/git log"]),
        ("bash -c 'ls'", ["bash -c 'ls'"]),
        ("bash build.sh", ["bash build.sh"]),
        ("sudo make install", ["sudo make install"]),
        ("timeout 5 pytest", ["timeout 5 pytest"]),
        ("xargs rm", ["xargs rm"]),
        ("python3 -m pytest", ["python3 -m pytest"]),
        ("eval ls", ["eval ls"]),
        ('"git" log', ['"git" log']),
        ('git "log"', ['git "log"']),
        ("find . -delete", ["find . -delete"]),
        ('git status "unterminated', ['git status "unterminated']),
        ("   ", []),
    ],
)
def test_rule_candidates_are_the_exact_command_and_a_narrow_family(
    command: str, candidates: list[str]
) -> None:
    """The exact command always; a family only for one simple segment, over the command word
    and a subcommand-like second word, never for paths, shells, wrappers or interpreters."""
    assert rule_candidates(command) == candidates


@settings(max_examples=200, deadline=None)
@given(line=command_lines)
def test_rule_candidates_never_widen_to_every_command(line: tuple[str, frozenset[str]]) -> None:
    """No candidate is `Bash(:*)`; every family candidate parses back to itself and covers the
    command it came from, and at most one is offered."""
    command, _ = line
    candidates = rule_candidates(command)
    assert candidates[0] == normalize_command(command)
    found = [c for c in candidates if c.startswith("Bash(")]
    assert len(found) <= 1
    for pattern in found:
        assert pattern != "Bash(:*)"
        assert parse_family(pattern).pattern == pattern
        assert allowed(command, pattern)
