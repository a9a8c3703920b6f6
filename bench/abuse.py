"""Abuse: what an agent can make the server spend, against the budgets that bound it.

Each section starts its own `callgate serve` process (headless, on a Unix socket, sandbox
`bwrap`, the default budgets unless a section says otherwise) and attacks it only with the
agent token and calls its policy allows, as an adversarial review did:

  memory   300 WriteFile calls of 1 MiB each, all denied by policy; then CloseSession; then
           the same flood again in a new session; then 8 sessions each preparing 1 MiB calls
           left open until the server refuses. Server RSS (VmRSS of /proc/<pid>/status) at
           each step, next to baseline + `limits.max_retained_bytes`.
  spool    12 background commands (two loops of 6) each printing 80 MiB, run to exit; the
           bytes their spool files take on disk, next to `processes.spool_budget_bytes`;
           then after CloseSession.
  stall    with ripgrep off (the pure-Python engine): Grep `(a+)+$` over a 24 MiB workspace
           of lines `aaaa…ab` and, at the same time, a fork bomb in Bash (run only when the
           server reports a pids limit in force). The gRPC health check is called every
           10 ms throughout: its p50/p99 next to the same probe on the idle server and the
           50 ms bound; the Grep's and the bomb's results.
  sigterm  SIGTERM while that Grep runs: time to exit and the exit code, next to
           `server.shutdown_grace_seconds` (2 s here), over a 96 MiB workspace.
  stream   InvokeStream of a command printing 6 MiB, then 32 MiB, with a 3 s time limit,
           its reader stalling 6 s after the first chunk: how the RPC ended and the
           call's state in GetCall (it must say SUCCEEDED whatever the stream did).
  prepare  48 sessions, each with 8 Prepares of a large Bash command (~30 KiB, 1,000
           segments) in flight at once on its Exchange stream, for 5 rounds: the health check's
           p50/p99 next to the idle probe and the 50 ms bound.
  shares   what one session can fill without an approver, against its share: task text
           (TaskCreate until refused, next to `limits.session_share` of
           `limits.max_task_text_bytes`), and whether a second session still creates a task.

Adversarial commands run only inside the server's sandbox (bubblewrap, read-only root, a
pids limit proven by the server's health report before the bomb is sent); without bwrap
the benchmark refuses to run. Every server is stopped on exit, failed or not.

Usage: python -m bench.abuse [--only SECTION ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.load import (
    BenchmarkError,
    Server,
    callgate_executable,
    callgate_server,
    log_tail,
    memory,
    stop_process,
    wait_until_serving,
)
from callgate.client import CallgateClient, CallgateClientError, ClientSession, ToolResult
from callgate.server.config import LimitsConfig, ProcessesConfig

SECTIONS: Final = ("memory", "spool", "stall", "sigterm", "stream", "prepare", "shares")
PREPARE_SESSIONS: Final = 48
PREPARE_IN_FLIGHT: Final = 8
PREPARE_ROUNDS: Final = 2
# Shell just under the parse cap (4,000 syntax nodes): segments the command rules read option
# by option, the most work one Prepare can ask of the event loop.
BIG_SEGMENTS: Final = 250
BIG_COMMAND: Final = " && ".join(f"git log --oneline -n {i} -- f{i}" for i in range(BIG_SEGMENTS))
TOOL_SERVICE: Final = "callgate.v1.ToolService"
LIMITS_TRAILER: Final = "callgate-sandbox-limits"
MIB: Final = 1 << 20
FLOOD_CALLS: Final = 300
OPEN_SESSIONS: Final = 8
OPEN_CALLS: Final = 200
SPOOL_PROCESSES: Final = 12
SPOOL_OUTPUT_MIB: Final = 80
NASTY_PATTERN: Final = "(a+)+$"
NASTY_MIB: Final = 24
GRACE_SECONDS: Final = 2.0
STREAM_MIB: Final = (6, 32)
STALL_SECONDS: Final = 6.0
HEALTH_BOUND_MS: Final = 50.0
PROBE_INTERVAL: Final = 0.01
CALL_TIMEOUT: Final = 120.0
BOMB: Final = ":(){ :|:& };:; sleep 3"


@dataclass
class Row:
    section: str
    measure: str
    value: str
    bound: str
    ok: bool | None = None


ROWS: list[Row] = []


def row(section: str, measure: str, value: str, bound: str, ok: bool | None = None) -> None:
    ROWS.append(Row(section, measure, value, bound, ok))
    mark = "" if ok is None else (" ok" if ok else " OVER")
    print(f"  {section:8} {measure:48} {value:>16}   {bound}{mark}", flush=True)


def config_text(*extra: str, write: str = "allow") -> str:
    return (
        'approval_mode = "headless"\nsandbox = "bwrap"\nlog_level = "warning"\n'
        f"shutdown_grace_seconds = {GRACE_SECONDS}\n\n"
        f'[access]\nworkspace_write = "{write}"\ncommand = "allow"\n' + "".join(extra)
    )


@asynccontextmanager
async def server_with(root: Path, *extra: str, write: str = "allow") -> AsyncIterator[Server]:
    (root / "ws").mkdir(parents=True, exist_ok=True)
    config = root / "callgate.toml"
    config.write_text(config_text(*extra, write=write), encoding="utf-8")
    async with callgate_server(root, config) as server:
        if server.sandbox_mode != "bwrap":
            raise BenchmarkError(f"the server runs with sandbox {server.sandbox_mode!r}, not bwrap")
        yield server


async def health_trailer(target: str, key: str) -> str:
    async with grpc.aio.insecure_channel(target) as channel:
        call = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=TOOL_SERVICE), timeout=5.0
        )
        await call
        for name, value in await call.trailing_metadata() or ():
            if name == key:
                return str(value)
    return ""


class Prober:
    """Calls the health check every PROBE_INTERVAL on its own channel; keeps latencies."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.samples: list[float] = []
        self.failures = 0

    async def run(self, stop: asyncio.Event) -> None:
        request = health_pb2.HealthCheckRequest(service=TOOL_SERVICE)
        async with grpc.aio.insecure_channel(self.target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    await health.Check(request, timeout=30.0)
                    self.samples.append((time.perf_counter() - started) * 1000)
                except grpc.aio.AioRpcError:
                    self.failures += 1
                await asyncio.sleep(PROBE_INTERVAL)

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.samples)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


async def probed(target: str, work: Callable[[], Awaitable[None]]) -> Prober:
    prober, stop = Prober(target), asyncio.Event()
    probe = asyncio.create_task(prober.run(stop))
    try:
        await work()
    finally:
        stop.set()
        await probe
    return prober


def json_object(result: ToolResult) -> dict[str, object]:
    value: object = result.parsed_json()
    if not isinstance(value, dict):
        raise BenchmarkError(f"expected a JSON object, got {result.text[:200]!r}")
    return value


# --- memory -------------------------------------------------------------------------------


async def flood(session: ClientSession) -> int:
    """FLOOD_CALLS WriteFile calls of 1 MiB, each denied at Prepare; returns how many."""
    content = "x" * (MIB - 1024)  # the argument cap is 1 MiB of JSON
    denied = 0
    for index in range(FLOOD_CALLS):
        call = await session.prepare(
            "WriteFile", {"path": f"denied/{index}.txt", "content": content}, evaluate=True
        )
        denied += call.state.value == "denied"
    return denied


async def memory_section(root: Path) -> None:
    budget = LimitsConfig().max_retained_bytes
    async with server_with(root, write="deny") as server:
        base = memory(server.pid).rss_mib
        bound = base + budget / MIB
        row("memory", "server RSS at start (MiB)", f"{base:.0f}", "baseline")
        async with CallgateClient(server.target, token=server.token) as client:
            for round_ in (1, 2):
                session = await client.open_session()
                denied = await flood(session)
                rss = memory(server.pid).rss_mib
                row(
                    "memory",
                    f"RSS after flood {round_}: {denied} denied 1 MiB calls",
                    f"{rss:.0f}",
                    f"<= {bound:.0f} (baseline + budget)",
                    rss <= bound,
                )
                await session.close()
                rss = memory(server.pid).rss_mib
                row(
                    "memory",
                    f"RSS after CloseSession {round_}",
                    f"{rss:.0f}",
                    f"<= {bound:.0f}",
                    rss <= bound,
                )
            accepted, refused = await open_flood(client)
            rss = memory(server.pid).rss_mib
            row(
                "memory",
                f"RSS with {accepted} open 1 MiB calls in {OPEN_SESSIONS} sessions",
                f"{rss:.0f}",
                f"<= {bound:.0f}; {refused} Prepares refused MEMORY_BUDGET",
                rss <= bound,
            )
        peak = memory(server.pid).hwm_mib
        row("memory", "peak RSS (VmHWM)", f"{peak:.0f}", f"<= {bound:.0f}", peak <= bound)


async def open_flood(client: CallgateClient) -> tuple[int, int]:
    """OPEN_SESSIONS sessions each prepare 1 MiB WriteFile calls (left open, never decided)
    until the server refuses; returns (calls kept open, Prepares refused)."""
    content = "o" * (MIB - 1024)
    accepted = refused = 0
    for _ in range(OPEN_SESSIONS):
        session = await client.open_session()
        for index in range(OPEN_CALLS):
            try:
                await session.prepare("WriteFile", {"path": f"open/{index}", "content": content})
            except CallgateClientError as exc:
                if exc.reason != "MEMORY_BUDGET":
                    raise
                refused += 1
                break
            accepted += 1
    return accepted, refused


# --- spool --------------------------------------------------------------------------------


def spool_disk_bytes(state: Path) -> int:
    """Bytes on disk of every process output spool under the state directory."""
    total = 0
    for path in state.rglob("processes/*"):
        with suppress(OSError):
            total += path.lstat().st_blocks * 512
    return total


async def any_running(session: ClientSession, started: dict[str, list[str]]) -> bool:
    """Waits up to 200 ms for the processes to end; True while any still runs."""
    for loop, ids in started.items():
        if not ids:
            continue
        output = await session.run(
            "ProcessOutput",
            {"process_ids": ids, "wait": "all", "timeout_ms": 200, "limit_bytes": 1},
            loop_id=loop,
        )
        processes = json_object(output).get("processes")
        if not isinstance(processes, list):
            raise BenchmarkError(f"unexpected ProcessOutput result {output.text[:200]!r}")
        if any(isinstance(p, dict) and p.get("status") == "running" for p in processes):
            return True
    return False


async def spool_section(root: Path) -> None:
    budget = ProcessesConfig().spool_budget_bytes
    state = root / "state"
    command = f"head -c {SPOOL_OUTPUT_MIB * MIB} /dev/zero | tr '\\0' x"
    async with server_with(root) as server:
        async with CallgateClient(server.target, token=server.token) as client:
            session = await client.open_session()
            loops = [session.session.default_loop_id, await session.open_loop()]
            started: dict[str, list[str]] = {loop: [] for loop in loops}
            refused = 0
            for index in range(SPOOL_PROCESSES):
                result = await session.run(
                    "Bash",
                    {"command": command, "background": True},
                    loop_id=loops[index % 2],
                )
                if result.is_error:
                    refused += 1
                else:
                    started[loops[index % 2]].append(str(json_object(result)["process_id"]))
            peak = 0
            deadline = time.monotonic() + CALL_TIMEOUT
            while time.monotonic() < deadline:
                peak = max(peak, spool_disk_bytes(state))
                if not await any_running(session, started):
                    break
            peak = max(peak, spool_disk_bytes(state))
            count = sum(len(ids) for ids in started.values())
            printed = count * SPOOL_OUTPUT_MIB
            row(
                "spool",
                f"{count} started, {refused} refused, {SPOOL_OUTPUT_MIB} MiB output each",
                f"{peak / MIB:.0f} MiB",
                f"<= {budget / MIB:.0f} MiB (budget; {printed} MiB printed)",
                peak <= budget,
            )
            await session.close()
        after = spool_disk_bytes(state)
        row(
            "spool",
            "spool bytes on disk after CloseSession",
            f"{after / MIB:.1f} MiB",
            "0",
            after == 0,
        )


# --- stall and sigterm --------------------------------------------------------------------


def nasty_workspace(workspace: Path, mib: int = NASTY_MIB) -> None:
    workspace.mkdir(parents=True, exist_ok=True)
    line = "a" * 60 + "b\n"
    block = line * (MIB // len(line))
    for index in range(mib):
        (workspace / f"nasty_{index:02d}.txt").write_text(block, encoding="ascii")


async def stall_section(root: Path) -> None:
    nasty_workspace(root / "ws")
    async with server_with(root, "\n[tools]\nripgrep = false\n") as server:
        limits = await health_trailer(server.target, LIMITS_TRAILER)
        idle = await probed(server.target, lambda: asyncio.sleep(2.0))
        row(
            "stall",
            "health p99 on the idle server (ms)",
            f"{idle.percentile(0.99):.1f}",
            "comparison",
        )
        async with CallgateClient(server.target, token=server.token) as client:
            session = await client.open_session()
            outcomes: dict[str, str] = {}

            async def grep() -> None:
                started = time.perf_counter()
                result = await session.run("Grep", {"pattern": NASTY_PATTERN, "path": "."})
                outcomes["grep"] = f"{time.perf_counter() - started:.1f} s, " + (
                    result.error_code if result.is_error else "ok"
                )

            async def bomb() -> None:
                if limits in ("", "none"):
                    outcomes["bomb"] = f"not sent: the server reports limits {limits or 'absent'}"
                    return
                result = await session.run("Bash", {"command": BOMB, "timeout": 10})
                outcomes["bomb"] = result.error_code or f"exit {result.exit_code}"

            async def both() -> None:
                await asyncio.gather(grep(), bomb())

            busy = await probed(server.target, both)
            p99 = busy.percentile(0.99)
            row(
                "stall",
                f"health p99 during Grep {NASTY_PATTERN} + fork bomb (ms)",
                f"{p99:.1f}",
                f"< {HEALTH_BOUND_MS:g} (idle {idle.percentile(0.99):.1f})",
                p99 < HEALTH_BOUND_MS and not busy.failures,
            )
            row(
                "stall",
                "health p50 during them (ms)",
                f"{busy.percentile(0.5):.1f}",
                f"idle {idle.percentile(0.5):.1f}",
            )
            row("stall", f"Grep over {NASTY_MIB} MiB, python engine", outcomes["grep"], "completes")
            row(
                "stall",
                f"fork bomb ({limits or 'no limits'})",
                outcomes["bomb"],
                "ends as a result",
            )
            after = await probed(server.target, lambda: asyncio.sleep(1.0))
            row(
                "stall",
                "health p99 after (ms)",
                f"{after.percentile(0.99):.1f}",
                f"< {HEALTH_BOUND_MS:g}",
                after.percentile(0.99) < HEALTH_BOUND_MS,
            )
            await session.close()


async def sigterm_section(root: Path) -> None:
    nasty_workspace(root / "ws", 4 * NASTY_MIB)
    (root / "callgate.toml").write_text(
        config_text("\n[tools]\nripgrep = false\n"), encoding="utf-8"
    )
    log_path, state = root / "server.log", root / "state"
    target = f"unix://{root / 'cg.sock'}"
    with log_path.open("w") as log:
        process = await asyncio.create_subprocess_exec(
            callgate_executable(),
            "serve",
            "--config",
            str(root / "callgate.toml"),
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
            await wait_until_serving(process, target, log_path)
            token = (state / "tokens" / "agent").read_text(encoding="utf-8").strip()
            async with CallgateClient(target, token=token) as client:
                session = await client.open_session()
                grep = asyncio.create_task(
                    session.run("Grep", {"pattern": NASTY_PATTERN, "path": "."})
                )
                await asyncio.sleep(0.5)
                running = not grep.done()
                started = time.perf_counter()
                process.send_signal(signal.SIGTERM)
                try:
                    code = await asyncio.wait_for(process.wait(), GRACE_SECONDS + 10)
                    elapsed = time.perf_counter() - started
                except TimeoutError:
                    code, elapsed = None, float("inf")
                grep.cancel()
                await asyncio.gather(grep, return_exceptions=True)
            row(
                "sigterm",
                "SIGTERM to exit, Grep " + ("running" if running else "already done"),
                f"{elapsed:.2f} s, exit {code}",
                f"<= {GRACE_SECONDS:g} s grace + 1 s",
                code == 0 and elapsed <= GRACE_SECONDS + 1,
            )
        except Exception:
            print(f"--- callgate log:\n{log_tail(log_path)}", file=sys.stderr)
            raise
        finally:
            await stop_process(process)


# --- stream -------------------------------------------------------------------------------


async def slow_stream(session: ClientSession, mib: int) -> tuple[str, int, str]:
    """InvokeStream a command printing `mib` MiB with a 3 s time limit; the reader stalls
    STALL_SECONDS after the first chunk. Returns (how the RPC ended, bytes read, GetCall's
    state)."""
    command = f"head -c {mib * MIB} /dev/zero | tr '\\0' y"
    call = await session.prepare("Bash", {"command": command, "timeout": 3}, evaluate=True)
    received, ending = 0, "finished"
    try:
        async for item in session.invoke_stream(call.execution_id):
            if isinstance(item, bytes):
                if not received:
                    await asyncio.sleep(STALL_SECONDS)  # past the command's time limit
                received += len(item)
    except CallgateClientError as exc:
        ending = f"{exc.code} {exc.reason}"
    final = await session.get_call(call.execution_id)
    return ending, received, final.state.value


async def stream_section(root: Path) -> None:
    async with (
        server_with(root) as server,
        CallgateClient(server.target, token=server.token) as client,
    ):
        session = await client.open_session()
        for mib in STREAM_MIB:
            ending, received, state = await slow_stream(session, mib)
            row(
                "stream",
                f"{mib} MiB, reader stalls {STALL_SECONDS:g} s: the RPC",
                ending,
                "finished or RESOURCE_EXHAUSTED",
                "INTERNAL" not in ending,
            )
            row("stream", f"{mib} MiB: bytes the reader got (MiB)", f"{received / MIB:.1f}", "")
            row(
                "stream",
                f"{mib} MiB: the call in GetCall",
                state,
                "succeeded",
                state == "succeeded",
            )
        await session.close()


async def prepare_section(root: Path) -> None:
    async with server_with(root, f"\n[limits]\nmax_sessions = {PREPARE_SESSIONS + 2}\n") as server:
        idle = await probed(server.target, lambda: asyncio.sleep(2.0))
        async with contextlib.AsyncExitStack() as stack:
            # One client (one Exchange stream) per agent, as separate agents would have.
            clients = [
                await stack.enter_async_context(CallgateClient(server.target, token=server.token))
                for _ in range(PREPARE_SESSIONS)
            ]
            sessions = [await client.open_session() for client in clients]
            prepared = 0
            serial = itertools.count()

            async def agent(session: ClientSession) -> None:
                nonlocal prepared
                for _ in range(PREPARE_ROUNDS):
                    calls = await asyncio.gather(
                        *(
                            # Each text new, as an attacker would send them: nothing cached.
                            session.prepare("Bash", {"command": f"{BIG_COMMAND} && echo {n}"})
                            for n in (next(serial) for _ in range(PREPARE_IN_FLIGHT))
                        )
                    )
                    prepared += len(calls)
                    for call in calls:
                        await session.cancel(call.execution_id)

            async def flood() -> None:
                await asyncio.gather(*(agent(session) for session in sessions))

            started = time.perf_counter()
            busy = await probed(server.target, flood)
            elapsed = time.perf_counter() - started
            p99 = busy.percentile(0.99)
            row(
                "prepare",
                f"health p99 during {PREPARE_SESSIONS} sessions' Bash Prepares (ms)",
                f"{p99:.1f}",
                f"< {HEALTH_BOUND_MS:g} (idle {idle.percentile(0.99):.1f})",
                p99 < HEALTH_BOUND_MS and not busy.failures,
            )
            row(
                "prepare",
                "health p50 during them (ms)",
                f"{busy.percentile(0.5):.1f}",
                f"idle {idle.percentile(0.5):.1f}",
            )
            row(
                "prepare",
                f"Prepares of {len(BIG_COMMAND) >> 10} KiB commands",
                f"{prepared} in {elapsed:.1f} s",
                "all answered",
                prepared == PREPARE_SESSIONS * PREPARE_IN_FLIGHT * PREPARE_ROUNDS,
            )
            for session in sessions:
                await session.close()


async def shares_section(root: Path) -> None:
    total = 4 * MIB
    share = 0.5
    extra = f"\n[limits]\nmax_task_text_bytes = {total}\nsession_share = {share}\n"
    async with (
        server_with(root, extra) as server,
        CallgateClient(server.target, token=server.token) as client,
    ):
        if True:
            greedy = await client.open_session()
            created, reason = 0, ""
            while not reason and created < 10_000:
                try:
                    await greedy.run("TaskCreate", {"subject": "s", "description": "d" * 16_000})
                    created += 1
                except CallgateClientError as error:
                    reason = error.reason
            bound = int(total * share)
            row(
                "shares",
                "task text one session stored before refused",
                f"~{created * 16_256 >> 10} KiB ({created} tasks)",
                f"<= {bound >> 10} KiB ({reason or 'never refused'})",
                created * 16_256 <= bound and reason == "TASK_BUDGET",
            )
            other = await client.open_session()
            result = await other.run("TaskCreate", {"subject": "other session"})
            row(
                "shares",
                "a second session's TaskCreate meanwhile",
                "created" if not result.is_error else result.error_code,
                "created",
                not result.is_error,
            )
            await greedy.close()
            await other.close()


RUNNERS: Final = {
    "memory": memory_section,
    "spool": spool_section,
    "stall": stall_section,
    "sigterm": sigterm_section,
    "stream": stream_section,
    "prepare": prepare_section,
    "shares": shares_section,
}


def run(name: str) -> None:
    print(f"\n## {name}", flush=True)
    with tempfile.TemporaryDirectory(prefix=f"cgbench-abuse-{name}-") as scratch:
        asyncio.run(RUNNERS[name](Path(os.path.realpath(scratch))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    args = parser.parse_args()
    print(f"# callgate abuse benchmark (pid {os.getpid()}, {os.cpu_count()} CPUs)")
    print(f"  {'section':8} {'measure':48} {'value':>16}   bound")
    try:
        for name in args.only:
            run(name)
    except BenchmarkError as exc:
        sys.exit(f"benchmark failed: {exc}")
    over = [r for r in ROWS if r.ok is False]
    print(f"\n{len(ROWS)} figures, {len(over)} over their bound")
    if over:
        sys.exit(1)


if __name__ == "__main__":
    main()
