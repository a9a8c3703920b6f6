"""The tool families the composition root registers, built from their configuration."""

from __future__ import annotations

from callgate.server.core.tool import ToolPlugin

from .files import EditFile, ReadFile, WriteFile
from .search import Glob, Grep


def file_tools(rg_path: str | None) -> list[ToolPlugin]:
    """ReadFile, WriteFile, EditFile, Glob and Grep. `rg_path` is the ripgrep executable
    Grep runs, or None for its pure-Python search (same output, slower)."""
    return [ReadFile(), WriteFile(), EditFile(), Glob(), Grep(rg_path)]
