"""From a frozen Bash call to the description of the command to start (`CommandSpec`): the
call re-checked against the filesystem as it is now, its environment, and what the sandbox
hides and masks."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from ..core.errors import InvalidArgument
from ..core.models import (
    TREE_PREFIX,
    ToolResult,
)
from ..core.paths import ProtectedPaths, is_within, real_path
from ..core.tool import ToolContext
from ..sandbox.runner import (
    CommandSpec,
)
from .bash_artifact import BashArtifact, PathDeclaration
from .command_output import KILL_GRACE_SECONDS
from .files import display
from .search import NOISE_NAMES

# How far below the workspace (and declared trees) protected paths are looked for and masked.
MASK_MAX_DEPTH = 4
MASK_MAX_ENTRIES = 2000
# A declaration is named in an error by what the agent wrote, cut to this many characters.
SHOWN_DECLARATION_CHARS = 160
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Set for every command; config passthrough cannot replace them.
FIXED_ENV_NAMES = frozenset(
    {"PATH", "HOME", "TMPDIR", "LANG", "TERM", "PAGER", "GIT_PAGER", "GIT_TERMINAL_PROMPT"}
)


@dataclass(frozen=True, slots=True)
class CommandSettings:
    """What the server adds to every command: passthrough environment values (read from the
    server's environment at start, by the names the config lists), directories that must
    stay hidden besides the protected roots (the server user's home), and paths to mask
    wherever they are (the server's Unix sockets)."""

    env_passthrough: Mapping[str, str]
    hidden_dirs: tuple[str, ...] = ()
    masked_paths: tuple[str, ...] = ()
    kill_grace_seconds: float = KILL_GRACE_SECONDS


# Invoke -----------------------------------------------------------------------------------------


class CommandRefused(Exception):
    """The frozen call can no longer run as approved; `result` says why (nothing ran)."""

    def __init__(self, result: ToolResult) -> None:
        super().__init__(result.text)
        self.result = result


def _changed(what: str) -> CommandRefused:
    return CommandRefused(
        ToolResult.error(
            "resolution_changed",
            f"{what} no longer resolves to what was approved; nothing was run, prepare the "
            "call again.",
        )
    )


def _declaration_refused(code: str, text: str) -> CommandRefused:
    return CommandRefused(ToolResult.error(code, text))


def _recheck_declaration(declaration: PathDeclaration, ctx: ToolContext, kind: str) -> None:
    """Re-resolve a declaration as the agent wrote it. Messages name only that text (escaped,
    cut): never where it resolves, which may be a place the agent cannot see."""
    raw = declaration.raw.removeprefix(TREE_PREFIX)
    joined = raw if raw.startswith("/") else os.path.join(ctx.workspace.root, raw)
    shown = display(declaration.raw)
    if len(shown) > SHOWN_DECLARATION_CHARS:
        shown = shown[: SHOWN_DECLARATION_CHARS - 1] + "…"
    if real_path(joined) != declaration.path:
        # Outside the workspace the approved path is the text the agent wrote (Prepare looks
        # nothing up there), so a symlink or `..` on its way lands here as well as a change.
        raise _declaration_refused(
            "resolution_changed",
            f"The {kind} declaration {shown} is not the real path that was approved (a "
            "symbolic link or .. on its way, or a change since Prepare); nothing was run, "
            "declare the real path and prepare the call again.",
        )
    if ctx.workspace.contains(declaration.path):
        return
    if not os.path.exists(declaration.path):
        raise _declaration_refused(
            "path_missing",
            f"The declared {kind} path {shown} does not exist; nothing was run.",
        )
    is_dir = os.path.isdir(declaration.path)
    if declaration.is_tree and not is_dir:
        raise _declaration_refused(
            "not_a_directory",
            f"The {kind} declaration {shown} is not a directory; nothing was run, declare "
            "the file itself.",
        )
    if is_dir and not declaration.is_tree:
        raise _declaration_refused(
            "is_a_directory",
            f"The {kind} declaration {shown} is a directory; nothing was run, declare it as "
            "tree:<directory>.",
        )


def protected_below(
    root: str,
    protected: ProtectedPaths,
    *,
    max_depth: int = MASK_MAX_DEPTH,
    max_entries: int = MASK_MAX_ENTRIES,
) -> list[str]:
    """Protected paths below canonical `root`, breadth first, at most `max_depth` levels and
    `max_entries` entries deep (noise directories such as `.git` are not entered). A symlink
    whose target is protected yields its canonical target."""
    found: list[str] = []
    if protected.is_protected(root):
        return [root]
    queue: deque[tuple[str, int]] = deque([(root, 0)])
    seen = 0
    while queue:
        directory, depth = queue.popleft()
        try:
            entries = os.scandir(directory)
        except OSError:
            continue
        with entries:
            for entry in entries:
                seen += 1
                if seen > max_entries:
                    return found
                path = entry.path
                try:
                    if entry.is_symlink():
                        target = os.path.realpath(path)
                        if protected.is_protected(target) and os.path.exists(target):
                            found.append(target)
                        continue
                    if protected.is_protected(path):
                        found.append(path)
                    elif (
                        depth + 1 < max_depth
                        and entry.name not in NOISE_NAMES
                        and entry.is_dir(follow_symlinks=False)
                    ):
                        queue.append((path, depth + 1))
                except OSError:
                    continue
    return found


def _private_dirs(ctx: ToolContext) -> tuple[str, str]:
    private = ctx.resources.private_dir()
    home, tmp = private / "home", private / "tmp"
    home.mkdir(mode=0o700, exist_ok=True)
    tmp.mkdir(mode=0o700, exist_ok=True)
    return str(home), str(tmp)


def command_env(home: str, tmp: str, settings: CommandSettings) -> dict[str, str]:
    """The whole environment of a command (DESIGN section 5): never the server's own."""
    env = dict(settings.env_passthrough)
    env.update(
        PATH=SAFE_PATH,
        HOME=home,
        TMPDIR=tmp,
        LANG="C.UTF-8",
        TERM="dumb",
        PAGER="cat",
        GIT_PAGER="cat",
        GIT_TERMINAL_PROMPT="0",
    )
    return env


def command_spec(
    artifact: BashArtifact, ctx: ToolContext, settings: CommandSettings, *, stdin: bool = False
) -> CommandSpec:
    """Re-check a frozen call against the filesystem as it is now and describe the command to
    start. Raises CommandRefused (with the result to return) when it may not run as approved."""
    workdir: str | None
    try:
        workdir = ctx.workspace.resolve(artifact.workdir_arg or ".", "workdir")
    except InvalidArgument:
        workdir = None
    if workdir is None or workdir != artifact.workdir:
        raise _changed("The working directory")
    if not os.path.isdir(workdir):
        raise CommandRefused(
            ToolResult.error(
                "not_a_directory", "The working directory is not a directory any more."
            )
        )
    for declaration in artifact.read:
        _recheck_declaration(declaration, ctx, "read")
    for declaration in artifact.write:
        _recheck_declaration(declaration, ctx, "write")
    home, tmp = _private_dirs(ctx)
    protected = ctx.workspace.protected
    root = ctx.workspace.root
    # Paths inside the workspace are bound (and walked for secrets) with it; only the ones
    # outside need their own bind and walk.
    writes = tuple(d for d in artifact.write if not is_within(d.path, root))
    reads = tuple(d for d in artifact.read if not is_within(d.path, root))
    # The server user's home is hidden unless the workspace is that home or holds it: what a
    # session's workspace holds is the session's to see (its secrets are masked like any).
    hidden = [*protected.roots, *(d for d in settings.hidden_dirs if not is_within(d, root))]
    masked = [*settings.masked_paths, *protected_below(root, protected)]
    for declaration in (*reads, *writes):
        if declaration.is_tree:
            masked += protected_below(declaration.path, protected)
    return CommandSpec(
        command=artifact.command,
        workdir=workdir,
        workspace=ctx.workspace.root,
        home=home,
        tmp=tmp,
        env=command_env(home, tmp, settings),
        write_paths=tuple(d.path for d in writes),
        read_paths=tuple(d.path for d in reads),
        network=bool(artifact.network),
        masked_paths=tuple(dict.fromkeys(masked)),
        hidden_dirs=tuple(dict.fromkeys(hidden)),
        stdin=stdin,
    )
