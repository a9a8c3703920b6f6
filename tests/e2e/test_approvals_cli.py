"""`callgate approvals` in a real terminal (tmux) deciding an agent's gated call, and the
`callgate rules` round trip, against a real `callgate serve`.

tmux offers no event for "the pane now shows X", so the pane is polled: 50 ms ticks inside a
bounded wait (30 s, only reached on failure: a loaded machine starts the approver slowly), which
is the one place these tests wait by polling.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from callgate.client import CallgateClient, DenialKind, State, ToolCall, default_state_dir
from tests.support.serving import wait_until_serving

CALLGATE = str(Path(sys.executable).with_name("callgate"))
TMUX = shutil.which("tmux")

pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")

PANE_DEADLINE = 30.0
PANE_TICK = 0.05


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("CALLGATE_", "TMUX"))}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CALLGATE, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
        env=_env(),
        check=False,
    )


@pytest.fixture
def server_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`callgate serve` (interactive approvals, no sandbox) in a fresh directory, its state in
    the default place under a fresh HOME (the CLI commands find it with no flags)."""
    work = Path(tempfile.mkdtemp(prefix="cgapp", dir="/tmp")).resolve()
    home = Path(tempfile.mkdtemp(prefix="cghome", dir="/tmp")).resolve()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    process = subprocess.Popen(
        [
            CALLGATE,
            "serve",
            "--listen",
            f"unix://{default_state_dir() / 'callgate.sock'}",
            "--sandbox",
            "none",
            "--approval-mode",
            "interactive",
        ],
        cwd=work,
        env=_env(),
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


class Terminal:
    """One tmux server of its own (its socket in `work`), running one command in a 200x50
    pane."""

    def __init__(self, work: Path) -> None:
        assert TMUX is not None
        self._tmux = TMUX
        self._socket = str(work / f"tmux-{uuid.uuid4().hex[:8]}.sock")
        self._config = work / "tmux.conf"
        # remain-on-exit keeps a crashed approver's last words on the pane for the assertion.
        self._config.write_text("set -g remain-on-exit on\nset -g history-limit 10000\n")
        self._work = work

    async def _tmux_run(self, *args: str) -> str:
        done = await anyio.run_process(
            [self._tmux, "-S", self._socket, "-f", str(self._config), *args],
            env=_env(),
            check=True,
        )
        return done.stdout.decode("utf-8", errors="replace")

    async def start(self, *command: str) -> None:
        await self._tmux_run(
            "new-session", "-d", "-s", "main", "-x", "200", "-y", "50", "-c", str(self._work),
            "--", *command,
        )  # fmt: skip

    async def screen(self) -> str:
        """The whole pane, history included, wrapped lines joined."""
        return await self._tmux_run("capture-pane", "-p", "-J", "-S", "-", "-t", "main")

    async def shows(self, *texts: str, count: int = 1) -> str:
        """Waits (bounded) until every text is on the pane, `count` times each."""
        screen = ""
        with anyio.move_on_after(PANE_DEADLINE):
            while True:
                screen = await self.screen()
                if all(screen.count(text) >= count for text in texts):
                    return screen
                await anyio.sleep(PANE_TICK)
        pytest.fail(f"the pane never showed {texts!r}; it shows:\n{screen}")

    async def type(self, text: str) -> None:
        """Types `text` literally, then Enter."""
        if text:
            await self._tmux_run("send-keys", "-t", "main", "-l", text)
        await self._tmux_run("send-keys", "-t", "main", "Enter")

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.run_process(
                [self._tmux, "-S", self._socket, "kill-server"], check=False, env=_env()
            )


@asynccontextmanager
async def approver_terminal(work: Path) -> AsyncIterator[Terminal]:
    """`callgate approvals` running in a fresh tmux pane; the tmux server is killed on exit."""
    terminal = Terminal(work)
    try:
        await terminal.start(CALLGATE, "approvals", "--state-dir", str(default_state_dir()))
        await terminal.shows("waiting for pending calls")
        yield terminal
    finally:
        await terminal.close()


def _agent(work: Path) -> CallgateClient:
    return CallgateClient(
        f"unix://{default_state_dir() / 'callgate.sock'}",
        token_file=default_state_dir() / "tokens/agent",
    )


@pytest.mark.anyio
async def test_approving_once_in_the_terminal_lets_the_agent_write_the_file(
    server_dir: Path,
) -> None:
    """The pane shows the exact path and full digest; `o` approves; Invoke writes the file."""
    target = server_dir / "approved.txt"
    decided: list[ToolCall] = []
    async with (
        _agent(server_dir) as agent,
        agent.open_session() as session,
        approver_terminal(server_dir) as terminal,
    ):
        call = await session.prepare(
            "WriteFile", {"path": "approved.txt", "content": "approved\n"}, evaluate=True
        )
        assert call.state is State.AWAITING_APPROVAL

        async def wait_for_decision() -> None:
            decided.append(await session.approve(call.execution_id, wait=PANE_DEADLINE))

        with anyio.fail_after(PANE_DEADLINE + 5):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(wait_for_decision)
                screen = await terminal.shows(str(target), call.digest, "[o]nce")
                assert len(call.digest) == 64
                assert "WriteFile" in screen
                assert "filesystem.write" in screen
                assert "what it would do (content, 2 lines):" in screen
                assert "│ new file approved.txt (9 bytes):" in screen
                assert "│ approved" in screen
                await terminal.type("o")
                await terminal.shows(f"is now {State.APPROVED.value}")
        assert decided[0].state is State.APPROVED
        assert decided[0].decision is not None
        assert decided[0].decision.decided_by == "approver"
        invoked = await session.invoke(call.execution_id)
        assert invoked.call.state is State.SUCCEEDED, invoked.result.text
    assert target.read_text() == "approved\n"


@pytest.mark.anyio
async def test_denying_in_the_terminal_gives_the_agent_the_note(server_dir: Path) -> None:
    """`d` and a note deny the call; the agent sees APPROVER_DENIED with the note."""
    decided: list[ToolCall] = []
    async with (
        _agent(server_dir) as agent,
        agent.open_session() as session,
        approver_terminal(server_dir) as terminal,
    ):
        call = await session.prepare(
            "WriteFile", {"path": "denied.txt", "content": "no\n"}, evaluate=True
        )
        assert call.state is State.AWAITING_APPROVAL

        async def wait_for_decision() -> None:
            decided.append(await session.approve(call.execution_id, wait=PANE_DEADLINE))

        with anyio.fail_after(PANE_DEADLINE + 5):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(wait_for_decision)
                await terminal.shows(call.digest, "[o]nce")
                await terminal.type("d")
                await terminal.shows("note for the agent")
                await terminal.type("write to the scratch dir instead")
                await terminal.shows(f"is now {State.DENIED.value}")
    assert decided[0].state is State.DENIED
    assert decided[0].denial is not None
    assert decided[0].denial.kind is DenialKind.APPROVER_DENIED
    assert "write to the scratch dir instead" in decided[0].denial.description
    assert not (server_dir / "denied.txt").exists()


@pytest.mark.anyio
async def test_a_command_with_terminal_escapes_is_shown_escaped_in_the_pane(
    server_dir: Path,
) -> None:
    """A Bash command hiding `rm` behind erase-line and CR reads in full, escaped."""
    command = "echo harmless\x1b[2K\rrm -rf important"
    async with (
        _agent(server_dir) as agent,
        agent.open_session() as session,
        approver_terminal(server_dir) as terminal,
    ):
        call = await session.prepare("Bash", {"command": command}, evaluate=True)
        if call.state is not State.AWAITING_APPROVAL:
            pytest.skip(f"the server does not gate this command ({call.state})")
        screen = await terminal.shows(call.digest, "[o]nce")
        assert "echo harmless\\x1b[2K\\rrm -rf important" in screen
        assert "WARNING" in screen
        await terminal.type("d")
        await terminal.shows("note for the agent")
        await terminal.type("")
        await terminal.shows(f"is now {State.DENIED.value}")


@pytest.mark.anyio
async def test_a_bidi_override_in_a_command_reads_inert_in_the_pane(server_dir: Path) -> None:
    """`cat notes.txt <U+202E>; bash evil.sh #` is shown with the override escaped, not
    reordering the line, and the warning counts the agent's characters only."""
    command = "cat notes.txt \u202e; bash evil.sh #"
    async with (
        _agent(server_dir) as agent,
        agent.open_session() as session,
        approver_terminal(server_dir) as terminal,
    ):
        call = await session.prepare("Bash", {"command": command}, evaluate=True)
        if call.state is not State.AWAITING_APPROVAL:
            pytest.skip(f"the server does not gate this command ({call.state})")
        screen = await terminal.shows(call.digest, "[o]nce")
        assert "cat notes.txt \\u202e; bash evil.sh #" in screen
        assert "\u202e" not in screen
        assert "WARNING" in screen
        await terminal.type("d")
        await terminal.shows("note for the agent")
        await terminal.type("")
        await terminal.shows(f"is now {State.DENIED.value}")


def test_rules_add_list_and_rm_round_trip(server_dir: Path) -> None:
    """A workspace rule added by `rules add` is listed, removed by `rules rm`, then gone."""
    added = _cli(
        "rules", "add", "--effect", "allow", "--kind", "command.execute",
        "--match", "Bash(git log:*)", "--scope", f"workspace:{server_dir}",
        cwd=server_dir,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    rule_id = added.stdout.strip()
    assert rule_id

    listed = _cli("rules", "list", cwd=server_dir)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["id", "effect", "kind", "match", "scope", "origin"]
    row = next(line for line in rows if line.startswith(rule_id))
    assert "allow" in row
    assert "Bash(git log:*)" in row
    assert f"workspace:{server_dir}" in row

    removed = _cli("rules", "rm", rule_id, cwd=server_dir)
    assert removed.returncode == 0, removed.stderr
    listed = _cli("rules", "list", cwd=server_dir)
    assert rule_id not in listed.stdout

    again = _cli("rules", "rm", rule_id, cwd=server_dir)
    assert again.returncode == 2
    assert "RULE_NOT_FOUND" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1


def test_rules_with_the_agent_token_fail_with_the_reason(server_dir: Path) -> None:
    """The agent's token cannot manage rules: one line naming ROLE_REQUIRED, exit 2."""
    done = _cli(
        "rules", "list", "--token-file", str(default_state_dir() / "tokens/agent"),
        cwd=server_dir,
    )  # fmt: skip
    assert done.returncode == 2
    assert "ROLE_REQUIRED" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
