"""Load: many concurrent agents, each in its own session, against one `callgate serve`.

One real `callgate serve` process (headless, on a Unix socket, with a config that allows
workspace writes and commands, so no call waits for a human) and, on one plain asyncio loop
in this process, `--agents` agents (default 64), each with its own client (channel and
Exchange stream) and its own session. Once every session is open the agents start together,
and each runs `--calls` calls (default 200) through `session.run`, cycling through this mix
of ten:

  ReadFile of a small shared file, Glob, Grep, WriteFile of a new file in the agent's own
  directory, ReadFile of it, EditFile of it, TaskCreate, TaskList, Bash (`true` and `echo`
  in turn: 10% of the calls, each a sandboxed process), ReadFile of a line range.

The requirement is zero errors: every exception, every result with `is_error`, and every
result that is not what the call must produce counts as one; the benchmark prints the first
few and exits 1 if there is any. It prints the server's memory (VmRSS and VmHWM from
/proc/<pid>/status) right after startup and after the load, its own memory, the wall time,
calls/s and per-call latency percentiles (all calls, Bash, the rest, each tool). The server
is stopped on exit, failed or not.

With `--only TOOL` every call is that tool's step of the mix (a tool's throughput alone), and
`--ripgrep on|off` picks Grep's engine (ripgrep confined in a process per call, or the walk
inside the server).

Usage: bench/load.py [--agents N] [--calls N] [--sandbox auto|bwrap|none]
                     [--log-level LEVEL] [--only TOOL] [--ripgrep on|off] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Final

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from callgate.client import CallgateClient, CallgateClientError, ClientSession, ToolResult
from callgate.server.config import LimitsConfig

DEFAULT_AGENTS: Final = 64
DEFAULT_CALLS: Final = 200
MAX_CALLS: Final = 2000
"""Each agent creates one task per ten calls, and a loop holds at most 256 tasks."""
TOOL_SERVICE: Final = "callgate.v1.ToolService"
SANDBOX_TRAILER: Final = "callgate-sandbox-mode"
START_TIMEOUT: Final = 20.0
"""Seconds the server may take to become ready."""
CALL_TIMEOUT: Final = 30.0
"""Seconds one call (or opening a session) may take before it counts as an error."""
STOP_TIMEOUT: Final = 5.0
"""Seconds the server gets to exit after SIGTERM before it is killed."""
SHOWN_ERRORS: Final = 5
SHARED_MODULES: Final = 8
NOTES: Final = "shared/notes.txt"
DRAFT: Final = "status: draft"
DONE: Final = "status: done"
MIX: Final = (
    "ReadFile",
    "Glob",
    "Grep",
    "WriteFile",
    "ReadFile",
    "EditFile",
    "TaskCreate",
    "TaskList",
    "Bash",
    "ReadFile",
)

# Fast reconnects while polling for readiness; the default first backoff is a whole second.
_PROBE_OPTIONS: Final = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 200),
]


class BenchmarkError(Exception):
    """The benchmark could not run (the server failed to start, /proc is missing)."""


@dataclass(frozen=True)
class Settings:
    agents: int
    calls: int
    sandbox: str
    log_level: str
    # One tool of the mix alone (its step for every call), or "" for the whole mix.
    only: str = ""
    # Grep's engine: the server's default when None, else ripgrep (confined, a process per
    # call) or the in-server walk.
    ripgrep: bool | None = None


# --- the workspace ------------------------------------------------------------------------


def write_fixture(workspace: Path) -> None:
    """The shared files every agent reads, globs and greps: a 3.8 KiB text file and a few
    small Python modules."""
    shared = workspace / "shared"
    shared.mkdir(parents=True)
    line = "the quick brown fox jumps over the lazy dog, line "
    (shared / "notes.txt").write_text(
        "".join(f"{line}{number:03d}\n" for number in range(1, 73)), encoding="utf-8"
    )
    for module in range(SHARED_MODULES):
        functions = "".join(
            f"def handler_{module}_{number}(value: int) -> int:\n"
            f"    return value * {number} + {module}\n\n\n"
            for number in range(1, 9)
        )
        (shared / f"module_{module}.py").write_text(
            f'"""Module {module}."""\n\n\n{functions}', encoding="utf-8"
        )
    (workspace / "agents").mkdir()


def write_config(root: Path, settings: Settings) -> tuple[Path, list[str]]:
    """The config file, and a note for every limit raised above its default."""
    defaults = LimitsConfig()
    needed = {
        "max_sessions": (defaults.max_sessions, settings.agents),
        # Each agent runs one call at a time.
        "max_running_total": (defaults.max_running_total, settings.agents),
    }
    raised = {key: want for key, (default, want) in needed.items() if want > default}
    notes = [
        f"[limits] {key} raised from {default} to {want}"
        if key in raised
        else f"[limits] {key} {default} (default) suffices for {want}"
        for key, (default, want) in needed.items()
    ]
    limits = "".join(f"{key} = {value}\n" for key, value in raised.items())
    config = root / "callgate.toml"
    config.write_text(
        f'approval_mode = "headless"\n'
        f'sandbox = "{settings.sandbox}"\n'
        f'log_level = "{settings.log_level}"\n\n'
        '[access]\nworkspace_write = "allow"\ncommand = "allow"\n'
        + (f"\n[limits]\n{limits}" if limits else "")
        + (
            f"\n[tools]\nripgrep = {'true' if settings.ripgrep else 'false'}\n"
            if settings.ripgrep is not None
            else ""
        ),
        encoding="utf-8",
    )
    return config, notes


# --- the server ---------------------------------------------------------------------------


def callgate_executable() -> str:
    beside = Path(sys.executable).parent / "callgate"
    found = str(beside) if beside.exists() else shutil.which("callgate")
    if found is None:
        raise BenchmarkError("no callgate executable; run `make install`")
    return found


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def scan_log(path: Path) -> tuple[int, list[str]]:
    """The number of lines in the server's log, and those at warning or error level (JSON
    lines) or of unknown shape (a traceback, say); the CLI's `callgate: ...` banner lines
    (where it serves, the sandbox, the tokens) are neither."""
    problems: list[str] = []
    count = 0
    with path.open(encoding="utf-8", errors="replace") as log:
        for line in log:
            count += 1
            if line.startswith("callgate: "):
                continue
            try:
                level = json.loads(line).get("level", "")
            except (ValueError, AttributeError):
                level = "unparsed"
            if level in ("warning", "error", "critical", "unparsed"):
                problems.append(line.rstrip("\n"))
    return count, problems


async def stop_process(process: asyncio.subprocess.Process) -> None:
    """Terminates the server and waits for it, killing it if it does not exit."""
    if process.returncode is not None:
        return
    process.terminate()
    try:
        await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()


@dataclass(frozen=True)
class Server:
    target: str
    token: str
    pid: int
    sandbox_mode: str
    log: Path


@asynccontextmanager
async def callgate_server(root: Path, config: Path) -> AsyncIterator[Server]:
    """`callgate serve` on a Unix socket in `root`, with its own state directory."""
    socket, state, log_path = root / "cg.sock", root / "state", root / "server.log"
    target = f"unix://{socket}"
    with log_path.open("w") as log:
        process = await asyncio.create_subprocess_exec(
            callgate_executable(),
            "serve",
            "--config",
            str(config),
            "--listen",
            target,
            "--workspace",
            str(root / "ws"),
            "--state-dir",
            str(state),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        try:
            mode = await wait_until_serving(process, target, log_path)
            token = (state / "tokens" / "agent").read_text(encoding="utf-8").strip()
            yield Server(target, token, process.pid, mode, log_path)
        finally:
            await stop_process(process)


async def wait_until_serving(process: asyncio.subprocess.Process, target: str, log: Path) -> str:
    """Polls the gRPC health check of ToolService until it is SERVING, for a bounded time;
    returns the sandbox mode the server reports in the check's trailing metadata."""
    deadline = time.monotonic() + START_TIMEOUT
    request = health_pb2.HealthCheckRequest(service=TOOL_SERVICE)
    async with grpc.aio.insecure_channel(target, options=_PROBE_OPTIONS) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            if process.returncode is not None:
                raise BenchmarkError(
                    f"callgate serve exited with {process.returncode}:\n{log_tail(log)}"
                )
            try:
                call = health.Check(request, timeout=1.0)
                response = await call
                if response.status == health_pb2.HealthCheckResponse.SERVING:
                    for key, value in await call.trailing_metadata() or ():
                        if key == SANDBOX_TRAILER:
                            return str(value)
                    return "unknown"
            except grpc.aio.AioRpcError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise BenchmarkError(
                    f"callgate serve was not SERVING within {START_TIMEOUT} s:\n{log_tail(log)}"
                )
            await asyncio.sleep(0.05)


# --- memory -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Memory:
    """VmRSS and VmHWM (peak RSS) of one process, in KiB."""

    rss_kib: int
    hwm_kib: int

    @property
    def rss_mib(self) -> float:
        return self.rss_kib / 1024

    @property
    def hwm_mib(self) -> float:
        return self.hwm_kib / 1024


def memory(pid: int | str) -> Memory:
    """Reads /proc/<pid>/status ("self" for this process)."""
    values: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    values[key] = int(rest.split()[0])  # "  123456 kB"
    except OSError as exc:
        raise BenchmarkError(f"cannot read /proc/{pid}/status: {exc.strerror}") from None
    if len(values) != 2:
        raise BenchmarkError(f"/proc/{pid}/status has no VmRSS or VmHWM")
    return Memory(values["VmRSS"], values["VmHWM"])


# --- the agents ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CallError:
    agent: int
    index: int
    tool: str
    reason: str
    message: str


@dataclass
class Tally:
    """What every agent recorded: latencies by tool (ns) and errors, in order."""

    latencies: defaultdict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    errors: list[CallError] = field(default_factory=list)
    exceptions: int = 0
    error_results: int = 0
    wrong_results: int = 0

    @property
    def calls(self) -> int:
        return sum(len(samples) for samples in self.latencies.values())


class Rendezvous:
    """Set once `count` agents have arrived (an agent that failed arrives too)."""

    def __init__(self, count: int) -> None:
        self._missing = count
        self._event = asyncio.Event()
        if count == 0:
            self._event.set()

    def arrive(self) -> None:
        self._missing -= 1
        if self._missing == 0:
            self._event.set()

    async def wait(self) -> None:
        await self._event.wait()


@dataclass
class Phases:
    """Holds the agents together: all sessions open, then go; all done, then release (the
    sessions stay open until the after-load memory is read)."""

    ready: Rendezvous
    done: Rendezvous
    go: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class Planned:
    tool: str
    args: dict[str, object]
    expect: str = ""
    """Text the result must contain; empty for no check beyond `is_error`."""


def plan(agent: int, index: int, only: str = "") -> Planned:
    """The `index`-th call of agent `agent`: step `index % 10` of the mix, on files of its
    own in cycle `index // 10`; with `only`, that tool's step, in cycle `index`."""
    cycle, step = divmod(index, len(MIX))
    if only:
        cycle, step = index, MIX.index(only)
    own = f"agents/a{agent:03d}/note{cycle:03d}.txt"
    module = f"shared/module_{(agent + cycle) % SHARED_MODULES}.py"
    match step:
        case 0:
            return Planned("ReadFile", {"path": NOTES}, "lazy dog, line 072")
        case 1:
            return Planned("Glob", {"pattern": "**/*.py", "root": "shared"}, "module_7.py")
        case 2:
            handler = f"handler_{(agent + cycle) % SHARED_MODULES}_{cycle % 8 + 1}"
            return Planned("Grep", {"pattern": rf"def {handler}\(", "path": "shared"}, handler)
        case 3:
            content = f"agent {agent} cycle {cycle}\n{DRAFT}\n"
            return Planned("WriteFile", {"path": own, "content": content}, "wrote")
        case 4:
            return Planned("ReadFile", {"path": own}, DRAFT)
        case 5:
            return Planned("EditFile", {"path": own, "old": DRAFT, "new": DONE}, DONE)
        case 6:
            subject = f"Check note {cycle} of agent {agent}"
            return Planned("TaskCreate", {"subject": subject, "description": own}, subject)
        case 7:
            return Planned("TaskList", {}, f"Check note {cycle} of agent {agent}")
        case 8:
            if cycle % 2 == 0:
                return Planned("Bash", {"command": "true"})
            marker = f"load-{agent}-{index}"
            return Planned("Bash", {"command": f"echo {marker}"}, marker)
        case _:
            return Planned("ReadFile", {"path": module, "start_line": 4, "end_line": 12}, "def ")


def wrong(result: ToolResult, planned: Planned) -> str:
    """Why `result` is not what `planned` must produce, or empty when it is."""
    if planned.tool == "Bash" and result.exit_code != 0:
        return f"exit code {result.exit_code}"
    if planned.expect and planned.expect not in result.text + result.json:
        return f"the result lacks {planned.expect!r}"
    return ""


async def one_call(
    session: ClientSession, agent: int, index: int, tally: Tally, only: str = ""
) -> None:
    """Runs one planned call and records its latency, or the error it ended in."""
    planned = plan(agent, index, only)
    try:
        # asyncio.timeout arms a timer rather than wrapping the call in a task, and it is
        # armed before the clock starts.
        async with asyncio.timeout(CALL_TIMEOUT):
            started = time.perf_counter_ns()
            result = await session.run(planned.tool, planned.args)
            elapsed = time.perf_counter_ns() - started
    except CallgateClientError as exc:
        tally.exceptions += 1
        tally.errors.append(CallError(agent, index, planned.tool, exc.reason, exc.message))
        return
    except TimeoutError:
        tally.exceptions += 1
        message = f"no result within {CALL_TIMEOUT:g} s"
        tally.errors.append(CallError(agent, index, planned.tool, "TIMEOUT", message))
        return
    except Exception as exc:  # anything else is an error of the run too, and is counted
        tally.exceptions += 1
        tally.errors.append(CallError(agent, index, planned.tool, type(exc).__name__, str(exc)))
        return
    tally.latencies[planned.tool].append(elapsed)
    if result.is_error:
        tally.error_results += 1
        reason = f"is_error ({result.error_code})"
        tally.errors.append(CallError(agent, index, planned.tool, reason, result.text[:300]))
    elif problem := wrong(result, planned):
        tally.wrong_results += 1
        tally.errors.append(CallError(agent, index, planned.tool, "UNEXPECTED_RESULT", problem))


async def run_agent(
    agent: int, server: Server, settings: Settings, phases: Phases, tally: Tally
) -> None:
    """Opens a client and a session, waits for the others, runs its calls, and waits to be
    released before it closes the session. Every failure is recorded, none is raised."""
    ready = done = False
    step = "OpenSession"
    try:
        async with CallgateClient(server.target, token=server.token) as client:
            async with asyncio.timeout(CALL_TIMEOUT):
                session = await client.open_session()
            try:
                ready = True
                phases.ready.arrive()
                await phases.go.wait()
                for index in range(settings.calls):
                    await one_call(session, agent, index, tally, settings.only)
                done = True
                phases.done.arrive()
                await phases.release.wait()
            finally:
                step = "CloseSession"
                async with asyncio.timeout(CALL_TIMEOUT):
                    await session.close()
    except CallgateClientError as exc:
        tally.exceptions += 1
        tally.errors.append(CallError(agent, -1, step, exc.reason, exc.message))
    except TimeoutError:
        tally.exceptions += 1
        message = f"no answer within {CALL_TIMEOUT:g} s"
        tally.errors.append(CallError(agent, -1, step, "TIMEOUT", message))
    except Exception as exc:  # counted like every other failure
        tally.exceptions += 1
        tally.errors.append(CallError(agent, -1, step, type(exc).__name__, str(exc)))
    finally:
        if not ready:
            phases.ready.arrive()
        if not done:
            phases.done.arrive()


# --- the run ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Results:
    settings: Settings
    started: datetime
    sandbox_mode: str
    limit_notes: list[str]
    tally: Tally
    open_seconds: float
    load_seconds: float
    close_seconds: float
    total_seconds: float
    server_before: Memory
    server_after: Memory
    server_closed: Memory
    client_before: Memory
    client_after: Memory
    log_lines: int
    log_problems: list[str]

    @property
    def errors(self) -> int:
        return len(self.tally.errors)


async def run(settings: Settings, root: Path) -> Results:
    started_at = datetime.now().astimezone()
    started = time.perf_counter()
    config, notes = write_config(root, settings)
    tally = Tally()
    phases = Phases(Rendezvous(settings.agents), Rendezvous(settings.agents))
    try:
        async with AsyncExitStack() as stack:
            # SIGTERM (a CI timeout, say) cancels the run as Ctrl-C does, so that the server
            # is stopped on the way out rather than left running.
            main_task = asyncio.current_task()
            assert main_task is not None
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGTERM, main_task.cancel)
            stack.callback(loop.remove_signal_handler, signal.SIGTERM)
            server = await stack.enter_async_context(callgate_server(root, config))
            server_before, client_before = memory(server.pid), memory("self")
            async with asyncio.TaskGroup() as group:
                opening = time.perf_counter()
                for agent in range(settings.agents):
                    group.create_task(run_agent(agent, server, settings, phases, tally))
                await phases.ready.wait()
                load_start = time.perf_counter()
                phases.go.set()
                await phases.done.wait()
                load_end = time.perf_counter()
                server_after, client_after = memory(server.pid), memory("self")
                phases.release.set()
            closed = time.perf_counter()
            server_closed = memory(server.pid)
    except Exception:
        print(f"--- callgate log:\n{log_tail(root / 'server.log')}", file=sys.stderr)
        raise
    log_lines, log_problems = scan_log(root / "server.log")
    return Results(
        settings=settings,
        started=started_at,
        sandbox_mode=server.sandbox_mode,
        limit_notes=notes,
        tally=tally,
        open_seconds=load_start - opening,
        load_seconds=load_end - load_start,
        close_seconds=closed - load_end,
        total_seconds=time.perf_counter() - started,
        server_before=server_before,
        server_after=server_after,
        server_closed=server_closed,
        client_before=client_before,
        client_after=client_after,
        log_lines=log_lines,
        log_problems=log_problems,
    )


# --- reporting ----------------------------------------------------------------------------


def percentile_ms(ordered: list[int], fraction: float) -> float:
    """Nearest-rank percentile of sorted nanosecond samples, in ms."""
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1] / 1e6


def latency_rows(tally: Tally) -> list[tuple[str, list[int]]]:
    """(label, sorted samples): all calls, Bash, the rest, then each tool."""
    everything = sorted(s for samples in tally.latencies.values() for s in samples)
    bash = sorted(tally.latencies.get("Bash", []))
    rest = sorted(s for tool, ss in tally.latencies.items() if tool != "Bash" for s in ss)
    rows = [("all calls", everything), ("Bash", bash), ("all but Bash", rest)]
    for tool in dict.fromkeys(MIX):
        if tool == "Bash":
            continue
        rows.append((f"  {tool}", sorted(tally.latencies.get(tool, []))))
    return rows


def latency_json(samples: list[int]) -> dict[str, object]:
    return {
        "calls": len(samples),
        **{
            f"p{round(q * 100)}_ms": round(percentile_ms(samples, q), 3) for q in (0.50, 0.95, 0.99)
        },
        "max_ms": round(samples[-1] / 1e6, 3) if samples else None,
    }


def environment(results: Results) -> dict[str, str]:
    return {
        "date": results.started.isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "cpus": str(os.cpu_count()),
        "platform": platform.platform(),
        "sandbox": results.sandbox_mode,
    }


def print_markdown(results: Results) -> None:
    env = environment(results)
    settings, tally = results.settings, results.tally
    total = settings.agents * settings.calls
    print(
        f"callgate load: {settings.agents} agents x {settings.calls} calls = {total} calls; "
        f"{env['date']}; Python {env['python']}, grpcio {env['grpcio']}, {env['cpus']} CPUs, "
        f"{env['platform']}; sandbox {env['sandbox']}; one client (channel + Exchange stream) "
        "and one session per agent, all on one asyncio loop in one process; gRPC over a Unix "
        f"socket; headless, log level {settings.log_level}"
        + (f"; only {settings.only}" if settings.only else "")
        + (
            f"; Grep engine {'ripgrep' if settings.ripgrep else 'in-server walk'}"
            if settings.ripgrep is not None
            else ""
        )
    )
    print("limits: " + "; ".join(results.limit_notes))
    print(
        f"server log: {results.log_lines} lines, of which {len(results.log_problems)} at "
        "warning or error level or not JSON"
    )
    for line in results.log_problems[:SHOWN_ERRORS]:
        print(f"  {line[:300]}")
    print()
    print("| calls | count | p50 ms | p95 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, samples in latency_rows(tally):
        stats = latency_json(samples)
        cells = " | ".join(
            "-" if not isinstance(value, float) else f"{value:.2f}"
            for value in (stats["p50_ms"], stats["p95_ms"], stats["p99_ms"], stats["max_ms"])
        )
        print(f"| {label} | {len(samples)} | {cells} |")
    print()
    rate = tally.calls / results.load_seconds if results.load_seconds > 0 else math.nan
    print("| measure | value |")
    print("|---|---:|")
    print(f"| {settings.agents} sessions opened in | {results.open_seconds:.2f} s |")
    print(f"| load wall time (go to last call) | {results.load_seconds:.2f} s |")
    print(f"| throughput | {rate:.0f} calls/s |")
    print(f"| sessions closed in | {results.close_seconds:.2f} s |")
    print(f"| whole run, server start to stop | {results.total_seconds:.2f} s |")
    print(f"| calls completed | {tally.calls} of {total} |")
    print(
        f"| errors | {results.errors} ({tally.exceptions} exceptions, {tally.error_results} "
        f"is_error results, {tally.wrong_results} unexpected results) |"
    )
    print()
    before, after, closed = results.server_before, results.server_after, results.server_closed
    print("| memory | VmRSS MiB | VmHWM MiB |")
    print("|---|---:|---:|")
    print(f"| server before (just started) | {before.rss_mib:.1f} | {before.hwm_mib:.1f} |")
    print(
        f"| server after the load ({settings.agents} sessions open) "
        f"| {after.rss_mib:.1f} | {after.hwm_mib:.1f} |"
    )
    print(
        f"| server after - before | {after.rss_mib - before.rss_mib:+.1f} "
        f"| {after.hwm_mib - before.hwm_mib:+.1f} |"
    )
    print(f"| server after the sessions closed | {closed.rss_mib:.1f} | {closed.hwm_mib:.1f} |")
    for label, mem in (("before", results.client_before), ("after", results.client_after)):
        print(f"| benchmark client {label} | {mem.rss_mib:.1f} | {mem.hwm_mib:.1f} |")
    print()
    print_errors(tally)
    print(f"zero errors: {'PASS' if results.errors == 0 else 'FAIL'}")


def print_errors(tally: Tally) -> None:
    if not tally.errors:
        return
    print(f"first {min(SHOWN_ERRORS, len(tally.errors))} of {len(tally.errors)} errors:")
    for error in tally.errors[:SHOWN_ERRORS]:
        where = f"call {error.index}" if error.index >= 0 else "session"
        print(f"  agent {error.agent} {where} {error.tool}: {error.reason}: {error.message!r:.300}")
    print()


def print_json(results: Results) -> None:
    tally = results.tally
    document = {
        "environment": environment(results),
        "agents": results.settings.agents,
        "calls_per_agent": results.settings.calls,
        "limits": results.limit_notes,
        "server_log": {"lines": results.log_lines, "warnings_or_errors": results.log_problems},
        "calls_completed": tally.calls,
        "errors": {
            "total": results.errors,
            "exceptions": tally.exceptions,
            "is_error_results": tally.error_results,
            "unexpected_results": tally.wrong_results,
            "first": [vars(error) for error in tally.errors[:SHOWN_ERRORS]],
        },
        "seconds": {
            "open_sessions": round(results.open_seconds, 3),
            "load": round(results.load_seconds, 3),
            "close_sessions": round(results.close_seconds, 3),
            "total": round(results.total_seconds, 3),
        },
        "calls_per_second": round(tally.calls / results.load_seconds, 1),
        "latency": {label.strip(): latency_json(samples) for label, samples in latency_rows(tally)},
        "memory_kib": {
            "server_before": vars(results.server_before),
            "server_after": vars(results.server_after),
            "server_after_close": vars(results.server_closed),
            "client_before": vars(results.client_before),
            "client_after": vars(results.client_after),
        },
        "pass": results.errors == 0,
    }
    print(json.dumps(document, indent=2))


def find_benchmark_error(exc: BaseException) -> BenchmarkError | None:
    """The BenchmarkError in `exc`, which the agents' task group wraps in a group."""
    if isinstance(exc, BenchmarkError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = find_benchmark_error(inner)
            if found is not None:
                return found
    return None


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def call_count(text: str) -> int:
    value = positive(text)
    if value > MAX_CALLS:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_CALLS} (one task per ten calls, 256 tasks per loop)"
        )
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--agents", type=positive, default=DEFAULT_AGENTS, help="concurrent agents (sessions)"
    )
    parser.add_argument("--calls", type=call_count, default=DEFAULT_CALLS, help="calls per agent")
    parser.add_argument(
        "--sandbox",
        choices=["auto", "bwrap", "none"],
        default="auto",
        help="the server's sandbox for Bash (default: auto, bwrap where it works)",
    )
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default="info",
        help="the server's log level (default: info, its own default)",
    )
    parser.add_argument(
        "--only",
        choices=sorted(set(MIX) - {"EditFile", "TaskList"}),
        default="",
        help="run only this tool's step of the mix (a tool's throughput alone)",
    )
    parser.add_argument(
        "--ripgrep",
        choices=["on", "off"],
        default=None,
        help="Grep's engine: ripgrep, confined, a process per call (on) or the in-server walk "
        "(off); default: the server's",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    settings = Settings(
        agents=args.agents,
        calls=args.calls,
        sandbox=args.sandbox,
        log_level=args.log_level,
        only=args.only,
        ripgrep=None if args.ripgrep is None else args.ripgrep == "on",
    )
    with tempfile.TemporaryDirectory(prefix="cgbench-load-") as scratch:
        root = Path(scratch).resolve()
        write_fixture(root / "ws")
        try:
            results = asyncio.run(run(settings, root))
        except (KeyboardInterrupt, asyncio.CancelledError):
            sys.exit("benchmark interrupted; its server was stopped")
        except Exception as exc:
            error = find_benchmark_error(exc)
            if error is None:
                raise
            sys.exit(f"benchmark failed: {error}")
    if args.json:
        print_json(results)
    else:
        print_markdown(results)
    if results.errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
