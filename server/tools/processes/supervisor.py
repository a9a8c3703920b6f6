"""The process supervisor: one per session, it owns every background (`background: true`)
command of the session, reads their output into an `OutputLog`, enforces the process limits,
and terminates every process tree when the session closes or the server stops.

Processes are named by opaque random IDs (never PIDs) and owned by (session, loop): a lookup
with another loop's ID finds nothing, exactly like an unknown ID. Another session's IDs are
never found because each session has its own supervisor.

Each process has one supervising task (in the server's task group, through
`SessionResources.spawn`) that drains the output, waits for the command, enforces its
deadline, removes what is left of the tree once the command exits, and records the exit code
and the reason it ended (one vocabulary: `ProcessReason`).
"""

from __future__ import annotations

import enum
import logging
import secrets
import select
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from ...core.errors import ResourceExhausted
from ...core.journal import Journal, NullJournal
from ...core.resources import ResourceKey, SessionResources
from ...sandbox.runner import RunningCommand
from .output_log import OutputLog, SpoolBudget

log = logging.getLogger(__name__)

# How much the output reader takes from the pipe at a time.
READ_CHUNK_BYTES = 64 << 10
# Input is written in pieces of PIPE_BUF bytes: a pipe takes such a write whole or not at
# all, so when a write times out the count of accepted bytes is exact.
INPUT_PIECE_BYTES = select.PIPE_BUF
# After the command exits: how long its output may take to reach end-of-file once what is left
# of its tree is gone (a pipe held by an escaped process would otherwise keep the reader).
DRAIN_AFTER_EXIT_SECONDS = 2.0
# Grace for the rest of a tree when its command has exited on its own.
LEFTOVER_GRACE_SECONDS = 0.5
# How long closing waits for starts in flight (a runner that is starting a command) to settle.
START_SETTLE_SECONDS = 10.0


class ProcessReason(enum.StrEnum):
    """Why a supervised process ended (design section 5; the same words everywhere)."""

    EXITED = "exited"
    TIMED_OUT = "timed_out"
    INTERRUPTED = "interrupted"
    TERMINATED = "terminated"
    KILLED = "killed"
    FAILED = "failed"
    LOST_ON_RESTART = "lost_on_restart"


class ProcessStatus(enum.StrEnum):
    """`running` until the command has exited and its output is read to the end, then
    `exited` (whatever the reason; `ProcessReason` says why)."""

    RUNNING = "running"
    EXITED = "exited"


class WaitMode(enum.StrEnum):
    POLL = "poll"
    ANY = "any"
    ALL = "all"


class StopMode(enum.StrEnum):
    INTERRUPT = "interrupt"
    TERMINATE = "terminate"
    KILL = "kill"


@dataclass(frozen=True, slots=True)
class SupervisorSettings:
    """Process limits and output caps (design section 5 defaults; configurable)."""

    max_running_per_loop: int = 8
    max_running_per_session: int = 32
    max_finished_kept: int = 100
    ring_bytes: int = 1 << 20
    spool_bytes: int = 64 << 20
    input_max_bytes: int = 1 << 20
    input_timeout_seconds: float = 5.0
    # SIGTERM -> SIGKILL grace when a process reaches its `timeout`.
    timeout_grace_seconds: float = 2.0
    # SIGTERM -> SIGKILL grace when the session closes or the server stops.
    close_grace_seconds: float = 2.0
    # The server-wide budget every session's spools share (None: unbounded, tests only).
    spool_budget: SpoolBudget | None = None


# A background start needs at least this much of the spool budget left.
MIN_SPOOL_START_BYTES = 1 << 20


class ProcessLimitReached(Exception):
    """The loop or the session already runs as many processes as it may."""

    def __init__(self, scope: str, limit: int) -> None:
        super().__init__(f"the {scope} already runs {limit} supervised processes")
        self.scope = scope
        self.limit = limit


class SupervisorClosed(Exception):
    """The session is closing: no new process may start."""


class InputOutcome(enum.StrEnum):
    WRITTEN = "written"
    BACKPRESSURE = "input_backpressure"
    STDIN_CLOSED = "stdin_closed"
    NOT_RUNNING = "process_exited"


@dataclass(frozen=True, slots=True)
class InputResult:
    outcome: InputOutcome
    # Bytes the process's stdin pipe took (the rest of the data was not written).
    accepted_bytes: int
    eof_sent: bool = False


@dataclass(eq=False)
class SupervisedProcess:
    """One supervised command and everything known about it."""

    process_id: str
    loop_id: str
    # The normalized command as approved (what `process.input` requirements match).
    command: str
    running: RunningCommand
    log: OutputLog
    # Seconds it may run before its tree is terminated (`timed_out`); None: no deadline.
    time_limit: float | None
    start_monotonic: float
    exit_code: int | None = None
    reason: ProcessReason | None = None
    # The last stop this server asked for; it names the reason if the command then ends.
    stop_reason: ProcessReason | None = None
    stdin_closed: bool = False
    exited: anyio.Event = field(default_factory=anyio.Event)
    finished: anyio.Event = field(default_factory=anyio.Event)
    drained: anyio.Event = field(default_factory=anyio.Event)
    input_lock: anyio.Lock = field(default_factory=anyio.Lock)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    @property
    def status(self) -> ProcessStatus:
        return ProcessStatus.EXITED if self.finished.is_set() else ProcessStatus.RUNNING

    @property
    def is_running(self) -> bool:
        return not self.finished.is_set()


Launch = Callable[[], Awaitable[RunningCommand]]


def new_process_id() -> str:
    """An opaque process ID: `proc_` and 144 random bits, URL-safe."""
    return "proc_" + secrets.token_urlsafe(18)


class ProcessSupervisor:
    """The supervised processes of one session (see the module docstring)."""

    def __init__(
        self,
        settings: SupervisorSettings,
        resources: SessionResources,
        journal: Journal | None = None,
    ) -> None:
        self.settings = settings
        # This session's view of the server-wide spool budget (its share of it).
        self._spool = settings.spool_budget.for_session() if settings.spool_budget else None
        self._resources = resources
        # Process lifecycle events (design section 8): IDs, reasons, exit codes; no output,
        # no command, no PID.
        self._journal: Journal = journal or NullJournal()
        self._processes: dict[str, SupervisedProcess] = {}
        self._finished_order: deque[str] = deque()
        self._starting: dict[str, int] = {}
        self._changed = anyio.Event()
        self._closed = False
        self._spool_dir: Path | None = None

    # ------------------------------------------------------------------ lookups

    def get(self, loop_id: str, process_id: str) -> SupervisedProcess | None:
        """The loop's process with that ID; None for an unknown ID and for another loop's."""
        process = self._processes.get(process_id)
        if process is None or process.loop_id != loop_id:
            return None
        return process

    def running_count(self, loop_id: str | None = None) -> int:
        running = sum(
            1
            for p in self._processes.values()
            if p.is_running and (loop_id is None or p.loop_id == loop_id)
        )
        starting = self._starting.get(loop_id, 0) if loop_id else sum(self._starting.values())
        return running + starting

    @property
    def closed(self) -> bool:
        return self._closed

    def kept_count(self) -> int:
        return len(self._processes)

    def check_capacity(self, loop_id: str) -> None:
        """Raise ProcessLimitReached when the loop or the session may start no process."""
        if self.running_count(loop_id) >= self.settings.max_running_per_loop:
            raise ProcessLimitReached("loop", self.settings.max_running_per_loop)
        if self.running_count() >= self.settings.max_running_per_session:
            raise ProcessLimitReached("session", self.settings.max_running_per_session)
        budget = self._spool
        if budget is not None and self.settings.spool_bytes > 0:
            # Finished processes keep their output until forgotten: forget this session's
            # oldest ones to make room, rather than stay refused until the session closes.
            while self._finished_order and (
                budget.share_left() < MIN_SPOOL_START_BYTES
                or budget.budget.available() < MIN_SPOOL_START_BYTES
            ):
                self._forget(self._finished_order.popleft())
            if budget.budget.available() < MIN_SPOOL_START_BYTES:
                raise ProcessLimitReached("spool", budget.limit)
            if budget.share_left() < MIN_SPOOL_START_BYTES:
                raise ProcessLimitReached("spool_share", budget.share)

    # ------------------------------------------------------------------ starting

    async def start(
        self,
        loop_id: str,
        command: str,
        launch: Launch,
        time_limit: float | None,
        execution_id: str = "",
    ) -> SupervisedProcess:
        """Start a command (through `launch`) under supervision. Raises ProcessLimitReached,
        SupervisorClosed, or whatever `launch` raises (nothing is left running then)."""
        if self._closed:
            raise SupervisorClosed
        self.check_capacity(loop_id)
        # Reserve the slot before the first await so concurrent starts cannot overshoot.
        self._starting[loop_id] = self._starting.get(loop_id, 0) + 1
        try:
            running = await launch()
            process_id = new_process_id()
            try:
                if self._closed:
                    raise SupervisorClosed
                output = OutputLog(
                    self.settings.ring_bytes,
                    self._spool_path(process_id),
                    self.settings.spool_bytes,
                    self._spool,
                )
                process = SupervisedProcess(
                    process_id=process_id,
                    loop_id=loop_id,
                    command=command,
                    running=running,
                    log=output,
                    time_limit=time_limit,
                    start_monotonic=time.monotonic(),
                )
                self._processes[process_id] = process
                self._resources.spawn(lambda: self._supervise(process))
                self._journal.record(
                    "process.started",
                    session_id=self._resources.session_id,
                    execution_id=execution_id,
                    data={"process_id": process_id, "loop_id": loop_id},
                )
            except BaseException:
                self._processes.pop(process_id, None)
                with anyio.CancelScope(shield=True):
                    await running.terminate_tree(0)
                    await _close_streams(running)
                raise
        finally:
            # Only now: a closing supervisor waits for starts in flight to settle, so a
            # command started while the session closes is gone before the close returns.
            self._starting[loop_id] -= 1
            if not self._starting[loop_id]:
                del self._starting[loop_id]
            self._notify()
        log.info("process started", extra={"detail": process_id})
        return process

    def _spool_path(self, process_id: str) -> Path | None:
        if self.settings.spool_bytes <= 0:
            return None
        if self._spool_dir is None:
            try:
                root = self._resources.private_dir()
            except RuntimeError:
                return None  # no state directory: the ring alone keeps the output
            self._spool_dir = root / "processes"
            self._spool_dir.mkdir(mode=0o700, exist_ok=True)
        return self._spool_dir / f"{process_id}.out"

    # ------------------------------------------------------------------ supervision

    async def _supervise(self, process: SupervisedProcess) -> None:
        running = process.running
        failed = False
        try:
            with process.scope:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._drain, process)
                    if process.time_limit is not None:
                        tasks.start_soon(self._enforce_deadline, process, process.time_limit)
                    process.exit_code = await running.wait()
                    process.exited.set()
                    # The command is gone; so must be anything it left behind in its tree.
                    with anyio.CancelScope(shield=True):
                        await running.terminate_tree(LEFTOVER_GRACE_SECONDS)
                    with anyio.move_on_after(DRAIN_AFTER_EXIT_SECONDS):
                        await process.drained.wait()
                    tasks.cancel_scope.cancel()
        except Exception:
            failed = True
            log.exception("process supervision failed", extra={"detail": process.process_id})
        finally:
            with anyio.CancelScope(shield=True):
                if running.returncode is None:
                    # Cancelled (server stopping) or failed before the command ended.
                    await running.terminate_tree(0)
                await _close_streams(running)
            self._finish(process, failed)

    async def _drain(self, process: SupervisedProcess) -> None:
        output = process.running.output
        try:
            while True:
                chunk = await output.receive(READ_CHUNK_BYTES)
                process.log.append(chunk)
                self._notify()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            process.drained.set()

    async def _enforce_deadline(self, process: SupervisedProcess, seconds: float) -> None:
        await anyio.sleep(seconds)
        if process.exited.is_set():
            return
        process.stop_reason = ProcessReason.TIMED_OUT
        with anyio.CancelScope(shield=True):
            await process.running.terminate_tree(self.settings.timeout_grace_seconds)

    def _finish(self, process: SupervisedProcess, failed: bool) -> None:
        if process.exit_code is None:
            process.exit_code = process.running.returncode
        if failed or process.exit_code is None:
            process.reason = ProcessReason.FAILED
        else:
            process.reason = process.stop_reason or ProcessReason.EXITED
        process.log.seal()
        process.exited.set()
        process.drained.set()
        process.finished.set()
        log.info(
            "process ended",
            extra={"detail": f"{process.process_id} {process.reason.value} {process.exit_code}"},
        )
        self._journal.record(
            "process.ended",
            session_id=self._resources.session_id,
            data={
                "process_id": process.process_id,
                "loop_id": process.loop_id,
                "reason": process.reason.value,
                "exit_code": process.exit_code,
                "limit": process.running.limit_hit,
                "duration_seconds": round(time.monotonic() - process.start_monotonic, 6),
            },
        )
        if self._processes.get(process.process_id) is process:
            self._finished_order.append(process.process_id)
            while len(self._finished_order) > self.settings.max_finished_kept:
                self._forget(self._finished_order.popleft())
        else:
            process.log.close()
        self._notify()

    def _forget(self, process_id: str) -> None:
        process = self._processes.pop(process_id, None)
        if process is not None:
            process.log.close()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # ------------------------------------------------------------------ waiting

    async def wait(
        self,
        targets: Sequence[tuple[SupervisedProcess, int]],
        mode: WaitMode,
        within: float,
    ) -> bool:
        """Wait up to `within` seconds until `any` target has output past its cursor or has
        ended, or until `all` targets have ended. Returns whether the condition holds."""

        def ready() -> bool:
            match mode:
                case WaitMode.POLL:
                    return True
                case WaitMode.ANY:
                    return any(not p.is_running or p.log.total > c for p, c in targets)
                case WaitMode.ALL:
                    return all(not p.is_running for p, _ in targets)

        with anyio.move_on_after(within):
            while not ready() and not self._closed:
                await self._changed.wait()
        return ready()

    # ------------------------------------------------------------------ input

    async def write_input(
        self, process: SupervisedProcess, data: bytes, eof: bool, within: float
    ) -> InputResult:
        """Write `data` (then close stdin with `eof`) within `within` seconds. A write the
        process does not take in time stops there (`input_backpressure`); no writer is left
        blocked."""
        stdin = process.running.stdin
        if not process.is_running or process.exited.is_set():
            return InputResult(InputOutcome.NOT_RUNNING, 0)
        if stdin is None or process.stdin_closed:
            return InputResult(InputOutcome.STDIN_CLOSED, 0)
        accepted = 0
        with anyio.move_on_after(within) as scope:
            try:
                async with process.input_lock:
                    # Another write may have closed stdin while this one waited for the lock.
                    if not _stdin_open(process):
                        return InputResult(InputOutcome.STDIN_CLOSED, 0)
                    view = memoryview(data)
                    while accepted < len(data):
                        piece = bytes(view[accepted : accepted + INPUT_PIECE_BYTES])
                        await stdin.send(piece)
                        accepted += len(piece)
                    if eof:
                        process.stdin_closed = True
                        await stdin.aclose()
                        return InputResult(InputOutcome.WRITTEN, accepted, eof_sent=True)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                # The process closed its stdin (or exited): nothing more can be written.
                process.stdin_closed = True
                return InputResult(InputOutcome.STDIN_CLOSED, accepted)
        if scope.cancelled_caught:
            return InputResult(InputOutcome.BACKPRESSURE, accepted)
        return InputResult(InputOutcome.WRITTEN, accepted)

    # ------------------------------------------------------------------ stopping

    async def stop(self, process: SupervisedProcess, mode: StopMode, grace: float) -> None:
        """Stop the process tree. `interrupt` sends SIGINT and waits up to `grace` for the
        process to end (no escalation); `terminate` sends SIGTERM and escalates to SIGKILL
        after `grace`; `kill` sends SIGKILL. Returns at once for a finished process."""
        if not process.is_running:
            return
        running = process.running
        if not process.exited.is_set():
            match mode:
                case StopMode.INTERRUPT:
                    before, process.stop_reason = process.stop_reason, ProcessReason.INTERRUPTED
                    running.signal_tree(signal.SIGINT)
                    with anyio.move_on_after(grace):
                        await process.finished.wait()
                    if not process.exited.is_set():
                        # The program handled the interrupt and went on: it was not stopped.
                        process.stop_reason = before
                    return
                case StopMode.TERMINATE:
                    process.stop_reason = ProcessReason.TERMINATED
                    running.signal_tree(signal.SIGTERM)
                    with anyio.move_on_after(grace):
                        await process.exited.wait()
                    if not process.exited.is_set():
                        process.stop_reason = ProcessReason.KILLED
                case StopMode.KILL:
                    process.stop_reason = ProcessReason.KILLED
                    running.signal_tree(signal.SIGKILL)
            with anyio.CancelScope(shield=True):
                await running.terminate_tree(0)
        with anyio.move_on_after(DRAIN_AFTER_EXIT_SECONDS + LEFTOVER_GRACE_SECONDS):
            await process.finished.wait()

    # ------------------------------------------------------------------ closing

    async def aclose(self) -> None:
        """Terminate every process tree (SIGTERM, grace, SIGKILL), confirm each has exited,
        and remove every output spool."""
        if self._closed:
            return
        self._closed = True
        self._notify()
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(START_SETTLE_SECONDS):
                while self._starting:
                    await self._changed.wait()
            async with anyio.create_task_group() as tasks:
                for process in list(self._processes.values()):
                    if process.is_running:
                        tasks.start_soon(self._close_process, process)
            for process_id in list(self._processes):
                self._forget(process_id)
            self._finished_order.clear()
        self._notify()

    async def _close_process(self, process: SupervisedProcess) -> None:
        await self.stop(process, StopMode.TERMINATE, self.settings.close_grace_seconds)
        if process.is_running:
            # The supervising task is stuck (a pipe held open elsewhere): end it; it still
            # records the outcome on its way out.
            process.scope.cancel()
            with anyio.move_on_after(LEFTOVER_GRACE_SECONDS):
                await process.finished.wait()


async def _close_streams(running: RunningCommand) -> None:
    """Release the pipes of a command that has ended (their file descriptors)."""
    streams: list[ByteReceiveStream | ByteSendStream] = [running.output]
    if running.stdin is not None:
        streams.append(running.stdin)
    for stream in streams:
        try:
            await stream.aclose()
        except Exception:  # a pipe that fails to close has nothing left to lose
            log.debug("closing a process pipe failed", exc_info=True)


def _stdin_open(process: SupervisedProcess) -> bool:
    return not process.stdin_closed


SUPERVISOR = ResourceKey[ProcessSupervisor]("process_supervisor")


def session_supervisor(
    resources: SessionResources, settings: SupervisorSettings, journal: Journal | None = None
) -> ProcessSupervisor:
    """The session's supervisor, created on first use."""
    return resources.get(SUPERVISOR, lambda: ProcessSupervisor(settings, resources, journal))


def limit_error(exc: ProcessLimitReached) -> ResourceExhausted:
    """The Prepare-time form of a process limit (the Invoke-time form is a tool error)."""
    if exc.scope == "spool_share":
        return ResourceExhausted(
            "SPOOL_SHARE",
            "This session's running background processes hold its whole share of the server's "
            "spool budget; stop some of them, then retry.",
            metadata={"limit": str(exc.limit)},
        )
    if exc.scope == "spool":
        return ResourceExhausted(
            "SPOOL_BUDGET",
            "The output spools of background processes fill the server's budget or the "
            "disk's reserve for the journal; stop processes or close a session, then retry.",
            metadata={"limit": str(exc.limit)},
        )
    return ResourceExhausted(
        "PROCESS_LIMIT",
        f"The {exc.scope} already runs {exc.limit} background processes; stop one first.",
        metadata={"limit": str(exc.limit), "scope": exc.scope},
    )
