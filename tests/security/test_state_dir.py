"""The state directory (tokens, journal, rules, sockets) is out of every tool's reach: never
inside the workspace or an allowed root, 0700 with 0600 files, nothing in it followed or
trusted that is not the server's own."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from callgate.client import default_state_dir as client_default_state_dir
from callgate.server.app import App
from callgate.server.config import ConfigError, default_state_dir, load_config
from callgate.server.credentials import load_authenticator
from callgate.v1 import approval_service_pb2 as apb
from tests.support.approvals import approver
from tests.support.calls import open_session, run
from tests.support.server import serve
from tests.support.serving import wait_until_serving

CALLGATE = str(Path(sys.executable).with_name("callgate"))
OTHER_UID = 65534  # nobody


def _app(workspace: Path, state_dir: Path, **settings: Any) -> App:
    config = load_config(
        None,
        {"workspace": str(workspace), "state_dir": str(state_dir), "sandbox": "none", **settings},
        environ={},
    )
    return App(config)


def _refused(workspace: Path, state_dir: Path, **settings: Any) -> str:
    """The one-line ConfigError that stops App from starting."""
    try:
        app = _app(workspace, state_dir, **settings)
    except ConfigError as exc:
        message = str(exc)
    else:
        app.release()
        pytest.fail("the server started")
    assert "\n" not in message
    return message


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _env(**values: str) -> dict[str, str]:
    drop = ("CALLGATE_", "XDG_STATE_HOME")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(values)
    return env


def _cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CALLGATE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=30, check=False
    )


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short temporary directory: AF_UNIX socket paths stop at 107 bytes."""
    root = Path(tempfile.mkdtemp(prefix="cgsd", dir="/tmp")).resolve()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ----------------------------------------------------------------------------- placement


def test_server_refuses_a_state_directory_inside_the_workspace(tmp_path: Path) -> None:
    """`<workspace>/.callgate` (the old default) stops the server, naming state_dir and a fix."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    message = _refused(workspace, workspace / ".callgate")
    assert message.startswith("config key state_dir:")
    assert "inside the workspace" in message
    assert "--state-dir" in message
    assert not (workspace / ".callgate").exists()


def test_server_refuses_a_unix_socket_inside_the_workspace(tmp_path: Path) -> None:
    """A listen socket in the workspace is refused: a command could swap it (or its directory)
    for a symlink while the server binds and chmods it."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    socket = workspace / "run" / "cg.sock"
    message = _refused(workspace, tmp_path / "state", listen=[f"unix://{socket}"])
    assert message.startswith("config key listen:")
    assert not socket.parent.exists()


def test_server_refuses_a_state_directory_inside_an_allowed_root(tmp_path: Path) -> None:
    """A state directory below any allowed root is refused as well, naming that root's key."""
    workspace, other = tmp_path / "ws", tmp_path / "other"
    workspace.mkdir()
    other.mkdir()
    message = _refused(workspace, other / "deep" / "state", allowed_roots=[str(other)])
    assert message.startswith("config key state_dir:")
    assert "allowed_roots.0" in message


def test_server_refuses_a_workspace_or_allowed_root_inside_the_state_directory(
    tmp_path: Path,
) -> None:
    """The reverse nesting (a root inside the state directory) is refused, naming the root."""
    state = tmp_path / "state"
    (state / "ws").mkdir(parents=True)
    assert _refused(state / "ws", state).startswith("config key workspace:")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    message = _refused(workspace, state, allowed_roots=[str(state / "ws")])
    assert message.startswith("config key allowed_roots.0:")


def test_placement_is_compared_on_canonical_paths_even_before_the_state_dir_exists(
    tmp_path: Path,
) -> None:
    """A state directory named through a symlink into the workspace (not created yet) and a
    workspace named through a symlink are both resolved before comparing."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "alias").symlink_to(workspace)
    message = _refused(workspace, tmp_path / "alias" / "not-yet" / "state")
    assert "inside the workspace" in message
    assert not (workspace / "not-yet").exists()
    (tmp_path / "ws-alias").symlink_to(workspace)
    assert "inside the workspace" in _refused(tmp_path / "ws-alias", workspace / "s")


def test_serve_refuses_when_the_workspace_contains_the_default_state_dir(
    short_tmp: Path,
) -> None:
    """`callgate serve` run in $HOME (which holds ~/.local/state/callgate) exits 2 with one line
    naming state_dir, and writes no token into the workspace."""
    done = _cli("serve", "--sandbox", "none", cwd=short_tmp, env=_env(HOME=str(short_tmp)))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("callgate: config key state_dir:")
    assert "inside the workspace" in line
    assert not (short_tmp / ".local" / "state" / "callgate").exists()


# ------------------------------------------------------------------------- the default


@pytest.mark.parametrize(
    "environ",
    [
        {"XDG_STATE_HOME": "/x/state", "HOME": "/home/a"},
        {"XDG_STATE_HOME": "relative/ignored", "HOME": "/home/a"},
        {"HOME": "/home/a"},
        {},
    ],
)
def test_client_and_server_agree_on_the_default_state_dir(environ: dict[str, str]) -> None:
    """The CLI's default is the server's, outside the current directory: XDG, HOME, passwd."""
    server = default_state_dir(environ)
    assert server == client_default_state_dir(environ)
    assert server.is_absolute()
    assert server.name == "callgate"


def test_default_state_dir_lies_outside_the_workspace_and_the_cli_finds_it(
    short_tmp: Path,
) -> None:
    """`callgate serve` with no --state-dir writes its tokens to $XDG_STATE_HOME/callgate
    (0700, files 0600), nothing into the workspace; `callgate health` and `callgate tools`
    find the socket and the agent token with no flags."""
    workspace, xdg = short_tmp / "ws", short_tmp / "xdg"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    env = _env(XDG_STATE_HOME=str(xdg))
    state = xdg / "callgate"
    process = subprocess.Popen(
        [CALLGATE, "serve", "--listen", f"unix://{state}/callgate.sock", "--sandbox", "none"],
        cwd=workspace,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_serving(process)
        health = _cli("health", cwd=workspace, env=env)
        assert (health.returncode, health.stdout.strip()) == (0, "SERVING"), health.stderr
        tools = _cli("tools", cwd=workspace, env=env)
        assert tools.returncode == 0, tools.stderr
        assert "ReadFile:" in tools.stdout
        assert sorted(p.name for p in workspace.iterdir()) == ["a.txt"]
        assert _mode(state) == 0o700
        assert _mode(state / "tokens") == 0o700
        assert {_mode(state / "tokens" / r) for r in ("agent", "approver", "admin")} == {0o600}
        assert _mode(state / "callgate.sock") == 0o660  # reachable only through the 0700 dir
    finally:
        process.terminate()
        assert process.wait(timeout=20) == 0


# ---------------------------------------------------------------------- modes and owners


def _every_entry(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    for directory, names, files in os.walk(root):
        for name in names + files:
            path = Path(directory) / name
            yield path, path.lstat()


@pytest.mark.anyio
async def test_an_existing_open_state_dir_is_made_private(short_tmp: Path) -> None:
    """A state directory left 0755 with a 0644 journal, a 0755 token directory, 0644 tokens
    and a 0777 sessions directory is 0700 with 0600 files after start, and stays so while the
    server writes its journal (-wal, -shm), a persisted rule, the lock, the socket and a
    session's private directories."""
    state = short_tmp / "state"
    (state / "tokens").mkdir(parents=True)
    (state / "sessions").mkdir()
    state.chmod(0o755)
    (state / "tokens").chmod(0o755)
    (state / "sessions").chmod(0o777)
    (state / "journal.db").write_bytes(b"")
    (state / "journal.db").chmod(0o644)
    (state / "tokens" / "agent").write_text("an-old-agent-token\n")
    (state / "tokens" / "agent").chmod(0o644)
    rules = [{"effect": "allow", "kind": "command.execute", "match": "true"}]
    listen = ["127.0.0.1:0", f"unix://{state}/callgate.sock"]
    async with serve(short_tmp, state_dir=str(state), listen=listen, rules=rules) as harness:
        assert harness.tokens["agent"] == "an-old-agent-token"
        stub = harness.stub(unix=True)
        session = await open_session(stub)
        ran = await run(stub, session, "Bash", {"command": "true"})
        assert not ran.result.is_error, ran.result.text
        await approver(harness).CreateRule(
            apb.CreateRuleRequest(
                effect=apb.RULE_EFFECT_ALLOW,
                kind="filesystem.write",
                match=f"tree:{harness.workspace}/notes",
                scope=f"workspace:{harness.workspace}",
            )
        )
        seen = dict(_every_entry(state))
        assert _mode(state) == 0o700
        names = {p.relative_to(state).as_posix() for p in seen}
        expected = {"lock", "journal.db", "journal.db-wal", "rules.db", "callgate.sock"}
        assert expected <= names
        assert "tokens/agent" in names
        assert any(n.startswith("sessions/") and n.endswith("/home") for n in names)
        for path, info in seen.items():
            relative = path.relative_to(state)
            if relative.parts[0] == "sessions" and len(relative.parts) > 3:
                continue  # what a command wrote in its own HOME or TMPDIR
            if stat.S_ISSOCK(info.st_mode):
                assert stat.S_IMODE(info.st_mode) == 0o660, relative
            elif stat.S_ISDIR(info.st_mode):
                assert stat.S_IMODE(info.st_mode) == 0o700, relative
            else:
                assert stat.S_ISREG(info.st_mode), relative
                assert stat.S_IMODE(info.st_mode) == 0o600, relative
            assert info.st_uid == os.geteuid(), relative


def test_a_state_dir_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    """A state directory (or a file in it) owned by another uid is refused, not adopted."""
    if os.geteuid() != 0:
        pytest.skip("giving a file to another uid needs root")
    workspace, state = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    state.mkdir(mode=0o755)
    os.chown(state, OTHER_UID, OTHER_UID)
    assert "owned by uid 65534" in _refused(workspace, state)
    assert _mode(state) == 0o755
    os.chown(state, 0, 0)
    (state / "journal.db").write_bytes(b"")
    os.chown(state / "journal.db", OTHER_UID, OTHER_UID)
    message = _refused(workspace, state)
    assert message.startswith("config key state_dir:")
    assert "journal.db is owned by uid 65534" in message


@pytest.mark.parametrize("name", ["journal.db", "tokens/agent", "sessions", "lock"])
def test_a_symlink_in_the_state_dir_is_refused_and_never_followed(
    tmp_path: Path, name: str
) -> None:
    """A symlink where a state file or directory belongs stops the server; its target keeps
    its mode and contents (nothing is chmodded, read or written through the link)."""
    workspace, state, outside = tmp_path / "ws", tmp_path / "state", tmp_path / "outside"
    workspace.mkdir()
    (state / "tokens").mkdir(parents=True)
    outside.write_text("not yours\n")
    outside.chmod(0o644)
    (state / name).symlink_to(outside)
    message = _refused(workspace, state)
    assert message.startswith("config key state_dir:")
    assert "symbolic link" in message
    assert _mode(outside) == 0o644
    assert outside.read_text() == "not yours\n"


def test_a_hard_linked_state_file_is_refused(tmp_path: Path) -> None:
    """A state file with a second name elsewhere would keep its contents reachable there."""
    workspace, state = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    state.mkdir()
    (state / "rules.db").write_bytes(b"")
    os.link(state / "rules.db", tmp_path / "copy")
    assert "hard links" in _refused(workspace, state)


def test_token_files_are_opened_without_following_a_symlink(tmp_path: Path) -> None:
    """Below the start-up check too, reading the generated tokens refuses a symlinked token
    file or one owned by another uid, and leaves its target alone."""
    outside = tmp_path / "outside"
    outside.write_text("a-token-elsewhere\n")
    outside.chmod(0o644)
    tokens = tmp_path / "state" / "tokens"
    tokens.mkdir(parents=True, mode=0o700)
    (tokens / "agent").symlink_to(outside)
    config = load_config(None, {"state_dir": str(tmp_path / "state")}, environ={})
    with pytest.raises(ConfigError, match=r"token file .*agent is a symbolic link"):
        load_authenticator(config, tmp_path / "state")
    assert _mode(outside) == 0o644
    if os.geteuid() == 0:
        (tokens / "agent").unlink()
        (tokens / "agent").write_text("someone-elses\n")
        (tokens / "agent").chmod(0o644)
        os.chown(tokens / "agent", OTHER_UID, OTHER_UID)
        with pytest.raises(ConfigError, match=r"token file .*agent is not a regular file"):
            load_authenticator(config, tmp_path / "state")
        assert _mode(tokens / "agent") == 0o644


def test_an_empty_token_file_gets_a_new_token_written_whole(tmp_path: Path) -> None:
    """An empty token file (a crash mid-write) is replaced by a fresh token, mode 0600."""
    tokens = tmp_path / "state" / "tokens"
    tokens.mkdir(parents=True, mode=0o700)
    (tokens / "agent").write_text("")
    config = load_config(None, {"state_dir": str(tmp_path / "state")}, environ={})
    authenticator, _ = load_authenticator(config, tmp_path / "state")
    token = (tokens / "agent").read_text().strip()
    assert len(token) >= 32
    assert authenticator.authenticate(f"Bearer {token}").name == "agent"
    assert _mode(tokens / "agent") == 0o600
    assert sorted(p.name for p in tokens.iterdir()) == ["admin", "agent", "approver"]


def test_a_token_variable_cannot_be_passed_through_to_commands() -> None:
    """A principal's token_env named in bash.env_passthrough would hand every command the
    token: the configuration is refused, naming the key."""
    with pytest.raises(ConfigError, match=r"^config key bash\.env_passthrough: CI_TOKEN"):
        load_config(
            None,
            {
                "principals": [{"name": "ci", "roles": ["agent"], "token_env": "CI_TOKEN"}],
                "bash": {"env_passthrough": ["CI_TOKEN"]},
            },
            environ={},
        )


@pytest.mark.anyio
async def test_what_a_command_left_in_its_session_home_never_blocks_a_restart(
    tmp_path: Path,
) -> None:
    """A symlink or FIFO a command planted in its session HOME before a crash is not judged
    (it is the command's, not the server's): the next start succeeds, removes it without
    following it, and the link's target keeps its mode."""
    state, outside = tmp_path / "state", tmp_path / "outside"
    outside.write_text("not yours\n")
    outside.chmod(0o644)
    home = state / "sessions" / "old-session" / "home"
    home.mkdir(parents=True)
    (home / "link").symlink_to(outside)
    os.mkfifo(home / "fifo")
    async with serve(tmp_path, state_dir=str(state)):
        assert not (state / "sessions" / "old-session").exists()
    assert _mode(outside) == 0o644
    assert outside.read_text() == "not yours\n"
