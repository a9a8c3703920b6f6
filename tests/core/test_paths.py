"""Workspace containment through real symlinks, and the protected (secret) path matcher."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.server.core.errors import InvalidArgument
from callgate.server.core.paths import (
    DEFAULT_DENIED_GLOBS,
    ProtectedPaths,
    Workspace,
    glob_to_regex,
    is_within,
)


@dataclass(frozen=True)
class Tree:
    """A workspace with symlinks leading in and out, and the inodes on each side."""

    root: Path
    outside: Path
    workspace: Workspace
    inside_inodes: frozenset[tuple[int, int]]


def _inodes(top: Path) -> frozenset[tuple[int, int]]:
    found = {(top.stat().st_dev, top.stat().st_ino)}
    for directory, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            info = os.lstat(os.path.join(directory, name))
            found.add((info.st_dev, info.st_ino))
    return frozenset(found)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    """ws/{a/b, b, link_in -> a, link_out -> ../outside, a/link_out -> ws_sibling (a name that
    shares the root's prefix)}, outside/{a, b, link_in -> ../ws, link_out -> ../elsewhere}."""
    base = tmp_path_factory.mktemp("containment")
    ws, outside, elsewhere = base / "ws", base / "outside", base / "elsewhere"
    sibling = base / "ws_sibling"
    for directory in (ws / "a" / "b", ws / "b", outside / "a", outside / "b", elsewhere, sibling):
        directory.mkdir(parents=True)
    (ws / "a" / "file").write_text("inside\n")
    (outside / "a" / "file").write_text("outside\n")
    (ws / "link_in").symlink_to(ws / "a")
    (ws / "link_out").symlink_to(Path("..") / "outside")
    (ws / "a" / "link_out").symlink_to(sibling)
    (ws / "b" / "link_in").symlink_to(Path("..") / "b")
    (outside / "link_in").symlink_to(Path("..") / "ws")
    (outside / "link_out").symlink_to(elsewhere)
    workspace = Workspace(str(ws), ProtectedPaths(DEFAULT_DENIED_GLOBS))
    return Tree(base, outside, workspace, _inodes(ws))


def _is_canonical(path: str) -> bool:
    parts = path.split("/")
    return path.startswith("/") and "" not in parts[1:] and "." not in parts and ".." not in parts


segments = st.sampled_from(["a", "b", "..", ".", "link_out", "link_in", ""])
relative_paths = st.lists(segments, min_size=1, max_size=7).map("/".join)


@settings(max_examples=300, deadline=None)
@given(relative=relative_paths, form=st.sampled_from(["relative", "under-root", "absolute"]))
def test_resolved_paths_never_leave_the_workspace(tree: Tree, relative: str, form: str) -> None:
    """Any path either fails with ARGUMENTS_INVALID or resolves to a canonical path inside the
    workspace that names the very file the kernel would open (symlinks included)."""
    root = tree.workspace.root
    raw = {"relative": relative, "under-root": f"{root}/{relative}", "absolute": f"/{relative}"}[
        form
    ]
    joined = raw if raw.startswith("/") else os.path.join(root, raw)
    outcome: str | InvalidArgument
    try:
        outcome = tree.workspace.resolve(raw, "path")
    except InvalidArgument as error:
        outcome = error
    if isinstance(outcome, InvalidArgument):
        assert outcome.reason == "ARGUMENTS_INVALID"
        assert outcome.violations[0].field == "arguments.path"
        if raw and os.path.exists(joined):
            info = os.stat(joined)
            assert (info.st_dev, info.st_ino) not in tree.inside_inodes
        return
    resolved = outcome
    assert _is_canonical(resolved)
    assert is_within(resolved, root)
    if os.path.exists(joined):
        assert os.path.samefile(joined, resolved)
        info = os.stat(resolved)
        assert (info.st_dev, info.st_ino) in tree.inside_inodes


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a/b", "a/b"),
        ("link_in/b", "a/b"),
        ("./a/../b", "b"),
        ("link_out/link_in/a", "a"),
        ("a/new-file.txt", "a/new-file.txt"),
        (".", "."),
    ],
)
def test_resolution_follows_symlinks_to_the_canonical_path(
    tree: Tree, raw: str, expected: str
) -> None:
    """The result is the symlink-free absolute path, shown workspace-relative in summaries."""
    resolved = tree.workspace.resolve(raw, "path")
    assert tree.workspace.relative(resolved) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "..",
        "../outside/a",
        "../ws_sibling",
        "link_out",
        "link_out/a/file",
        "a/link_out",
        "/etc/passwd",
        "/",
    ],
)
def test_paths_that_escape_are_rejected(tree: Tree, raw: str) -> None:
    """`..`, absolute paths elsewhere and symlinks leading out are all ARGUMENTS_INVALID."""
    with pytest.raises(InvalidArgument) as caught:
        tree.workspace.resolve(raw, "path")
    assert caught.value.reason == "ARGUMENTS_INVALID"
    assert caught.value.violations[0].field == "arguments.path"


@pytest.mark.parametrize("raw", ["", "a\x00b", "x" * 4097])
def test_empty_nul_and_oversized_paths_are_rejected(tree: Tree, raw: str) -> None:
    """Degenerate paths are argument errors (a NUL byte must not surface as a ValueError)."""
    with pytest.raises(InvalidArgument) as caught:
        tree.workspace.resolve(raw, "root")
    assert caught.value.reason == "ARGUMENTS_INVALID"
    assert caught.value.violations[0].field == "arguments.root"


def test_a_symlink_loop_never_resolves_outside(tmp_path: Path) -> None:
    """A self-referencing link cannot be used to climb out with `..`."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "loop").symlink_to("loop")
    workspace = Workspace(str(tmp_path / "ws"), ProtectedPaths(()))
    with pytest.raises(InvalidArgument):
        workspace.resolve("loop/../../../etc", "path")
    resolved = workspace.resolve("loop/x", "path")
    assert is_within(resolved, workspace.root)


STATE_DIR = "/var/lib/callgate-state"


@pytest.fixture
def protected() -> ProtectedPaths:
    return ProtectedPaths(DEFAULT_DENIED_GLOBS, roots=[STATE_DIR])


@pytest.mark.parametrize(
    "relative",
    [
        ".env",
        "sub/.env",
        "sub/.env.local",
        ".env.production",
        ".ssh",
        ".ssh/id_rsa",
        "home/u/.ssh/config",
        "x.pem",
        "deep/er/x.pem",
        "server.key",
        "a/.aws/credentials",
        ".gnupg/pubring.kbx",
        "id_rsa",
        "keys/id_rsa.pub",
        "id_ed25519",
        ".netrc",
        "sub/.git-credentials",
        "odd\nname/.env",
        ".ssh/key\nwith-newline",
        ".envrc",
        ".env~",
        ".ENV",
        "sub/.Env.Local",
        "prod.env",
        "id_ecdsa",
        "keys/id_ecdsa_sk",
        "cert.p12",
        "cert.pfx",
        ".npmrc",
        ".pypirc",
        "home/.docker/config.json",
        ".kube/config",
    ],
)
def test_secret_paths_are_protected_anywhere(protected: ProtectedPaths, relative: str) -> None:
    """The default secret globs match at any depth (newlines in names do not hide a secret)."""
    assert protected.is_protected(f"/ws/{relative}")
    assert protected.overlaps_tree(f"/ws/{relative}")


@pytest.mark.parametrize(
    "relative",
    [
        "env",
        "environment.md",
        "notes.key.txt",
        "id_generator.py",
        "pem",
        "x.pem.txt",
        "ssh/config",
        "my.ssh",
        "docs/netrc",
        ".",
    ],
)
def test_near_miss_names_are_not_protected(protected: ProtectedPaths, relative: str) -> None:
    """Names that only resemble a secret glob stay usable (`**/.env.*` needs the dot)."""
    assert not protected.is_protected(os.path.normpath(f"/ws/{relative}"))


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (STATE_DIR, True),
        (f"{STATE_DIR}/tokens/agent", True),
        (f"{STATE_DIR}-other", False),
        ("/var/lib", False),
    ],
)
def test_the_state_directory_and_everything_below_it_is_protected(
    protected: ProtectedPaths, path: str, expected: bool
) -> None:
    """A protected root covers itself and its subtree, not siblings sharing a prefix."""
    assert protected.is_protected(path) is expected


@pytest.mark.parametrize(
    ("glob", "path", "expected"),
    [
        ("*.txt", "a.txt", True),
        ("*.txt", "d/a.txt", False),
        ("**/*.txt", "a.txt", True),
        ("**/*.txt", "d/e/a.txt", True),
        ("d/**", "d", True),
        ("d/**", "d/e/f", True),
        ("d/**", "dx/e", False),
        ("a?c", "abc", True),
        ("a?c", "a/c", False),
        ("[ab].txt", "b.txt", True),
        ("[!ab].txt", "c.txt", True),
        ("[!ab].txt", "a.txt", False),
        ("x[/]y", "x/y", False),
        ("a+b(c)", "a+b(c)", True),
        ("**/x", "new\nline/x", True),
    ],
)
def test_glob_translation(glob: str, path: str, expected: bool) -> None:
    """`*`, `?` and classes stay within one component; `**` spans directories."""
    assert (re.match(glob_to_regex(glob) + r"\Z", path) is not None) is expected


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        (".git/config", True),
        ("sub/repo/.git/config", True),
        (".git/hooks", True),
        (".git/hooks/pre-commit", True),
        (".GIT/HOOKS/post-checkout", True),
        (".git/modules/lib/config", True),
        (".gitmodules", True),
        (".bashrc", True),
        ("a/b/.zshrc", True),
        (".vscode/tasks.json", True),
        (".idea/workspace.xml", True),
        (".mcp.json", True),
        (".ripgreprc", True),
        (".git/commondir", True),
        (".git/worktrees/w1/commondir", True),
        (".git/HEAD", False),
        (".git/objects/ab/cdef", False),
        ("src/config", False),
        ("bashrc.md", False),
    ],
)
def test_files_that_run_code_are_readonly_anywhere(
    protected: ProtectedPaths, relative: str, expected: bool
) -> None:
    """Git config and hooks, shell startup and editor/agent config match at any depth, any case."""
    assert protected.is_readonly(f"/ws/{relative}") is expected


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        (".git/config", True),
        (".git", True),
        ("sub/module/.git", True),
        (".GIT", True),
        (".gitignore", False),
        ("src/main.py", False),
    ],
)
def test_a_file_named_git_needs_a_human_to_write_like_the_readonly_files(
    protected: ProtectedPaths, relative: str, expected: bool
) -> None:
    """A `.git` file (a `gitdir:` pointer to another config) waits for a human like
    .git/config, though a `.git` directory is no read-only glob."""
    assert protected.needs_human_to_write(f"/ws/{relative}") is expected


_DIRECTORIES = st.sampled_from(
    [
        "/",
        "/ws",
        "/ws/.git",
        "/ws/.GIT/modules/lib",
        "/ws/home/.docker",
        "/ws/.kube",
        "/ws/a/.ssh",
        "/ws/.config/gcloud",
        "/ws/.cargo",
        "/ws/sub/.git/hooks",
        "/var/lib/callgate-state",
        "/var/lib",
        "/ws/.vscode",
    ]
)
_NAMES = st.one_of(
    st.sampled_from(
        [
            ".env",
            "config",
            "config.json",
            "hooks",
            "commondir",
            "id_rsa",
            ".git",
            ".GIT",
            "x.pem",
            "credentials",
            "callgate-state",
            "tokens",
            "pre-commit",
            "settings.json",
            "notes.txt",
            "\u017fsh",  # long s: casefolds to "s"
            ".Ssh",
            "Config",
        ]
    ),
    st.text(alphabet="aAcegiknorst.-_/\n", min_size=1, max_size=12).filter(
        lambda name: "/" not in name and name not in (".", "..")
    ),
)


@given(_DIRECTORIES, _NAMES)
def test_answers_by_name_in_a_directory_equal_answers_by_path(directory: str, name: str) -> None:
    """The walk's per-directory shortcut (`children`) answers exactly as the path checks do."""
    protected = ProtectedPaths(DEFAULT_DENIED_GLOBS, roots=[STATE_DIR])
    children = protected.children(directory)
    path = f"{directory.rstrip('/')}/{name}"
    assert children.is_protected(name) == protected.is_protected(path)
    assert children.is_readonly(name) == protected.is_readonly(path)
    assert children.needs_human_to_write(name) == protected.needs_human_to_write(path)
