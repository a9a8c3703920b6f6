"""The Grep tool's arguments and its frozen artifact."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ...core.tool import Arguments, Artifact
from .patterns import MAX_PATTERN_CHARS


class GrepArguments(Arguments):
    pattern: str = Field(
        min_length=1,
        max_length=MAX_PATTERN_CHARS,
        description="Regular expression matched against each line (common Rust/Python subset).",
    )
    path: str | None = Field(
        default=None,
        description="Directory or file to search, relative to the workspace root.",
    )
    glob: str | None = Field(
        default=None,
        description="Only files matching this glob: a name glob such as *.py or *.{ts,tsx}, "
        "or a path glob relative to path such as src/**/*.py.",
    )
    ignore_case: bool = Field(default=False, description="Match case-insensitively.")
    context_lines: Annotated[int, Field(ge=0, le=10)] = Field(
        default=0, description="Lines of context shown before and after each match."
    )
    max_matches: Annotated[int, Field(ge=1, le=200)] = Field(
        default=200, description="Stop after this many matching lines."
    )


class GrepArtifact(Artifact):
    path: str | None
    canonical: str
    is_directory: bool
    pattern: str
    glob: str | None
    ignore_case: bool
    context_lines: int
    max_matches: int
