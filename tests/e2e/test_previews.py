"""Previews: every pending call shows its approver what it would do, bounded and escaped,
covered by the digest, through a real server, the generated stubs and WatchApprovals."""

from __future__ import annotations

import pytest

from callgate.server.commands.matching import command_warnings
from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.e2e.test_skill_e2e import write_skill
from tests.support.approvals import Watcher, approver, decide
from tests.support.calls import open_session, prepare, run
from tests.support.server import Harness

pytestmark = pytest.mark.anyio


async def pending_approval(
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
    pending = await pending_approval(
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


async def test_edit_file_shows_the_diff_before_approval(harness: Harness) -> None:
    stub = harness.stub()
    session_id = await open_session(stub)
    (harness.workspace / "notes.md").write_text("# Notes\n\nold line\nkeep\n")
    await run(stub, session_id, "ReadFile", {"path": "notes.md"})
    pending = await pending_approval(
        harness, session_id, "EditFile", {"path": "notes.md", "old": "old line", "new": "new line"}
    )
    assert pending.call.preview.kind == "diff"
    assert "-old line\n+new line\n" in pending.call.preview.text
    missing = await pending_approval(
        harness, session_id, "EditFile", {"path": "notes.md", "old": "absent", "new": "x"}
    )
    assert "the edit will fail: old does not occur in it" in missing.call.preview.text


async def test_bash_shows_command_directory_access_and_warnings(harness: Harness) -> None:
    session_id = await open_session(harness.stub())
    (harness.workspace / "sub").mkdir()
    command = "sort -o out.txt in.txt\nfind . -delete"
    pending = await pending_approval(
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


async def test_fetch_shows_the_full_url_and_headers_and_never_journals_them(
    harness: Harness,
) -> None:
    """The approver sees the full URL and every header's value, but a credential only by its
    scheme and a fingerprint; neither the query nor a header value reaches the journal."""
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
    assert "headers:\n  Authorization: Bearer … [value not shown; fingerprint " in text
    assert "\n  X-Trace: 1\n" in text
    assert "HEADERSECRET42" not in text
    assert 'body (8 bytes):\n{"q": 1}\n' in text
    await harness.app.lifecycle.journal.commit()
    for path in harness.state_dir.rglob("*"):
        if path.is_file():
            assert b"QUERYSECRET42" not in path.read_bytes(), path
            assert b"HEADERSECRET42" not in path.read_bytes(), path


async def test_skill_shows_its_name_and_first_lines(harness: Harness) -> None:
    body = "".join(f"step {n}\n" for n in range(1, 40))
    write_skill(harness.workspace / ".skills", "deploy", "Ships it.", body)
    session_id = await open_session(harness.stub())
    pending = await pending_approval(harness, session_id, "Skill", {"name": "deploy"})
    text = pending.call.preview.text
    assert pending.call.preview.kind == "skill"
    assert text.startswith("skill deploy (workspace): Ships it.\nits first lines (40 in all):\n")
    assert "step 20\n" in text
    assert "step 21" not in text


async def test_the_preview_goes_once_the_call_ends(harness: Harness) -> None:
    """An ended call keeps only what it needs: GetCall no longer returns the preview."""
    stub = harness.stub()
    session_id = await open_session(stub)
    pending = await pending_approval(
        harness, session_id, "WriteFile", {"path": "a.txt", "content": "x"}
    )
    await decide(approver(harness), pending.call, apb.DECISION_KIND_DENY, "no")
    got = await stub.GetCall(
        tpb.GetCallRequest(session_id=session_id, execution_id=pending.call.execution_id)
    )
    assert got.call.state == cpb.STATE_DENIED
    assert not got.call.HasField("preview")
