"""The Bash tool: one shell command, run in the sandbox exactly as approved (DESIGN sections 5
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

import functools
import ipaddress
import os
import posixpath
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, ClassVar, Protocol

import anyio
import tree_sitter_bash
from anyio import ClosedResourceError, EndOfStream
from pydantic import Field
from tree_sitter import Language, Node, Parser

from callgate.server.core.commands import (
    WordKind,
    normalize_command,
    parse_command,
    rule_candidates,
)
from callgate.server.core.errors import InvalidArgument, arguments_invalid
from callgate.server.core.models import (
    TREE_PREFIX,
    Requirement,
    RequirementKind,
    RuleCandidate,
    SandboxMode,
    ToolResult,
)
from callgate.server.core.paths import ProtectedPaths, is_within
from callgate.server.core.rules import is_network_target
from callgate.server.core.tool import Arguments, Artifact, OutputSink, Prepared, Tool, ToolContext
from callgate.server.sandbox.runner import (
    CommandRunner,
    CommandSpec,
    CommandStartError,
    RunningCommand,
)

from .files import display
from .search import NOISE_NAMES

MAX_COMMAND_BYTES = 64 << 10
MAX_DECLARATIONS = 32
MAX_PATH_CHARS = 4096
DEFAULT_TIMEOUT_SECONDS = 30.0
MAX_FOREGROUND_TIMEOUT_SECONDS = 600.0
MAX_BACKGROUND_TIMEOUT_SECONDS = 86_400.0
SUMMARY_CHARS = 120
OUTPUT_HEAD_BYTES = 16 << 10
OUTPUT_TAIL_BYTES = 16 << 10
# Large reads keep streaming fast: fewer wake-ups, fewer and larger output messages.
READ_CHUNK_BYTES = 256 << 10
KILL_GRACE_SECONDS = 2.0
LEFTOVER_GRACE_SECONDS = 0.5
DRAIN_AFTER_EXIT_SECONDS = 2.0
# How far below the workspace (and declared trees) protected paths are looked for and masked.
MASK_MAX_DEPTH = 4
MASK_MAX_ENTRIES = 2000
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Set for every command; config passthrough cannot replace them.
FIXED_ENV_NAMES = frozenset(
    {"PATH", "HOME", "TMPDIR", "LANG", "TERM", "PAGER", "GIT_PAGER", "GIT_TERMINAL_PROMPT"}
)

_ESCAPE_WORDS = frozenset({"nohup", "setsid", "disown", "coproc", "bg"})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh"})
_SHELL_COMMAND_FLAG = re.compile(r"-[A-Za-z]*c[A-Za-z]*")
_MAX_COMMAND_STRING_DEPTH = 4
_HOSTNAME = re.compile(r"[a-z0-9_](?:[a-z0-9_.-]{0,251}[a-z0-9_])?")


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
        description="Network targets as `host:port` (IPv6 in brackets: `[::1]:8080`).",
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


class BackgroundStarter(Protocol):
    """Starts a `background: true` Bash call under the session's process supervisor and
    returns at once (DESIGN section 5: `{"status": "running", "process_id": ...}`). It builds
    the command's spec with `command_spec` and starts it on the same runner."""

    def check_capacity(self, ctx: ToolContext) -> None:
        """Raise ResourceExhausted (`PROCESS_LIMIT`) when the loop may start no more processes."""
        ...

    async def start(self, artifact: BashArtifact, ctx: ToolContext) -> ToolResult: ...


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


# Prepare ----------------------------------------------------------------------------------------


def _summary(command: str) -> str:
    flat = display(command.replace("\n", "⏎"))
    if len(flat) > SUMMARY_CHARS:
        flat = flat[: SUMMARY_CHARS - 1] + "…"
    return f"Bash: {flat}"


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
        canonical = os.path.realpath(path)
    else:
        canonical = os.path.realpath(os.path.join(ctx.workspace.root, path))
        if not ctx.workspace.contains(canonical):
            raise arguments_invalid(
                field, "a relative path must stay inside the workspace; give an absolute path"
            )
    inside = ctx.workspace.contains(canonical)
    exists = os.path.exists(canonical)
    if not exists and (must_exist or not inside):
        raise arguments_invalid(
            field, "the path does not exist; declare an existing file or tree:<directory>"
        )
    if exists:
        is_dir = os.path.isdir(canonical)
        if tree and not is_dir:
            raise arguments_invalid(field, "tree: needs a directory; declare the file itself")
        if is_dir and not tree:
            raise arguments_invalid(
                field, "the path is a directory; declare it as tree:<directory>"
            )
    return PathDeclaration(raw=raw, match=TREE_PREFIX + canonical if tree else canonical)


def _network_target(raw: str, field: str) -> str:
    host, separator, port = raw.lower().rpartition(":")
    if not separator or not host:
        raise arguments_invalid(field, "a network target is host:port, e.g. pypi.org:443")
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise arguments_invalid(field, "the port must be a number from 1 to 65535")
    if host.startswith("[") and host.endswith("]"):
        try:
            host = f"[{ipaddress.IPv6Address(host[1:-1]).compressed}]"
        except ValueError:
            raise arguments_invalid(field, "the bracketed host is not an IPv6 address") from None
    elif not _HOSTNAME.fullmatch(host) or ".." in host:
        raise arguments_invalid(
            field, "the host must be a name or an IP address (IPv6 in brackets)"
        )
    target = f"tcp://{host}:{int(port)}"
    if not is_network_target(target):
        raise arguments_invalid(field, "the network target is not valid")
    return target


def _dedupe(items: list[PathDeclaration]) -> tuple[PathDeclaration, ...]:
    return tuple({item.match: item for item in items}.values())


# Supervision escapes (parsed with tree-sitter-bash; see the module docstring).


@functools.cache
def _parser() -> Parser:
    # Built on first use (no work at import time); used from the event loop thread only.
    return Parser(Language(tree_sitter_bash.language()))


def _has_async_operator(command: str) -> bool | None:
    """True when `&` runs something asynchronously anywhere in the parse tree (substitutions
    and subshells included); None when the command does not parse."""
    tree = _parser().parse(command.encode("utf-8"))
    if tree.root_node.has_error:
        return None
    stack: list[Node] = [tree.root_node]
    while stack:
        node = stack.pop()
        if not node.is_named and node.type == "&":
            return True
        stack.extend(node.children)
    return False


def supervision_escape(command: str, *, depth: int = 0) -> str | None:
    """What in `command` would escape a supervisor (a sentence fragment), or None."""
    found = _has_async_operator(command)
    if found is None:
        return "a command that does not parse"
    if found:
        return "`&` (a command left running asynchronously)"
    for segment in parse_command(command).segments:
        for start in segment.starts:
            if start >= len(segment.words) or not segment.kinds[start].is_literal:
                continue
            word = posixpath.basename(segment.words[start])
            if word in _ESCAPE_WORDS:
                return f"`{word}`"
            string = _command_string(segment.words, segment.kinds, start)
            if string is None:
                continue
            if depth >= _MAX_COMMAND_STRING_DEPTH or not string:
                return "a nested command string too deep or not literal"
            nested = supervision_escape(string, depth=depth + 1)
            if nested is not None:
                return nested
    return None


def _command_string(words: tuple[str, ...], kinds: tuple[WordKind, ...], start: int) -> str | None:
    """The command string a shell at `start` is given with `-c` ("" when it is not literal),
    the joined arguments of `eval`, or None when the segment runs no command string."""
    head = posixpath.basename(words[start])
    if head == "eval":
        rest = range(start + 1, len(words))
        if not all(kinds[i].is_literal for i in rest):
            return ""
        return " ".join(words[i] for i in rest)
    if head not in _SHELLS:
        return None
    for index in range(start + 1, len(words)):
        if kinds[index].is_literal and _SHELL_COMMAND_FLAG.fullmatch(words[index]):
            if index + 1 < len(words) and kinds[index + 1].is_literal:
                return words[index + 1]
            return ""
    return None


def _uses_setsid(command: str) -> bool:
    for segment in parse_command(command).segments:
        for start in segment.starts:
            if (
                start < len(segment.words)
                and segment.kinds[start].is_literal
                and posixpath.basename(segment.words[start]) == "setsid"
            ):
                return True
    return False


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


def _recheck_declaration(declaration: PathDeclaration, ctx: ToolContext, kind: str) -> None:
    raw = declaration.raw.removeprefix(TREE_PREFIX)
    joined = raw if raw.startswith("/") else os.path.join(ctx.workspace.root, raw)
    shown = display(declaration.match)
    if os.path.realpath(joined) != declaration.path:
        raise _changed(f"The {kind} declaration {shown}")
    if not ctx.workspace.contains(declaration.path) and not os.path.exists(declaration.path):
        raise CommandRefused(
            ToolResult.error(
                "path_missing",
                f"The declared {kind} path {shown} does not exist any more; nothing was run.",
            )
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


class OutputCapture:
    """Keeps the first `head` and the last `tail` bytes of a stream and counts the rest."""

    def __init__(self, head: int = OUTPUT_HEAD_BYTES, tail: int = OUTPUT_TAIL_BYTES) -> None:
        self._head_max = head
        self._tail_max = tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        view = memoryview(chunk)
        room = self._head_max - len(self.head)
        if room > 0:
            self.head += view[:room]
            view = view[room:]
        if not view:
            return
        if len(view) >= self._tail_max:
            self.tail[:] = view[len(view) - self._tail_max :]
        else:
            self.tail += view
            excess = len(self.tail) - self._tail_max
            if excess > 0:
                del self.tail[:excess]

    @property
    def omitted(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if not self.omitted:
            return head + tail
        separator = "" if head.endswith("\n") else "\n"
        return f"{head}{separator}[... {self.omitted} bytes omitted ...]\n{tail}"


def _with_footer(text: str, footer: str) -> str:
    if text and not text.endswith("\n"):
        text += "\n"
    return text + footer


async def _pump(
    running: RunningCommand, capture: OutputCapture, sink: OutputSink | None, done: anyio.Event
) -> None:
    try:
        while True:
            chunk = await running.output.receive(READ_CHUNK_BYTES)
            capture.add(chunk)
            if sink is not None:
                await sink(chunk)
    except (EndOfStream, ClosedResourceError):
        pass
    finally:
        done.set()


async def run_foreground(
    running: RunningCommand,
    time_limit: float,
    sink: OutputSink | None,
    *,
    kill_grace: float = KILL_GRACE_SECONDS,
) -> ToolResult:
    """Collect and stream a started command's output until it exits or `time_limit` passes;
    whatever happens (cancellation included), its process tree is gone on return."""
    capture = OutputCapture()
    drained = anyio.Event()
    exit_code: int | None = None
    finished = False
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_pump, running, capture, sink, drained)
            with anyio.move_on_after(time_limit):
                exit_code = await running.wait()
            with anyio.CancelScope(shield=True):
                if exit_code is None:
                    await running.terminate_tree(kill_grace)
                else:
                    await running.terminate_tree(LEFTOVER_GRACE_SECONDS)
            with anyio.move_on_after(DRAIN_AFTER_EXIT_SECONDS):
                await drained.wait()
            group.cancel_scope.cancel()
        finished = True
    finally:
        with anyio.CancelScope(shield=True):
            if not finished:
                await running.terminate_tree(kill_grace)
            await running.output.aclose()
            if running.stdin is not None:
                await running.stdin.aclose()
    text = capture.text()
    if exit_code is None:
        return ToolResult(
            text=_with_footer(
                text, f"[timed out after {time_limit:g} s; the process tree was terminated]"
            ),
            is_error=True,
            error_code="timed_out",
            omitted_bytes=capture.omitted,
        )
    return ToolResult(
        text=_with_footer(text, f"[exit code: {exit_code}]"),
        exit_code=exit_code,
        omitted_bytes=capture.omitted,
    )


# The tool ---------------------------------------------------------------------------------------


class Bash(Tool[BashArguments, BashArtifact]):
    name: ClassVar[str] = "Bash"
    description: ClassVar[str] = (
        "Run a shell command with `bash -c` in the workspace, sandboxed: the filesystem "
        "outside the workspace is read-only, secrets are hidden, there is no network, and "
        "the environment is clean (PATH, a private HOME and TMPDIR, LANG=C.UTF-8, TERM=dumb). "
        "stdin is empty. Output is stdout and stderr combined; the first and last 16 KiB are "
        "kept and the result ends with `[exit code: N]` (a non-zero exit is a normal "
        "result). `timeout` (1-600 s, default 30) terminates the whole process tree. Declare "
        "anything more in `access` (read or write paths outside the workspace, `host:port` "
        "network targets): each declaration is shown to the approver. `background: true` "
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
        elif self.runner.mode is SandboxMode.NONE and _uses_setsid(command):
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
        requirements = self._requirements(artifact)
        candidates = tuple(
            RuleCandidate(
                RequirementKind.COMMAND_EXECUTE.value,
                pattern,
                "run exactly this command" if pattern == command else f"run commands {pattern}",
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
        )

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

    def _requirements(self, artifact: BashArtifact) -> tuple[Requirement, ...]:
        if self.runner.mode is SandboxMode.BWRAP:
            where = "in the bubblewrap sandbox"
        else:
            where = "UNSANDBOXED (it can read and change anything the server's user can)"
        how = "in the background" if artifact.background else "in the foreground"
        command = Requirement(
            kind=RequirementKind.COMMAND_EXECUTE.value,
            scope="",
            match=artifact.command,
            description=(
                f"run this shell command {how} {where}, working directory "
                f"{artifact.workdir}:\n{artifact.command}"
            ),
        )
        requirements = [command]
        for kind, verb, declarations in (
            (RequirementKind.FILESYSTEM_READ, "read", artifact.read),
            (RequirementKind.FILESYSTEM_WRITE, "write", artifact.write),
        ):
            for declaration in declarations:
                target = (
                    f"files below {declaration.path}" if declaration.is_tree else declaration.path
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
                    description=(
                        f"let the command connect to {target.removeprefix('tcp://')}; note: "
                        "approving any network target gives the command the whole network "
                        "(there is no per-host egress filter)"
                    ),
                )
            )
        return tuple(requirements)

    async def run(self, artifact: BashArtifact, ctx: ToolContext) -> ToolResult:
        if artifact.background:
            if self.background is None:
                return ToolResult.error(
                    "background_unavailable", "Background processes are not enabled here."
                )
            return await self.background.start(artifact, ctx)
        try:
            spec = command_spec(artifact, ctx, self.settings)
        except CommandRefused as refused:
            return refused.result
        try:
            running = await self.runner.start(spec)
        except CommandStartError as exc:
            return ToolResult.error("start_failed", str(exc))
        assert artifact.timeout is not None  # a foreground call always has one
        return await run_foreground(
            running, artifact.timeout, ctx.output, kill_grace=self.settings.kill_grace_seconds
        )
