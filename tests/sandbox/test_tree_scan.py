"""The walk that finds what a sandbox must mask or make read-only: complete, or refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from callgate.server.core.paths import DEFAULT_DENIED_GLOBS, ProtectedPaths
from callgate.server.sandbox import tree_scan
from callgate.server.sandbox.tree_scan import ScanOverBudget, TreeScanner, scan_tree


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return Path(os.path.realpath(workspace))


@pytest.fixture
def protected() -> ProtectedPaths:
    return ProtectedPaths(DEFAULT_DENIED_GLOBS)


def test_secrets_are_found_at_any_depth_and_in_noise_directories(
    root: Path, protected: ProtectedPaths
) -> None:
    """No depth or entry limit, and .git, node_modules and virtualenvs are entered."""
    deep = root.joinpath(*"abcdefghijkl")
    deep.mkdir(parents=True)
    (deep / ".env").write_text("S=1")
    for noise in (".git", "node_modules/pkg", ".venv/lib"):
        (root / noise).mkdir(parents=True)
        (root / noise / ".env").write_text("S=1")
    found = scan_tree(str(root), protected)
    assert sorted(found.masked) == sorted(
        [
            str(deep / ".env"),
            str(root / ".git" / ".env"),
            str(root / "node_modules" / "pkg" / ".env"),
            str(root / ".venv" / "lib" / ".env"),
        ]
    )


def test_a_secret_behind_a_large_sibling_directory_is_found(
    root: Path, protected: ProtectedPaths
) -> None:
    """Thousands of entries before it do not hide `zz/.env`."""
    big = root / "aa"
    big.mkdir()
    for index in range(3000):
        (big / f"f{index}").write_text("")
    (root / "zz").mkdir()
    (root / "zz" / ".env").write_text("S=1")
    assert scan_tree(str(root), protected).masked == [str(root / "zz" / ".env")]


def test_every_name_of_a_protected_file_is_masked(root: Path, protected: ProtectedPaths) -> None:
    """A hard link to `.env` under an innocent name is masked with it."""
    (root / "sub").mkdir()
    (root / "sub" / ".env").write_text("S=1")
    os.link(root / "sub" / ".env", root / "notes.txt")
    (root / ".ssh").mkdir()
    (root / ".ssh" / "id_rsa").write_text("KEY")
    os.link(root / ".ssh" / "id_rsa", root / "readme.md")
    (root / "plain.txt").write_text("x")
    found = scan_tree(str(root), protected)
    assert set(found.masked) == {
        str(root / "sub" / ".env"),
        str(root / "notes.txt"),
        str(root / ".ssh"),
        str(root / "readme.md"),
    }
    assert found.is_protected_inode(os.stat(root / "notes.txt"))
    assert not found.is_protected_inode(os.stat(root / "plain.txt"))


def test_a_symlink_to_a_protected_file_masks_its_target(
    root: Path, tmp_path: Path, protected: ProtectedPaths
) -> None:
    """Also when the target lies outside the tree."""
    (tmp_path / "server.pem").write_text("KEY")
    (root / "cert").symlink_to(tmp_path / "server.pem")
    (root / "dangling").symlink_to(tmp_path / "missing.pem")
    assert scan_tree(str(root), protected).masked == [str(tmp_path / "server.pem")]


def test_files_that_run_code_are_listed_read_only(root: Path, protected: ProtectedPaths) -> None:
    """Git config and hooks, nested repositories and shell startup files, at any depth."""
    for repo in (root, root / "vendor" / "lib"):
        (repo / ".git" / "hooks").mkdir(parents=True)
        (repo / ".git" / "config").write_text("[core]\n")
        (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".bashrc").write_text("")
    (root / "worktree").mkdir()
    (root / "worktree" / ".git").write_text("gitdir: ../.git/worktrees/w\n")
    found = scan_tree(str(root), protected)
    assert set(found.readonly) == {
        str(root / "worktree" / ".git"),
        str(root / ".git" / "hooks"),
        str(root / ".git" / "config"),
        str(root / "vendor" / "lib" / ".git" / "hooks"),
        str(root / "vendor" / "lib" / ".git" / "config"),
        str(root / ".bashrc"),
    }
    assert found.masked == []


def test_a_walk_over_its_budget_is_refused(root: Path, protected: ProtectedPaths) -> None:
    """Past the budget the walk raises instead of returning partial masks."""
    for index in range(50):
        (root / f"d{index}").mkdir()
    with pytest.raises(ScanOverBudget):
        scan_tree(str(root), protected, seconds=0)


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Directories count as settled at once (normally only two seconds after a change)."""
    monkeypatch.setattr(tree_scan, "_RACY_NS", 0)


@pytest.mark.usefixtures("settled")
def test_a_later_walk_lists_only_changed_directories_and_misses_nothing(
    root: Path, protected: ProtectedPaths
) -> None:
    """The scanner remembers unchanged directories; every change since is still found: a new
    secret, a renamed directory holding one, a new hard link, a new symlink to a secret."""
    for index in range(20):
        (root / f"d{index}" / "sub").mkdir(parents=True)
        (root / f"d{index}" / "sub" / "file.txt").write_text("x")
    (root / "d0" / "sub" / ".env").write_text("S=1")
    scanner = TreeScanner(protected)
    first = scanner.scan(str(root))
    assert first.masked == [str(root / "d0" / "sub" / ".env")]
    again = scanner.scan(str(root))
    assert again.listed == 0
    assert again.masked == first.masked
    (root / "d5" / "sub" / ".envrc").write_text("S=2")
    (root / "d0").rename(root / "moved")
    os.link(root / "d5" / "sub" / ".envrc", root / "d9" / "sub" / "innocent.txt")
    (root / "d12" / "sub" / "link").symlink_to(root / "moved" / "sub" / ".env")
    later = scanner.scan(str(root))
    assert set(later.masked) == {
        str(root / "moved" / "sub" / ".env"),
        str(root / "d5" / "sub" / ".envrc"),
        str(root / "d9" / "sub" / "innocent.txt"),
    }
    assert 0 < later.listed < first.listed


def test_a_recently_changed_directory_is_listed_again(
    root: Path, protected: ProtectedPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory changed shortly before it was listed is not trusted from memory: a change in
    the same timestamp tick would leave its ctime as it was. (The window is widened so that a
    slow machine cannot make the test pass by accident.)"""
    monkeypatch.setattr(tree_scan, "_RACY_NS", 3600 * 1_000_000_000)
    (root / "sub").mkdir()
    scanner = TreeScanner(protected)
    scanner.scan(str(root))
    assert scanner.scan(str(root)).listed == 2
