"""Agent text is inert everywhere an approver reads it.

A right-to-left override in a command, a path or an AskUser question must not reorder what the
approver reads (`cat notes.txt <U+202E>; bash evil.sh #` reads like a comment), and an added diff
line starting `++ ` must not look like a file header. The terminal approver and the web console
show every such character as a visible escape, with a warning that counts only the agent's
characters, and style diff lines by their position in the hunk."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from callgate.cli.display import diff_classes, render_approval
from callgate.client import CallgateClient
from callgate.client.models import PendingApproval
from callgate.v1 import tool_call_pb2 as cpb
from tests.e2e.test_web_console import approver_page, console, serve_callgate
from tests.support.calls import open_session, prepare, run
from tests.support.server import Harness, serve

pytestmark = pytest.mark.anyio

RLO = "\u202e"
SPOOF = f"cat notes.txt {RLO}; bash evil.sh #"


async def _pending_items(harness: Harness, count: int) -> list[PendingApproval]:
    target = harness.unix_target
    items: list[PendingApproval] = []
    async with CallgateClient(target, token=harness.tokens["approver"]) as approver:
        async for item in approver.approvals.watch():
            if isinstance(item, PendingApproval):
                items.append(item)
            if len(items) == count:
                return items
    return items


async def test_the_terminal_approver_shows_agent_text_inert(tmp_path: Path) -> None:
    """In the terminal approver the override is an escape and the warning counts only the
    agent's characters, not callgate's own line breaks (a Bash call without one has no
    warning); an added `++ ` line is coloured as added."""
    async with serve(tmp_path) as harness:
        (harness.workspace / "a.txt").write_text("one\n")
        stub = harness.stub()
        session = await open_session(stub)
        commands: list[dict[str, object]] = [{"command": SPOOF}, {"command": "make test"}]
        for arguments in commands:
            call = await prepare(stub, session, "Bash", arguments, evaluate=True)
            assert call.state == cpb.STATE_AWAITING_APPROVAL
        await run(stub, session, "ReadFile", {"path": "a.txt"})  # a diff needs a full read
        edit: dict[str, object] = {"path": "a.txt", "content": "one\n++ b/evil\n+@@ -1 +1 @@\n"}
        await prepare(stub, session, "WriteFile", edit, evaluate=True)
        spoofed, plain, diff = await _pending_items(harness, 3)
    shown = render_approval(spoofed)
    assert RLO not in shown
    assert "\\u202e" in shown
    warned = re.search(r"WARNING: (\d+) control or invisible character", shown)
    assert warned is not None
    # Only the agent's overrides count (each place it is shown once the server had not already
    # escaped it), never callgate's own line breaks.
    assert 1 <= int(warned.group(1)) <= shown.count("\\u202e")
    assert "WARNING" not in render_approval(plain)
    coloured = render_approval(diff, colour=True)
    # The added lines read "+++ b/evil" and "++@@ -1 +1 @@": added, never a header.
    assert "\x1b[32m+++ b/evil\x1b[0m" in coloured
    assert "\x1b[32m++@@ -1 +1 @@\x1b[0m" in coloured
    assert "\x1b[1m+++ b/evil" not in coloured


def test_diff_lines_are_classed_by_their_position_not_their_text() -> None:
    """Lines inside a hunk are content whatever they start with; headers only between hunks."""
    lines = ["--- a/x", "+++ b/x", "@@ -1,1 +1,3 @@", " a", "++ b/x", "+--- a/y", "@@ -9 +9 @@"]
    assert diff_classes(lines) == ["file", "file", "hunk", "", "add", "add", "hunk"]


async def test_the_web_console_shows_agent_text_inert(tmp_path: Path) -> None:
    """In Chromium the override in a command and in an AskUser question is shown as an escape,
    with the warning, and an added `++ ` line is styled as added, not as a file header."""
    from playwright.async_api import expect

    async with serve_callgate(tmp_path / "pod") as pod:
        (pod.workspace / "a.txt").write_text("one\n")
        stub = pod.stub()
        session = await open_session(stub)
        command = await prepare(stub, session, "Bash", {"command": SPOOF}, evaluate=True)
        await run(stub, session, "ReadFile", {"path": "a.txt"})  # a diff needs a full read
        edit: dict[str, object] = {"path": "a.txt", "content": "one\n++ b/evil\n"}
        write = await prepare(stub, session, "WriteFile", edit, evaluate=True)
        async with console(("pod", pod)) as url, approver_page(url, pod.tokens["approver"]) as page:
            card = page.locator(f'[data-execution-id="{command.execution_id}"]')
            await expect(card.get_by_test_id("escape-warning")).to_be_visible(timeout=10_000)
            text = await card.inner_text()
            assert RLO not in text
            assert "\\u202e" in text
            written = page.locator(f'[data-execution-id="{write.execution_id}"]')
            spoof = written.get_by_test_id("preview").locator("span", has_text="+++ b/evil")
            await expect(spoof).to_have_class("add")
