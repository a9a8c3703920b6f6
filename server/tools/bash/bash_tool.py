"""The Bash tool: one shell command, run in the sandbox exactly as approved (design sections 5
and 6).

Prepare validates and freezes: the command (normalized; that text is both what the gate
matches and what runs), the canonical working directory, the timeout, and the access
declarations, each of which becomes its own requirement (`filesystem.read`,
`filesystem.write`, `network`) so the approver sees every piece of authority asked for.
Nothing is run or created.

Invoke re-resolves the working directory and the declarations (changed: `resolution_changed`,
nothing runs), builds a `CommandSpec` (`command_spec`) and starts it on the server's
`CommandRunner` (bubblewrap, or unconfined with a loud warning). Foreground commands are run
here: combined output streamed to `ToolContext.output` as it comes, kept as its first and
last 16 KiB, the tree terminated at the timeout (SIGTERM, 2 s, SIGKILL) or when the call is
cancelled. `background: true` is handed to a `BackgroundStarter` (the session's process
supervisor), which builds its spec with the same `command_spec`.

Decisions:
- Declarations may point outside the workspace (that is what they are for). A relative path
  is taken from the workspace root and must stay inside it; outside the workspace a path must
  be absolute and must exist (nothing is created outside the workspace). A directory must be
  declared as `tree:<dir>`, and `tree:` needs a directory, so what is bound is what was shown.
- Errors never tell the agent a host fact it did not write. Outside the workspace Prepare
  reads only the text of a declaration (`.`, `..` and slashes folded): the requirement shows
  exactly that path, and existence, kind and symlinks are checked at Invoke, after approval,
  where a path that is not its own real path is refused (an agent that wants what `/tmp/link`
  points to declares the target). `/proc` and `/sys` paths are refused: there `self` is the
  server.
- Supervision escapes (`nohup`, `setsid`, `disown`, `coproc`, `bg`, and any `&` that runs a
  command asynchronously, also inside literal `bash -c` strings) are refused for background
  commands. In the foreground they are allowed under bubblewrap, where the PID namespace ends
  with the command, whatever it started; unconfined, `setsid` (the one that leaves the
  process group) is refused. A program that calls setsid(2) itself is not seen.
- After a foreground command exits, what is left of its tree is terminated too (under
  bubblewrap nothing is left); output is then read until end-of-file for at most 2 s (a pipe
  held by an escaped process must not hold the call).
"""

from __future__ import annotations

import json
import os
from typing import ClassVar, Protocol

import anyio
import anyio.to_thread

from ...commands import (
    command_warnings,
    family_words,
    is_family_pattern,
    normalize_command,
    parse_command,
    rule_candidates,
)
from ...core.effects import DryRunOutcome, DryRunSettings
from ...core.errors import InternalError, arguments_invalid
from ...core.models import (
    TREE_PREFIX,
    Preview,
    Requirement,
    RequirementKind,
    RuleCandidate,
    SandboxMode,
    ToolResult,
)
from ...core.paths import is_magic, lexical_path, real_path
from ...core.preview import bounded
from ...core.tool import Arguments, Artifact, Prepared, Tool, ToolContext
from ...net.addresses import Endpoint
from ...sandbox.runner import CommandRunner, CommandStartError
from ..common import display
from .artifact import AccessArguments, BashArguments, BashArtifact, PathDeclaration
from .command_output import run_foreground
from .command_spec import CommandRefused, CommandSettings, command_spec
from .dry_run import AppliedPlan, apply_recorded, dry_run_refusal, run_dry
from .shell_escapes import supervision_escape, uses_setsid

MAX_COMMAND_BYTES = 64 << 10
# Commands shorter than this parse in well under a millisecond: not worth a thread hand-off.
WARM_MIN_BYTES = 1024
MAX_PATH_CHARS = 4096
DEFAULT_TIMEOUT_SECONDS = 30.0
MAX_FOREGROUND_TIMEOUT_SECONDS = 600.0
SUMMARY_CHARS = 120


class BackgroundStarter(Protocol):
    """Starts a `background: true` Bash call under the session's process supervisor and
    returns at once (design section 5: `{"status": "running", "process_id": ...}`). It builds
    the command's spec with `command_spec` and starts it on the same runner."""

    def check_capacity(self, ctx: ToolContext) -> None:
        """Raise ResourceExhausted (`PROCESS_LIMIT`) when the loop may start no more processes."""
        ...

    async def start(self, artifact: BashArtifact, ctx: ToolContext) -> ToolResult: ...


# Prepare ----------------------------------------------------------------------------------------


def _summary(command: str) -> str:
    flat = display(command.replace("\n", "⏎"))
    if len(flat) > SUMMARY_CHARS:
        flat = flat[: SUMMARY_CHARS - 1] + "…"
    return f"Bash: {flat}"


# Parsing long commands off the event loop: one worker at a time, so that the event loop's
# thread competes with one thread for the GIL, not with many.
_WARMING = anyio.CapacityLimiter(1)


def _warm_parse(arguments_json: str) -> None:
    """Parse the command of raw Bash arguments into the parse cache; errors are Prepare's."""
    try:
        arguments = json.loads(arguments_json)
        command = arguments.get("command") if isinstance(arguments, dict) else None
        if isinstance(command, str) and len(command) <= MAX_COMMAND_BYTES and "\x00" not in command:
            parse_command(normalize_command(command))
    except Exception:  # noqa: S110 - warming is an optimization: Prepare judges the arguments
        pass


def _check_command(command: str) -> str:
    if len(command) > MAX_COMMAND_BYTES or len(command.encode("utf-8")) > MAX_COMMAND_BYTES:
        raise arguments_invalid("command", f"the command is longer than {MAX_COMMAND_BYTES} bytes")
    if "\x00" in command:
        raise arguments_invalid("command", "NUL bytes are not allowed")
    normalized = normalize_command(command)
    if not normalized.strip():
        raise arguments_invalid("command", "the command is empty")
    return normalized


def _declared_path(raw: str, field: str, ctx: ToolContext, *, must_exist: bool) -> PathDeclaration:
    tree = raw.startswith(TREE_PREFIX)
    path = raw.removeprefix(TREE_PREFIX)
    if not path:
        raise arguments_invalid(field, "the path is empty")
    if len(path) > MAX_PATH_CHARS:
        raise arguments_invalid(field, f"the path is longer than {MAX_PATH_CHARS} characters")
    if "\x00" in path:
        raise arguments_invalid(field, "the path holds a NUL byte")
    if path.startswith("/"):
        written = lexical_path(path)
        if is_magic(written):
            raise arguments_invalid(
                field,
                "paths in /proc and /sys cannot be declared; declare the real path of the file "
                "or directory the command needs",
            )
        if not ctx.workspace.contains(written):
            # Outside the workspace nothing is looked up before the call is approved: the
            # answer to Prepare is the same whether the path exists, is a symlink or lies in a
            # place the server hides. Invoke checks that it exists, is of the declared kind
            # and is its own real path.
            return PathDeclaration(raw=raw, match=TREE_PREFIX + written if tree else written)
        joined = path
    else:
        joined = os.path.join(ctx.workspace.root, path)
    canonical = real_path(joined)
    if canonical is None or not ctx.workspace.contains(canonical):
        raise arguments_invalid(
            field,
            "the path leads out of the workspace (through .. or a symbolic link); declare the "
            "real absolute path instead",
        )
    if not os.path.exists(canonical):
        if must_exist:
            raise arguments_invalid(
                field, "the path does not exist; declare an existing file or tree:<directory>"
            )
    else:
        is_dir = os.path.isdir(canonical)
        if tree and not is_dir:
            raise arguments_invalid(field, "tree: needs a directory; declare the file itself")
        if is_dir and not tree:
            raise arguments_invalid(
                field, "the path is a directory; declare it as tree:<directory>"
            )
    return PathDeclaration(raw=raw, match=TREE_PREFIX + canonical if tree else canonical)


def _network_target(raw: str, field: str) -> str:
    """A declared `host:port` (or `*.domain:port`) as its requirement's canonical match."""
    try:
        endpoint = Endpoint.parse(raw, wildcard=True)
    except ValueError as exc:
        raise arguments_invalid(field, str(exc)) from None
    return f"tcp://{endpoint}"


def _network_words(target: str, sandboxed: bool) -> str:
    """How a declared network target reads to an approver."""
    endpoint = target.removeprefix("tcp://")
    if not sandboxed:
        return f"{endpoint} (unsandboxed: the command has the whole network)"
    host, _, port = endpoint.rpartition(":")
    if host.startswith("*."):
        return (
            f"{endpoint} (every host below {host[2:]}, port {port}, through callgate's proxy; "
            "nothing else)"
        )
    return f"{endpoint} (through callgate's proxy; nothing else)"


def _dedupe(items: list[PathDeclaration]) -> tuple[PathDeclaration, ...]:
    return tuple({item.match: item for item in items}.values())


# Supervision escapes (parsed with tree-sitter-bash; see the module docstring).


# The tool ---------------------------------------------------------------------------------------


class Bash(Tool[BashArguments, BashArtifact]):
    name: ClassVar[str] = "Bash"
    description: ClassVar[str] = (
        "Run a shell command with `bash -c` in the workspace, sandboxed: the filesystem "
        "outside the workspace is read-only, secrets are hidden, there is no network unless "
        "declared, and the environment is clean (PATH, a private HOME and TMPDIR, "
        "LANG=C.UTF-8, TERM=dumb). "
        "stdin is empty. Output is stdout and stderr combined; the first and last 16 KiB are "
        "kept and the result ends with `[exit code: N]` (a non-zero exit is a normal "
        "result). `timeout` (1-600 s, default 30) terminates the whole process tree. Declare "
        "anything more in `access` (read or write paths outside the workspace, `host:port` "
        "network targets): each declaration is shown to the approver. Declared hosts are "
        "reached through an HTTP proxy the sandbox gets in HTTP_PROXY, HTTPS_PROXY and "
        "ALL_PROXY (it resolves names; there is no DNS and no other way out); package "
        "managers need their download hosts too (pip: pypi.org:443 and "
        "files.pythonhosted.org:443). `background: true` "
        "runs the command under the process supervisor and returns a process_id."
    )
    arguments: ClassVar[type[Arguments]] = BashArguments
    artifact: ClassVar[type[Artifact]] = BashArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = (
        RequirementKind.COMMAND_EXECUTE.value,
        RequirementKind.FILESYSTEM_READ.value,
        RequirementKind.FILESYSTEM_WRITE.value,
        RequirementKind.NETWORK.value,
    )

    def __init__(
        self,
        runner: CommandRunner,
        settings: CommandSettings | None = None,
        background: BackgroundStarter | None = None,
    ) -> None:
        self.runner = runner
        self.settings = settings or CommandSettings(env_passthrough={})
        self.background = background

    async def warm(self, arguments_json: str) -> None:
        """Parse the command in a worker thread (a 64 KiB command can take tens of ms)."""
        if len(arguments_json) > WARM_MIN_BYTES:
            await anyio.to_thread.run_sync(_warm_parse, arguments_json, limiter=_WARMING)

    def prepare_args(self, args: BashArguments, ctx: ToolContext) -> Prepared:
        command = _check_command(args.command)
        timeout = self._timeout(args)
        if args.background:
            if self.background is None:
                raise arguments_invalid("background", "background processes are not enabled")
            escape = supervision_escape(command)
            if escape is not None:
                raise arguments_invalid(
                    "command",
                    f"a background command may not use {escape}; the supervisor runs it and "
                    "ends it",
                )
            self.background.check_capacity(ctx)
        elif self.runner.mode is SandboxMode.NONE and uses_setsid(command):
            raise arguments_invalid(
                "command", "setsid would escape the process tree; commands run unsandboxed here"
            )
        workdir_arg = args.workdir or ""
        workdir = ctx.workspace.resolve(workdir_arg or ".", "workdir")
        if not os.path.isdir(workdir):
            raise arguments_invalid("workdir", "the working directory is not a directory")
        if ctx.workspace.protected.is_protected(workdir):
            raise arguments_invalid("workdir", "the working directory is a protected path")
        access = args.access or AccessArguments()
        read = _dedupe(
            [
                _declared_path(raw, f"access.read[{i}]", ctx, must_exist=True)
                for i, raw in enumerate(access.read)
            ]
        )
        write = _dedupe(
            [
                _declared_path(raw, f"access.write[{i}]", ctx, must_exist=False)
                for i, raw in enumerate(access.write)
            ]
        )
        network = tuple(
            dict.fromkeys(
                _network_target(raw, f"access.network[{i}]") for i, raw in enumerate(access.network)
            )
        )
        artifact = BashArtifact(
            command=command,
            workdir=workdir,
            workdir_arg=workdir_arg,
            timeout=timeout,
            background=args.background,
            read=read,
            write=write,
            network=network,
        )
        warnings = command_warnings(artifact.command)
        requirements = self._requirements(artifact, warnings)
        candidates = tuple(
            RuleCandidate(
                RequirementKind.COMMAND_EXECUTE.value,
                pattern,
                family_words(pattern) if is_family_pattern(pattern) else "run exactly this command",
            )
            for pattern in rule_candidates(command)
        ) + tuple(RuleCandidate(r.kind, r.match, r.description) for r in requirements[1:])
        return Prepared(
            summary=_summary(command),
            requirements=requirements,
            artifact=artifact,
            candidates=candidates,
            command=command,
            working_directory=workdir,
            preview=self._preview(artifact, warnings, ctx.limits.preview_max_bytes),
        )

    def _preview(
        self, artifact: BashArtifact, warnings: tuple[str, ...], max_bytes: int
    ) -> Preview:
        """The command, where and how it runs, what it declared, and the command rules'
        warnings: the approver's view of a Bash call."""
        sandboxed = self.runner.mode is SandboxMode.BWRAP
        if sandboxed:
            where = "in the bubblewrap sandbox"
        else:
            where = "UNSANDBOXED: it can read and change anything the server's user can"
        if artifact.background:
            how = "in the background (the process supervisor)"
        else:
            how = f"in the foreground, timeout {artifact.timeout:g} s"
        lines = [f"working directory: {artifact.workdir}", f"runs {how}, {where}"]
        declared = [
            *(f"  read  {d.path}{'/**' if d.is_tree else ''}" for d in artifact.read),
            *(f"  write {d.path}{'/**' if d.is_tree else ''}" for d in artifact.write),
            *(f"  network {_network_words(t, sandboxed)}" for t in artifact.network),
        ]
        lines.append("declared access:" if declared else "declared access: none")
        lines += declared
        if warnings:
            lines.append("warning, beyond what its words suggest:")
            lines += [f"- {warning}" for warning in warnings]
        lines.append("command:")
        return bounded("command", lines, artifact.command.split("\n"), max_bytes)

    def _timeout(self, args: BashArguments) -> float | None:
        if args.background:
            return args.timeout
        if args.timeout is None:
            return DEFAULT_TIMEOUT_SECONDS
        if args.timeout > MAX_FOREGROUND_TIMEOUT_SECONDS:
            raise arguments_invalid(
                "timeout",
                f"a foreground command may run at most {MAX_FOREGROUND_TIMEOUT_SECONDS:g} "
                "seconds; use background: true for longer",
            )
        return args.timeout

    def _requirements(
        self, artifact: BashArtifact, warnings: tuple[str, ...]
    ) -> tuple[Requirement, ...]:
        if self.runner.mode is SandboxMode.BWRAP:
            where = "in the bubblewrap sandbox"
        else:
            where = "UNSANDBOXED (it can read and change anything the server's user can)"
        how = "in the background" if artifact.background else "in the foreground"
        description = (
            f"run this shell command {how} {where}, working directory "
            f"{artifact.workdir}:\n{artifact.command}"
        )
        if warnings:
            description += "\nwarning, beyond what its words suggest:" + "".join(
                f"\n- {warning}" for warning in warnings
            )
        command = Requirement(
            kind=RequirementKind.COMMAND_EXECUTE.value,
            scope="",
            match=artifact.command,
            description=description,
        )
        requirements = [command]
        for kind, verb, declarations in (
            (RequirementKind.FILESYSTEM_READ, "read", artifact.read),
            (RequirementKind.FILESYSTEM_WRITE, "write", artifact.write),
        ):
            for declaration in declarations:
                target = (
                    f"files below {display(declaration.path)}"
                    if declaration.is_tree
                    else display(declaration.path)
                )
                requirements.append(
                    Requirement(
                        kind=kind.value,
                        scope=declaration.match,
                        match=declaration.match,
                        description=f"let the command {verb} {target}",
                    )
                )
        for target in artifact.network:
            requirements.append(
                Requirement(
                    kind=RequirementKind.NETWORK.value,
                    scope="",
                    match=target,
                    description="let the command connect to "
                    + _network_words(target, self.runner.mode is SandboxMode.BWRAP),
                )
            )
        return tuple(requirements)

    def dry_run_refusal(self, artifact: Artifact) -> str:
        """Why this call cannot be dry-run ("" when it can): a foreground command without
        network or writes outside the workspace, in the sandbox."""
        if not isinstance(artifact, BashArtifact):
            return "not a command"
        return dry_run_refusal(artifact, self.runner)

    async def dry_run(
        self, artifact: Artifact, ctx: ToolContext, settings: DryRunSettings
    ) -> DryRunOutcome:
        if not isinstance(artifact, BashArtifact):
            raise InternalError()
        return await run_dry(artifact, ctx, self.runner, self.settings, settings)

    async def apply(self, artifact: Artifact, plan: object, ctx: ToolContext) -> ToolResult:
        if not isinstance(plan, AppliedPlan):
            raise InternalError()
        async with ctx.resources.write_lock:
            return await apply_recorded(ctx.workspace, plan)

    async def run(self, artifact: BashArtifact, ctx: ToolContext) -> ToolResult:
        if artifact.background:
            if self.background is None:
                return ToolResult.error(
                    "background_unavailable", "Background processes are not enabled here."
                )
            return await self.background.start(artifact, ctx)
        try:
            spec = await command_spec(artifact, ctx, self.settings)
        except CommandRefused as refused:
            return refused.result
        try:
            running = await self.runner.start(spec)
        except CommandStartError as exc:
            return ToolResult.error(exc.code, str(exc))
        assert artifact.timeout is not None  # a foreground call always has one
        return await run_foreground(
            running, artifact.timeout, ctx.output, kill_grace=self.settings.kill_grace_seconds
        )
