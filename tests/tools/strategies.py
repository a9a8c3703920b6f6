"""Hypothesis strategies for the search tools: small file trees, Grep patterns and options."""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st

# Directories the generated trees use, noise and hidden ones included.
DIRECTORIES = ("", "a", "a/b", "a-b", "A", ".hidden", "node_modules", "sub dir", ".ssh")
NAME_ALPHABET = "abAB.-_ é"
# Text lines: ASCII letters, spaces, tabs, \x1c (Python's \s differs from Rust's there),
# a carriage return, and a non-ASCII letter.
LINE_ALPHABET = "abxAB _1\t\x1c\ré"

names = st.one_of(
    st.text(NAME_ALPHABET, min_size=1, max_size=5).filter(lambda n: n not in (".", "..")),
    st.sampled_from([".env", "k.pem", "id_rsa", ".env.local", "node_modules"]),
)


@st.composite
def file_contents(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(st.text(LINE_ALPHABET, max_size=12), min_size=1, max_size=8))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    trailing: bool = draw(st.booleans())
    body = newline.join(lines) + (newline if trailing else "")
    data = body.encode("utf-8")
    damage = draw(st.sampled_from(["none"] * 6 + ["nul", "invalid"]))
    if damage == "nul":
        data += b"tail\x00\n"
    elif damage == "invalid":
        data = b"a\xffb\n" + data
    return data


file_trees = st.dictionaries(
    st.tuples(st.sampled_from(DIRECTORIES), names), file_contents(), min_size=1, max_size=12
)

grep_patterns = st.one_of(
    # Often-matching patterns, so that most examples have output to compare.
    st.sampled_from(["a", "x", "A", " ", "\\s", ".", "^", "b$", "\\w"]),
    st.sampled_from(
        [
            "a",
            "b+",
            "^a",
            "x$",
            "a.b",
            "[ab]x",
            "[^ ]+$",
            "\\s",
            "\\S\\s\\S",
            "\\ba",
            "A",
            "(?i)ab",
            "é",
            "\\d",
            "\\w+ \\w+",
            "a|x",
            "(ab)+",
            "a{2}",
            "^$",
            "\\t",
            "\\r$",
            "[\\s]x",
            "\\x1c",
            ".",
        ]
    ),
    st.text("abxAB1é", min_size=1, max_size=3),
)

grep_options = st.fixed_dictionaries(
    {},
    optional={
        "ignore_case": st.booleans(),
        "context_lines": st.integers(0, 2),
        "max_matches": st.integers(1, 6),
        "glob": st.sampled_from(["*", "*.a", "a*", "{a,b}*", "a/**", "**/b*", "*.{env,pem}"]),
        "path": st.sampled_from(["a", "A"]),
    },
)


def build_tree(root: Path, tree: dict[tuple[str, str], bytes]) -> None:
    """Write a generated tree; entries that clash with an earlier one are left out."""
    for (directory, name), data in tree.items():
        path = root / directory / name if directory else root / name
        clash = path.exists() or any(p.is_file() for p in path.parents if p != root)
        if clash:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
