"""Cost of a sandboxed Bash call, and how fast its output streams.

Measured on one plain asyncio loop against a real `callgate serve --sandbox bwrap` process
(headless, config rules allowing exactly the commands below):
  (s) spawning `bwrap <the sandbox's own argv> bash -c true` directly and waiting for it: the
      floor that no sandboxed command can beat;
  (b) `session.run("Bash", {"command": "true"})` through the client library end to end
      (Prepare with evaluate, then Invoke), sampled interleaved with (s);
  (t) streaming `head -c 200M /dev/zero` through InvokeStream: MB/s from Invoke to the
      finished call, the best of a few runs.
Diagnostics, alternating with (s) again in a loop of their own: (r) the server's runner alone
in this process (BwrapRunner.start and the foreground wait: start gate, cgroups, rlimits,
seccomp, watchdog), (l) with the per-command lifeline (the fallback without cgroups), (f) with
the seccomp filter (a fresh pipe holding the program, `--seccomp FD`).
Confinement, alternating once more with (s): (o) the read-only sandbox a read-only
family's command runs in (every bind read-only, TMPDIR a tmpfs, no network) and (m) today's
sandbox with the deny masks of `Bash(rm:*)`, `Bash(curl:*)` and `Bash(python3:*)` (every file of
those programs in PATH covered by /dev/null), plus what finding those files costs (the walk of
the PATH directories, once, and the remembered answer, per command).
Network, alternating once more: (n0) (s) with the host's network shared (no --unshare-net, as
a command approved for network ran before the egress proxy) against (s4) (s) itself, which has a
network namespace of its own; (p0) the runner's `true` with no network against (p1) the same
command approved for one host (its proxy listener made in its namespace, served, and closed).
(x) the proxy's throughput: a sink process reading 1 GiB from a source process on loopback,
through a CONNECT tunnel of the egress proxy (its own thread, as in the server) and directly,
alternating, best of `--transfer-runs` each; (x') for comparison, through the fastest relay
this process can run (blocking splice in a thread). On two cores three processes then share
them, which bounds every relay near half the direct rate.
Dry runs, in this process with the server's runner, alternating: (d0) `sed -i` on a small
file run in the sandbox (what approving the command costs), (d1) the same command dry-run (its
overlay made, run in the dry-run sandbox, the upper layer read and turned into a change set),
and (a) applying that change set ("apply exactly this": every path checked, then written), the
file put back untimed before each.
Targets: (b) at most 2 ms above (s) at the median; (t) at least 100 MB/s; (x) through the proxy
at least half the direct rate.

Usage: bench/bash.py [--iterations N] [--warmup N] [--stream-runs N] [--transfer-runs N]
                     [--dry-runs N] [--strict]
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from callgate.client import CallgateClient
from callgate.client.models import ToolCall
from callgate.server.net.addresses import Endpoint
from callgate.server.net.egress import Allowance, EgressCall, EgressProxy, EgressSettings
from callgate.server.sandbox.bwrap import BwrapRunner, Lifeline
from callgate.server.sandbox.limits import CommandLimiter, CommandLimits
from callgate.server.sandbox.overlay import DryRunMount, overlay_precondition, read_upper
from callgate.server.sandbox.probe import detect_sandbox
from callgate.server.sandbox.program_masks import ProgramMasks
from callgate.server.sandbox.runner import CommandSpec
from callgate.server.sandbox.seccomp import SeccompProgram, build_program
from callgate.server.tools.bash.change_set import (
    Plan,
    Step,
    apply_plan,
    check_plan,
    describe,
    plan_changes,
)
from callgate.server.tools.bash.command_output import run_foreground
from callgate.server.tools.bash.command_spec import SAFE_PATH, CommandSettings, command_env

TOOL_SERVICE: Final = "callgate.v1.ToolService"
STREAM_COMMAND: Final = "head -c 200M /dev/zero"
STREAM_BYTES: Final = 200 << 20
START_TIMEOUT: Final = 20.0
CALL_TIMEOUT: Final = 60.0
STOP_TIMEOUT: Final = 5.0
TARGET_OVERHEAD_MS: Final = 2.0
TARGET_STREAM_MBPS: Final = 100.0
TARGET_PROXY_SHARE: Final = 0.5
TRANSFER_BYTES: Final = 1 << 30
F_SETPIPE_SZ: Final = 1031
# A source of TRANSFER_BYTES per connection, and a sink that reads them (through a CONNECT
# tunnel when given a target) and prints MB/s: separate processes, as a command and a host are.
SOURCE_PROGRAM: Final = r"""
import socket, sys, threading
size = int(sys.argv[1])
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
def send(conn):
    chunk, left = b"x" * (1 << 20), size
    with conn:
        while left > 0:
            conn.sendall(chunk[: min(left, len(chunk))])
            left -= len(chunk)
while True:
    conn, _ = server.accept()
    threading.Thread(target=send, args=(conn,), daemon=True).start()
"""
SINK_PROGRAM: Final = r"""
import socket, sys, time
port, size, tunnel = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
conn = socket.create_connection(("127.0.0.1", port))
if tunnel != "-":
    conn.sendall(f"CONNECT {tunnel} HTTP/1.1\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += conn.recv(1)
    assert head.startswith(b"HTTP/1.1 200"), head
buffer, got, start = bytearray(1 << 20), 0, time.perf_counter()
while got < size:
    count = conn.recv_into(buffer)
    if not count:
        break
    got += count
assert got == size, got
print(got / (time.perf_counter() - start) / 1e6)
"""
DENIED_PROGRAMS: Final = frozenset({"rm", "curl", "python3"})


class BenchmarkError(Exception):
    """The benchmark could not measure what it claims to."""


@dataclass
class Series:
    label: str
    samples_ns: list[int] = field(default_factory=list)

    def p50_ms(self) -> float:
        ordered = sorted(self.samples_ns)
        return ordered[(len(ordered) - 1) // 2] / 1e6

    def p99_ms(self) -> float:
        ordered = sorted(self.samples_ns)
        return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] / 1e6


def callgate_executable() -> str:
    beside = Path(sys.executable).parent / "callgate"
    found = str(beside) if beside.exists() else shutil.which("callgate")
    if found is None:
        raise BenchmarkError("no callgate executable; run `make install`")
    return found


def write_config(root: Path, socket: Path) -> Path:
    rules = "".join(
        f'[[rules]]\neffect = "allow"\nkind = "command.execute"\nmatch = "{command}"\n\n'
        for command in ("true", STREAM_COMMAND)
    )
    config = root / "callgate.toml"
    config.write_text(
        f'listen = ["unix://{socket}"]\n'
        f'workspace = "{root / "ws"}"\n'
        f'state_dir = "{root / "state"}"\n'
        'sandbox = "bwrap"\n'
        'approval_mode = "headless"\n'
        'log_level = "warning"\n\n' + rules
    )
    return config


@asynccontextmanager
async def callgate_server(root: Path) -> AsyncIterator[tuple[str, str]]:
    """`callgate serve` with the bench config; yields (target, agent token)."""
    socket = root / "cg.sock"
    config = write_config(root, socket)
    log_path = root / "server.log"
    with log_path.open("w") as log:
        process = await asyncio.create_subprocess_exec(
            callgate_executable(),
            "serve",
            "--config",
            str(config),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        try:
            target = f"unix://{socket}"
            await wait_until_serving(process, target, log_path)
            yield target, (root / "state" / "tokens" / "agent").read_text().strip()
        finally:
            if process.returncode is None:
                process.terminate()
                try:
                    await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
                except TimeoutError:
                    process.kill()
                    await process.wait()


async def wait_until_serving(process: asyncio.subprocess.Process, target: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    request = health_pb2.HealthCheckRequest(service=TOOL_SERVICE)
    async with grpc.aio.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            if process.returncode is not None:
                tail = log.read_text(errors="replace")[-2000:]  # noqa: ASYNC240  # a failure path
                raise BenchmarkError(f"callgate serve exited with {process.returncode}:\n{tail}")
            try:
                response = await health.Check(request, timeout=1.0)
                if response.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise BenchmarkError(f"callgate serve was not SERVING within {START_TIMEOUT} s")
            await asyncio.sleep(0.05)


def bare_spec(root: Path) -> CommandSpec:
    """The spec the server's runner gets for `true` in this workspace (same mounts)."""
    private = root / "bare"
    home, tmp = private / "home", private / "tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(exist_ok=True)
    workspace = str(root / "ws")
    homes = {os.path.realpath(os.path.expanduser("~"))} - {"/"}
    return CommandSpec(
        command="true",
        workdir=workspace,
        workspace=workspace,
        home=str(home),
        tmp=str(tmp),
        env=command_env(str(home), str(tmp), CommandSettings(env_passthrough={})),
        hidden_dirs=(str(root / "state"), *sorted(homes)),
        masked_paths=(str(root / "cg.sock"),),
    )


def bare_argv(root: Path, bwrap: str) -> list[str]:
    """The argv the server's runner builds for `true` in this workspace (same mounts, same
    namespaces), without the --info-fd report."""
    return BwrapRunner(bwrap).argv(bare_spec(root))


async def run_with_runner(runner: BwrapRunner, spec: CommandSpec, expect: int = 0) -> None:
    running = await runner.start(spec)
    result = await run_foreground(running, CALL_TIMEOUT, None)
    if result.exit_code != expect:
        raise BenchmarkError(f"the runner's `{spec.command}` failed: {result.text[:200]!r}")


async def spawn_bare(
    argv: list[str],
    env: dict[str, str],
    lifeline: bool = False,
    seccomp: SeccompProgram | None = None,
) -> None:
    """Run bwrap once; with `lifeline`, as the runner does (BASH_ENV script, watcher fork);
    with `seccomp`, loading that filter as the runner does (a fresh fd per spawn)."""
    pass_fds: tuple[int, ...] = ()
    held: list[int] = []
    if lifeline:
        line = Lifeline.open()
        env = {**env, **line.env}
        pass_fds = line.passed
        held = [*line.passed, line.write]
    if seccomp is not None:
        held.append(seccomp.open_fd())
        pass_fds = (*pass_fds, held[-1])
        split = argv.index("--")
        argv = [*argv[:split], "--seccomp", str(held[-1]), *argv[split:]]
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            pass_fds=pass_fds,
        )
        await process.communicate()
    finally:
        for fd in held:
            os.close(fd)
    if process.returncode != 0:
        raise BenchmarkError(f"bare bwrap exited with {process.returncode}")


async def measure_latency(
    target: str, token: str, root: Path, bwrap: str, iterations: int, warmup: int
) -> tuple[Series, Series, Series, Series, Series, Series, Series]:
    bare = Series("(s) spawn `bwrap <same argv> bash -c true` and wait, same asyncio loop")
    e2e = Series('(b) `session.run("Bash", {"command": "true"})`, sandboxed, end to end')
    with_lifeline = Series("(l) diagnostic: (s) with the per-command lifeline (BASH_ENV, watcher)")
    with_seccomp = Series("(f) diagnostic: (s) with the seccomp filter (--seccomp, fresh pipe)")
    with_runner = Series("(r) diagnostic: the server's runner alone, as the server sets it up")
    argv = bare_argv(root, bwrap)
    spec = bare_spec(root)
    program = build_program()
    limiter = CommandLimiter(CommandLimits())
    runner = BwrapRunner(bwrap, seccomp=program, limiter=limiter)
    env = {"PATH": "/usr/bin:/bin"}
    async with (
        CallgateClient(target, token=token) as client,
        client.open_session() as session,
    ):
        for index in range(warmup + iterations):
            start = time.perf_counter_ns()
            await asyncio.wait_for(spawn_bare(argv, env), CALL_TIMEOUT)
            middle = time.perf_counter_ns()
            result = await asyncio.wait_for(session.run("Bash", {"command": "true"}), CALL_TIMEOUT)
            end = time.perf_counter_ns()
            if result.is_error or result.exit_code != 0:
                raise BenchmarkError(f"Bash `true` failed: {result.text[:200]!r}")
            if index >= warmup:
                bare.samples_ns.append(middle - start)
                e2e.samples_ns.append(end - middle)
    # The diagnostic in a loop of its own, alternating with the plain spawn: interleaved with
    # the end-to-end case it would disturb it (its sandbox's teardown overlaps the next one).
    plain = Series("(s') (s) again, alternating with (l) and (f)")
    plain_again = Series("(s'') (s) again, alternating with (r)")
    try:
        for index in range(warmup + iterations):
            start = time.perf_counter_ns()
            await asyncio.wait_for(spawn_bare(argv, env), CALL_TIMEOUT)
            middle = time.perf_counter_ns()
            await asyncio.wait_for(spawn_bare(argv, env, lifeline=True), CALL_TIMEOUT)
            filtered = time.perf_counter_ns()
            await asyncio.wait_for(spawn_bare(argv, env, seccomp=program), CALL_TIMEOUT)
            end = time.perf_counter_ns()
            if index >= warmup:
                plain.samples_ns.append(middle - start)
                with_lifeline.samples_ns.append(filtered - middle)
                with_seccomp.samples_ns.append(end - filtered)
        # The runner in a loop of its own, alternating with the plain spawn only: several
        # sandboxes torn down just before would slow its cgroup placement (the kernel waits
        # for an RCU grace period), which the server's own sequence of commands does not see.
        for index in range(warmup + iterations):
            start = time.perf_counter_ns()
            await asyncio.wait_for(spawn_bare(argv, env), CALL_TIMEOUT)
            middle = time.perf_counter_ns()
            await asyncio.wait_for(run_with_runner(runner, spec), CALL_TIMEOUT)
            end = time.perf_counter_ns()
            if index >= warmup:
                plain_again.samples_ns.append(middle - start)
                with_runner.samples_ns.append(end - middle)
    finally:
        limiter.close()
    return bare, e2e, with_lifeline, with_seccomp, with_runner, plain, plain_again


@dataclass
class Confinement:
    plain: Series
    read_only: Series
    masked: Series
    masked_files: int
    walk_ms: float
    remembered_us: float


async def measure_confinement(root: Path, bwrap: str, iterations: int, warmup: int) -> Confinement:
    """(s), (o) and (m) alternating (see the module docstring), and the mask look-up's cost."""
    spec = bare_spec(root)
    runner = BwrapRunner(bwrap)
    masks = ProgramMasks()
    started = time.perf_counter_ns()
    key = masks.key(DENIED_PROGRAMS, SAFE_PATH.split(":"))
    files = masks.find(key)
    walk_ms = (time.perf_counter_ns() - started) / 1e6
    started = time.perf_counter_ns()
    for _ in range(1000):
        masks.cached(masks.key(DENIED_PROGRAMS, SAFE_PATH.split(":")))
    remembered_us = (time.perf_counter_ns() - started) / 1e3 / 1000
    argvs = (
        runner.argv(spec),
        runner.argv(replace(spec, read_only=True)),
        runner.argv(replace(spec, masked_paths=(*spec.masked_paths, *files))),
    )
    result = Confinement(
        Series("(s3) (s) again, alternating with (o) and (m)"),
        Series("(o) the read-only sandbox (read-only family): spawn and wait"),
        Series("(m) today's sandbox with the deny masks of rm, curl, python3"),
        len(files),
        walk_ms,
        remembered_us,
    )
    env = {"PATH": "/usr/bin:/bin"}
    for index in range(warmup + iterations):
        times = [time.perf_counter_ns()]
        for argv in argvs:
            await asyncio.wait_for(spawn_bare(argv, env), CALL_TIMEOUT)
            times.append(time.perf_counter_ns())
        if index >= warmup:
            for series, start, end in zip(
                (result.plain, result.read_only, result.masked), times, times[1:], strict=False
            ):
                series.samples_ns.append(end - start)
    return result


@dataclass
class DryRuns:
    command: Series
    dry_run: Series
    apply: Series


DRY_COMMAND: Final = "sed -i 's/old/new/' notes.txt"


async def measure_dry_runs(root: Path, bwrap: str, iterations: int, warmup: int) -> DryRuns:
    """(d0), (d1) and (a) alternating (see the module docstring)."""
    workspace = root / "ws"
    notes = workspace / "notes.txt"
    spec = replace(bare_spec(root), command=DRY_COMMAND)
    runner = BwrapRunner(bwrap, seccomp=build_program(), limiter=CommandLimiter(CommandLimits()))
    mountpoint = root / "dry-run"
    mountpoint.mkdir()
    result = DryRuns(
        Series("(d0) `sed -i` on a small file in the sandbox (the server's runner)"),
        Series("(d1) the same command dry-run: overlay, run, change set"),
        Series("(a) applying its change set: check every path, write"),
    )

    async def dry_run() -> list[Step]:
        mount = DryRunMount(str(mountpoint), str(workspace), 64 << 20)
        try:
            running = await runner.start(replace(spec, dry_run=mount, pinned_dirs=()))
            done = await run_foreground(running, CALL_TIMEOUT, None)
            if done.exit_code != 0:
                raise BenchmarkError(f"the dry run failed: {done.text[:200]!r}")
            steps = plan_changes(str(workspace), read_upper(mount, 10_000))
            describe(str(workspace), steps, 16 << 10)
            return steps
        finally:
            mount.close()

    for index in range(warmup + iterations):
        notes.write_text("one\nold two\nthree\n")
        start = time.perf_counter_ns()
        await run_with_runner(runner, spec, expect=0)
        ran = time.perf_counter_ns()
        notes.write_text("one\nold two\nthree\n")
        start_dry = time.perf_counter_ns()
        steps = await dry_run()
        dry = time.perf_counter_ns()
        plan = Plan(tuple(steps))
        start_apply = time.perf_counter_ns()
        check_plan(str(workspace), plan)
        apply_plan(str(workspace), plan)
        applied = time.perf_counter_ns()
        if notes.read_text() != "one\nnew two\nthree\n":
            raise BenchmarkError("the change set did not land as the command would have")
        if index >= warmup:
            result.command.samples_ns.append(ran - start)
            result.dry_run.samples_ns.append(dry - start_dry)
            result.apply.samples_ns.append(applied - start_apply)
    return result


def print_network(network: Network) -> bool:
    """The network rows; whether (x) met its target."""
    namespace_ms = network.own.p50_ms() - network.shared.p50_ms()
    print(
        f"| a network namespace of its own for every command, (s4) minus (n0) at p50 "
        f"| {namespace_ms:+.2f} ms | — | — |"
    )
    host_ms = network.one_host.p50_ms() - network.no_network.p50_ms()
    print(
        f"| a command approved for one host against none (its proxy), (p1) minus (p0) at p50 "
        f"| {host_ms:+.2f} ms | — | — |"
    )
    direct, proxied = max(network.direct), max(network.proxied)
    share = proxied / direct
    share_ok = share >= TARGET_PROXY_SHARE
    runs_direct = ", ".join(f"{rate:.0f}" for rate in network.direct)
    runs_proxied = ", ".join(f"{rate:.0f}" for rate in network.proxied)
    print(
        f"| (x) 1 GiB on loopback through the proxy ({runs_proxied}) against direct "
        f"({runs_direct}), best of {len(network.direct)} "
        f"| {proxied:.0f} / {direct:.0f} MB/s = {share:.2f} | ≥ {TARGET_PROXY_SHARE:g} "
        f"| {verdict(share_ok)} |"
    )
    runs_ceiling = ", ".join(f"{rate:.0f}" for rate in network.ceiling)
    print(
        f"| (x') diagnostic: the same through a blocking splice relay in a thread, no loop, "
        f"no checks ({runs_ceiling}) | {max(network.ceiling):.0f} MB/s "
        f"= {max(network.ceiling) / direct:.2f} | — | — |"
    )
    return share_ok


async def maybe_dry_runs(root: Path, bwrap: str, args: argparse.Namespace) -> DryRuns | None:
    """The dry-run series, when overlay mounts work here (as root)."""
    unavailable = overlay_precondition()
    if unavailable:
        print(f"(dry runs not measured: {unavailable})")
        return None
    return await measure_dry_runs(root, bwrap, args.dry_runs, max(args.warmup // 4, 3))


def print_dry_runs(dry_runs: DryRuns) -> None:
    added = dry_runs.dry_run.p50_ms() - dry_runs.command.p50_ms()
    print(
        f"| what a dry run adds to the command, (d1) minus (d0) at p50 | {added:+.2f} ms | — | — |"
    )
    ratio = dry_runs.apply.p50_ms() / dry_runs.command.p50_ms()
    print(
        f"| applying its change set against running the command, (a) / (d0) at p50 "
        f"| {dry_runs.apply.p50_ms():.2f} / {dry_runs.command.p50_ms():.2f} ms "
        f"= {ratio:.2f} | — | — |"
    )


@dataclass
class Network:
    shared: Series
    own: Series
    no_network: Series
    one_host: Series
    direct: list[float]
    proxied: list[float]
    ceiling: list[float] = field(default_factory=list)


async def measure_network(
    root: Path, bwrap: str, iterations: int, warmup: int, transfers: int
) -> Network:
    """(n0)/(s4), (p0)/(p1) and (x): see the module docstring."""
    result = Network(
        Series("(n0) (s) sharing the host's network (no --unshare-net)"),
        Series("(s4) (s) again: a network namespace of its own, alternating with (n0)"),
        Series("(p0) the runner's `true`, no network"),
        Series("(p1) the runner's `true` approved for one host (listener, proxy, close)"),
        [],
        [],
    )
    argv = bare_argv(root, bwrap)
    shared = [a for a in argv if a != "--unshare-net"]
    env = {"PATH": "/usr/bin:/bin"}
    for index in range(warmup + iterations):
        times = [time.perf_counter_ns()]
        for one in (shared, argv):
            await asyncio.wait_for(spawn_bare(one, env), CALL_TIMEOUT)
            times.append(time.perf_counter_ns())
        if index >= warmup:
            result.shared.samples_ns.append(times[1] - times[0])
            result.own.samples_ns.append(times[2] - times[1])
    proxy = EgressProxy(EgressSettings.build(["127.0.0.0/8"]))
    limiter = CommandLimiter(CommandLimits())
    runner = BwrapRunner(
        bwrap, seccomp=build_program(), limiter=limiter, egress=proxy, record=lambda _: None
    )
    spec = bare_spec(root)
    call = EgressCall("bench", "bench", (Allowance(Endpoint.parse("127.0.0.1:9"), "bench"),))
    with_host = replace(spec, egress=call)
    try:
        for index in range(warmup + iterations):
            times = [time.perf_counter_ns()]
            for each in (spec, with_host):
                await asyncio.wait_for(run_with_runner(runner, each), CALL_TIMEOUT)
                times.append(time.perf_counter_ns())
            if index >= warmup:
                result.no_network.samples_ns.append(times[1] - times[0])
                result.one_host.samples_ns.append(times[2] - times[1])
        result.direct, result.proxied, result.ceiling = await measure_transfer(proxy, transfers)
    finally:
        limiter.close()
        proxy.stop()
    return result


def blocking_relay(port: int) -> int:
    """(x'): the fastest relay this process can be, for comparison: a thread per connection
    answering any CONNECT with 200 and splicing the source's stream to the client with
    blocking splice(2) calls (no event loop, no checks). Returns its port."""
    server = socket.create_server(("127.0.0.1", 0))

    def pump(client: socket.socket) -> None:
        with client, socket.create_connection(("127.0.0.1", port)) as upstream:
            head = b""
            while b"\r\n\r\n" not in head:
                head += client.recv(1)
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            read_end, write_end = os.pipe()
            fcntl.fcntl(write_end, F_SETPIPE_SZ, 1 << 20)
            try:
                while moved := os.splice(upstream.fileno(), write_end, 1 << 20):
                    while moved:
                        moved -= os.splice(read_end, client.fileno(), moved)
            finally:
                os.close(read_end)
                os.close(write_end)

    def accept() -> None:
        while True:
            client, _ = server.accept()
            threading.Thread(target=pump, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return int(server.getsockname()[1])


async def measure_transfer(
    proxy: EgressProxy, runs: int
) -> tuple[list[float], list[float], list[float]]:
    """(x): MB/s of each direct, proxied and (x') blocking-relay transfer, alternating."""
    source = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SOURCE_PROGRAM, str(TRANSFER_BYTES), stdout=subprocess.PIPE
    )
    assert source.stdout is not None
    port = int(await source.stdout.readline())
    target = f"127.0.0.1:{port}"
    call = EgressCall("bench", "bench", (Allowance(Endpoint.parse(target), "bench"),))

    async def sink(to_port: int, tunnel: str) -> float:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            SINK_PROGRAM,
            str(to_port),
            str(TRANSFER_BYTES),
            tunnel,
            stdout=subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(process.communicate(), CALL_TIMEOUT)
        if process.returncode != 0:
            raise BenchmarkError("a transfer did not complete")
        return float(out)

    direct: list[float] = []
    proxied: list[float] = []
    ceiling: list[float] = []
    floor = blocking_relay(port)
    try:
        for _ in range(runs):
            direct.append(await sink(port, "-"))
            ceiling.append(await sink(floor, target))
            # Each transfer is a call of its own, with its own byte budget.
            listener = socket.create_server(("127.0.0.1", 0))
            handle = await proxy.open(listener, call, lambda _: None)
            try:
                proxied.append(await sink(listener.getsockname()[1], target))
            finally:
                await proxy.close(handle)
    finally:
        source.kill()
        await source.wait()
    return direct, proxied, ceiling


async def measure_stream(target: str, token: str, runs: int) -> list[float]:
    """MB/s (10^6 bytes per second) of each streaming run, Invoke to finished call."""
    rates: list[float] = []
    async with (
        CallgateClient(target, token=token) as client,
        client.open_session() as session,
    ):
        for _ in range(runs):
            call = await session.prepare("Bash", {"command": STREAM_COMMAND}, evaluate=True)
            received = 0
            finished: ToolCall | None = None
            start = time.perf_counter()
            async with asyncio.timeout(CALL_TIMEOUT):
                async for event in session.invoke_stream(call.execution_id):
                    if isinstance(event, bytes):
                        received += len(event)
                    else:
                        finished = event
            elapsed = time.perf_counter() - start
            if finished is None or finished.result is None or finished.result.exit_code != 0:
                raise BenchmarkError("the streaming command did not finish with exit code 0")
            if received != STREAM_BYTES:
                raise BenchmarkError(f"streamed {received} bytes, expected {STREAM_BYTES}")
            rates.append(received / elapsed / 1e6)
    return rates


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


async def run(args: argparse.Namespace, root: Path) -> bool:
    status = detect_sandbox("auto")
    if status.bwrap_path is None:
        raise BenchmarkError(f"bubblewrap does not work here: {status.warning}")
    (root / "ws").mkdir()
    async with AsyncExitStack() as stack:
        target, token = await stack.enter_async_context(callgate_server(root))
        series = await measure_latency(
            target, token, root, status.bwrap_path, args.iterations, args.warmup
        )
        bare, e2e, with_lifeline, with_seccomp, with_runner, plain, plain_again = series
        rates = await measure_stream(target, token, args.stream_runs)
    confinement = await measure_confinement(root, status.bwrap_path, args.iterations, args.warmup)
    network = await measure_network(
        root, status.bwrap_path, args.iterations, args.warmup, args.transfer_runs
    )
    dry_runs = await maybe_dry_runs(root, status.bwrap_path, args)
    overhead = e2e.p50_ms() - bare.p50_ms()
    best = max(rates)
    print(f"Sandboxed Bash, {args.iterations} samples after {args.warmup} warm-ups\n")
    print("| case | p50 ms | p99 ms |")
    print("|---|---:|---:|")
    confined = (confinement.plain, confinement.read_only, confinement.masked)
    networked = (network.shared, network.own, network.no_network, network.one_host)
    for one in (
        bare,
        e2e,
        plain,
        with_lifeline,
        with_seccomp,
        plain_again,
        with_runner,
        *confined,
        *networked,
        *((dry_runs.command, dry_runs.dry_run, dry_runs.apply) if dry_runs else ()),
    ):
        print(f"| {one.label} | {one.p50_ms():.2f} | {one.p99_ms():.2f} |")
    print()
    print("| measure | value | target | result |")
    print("|---|---:|---:|---|")
    overhead_ok = overhead <= TARGET_OVERHEAD_MS
    stream_ok = best >= TARGET_STREAM_MBPS
    print(
        f"| (b) minus (s) at p50 | {overhead:.2f} ms | ≤ {TARGET_OVERHEAD_MS:g} ms "
        f"| {verdict(overhead_ok)} |"
    )
    runner_ms = with_runner.p50_ms() - plain_again.p50_ms()
    print(
        f"| diagnostic: the runner's share of (b) minus (s), (r) minus (s'') at p50 "
        f"| {runner_ms:.2f} ms | — | — |"
    )
    lifeline_ms = with_lifeline.p50_ms() - plain.p50_ms()
    print(
        f"| diagnostic: what the per-command lifeline (fallback) would add, (l) minus (s') "
        f"| {lifeline_ms:.2f} ms | — | — |"
    )
    seccomp_ms = with_seccomp.p50_ms() - plain.p50_ms()
    print(
        f"| diagnostic: the seccomp filter's share of (b) minus (s), (f) minus (s') at p50 "
        f"| {seccomp_ms:.2f} ms | — | — |"
    )
    read_only_ms = confinement.read_only.p50_ms() - confinement.plain.p50_ms()
    print(
        f"| the read-only sandbox against today's, (o) minus (s3) at p50 "
        f"| {read_only_ms:+.2f} ms | — | — |"
    )
    masked_ms = confinement.masked.p50_ms() - confinement.plain.p50_ms()
    print(
        f"| {confinement.masked_files} deny masks against none, (m) minus (s3) at p50 "
        f"| {masked_ms:+.2f} ms | — | — |"
    )
    print(
        f"| finding the masked files: the PATH walk (once per rule change) / remembered "
        f"| {confinement.walk_ms:.2f} ms / {confinement.remembered_us:.1f} µs | — | — |"
    )
    runs = ", ".join(f"{rate:.0f}" for rate in rates)
    print(
        f"| (t) InvokeStream `{STREAM_COMMAND}` (best of {len(rates)}: {runs}) "
        f"| {best:.0f} MB/s | ≥ {TARGET_STREAM_MBPS:g} MB/s | {verdict(stream_ok)} |"
    )
    share_ok = print_network(network)
    if dry_runs is not None:
        print_dry_runs(dry_runs)
    return overhead_ok and stream_ok and share_ok


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--iterations", type=positive, default=200, help="latency samples")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured latency samples")
    parser.add_argument("--stream-runs", type=positive, default=3, help="streaming runs")
    parser.add_argument(
        "--transfer-runs", type=positive, default=5, help="proxy throughput runs (each way)"
    )
    parser.add_argument("--dry-runs", type=positive, default=50, help="dry-run samples")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    # Not under /tmp: the sandbox replaces /tmp, and the workspace is bound back into it
    # either way, but a path outside it keeps the measured mounts those of a real setup.
    with tempfile.TemporaryDirectory(prefix="cgbench-bash-") as scratch:
        try:
            passed = asyncio.run(run(args, Path(scratch).resolve()))
        except BenchmarkError as exc:
            sys.exit(f"benchmark failed: {exc}")
    if args.strict and not passed:
        sys.exit(1)


if __name__ == "__main__":
    main()
