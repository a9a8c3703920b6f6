"""Supervised background processes through a real server: Bash with background: true, then
ProcessOutput / ProcessInput / ProcessStop, CloseSession and server shutdown."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import grpc
import pytest

from callgate.server.commands.matching import normalize_command
from callgate.v1 import tool_call_pb2, tool_service_pb2
from tests.support.calls import open_session, prepare, run
from tests.support.server import Harness, serve
from tests.support.status import failure
from tests.tools.test_processes import marker, pids_running

if TYPE_CHECKING:
    from callgate.v1.tool_service_pb2_grpc import ToolServiceAsyncStub

pytestmark = pytest.mark.anyio

SEQ_COUNT = 1_500_000
PATIENCE = 60
"""Seconds a wait for a process (its start, output or end) may take before the test fails: only
a failure gets there, but a loaded machine may be slow to start and schedule processes."""
WAIT_MS = 30_000
"""ProcessOutput's own wait for output that is sure to come (ended by the output, not by this)."""
CLOSE_MARK = marker("1000.789")
SHUTDOWN_MARK = marker("1000.788")
INVALID_UTF8 = "head -c 1048576 /dev/zero | tr '\\0' '\\377'"
# A process that is its own marker: its argv holds the marker and it says "ready" once it
# runs (optionally ignoring SIGTERM first), so a test knows the tree is there.
SLEEPER = (
    "exec python3 -c 'import signal, sys, time\n"
    'if sys.argv[2] == "stubborn": signal.signal(signal.SIGTERM, signal.SIG_IGN)\n'
    'print("ready", flush=True)\n'
    "time.sleep(1000)' {marker} {mode}"
)
COMMANDS = [
    f"seq 1 {SEQ_COUNT}",
    "echo hello; exec sleep 1000.61",
    "cat",
    INVALID_UTF8,
    "exec sleep 1000.93",
    "exec sleep 1000.94",
    *(
        SLEEPER.format(marker=m, mode=mode)
        for m in (CLOSE_MARK, SHUTDOWN_MARK)
        for mode in ("plain", "stubborn")
    ),
]


def allow(*commands: str) -> list[dict[str, str]]:
    return [
        {"effect": "allow", "kind": "command.execute", "match": normalize_command(c)}
        for c in commands
    ]


@asynccontextmanager
async def server(tmp_path: Path, **overrides: Any) -> AsyncIterator[Harness]:
    """A server that allows the commands these tests run (and nothing else)."""
    async with serve(tmp_path, rules=allow(*COMMANDS), **overrides) as harness:
        yield harness


def result_json(response: tool_service_pb2.InvokeResponse) -> dict[str, Any]:
    value = json.loads(response.result.json)
    assert isinstance(value, dict)
    return value


async def start(
    stub: ToolServiceAsyncStub, session: str, command: str, loop_id: str = ""
) -> dict[str, Any]:
    response = await run(
        stub, session, "Bash", {"command": command, "background": True}, loop_id=loop_id
    )
    assert not response.result.is_error, response.result.text
    return result_json(response)


async def call(
    stub: ToolServiceAsyncStub, session: str, tool: str, loop_id: str = "", **arguments: Any
) -> tool_service_pb2.InvokeResponse:
    return await run(stub, session, tool, arguments, loop_id=loop_id)


async def until_ready(stub: ToolServiceAsyncStub, session: str, process_id: str) -> None:
    with anyio.fail_after(PATIENCE):
        got = result_json(
            await call(
                stub,
                session,
                "ProcessOutput",
                process_id=process_id,
                wait="any",
                timeout_ms=WAIT_MS,
            )
        )
    assert got["output"] == "ready\n"


async def test_background_bash_returns_at_once_with_an_opaque_id_and_first_output(
    tmp_path: Path,
) -> None:
    """Invoke returns status running, a proc_ ID with at least 122 random bits (never a PID),
    and the first output with the cursor after it."""
    async with server(tmp_path) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        started = time.monotonic()
        got = await start(stub, session, "echo hello; exec sleep 1000.61")
        assert time.monotonic() - started < 2
        assert got["status"] == "running"
        assert re.fullmatch(r"proc_[A-Za-z0-9_-]{24}", got["process_id"])
        assert "hello\n".startswith(got["output"])
        assert got["next_cursor"] == len(got["output"].encode())
        assert (got["exit_code"], got["reason"]) == (None, None)


async def test_ten_megabytes_read_back_over_grpc_losslessly(tmp_path: Path) -> None:
    """A background command's 10.9 MB of output, read through ProcessOutput with base64 and
    cursors, has exactly the SHA-256 of what it wrote."""
    expected = "".join(f"{i}\n" for i in range(1, SEQ_COUNT + 1)).encode()
    async with server(tmp_path) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        got = await start(stub, session, f"seq 1 {SEQ_COUNT}")
        process_id = got["process_id"]
        digest = hashlib.sha256()
        cursor, reads = 0, 0
        started = time.perf_counter()
        with anyio.fail_after(PATIENCE):
            while True:
                got = result_json(
                    await call(
                        stub,
                        session,
                        "ProcessOutput",
                        process_id=process_id,
                        cursor=cursor,
                        limit_bytes=1 << 20,
                        encoding="base64",
                        wait="any",
                    )
                )
                reads += 1
                assert not got["gap"]
                digest.update(base64.b64decode(got["output"]))
                cursor = got["next_cursor"]
                if got["status"] == "exited" and cursor == got["total_bytes"]:
                    break
        elapsed = time.perf_counter() - started
    assert cursor == len(expected)
    assert digest.hexdigest() == hashlib.sha256(expected).hexdigest()
    print(
        f"{len(expected) / 1e6:.1f} MB read back over gRPC in {reads} calls, {elapsed:.2f} s "
        f"({len(expected) / 1e6 / elapsed:.0f} MB/s)"
    )


async def test_a_mebibyte_of_the_worst_text_fits_one_response(tmp_path: Path) -> None:
    """ProcessOutput of 1 MiB of invalid UTF-8 as text (each byte a 3-byte U+FFFD) with the
    largest limit is one successful response, shortened rather than over the message cap."""
    async with server(tmp_path) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        process_id = (await start(stub, session, INVALID_UTF8))["process_id"]
        with anyio.fail_after(PATIENCE):
            await call(
                stub,
                session,
                "ProcessOutput",
                process_id=process_id,
                wait="all",
                timeout_ms=WAIT_MS,
            )
        got = result_json(
            await call(stub, session, "ProcessOutput", process_id=process_id, limit_bytes=1 << 20)
        )
        assert got["status"] == "exited"
        assert got["output"] == "\ufffd" * got["next_cursor"]
        assert 0 < got["next_cursor"] < 1 << 20


async def test_another_sessions_or_loops_process_is_not_found(tmp_path: Path) -> None:
    """A process ID used from another session or another loop of the same session is
    not_found for output and stop, and ProcessInput cannot even be prepared with it."""
    async with server(tmp_path) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        process_id = (await start(stub, session, "cat"))["process_id"]
        other_session = await open_session(stub)
        other_loop = (
            await stub.OpenLoop(tool_service_pb2.OpenLoopRequest(session_id=session))
        ).loop_id
        for where, loop in ((other_session, ""), (session, other_loop)):
            for tool in ("ProcessOutput", "ProcessStop"):
                response = await call(stub, where, tool, loop_id=loop, process_id=process_id)
                assert response.result.error_code == "not_found"
                assert response.call.state == tool_call_pb2.STATE_FAILED
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await prepare(
                    stub,
                    where,
                    "ProcessInput",
                    {"process_id": process_id, "data": "x"},
                    loop_id=loop,
                )
            assert failure(raised.value).reason == "ARGUMENTS_INVALID"
        mine = await call(stub, session, "ProcessOutput", process_id=process_id)
        assert result_json(mine)["status"] == "running"


async def test_stdin_writes_are_gated_by_process_input_rules(tmp_path: Path) -> None:
    """ProcessInput's requirement is process.input matched against the original command: a
    deny rule for that command denies the write, and the default allows it."""
    deny = {"effect": "deny", "kind": "process.input", "match": "exec sleep 1000.94"}
    async with serve(tmp_path, rules=[*allow(*COMMANDS), deny]) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        denied_id = (await start(stub, session, "exec sleep 1000.94"))["process_id"]
        cat_id = (await start(stub, session, "cat"))["process_id"]
        denied = await prepare(
            stub, session, "ProcessInput", {"process_id": denied_id, "data": "x"}, evaluate=True
        )
        assert denied.state == tool_call_pb2.STATE_DENIED
        assert [(r.kind, r.match) for r in denied.requirements] == [
            ("process.input", "exec sleep 1000.94")
        ]
        allowed = await call(stub, session, "ProcessInput", process_id=cat_id, data="hi\n")
        assert result_json(allowed)["accepted_bytes"] == 3


async def test_input_backpressure_is_bounded_and_the_server_stays_responsive(
    tmp_path: Path,
) -> None:
    """A 1 MB write to a process that never reads ends with input_backpressure within the
    configured bound, while other calls on the same session are answered meanwhile."""
    async with server(tmp_path, processes={"input_timeout_seconds": 0.5}) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        stuck = (await start(stub, session, "exec sleep 1000.93"))["process_id"]
        other = (await start(stub, session, "cat"))["process_id"]
        outcome: dict[str, Any] = {}

        async def write() -> None:
            started = time.monotonic()
            response = await call(
                stub, session, "ProcessInput", process_id=stuck, data="z" * 1_000_000
            )
            outcome.update(result_json(response), seconds=time.monotonic() - started)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(write)
            polled = await call(stub, session, "ProcessOutput", process_id=other)
            await stub.GetSession(tool_service_pb2.GetSessionRequest(session_id=session))
            # Answered while the write was still stuck: the order of events says so whatever
            # the machine's speed (a time limit on these two calls would not).
            assert not outcome
            assert result_json(polled)["status"] == "running"
        assert outcome["error"] == "input_backpressure"
        assert 0 < outcome["accepted_bytes"] < 1_000_000
        assert 0.4 < outcome["seconds"] < 3


async def test_the_ninth_running_process_of_a_loop_is_a_process_limit(tmp_path: Path) -> None:
    """Eight background processes run in a loop; preparing a ninth is RESOURCE_EXHAUSTED /
    PROCESS_LIMIT (nothing stored), while another loop can still start one."""
    async with server(tmp_path) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        for _ in range(8):
            await start(stub, session, "exec sleep 1000.93")
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await run(stub, session, "Bash", {"command": "cat", "background": True})
        got = failure(raised.value)
        assert (got.code, got.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "PROCESS_LIMIT")
        loop = (await stub.OpenLoop(tool_service_pb2.OpenLoopRequest(session_id=session))).loop_id
        assert (await start(stub, session, "cat", loop_id=loop))["status"] == "running"


@pytest.mark.parametrize(
    "command",
    ["nohup sleep 5", "sleep 5 &", "setsid sleep 5", "sleep 5 & disown", "bash -c 'sleep 5 &'"],
)
async def test_supervision_escapes_are_refused_at_prepare(harness: Harness, command: str) -> None:
    """A background command that would leave the supervisor's tree is ARGUMENTS_INVALID."""
    stub = harness.stub()
    session = await open_session(stub)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await prepare(stub, session, "Bash", {"command": command, "background": True})
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert failure(raised.value).fields == ["arguments.command"]


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
async def test_close_session_terminates_every_tree_before_it_returns(
    tmp_path: Path, sandbox: str
) -> None:
    """Right after CloseSession returns, no process of the session's trees exists, one that
    ignores SIGTERM included."""
    async with server(tmp_path, sandbox=sandbox, processes={"close_grace_seconds": 0.2}) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        for mode in ("plain", "stubborn"):
            got = await start(stub, session, SLEEPER.format(marker=CLOSE_MARK, mode=mode))
            await until_ready(stub, session, got["process_id"])
        assert len(pids_running(CLOSE_MARK)) == 2
        with anyio.fail_after(PATIENCE):
            await stub.CloseSession(tool_service_pb2.CloseSessionRequest(session_id=session))
        assert pids_running(CLOSE_MARK) == []


async def test_server_shutdown_terminates_every_tree(tmp_path: Path) -> None:
    """Leaving the server's context (graceful shutdown) leaves no supervised process."""
    with anyio.fail_after(PATIENCE):
        async with server(tmp_path, processes={"close_grace_seconds": 0.2}) as harness:
            stub = harness.stub()
            session = await open_session(stub)
            for mode in ("plain", "stubborn"):
                got = await start(stub, session, SLEEPER.format(marker=SHUTDOWN_MARK, mode=mode))
                await until_ready(stub, session, got["process_id"])
            assert len(pids_running(SHUTDOWN_MARK)) == 2
    assert pids_running(SHUTDOWN_MARK) == []
