"""The bubblewrap runner against real bubblewrap: what a command can see, write and reach,
and that its whole process tree ends when told to."""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from callgate.server.sandbox.bwrap import BwrapRunner
from callgate.server.sandbox.runner import CommandStartError
from tests.sandbox.helpers import Layout, finish, make_layout, read_until, started
from tests.support.sandbox import (
    bwrap_only,
    bwrap_path,
    processes_running,
    sleep_marker,
    sleeper,
    sleeper_running,
)

pytestmark = [pytest.mark.anyio, *bwrap_only]


@pytest.fixture
def runner() -> BwrapRunner:
    path = bwrap_path()
    assert path is not None
    return BwrapRunner(path)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return make_layout(tmp_path)


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside /tmp (which the sandbox replaces anyway): the host as it is."""
    path = Path(tempfile.mkdtemp(prefix="callgate-test-", dir="/var/tmp"))
    try:
        yield Path(os.path.realpath(path))
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def test_argv_is_a_list_that_confines_the_command(
    runner: BwrapRunner, layout: Layout
) -> None:
    """The command line unshares the namespaces, drops capabilities, and ends with bash -c."""
    argv = runner.argv(layout.spec("echo hi"))
    for flag in ("--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[-4:] == ["--", "/bin/bash", "-c", "echo hi"]


async def test_environment_values_never_appear_on_the_command_line(
    runner: BwrapRunner, layout: Layout
) -> None:
    """Environment values reach the command through execve only, never through argv."""
    secret = secrets.token_hex(8)
    spec = layout.spec("echo $PASSED", env={"PATH": "/usr/bin:/bin", "PASSED": secret})
    assert not any(secret in arg for arg in runner.argv(spec))
    code, out = await finish(await runner.start(spec))
    assert (code, out) == (0, f"{secret}\n".encode())


async def test_environment_is_exactly_the_spec(runner: BwrapRunner, layout: Layout) -> None:
    """The command sees the variables of the spec and nothing from the server's environment."""
    os.environ["CALLGATE_TEST_LEAK"] = "leaked"
    try:
        code, out = await finish(await runner.start(layout.spec("env")))
    finally:
        del os.environ["CALLGATE_TEST_LEAK"]
    names = {line.split("=", 1)[0] for line in out.decode().splitlines()}
    assert code == 0
    # bash itself adds PWD, SHLVL and _.
    assert names == {"PATH", "HOME", "TMPDIR", "PWD", "SHLVL", "_"}


async def test_stdout_and_stderr_share_one_ordered_pipe(
    runner: BwrapRunner, layout: Layout
) -> None:
    """Output keeps the order in which stdout and stderr were written."""
    code, out = await finish(await runner.start(layout.spec("echo a; echo b >&2; echo c")))
    assert (code, out) == (0, b"a\nb\nc\n")


async def test_exit_status_follows_the_shell_convention(
    runner: BwrapRunner, layout: Layout
) -> None:
    """A plain exit keeps its status; death by signal N is 128+N."""
    assert (await finish(await runner.start(layout.spec("exit 3"))))[0] == 3
    assert (await finish(await runner.start(layout.spec("kill -9 $$"))))[0] == 137


async def test_workspace_is_writable_and_the_host_is_not(
    runner: BwrapRunner, layout: Layout, outside: Path
) -> None:
    """Writes land in the workspace; the rest of the host is read-only, and /tmp is private."""
    host_tmp = Path(f"/tmp/callgate-escape-{secrets.token_hex(6)}")  # the probe
    command = (
        f"echo ok > made.txt; touch {host_tmp} && echo tmp-ok; "
        f"touch {outside}/outside && echo outside-ok; echo x > /etc/callgate-x && echo etc-ok; "
        "true"
    )
    code, out = await finish(await runner.start(layout.spec(command)))
    assert code == 0
    assert (layout.workspace / "made.txt").read_text() == "ok\n"
    assert b"tmp-ok" in out  # the private tmpfs...
    assert not host_tmp.exists()  # ...which is not the host's /tmp
    assert b"outside-ok" not in out
    assert not (outside / "outside").exists()
    assert b"etc-ok" not in out
    assert not Path("/etc/callgate-x").exists()


async def test_write_declaration_is_writable(
    runner: BwrapRunner, layout: Layout, outside: Path
) -> None:
    """An approved write path outside the workspace is bound writable."""
    spec = layout.spec(f"echo data > {outside}/made.txt", write_paths=(str(outside),))
    code, _ = await finish(await runner.start(spec))
    assert code == 0
    assert (outside / "made.txt").read_text() == "data\n"


async def test_missing_write_declaration_is_refused_before_start(
    runner: BwrapRunner, layout: Layout, outside: Path
) -> None:
    """A bind source that does not exist stops the start; nothing is created on the host."""
    missing = outside / "missing"
    with pytest.raises(CommandStartError):
        await runner.start(layout.spec("true", write_paths=(str(missing),)))
    assert not missing.exists()


async def test_read_declaration_is_visible_read_only_inside_a_hidden_directory(
    runner: BwrapRunner, layout: Layout, outside: Path
) -> None:
    """A hidden directory is empty except for declared read paths, which are read-only."""
    (outside / "visible.txt").write_text("public\n")
    (outside / "private.txt").write_text("private\n")
    spec = layout.spec(
        f"cat {outside}/visible.txt; cat {outside}/private.txt; echo x >> {outside}/visible.txt",
        hidden_dirs=(str(layout.state), str(outside)),
        read_paths=(str(outside / "visible.txt"),),
    )
    code, out = await finish(await runner.start(spec))
    assert code != 0
    assert b"public\n" in out
    assert b"private\n" not in out
    assert (outside / "visible.txt").read_text() == "public\n"


async def test_masked_paths_show_nothing(runner: BwrapRunner, layout: Layout) -> None:
    """A masked file reads as nothing and a masked directory is empty, inside the workspace."""
    (layout.workspace / ".env").write_text("API_KEY=hunter2\n")
    (layout.workspace / ".ssh").mkdir()
    (layout.workspace / ".ssh" / "id_rsa").write_text("PRIVATE KEY\n")
    spec = layout.spec(
        "cat .env; ls -A .ssh; cat .ssh/id_rsa; true",
        masked_paths=(str(layout.workspace / ".env"), str(layout.workspace / ".ssh")),
    )
    code, out = await finish(await runner.start(spec))
    assert code == 0
    assert b"hunter2" not in out
    assert b"PRIVATE KEY" not in out
    assert b"id_rsa\n" not in out


async def test_state_directory_inside_the_workspace_stays_hidden(
    runner: BwrapRunner, tmp_path: Path
) -> None:
    """The state dir is hidden after the workspace bind, and HOME inside it is bound back."""
    layout = make_layout(tmp_path)
    state = layout.workspace / ".callgate"
    home = state / "sessions" / "s1" / "home"
    home.mkdir(parents=True)
    (state / "tokens").mkdir()
    (state / "tokens" / "agent").write_text("agent-token-value\n")
    spec = layout.spec(
        f"cat {state}/tokens/agent; ls -A {state}; echo hi > $HOME/note && cat $HOME/note",
        home=str(home),
        env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
        hidden_dirs=(str(state),),
    )
    code, out = await finish(await runner.start(spec))
    assert code == 0
    assert b"agent-token-value" not in out
    assert out.endswith(b"sessions\nhi\n")
    assert (home / "note").read_text() == "hi\n"


async def test_token_files_outside_tmp_and_the_workspace_are_hidden(
    runner: BwrapRunner, layout: Layout, outside: Path
) -> None:
    """A state directory the read-only / would show is an empty directory in the sandbox."""
    (outside / "tokens").mkdir()
    (outside / "tokens" / "agent").write_text("agent-token-value\n")
    spec = layout.spec(f"cat {outside}/tokens/agent; ls -A {outside}", hidden_dirs=(str(outside),))
    code, out = await finish(await runner.start(spec))
    assert code == 0
    assert out == f"cat: {outside}/tokens/agent: No such file or directory\n".encode()


async def test_host_processes_and_the_servers_environment_are_invisible(
    runner: BwrapRunner, layout: Layout
) -> None:
    """/proc is the sandbox's own: the server's PID is not there, nor its environment."""
    os.environ["CALLGATE_TEST_MARKER"] = marker = secrets.token_hex(8)
    try:
        command = (
            f"ls /proc | grep -c '^[0-9]'; cat /proc/{os.getpid()}/environ; cat /proc/1/environ"
        )
        _code, out = await finish(await runner.start(layout.spec(command)))
    finally:
        del os.environ["CALLGATE_TEST_MARKER"]
    assert marker.encode() not in out
    # bubblewrap's init, bash, ls, grep (and perhaps cat): a handful, not the host's.
    assert int(out.split(b"\n", 1)[0]) <= 6


async def test_command_has_no_capabilities_and_cannot_unmask(
    runner: BwrapRunner, layout: Layout
) -> None:
    """No capabilities, no mounts, no host sysctl writes, no way to lift a mask with a user
    namespace (the mounts are locked)."""
    (layout.workspace / ".env").write_text("API_KEY=hunter2\n")
    mount_point = layout.workspace / "mnt"
    mount_point.mkdir()
    command = (
        "grep CapEff /proc/self/status; "
        f"mount -t tmpfs none {mount_point} && echo mounted; "
        "echo 1 > /proc/sys/vm/drop_caches && echo sysctl-written; "
        "unshare -Urm sh -c 'umount .env; cat .env' 2>/dev/null; true"
    )
    spec = layout.spec(command, masked_paths=(str(layout.workspace / ".env"),))
    code, out = await finish(await runner.start(spec))
    assert code == 0
    assert b"CapEff:\t0000000000000000" in out
    assert b"mounted" not in out
    assert b"sysctl-written" not in out
    assert b"hunter2" not in out


async def test_run_directory_and_server_sockets_are_private(
    runner: BwrapRunner, layout: Layout, outside: Path
) -> None:
    """/run is an empty tmpfs, and a masked Unix socket cannot be connected to (the same
    socket unmasked can: the mask is what stops it)."""
    path = outside / "server.sock"
    connect = f"import socket; socket.socket(socket.AF_UNIX).connect({str(path)!r})"
    command = f"ls -A /run | wc -l; python3 -c {shlex.quote(connect)} 2>/dev/null && echo connected"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen(2)
        _, masked = await finish(
            await runner.start(layout.spec(command, masked_paths=(str(path),)))
        )
        _, unmasked = await finish(await runner.start(layout.spec(command)))
    assert masked == b"0\n"
    assert unmasked == b"0\nconnected\n"


async def test_stdin_is_a_pipe_only_when_asked(runner: BwrapRunner, layout: Layout) -> None:
    """With stdin the command reads what is written; without, it reads an empty /dev/null."""
    running = await runner.start(layout.spec("cat", stdin=True))
    assert running.stdin is not None
    await running.stdin.send(b"hello\n")
    await running.stdin.aclose()
    assert await finish(running) == (0, b"hello\n")
    quiet = await runner.start(layout.spec("cat; echo end"))
    assert quiet.stdin is None
    assert await finish(quiet) == (0, b"end\n")


async def test_terminate_tree_ends_every_process_before_returning(
    runner: BwrapRunner, layout: Layout
) -> None:
    """A background job, a double fork and a setsid all end with the tree; once
    terminate_tree returns no process of it is left (a single look at /proc suffices)."""
    first, second, third = sleep_marker(), sleep_marker(), sleep_marker()
    command = f"{sleeper(first)} & ({sleeper(second)} &); (setsid {sleeper(third)} &); wait"
    async with started(runner, layout.spec(command)) as running:
        seen = bytearray()
        for marker in (first, second, third):
            await read_until(running, f"up {marker}\n".encode(), seen)
            assert sleeper_running(marker)
        await running.terminate_tree(2.0)
        assert running.returncode is not None
        for marker in (first, second, third):
            assert sleeper_running(marker) == []


async def test_terminate_tree_kills_what_ignores_sigterm(
    runner: BwrapRunner, layout: Layout
) -> None:
    """After the grace period SIGKILL ends a tree whose processes ignore SIGTERM."""
    marker = sleep_marker()
    command = f"trap '' TERM; {sleeper(marker)}"
    async with started(runner, layout.spec(command)) as running:
        await read_until(running, f"up {marker}\n".encode(), bytearray())
        await running.terminate_tree(0.2)
        assert running.returncode == 128 + signal.SIGKILL
        assert sleeper_running(marker) == []


async def test_signal_tree_reaches_every_process_inside(
    runner: BwrapRunner, layout: Layout
) -> None:
    """signal_tree delivers the signal to the shell and to its child alike."""
    marker = sleep_marker()
    command = f"trap 'echo interrupted; exit 7' INT; {sleeper(marker)}"
    async with started(runner, layout.spec(command)) as running:
        seen = bytearray()
        await read_until(running, f"up {marker}\n".encode(), seen)
        running.signal_tree(signal.SIGINT)
        code, out = await finish(running, seen)
    assert code == 7
    assert b"KeyboardInterrupt" in out  # the child got it...
    assert out.endswith(b"interrupted\n")  # ...and so did the shell
    assert sleeper_running(marker) == []


async def test_background_jobs_end_with_the_command(runner: BwrapRunner, layout: Layout) -> None:
    """A job the command leaves behind dies with it: the PID namespace ends with its shell."""
    marker = sleep_marker()
    code, out = await finish(await runner.start(layout.spec(f"sleep {marker} & echo started")))
    assert (code, out) == (0, b"started\n")
    assert processes_running("sleep", marker) == []
