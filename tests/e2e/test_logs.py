"""The server's JSON-line logs: one object per line, calls named by their session and execution
IDs, and nothing secret (file contents, command output, tokens)."""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from callgate.server.logs import JsonFormatter
from tests.support.calls import open_session, prepare, run
from tests.support.server import serve

pytestmark = pytest.mark.anyio

FILE_CONTENT = "narwhal-content-2b7e"
WRITTEN = "okapi-written-91c3"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The root logger's output as the server writes it (JSON lines), at debug level."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


async def test_logs_are_json_lines_with_ids_and_no_secrets(
    tmp_path: Path, captured: io.StringIO
) -> None:
    workspace = os.path.realpath(tmp_path / "ws")
    rules = [{"effect": "allow", "kind": "filesystem.write", "match": f"tree:{workspace}"}]
    async with serve(tmp_path, rules=rules) as harness:
        (harness.workspace / "in.txt").write_text(FILE_CONTENT + "\n")
        (harness.workspace / ".env").write_text("API_KEY=never-logged-77\n")
        stub = harness.stub()
        session = await open_session(stub)
        read = await run(stub, session, "ReadFile", {"path": "in.txt"})
        write = await run(stub, session, "WriteFile", {"path": "out.txt", "content": WRITTEN})
        denied = await prepare(stub, session, "ReadFile", {"path": ".env"}, evaluate=True)
        tokens = list(harness.tokens.values())
    text = captured.getvalue()
    entries = [json.loads(line) for line in text.splitlines()]
    assert entries
    assert all({"time", "level", "logger", "message"} <= set(e) for e in entries)
    logged = {(e["message"], e["execution_id"]): e for e in entries if "execution_id" in e}
    for message, execution_id, state in (
        ("call finished", read.call.execution_id, "succeeded"),
        ("call finished", write.call.execution_id, "succeeded"),
        ("call decided", denied.execution_id, "denied"),
    ):
        entry = logged[(message, execution_id)]
        assert entry["session_id"] == session
        assert state in entry["detail"]
        # A call the policy allowed that succeeded is routine: the journal has it.
        assert entry["level"].lower() == ("debug" if message == "call finished" else "info")
    for secret in (FILE_CONTENT, WRITTEN, "never-logged-77", *tokens):
        assert secret not in text
