"""Attacks through bridge processes ending, from the agent's seat: a client that starts a
`callgate mcp` process per tool call (langchain-mcp-adapters' default) ends each process as
soon as it has its answer, "awaiting an approver" or "approved and running" included, and the
next process finds the call only through the ledger of pending calls. Whatever it does, an
approved run is never stopped by a process ending, the same call made again gets that run's
outcome, and a ledger the agent spoiled breaks no call."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from callgate.cli.mcp_bridge import default_session_name
from callgate.cli.mcp_pending import ledger_name
from callgate.v1 import approval_service_pb2 as apb
from tests.security.test_bridge_ledger_attacks import HeldNote
from tests.support.approvals import Watcher, approver, decide
from tests.support.mcp_http import _RUNTIME, prepared_calls, stdio_bridge, text_of
from tests.support.server import Harness, serve

pytestmark = pytest.mark.anyio

BOUND = 40.0


@pytest.fixture
def held_note() -> HeldNote:
    return HeldNote()


@pytest.fixture
async def held_harness(tmp_path: Path, held_note: HeldNote) -> AsyncIterator[Harness]:
    async with serve(tmp_path, extra_tools=[held_note]) as running:
        yield running


async def _one_call(harness: Harness, tmp_path: Path, arguments: dict[str, str]) -> str:
    """One MCP session, hence one bridge process, for one tool call (then the process ends)."""
    async with stdio_bridge(harness, tmp_path, "--pending-after", "1") as session:
        with anyio.fail_after(BOUND):
            result = await session.call_tool("HeldNote", arguments)
    return f"is_error={result.is_error} sc={result.structured_content} {text_of(result)[:110]!r}"


async def test_p1_running_answer_then_process_exit_does_not_kill_the_approved_run(
    held_harness: Harness, held_note: HeldNote, tmp_path: Path
) -> None:
    """Attack: a process per call. The first answers the gated call as pending; it is approved;
    the second follows the ledger, invokes it, answers "approved and is running" after 1 s and
    ends while the run goes on. Promise: the run is not stopped by that: the third process,
    started after the second ended, finds it still running; once it finishes, the fourth gets
    its outcome, and it ran once.
    Was broken: the bridge's Invoke died with its process, and the server stopped the run."""
    harness = held_harness
    harness.workspace.joinpath("notes.txt").write_text("")
    arguments = {"text": "x"}
    watcher = Watcher(approver(harness))
    answers: list[str] = []
    try:
        answers.append(await _one_call(harness, tmp_path, arguments))
        pending = await watcher.approval()
        await decide(approver(harness), pending.call, apb.DECISION_KIND_APPROVE_ONCE)
        answers.append(await _one_call(harness, tmp_path, arguments))  # "running", then ends
        # A process started after that one ended: a server that stops a run when its invoker
        # goes away has done so by now, and this one is answered as that left the call.
        answers.append(await _one_call(harness, tmp_path, arguments))
        held_note.release.set()
        with anyio.fail_after(BOUND):
            await held_note.ended.wait()
        answers.append(await _one_call(harness, tmp_path, arguments))  # the outcome
    finally:
        held_note.release.set()
        watcher.cancel()
    text = harness.workspace.joinpath("notes.txt").read_text()
    observed = (
        f"notes={text!r}; prepared={await prepared_calls(harness, 'HeldNote')}; answers: {answers}"
    )
    assert text.count("start") == 1, f"the approved call ran more than once: {observed}"
    assert text.count("end") == 1, f"the approved run was killed: {observed}"
    assert "'status': 'running'" in answers[2], f"the run was not running on: {observed}"
    assert "held and done" in answers[3], f"the repeat did not get the outcome: {observed}"


async def test_p2_an_unparsable_ledger_does_not_break_every_call(
    harness: Harness, tmp_path: Path
) -> None:
    """Attack: the agent writes 100k '[' into the ledger file of its bridges (it runs as the
    bridges' user). Promise: a malformed ledger is an empty one: a real bridge process answers
    a call that is not in its memory (here an ungated read) as usual, and notes the next call
    it answers as pending in that file afresh.
    Was broken: json.loads raised RecursionError, which the ledger let through, so that every
    such tools/call was a protocol error."""
    token = harness.tokens["agent"]
    directory = Path(_RUNTIME) / "callgate-mcp"  # the bridges' ledger directory (bridge_env)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / f"{ledger_name(token, default_session_name(token))}.json"
    path.write_text("[" * 100_000)
    path.chmod(0o600)
    (harness.workspace / "r.txt").write_text("hello\n")
    try:
        async with stdio_bridge(harness, tmp_path, "--pending-after", "0.3") as session:
            with anyio.fail_after(BOUND):
                try:
                    result = await session.call_tool("ReadFile", {"path": "r.txt"})
                    outcome = f"is_error={result.is_error} {text_of(result)[:120]!r}"
                except Exception as exc:
                    outcome = f"{type(exc).__name__}: {str(exc)[:160]}"
                assert outcome.startswith("is_error=False"), outcome
                gated = await session.call_tool("WriteFile", {"path": "w.txt", "content": "w"})
        noted = json.loads(path.read_text())
    finally:
        path.unlink()
    # The file spoiled is the one the bridge uses: its pending answer replaced it by an entry.
    assert (gated.structured_content or {}).get("status") == "awaiting_approval", gated
    assert len(noted) == 1, noted
