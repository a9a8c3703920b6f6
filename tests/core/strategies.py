"""Hypothesis strategies for the core: shell command lines built from a small grammar."""

from __future__ import annotations

import shlex

from hypothesis import strategies as st

# Allow families and segments they cover, one by one.
ALLOW_FAMILIES = ("Bash(git status:*)", "Bash(git log:*)", "Bash(head:*)")
COVERED_SEGMENTS = (
    "git status",
    "git status --short",
    "git log --oneline -5",
    "git log 'a b' src/*.py",
    "head -5",
    "head -n 3 2>&1",
)
# Segments (or pieces of a segment) none of the allow families may cover.
UNCOVERED_SEGMENTS = (
    "rm -rf x",
    "sh",
    "git push",
    "git statusx",
    "/usr/bin/git status",
    "./git status",
    "FOO=1 git status",
    "git status > out",
    "git status 2> err",
    "git status >> ~/.bashrc",
    "git status $(rm x)",
    "git status `rm x`",
    "git status <(rm x)",
    'git status "$(rm x)"',
    '"git" status',
    "g'i't status",
    "git\\ status",
    "git${IFS}status",
    "$'git' status",
    "gi? status",
    "{git,rm} status",
    "bash -c 'git status'",
    "head $((1))",
    "if true; then git status; fi",
    "(rm x)",
    "{ rm x; }",
    "git() { rm x; }",
    "export PATH=/tmp",
    "git log | sh",
)
OPERATORS = (" && ", " || ", "; ", ";", " | ", " |& ", " & ", "\n")
# tree-sitter-bash glues `a | b | c\nd && e` into one command `c d` (the parse then fails
# closed), so positive compositions are joined without newlines.
SAME_LINE_OPERATORS = OPERATORS[:-1]

# Command words the deny grammar uses, and spellings bash runs as the same program.
COMMAND_WORDS = ("git", "ls", "echo", "cat", "rm", "head", "make", "grep")
ARGUMENTS = ("x", "-rf", "status", "'a b'", '"c d"', "*.py", "$HOME", "--short", "5")
PREFIXES = ("", "", "FOO=1 ", "sudo ", "env A=b ", "timeout 5 ", "nice -n 5 ", "command ", "xargs ")
SUFFIXES = ("", "", " > out", " 2>&1", " >> log", " < in", " 2>/dev/null")


def spellings(word: str) -> tuple[str, ...]:
    return (word, f'"{word}"', f"'{word}'", f"\\{word}", f"/usr/bin/{word}")


def join(parts: list[str], operators: list[str]) -> str:
    text = parts[0]
    for operator, part in zip(operators, parts[1:], strict=True):
        text += operator + part
    return text


@st.composite
def covered_compositions(draw: st.DrawFn) -> str:
    """Covered segments joined by random operators."""
    parts = draw(st.lists(st.sampled_from(COVERED_SEGMENTS), min_size=1, max_size=5))
    operators = draw(st.lists(st.sampled_from(SAME_LINE_OPERATORS), min_size=len(parts) - 1))
    return join(parts, operators[: len(parts) - 1])


@st.composite
def compositions_with_an_uncovered_part(draw: st.DrawFn) -> str:
    """Covered segments with one uncovered segment inserted anywhere, optionally grouped."""
    parts = draw(st.lists(st.sampled_from(COVERED_SEGMENTS), max_size=4))
    parts.insert(draw(st.integers(0, len(parts))), draw(st.sampled_from(UNCOVERED_SEGMENTS)))
    operators = [draw(st.sampled_from(OPERATORS)) for _ in parts[1:]]
    text = join(parts, operators)
    grouping = draw(st.sampled_from(["{}", "( {} )", "{{ {}\n}}"]))
    return grouping.format(text)


@st.composite
def simple_commands(draw: st.DrawFn) -> tuple[str, frozenset[str]]:
    """One command, possibly prefixed by an assignment or a wrapper and redirected, with the
    program it runs."""
    word = draw(st.sampled_from(COMMAND_WORDS))
    arguments = draw(st.lists(st.sampled_from(ARGUMENTS), max_size=3))
    text = " ".join([draw(st.sampled_from(spellings(word))), *arguments])
    text = draw(st.sampled_from(PREFIXES)) + text + draw(st.sampled_from(SUFFIXES))
    return text, frozenset({word})


_FORM_WORDS = {
    "echo $( {} )": frozenset({"echo"}),
    'echo "$( {} )"': frozenset({"echo"}),
    "cat <( {} )": frozenset({"cat"}),
    "if true; then {}\nfi": frozenset({"true"}),
}


def _compound(
    inner: st.SearchStrategy[tuple[str, frozenset[str]]],
) -> st.SearchStrategy[tuple[str, frozenset[str]]]:
    def chained(
        items: list[tuple[str, frozenset[str]]], operators: list[str]
    ) -> tuple[str, frozenset[str]]:
        text = join([t for t, _ in items], operators[: len(items) - 1])
        return text, frozenset().union(*(w for _, w in items))

    def wrapped(item: tuple[str, frozenset[str]], form: str) -> tuple[str, frozenset[str]]:
        text, words = item
        if form == "bash -c":
            return f"bash -c {shlex.quote(text)}", words | {"bash"}
        if form == "backticks":
            if "`" in text:
                return text, words
            return f"echo `{text}`", words | {"echo"}
        return form.format(text), words | _FORM_WORDS.get(form, frozenset())

    forms = st.sampled_from(
        [
            "( {} )",
            "{{ {}\n}}",
            "echo $( {} )",
            'echo "$( {} )"',
            "cat <( {} )",
            "if true; then {}\nfi",
            "for i in a; do {}\ndone",
            "bash -c",
            "backticks",
        ]
    )
    return st.one_of(
        st.builds(
            chained,
            st.lists(inner, min_size=1, max_size=3),
            st.lists(st.sampled_from(OPERATORS), min_size=2, max_size=2),
        ),
        st.builds(wrapped, inner, forms),
    )


command_lines: st.SearchStrategy[tuple[str, frozenset[str]]] = st.recursive(
    simple_commands(), _compound, max_leaves=6
)
"""A command line and every program name it runs as a command word somewhere."""


# Task graph operations -----------------------------------------------------------------------
# IDs span a few more tasks than a sequence usually holds, so some name no task (unknown, or
# deleted); creates come often so that most changes meet existing tasks.
task_ids = st.sampled_from([f"t{n}" for n in range(1, 9)])
task_id_lists = st.lists(task_ids, max_size=3)
task_statuses = st.sampled_from(["pending", "in_progress", "completed"])

task_operations: st.SearchStrategy[tuple[object, ...]] = st.one_of(
    st.tuples(st.just("create"), st.just([])),
    st.tuples(st.just("create"), task_id_lists),
    st.tuples(st.just("status"), task_ids, task_statuses),
    st.tuples(st.just("status"), task_ids, task_statuses),
    st.tuples(st.just("add"), task_ids, task_id_lists),
    st.tuples(st.just("remove"), task_ids, task_id_lists),
    st.tuples(st.just("replace"), task_ids, task_id_lists),
    st.tuples(st.just("delete"), task_ids),
)
"""One TaskGraph change: ("create", blocked_by), ("status", id, status), ("add" | "remove" |
"replace", id, ids) or ("delete", id)."""
