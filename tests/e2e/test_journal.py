"""The durable audit journal (design invariants 9 and 10, section 8), against real SQLite."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import anyio
import grpc
import pytest

from callgate.server.app import App
from callgate.server.commands.matching import normalize_command
from callgate.server.config import ConfigError
from callgate.server.core.journal import Event
from callgate.server.core.models import ToolResult
from callgate.server.core.tool import Prepared, Tool, ToolContext
from callgate.server.storage.journal import JOURNAL_DB, SqliteJournal
from callgate.v1 import tool_call_pb2, tool_service_pb2
from tests.support.calls import invoke, open_session, prepare, run
from tests.support.server import serve
from tests.support.status import failure
from tests.support.tools import NoArguments, NoArtifact

pytestmark = pytest.mark.anyio

SECRET_CONTENT = "zebra-content-7f3a9c"
READ_CONTENT = "quokka-file-41d2e8"


def _rows(state_dir: Path) -> list[tuple[int, str, str, str, str, str]]:
    connection = sqlite3.connect(state_dir / JOURNAL_DB)
    try:
        return connection.execute(
            "SELECT seq, run_id, kind, session_id, execution_id, data FROM events ORDER BY seq"
        ).fetchall()
    finally:
        connection.close()


class JournalProbe(Tool[NoArguments, NoArtifact]):
    """When it runs, reads the journal database synchronously and records whether its own
    `call.invoked` row was already committed."""

    name = "JournalProbe"
    description = "Look for this call's invoked record in the journal."
    arguments = NoArguments
    artifact = NoArtifact
    requirement_kinds = ()

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.seen: list[bool] = []

    def prepare_args(self, args: NoArguments, ctx: ToolContext) -> Prepared:
        return Prepared(summary="JournalProbe", requirements=(), artifact=NoArtifact())

    async def run(self, artifact: NoArtifact, ctx: ToolContext) -> ToolResult:
        rows = _rows(self.state_dir)
        self.seen.append(any(r[2] == "call.invoked" and r[4] == ctx.execution_id for r in rows))
        return ToolResult(text="probed")


async def test_journal_records_a_session_in_order_without_secrets(tmp_path: Path) -> None:
    """A scripted session's events are journaled in order, gap-free, with no contents or tokens."""
    workspace = os.path.realpath(tmp_path / "ws")
    rules = [{"effect": "allow", "kind": "filesystem.write", "match": f"tree:{workspace}"}]
    async with serve(tmp_path, rules=rules) as harness:
        (harness.workspace / "in.txt").write_text(READ_CONTENT + "\n")
        stub = harness.stub()
        session = await open_session(stub)
        read = await run(stub, session, "ReadFile", {"path": "in.txt"})
        write = await run(
            stub, session, "WriteFile", {"path": "out.txt", "content": SECRET_CONTENT}
        )
        await stub.CloseSession(tool_service_pb2.CloseSessionRequest(session_id=session))
        tokens = list(harness.tokens.values())
    state_dir = tmp_path / "state"
    rows = _rows(state_dir)
    seqs = [r[0] for r in rows]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert {r[1] for r in rows} == {rows[0][1]}
    events = [(r[2], r[4]) for r in rows]
    read_id, write_id = read.call.execution_id, write.call.execution_id
    assert events == [
        ("server.started", ""),
        ("session.opened", ""),
        ("call.prepared", read_id),
        ("call.decided", read_id),
        ("call.invoked", read_id),
        ("call.finished", read_id),
        ("call.prepared", write_id),
        ("call.decided", write_id),
        ("call.invoked", write_id),
        ("call.finished", write_id),
        ("session.closed", ""),
    ]
    finished = json.loads(rows[5][5])
    assert finished["is_error"] is False
    assert finished["state"] == "succeeded"
    assert isinstance(finished["duration_seconds"], float)
    blob = b"".join(p.read_bytes() for p in state_dir.iterdir() if p.name.startswith(JOURNAL_DB))
    for secret in (SECRET_CONTENT, READ_CONTENT, *tokens):
        assert secret.encode() not in blob


async def test_call_invoked_is_committed_before_the_tool_runs(tmp_path: Path) -> None:
    """The tool finds its own call.invoked row already in the database when it starts."""
    probe = JournalProbe(tmp_path / "state")
    async with serve(tmp_path, extra_tools=[probe]) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        response = await run(stub, session, "JournalProbe", {})
        assert response.call.state == tool_call_pb2.STATE_SUCCEEDED
    assert probe.seen == [True]


class AnswerOnlyProbe(JournalProbe):
    """JournalProbe declared to have no effect but its answer (as ReadFile, Glob, Grep)."""

    name = "AnswerOnlyProbe"
    answer_only = True


async def test_a_read_only_tool_commits_invoked_with_its_end_before_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool whose answer is its only effect, invoked unary, commits call.invoked in
    the same transaction as its end, before the answer (one commit fewer on the fast path);
    streamed, its output leaves while it runs, so call.invoked is committed before it runs."""
    batches: list[list[str]] = []
    original = SqliteJournal._write

    def recording(self: SqliteJournal, batch: Sequence[Event]) -> None:
        original(self, batch)
        batches.append([event.kind for event in batch])

    async def no_background_writer(self: SqliteJournal) -> None:
        await anyio.sleep_forever()

    monkeypatch.setattr(SqliteJournal, "run_writer", no_background_writer)
    monkeypatch.setattr(SqliteJournal, "_write", recording)
    probe = AnswerOnlyProbe(tmp_path / "state")
    access = {"workspace_write": "allow"}
    async with serve(tmp_path, extra_tools=[probe], access=access) as harness:
        (harness.workspace / "a.txt").write_text(READ_CONTENT + "\n")
        stub = harness.stub()
        session = await open_session(stub)
        cases: list[tuple[str, dict[str, object]]] = [
            ("AnswerOnlyProbe", {}),
            ("ReadFile", {"path": "a.txt"}),
        ]
        for tool, arguments in cases:
            call = await prepare(stub, session, tool, arguments, evaluate=True)
            batches.clear()
            response = await invoke(stub, session, call.execution_id)
            assert response.call.state == tool_call_pb2.STATE_SUCCEEDED
            assert batches == [["call.invoked", "call.finished"]], tool
            kinds = [r[2] for r in _rows(tmp_path / "state") if r[4] == call.execution_id]
            assert kinds[-2:] == ["call.invoked", "call.finished"]
        assert probe.seen == [False]  # not yet durable while it ran: nothing had left
        # WriteFile changes the workspace: its invoked record is committed before it runs.
        call = await prepare(
            stub, session, "WriteFile", {"path": "b", "content": "x"}, evaluate=True
        )
        batches.clear()
        await invoke(stub, session, call.execution_id)
        assert batches == [["call.invoked"], ["call.finished"]]
        # Streamed, output leaves while the tool runs: committed before it, as for all tools.
        call = await prepare(stub, session, "AnswerOnlyProbe", {}, evaluate=True)
        stream = stub.InvokeStream(
            tool_service_pb2.InvokeStreamRequest(session_id=session, execution_id=call.execution_id)
        )
        async for _ in stream:
            pass
        assert probe.seen == [False, True]


async def test_every_answer_is_committed_before_the_caller_gets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever an answer acknowledges is already in the database when the answer arrives:
    read from a separate connection while the server is still running. The background writer
    is switched off, so only the commit before each answer can have put the rows there."""

    async def no_background_writer(self: SqliteJournal) -> None:
        await anyio.sleep_forever()

    monkeypatch.setattr(SqliteJournal, "run_writer", no_background_writer)
    state_dir = tmp_path / "state"
    async with serve(tmp_path) as harness:
        (harness.workspace / "a.txt").write_text("a\n")
        stub = harness.stub()
        session = await open_session(stub)
        assert [r[2] for r in _rows(state_dir)][-1] == "session.opened"
        prepared = await prepare(stub, session, "ReadFile", {"path": "a.txt"})
        assert [(r[2], r[4]) for r in _rows(state_dir)][-1] == (
            "call.prepared",
            prepared.execution_id,
        )
        fast = await run(stub, session, "ReadFile", {"path": "a.txt"})
        assert [(r[2], r[4]) for r in _rows(state_dir)][-1] == (
            "call.finished",
            fast.call.execution_id,
        )
        cancelled = await stub.CancelCall(
            tool_service_pb2.CancelCallRequest(
                session_id=session, execution_id=prepared.execution_id
            )
        )
        assert cancelled.call.state == tool_call_pb2.STATE_CANCELLED
        assert [(r[2], r[4]) for r in _rows(state_dir)][-1] == (
            "call.finished",
            prepared.execution_id,
        )
        stream = stub.Exchange(
            iter(
                [
                    tool_service_pb2.ExchangeRequest(
                        id=1,
                        prepare=tool_service_pb2.PrepareRequest(
                            session_id=session,
                            tool_name="ReadFile",
                            arguments_json='{"path": "a.txt"}',
                            evaluate=True,
                        ),
                    )
                ]
            )
        )
        (answer,) = [r async for r in stream]
        assert [(r[2], r[4]) for r in _rows(state_dir)][-1] == (
            "call.decided",
            answer.prepare.call.execution_id,
        )


async def test_restart_marks_calls_left_open_as_abandoned(tmp_path: Path) -> None:
    """A call prepared but not finished in one run is journaled as abandoned by the next."""
    async with serve(tmp_path) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        (harness.workspace / "a.txt").write_text("a\n")
        left = await prepare(stub, session, "ReadFile", {"path": "a.txt"})
        done = await prepare(stub, session, "ReadFile", {"path": "a.txt"}, evaluate=True)
        await invoke(stub, session, done.execution_id)
        first_run = _rows(tmp_path / "state")[0][1]
    async with serve(tmp_path):
        pass
    rows = _rows(tmp_path / "state")
    abandoned = [r for r in rows if r[2] == "call.abandoned"]
    # Closing the session at shutdown cancels the open call, so nothing is left open...
    assert abandoned == []
    assert any(r[2] == "call.finished" and r[4] == left.execution_id for r in rows)
    assert rows[-1][1] != first_run


async def test_restart_abandons_a_call_whose_run_ended_without_a_terminal_event(
    tmp_path: Path,
) -> None:
    """An invoked call with no finished event (a crash) is marked abandoned at the next start."""
    state_dir = tmp_path / "state"
    async with serve(tmp_path):
        pass
    connection = sqlite3.connect(state_dir / JOURNAL_DB)
    with connection:
        connection.execute(
            "INSERT INTO events (run_id, time, kind, session_id, execution_id, principal, data) "
            "VALUES ('run_crashed', '2030-01-01T00:00:00+00:00', 'call.invoked', 'ses_x', "
            "'call_x', 'agent', '{}')"
        )
    connection.close()
    async with serve(tmp_path):
        pass
    rows = _rows(state_dir)
    abandoned = [r for r in rows if r[2] == "call.abandoned"]
    assert [r[4] for r in abandoned] == ["call_x"]
    assert json.loads(abandoned[0][5]) == {"previous_run_id": "run_crashed"}


async def test_process_lifecycle_is_journaled_without_output_or_pids(tmp_path: Path) -> None:
    """A background command's start and end are journaled with its opaque ID, the reason and
    exit code; its output and its PID are not."""
    # Its output (walrus-5947) appears nowhere in the command, which the journal does hold
    # (the requirement an approver decided is the command).
    command = "echo walrus-$((5000+947)); exec sleep 1000.37"
    rules = [{"effect": "allow", "kind": "command.execute", "match": normalize_command(command)}]
    async with serve(tmp_path, rules=rules) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        started = await run(stub, session, "Bash", {"command": command, "background": True})
        process_id = json.loads(started.result.json)["process_id"]
        stopped = await run(stub, session, "ProcessStop", {"process_id": process_id})
        assert not stopped.result.is_error, stopped.result.text
    rows = _rows(tmp_path / "state")
    process_rows = [
        (r[2], r[3], r[4], json.loads(r[5])) for r in rows if r[2].startswith("process.")
    ]
    assert [r[0] for r in process_rows] == ["process.started", "process.ended"]
    (_, start_session, start_execution, start), (_, end_session, _, end) = process_rows
    assert start_session == end_session == session
    assert start_execution == started.call.execution_id
    assert start == {"process_id": process_id, "loop_id": start["loop_id"]}
    assert end["process_id"] == process_id
    assert end["reason"] == "terminated"
    # No PID field (nor any other): exactly these keys.
    assert set(end) == {"process_id", "loop_id", "reason", "exit_code", "limit", "duration_seconds"}
    assert end["limit"] is None
    blob = b"".join(
        p.read_bytes() for p in (tmp_path / "state").iterdir() if p.name.startswith(JOURNAL_DB)
    )
    assert b"walrus-5947" not in blob


async def test_start_removes_what_a_previous_runs_sessions_left_behind(tmp_path: Path) -> None:
    """Sessions do not survive a restart, so their private directories (process output
    spools) are removed at start; a symlink there is unlinked, never followed."""
    sessions = tmp_path / "state" / "sessions"
    spool = sessions / "sess_crashed" / "processes"
    spool.mkdir(parents=True)
    (spool / "proc_x.out").write_bytes(b"output of a crashed run")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    (sessions / "link").symlink_to(outside, target_is_directory=True)
    async with serve(tmp_path):
        assert list(sessions.iterdir()) == []
    assert (outside / "keep.txt").read_text() == "keep"


async def test_a_second_server_on_the_same_state_directory_is_refused(tmp_path: Path) -> None:
    """One server per state directory: a second one would share the journal's sequence and
    abandon the first one's calls. It is refused with the key named, and the first is fine."""
    async with serve(tmp_path) as harness:
        config = harness.app.config
        with pytest.raises(ConfigError, match=r"state_dir: .* in use by another callgate server"):
            App(config)
        session = await open_session(harness.stub())
        assert session
    App(config).release()  # free again once the first has stopped


async def test_an_answer_whose_record_cannot_be_committed_is_not_retried_blindly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read happened, but its `call.finished` cannot be committed before the answer: the
    answer is INTERNAL / JOURNAL_UNACKNOWLEDGED (clients retry UNAVAILABLE automatically,
    which would repeat the effect), and the record is written once the journal works again."""
    original = SqliteJournal._write

    def failing_finish(self: SqliteJournal, batch: Sequence[Event]) -> None:
        if any(e.kind == "call.finished" for e in batch):
            raise sqlite3.OperationalError("disk I/O error")
        original(self, batch)

    async def no_background_writer(self: SqliteJournal) -> None:
        await anyio.sleep_forever()

    monkeypatch.setattr(SqliteJournal, "run_writer", no_background_writer)
    async with serve(tmp_path) as harness:
        (harness.workspace / "a.txt").write_text("a\n")
        stub = harness.stub()
        session = await open_session(stub)
        call = await prepare(stub, session, "ReadFile", {"path": "a.txt"}, evaluate=True)
        monkeypatch.setattr(SqliteJournal, "_write", failing_finish)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await invoke(stub, session, call.execution_id)
        monkeypatch.setattr(SqliteJournal, "_write", original)
        got = failure(caught.value)
        assert (got.code, got.reason) == (grpc.StatusCode.INTERNAL, "JOURNAL_UNACKNOWLEDGED")
        fetched = await stub.GetCall(
            tool_service_pb2.GetCallRequest(session_id=session, execution_id=call.execution_id)
        )
        assert fetched.call.state == tool_call_pb2.STATE_SUCCEEDED
    kinds = [r[2] for r in _rows(tmp_path / "state") if r[4] == call.execution_id]
    assert kinds == ["call.prepared", "call.decided", "call.invoked", "call.finished"]
