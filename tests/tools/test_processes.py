"""The process supervisor and the ProcessOutput / ProcessInput / ProcessStop tools, over real
processes started by a real runner (no server: see tests/e2e/test_background_processes.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import select
import shutil
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from callgate.server.core.definitions import Service
from callgate.server.core.errors import InvalidArgument, ResourceExhausted
from callgate.server.core.models import ToolResult
from callgate.server.core.paths import DEFAULT_DENIED_GLOBS, ProtectedPaths, Workspace
from callgate.server.core.resources import SessionResources
from callgate.server.core.tool import LoopState, ToolContext, ToolLimits, ToolPlugin
from callgate.server.sandbox.bwrap import BwrapRunner
from callgate.server.sandbox.runner import CommandRunner, CommandSpec, RunningCommand
from callgate.server.sandbox.unconfined import UnconfinedRunner
from callgate.server.tools.catalog import process_definition
from callgate.server.tools.processes.process_tools import (
    ProcessInput,
    ProcessOutput,
    ProcessServices,
    ProcessStop,
)
from callgate.server.tools.processes.supervisor import (
    ProcessLimitReached,
    ProcessReason,
    ProcessSupervisor,
    SupervisedProcess,
    SupervisorClosed,
    SupervisorSettings,
)
from callgate.server.tools.registry import ToolRegistry
from tests.tools.drive import execute, invalid_field

pytestmark = pytest.mark.anyio

KIB = 1 << 10
PATIENCE = 60
"""Seconds a wait for a process (its start, output or end) may take before the test fails: only
a failure gets there, but a loaded machine may be slow to start and schedule processes."""
WAIT_MS = 30_000
"""ProcessOutput's own wait for output that is sure to come (ended by the output, not by this)."""


@dataclass
class Session:
    """One session's resources with a loop context, plus the services the tools share."""

    services: ProcessServices
    resources: SessionResources
    workspace: Path
    runner: CommandRunner

    def context(self, loop_id: str = "loop_a") -> ToolContext:
        return ToolContext(
            session_id=self.resources.session_id,
            loop=LoopState(loop_id),
            workspace=Workspace(str(self.workspace), ProtectedPaths(DEFAULT_DENIED_GLOBS)),
            limits=ToolLimits(),
            resources=self.resources,
        )

    @property
    def supervisor(self) -> ProcessSupervisor:
        return self.services.supervisor(self.context())

    async def start(
        self, command: str, loop_id: str = "loop_a", time_limit: float | None = None
    ) -> SupervisedProcess:
        spec = CommandSpec(
            command=command,
            workdir=str(self.workspace),
            workspace=str(self.workspace),
            home=str(self.workspace),
            tmp=str(self.workspace),
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
            stdin=True,
        )
        return await self.supervisor.start(
            loop_id, command, lambda: self.runner.start(spec), time_limit
        )


def make_runner(sandbox: str) -> CommandRunner:
    if sandbox == "bwrap":
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            pytest.skip("bubblewrap is not installed")
        return BwrapRunner(bwrap)
    return UnconfinedRunner()


@asynccontextmanager
async def open_session(
    tmp_path: Path, settings: SupervisorSettings | None = None, sandbox: str = "none"
) -> AsyncIterator[Session]:
    """A session whose background tasks run in a task group, closed (processes and all) on
    exit."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    async with anyio.create_task_group() as tasks:
        resources = SessionResources("ses_test", tmp_path / "sessions", tasks.start_soon)
        try:
            yield Session(ProcessServices(settings), resources, workspace, make_runner(sandbox))
        finally:
            with anyio.fail_after(PATIENCE):
                await resources.aclose()
            tasks.cancel_scope.cancel()


def payload(result: ToolResult) -> dict[str, object]:
    value = json.loads(result.json)
    assert isinstance(value, dict)
    return value


async def output(
    session: Session, loop_id: str = "loop_a", **arguments: object
) -> dict[str, object]:
    return payload(
        await execute(ProcessOutput(session.services), arguments, session.context(loop_id))
    )


def listed(got: dict[str, object]) -> list[dict[str, object]]:
    """The per-process entries of a ProcessOutput result for process_ids."""
    entries = got["processes"]
    assert isinstance(entries, list)
    return entries


async def wait_finished(process: SupervisedProcess) -> None:
    with anyio.fail_after(PATIENCE):
        await process.finished.wait()


# Says "ready" once every background job of the shell runs its own program (has exec'd).
# Digits that make this test run's marker arguments its own (runs may be concurrent).
RUN = f"{secrets.randbelow(10**9):09d}"


def marker(base: str) -> str:
    """A sleep argument unique to this test run, e.g. 1000.789<RUN>."""
    return base + RUN


def ready_when_sleeping(mark: str) -> str:
    """Says "ready" once every background job of the shell runs its own program (its
    argv holds `mark`), i.e. has exec'd."""
    return (
        f"for p in $(jobs -p); do until grep -qzxF {mark} /proc/$p/cmdline; do :; done; done; "
        "echo ready; wait"
    )


def pids_running(marker: str) -> list[int]:
    """PIDs of live processes with `marker` as one whole argument (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if marker.encode() in argv:
            found.append(int(entry))
    return found


# Output ---------------------------------------------------------------------------------------


async def test_ten_megabytes_read_back_losslessly_with_cursors(tmp_path: Path) -> None:
    """Over 10 MB of output, read with base64 and next cursors while it is produced,
    reassembles to exactly the bytes the command wrote."""
    count = 1_500_000
    expected = "".join(f"{i}\n" for i in range(1, count + 1)).encode()
    assert len(expected) > 10_000_000
    async with open_session(tmp_path) as session:
        process = await session.start(f"seq 1 {count}")
        cursor = 0
        digest = hashlib.sha256()
        started = time.perf_counter()
        with anyio.fail_after(PATIENCE):
            while True:
                got = await output(
                    session,
                    process_id=process.process_id,
                    cursor=cursor,
                    limit_bytes=1 << 20,
                    encoding="base64",
                    wait="any",
                )
                assert got["gap"] is False
                digest.update(base64.b64decode(str(got["output"])))
                cursor = int(str(got["next_cursor"]))
                if got["status"] == "exited" and cursor == got["total_bytes"]:
                    break
        elapsed = time.perf_counter() - started
    assert cursor == len(expected)
    assert digest.hexdigest() == hashlib.sha256(expected).hexdigest()
    assert (got["exit_code"], got["reason"]) == (0, "exited")
    print(f"{len(expected)} bytes produced and read back in {elapsed:.2f} s")


async def test_a_gap_is_reported_when_ring_and_spool_overflow(tmp_path: Path) -> None:
    """Ring 64 KiB + spool 256 KiB, 1 MB written: reading from 0 gets the spooled head, then a
    result with gap true and dropped_bytes, then the tail; never a silent jump."""
    settings = SupervisorSettings(ring_bytes=64 * KIB, spool_bytes=256 * KIB)
    async with open_session(tmp_path, settings) as session:
        process = await session.start("head -c 1000000 /dev/zero | tr '\\0' 'y'")
        await wait_finished(process)
        pieces: list[dict[str, object]] = []
        cursor = 0
        while cursor < 1_000_000:
            got = await output(
                session, process_id=process.process_id, cursor=cursor, limit_bytes=200 * KIB
            )
            pieces.append(got)
            cursor = int(str(got["next_cursor"]))
    gaps = [p for p in pieces if p["gap"]]
    assert len(gaps) == 1
    assert gaps[0]["start_cursor"] == 1_000_000 - 64 * KIB
    assert gaps[0]["dropped_bytes"] == 1_000_000 - 64 * KIB - 256 * KIB
    text = "".join(str(p["output"]) for p in pieces)
    assert text == "y" * (256 * KIB + 64 * KIB)


async def test_a_cursor_past_the_end_is_cursor_ahead(tmp_path: Path) -> None:
    """A cursor beyond total_bytes is the tool error cursor_ahead, with the total."""
    async with open_session(tmp_path) as session:
        process = await session.start("printf abc")
        await wait_finished(process)
        result = await execute(
            ProcessOutput(session.services),
            {"process_id": process.process_id, "cursor": 4},
            session.context(),
        )
    assert result.is_error
    assert result.error_code == "cursor_ahead"
    assert payload(result)["total_bytes"] == 3


async def test_text_output_is_made_safe(tmp_path: Path) -> None:
    """Colours, carriage returns and invalid UTF-8 are cleaned in text mode and kept
    byte-exact in base64 mode."""
    async with open_session(tmp_path) as session:
        process = await session.start(r"printf '\033[31mred\033[0m\r\n\377ok\n'")
        await wait_finished(process)
        text = await output(session, process_id=process.process_id)
        raw = await output(session, process_id=process.process_id, encoding="base64")
    assert text["output"] == "red\n\ufffdok\n"
    assert base64.b64decode(str(raw["output"])) == b"\x1b[31mred\x1b[0m\r\n\xffok\n"
    assert text["next_cursor"] == raw["next_cursor"] == text["total_bytes"]


async def test_wait_any_returns_on_new_output_and_all_on_every_exit(tmp_path: Path) -> None:
    """wait=any returns once one process has output past its cursor; wait=all returns once
    every process has ended, each within its timeout."""
    async with open_session(tmp_path) as session:
        quiet = await session.start("read line; echo got $line")
        talker = await session.start("echo hello; read line")
        both = [quiet.process_id, talker.process_id]
        with anyio.fail_after(PATIENCE):
            got = await output(session, process_ids=both, wait="any", timeout_ms=WAIT_MS)
        by_id = {p["process_id"]: p for p in listed(got)}
        assert by_id[talker.process_id]["output"] == "hello\n"
        assert by_id[quiet.process_id]["output"] == ""
        # Nothing new past these cursors: any times out (bounded) and returns the state.
        cursors = {talker.process_id: 6}
        started = time.monotonic()
        got = await output(session, process_ids=both, cursors=cursors, wait="any", timeout_ms=200)
        assert 0.15 < time.monotonic() - started < 3
        assert all(p["status"] == "running" for p in listed(got))
        for process in (quiet, talker):
            await execute(
                ProcessInput(session.services),
                {"process_id": process.process_id, "data": "x\n", "eof": True},
                session.context(),
            )
        with anyio.fail_after(PATIENCE):
            got = await output(
                session, process_ids=both, cursors=cursors, wait="all", timeout_ms=WAIT_MS
            )
        assert [p["status"] for p in listed(got)] == ["exited", "exited"]
        assert [p["output"] for p in listed(got)] == ["got x\n", ""]


async def test_process_output_arguments_are_checked_at_prepare(tmp_path: Path) -> None:
    """Exactly one of process_id / process_ids; cursors only with process_ids, for listed IDs;
    no duplicates; bounded limit and timeout."""
    async with open_session(tmp_path) as session:
        tool = ProcessOutput(session.services)
        ctx = session.context()
        assert invalid_field(tool, {}, ctx) == "arguments.process_id"
        assert invalid_field(tool, {"process_id": "a", "process_ids": ["b"]}, ctx) == (
            "arguments.process_id"
        )
        assert invalid_field(tool, {"process_ids": ["a", "a"]}, ctx) == "arguments.process_ids"
        assert invalid_field(tool, {"process_id": "a", "cursors": {"a": 1}}, ctx) == (
            "arguments.cursors"
        )
        assert invalid_field(tool, {"process_ids": ["a"], "cursors": {"b": 1}}, ctx) == (
            "arguments.cursors.b"
        )
        assert invalid_field(tool, {"process_id": "a", "limit_bytes": (1 << 20) + 1}, ctx) == (
            "arguments.limit_bytes"
        )
        assert invalid_field(tool, {"process_id": "a", "timeout_ms": 60_001}, ctx) == (
            "arguments.timeout_ms"
        )
        assert invalid_field(tool, {"process_id": "a", "wait": "some"}, ctx) == "arguments.wait"
        assert invalid_field(tool, {"process_ids": ["a"] * 33}, ctx) == "arguments.process_ids"


# Input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
async def test_input_round_trips_through_cat_and_eof_ends_it(tmp_path: Path, sandbox: str) -> None:
    """Text written to cat's stdin comes back as output; eof ends cat with exit code 0."""
    async with open_session(tmp_path, sandbox=sandbox) as session:
        process = await session.start("cat")
        tool = ProcessInput(session.services)
        ctx = session.context()
        first = await execute(tool, {"process_id": process.process_id, "data": "one\n"}, ctx)
        assert not first.is_error
        assert payload(first)["accepted_bytes"] == 4
        with anyio.fail_after(PATIENCE):
            got = await output(
                session, process_id=process.process_id, wait="any", timeout_ms=WAIT_MS
            )
        assert got["output"] == "one\n"
        last = await execute(
            tool, {"process_id": process.process_id, "data": "twö\n", "eof": True}, ctx
        )
        assert payload(last)["eof"] is True
        await wait_finished(process)
        got = await output(session, process_id=process.process_id, cursor=4)
        assert (got["output"], got["exit_code"], got["reason"]) == ("twö\n", 0, "exited")
        again = await execute(tool, {"process_id": process.process_id, "data": "x"}, ctx)
        assert again.error_code == "process_exited"


async def test_input_requirement_matches_the_original_command(tmp_path: Path) -> None:
    """ProcessInput needs process.input with the process's command as match; the summary
    names only the process and the size, never the data."""
    async with open_session(tmp_path) as session:
        process = await session.start("cat  -u")
        prepared = ProcessInput(session.services).prepare(
            {"process_id": process.process_id, "data": "secret words"}, session.context()
        )
    (requirement,) = prepared.requirements
    assert (requirement.kind, requirement.match) == ("process.input", "cat  -u")
    assert "secret" not in prepared.summary
    assert prepared.summary == f"ProcessInput {process.process_id} (12 bytes)"


async def test_input_to_a_process_that_never_reads_is_backpressure_in_bounded_time(
    tmp_path: Path,
) -> None:
    """1 MiB to a process that never reads stdin stops with input_backpressure within the
    write bound, and other calls keep being served meanwhile."""
    settings = SupervisorSettings(input_timeout_seconds=0.3)
    async with open_session(tmp_path, settings) as session:
        stuck = await session.start(f"sleep {marker('1000.321')}")
        chatty = await session.start("cat")
        tool = ProcessInput(session.services)
        ctx = session.context()
        started = time.monotonic()
        result = await execute(tool, {"process_id": stuck.process_id, "data": "z" * (1 << 20)}, ctx)
        assert time.monotonic() - started < 3
        assert result.error_code == "input_backpressure"
        accepted = int(str(payload(result)["accepted_bytes"]))
        # Whole PIPE_BUF pieces, each taken entirely or not at all: the count is exact.
        assert 0 < accepted < 1 << 20
        assert accepted % select.PIPE_BUF == 0
        # The writer is not stuck and the server is responsive: another process takes input.
        ok = await execute(tool, {"process_id": chatty.process_id, "data": "hi\n"}, ctx)
        assert not ok.is_error
        again = await execute(tool, {"process_id": stuck.process_id, "data": "more"}, ctx)
        assert again.error_code == "input_backpressure"


async def test_input_checks_size_and_owner_at_prepare(tmp_path: Path) -> None:
    """Over 1 MiB, nothing to write, and an unknown or another loop's ID are
    ARGUMENTS_INVALID at Prepare."""
    async with open_session(tmp_path) as session:
        process = await session.start("cat")
        tool = ProcessInput(session.services)
        ctx = session.context()
        assert (
            invalid_field(
                tool, {"process_id": process.process_id, "data": "x" * ((1 << 20) + 1)}, ctx
            )
            == "arguments.data"
        )
        assert invalid_field(tool, {"process_id": process.process_id}, ctx) == "arguments.data"
        assert invalid_field(tool, {"process_id": "proc_nope", "data": "x"}, ctx) == (
            "arguments.process_id"
        )
        with pytest.raises(InvalidArgument):
            tool.prepare({"process_id": process.process_id, "data": "x"}, session.context("b"))


# Stop -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
async def test_stop_modes_end_the_tree_with_their_reasons(tmp_path: Path, sandbox: str) -> None:
    """interrupt -> interrupted (SIGINT), terminate -> terminated, kill -> killed; a
    terminate that is ignored escalates to kill after the grace."""
    async with open_session(tmp_path, sandbox=sandbox) as session:
        tool = ProcessStop(session.services)
        ctx = session.context()
        # A grace meant to be waited out (the ignored SIGTERM) is short; one meant to be cut
        # short by the process ending is long, so that a slow machine cannot make it elapse.
        long_grace = WAIT_MS
        cases = [
            ("echo ready; exec sleep {}", "interrupt", long_grace, "interrupted", 130),
            ("echo ready; exec sleep {}", "terminate", long_grace, "terminated", 143),
            ("echo ready; exec sleep {}", "kill", long_grace, "killed", 137),
            ("trap '' TERM; echo ready; sleep {} & wait", "terminate", 100, "killed", 137),
        ]
        for index, (template, mode, grace, reason, code) in enumerate(cases):
            mark = marker(f"1000.1{index}")
            process = await session.start(template.format(mark))
            with anyio.fail_after(PATIENCE + long_grace / 1000):
                # Stop only once the command is set up (its trap installed).
                ready = await output(
                    session, process_id=process.process_id, wait="any", timeout_ms=WAIT_MS
                )
                assert ready["output"] == "ready\n", template
                result = await execute(
                    tool, {"process_id": process.process_id, "mode": mode, "grace_ms": grace}, ctx
                )
            got = payload(result)
            assert (got["status"], got["reason"], got["exit_code"]) == ("exited", reason, code), (
                template
            )
            assert pids_running(mark) == []


async def test_stop_is_idempotent_on_a_finished_process(tmp_path: Path) -> None:
    """Stopping an ended process changes nothing and returns its final status."""
    async with open_session(tmp_path) as session:
        process = await session.start("exit 7")
        await wait_finished(process)
        result = await execute(
            ProcessStop(session.services), {"process_id": process.process_id}, session.context()
        )
    got = payload(result)
    assert not result.is_error
    assert (got["reason"], got["exit_code"], got["already_finished"]) == ("exited", 7, True)


async def test_a_time_limit_kills_the_tree_as_timed_out(tmp_path: Path) -> None:
    """A process with a time limit is terminated at its deadline with reason timed_out."""
    async with open_session(tmp_path) as session:
        process = await session.start(f"sleep {marker('1000.2')}", time_limit=0.2)
        await wait_finished(process)
    assert process.reason is ProcessReason.TIMED_OUT
    assert pids_running(marker("1000.2")) == []


# Ownership and limits -------------------------------------------------------------------------


async def test_another_loops_process_is_not_found(tmp_path: Path) -> None:
    """Output, input and stop with another loop's process ID answer not_found, exactly like
    an unknown ID."""
    async with open_session(tmp_path) as session:
        process = await session.start("cat", loop_id="loop_a")
        other = session.context("loop_b")
        tools: list[ToolPlugin] = [ProcessOutput(session.services), ProcessStop(session.services)]
        for tool in tools:
            theirs = await execute(tool, {"process_id": process.process_id}, other)
            unknown = await execute(tool, {"process_id": "proc_unknown"}, other)
            assert theirs.error_code == unknown.error_code == "not_found"
            assert payload(theirs).keys() == payload(unknown).keys()
        assert process.is_running


async def test_eight_running_per_loop_and_the_session_limit(tmp_path: Path) -> None:
    """The ninth running process of a loop is refused, at start and by the Prepare-time
    check (another loop may still start one); the session limit counts every loop."""
    settings = SupervisorSettings(max_running_per_session=10)
    async with open_session(tmp_path, settings) as session:
        for _ in range(8):
            await session.start(f"sleep {marker('1000.4')}")
        with pytest.raises(ProcessLimitReached) as raised:
            await session.start(f"sleep {marker('1000.4')}")
        assert (raised.value.scope, raised.value.limit) == ("loop", 8)
        # The Prepare-time form of the same check.
        with pytest.raises(ResourceExhausted) as exhausted:
            session.services.check_capacity(session.context())
        assert exhausted.value.reason == "PROCESS_LIMIT"
        session.services.check_capacity(session.context("loop_b"))
        await session.start(f"sleep {marker('1000.4')}", loop_id="loop_b")
        await session.start(f"sleep {marker('1000.4')}", loop_id="loop_b")
        with pytest.raises(ProcessLimitReached) as raised:
            await session.start(f"sleep {marker('1000.4')}", loop_id="loop_c")
        assert (raised.value.scope, raised.value.limit) == ("session", 10)
    assert pids_running(marker("1000.4")) == []


async def test_the_hundred_newest_finished_processes_are_kept(tmp_path: Path) -> None:
    """Past 100 finished processes the oldest is forgotten (not_found) and its spool file
    removed; running ones are never evicted."""
    async with open_session(tmp_path) as session:
        runner = await session.start("cat")
        finished = []
        for _ in range(101):
            process = await session.start("printf x")
            await wait_finished(process)
            finished.append(process)
        spools = session.resources.private_dir() / "processes"
        oldest = await output(session, process_id=finished[0].process_id)
        newest = await output(session, process_id=finished[-1].process_id)
        assert oldest["error"] == "not_found"
        assert newest["output"] == "x"
        assert session.supervisor.kept_count() == 101
        assert not (spools / f"{finished[0].process_id}.out").exists()
        assert (spools / f"{finished[1].process_id}.out").exists()
        assert runner.is_running


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
async def test_closing_the_session_terminates_every_tree(tmp_path: Path, sandbox: str) -> None:
    """After the session's resources close, no process of any tree is left (one of them
    ignores SIGTERM), and the spool files are gone."""
    settings = SupervisorSettings(close_grace_seconds=0.2)
    mark = marker("1000.789")
    async with open_session(tmp_path, settings, sandbox) as session:
        processes = [
            await session.start(f"sleep {mark} & sleep {mark} & {ready_when_sleeping(mark)}"),
            await session.start(
                f"trap '' TERM INT; sleep {mark} & {ready_when_sleeping(mark)}", loop_id="loop_b"
            ),
        ]
        for process in processes:
            with anyio.fail_after(PATIENCE):
                got = await output(
                    session,
                    process.loop_id,
                    process_id=process.process_id,
                    wait="any",
                    timeout_ms=WAIT_MS,
                )
            assert got["output"] == "ready\n"
        spools = session.resources.private_dir() / "processes"
        assert len(list(spools.iterdir())) == 2
        assert len(pids_running(mark)) == 3
        with anyio.fail_after(PATIENCE):
            await session.resources.aclose()
        assert pids_running(mark) == []
        assert not spools.exists()


def test_process_tools_register_with_described_schemas() -> None:
    """ProcessOutput, ProcessInput and ProcessStop register; only ProcessInput emits a
    requirement kind (process.input); every argument is described for the model."""
    registry = ToolRegistry([process_definition()], {Service.PROCESSES: ProcessServices()})
    infos = {info.name: info for info in registry.infos()}
    assert sorted(infos) == ["ProcessInput", "ProcessOutput", "ProcessStop"]
    assert infos["ProcessInput"].requirement_kinds == ("process.input",)
    assert infos["ProcessOutput"].requirement_kinds == ()
    for info in infos.values():
        schema = json.loads(info.input_schema_json)
        assert schema["additionalProperties"] is False
        assert all("description" in field for field in schema["properties"].values())


async def test_a_command_started_while_the_session_closes_is_gone_when_close_returns(
    tmp_path: Path,
) -> None:
    """A start whose runner is still starting the command when the close begins ends with
    SupervisorClosed, and its tree is gone by the time the close returns."""
    mark = marker("1000.55")
    async with open_session(tmp_path) as session:
        supervisor = session.supervisor
        release = anyio.Event()
        outcome: list[BaseException] = []
        spec = CommandSpec(
            command=f"exec sleep {mark}",
            workdir=str(session.workspace),
            workspace=str(session.workspace),
            home=str(session.workspace),
            tmp=str(session.workspace),
            env={"PATH": "/usr/bin:/bin"},
        )

        async def slow_launch() -> RunningCommand:
            await release.wait()
            return await session.runner.start(spec)

        async def starter() -> None:
            try:
                await supervisor.start("loop_a", f"exec sleep {mark}", slow_launch, None)
            except SupervisorClosed as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(starter)
            await anyio.lowlevel.checkpoint()
            tasks.start_soon(session.resources.aclose)
            with anyio.fail_after(5):
                while not supervisor.closed:
                    await anyio.lowlevel.checkpoint()
            release.set()
        assert len(outcome) == 1
        assert pids_running(mark) == []


async def test_text_output_never_takes_more_room_than_base64_would(tmp_path: Path) -> None:
    """1 MiB of invalid bytes or of quotes, read as text with limit 1 MiB: the result's JSON
    stays within the base64 size of the limit, and cursors still cover every byte."""
    async with open_session(tmp_path) as session:
        for command in (
            "head -c 1048576 /dev/zero | tr '\\0' '\\377'",
            "head -c 1048576 /dev/zero | tr '\\0' '\"'",
        ):
            process = await session.start(command)
            await wait_finished(process)
            cursor, reads = 0, 0
            while cursor < 1 << 20:
                result = await execute(
                    ProcessOutput(session.services),
                    {"process_id": process.process_id, "cursor": cursor, "limit_bytes": 1 << 20},
                    session.context(),
                )
                assert len(result.json.encode()) <= (1 << 20) * 4 // 3 + 512
                cursor = int(str(payload(result)["next_cursor"]))
                reads += 1
            assert 2 <= reads <= 4
