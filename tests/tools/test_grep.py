"""Grep: output format and order, filters, caps, protected paths, the regex dialect, and the
ripgrep and pure-Python engines giving the same output."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate.server.core.models import ToolResult
from callgate.server.core.tool import ToolContext, ToolLimits
from callgate.server.tools.search.grep_artifact import GrepArtifact
from callgate.server.tools.search.grep_tool import Grep
from callgate.server.tools.search.patterns import compile_grep_regex
from tests.support.sandbox import bwrap_path
from tests.tools.conftest import RG_PATH
from tests.tools.drive import execute, invalid_field, make_context
from tests.tools.strategies import build_tree, file_trees, grep_options, grep_patterns

pytestmark = pytest.mark.anyio

BWRAP_PATH = bwrap_path()
# ripgrep runs only confined (bubblewrap); without either, Grep searches in Python.
needs_rg = pytest.mark.skipif(
    RG_PATH is None or BWRAP_PATH is None, reason="ripgrep or bubblewrap is not available"
)


def confined_rg(rg: str | None = RG_PATH) -> Grep:
    assert rg is not None
    assert BWRAP_PATH is not None
    return Grep(rg, BWRAP_PATH)


@pytest.fixture(params=["ripgrep", "python"])
def grep(request: pytest.FixtureRequest) -> Grep:
    """Grep with each engine; every behaviour test runs against both."""
    if request.param == "python":
        return Grep(None)
    if RG_PATH is None or BWRAP_PATH is None:
        pytest.skip("ripgrep or bubblewrap is not available")
    return confined_rg()


def make_files(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


async def grep_text(grep: Grep, ctx: ToolContext, **arguments: object) -> str:
    result = await execute(grep, dict(arguments), ctx)
    assert not result.is_error, result.text
    return result.text


async def test_grep_prints_path_line_text_sorted_by_path_then_line(
    grep: Grep, workspace: Path, ctx: ToolContext
) -> None:
    """Matches come as `path:line:text`, workspace-relative, in path then line order."""
    make_files(
        workspace,
        {"src/b.py": "class B:\n    pass\n", "src/a.py": "import os\nclass A:\nclass A2:\n"},
    )
    make_files(workspace, {"a-c.py": "class X\n", "src/sub/z.py": "class Z\n"})
    text = await grep_text(grep, ctx, pattern="^class")
    assert text.split("\n") == [
        "a-c.py:1:class X",
        "src/a.py:2:class A:",
        "src/a.py:3:class A2:",
        "src/b.py:1:class B:",
        "src/sub/z.py:1:class Z",
    ]


async def test_grep_under_a_directory_keeps_workspace_relative_paths(
    grep: Grep, workspace: Path, ctx: ToolContext
) -> None:
    """With path, only that tree is searched and paths still start at the workspace."""
    make_files(workspace, {"src/a.py": "hit\n", "other.py": "hit\n"})
    assert await grep_text(grep, ctx, pattern="hit", path="src") == "src/a.py:1:hit"


async def test_grep_of_one_file_searches_just_that_file(
    grep: Grep, workspace: Path, ctx: ToolContext
) -> None:
    """A file path is searched alone, and its requirement is that exact file."""
    make_files(workspace, {"d/notes.txt": "one\ntwo\n", "d/other.txt": "two\n"})
    prepared = grep.prepare({"pattern": "two", "path": "d/notes.txt"}, ctx)
    canonical = str(workspace / "d/notes.txt")
    assert [(r.kind, r.scope, r.match) for r in prepared.requirements] == [
        ("filesystem.read", canonical, canonical)
    ]
    assert prepared.summary == "Grep two in d/notes.txt"
    assert await grep_text(grep, ctx, pattern="two", path="d/notes.txt") == "d/notes.txt:2:two"


async def test_grep_shows_context_lines_with_separators(
    grep: Grep, workspace: Path, ctx: ToolContext
) -> None:
    """Context lines read `path-line-text`; `--` separates groups that are not adjacent."""
    make_files(workspace, {"f.txt": "a\nHIT\nb\nc\nd\ne\nHIT\nf\n", "g.txt": "HIT\n"})
    text = await grep_text(grep, ctx, pattern="HIT", context_lines=1)
    assert text.split("\n") == [
        "f.txt-1-a",
        "f.txt:2:HIT",
        "f.txt-3-b",
        "--",
        "f.txt-6-e",
        "f.txt:7:HIT",
        "f.txt-8-f",
        "--",
        "g.txt:1:HIT",
    ]


async def test_grep_ignore_case(grep: Grep, workspace: Path, ctx: ToolContext) -> None:
    """ignore_case matches letters of either case."""
    make_files(workspace, {"f.txt": "Alpha\nALPHA\nbeta\n"})
    assert await grep_text(grep, ctx, pattern="alpha") == "no matches in ."
    text = await grep_text(grep, ctx, pattern="alpha", ignore_case=True)
    assert text == "f.txt:1:Alpha\nf.txt:2:ALPHA"


async def test_grep_glob_filters_by_name_or_by_path(
    grep: Grep, workspace: Path, ctx: ToolContext
) -> None:
    """A glob without / matches names at any depth; with / it matches the relative path."""
    make_files(workspace, {"a.py": "x\n", "src/b.py": "x\n", "src/c.ts": "x\n", "src/d.tsx": "x\n"})
    assert await grep_text(grep, ctx, pattern="x", glob="*.py") == "a.py:1:x\nsrc/b.py:1:x"
    assert await grep_text(grep, ctx, pattern="x", glob="src/*.py") == "src/b.py:1:x"
    both = await grep_text(grep, ctx, pattern="x", glob="*.{ts,tsx}")
    assert both == "src/c.ts:1:x\nsrc/d.tsx:1:x"
    assert await grep_text(grep, ctx, pattern="x", path="src", glob="*.py") == "src/b.py:1:x"


async def test_grep_stops_at_max_matches_with_a_notice(
    grep: Grep, workspace: Path, ctx: ToolContext
) -> None:
    """After max_matches matching lines the output stops and says more exist."""
    make_files(workspace, {"a.txt": "x\nx\n", "b.txt": "x\n"})
    lines = (await grep_text(grep, ctx, pattern="x", max_matches=2)).split("\n")
    assert lines[:2] == ["a.txt:1:x", "a.txt:2:x"]
    assert "stopped after 2 matches" in lines[2]
    exact = await grep_text(grep, ctx, pattern="x", max_matches=3)
    assert "stopped" not in exact


async def test_grep_caps_the_output_bytes_with_a_notice(grep: Grep, workspace: Path) -> None:
    """Past the byte cap the output stops with a notice."""
    ctx = make_context(workspace, limits=ToolLimits(grep_max_bytes=40))
    make_files(workspace, {"f.txt": "".join(f"match {n}\n" for n in range(10))})
    lines = (await grep_text(grep, ctx, pattern="match")).split("\n")
    assert lines[:2] == ["f.txt:1:match 0", "f.txt:2:match 1"]
    assert "output capped at 40 bytes" in lines[2]


async def test_grep_clips_very_long_lines(grep: Grep, workspace: Path, ctx: ToolContext) -> None:
    """A very long matching line is shown cut, saying how much was left out."""
    make_files(workspace, {"min.js": "x" * 5000 + "\n"})
    text = await grep_text(grep, ctx, pattern="x")
    assert text.startswith("min.js:1:" + "x" * 1000 + " [… 4000 more chars]")


async def test_grep_never_shows_protected_files(
    grep: Grep, workspace: Path, ctx: ToolContext
) -> None:
    """.env files, keys and .ssh contents are filtered out, whatever the glob."""
    make_files(
        workspace,
        {
            "visible.txt": "TOKEN=visible\n",
            ".env": "TOKEN=hunter2\n",
            "sub/.env.production": "TOKEN=hunter2\n",
            ".ssh/config": "TOKEN=hunter2\n",
            "certs/server.pem": "TOKEN=hunter2\n",
            "conf.env.d/x": "TOKEN=hunter2\n",
        },
    )
    (workspace / "conf.env.d").rename(workspace / ".env.d")
    for glob in (None, "*", ".env*", "**/*"):
        arguments: dict[str, object] = {"pattern": "TOKEN"}
        if glob is not None:
            arguments["glob"] = glob
        text = await grep_text(grep, ctx, **arguments)
        assert "hunter2" not in text
    assert await grep_text(grep, ctx, pattern="TOKEN") == "visible.txt:1:TOKEN=visible"


async def test_grep_of_a_protected_path_is_read_denied_at_run(
    grep: Grep, workspace: Path, ctx: ToolContext
) -> None:
    """A protected file or directory named directly is refused, even past the gate."""
    make_files(workspace, {".env": "TOKEN=hunter2\n", ".ssh/config": "TOKEN=hunter2\n"})
    for path in (".env", ".ssh"):
        result = await execute(grep, {"pattern": "TOKEN", "path": path}, ctx)
        assert result.error_code == "read_denied"
        assert "hunter2" not in result.text


async def test_grep_skips_binary_and_non_utf8_files(
    grep: Grep, workspace: Path, ctx: ToolContext
) -> None:
    """Files holding NUL bytes or invalid UTF-8 anywhere are not searched."""
    make_files(
        workspace,
        {
            "bin.dat": b"needle\n" + b"\x00" * 10,
            "late.bin": b"needle\n" + b"y" * 200_000 + b"\x00\n",
            "latin.txt": b"needle caf\xe9\n",
            "ok.txt": "needle\n",
        },
    )
    assert await grep_text(grep, ctx, pattern="needle") == "ok.txt:1:needle"


async def test_grep_skips_noise_and_does_not_follow_symlinks(
    grep: Grep, workspace: Path, ctx: ToolContext, outside: Path
) -> None:
    """Noise directories and symlinks (to files or directories) are not searched."""
    make_files(
        workspace,
        {"src/a.py": "data\n", "node_modules/m/i.js": "data\n", ".git/config": "data\n"},
    )
    (workspace / "out").symlink_to(outside)
    (workspace / "link.py").symlink_to("src/a.py")
    assert await grep_text(grep, ctx, pattern="data") == "src/a.py:1:data"


async def test_grep_without_matches_says_so(grep: Grep, workspace: Path, ctx: ToolContext) -> None:
    """No match is a successful, explicit answer."""
    make_files(workspace, {"d/a.txt": "x\n"})
    assert await grep_text(grep, ctx, pattern="y", path="d") == "no matches in d"


async def test_grep_that_runs_out_of_time_is_timed_out(grep: Grep, workspace: Path) -> None:
    """A search past its deadline stops with timed_out."""
    ctx = make_context(workspace, limits=ToolLimits(grep_timeout_seconds=0))
    make_files(workspace, {"a.txt": "x\n"})
    result = await execute(grep, {"pattern": "x"}, ctx)
    assert result.error_code == "timed_out"


async def test_grep_falls_back_to_python_when_ripgrep_is_missing(
    workspace: Path, ctx: ToolContext
) -> None:
    """A ripgrep path that does not run gives the Python engine's answer."""
    make_files(workspace, {"a.txt": "x\n"})
    if BWRAP_PATH is None:
        pytest.skip("bubblewrap is not available")
    result = await execute(confined_rg("/nonexistent/rg"), {"pattern": "x"}, ctx)
    assert result.text == "a.txt:1:x"


def test_grep_summary_truncates_long_patterns(workspace: Path, ctx: ToolContext) -> None:
    """The summary is `Grep <pattern, at most 80 chars> in <rel>`; the requirement a tree."""
    prepared = Grep(None).prepare({"pattern": "a" * 100}, ctx)
    assert prepared.summary == "Grep " + "a" * 79 + "… in ."
    tree = "tree:" + str(workspace)
    assert [(r.kind, r.scope, r.match) for r in prepared.requirements] == [
        ("filesystem.read", tree, tree)
    ]


UNSUPPORTED_PATTERNS = [
    "(?=a)",
    "(?!a)",
    "(?<=a)b",
    "(?<!a)b",
    "(a)\\1",
    "(?P<n>a)(?P=n)",
    "(?>a)",
    "a*+",
    "a{2}+",
    "(?(1)a|b)",
    "(?#note)a",
    "\\Z",
    "\\0",
    "\\<",
    "\\/",
    "\\ ",
    "\\é",
    "a{",
    "{",
    "a{,2}",
    "a{1001}",
    "[[:alpha:]]",
    "[a[]",
    "[a&&b]",
    "[&&a]",
    "[a--b]",
    "[a~~b]",
    "[\\b]",
    "[\\S]",
    "(?x)a b",
    "(?a)a",
    "(?<n>a)",
    "\\n",
    "a\nb",
    "\\N{BULLET}",
    "(",
    "\\",
    "*a",
]


@pytest.mark.parametrize("pattern", UNSUPPORTED_PATTERNS)
def test_grep_refuses_patterns_outside_the_common_dialect(ctx: ToolContext, pattern: str) -> None:
    """What either engine would refuse or read differently fails on arguments.pattern."""
    assert invalid_field(Grep(None), {"pattern": pattern}, ctx) == "arguments.pattern"


SUPPORTED_PATTERNS = [
    "a",
    "^class \\w+\\(",
    "foo|bar",
    "(?:ab)+c?",
    "(?P<name>x)y",
    "(?i)case",
    "(?i:x)y",
    "a(?i)b",
    "\\x{1F600}\\u{e9}",
    "a{2}",
    "a{1,}",
    "a{0,3}?",
    "[]a]",
    "[^]a]",
    "[a-z0-9_-]",
    "\\.\\*\\+\\?\\(\\)\\|\\[\\]\\{\\}\\^\\$\\#\\&\\-\\~\\\\",
    "\\x41\\u00e9\\U0001F600",
    "\\d\\D\\w\\W\\s\\S\\b\\B\\A",
    "\\t\\r\\f\\v\\a",
    "[\\s\\d]",
    "}",
    "a}",
    "",
]


@needs_rg
@pytest.mark.parametrize("pattern", [p for p in SUPPORTED_PATTERNS if p])
def test_every_accepted_pattern_is_also_accepted_by_ripgrep(
    ctx: ToolContext, tmp_path: Path, pattern: str
) -> None:
    """The dialect check only lets through patterns ripgrep compiles too."""
    compile_grep_regex(pattern, ignore_case=False)
    Grep(None).prepare({"pattern": pattern}, ctx)
    probe = tmp_path / "probe.txt"
    probe.write_text("text\n")
    assert RG_PATH is not None
    done = subprocess.run(
        [RG_PATH, "--no-config", "-c", "--", pattern, str(probe)],
        capture_output=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr


@needs_rg
@pytest.mark.parametrize("pattern", UNSUPPORTED_PATTERNS)
def test_ripgrep_reading_does_not_matter_for_refused_patterns(pattern: str) -> None:
    """Refused patterns are refused by the Python side alone (no dependence on ripgrep)."""
    with pytest.raises(ValueError, match=r".+"):
        compile_grep_regex(pattern, ignore_case=False)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"pattern": ""}, "arguments.pattern"),
        ({"pattern": "a" * 1001}, "arguments.pattern"),
        ({"pattern": "a", "context_lines": 11}, "arguments.context_lines"),
        ({"pattern": "a", "context_lines": -1}, "arguments.context_lines"),
        ({"pattern": "a", "max_matches": 0}, "arguments.max_matches"),
        ({"pattern": "a", "max_matches": 201}, "arguments.max_matches"),
        ({"pattern": "a", "ignore_case": 1}, "arguments.ignore_case"),
        ({"pattern": "a", "path": "missing"}, "arguments.path"),
        ({"pattern": "a", "path": "f.txt", "glob": "*.py"}, "arguments.glob"),
        ({"pattern": "a", "glob": "[ab]"}, "arguments.glob"),
        ({"pattern": "a", "glob": "/abs/*"}, "arguments.glob"),
        ({"pattern": "a", "regex": "b"}, "arguments.regex"),
        ({}, "arguments.pattern"),
    ],
)
def test_grep_rejects_bad_arguments_at_prepare(
    workspace: Path, ctx: ToolContext, arguments: dict[str, object], field: str
) -> None:
    """Ranges, types, missing paths, globs on a file and unknown fields fail Prepare."""
    make_files(workspace, {"f.txt": "a\n"})
    assert invalid_field(Grep(None), arguments, ctx) == field


async def _both_engines(
    root: Path, arguments: dict[str, object], limits: ToolLimits
) -> tuple[ToolResult, ToolResult]:
    assert RG_PATH is not None
    ctx = make_context(root, limits=limits)
    with_rg = await execute(confined_rg(), arguments, ctx)
    in_python = await execute(Grep(None), arguments, ctx)
    return with_rg, in_python


@needs_rg
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tree=file_trees,
    pattern=grep_patterns,
    options=grep_options,
    max_bytes=st.sampled_from([120, 64 << 10]),
)
def test_ripgrep_and_python_give_identical_output(
    tree: dict[tuple[str, str], bytes],
    pattern: str,
    options: dict[str, object],
    max_bytes: int,
) -> None:
    """On any generated tree, pattern and options, both engines print exactly the same."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch).resolve() / "ws"
        root.mkdir()
        build_tree(root, tree)
        arguments: dict[str, object] = {"pattern": pattern, **options}
        if "path" in arguments and not (root / str(arguments["path"])).is_dir():
            del arguments["path"]
        limits = ToolLimits(grep_max_bytes=max_bytes)
        with_rg, in_python = anyio.run(_both_engines, root, arguments, limits)
    assert with_rg == in_python


@needs_rg
@pytest.mark.parametrize("pattern", ["\\ba", "\\Ba", "(?i)\\bA\\b", "[ab]\\b"])
async def test_word_boundaries_are_ascii_in_both_engines(workspace: Path, pattern: str) -> None:
    """RE2 knows only ASCII word boundaries, so ripgrep is given those too: `\\ba` finds the
    "a" after "é" with either engine (the property test's counterexample, pinned)."""
    (workspace / "A").write_text("éa\nxa\n a\n", encoding="utf-8")
    with_rg, in_python = await _both_engines(workspace, {"pattern": pattern}, ToolLimits())
    assert with_rg == in_python
    assert not with_rg.is_error


async def test_grep_of_a_path_removed_or_retyped_since_prepare_fails(
    grep: Grep, workspace: Path, ctx: ToolContext
) -> None:
    """A path deleted after Prepare is file_not_found; a directory turned file has changed."""
    make_files(workspace, {"gone.txt": "x\n", "d/a.txt": "x\n"})
    gone = grep.prepare({"pattern": "x", "path": "gone.txt"}, ctx)
    retyped = grep.prepare({"pattern": "x", "path": "d"}, ctx)
    (workspace / "gone.txt").unlink()
    (workspace / "d/a.txt").unlink()
    (workspace / "d").rmdir()
    (workspace / "d").write_text("x\n")
    assert (await grep.invoke(gone.artifact, ctx)).error_code == "file_not_found"
    assert (await grep.invoke(retyped.artifact, ctx)).error_code == "resolution_changed"


@needs_rg
async def test_a_pattern_ripgrep_refuses_at_run_is_pattern_unsupported(
    workspace: Path, ctx: ToolContext
) -> None:
    """Should a pattern ever pass the dialect check that ripgrep refuses, the call fails
    cleanly instead of reporting no matches."""
    make_files(workspace, {"a.txt": "a<b\n"})
    assert RG_PATH is not None
    artifact = GrepArtifact(
        path=None,
        canonical=str(workspace),
        is_directory=True,
        pattern="\\<",
        glob=None,
        ignore_case=False,
        context_lines=0,
        max_matches=200,
    )
    result = await confined_rg().invoke(artifact, ctx)
    assert result.error_code == "pattern_unsupported"


async def test_a_binary_file_with_a_match_does_not_hide_the_next_file(
    grep: Grep, workspace: Path, ctx: ToolContext
) -> None:
    """ripgrep follows a match in a file that turns out to be binary with a warning line on
    stdout; the next file's matches are still reported (Hypothesis found this one)."""
    make_files(workspace, {"-": b"\ntail\x00\n", "A": "\n"})
    result = await execute(grep, {"pattern": "^"}, ctx)
    assert result.text == "A:1:"
