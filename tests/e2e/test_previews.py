"""Previews: every pending call shows its approver what it would do, bounded and escaped,
covered by the digest, through a real server, the generated stubs and WatchApprovals."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from callgate.server.core.commands import command_warnings
from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.e2e.test_skill_e2e import write_skill
from tests.support.approvals import Watcher, approver, decide
from tests.support.calls import invoke, open_session, prepare, run
from tests.support.server import Harness
from tests.support.status import failure

pytestmark = pytest.mark.anyio


async def _pending(
    harness: Harness, session_id: str, tool: str, args: dict[str, object]
) -> apb.PendingApproval:
    watcher = Watcher(approver(harness))
    try:
        call = await prepare(harness.stub(), session_id, tool, args, evaluate=True)
        assert call.state == cpb.STATE_AWAITING_APPROVAL, call
        return await watcher.approval(call.execution_id)
    finally:
        watcher.cancel()


async def test_a_new_file_shows_its_content_and_the_digest_covers_it(harness: Harness) -> None:
    session_id = await open_session(harness.stub())
    pending = await _pending(
        harness, session_id, "WriteFile", {"path": "new.txt", "content": "one\ntwo\n"}
    )
    preview = pending.call.preview
    assert preview.kind == "content"
    assert preview.text == "new file new.txt (8 bytes):\none\ntwo\n"
    assert preview.omitted_bytes == 0
    other = await prepare(
        harness.stub(), session_id, "WriteFile", {"path": "new.txt", "content": "one\ntwO\n"}
    )
    assert other.preview.text != preview.text
    assert other.digest != pending.call.digest


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


async def test_edit_file_shows_the_diff_before_approval(harness: Harness) -> None:
    stub = harness.stub()
    session_id = await open_session(stub)
    (harness.workspace / "notes.md").write_text("# Notes\n\nold line\nkeep\n")
    await run(stub, session_id, "ReadFile", {"path": "notes.md"})
    pending = await _pending(
        harness, session_id, "EditFile", {"path": "notes.md", "old": "old line", "new": "new line"}
    )
    assert pending.call.preview.kind == "diff"
    assert "-old line\n+new line\n" in pending.call.preview.text
    missing = await _pending(
        harness, session_id, "EditFile", {"path": "notes.md", "old": "absent", "new": "x"}
    )
    assert "the edit will fail: old does not occur in it" in missing.call.preview.text


async def test_bash_shows_command_directory_access_and_warnings(harness: Harness) -> None:
    session_id = await open_session(harness.stub())
    (harness.workspace / "sub").mkdir()
    command = "sort -o out.txt in.txt\nfind . -delete"
    pending = await _pending(
        harness,
        session_id,
        "Bash",
        {
            "command": command,
            "workdir": "sub",
            "access": {"write": ["build"], "network": ["example.com:443"]},
        },
    )
    text = pending.call.preview.text
    assert pending.call.preview.kind == "command"
    assert f"working directory: {(harness.workspace / 'sub').resolve()}" in text
    assert f"  write {(harness.workspace / 'build').resolve()}" in text
    assert "  network example.com:443" in text
    warnings = command_warnings(command)
    assert warnings
    for warning in warnings:
        assert f"- {warning}" in text
    assert text.endswith("command:\nsort -o out.txt in.txt\nfind . -delete\n")


async def test_fetch_shows_the_full_url_and_header_names_and_never_journals_them(
    harness: Harness,
) -> None:
    session_id = await open_session(harness.stub())
    call = await prepare(
        harness.stub(),
        session_id,
        "Fetch",
        {
            "url": "https://api.example.com/v1/items?token=QUERYSECRET42",
            "method": "POST",
            "headers": {"Authorization": "Bearer HEADERSECRET42", "X-Trace": "1"},
            "body": '{"q": 1}',
        },
    )
    text = call.preview.text
    assert call.preview.kind == "request"
    assert "POST https://api.example.com:443/v1/items?token=QUERYSECRET42\n" in text
    assert "headers: Authorization, X-Trace (values not shown)\n" in text
    assert "HEADERSECRET42" not in text
    assert 'body (8 bytes):\n{"q": 1}\n' in text
    await harness.app.lifecycle.journal.commit()
    for path in harness.state_dir.rglob("*"):
        if path.is_file():
            assert b"QUERYSECRET42" not in path.read_bytes(), path


async def test_skill_shows_its_name_and_first_lines(harness: Harness) -> None:
    body = "".join(f"step {n}\n" for n in range(1, 40))
    write_skill(harness.workspace / ".skills", "deploy", "Ships it.", body)
    session_id = await open_session(harness.stub())
    pending = await _pending(harness, session_id, "Skill", {"name": "deploy"})
    text = pending.call.preview.text
    assert pending.call.preview.kind == "skill"
    assert text.startswith("skill deploy (workspace): Ships it.\nits first lines (40 in all):\n")
    assert "step 20\n" in text
    assert "step 21" not in text


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


async def test_the_preview_goes_once_the_call_ends(harness: Harness) -> None:
    """An ended call keeps only what it needs: GetCall no longer returns the preview."""
    stub = harness.stub()
    session_id = await open_session(stub)
    pending = await _pending(harness, session_id, "WriteFile", {"path": "a.txt", "content": "x"})
    await decide(approver(harness), pending.call, apb.DECISION_KIND_DENY, "no")
    got = await stub.GetCall(
        tpb.GetCallRequest(session_id=session_id, execution_id=pending.call.execution_id)
    )
    assert got.call.state == cpb.STATE_DENIED
    assert not got.call.HasField("preview")


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
