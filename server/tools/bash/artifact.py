"""The Bash tool's arguments and its frozen artifact (design section 5)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ...core.models import TREE_PREFIX
from ...core.tool import Arguments, Artifact

MAX_DECLARATIONS = 32
MAX_BACKGROUND_TIMEOUT_SECONDS = 86_400.0

# Arguments and artifact ------------------------------------------------------------------------


class AccessArguments(Arguments):
    read: Annotated[list[str], Field(max_length=MAX_DECLARATIONS)] = Field(
        default_factory=list,
        description=(
            "Paths the command reads beyond the workspace: absolute files, or `tree:/dir` for "
            "a directory and everything below it."
        ),
    )
    write: Annotated[list[str], Field(max_length=MAX_DECLARATIONS)] = Field(
        default_factory=list,
        description=(
            "Existing paths the command writes beyond the workspace: absolute files, or "
            "`tree:/dir` for a directory and everything below it."
        ),
    )
    network: Annotated[list[str], Field(max_length=MAX_DECLARATIONS)] = Field(
        default_factory=list,
        description=(
            "Network targets as `host:port` (IPv6 in brackets: `[::1]:8080`; `*.example.org:443` "
            "for every host below a domain), reached through the sandbox's HTTP proxy."
        ),
    )


class BashArguments(Arguments):
    command: str = Field(description="The shell command, run with `bash -c`.")
    workdir: str | None = Field(
        default=None, description="Working directory inside the workspace (default: its root)."
    )
    timeout: Annotated[float, Field(ge=1, le=MAX_BACKGROUND_TIMEOUT_SECONDS)] | None = Field(
        default=None,
        description=(
            "Seconds before the process tree is terminated: 1 to 600 in the foreground "
            "(default 30); in the background optional, no deadline when absent."
        ),
    )
    background: bool = Field(
        default=False,
        description=(
            "Run under the session's process supervisor and return at once with a process_id "
            "(read its output with ProcessOutput)."
        ),
    )
    access: AccessArguments | None = Field(
        default=None, description="Authority the command needs beyond the workspace."
    )


class PathDeclaration(Artifact):
    """One read or write declaration: what the agent wrote (re-resolved at Invoke) and its
    canonical form (`/path` or `tree:/dir`, the requirement's match)."""

    raw: str
    match: str

    @property
    def path(self) -> str:
        return self.match.removeprefix(TREE_PREFIX)

    @property
    def is_tree(self) -> bool:
        return self.match.startswith(TREE_PREFIX)


class BashArtifact(Artifact):
    """A frozen Bash call. `command` is the normalized command: the requirement's match and
    exactly the text that runs."""

    command: str
    workdir: str
    # The workdir argument as given ("" for the workspace root), re-resolved at Invoke.
    workdir_arg: str
    # Seconds; None only for a background command without a deadline.
    timeout: float | None
    background: bool
    read: tuple[PathDeclaration, ...] = ()
    write: tuple[PathDeclaration, ...] = ()
    # `tcp://host:port` targets; any of them opens the network for the command.
    network: tuple[str, ...] = ()
