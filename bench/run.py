"""Latency of one callgate ReadFile against a bare gRPC floor and an MCP stdio server.

Cases, each timed per sample with `time.perf_counter_ns` on one plain asyncio loop:
  (a) three sequential bare grpc.aio unary echo calls to a separate echo process (the floor);
  (b1) `session.run("ReadFile", ...)` of a 4 KiB file through the callgate client library's
      one-message path (Prepare with invoke: prepared, decided and run in one request and one
      answer) over its Exchange stream, against a real `callgate serve` process;
  (c) the same read through an MCP server (the `mcp` package) over stdio;
  (h) the same MCP server over streamable HTTP on 127.0.0.1 (what a remote agent would use
      instead of callgate's gRPC), one session, the SDK's defaults.
Diagnostics: (e1) the one-message floor, one message written on one open bare grpc.aio stream
to the echo process and its echo read back (what (b1) costs with a server that does nothing);
(b1) with `exchange=False` (one unary RPC); and the two-message path, Prepare(evaluate) then
Invoke with the generated stub, broken down. Every server runs in its own process; all of them
are stopped on exit, failed or not.
Targets: (b1) at most 0.7 x (c) at p50, and (b1) - (e1) at most 0.35 ms; (b1) at most
0.6 x (h).

Usage: bench/run.py [--iterations N] [--warmup N] [--interleave] [--json]
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
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Final, TextIO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mcp.client.session import ClientSession as McpSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from callgate.client import CallgateClient
from callgate.v1 import tool_call_pb2, tool_service_pb2, tool_service_pb2_grpc

BENCH_DIR: Final = Path(__file__).resolve().parent
FILE_NAME: Final = "file4k.txt"
FILE_BYTES: Final = 4096
ECHO_METHOD: Final = "/bench.Echo/Echo"  # bench/echo_server.py: SERVICE/METHOD
ECHO_STREAM_METHOD: Final = "/bench.Echo/Exchange"  # bench/echo_server.py: SERVICE/STREAM_METHOD
ECHO_PAYLOAD: Final = b"x" * 64
TOOL_SERVICE: Final = "callgate.v1.ToolService"
START_TIMEOUT: Final = 20.0
"""Seconds a server process may take to become ready."""
CALL_TIMEOUT: Final = 10.0
"""Seconds any one measured operation may take before the run is abandoned."""
STOP_TIMEOUT: Final = 5.0
"""Seconds a server process gets to exit after SIGTERM before it is killed."""
TARGET_B_OVER_C: Final = 0.7
TARGET_B_OVER_H: Final = 0.6
TARGET_ABOVE_FLOOR_MS: Final = 0.35

# Fast reconnects while polling for readiness; the default first backoff is a whole second.
_PROBE_OPTIONS: Final = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 200),
]


class BenchmarkError(Exception):
    """The benchmark could not measure what it claims to (a server failed, a result was wrong)."""


@dataclass
class Series:
    """The samples of one case, in nanoseconds, warm-ups excluded."""

    key: str
    label: str
    samples_ns: list[int] = field(default_factory=list)

    def percentile_ms(self, fraction: float) -> float:
        """Nearest-rank percentile: the smallest sample at or above `fraction` of all samples."""
        ordered = sorted(self.samples_ns)
        rank = max(1, math.ceil(fraction * len(ordered)))
        return ordered[rank - 1] / 1e6

    @property
    def p50(self) -> float:
        return self.percentile_ms(0.50)

    @property
    def p99(self) -> float:
        return self.percentile_ms(0.99)

    def markdown_row(self) -> str:
        return f"| {self.label} | {self.p50:.3f} | {self.p99:.3f} | {len(self.samples_ns)} |"

    def as_json(self) -> dict[str, object]:
        return {
            "label": self.label,
            "p50_ms": round(self.p50, 4),
            "p99_ms": round(self.p99, 4),
            "samples": len(self.samples_ns),
        }


@dataclass(frozen=True)
class Settings:
    iterations: int
    warmup: int
    interleave: bool

    @property
    def order(self) -> str:
        return "interleaved" if self.interleave else "back to back"


# --- the fixture --------------------------------------------------------------------------


def write_fixture(workspace: Path) -> str:
    """Writes the 4 KiB text file and returns its lines numbered as ReadFile numbers them."""
    words = "the quick brown fox jumps over the lazy dog " * 3
    lines = []
    for number in range(1, 65):
        prefix = f"line {number:02d}: "
        lines.append(prefix + words[: 63 - len(prefix)])
    content = "".join(line + "\n" for line in lines)
    assert len(content.encode()) == FILE_BYTES
    (workspace / FILE_NAME).write_text(content, encoding="utf-8")
    return "\n".join(f"{number:6d}\t{line}" for number, line in enumerate(lines, start=1))


def check_numbered(case: str, text: str, expected: str) -> None:
    """Fails unless `text` holds the whole file as numbered lines, starting at a line start."""
    start = ("\n" + text).find("\n" + expected)
    end = start + len(expected)
    if start < 0 or (end < len(text) and text[end] != "\n"):
        raise BenchmarkError(
            f"{case}: the result does not hold {FILE_NAME} as numbered lines; "
            f"it starts with {text[:200]!r}"
        )


# --- server processes ---------------------------------------------------------------------


async def stop_process(process: asyncio.subprocess.Process) -> None:
    """Terminates a server process and waits for it, killing it if it does not exit."""
    if process.returncode is not None:
        return
    process.terminate()
    try:
        await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


async def start_echo_server(stack: AsyncExitStack, socket: Path) -> str:
    """Starts bench/echo_server.py on a Unix socket and returns its gRPC target."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(BENCH_DIR / "echo_server.py"),
        f"unix:{socket}",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
    )
    stack.push_async_callback(stop_process, process)
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), START_TIMEOUT)
    except TimeoutError:
        raise BenchmarkError(f"the echo server did not start within {START_TIMEOUT} s") from None
    if not line.startswith(b"READY "):
        raise BenchmarkError(f"the echo server failed to start (exit {process.returncode})")
    return line.decode().split(" ", 1)[1].strip()


def callgate_executable() -> str:
    beside = Path(sys.executable).parent / "callgate"
    found = str(beside) if beside.exists() else shutil.which("callgate")
    if found is None:
        raise BenchmarkError("no callgate executable; run `make install`")
    return found


async def start_callgate(
    stack: AsyncExitStack, root: Path, workspace: Path, state: Path, log: TextIO
) -> tuple[str, str]:
    """Starts `callgate serve` in headless mode on a Unix socket; returns (target, token)."""
    socket = root / "cg.sock"
    target = f"unix://{socket}"
    process = await asyncio.create_subprocess_exec(
        callgate_executable(),
        "serve",
        "--listen",
        target,
        "--workspace",
        str(workspace),
        "--state-dir",
        str(state),
        "--sandbox",
        "none",
        "--approval-mode",
        "headless",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    stack.push_async_callback(stop_process, process)
    await wait_until_serving(process, target, Path(log.name))
    token = (state / "tokens" / "agent").read_text(encoding="utf-8").strip()
    return target, token


async def wait_until_serving(process: asyncio.subprocess.Process, target: str, log: Path) -> None:
    """Polls the gRPC health check of ToolService until it is SERVING, for a bounded time."""
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
                response = await health.Check(request, timeout=1.0)
                if response.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise BenchmarkError(
                    f"callgate serve was not SERVING within {START_TIMEOUT} s:\n{log_tail(log)}"
                )
            await asyncio.sleep(0.05)


# --- measuring ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One measured operation; `parts` are series the operation fills itself (a breakdown)."""

    series: Series
    operation: Callable[[], Awaitable[None]]
    parts: tuple[Series, ...] = ()


async def measure(settings: Settings, cases: list[Case]) -> None:
    """Takes the samples: warm-ups then measured runs, case after case or interleaved.

    By default each case runs back to back (its warm-ups right before its samples), the
    steady state of a loop that calls one tool after another. Interleaved, each round times
    one run of every case, starting from a different case each round, so drift spreads over
    all cases; every server then idles between its calls, which costs more on machines where
    waking an idle CPU is slow.
    """
    rounds = settings.warmup + settings.iterations
    if settings.interleave:
        for index in range(rounds):
            shift = index % len(cases)
            for case in cases[shift:] + cases[:shift]:
                await take_sample(case, measured=index >= settings.warmup)
    else:
        for case in cases:
            for index in range(rounds):
                await take_sample(case, measured=index >= settings.warmup)
    for case in cases:
        for part in case.parts:
            # The operation records its parts on every run; keep the measured runs only.
            del part.samples_ns[: -settings.iterations]


async def take_sample(case: Case, *, measured: bool) -> None:
    # asyncio.timeout arms a timer rather than wrapping the operation in a task, and it is
    # armed before the clock starts.
    async with asyncio.timeout(CALL_TIMEOUT):
        started = time.perf_counter_ns()
        await case.operation()
        elapsed = time.perf_counter_ns() - started
    if measured:
        case.series.samples_ns.append(elapsed)


@asynccontextmanager
async def echo_case(target: str) -> AsyncIterator[Case]:
    """(a): three sequential unary echo calls over a default channel."""
    async with grpc.aio.insecure_channel(target) as channel:
        # No serializers: requests and responses are the raw bytes.
        echo: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(ECHO_METHOD)

        async def three_calls() -> None:
            for _ in range(3):
                if await echo(ECHO_PAYLOAD) != ECHO_PAYLOAD:
                    raise BenchmarkError("the echo server answered with other bytes")

        yield Case(
            Series("a", "(a) 3 sequential bare grpc.aio unary echo calls (floor)"), three_calls
        )


@asynccontextmanager
async def echo_stream_case(target: str) -> AsyncIterator[Case]:
    """(e1): one message out and its echo back on one open bidirectional stream."""
    async with grpc.aio.insecure_channel(target) as channel:
        exchange: grpc.aio.StreamStreamMultiCallable[bytes, bytes] = channel.stream_stream(
            ECHO_STREAM_METHOD
        )
        stream = exchange()

        async def one_message() -> None:
            await stream.write(ECHO_PAYLOAD)
            if await stream.read() != ECHO_PAYLOAD:
                raise BenchmarkError("the echo stream answered with other bytes")

        try:
            yield Case(
                Series("e1", "(e1) 1 message out, 1 echo back, one open bare stream"),
                one_message,
            )
        finally:
            stream.cancel()


@asynccontextmanager
async def callgate_case(
    target: str, token: str, expected: str, *, exchange: bool = True
) -> AsyncIterator[Case]:
    """(b1): `session.run` through the client library, one message (Prepare with invoke),
    over the client's Exchange stream, or as one unary RPC with `exchange=False`."""
    async with (
        CallgateClient(target, token=token, exchange=exchange) as client,
        client.open_session() as session,
    ):

        async def read_file() -> None:
            result = await session.run("ReadFile", {"path": FILE_NAME})
            if result.is_error:
                raise BenchmarkError(f"(b1) callgate ReadFile failed: {result.text[:200]!r}")
            check_numbered("(b1) callgate", result.text, expected)

        if exchange:
            label = "(b1) callgate ReadFile 4 KiB, client `session.run` (one message, Exchange)"
            yield Case(Series("b1", label), read_file)
        else:
            label = "callgate client `session.run`, exchange=False (one unary RPC)"
            yield Case(Series("b1_unary", label), read_file)


@asynccontextmanager
async def callgate_stub_case(target: str, token: str, expected: str) -> AsyncIterator[Case]:
    """Diagnostic: the same two RPCs through the generated stub on a default channel."""
    metadata = (("authorization", f"Bearer {token}"),)
    arguments = json.dumps({"path": FILE_NAME})
    prepare_part = Series("stub_prepare", "of which Prepare(evaluate)")
    invoke_part = Series("stub_invoke", "of which Invoke")
    async with grpc.aio.insecure_channel(target) as channel:
        stub = tool_service_pb2_grpc.ToolServiceStub(channel)
        opened = await stub.OpenSession(tool_service_pb2.OpenSessionRequest(), metadata=metadata)
        session_id = opened.session.session_id

        async def pair() -> None:
            started = time.perf_counter_ns()
            prepared = await stub.Prepare(
                tool_service_pb2.PrepareRequest(
                    session_id=session_id,
                    tool_name="ReadFile",
                    arguments_json=arguments,
                    request_id=str(uuid.uuid4()),
                    evaluate=True,
                ),
                metadata=metadata,
            )
            between = time.perf_counter_ns()
            if prepared.call.state != tool_call_pb2.STATE_APPROVED:
                raise BenchmarkError(f"stub Prepare left the call in state {prepared.call.state}")
            invoked = await stub.Invoke(
                tool_service_pb2.InvokeRequest(
                    session_id=session_id,
                    execution_id=prepared.call.execution_id,
                    request_id=str(uuid.uuid4()),
                ),
                metadata=metadata,
            )
            finished = time.perf_counter_ns()
            if invoked.result.is_error:
                raise BenchmarkError(f"stub Invoke failed: {invoked.result.text[:200]!r}")
            check_numbered("stub Invoke", invoked.result.text, expected)
            prepare_part.samples_ns.append(between - started)
            invoke_part.samples_ns.append(finished - between)

        label = "callgate generated stub, Prepare(evaluate)+Invoke, default channel"
        try:
            yield Case(Series("stub_pair", label), pair, (prepare_part, invoke_part))
        finally:
            await stub.CloseSession(
                tool_service_pb2.CloseSessionRequest(session_id=session_id), metadata=metadata
            )


@asynccontextmanager
async def mcp_case(workspace: Path, expected: str, log: TextIO) -> AsyncIterator[Case]:
    """(c): `call_tool("read_file")` on an MCP stdio server, after one `initialize`."""
    parameters = StdioServerParameters(
        command=sys.executable,
        args=[str(BENCH_DIR / "mcp_readfile_server.py"), str(workspace)],
    )
    async with (
        stdio_client(parameters, errlog=log) as (read, write),
        McpSession(read, write) as mcp,
    ):
        label = "(c) MCP stdio `call_tool(read_file)` 4 KiB (mcp package)"
        yield await mcp_read_case(mcp, Series("c", label), expected)


async def mcp_read_case(mcp: McpSession, series: Series, expected: str) -> Case:
    """`call_tool("read_file")` on an initialized MCP session, its result checked."""
    async with asyncio.timeout(START_TIMEOUT):
        await mcp.initialize()
    case = f"({series.key}) MCP"

    async def read_file() -> None:
        result = await mcp.call_tool("read_file", {"path": FILE_NAME})
        content = result.content[0] if len(result.content) == 1 else None
        if result.is_error or not isinstance(content, TextContent):
            raise BenchmarkError(f"{case} read_file failed: {result.content!r:.200}")
        check_numbered(case, content.text, expected)

    return Case(series, read_file)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@asynccontextmanager
async def mcp_http_case(
    stack: AsyncExitStack, workspace: Path, expected: str, log: TextIO
) -> AsyncIterator[Case]:
    """(h): `call_tool("read_file")` on the MCP server over streamable HTTP (loopback)."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(BENCH_DIR / "mcp_readfile_server.py"),
        str(workspace),
        str(port),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    stack.push_async_callback(stop_process, process)
    deadline = time.monotonic() + START_TIMEOUT
    while True:  # until it listens
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if process.returncode is not None or time.monotonic() > deadline:
                raise BenchmarkError("the MCP HTTP server did not start") from None
            await asyncio.sleep(0.05)
            continue
        writer.close()
        await writer.wait_closed()
        break
    url = f"http://127.0.0.1:{port}/mcp"
    async with (
        streamable_http_client(url) as (read, write),
        McpSession(read, write) as mcp,
    ):
        label = "(h) MCP streamable HTTP `call_tool(read_file)` 4 KiB (loopback)"
        yield await mcp_read_case(mcp, Series("h", label), expected)


# --- the run ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Results:
    settings: Settings
    main: list[Series]
    diagnostics: list[Series]

    def case(self, key: str) -> Series:
        return next(series for series in [*self.main, *self.diagnostics] if series.key == key)

    def ratio(self, numerator: str, denominator: str) -> tuple[float, float]:
        top, bottom = self.case(numerator), self.case(denominator)
        return top.p50 / bottom.p50, top.p99 / bottom.p99

    @property
    def target_met(self) -> bool:
        return self.stdio_target_met and self.http_target_met and self.floor_target_met

    @property
    def stdio_target_met(self) -> bool:
        return self.ratio("b1", "c")[0] <= TARGET_B_OVER_C

    @property
    def http_target_met(self) -> bool:
        return self.ratio("b1", "h")[0] <= TARGET_B_OVER_H

    @property
    def above_floor_ms(self) -> float:
        return self.case("b1").p50 - self.case("e1").p50

    @property
    def floor_target_met(self) -> bool:
        return self.above_floor_ms <= TARGET_ABOVE_FLOOR_MS


async def run(settings: Settings, root: Path, expected: str) -> Results:
    """Starts the servers in `root`, measures every case, and stops the servers again."""
    workspace, state = root / "ws", root / "state"
    with (
        (root / "callgate.log").open("w") as callgate_log,
        (root / "mcp.log").open("w") as mcp_log,
    ):
        try:
            async with AsyncExitStack() as stack:
                # SIGTERM (a CI timeout, say) cancels the run as Ctrl-C does, so that the
                # servers are stopped on the way out rather than left running.
                main_task = asyncio.current_task()
                assert main_task is not None
                loop = asyncio.get_running_loop()
                loop.add_signal_handler(signal.SIGTERM, main_task.cancel)
                stack.callback(loop.remove_signal_handler, signal.SIGTERM)
                echo_target, (callgate_target, token) = await asyncio.gather(
                    start_echo_server(stack, root / "echo.sock"),
                    start_callgate(stack, root, workspace, state, callgate_log),
                )
                floor = await stack.enter_async_context(echo_case(echo_target))
                stream_floor = await stack.enter_async_context(echo_stream_case(echo_target))
                callgate = await stack.enter_async_context(
                    callgate_case(callgate_target, token, expected)
                )
                unary = await stack.enter_async_context(
                    callgate_case(callgate_target, token, expected, exchange=False)
                )
                stub = await stack.enter_async_context(
                    callgate_stub_case(callgate_target, token, expected)
                )
                mcp = await stack.enter_async_context(mcp_case(workspace, expected, mcp_log))
                http = await stack.enter_async_context(
                    mcp_http_case(stack, workspace, expected, mcp_log)
                )
                await measure(settings, [floor, callgate, mcp, http, stream_floor, unary, stub])
        except Exception:
            for name, log in (("callgate", callgate_log), ("MCP server", mcp_log)):
                log.flush()
                print(f"--- {name} log:\n{log_tail(Path(log.name))}", file=sys.stderr)
            raise
    main = [floor.series, callgate.series, mcp.series, http.series]
    diagnostics = [stream_floor.series, unary.series, stub.series, *stub.parts]
    return Results(settings, main, diagnostics)


def environment() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "mcp": metadata.version("mcp"),
        "platform": platform.platform(),
        "cpus": str(os.cpu_count()),
    }


def print_markdown(results: Results) -> None:
    env = environment()
    settings = results.settings
    print(
        f"callgate bench: {FILE_BYTES} B ReadFile; {settings.iterations} samples per case after "
        f"{settings.warmup} warm-ups; Python {env['python']}, grpcio {env['grpcio']}, "
        f"mcp {env['mcp']}, {env['cpus']} CPUs, {env['platform']}; gRPC over Unix sockets, "
        f"MCP over stdio and streamable HTTP; asyncio; cases {settings.order}"
    )
    print()
    header = "| case | p50 ms | p99 ms | samples |\n|---|---:|---:|---:|"
    print(header)
    for series in results.main:
        print(series.markdown_row())
    print()
    for name, (top, bottom) in {
        "b1/a": ("b1", "a"),
        "b1/c": ("b1", "c"),
        "b1/h": ("b1", "h"),
    }.items():
        p50, p99 = results.ratio(top, bottom)
        print(f"{name}: p50 {p50:.2f}, p99 {p99:.2f}")
    print(f"target b1/c ≤ {TARGET_B_OVER_C}: {'PASS' if results.stdio_target_met else 'FAIL'}")
    print(
        f"target b1 - e1 ≤ {TARGET_ABOVE_FLOOR_MS} ms: {results.above_floor_ms:.3f} ms, "
        f"{'PASS' if results.floor_target_met else 'FAIL'}"
    )
    print(f"target b1/h ≤ {TARGET_B_OVER_H}: {'PASS' if results.http_target_met else 'FAIL'}")
    print()
    print("diagnostics (where (b1) spends its time):")
    print()
    print(header)
    for series in results.diagnostics:
        print(series.markdown_row())
    floor_per_rpc = results.case("a").p50 / 3
    two = results.case("stub_pair").p50
    saved = two - results.case("b1").p50
    print()
    print(
        f"one bare echo RPC ≈ {floor_per_rpc:.3f} ms (p50 of (a) / 3); one message on the "
        f"Exchange stream saves ≈ {saved:.3f} ms against Prepare(evaluate) then Invoke as two "
        f"unary RPCs with the generated stub (p50 of the stub pair minus p50 of (b1))"
    )


def print_json(results: Results) -> None:
    ratios = {
        f"{top}_over_{bottom}": dict(
            zip(("p50", "p99"), (round(r, 4) for r in results.ratio(top, bottom)), strict=True)
        )
        for top, bottom in (("b1", "a"), ("b1", "c"), ("b1", "h"))
    }
    document = {
        "environment": environment(),
        "file_bytes": FILE_BYTES,
        "iterations": results.settings.iterations,
        "warmup": results.settings.warmup,
        "order": results.settings.order,
        "cases": {series.key: series.as_json() for series in results.main},
        "diagnostics": {series.key: series.as_json() for series in results.diagnostics},
        "ratios": ratios,
        "target": {
            "b_over_c_p50_max": TARGET_B_OVER_C,
            "b_over_h_p50_max": TARGET_B_OVER_H,
            "b1_minus_e1_p50_max_ms": TARGET_ABOVE_FLOOR_MS,
            "b1_minus_e1_p50_ms": round(results.above_floor_ms, 4),
            "pass": results.target_met,
        },
    }
    print(json.dumps(document, indent=2))


def find_benchmark_error(exc: BaseException) -> BenchmarkError | None:
    """The BenchmarkError in `exc`, which task groups (the MCP client's) wrap in groups."""
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


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be zero or more")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--iterations", type=positive, default=300, help="measured samples per case"
    )
    parser.add_argument(
        "--warmup", type=non_negative, default=30, help="unmeasured samples before each case"
    )
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="take one sample of every case per round instead of each case back to back",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    settings = Settings(iterations=args.iterations, warmup=args.warmup, interleave=args.interleave)
    with tempfile.TemporaryDirectory(prefix="cgbench-") as scratch:
        root = Path(scratch).resolve()
        (root / "ws").mkdir()
        expected = write_fixture(root / "ws")
        try:
            results = asyncio.run(run(settings, root, expected))
        except (KeyboardInterrupt, asyncio.CancelledError):
            sys.exit("benchmark interrupted; its servers were stopped")
        except Exception as exc:
            error = find_benchmark_error(exc)
            if error is None:
                raise
            sys.exit(f"benchmark failed: {error}")
    if args.json:
        print_json(results)
    else:
        print_markdown(results)


if __name__ == "__main__":
    main()
