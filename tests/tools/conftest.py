"""Fixtures for the file tools: a real workspace directory and a context over it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from callgate.server.core.tool import ToolContext
from tests.tools.drive import make_context

RG_PATH = shutil.which("rg")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace directory, by its canonical path; tmp_path itself is "outside"."""
    root = tmp_path / "ws"
    root.mkdir()
    return Path(os.path.realpath(root))


@pytest.fixture
def ctx(workspace: Path) -> ToolContext:
    return make_context(workspace)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace, holding a file no tool may touch."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("outside data\n")
    return Path(os.path.realpath(path))
