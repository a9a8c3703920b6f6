"""The services the composition root hands to tool definitions: one value type for each
`core.definitions.Service` flag that a type of this layer provides (the approval board and the
process services are the core's and `processes`'s own types)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..sandbox.runner import CommandRunner
from ..sandbox.seccomp import SeccompProgram
from .bash.bash_tool import BackgroundStarter
from .bash.command_spec import CommandSettings


@dataclass(frozen=True, slots=True)
class CommandServices:
    """`Service.COMMANDS`: the runner chosen at start (bubblewrap or unconfined), what the
    server adds to every command, and the starter of background commands (None: refused)."""

    runner: CommandRunner
    settings: CommandSettings
    background: BackgroundStarter | None = None


@dataclass(frozen=True, slots=True)
class HelperSandbox:
    """`Service.HELPERS`: ripgrep, and the bubblewrap and seccomp filter that confine it;
    without both executables Grep searches in Python."""

    rg_path: str | None
    bwrap_path: str | None = None
    seccomp: SeccompProgram | None = None


@dataclass(frozen=True, slots=True)
class SkillSource:
    """`Service.SKILLS`: the configured skills directory, after each workspace's `.skills`."""

    directory: str | None


class Settings(Mapping[str, object]):
    """`Service.SETTINGS`: a definition's own table of the configuration,
    `[tools.settings.<definition name>]`, read-only (empty when the file has none)."""

    def __init__(self, values: Mapping[str, object] | None = None) -> None:
        self._values = dict(values or {})

    def __getitem__(self, key: str) -> object:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)
