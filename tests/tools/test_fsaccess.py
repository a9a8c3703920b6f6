"""fsaccess: opening beneath the workspace without following symlinks, atomic writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from callgate.server.sandbox import fsaccess
from callgate.server.sandbox.fsaccess import PathChanged


def test_open_beneath_reads_a_canonical_file(workspace: Path) -> None:
    """A plain canonical path opens for reading."""
    (workspace / "d").mkdir()
    (workspace / "d/f.txt").write_text("data")
    fd = fsaccess.open_beneath(str(workspace), str(workspace / "d/f.txt"))
    try:
        assert fsaccess.read_up_to(fd, 100) == b"data"
    finally:
        os.close(fd)


def test_open_beneath_refuses_a_final_component_symlink(workspace: Path, outside: Path) -> None:
    """A symlink in the file's own place is PathChanged, never followed."""
    (workspace / "f.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(PathChanged):
        fsaccess.open_beneath(str(workspace), str(workspace / "f.txt"))


def test_open_beneath_refuses_a_symlinked_directory_on_the_way(
    workspace: Path, outside: Path
) -> None:
    """A directory component swapped for a symlink is PathChanged."""
    (workspace / "d").symlink_to(outside)
    with pytest.raises(PathChanged):
        fsaccess.open_beneath(str(workspace), str(workspace / "d/secret.txt"))
    with pytest.raises(PathChanged):
        fsaccess.open_directory(str(workspace), str(workspace / "d"), create=True)


def test_open_directory_creates_missing_directories(workspace: Path) -> None:
    """With create, every missing directory on the way is made."""
    fd = fsaccess.open_directory(str(workspace), str(workspace / "a/b/c"), create=True)
    os.close(fd)
    assert (workspace / "a/b/c").is_dir()


def test_paths_outside_the_root_are_refused(workspace: Path, outside: Path) -> None:
    """Only paths at or below the root can be opened."""
    with pytest.raises(ValueError, match="not inside"):
        fsaccess.open_directory(str(workspace), str(outside))


def test_read_up_to_reports_files_over_the_limit(workspace: Path) -> None:
    """Reading stops one byte past the limit and says the file is larger."""
    (workspace / "f").write_bytes(b"12345")
    fd = os.open(workspace / "f", os.O_RDONLY)
    try:
        assert fsaccess.read_up_to(fd, 4) is None
    finally:
        os.close(fd)


def test_create_file_never_replaces_an_existing_name(workspace: Path, outside: Path) -> None:
    """Creating over a file or a dangling symlink fails; the link's target is not created."""
    (workspace / "taken").write_text("first")
    (workspace / "link").symlink_to(outside / "created-through-link")
    dir_fd = fsaccess.open_directory(str(workspace), str(workspace))
    try:
        for name in ("taken", "link"):
            with pytest.raises(FileExistsError):
                fsaccess.create_file(dir_fd, name, b"second")
    finally:
        os.close(dir_fd)
    assert (workspace / "taken").read_text() == "first"
    assert not (outside / "created-through-link").exists()
    assert sorted(os.listdir(workspace)) == ["link", "taken"]


def test_replace_file_replaces_a_symlink_instead_of_writing_through_it(
    workspace: Path, outside: Path
) -> None:
    """The rename swaps the directory entry; the symlink's target keeps its content."""
    (workspace / "f").symlink_to(outside / "secret.txt")
    like = os.stat(outside / "secret.txt")
    dir_fd = fsaccess.open_directory(str(workspace), str(workspace))
    try:
        fsaccess.replace_file(dir_fd, "f", b"new", like)
    finally:
        os.close(dir_fd)
    assert not (workspace / "f").is_symlink()
    assert (workspace / "f").read_bytes() == b"new"
    assert (outside / "secret.txt").read_text() == "outside data\n"


def test_names_symlink_looks_at_the_last_component_only(workspace: Path) -> None:
    """Directory symlinks on the way are fine; a symlink as the last component is reported."""
    (workspace / "real").mkdir()
    (workspace / "real/f").write_text("x")
    (workspace / "alias").symlink_to("real")
    (workspace / "real/link").symlink_to("f")
    root = str(workspace)
    assert not fsaccess.names_symlink(root, "alias/f")
    assert fsaccess.names_symlink(root, "alias/link")
    assert fsaccess.names_symlink(root, "alias")
    assert fsaccess.names_symlink(root, "alias/")
    assert not fsaccess.names_symlink(root, ".")
    assert not fsaccess.names_symlink(root, "missing/file")
