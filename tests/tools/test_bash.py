"""The Bash tool driven directly: argument checks, requirements, the frozen artifact, and real
commands on both runners (bubblewrap and unconfined)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from callgate.server.core.models import RequirementKind, ToolResult
from callgate.server.core.paths import DEFAULT_DENIED_GLOBS, ProtectedPaths, Workspace
from callgate.server.core.resources import SessionResources
from callgate.server.core.tool import LoopState, ToolContext, ToolLimits
from callgate.server.sandbox.bwrap import BwrapRunner
from callgate.server.sandbox.runner import CommandRunner
from callgate.server.sandbox.unconfined import UnconfinedRunner
from callgate.server.tools.bash.artifact import BashArtifact
from callgate.server.tools.bash.bash_tool import Bash
from callgate.server.tools.bash.command_output import OutputCapture
from callgate.server.tools.bash.command_spec import CommandSettings
from callgate.server.tools.bash.shell_escapes import supervision_escape
from tests.support.sandbox import (
    bwrap_only,
    bwrap_path,
    processes_running,
    sleep_marker,
    sleeper,
    sleeper_running,
)
from tests.tools.drive import invalid_field

pytestmark = pytest.mark.anyio

FIXED_NAMES = {
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
}
# Added by bash itself.
SHELL_NAMES = {"PWD", "SHLVL", "_"}
QUICK = CommandSettings(env_passthrough={}, kill_grace_seconds=0.5)


class RecordingStarter:
    """A BackgroundStarter that records what it was given and reports it as started."""

    def __init__(self) -> None:
        self.started: list[BashArtifact] = []
        self.capacity_checks = 0

    def check_capacity(self, ctx: ToolContext) -> None:
        self.capacity_checks += 1

    async def start(self, artifact: BashArtifact, ctx: ToolContext) -> ToolResult:
        self.started.append(artifact)
        return ToolResult(text="", json=json.dumps({"status": "running"}))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return Path(os.path.realpath(root))


@pytest.fixture
def state(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return Path(os.path.realpath(path))


@pytest.fixture
def ctx(workspace: Path, state: Path) -> ToolContext:
    return ToolContext(
        session_id="s",
        loop=LoopState("l"),
        workspace=Workspace(str(workspace), ProtectedPaths(DEFAULT_DENIED_GLOBS, [str(state)])),
        limits=ToolLimits(),
        resources=SessionResources("s", state / "sessions", None),
    )


@pytest.fixture(params=[pytest.param("bwrap", marks=bwrap_only), "none"])
def runner(request: pytest.FixtureRequest) -> CommandRunner:
    if request.param == "bwrap":
        path = bwrap_path()
        assert path is not None
        return BwrapRunner(path)
    return UnconfinedRunner()


@pytest.fixture
def bash(runner: CommandRunner) -> Bash:
    return Bash(runner, QUICK)


@pytest.fixture
def sandboxed() -> Bash:
    path = bwrap_path()
    if path is None:
        pytest.skip("bubblewrap does not work on this machine")
    return Bash(BwrapRunner(path), QUICK)


async def execute(bash: Bash, raw: dict[str, object], ctx: ToolContext) -> ToolResult:
    return await bash.invoke(bash.prepare(raw, ctx).artifact, ctx)


# Prepare -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"command": "true", "bogus": 1}, "arguments.bogus"),
        ({}, "arguments.command"),
        ({"command": 1}, "arguments.command"),
        ({"command": ""}, "arguments.command"),
        ({"command": " \n\t"}, "arguments.command"),
        ({"command": "x" * (64 * 1024 + 1)}, "arguments.command"),
        ({"command": "é" * (32 * 1024 + 1)}, "arguments.command"),
        ({"command": "echo \x00"}, "arguments.command"),
        ({"command": "true", "timeout": 0}, "arguments.timeout"),
        ({"command": "true", "timeout": 0.5}, "arguments.timeout"),
        ({"command": "true", "timeout": 601}, "arguments.timeout"),
        ({"command": "true", "timeout": "30s"}, "arguments.timeout"),
        ({"command": "true", "timeout": True}, "arguments.timeout"),
        ({"command": "true", "background": "yes"}, "arguments.background"),
        ({"command": "true", "background": True}, "arguments.background"),
        ({"command": "true", "workdir": "../"}, "arguments.workdir"),
        ({"command": "true", "workdir": "/etc"}, "arguments.workdir"),
        ({"command": "true", "workdir": "file.txt"}, "arguments.workdir"),
        ({"command": "true", "workdir": "missing"}, "arguments.workdir"),
        ({"command": "true", "workdir": ".ssh"}, "arguments.workdir"),
        ({"command": "true", "access": {"exec": []}}, "arguments.access.exec"),
        ({"command": "true", "access": []}, "arguments.access"),
        ({"command": "true", "access": {"read": ["/etc/hostname"] * 33}}, "arguments.access.read"),
        ({"command": "true", "access": {"read": [1]}}, "arguments.access.read[0]"),
        ({"command": "true", "access": {"read": ["tree:"]}}, "arguments.access.read[0]"),
        ({"command": "true", "access": {"read": ["/proc/self/cwd"]}}, "arguments.access.read[0]"),
        ({"command": "true", "access": {"write": ["tree:/sys"]}}, "arguments.access.write[0]"),
        ({"command": "true", "access": {"read": ["missing"]}}, "arguments.access.read[0]"),
        ({"command": "true", "access": {"read": ["tree:file.txt"]}}, "arguments.access.read[0]"),
        ({"command": "true", "access": {"read": [".ssh"]}}, "arguments.access.read[0]"),
        ({"command": "true", "access": {"write": ["../outside"]}}, "arguments.access.write[0]"),
        (
            {"command": "true", "access": {"network": ["example.com"]}},
            "arguments.access.network[0]",
        ),
        (
            {"command": "true", "access": {"network": ["example.com:0"]}},
            "arguments.access.network[0]",
        ),
        ({"command": "true", "access": {"network": ["a.b:65536"]}}, "arguments.access.network[0]"),
        ({"command": "true", "access": {"network": ["a.b:+80"]}}, "arguments.access.network[0]"),
        ({"command": "true", "access": {"network": ["a.b:*"]}}, "arguments.access.network[0]"),
        ({"command": "true", "access": {"network": ["[zz]:80"]}}, "arguments.access.network[0]"),
        ({"command": "true", "access": {"network": ["a b:80"]}}, "arguments.access.network[0]"),
        ({"command": "true", "access": {"network": [":80"]}}, "arguments.access.network[0]"),
        ({"command": "true", "access": {"network": ["*.org:443"]}}, "arguments.access.network[0]"),
        ({"command": "true", "access": {"network": ["*:443"]}}, "arguments.access.network[0]"),
        ({"command": "true", "access": {"network": ["*.1.2.3:80"]}}, "arguments.access.network[0]"),
        ({"command": "true", "access": {"network": ["::1:80"]}}, "arguments.access.network[0]"),
        ({"command": "true", "access": {"network": ["a..b:80"]}}, "arguments.access.network[0]"),
    ],
)
def test_bad_arguments_are_refused_with_the_field(
    raw: dict[str, object], field: str, ctx: ToolContext, workspace: Path
) -> None:
    """Every malformed argument is ARGUMENTS_INVALID naming its field; nothing runs."""
    (workspace / "file.txt").write_text("x\n")
    (workspace / ".ssh").mkdir()
    assert invalid_field(Bash(UnconfinedRunner()), raw, ctx) == field


def test_requirements_show_the_exact_command_and_every_declaration(
    ctx: ToolContext, workspace: Path, tmp_path: Path
) -> None:
    """One command.execute requirement (exact normalized command, workdir in its description)
    and one requirement per declaration, with the matching rule candidates."""
    (workspace / "sub").mkdir()
    out = tmp_path / "out"
    out.mkdir()
    prepared = Bash(UnconfinedRunner()).prepare(
        {
            "command": "  git log --oneline\n",
            "workdir": "sub",
            "access": {
                "read": ["tree:/usr/share", "/etc/hostname", "/etc/hostname"],
                "write": [f"tree:{out}"],
                "network": ["PyPI.org:443", "[0:0::1]:8080"],
            },
        },
        ctx,
    )
    command = "git log --oneline"
    assert [(r.kind, r.scope, r.match) for r in prepared.requirements] == [
        (RequirementKind.COMMAND_EXECUTE, "", command),
        (RequirementKind.FILESYSTEM_READ, "tree:/usr/share", "tree:/usr/share"),
        (RequirementKind.FILESYSTEM_READ, "/etc/hostname", "/etc/hostname"),
        (RequirementKind.FILESYSTEM_WRITE, f"tree:{out}", f"tree:{out}"),
        (RequirementKind.NETWORK, "", "tcp://pypi.org:443"),
        (RequirementKind.NETWORK, "", "tcp://[::1]:8080"),
    ]
    description = prepared.requirements[0].description
    assert command in description
    assert str(workspace / "sub") in description
    assert "UNSANDBOXED" in description
    assert [c.match for c in prepared.candidates] == [
        command,
        "Bash(git log:*)",
        *(r.match for r in prepared.requirements[1:]),
    ]
    assert prepared.summary == "Bash: git log --oneline"
    artifact = prepared.artifact
    assert isinstance(artifact, BashArtifact)
    assert (artifact.command, artifact.workdir, artifact.timeout) == (
        command,
        str(workspace / "sub"),
        30.0,
    )


def test_network_declarations_are_canonical_and_read_as_the_proxy_holds_them(
    ctx: ToolContext,
) -> None:
    """Hosts are canonical (numeric IPv4 spellings, case, a trailing dot), a wildcard covers the
    hosts below a domain, and the approver reads what the proxy will allow; unsandboxed, that
    the command has the whole network."""
    prepared = Bash(UnconfinedRunner()).prepare(
        {
            "command": "true",
            "access": {
                "network": ["2130706433:80", "Files.PythonHosted.org.:443", "*.Example.org:443"]
            },
        },
        ctx,
    )
    assert [r.match for r in prepared.requirements[1:]] == [
        "tcp://127.0.0.1:80",
        "tcp://files.pythonhosted.org:443",
        "tcp://*.example.org:443",
    ]
    assert "unsandboxed: the command has the whole network" in prepared.requirements[1].description


def test_summary_is_one_short_line(ctx: ToolContext) -> None:
    """Newlines show as ⏎, control characters are escaped, and the summary stops at 120."""
    bash = Bash(UnconfinedRunner())
    assert bash.prepare({"command": "echo a\necho\tb"}, ctx).summary == "Bash: echo a⏎echo\\tb"
    long = bash.prepare({"command": "echo " + "x" * 300}, ctx).summary
    assert len(long) == len("Bash: ") + 120
    assert long.endswith("…")


def test_relative_declarations_resolve_inside_the_workspace(
    ctx: ToolContext, workspace: Path
) -> None:
    """A relative declaration is canonical below the workspace; it need not exist there."""
    (workspace / "data").mkdir()
    prepared = Bash(UnconfinedRunner()).prepare(
        {"command": "true", "access": {"read": ["tree:data"], "write": ["new/file.txt"]}}, ctx
    )
    assert [r.match for r in prepared.requirements[1:]] == [
        f"tree:{workspace / 'data'}",
        str(workspace / "new" / "file.txt"),
    ]


@pytest.mark.parametrize(
    "command",
    [
        "nohup sleep 10",
        "setsid sleep 10",
        "sleep 10 & disown",
        "sleep 10 &",
        "(sleep 10 &)",
        "echo $(sleep 10 &)",
        "for i in 1; do sleep 10 & done",
        "bash -c 'sleep 10 &'",
        'sh -c "nohup x"',
        "env nohup sleep 1",
        "/usr/bin/setsid x",
        "eval 'sleep 1 &'",
        'bash -c "$CMD"',
        "coproc sleep 10",
        "exec nohup sleep 1",
        "'nohup' sleep 1",
        "n\\ohup sleep 1",
        "echo `setsid x`",
        "find . -exec setsid {} \\;",
        "f() { sleep 1 & }; f",
        "if true; then setsid x; fi",
        "echo 'unterminated",
    ],
)
def test_background_commands_that_escape_supervision_are_refused(
    command: str, ctx: ToolContext
) -> None:
    """nohup, setsid, disown, coproc and asynchronous `&` (also in literal command strings)
    are refused for a background command at Prepare."""
    bash = Bash(UnconfinedRunner(), background=RecordingStarter())
    assert invalid_field(bash, {"command": command, "background": True}, ctx) == "arguments.command"


@pytest.mark.parametrize(
    "command",
    ["make test && echo done", "echo '&' \\&", "ls &>/dev/null", "ls 2>&1 | cat", "a |& b"],
)
def test_background_commands_without_escapes_are_accepted(command: str) -> None:
    """`&&`, redirections and quoted ampersands are not asynchronous commands."""
    assert supervision_escape(command) is None


async def test_background_calls_go_to_the_starter_without_a_default_deadline(
    ctx: ToolContext,
) -> None:
    """A background call is prepared with no timeout unless given and handed to the starter."""
    starter = RecordingStarter()
    bash = Bash(UnconfinedRunner(), background=starter)
    prepared = bash.prepare({"command": "make serve", "background": True}, ctx)
    assert starter.capacity_checks == 1
    result = await bash.invoke(prepared.artifact, ctx)
    assert json.loads(result.json) == {"status": "running"}
    assert starter.started == [prepared.artifact]
    assert starter.started[0].timeout is None
    long = bash.prepare({"command": "make", "background": True, "timeout": 3600}, ctx)
    assert isinstance(long.artifact, BashArtifact)
    assert long.artifact.timeout == 3600


def test_unconfined_foreground_refuses_setsid_but_the_sandbox_allows_it(ctx: ToolContext) -> None:
    """Only bubblewrap's PID namespace contains a setsid; unconfined, Prepare refuses it."""
    command: dict[str, object] = {"command": "setsid sleep 1"}
    assert invalid_field(Bash(UnconfinedRunner()), command, ctx) == "arguments.command"
    assert Bash(BwrapRunner("/usr/bin/bwrap")).prepare(command, ctx).summary


# Invoke --------------------------------------------------------------------------------------


async def test_runs_the_prepared_command(bash: Bash, ctx: ToolContext) -> None:
    """The frozen artifact runs; the result is its output and the exit code."""
    result = await execute(bash, {"command": "echo prepared"}, ctx)
    assert result == ToolResult(text="prepared\n[exit code: 0]", exit_code=0)


async def test_nonzero_exit_is_a_normal_result(bash: Bash, ctx: ToolContext) -> None:
    """`exit 3` is a result with exit_code 3 and is_error false."""
    result = await execute(bash, {"command": "echo failing >&2; exit 3"}, ctx)
    assert (result.text, result.exit_code, result.is_error) == (
        "failing\n[exit code: 3]",
        3,
        False,
    )


async def test_environment_is_clean_with_passthrough_only(
    runner: CommandRunner, ctx: ToolContext
) -> None:
    """Only the fixed variables and the configured passthrough ones reach the command."""
    os.environ["CALLGATE_TEST_LEAK"] = "leaked"
    try:
        bash = Bash(runner, CommandSettings(env_passthrough={"PASSED": "yes"}))
        result = await execute(bash, {"command": "env"}, ctx)
    finally:
        del os.environ["CALLGATE_TEST_LEAK"]
    env = dict(line.split("=", 1) for line in result.text.splitlines()[:-1])
    assert set(env) == FIXED_NAMES | SHELL_NAMES | {"PASSED"}
    assert env["PASSED"] == "yes"
    assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert (env["LANG"], env["TERM"], env["PAGER"], env["GIT_PAGER"]) == (
        "C.UTF-8",
        "dumb",
        "cat",
        "cat",
    )
    assert env["GIT_TERMINAL_PROMPT"] == "0"


async def test_home_and_tmpdir_are_private_to_the_session(
    bash: Bash, ctx: ToolContext, state: Path
) -> None:
    """HOME and TMPDIR are the session's private directories and keep files between calls."""
    await execute(bash, {"command": "echo kept > $HOME/note; echo t > $TMPDIR/t"}, ctx)
    result = await execute(bash, {"command": "cat $HOME/note $TMPDIR/t; echo $HOME"}, ctx)
    assert result.text == f"kept\nt\n{state}/sessions/s/home\n[exit code: 0]"


async def test_output_keeps_head_and_tail_with_the_omitted_count(
    bash: Bash, ctx: ToolContext
) -> None:
    """Output beyond 32 KiB keeps its first and last 16 KiB around a notice of what was cut."""
    command = (
        "head -c 16384 /dev/zero | tr '\\0' h; head -c 50000 /dev/zero | tr '\\0' m; "
        "head -c 16384 /dev/zero | tr '\\0' t"
    )
    result = await execute(bash, {"command": command}, ctx)
    assert result.text == (
        "h" * 16384 + "\n[... 50000 bytes omitted ...]\n" + "t" * 16384 + "\n[exit code: 0]"
    )
    assert result.omitted_bytes == 50000


def test_output_capture_omits_nothing_up_to_the_cap() -> None:
    """Exactly 32 KiB comes back whole, in any chunking."""
    capture = OutputCapture()
    data = bytes(range(256)) * 128
    for start in range(0, len(data), 1000):
        capture.add(data[start : start + 1000])
    assert capture.omitted == 0
    assert bytes(capture.head + capture.tail) == data
    capture.add(b"!")
    assert capture.omitted == 1
    assert capture.tail.endswith(b"!")


async def test_output_streams_while_the_command_runs(
    bash: Bash, ctx: ToolContext, workspace: Path
) -> None:
    """The sink receives output while the command still runs: this command finishes only
    after the sink, on seeing its first line, creates the file it waits for."""
    command = "echo first; until [ -e go ]; do sleep 0.01; done; echo second"
    chunks: list[bytes] = []

    async def sink(chunk: bytes) -> None:
        chunks.append(chunk)
        if b"first" in chunk:
            (workspace / "go").touch()

    prepared = bash.prepare({"command": command, "timeout": 60}, ctx)
    result = await bash.invoke(prepared.artifact, replace(ctx, output=sink))
    assert result.text == "first\nsecond\n[exit code: 0]"
    assert b"".join(chunks) == b"first\nsecond\n"


async def test_timeout_terminates_the_tree_and_keeps_the_output(
    bash: Bash, ctx: ToolContext
) -> None:
    """At the timeout the whole tree is gone and the output so far comes back as timed_out."""
    first, second = sleep_marker(), sleep_marker()
    command = f"echo before; sleep {first} & sleep {second}"
    result = await execute(bash, {"command": command, "timeout": 1}, ctx)
    assert result.is_error
    assert result.error_code == "timed_out"
    assert result.text.startswith("before\n[timed out after 1 s")
    assert processes_running("sleep", first) == processes_running("sleep", second) == []


async def test_cancellation_kills_the_tree_and_propagates(bash: Bash, ctx: ToolContext) -> None:
    """Cancelling the invocation ends the process tree before the cancellation goes on."""
    marker = sleep_marker()
    seen: list[bool] = []
    with anyio.CancelScope() as scope:

        async def sink(chunk: bytes) -> None:
            if b"up " in chunk:
                seen.append(bool(sleeper_running(marker)))
                scope.cancel()

        stream_ctx = replace(ctx, output=sink)
        prepared = bash.prepare({"command": f"{sleeper(marker)}; echo after"}, ctx)
        with anyio.fail_after(60):
            await bash.invoke(prepared.artifact, stream_ctx)
    assert scope.cancelled_caught
    assert seen == [True]
    assert sleeper_running(marker) == []


async def test_changed_workdir_fails_closed(bash: Bash, ctx: ToolContext, workspace: Path) -> None:
    """A working directory swapped for a symlink since Prepare is refused; nothing runs."""
    (workspace / "sub").mkdir()
    (workspace / "elsewhere").mkdir()
    prepared = bash.prepare({"command": "touch ran", "workdir": "sub"}, ctx)
    (workspace / "sub").rmdir()
    (workspace / "sub").symlink_to(workspace / "elsewhere")
    result = await bash.invoke(prepared.artifact, ctx)
    assert (result.is_error, result.error_code) == (True, "resolution_changed")
    assert not (workspace / "elsewhere" / "ran").exists()


@pytest.mark.parametrize(
    ("declare", "code"),
    [
        ({"read": ["{tmp}/nonexistent/x"]}, "path_missing"),
        ({"write": ["{tmp}/nonexistent"]}, "path_missing"),
        ({"read": ["{tmp}/dir"]}, "is_a_directory"),
        ({"read": ["tree:{tmp}/file"]}, "not_a_directory"),
        ({"read": ["{tmp}/link"]}, "resolution_changed"),
        ({"write": ["tree:{tmp}/dir/../link"]}, "resolution_changed"),
    ],
)
async def test_declarations_outside_the_workspace_are_checked_at_invoke(
    bash: Bash,
    ctx: ToolContext,
    workspace: Path,
    tmp_path: Path,
    declare: dict[str, list[str]],
    code: str,
) -> None:
    """Outside the workspace Prepare takes a declaration's text as written (its requirement
    shows just that); a missing path, the wrong kind or a symlink on its way is refused at
    Invoke, before anything runs."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x\n")
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    access = {k: [v.replace("{tmp}", str(tmp_path)) for v in vs] for k, vs in declare.items()}
    prepared = bash.prepare({"command": "touch ran", "access": access}, ctx)
    written = next(iter(access.values()))[0]
    tree = "tree:" if written.startswith("tree:") else ""
    assert prepared.requirements[1].match == tree + os.path.normpath(written.removeprefix(tree))
    result = await bash.invoke(prepared.artifact, ctx)
    assert (result.is_error, result.error_code) == (True, code)
    assert not (workspace / "ran").exists()


async def test_vanished_write_declaration_fails_closed(
    bash: Bash, ctx: ToolContext, tmp_path: Path
) -> None:
    """A declared write path outside the workspace that is gone at Invoke is not created."""
    target = tmp_path / "target"
    target.mkdir()
    prepared = bash.prepare({"command": "true", "access": {"write": [f"tree:{target}"]}}, ctx)
    target.rmdir()
    result = await bash.invoke(prepared.artifact, ctx)
    assert result.error_code in ("path_missing", "resolution_changed")
    assert not target.exists()


@pytest.mark.bwrap
async def test_secrets_in_the_workspace_are_masked(
    sandboxed: Bash, ctx: ToolContext, workspace: Path, tmp_path: Path
) -> None:
    """Protected files below the workspace, and protected targets of symlinks in it, read as
    nothing in the sandbox."""
    (workspace / ".env").write_text("TOKEN=top-secret-1\n")
    (workspace / "a" / "b" / ".aws").mkdir(parents=True)
    (workspace / "a" / "b" / ".aws" / "credentials").write_text("top-secret-2\n")
    (tmp_path / "server.pem").write_text("top-secret-3\n")
    (workspace / "cert").symlink_to(tmp_path / "server.pem")
    command = "cat .env a/b/.aws/credentials cert; ls -A a/b/.aws; true"
    result = await execute(sandboxed, {"command": command}, ctx)
    assert "top-secret" not in result.text
    assert result.exit_code == 0


async def test_write_declaration_inside_the_workspace_need_not_exist(
    bash: Bash, ctx: ToolContext, workspace: Path
) -> None:
    """A declaration inside the workspace is covered by the workspace itself: it may name a
    file the command creates."""
    command = "mkdir -p new && echo made > new/file.txt"
    result = await execute(bash, {"command": command, "access": {"write": ["new/file.txt"]}}, ctx)
    assert result.exit_code == 0
    assert (workspace / "new" / "file.txt").read_text() == "made\n"


@pytest.mark.bwrap
async def test_declared_write_outside_the_workspace_is_writable_and_nothing_else(
    sandboxed: Bash, ctx: ToolContext, tmp_path: Path
) -> None:
    """An approved write tree outside the workspace takes writes; its sibling does not."""
    base = Path(tempfile.mkdtemp(prefix="callgate-test-", dir="/var/tmp"))
    try:
        (base / "out").mkdir()
        (base / "other").mkdir()
        command = f"echo a > {base}/out/a.txt; echo b > {base}/other/b.txt; true"
        result = await execute(
            sandboxed, {"command": command, "access": {"write": [f"tree:{base}/out"]}}, ctx
        )
        assert result.exit_code == 0
        assert (base / "out" / "a.txt").read_text() == "a\n"
        assert not (base / "other" / "b.txt").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.bwrap
async def test_users_home_is_hidden_unless_it_holds_the_workspace(
    sandboxed: Bash, state: Path
) -> None:
    """A hidden home that holds the workspace hides all but the workspace; a hidden home that
    is the workspace hides none of it."""
    base = Path(os.path.realpath(tempfile.mkdtemp(prefix="callgate-test-", dir="/var/tmp")))
    try:
        home, workspace = base / "home", base / "home" / "ws"
        workspace.mkdir(parents=True)
        (home / "sibling.txt").write_text("sibling\n")
        (workspace / "mine.txt").write_text("mine\n")
        ctx = ToolContext(
            session_id="s",
            loop=LoopState("l"),
            workspace=Workspace(str(workspace), ProtectedPaths(DEFAULT_DENIED_GLOBS, [str(state)])),
            limits=ToolLimits(),
            resources=SessionResources("s", state / "sessions", None),
        )
        command = f"cat mine.txt {home}/sibling.txt 2>/dev/null; true"
        seen = {}
        for hidden in ((), (str(home),), (str(workspace),)):
            bash = Bash(sandboxed.runner, CommandSettings({}, hidden_dirs=hidden))
            seen[hidden] = (await execute(bash, {"command": command}, ctx)).text
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert seen[()] == "mine\nsibling\n[exit code: 0]"
    assert seen[(str(home),)] == "mine\n[exit code: 0]"
    assert seen[(str(workspace),)] == "mine\nsibling\n[exit code: 0]"
