"""From a frozen Bash call to the description of the command to start (`CommandSpec`): the
call re-checked against the filesystem as it is now, its environment, and what the sandbox
hides and masks."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import anyio.to_thread

from ...core.errors import InvalidArgument
from ...core.models import TREE_PREFIX, ToolResult
from ...core.paths import is_within, real_path
from ...core.tool import ToolContext
from ...net.addresses import Endpoint
from ...net.egress import Allowance, EgressCall
from ...sandbox import fsaccess
from ...sandbox.program_masks import ProgramMasks
from ...sandbox.runner import CommandSpec
from ...sandbox.tree_scan import ScanOverBudget, TreeExposure, TreeScanner
from ..common import display
from ..workspace_scan import session_scanner
from .artifact import BashArtifact, PathDeclaration
from .command_output import KILL_GRACE_SECONDS

# A declaration is named in an error by what the agent wrote, cut to this many characters.
SHOWN_DECLARATION_CHARS = 160
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


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
    # Finds the files of denied programs to mask (remembered between commands).
    program_masks: ProgramMasks = field(default_factory=ProgramMasks, compare=False)


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


def _private_dirs(ctx: ToolContext) -> tuple[str, str]:
    private = ctx.resources.private_dir()
    home, tmp = private / "home", private / "tmp"
    home.mkdir(mode=0o700, exist_ok=True)
    tmp.mkdir(mode=0o700, exist_ok=True)
    return str(home), str(tmp)


def command_env(home: str, tmp: str, settings: CommandSettings) -> dict[str, str]:
    """The whole environment of a command (design section 5): never the server's own."""
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
        # Git's global config would be the session's writable HOME/.gitconfig: a command could
        # plant `core.fsmonitor` or `core.pager` there and an allowed `git status` would run it.
        GIT_CONFIG_GLOBAL="/dev/null",
        # A bare repository is found by walking into its directory: any workspace directory
        # holding HEAD, objects/, refs/ and a `config` the agent wrote (with WriteFile, where a
        # `.git/config` would need a human) would make an allowed `git status` there run that
        # config's `core.fsmonitor`. Command-line scope config (this) is protected config, the
        # only place git reads this key from: repositories are then used only when named
        # (`--git-dir`, GIT_DIR) or found as a `.git` directory.
        GIT_CONFIG_COUNT="1",
        GIT_CONFIG_KEY_0="safe.bareRepository",
        GIT_CONFIG_VALUE_0="explicit",
    )
    return env


def _recheck(artifact: BashArtifact, ctx: ToolContext) -> str:
    """The working directory, and every declaration, still resolve as approved: returns the
    working directory; raises CommandRefused otherwise."""
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
    return workdir


async def command_spec(
    artifact: BashArtifact,
    ctx: ToolContext,
    settings: CommandSettings,
    *,
    stdin: bool = False,
    mask_specials: bool = False,
) -> CommandSpec:
    """Re-check a frozen call against the filesystem as it is now and describe the command to
    start. Raises CommandRefused (with the result to return) when it may not run as approved,
    or when the trees it sees cannot be checked for secrets within the time budget. With
    `mask_specials` (a dry run), the FIFOs, sockets and devices of those trees are masked."""
    workdir = _recheck(artifact, ctx)
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
    trees = [root, *(d.path for d in (*reads, *writes) if d.is_tree)]
    exposure = await scan_for_sandbox(session_scanner(ctx), trees, ctx.limits.scan_seconds)
    # A repository without a hooks directory would let a command create hooks that the user's
    # git then runs: make the empty directory `git init` makes, then bind it read-only.
    if not ctx.read_only:
        exposure.readonly += [h for h in exposure.missing_hooks if _make_hooks_directory(root, h)]
    programs = await denied_program_files(ctx.denied_programs, settings.program_masks)
    # A declared file outside the workspace that is itself protected is refused at Prepare;
    # masks cover what the trees hold.
    return CommandSpec(
        command=artifact.command,
        workdir=workdir,
        workspace=ctx.workspace.root,
        home=home,
        tmp=tmp,
        env=command_env(home, tmp, settings),
        write_paths=tuple(d.path for d in writes),
        read_paths=tuple(d.path for d in reads),
        egress=_egress(artifact, ctx),
        masked_paths=tuple(
            dict.fromkeys(
                [
                    *settings.masked_paths,
                    *exposure.masked,
                    *programs,
                    # A dry run's FIFOs and sockets would reach processes outside it.
                    *(exposure.specials if mask_specials else ()),
                ]
            )
        ),
        readonly_paths=tuple(dict.fromkeys(exposure.readonly)),
        pinned_dirs=pinned_dirs(
            [root, *(d.path for d in writes if d.is_tree)],
            [*exposure.masked, *exposure.readonly],
        ),
        hidden_dirs=tuple(dict.fromkeys(hidden)),
        stdin=stdin,
        read_only=ctx.read_only,
    )


def _egress(artifact: BashArtifact, ctx: ToolContext) -> EgressCall | None:
    """What the command's proxy may reach: its approved network declarations, each with what
    approved it (the journal names it with every connection). None: no network at all."""
    if not artifact.network or ctx.read_only:
        return None
    allowances = tuple(
        Allowance(
            Endpoint.parse(target.removeprefix("tcp://"), wildcard=True),
            ctx.network_origins.get(target, "approved"),
        )
        for target in artifact.network
    )
    return EgressCall(ctx.session_id, ctx.execution_id, allowances, ctx.principal)


async def denied_program_files(names: frozenset[str], masks: ProgramMasks) -> tuple[str, ...]:
    """The files in the sandbox's PATH of the programs deny families name (program_masks.py);
    looked up in a worker thread when the answer is not known yet."""
    if not names:
        return ()
    key = masks.key(names, SAFE_PATH.split(":"))
    found = masks.cached(key)
    if found is None:
        found = await anyio.to_thread.run_sync(masks.find, key)
    return found


def _make_hooks_directory(root: str, hooks: str) -> bool:
    """Create `<repo>/.git/hooks` (mode 0755, owned like its `.git`) without following a
    symlink on the way; True when it exists as a directory now."""
    if not is_within(hooks, root):
        return False
    try:
        git_fd = fsaccess.open_directory(root, os.path.dirname(hooks))
    except (OSError, fsaccess.PathChanged):
        return False
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir("hooks", fsaccess.NEW_DIRECTORY_MODE, dir_fd=git_fd)
        owner = os.fstat(git_fd)
        hooks_fd = fsaccess.open_step(git_fd, "hooks", os.O_RDONLY | os.O_DIRECTORY)
        try:
            with contextlib.suppress(PermissionError):
                os.fchown(hooks_fd, owner.st_uid, owner.st_gid)
        finally:
            os.close(hooks_fd)
    except (OSError, fsaccess.PathChanged):
        return False
    finally:
        os.close(git_fd)
    return True


def pinned_dirs(writable: list[str], protected: list[str]) -> tuple[str, ...]:
    """Every directory strictly between a writable tree and a path it holds that is masked or
    read-only. Renaming such a directory would carry the protected path to a name the next
    sandbox's masks do not cover (mounts follow their directory); bound onto themselves, they
    cannot be renamed (EBUSY) in any sandbox started while the protected path exists."""
    pins: dict[str, None] = {}
    for path in protected:
        for tree in writable:
            if path == tree or not is_within(path, tree):
                continue
            parent = os.path.dirname(path)
            while parent != tree and is_within(parent, tree):
                pins[parent] = None
                parent = os.path.dirname(parent)
    return tuple(sorted(pins))


async def scan_for_sandbox(scanner: TreeScanner, trees: list[str], seconds: float) -> TreeExposure:
    """Walk every tree a sandbox will show (in a worker thread: a large tree takes a while) and
    merge what must be masked or made read-only. Raises CommandRefused past `seconds`."""

    def scan_all() -> TreeExposure:
        deadline = time.monotonic() + seconds
        merged = TreeExposure()
        for tree in dict.fromkeys(trees):
            found = scanner.scan(tree, seconds=max(deadline - time.monotonic(), 0))
            merged.masked += found.masked
            merged.readonly += found.readonly
            merged.missing_hooks += found.missing_hooks
            merged.specials += found.specials
            merged.protected_inodes |= found.protected_inodes
            merged.entries += found.entries
        return merged

    try:
        return await anyio.to_thread.run_sync(scan_all)
    except ScanOverBudget:
        raise CommandRefused(
            ToolResult.error(
                "scan_timed_out",
                f"The workspace could not be checked for secrets within {seconds:g} seconds, so "
                "nothing was run; use a smaller workspace or raise tools.scan_seconds.",
            )
        ) from None
