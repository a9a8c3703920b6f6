"""Attacks on previews, from the agent's seat: content that restyles or reorders the approver's
screen, a preview that would reveal a file the loop never read, a file swapped after the
approver saw its diff, and a write too large to show."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from callgate.v1 import approval_service_pb2 as apb
from tests.e2e.test_previews import pending_approval as _pending
from tests.support.approvals import approver, decide
from tests.support.calls import invoke, open_session, prepare, run
from tests.support.server import Harness
from tests.support.status import failure

pytestmark = pytest.mark.anyio


async def test_an_overwrite_shows_a_unified_diff_bound_to_the_content_it_was_made_against(
    harness: Harness,
) -> None:
    """The diff is against the file as this loop read it; if the file changes after Prepare
    (and the loop reads it again), the approved write does not run on the new content."""
    stub = harness.stub()
    session_id = await open_session(stub)
    target = harness.workspace / "app.py"
    target.write_text("a = 1\nb = 2\nc = 3\n")
    await run(stub, session_id, "ReadFile", {"path": "app.py"})
    pending = await _pending(
        harness, session_id, "WriteFile", {"path": "app.py", "content": "a = 1\nb = 20\nc = 3\n"}
    )
    assert pending.call.preview.kind == "diff"
    assert pending.call.preview.text == (
        "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@\n a = 1\n-b = 2\n+b = 20\n c = 3\n"
    )
    target.write_text("a = 1\nb = 2\nc = 3\nd = 4\n")
    await run(stub, session_id, "ReadFile", {"path": "app.py"})
    await decide(approver(harness), pending.call, apb.DECISION_KIND_APPROVE_ONCE)
    response = await invoke(stub, session_id, pending.call.execution_id)
    assert response.result.error_code == "stale_read"
    assert "changed since this call was prepared" in response.result.text
    assert target.read_text() == "a = 1\nb = 2\nc = 3\nd = 4\n"


async def test_an_unread_file_is_not_shown_to_the_approver_or_the_agent(harness: Harness) -> None:
    """The preview never reveals content the loop has not read (the agent sees its own
    call's preview): an overwrite of an unread file shows only the new content and why it
    would fail."""
    session_id = await open_session(harness.stub())
    (harness.workspace / "private.txt").write_text("do not show this\n")
    pending = await _pending(
        harness, session_id, "WriteFile", {"path": "private.txt", "content": "new\n"}
    )
    assert "do not show this" not in pending.call.preview.text
    assert "has not read its current content" in pending.call.preview.text


async def test_hostile_content_is_escaped_and_announced(harness: Harness) -> None:
    """Control, escape and bidi characters cannot restyle or reorder what the approver
    reads: each is shown as an escape, and a first line says how many there are."""
    session_id = await open_session(harness.stub())
    content = "ok\x1b[2J\x1b[1;1Hclean\r\nadmin\u202euser\u2066\u200b\x7f\x85end\n"
    pending = await _pending(
        harness, session_id, "WriteFile", {"path": "h.txt", "content": content}
    )
    text = pending.call.preview.text
    for char in "\x1b\r\u202e\u2066\u200b\x7f\x85":
        assert char not in text
    assert "ok\\x1b[2J\\x1b[1;1Hclean\\x0d" in text
    assert "admin\\u202euser\\u2066\\u200b\\x7f\\x85end" in text
    assert text.startswith("[8 control or invisible character(s) below are shown escaped")


async def test_a_large_write_is_bounded_and_a_huge_one_is_refused(harness: Harness) -> None:
    session_id = await open_session(harness.stub())
    line = "x" * 99 + "\n"
    content = line * 10_000  # 1,000,000 bytes, under the 1 MiB write cap
    call = await prepare(
        harness.stub(), session_id, "WriteFile", {"path": "big.txt", "content": content}
    )
    assert len(call.preview.text.encode()) <= 64 * 1024 + 200
    shown = call.preview.text.count(line)
    assert shown > 600
    assert call.preview.omitted_bytes == len(content) - shown * len(line)
    assert call.preview.text.endswith(f"[… {call.preview.omitted_bytes} more bytes not shown]\n")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await prepare(
            harness.stub(), session_id, "WriteFile", {"path": "b.txt", "content": "y" * 3_000_000}
        )
    assert failure(caught.value).reason == "ARGUMENTS_INVALID"
    with pytest.raises(grpc.aio.AioRpcError) as caught:  # 10 MB: over the message size
        await prepare(
            harness.stub(), session_id, "WriteFile", {"path": "b.txt", "content": "y" * 10_000_000}
        )
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert not (harness.workspace / "b.txt").exists()


async def test_a_binary_looking_write_is_escaped_not_passed_through(tmp_path: Path) -> None:
    """Content full of control bytes (what a binary blob decodes to) stays escaped text."""
    from tests.support.server import serve

    async with serve(tmp_path) as harness:
        session_id = await open_session(harness.stub())
        blob = "".join(chr(c) for c in range(1, 32)) * 4 + "\u0080\u009f"
        call = await prepare(
            harness.stub(),
            session_id,
            "WriteFile",
            {"path": "bin", "content": json.loads(json.dumps(blob))},
        )
        text = call.preview.text
        assert all(ord(c) >= 32 or c in "\n\t" for c in text)
        assert "\\x01\\x02\\x03" in text
