"""The `callgate` command as a user runs it: serve in one process, tools and call from another."""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from callgate.client import default_state_dir
from tests.support.serving import wait_until_serving

CALLGATE = str(Path(sys.executable).with_name("callgate"))


def _cli(*args: str, cwd: Path, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    return subprocess.run(
        [CALLGATE, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def _line(stream: IO[str], timeout: float = 60) -> str:
    """The next line, waiting at most `timeout` seconds for it to start arriving."""
    ready, _, _ = select.select([stream], [], [], timeout)
    assert ready, f"no output within {timeout} s"
    return stream.readline()


@pytest.fixture
def server_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`callgate serve` on its embedded defaults (except TCP), in a fresh directory, with HOME
    pointed at another fresh directory: the state lands in its ~/.local/state/callgate."""
    work = Path(tempfile.mkdtemp(prefix="cgcli", dir="/tmp"))  # short: the socket path lives here
    home = Path(tempfile.mkdtemp(prefix="cghome", dir="/tmp"))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    (work / "hello.txt").write_text("hello from the workspace\n")
    (work / ".env").write_text("SECRET=1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    process = subprocess.Popen(
        [
            CALLGATE,
            "serve",
            "--listen",
            f"unix://{default_state_dir() / 'callgate.sock'}",
            "--sandbox",
            "none",
        ],
        cwd=work,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_serving(process)
        yield work
    finally:
        process.terminate()
        assert process.wait(timeout=20) == 0
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def test_call_reads_a_file_with_the_generated_agent_token(server_dir: Path) -> None:
    """`callgate call` finds the socket and token in ~/.local/state/callgate with no flags
    and prints the lines."""
    done = _cli("call", "ReadFile", '{"path": "hello.txt"}', cwd=server_dir)
    assert done.returncode == 0, done.stderr
    assert "     1\thello from the workspace" in done.stdout
    assert (default_state_dir() / "tokens/agent").stat().st_mode & 0o777 == 0o600


def test_call_reports_denials_and_bad_arguments(server_dir: Path) -> None:
    """A protected path is denied (exit 3); malformed JSON is ARGUMENTS_INVALID (exit 2)."""
    denied = _cli("call", "ReadFile", '{"path": ".env"}', cwd=server_dir)
    assert denied.returncode == 3
    assert "SECRET" not in denied.stdout + denied.stderr
    bad = _cli("call", "ReadFile", '{"path": ', cwd=server_dir)
    assert bad.returncode == 2
    assert "ARGUMENTS_INVALID" in bad.stderr


def test_tools_lists_the_file_tools(server_dir: Path) -> None:
    """`callgate tools` lists every registered tool."""
    done = _cli("tools", cwd=server_dir)
    assert done.returncode == 0, done.stderr
    names = {line.split(":")[0] for line in done.stdout.splitlines()}
    assert {"ReadFile", "WriteFile", "EditFile", "Glob", "Grep"} <= names


def test_health_reports_serving(server_dir: Path) -> None:
    """`callgate health` checks grpc.health.v1 over the socket."""
    done = _cli("health", cwd=server_dir)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "SERVING"


def test_a_gated_call_says_it_waits_and_waits_for_the_approver(server_dir: Path) -> None:
    """`callgate call` of a gated write prints one line on stderr (who must decide, and the
    deadline), then waits as long as the server's approval deadline, not a client default:
    the terminal approver approves it, and the call runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    caller = subprocess.Popen(
        [CALLGATE, "call", "WriteFile", '{"path": "new.txt", "content": "written\\n"}'],
        cwd=server_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert caller.stderr is not None
        line = _line(caller.stderr)
        assert line.startswith("callgate: waiting for an approver"), line
        assert "WriteFile" in line
        assert "UTC if nobody decides" in line
        console = subprocess.Popen(
            [CALLGATE, "approvals", "--once"],
            cwd=server_dir,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert console.stdin is not None
        assert console.stdout is not None
        shown = threading.Event()
        stdout = console.stdout

        def read() -> None:
            for text in stdout:
                if text.startswith("  deadline"):  # the call's last line, before the prompt
                    shown.set()

        threading.Thread(target=read, daemon=True).start()
        assert shown.wait(60), "the approver did not show the call"
        console.stdin.write("o\n")
        console.stdin.flush()
        assert console.wait(timeout=60) == 0
        _, err = caller.communicate(timeout=60)
    finally:
        if caller.poll() is None:
            caller.kill()  # our own child
    assert caller.returncode == 0, err
    assert (server_dir / "new.txt").read_text() == "written\n"
    assert err.count("\n") == 0  # the waiting line was the only one


def test_a_named_session_keeps_read_state_across_cli_invocations(server_dir: Path) -> None:
    """`callgate call` opened a fresh session each time, so a file could never be overwritten
    from the CLI (`stale_read`: it was read in another session). With `--session NAME` the
    read carries over; `callgate session list|close` show and end it."""
    rule = _cli(
        "rules",
        "add",
        "--effect",
        "allow",
        "--kind",
        "filesystem.write",
        "--match",
        f"tree:{server_dir.resolve()}",
        "--scope",
        f"workspace:{server_dir.resolve()}",
        cwd=server_dir,
    )
    assert rule.returncode == 0, rule.stderr
    write = ("WriteFile", '{"path": "hello.txt", "content": "overwritten\\n"}')
    # Without a named session: the read is in another session, and the write is refused.
    assert _cli("call", "ReadFile", '{"path": "hello.txt"}', cwd=server_dir).returncode == 0
    refused = _cli("call", *write, cwd=server_dir)
    assert refused.returncode == 1
    assert "stale_read" in refused.stderr
    # With one: read, then overwrite, in two invocations.
    read = _cli("call", "--session", "work", "ReadFile", '{"path": "hello.txt"}', cwd=server_dir)
    assert read.returncode == 0, read.stderr
    written = _cli("call", "--session", "work", *write, cwd=server_dir)
    assert written.returncode == 0, written.stderr
    assert (server_dir / "hello.txt").read_text() == "overwritten\n"
    listed = _cli("session", "list", cwd=server_dir)
    assert listed.returncode == 0, listed.stderr
    (line,) = [row for row in listed.stdout.splitlines() if row.startswith("work\t")]
    session_id = line.split("\t")[1]
    closed = _cli("session", "close", "work", cwd=server_dir)
    assert closed.returncode == 0, closed.stderr
    assert session_id not in _cli("session", "list", cwd=server_dir).stdout
    missing = _cli("session", "close", "work", cwd=server_dir)
    assert missing.returncode == 1
    assert "no open session work" in missing.stderr


def test_bad_config_fails_with_one_line_naming_the_key(tmp_path: Path) -> None:
    """A wrong value in the TOML file stops `serve` at once with one line naming the key."""
    config = tmp_path / "callgate.toml"
    config.write_text('approval_mode = "sometimes"\n[access]\nworkspace_read = "maybe"\n')
    done = _cli("serve", "--config", str(config), cwd=tmp_path, timeout=30)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "approval_mode" in lines[0] or "access.workspace_read" in lines[0]


@pytest.mark.parametrize(
    "listen",
    ["not-an-address", "unix://relative/callgate.sock", "127.0.0.1:99999", "in-use"],
)
def test_a_bad_listen_address_fails_with_one_line_naming_the_key(
    tmp_path: Path, listen: str
) -> None:
    """An address `serve` cannot listen on is checked when it binds, after the config loaded:
    still one line naming the key and exit 2, never a traceback."""
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    with socket.socket() as taken:  # a port of our own that is in use
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        if listen == "in-use":
            listen = f"127.0.0.1:{taken.getsockname()[1]}"
        done = _cli("serve", "--listen", listen, "--state-dir", str(state), cwd=work, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("callgate: config key listen"), done.stderr


def test_the_terminal_approver_reads_stdin_of_any_kind(server_dir: Path) -> None:
    """`callgate approvals < /dev/null` (a device no event loop can poll) ends at the end of
    its input like a pipe or a file does, instead of a traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    with open(os.devnull) as nothing:
        done = subprocess.run(
            [CALLGATE, "approvals"],
            cwd=server_dir,
            stdin=nothing,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "waiting for pending calls" in done.stdout


def test_output_cut_short_by_its_reader_is_not_an_error_trace(server_dir: Path) -> None:
    """`callgate audit | head -1`: the reader leaving early ends the command quietly, with the
    exit status of a process killed by SIGPIPE, as other tools do."""
    for _ in range(3):
        assert _cli("call", "ReadFile", '{"path": "hello.txt"}', cwd=server_dir).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    process = subprocess.Popen(
        [CALLGATE, "audit", "--follow"],
        cwd=server_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    assert _line(process.stdout)  # it is printing; the reader now goes away
    process.stdout.close()
    for _ in range(3):  # more events to print into the closed pipe
        assert _cli("call", "ReadFile", '{"path": "hello.txt"}', cwd=server_dir).returncode == 0
    try:
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()  # our own child
    stderr = process.stderr.read()
    assert "Traceback" not in stderr, stderr
    assert code == 141, stderr


def test_bad_rule_pattern_fails_naming_the_rule(tmp_path: Path) -> None:
    """A rule whose match does not fit its kind names rules.<n>.match."""
    config = tmp_path / "callgate.toml"
    config.write_text(
        '[[rules]]\neffect = "allow"\nkind = "filesystem.write"\nmatch = "relative/path"\n'
    )
    done = _cli("serve", "--config", str(config), cwd=tmp_path, timeout=30)
    assert done.returncode == 2
    assert "rules.0.match" in done.stderr


def test_audit_prints_the_journal_filters_and_follows(server_dir: Path) -> None:
    """`callgate audit` (approver token by default) lists events; --kind/--json filter and
    format them; --follow prints new events as they commit; an agent token is refused."""
    done = _cli("call", "ReadFile", '{"path": "hello.txt"}', cwd=server_dir)
    assert done.returncode == 0, done.stderr
    listed = _cli("audit", cwd=server_dir)
    assert listed.returncode == 0, listed.stderr
    kinds = [line.split(" ")[2] for line in listed.stdout.splitlines()]
    assert kinds[0] == "server.started"
    assert kinds[-5:] == [
        "call.prepared",
        "call.decided",
        "call.invoked",
        "call.finished",
        "session.closed",
    ]
    assert "hello from the workspace" not in listed.stdout

    finished = _cli("audit", "--kind", "call.finished", "--json", cwd=server_dir)
    (event,) = [json.loads(line) for line in finished.stdout.splitlines()]
    assert (event["kind"], event["data"]["state"]) == ("call.finished", "succeeded")
    assert _cli("audit", "--limit", "1", cwd=server_dir).stdout.count("\n") == 1

    refused = _cli(
        "audit", "--token-file", str(default_state_dir() / "tokens/agent"), cwd=server_dir
    )
    assert refused.returncode == 2
    assert "ROLE_REQUIRED" in refused.stderr
    assert _cli("audit", "--since", "yesterday", cwd=server_dir).returncode == 2

    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    follower = subprocess.Popen(
        [CALLGATE, "audit", "--follow", "--kind", "call.finished"],
        cwd=server_dir,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert follower.stdout is not None
        assert " call.finished " in _line(follower.stdout)  # the one from before
        again = _cli("call", "ReadFile", '{"path": "hello.txt"}', cwd=server_dir)
        assert again.returncode == 0, again.stderr
        assert " call.finished " in _line(follower.stdout)  # the new one, followed
    finally:
        follower.terminate()
        follower.wait(timeout=10)


@pytest.mark.parametrize(
    "arguments",
    [
        ("--since", "800000d"),
        ("--since", "99999999999d"),
        ("--until", "not-a-time"),
        ("--limit", "-1"),
        ("--limit", "many"),
    ],
)
def test_audit_refuses_bad_options_with_a_usage_error(
    tmp_path: Path, arguments: tuple[str, str]
) -> None:
    """Bad option values are usage errors (exit 2, one line naming the option), never a
    traceback; nothing is contacted."""
    done = _cli("audit", *arguments, cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"argument {arguments[0]}" in done.stderr
