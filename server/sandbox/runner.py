"""How a command is started: the description of one confined command, and the interface of
the runners that start it (bubblewrap, or unconfined with a loud warning)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from anyio.abc import ByteReceiveStream, ByteSendStream

from ..core.models import SandboxMode
from ..net.egress import EgressCall
from .overlay import DryRunMount

# Set for every command; config passthrough cannot replace them.
FIXED_ENV_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "TERM",
        "PAGER",
        "GIT_PAGER",
        "GIT_TERMINAL_PROMPT",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_COUNT",
        "GIT_CONFIG_KEY_0",
        "GIT_CONFIG_VALUE_0",
        # The egress proxy's variables (netns.py): set only where the call was approved for
        # network, and NO_PROXY never.
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
    }
)


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """Everything needed to start one approved command, and nothing the agent can change.

    Paths are canonical absolute host paths. `write_paths` are the approved write
    declarations (files or directory trees) beyond the workspace; `read_paths` the approved
    read declarations (made visible read-only even where the sandbox hides the host, such as
    the server user's home); `egress` is set only when network requirements of the call were
    approved: the endpoints its proxy lets the command reach (there is no other way out).
    """

    command: str
    workdir: str
    workspace: str
    home: str
    tmp: str
    env: Mapping[str, str]
    write_paths: tuple[str, ...] = ()
    egress: EgressCall | None = None
    # Protected paths inside the workspace to hide in the sandbox (secrets, server state).
    masked_paths: tuple[str, ...] = ()
    # Directories that must never be visible inside the sandbox (the server's state dir).
    hidden_dirs: tuple[str, ...] = ()
    stdin: bool = False
    extra: Mapping[str, str] = field(default_factory=dict)
    read_paths: tuple[str, ...] = ()
    # Files and directories inside writable binds that stay read-only (they make programs run
    # code: `.git/config`, `.git/hooks`, shell startup files, editor and agent config).
    readonly_paths: tuple[str, ...] = ()
    # Directories between a writable tree and a masked path: bound onto themselves so that no
    # command can rename them and carry a protected file to a name the masks do not cover.
    pinned_dirs: tuple[str, ...] = ()
    # The read-only sandbox (a command allowed by read-only families only): the workspace,
    # the declarations and HOME bound read-only, TMPDIR a throwaway tmpfs, never a network.
    read_only: bool = False
    # A dry run (overlay.py): the workspace is the overlay's merged directory (its changes go
    # to the server's upper layer), HOME and TMPDIR throwaway tmpfs, everything else read-only,
    # never a network. Only the bubblewrap runner can make one.
    dry_run: DryRunMount | None = None


class CommandStartError(Exception):
    """The command could not be started (a bind source vanished, the sandbox failed to come
    up). The message is one sentence without host paths; the details are logged. `code` is
    the tool result's error code."""

    code = "start_failed"


class LimitsUnavailable(CommandStartError):
    """The sandbox itself cannot bound commands now (its cgroups are gone and cannot be made
    again): no command runs until it can; health says so."""

    code = "sandbox_unavailable"


class RunningCommand(Protocol):
    """A started command: its combined stdout+stderr, optional stdin, and its process tree."""

    @property
    def output(self) -> ByteReceiveStream: ...

    @property
    def stdin(self) -> ByteSendStream | None: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int:
        """Wait for the command to exit; returns its exit code (128+N for signal N)."""
        ...

    def signal_tree(self, signum: int) -> None:
        """Send a signal to every process of the command's tree (never to anything else)."""
        ...

    async def terminate_tree(self, grace: float) -> None:
        """SIGTERM the tree, wait up to `grace` seconds, then SIGKILL; returns once every
        process of the tree is confirmed gone."""
        ...

    @property
    def limit_hit(self) -> str | None:
        """The per-command limit the command ran into (`pids_limit`, `memory_limit`,
        `cpu_limit`, `file_size_limit`), known once its tree is gone; None otherwise."""
        ...

    @property
    def network_refused(self) -> tuple[tuple[str, str], ...]:
        """The endpoints (`host:port`) the command asked its proxy for and was refused, with
        why: so far while it runs, all of them once it has ended."""
        ...


class CommandRunner(Protocol):
    """Starts confined commands. One per server, chosen by the startup self-test."""

    @property
    def mode(self) -> SandboxMode: ...

    async def start(self, spec: CommandSpec) -> RunningCommand: ...
