"""The supervised-process tools: ProcessOutput, ProcessInput and ProcessStop (design section 5).

They act on the background commands (`Bash` with `background: true`) of the caller's own loop;
a process of another loop or session is `not_found`, exactly like an unknown ID. Results are
JSON objects in `result.json` with a one-line human `text`; tool-level failures carry a
stable `error` code (`not_found`, `cursor_ahead`, `input_backpressure`, `stdin_closed`,
`process_exited`, `process_limit`).

ProcessOutput and ProcessStop need no requirement: they read or stop only what this loop
already started with an approved command. ProcessInput needs `process.input`, matched against
the process's original (normalized) command, so policy can gate what is typed into it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from ...core.errors import arguments_invalid
from ...core.journal import Journal
from ...core.models import Requirement, RequirementKind, RuleCandidate, ToolResult
from ...core.tool import Arguments, Artifact, Prepared, Tool, ToolContext
from ..common import display
from .output_log import CursorAhead, OutputChunk
from .supervisor import (
    SUPERVISOR,
    InputOutcome,
    ProcessLimitReached,
    ProcessSupervisor,
    StopMode,
    SupervisedProcess,
    SupervisorSettings,
    WaitMode,
    limit_error,
    session_supervisor,
)
from .terminal_text import safe_text, unfinished_tail

DEFAULT_LIMIT_BYTES = 32 << 10
# The most output one ProcessOutput returns, over all its processes (raw bytes; the JSON of
# that stays well under the 4 MiB message cap even when every byte needs escaping).
MAX_OUTPUT_BYTES = 1 << 20
MAX_PROCESS_IDS = 32
MAX_WAIT_MS = 60_000
DEFAULT_WAIT_MS = 10_000
DEFAULT_STOP_GRACE_MS = 5_000
MAX_STOP_GRACE_MS = 60_000
_MAX_ID_CHARS = 128

ProcessId = Annotated[str, Field(min_length=1, max_length=_MAX_ID_CHARS)]
Encoding = Literal["text", "base64"]


class ProcessServices:
    """What the process tools and background Bash share: the settings every session's
    supervisor is built with. One per server, built in the composition root."""

    def __init__(
        self, settings: SupervisorSettings | None = None, journal: Journal | None = None
    ) -> None:
        self.settings = settings or SupervisorSettings()
        # Where supervisors record process lifecycle events (the server's audit journal).
        self.journal = journal

    def supervisor(self, ctx: ToolContext) -> ProcessSupervisor:
        """The session's supervisor, created on first use."""
        return session_supervisor(ctx.resources, self.settings, self.journal)

    def find(self, ctx: ToolContext, process_id: str) -> SupervisedProcess | None:
        """The calling loop's process with that ID (None: unknown, or someone else's)."""
        supervisor = ctx.resources.peek(SUPERVISOR)
        if supervisor is None:
            return None
        return supervisor.get(ctx.loop.loop_id, process_id)

    def check_capacity(self, ctx: ToolContext) -> None:
        """For Prepare of a background command: raise ResourceExhausted `PROCESS_LIMIT` when
        the loop (or session) already runs as many processes as it may. Invoke checks again."""
        supervisor = ctx.resources.peek(SUPERVISOR)
        if supervisor is None:
            return
        try:
            supervisor.check_capacity(ctx.loop.loop_id)
        except ProcessLimitReached as exc:
            raise limit_error(exc) from None


# Results --------------------------------------------------------------------------------------


def json_result(text: str, payload: Mapping[str, object]) -> ToolResult:
    return ToolResult(text=text, json=json.dumps(payload, ensure_ascii=False))


def error_result(code: str, message: str, **fields: object) -> ToolResult:
    """A tool-level failure: `{"error": code, "message": ..., **fields}` with is_error."""
    payload = {"error": code, "message": message, **fields}
    return ToolResult(
        text=message,
        is_error=True,
        error_code=code,
        json=json.dumps(payload, ensure_ascii=False),
    )


def not_found(process_id: str) -> ToolResult:
    return error_result(
        "not_found",
        f"This loop has no process {display(process_id[:_MAX_ID_CHARS])}; it may have ended "
        "long ago and been forgotten.",
        process_id=process_id[:_MAX_ID_CHARS],
    )


def process_limit(exc: ProcessLimitReached) -> ToolResult:
    if exc.scope == "spool_share":
        return error_result(
            "spool_share",
            f"This session's running background processes hold its whole share "
            f"({exc.limit >> 20} MiB) of the server's spool budget; stop some of them and retry.",
            limit=exc.limit,
        )
    if exc.scope == "spool":
        return error_result(
            "spool_budget",
            f"The output spools of background processes already fill the server's budget "
            f"({exc.limit >> 20} MiB) or the disk's reserve for the journal; stop processes "
            "or close a session, whose spools are then deleted, and retry.",
            limit=exc.limit,
        )
    return error_result(
        "process_limit",
        f"The {exc.scope} already runs {exc.limit} background processes; stop one first.",
        scope=exc.scope,
        limit=exc.limit,
    )


def process_state(process: SupervisedProcess) -> dict[str, object]:
    """The fields every process result has."""
    return {
        "process_id": process.process_id,
        "status": process.status.value,
        "exit_code": process.exit_code if not process.is_running else None,
        "reason": process.reason.value if process.reason and not process.is_running else None,
        # The sandbox limit it ran into (pids_limit, memory_limit, cpu_limit, file_size_limit).
        "limit": process.running.limit_hit if not process.is_running else None,
        # The endpoints its proxy refused so far (`host:port: why`), for a new call to declare.
        "network_refused": [f"{e}: {why}" for e, why in process.running.network_refused] or None,
        "total_bytes": process.log.total,
        # Set when the spool stopped early (the server-wide budget or the journal's reserve).
        "spool_stopped": process.log.spool_stopped or None,
    }


async def read_output(
    process: SupervisedProcess, cursor: int, limit: int, encoding: Encoding
) -> tuple[dict[str, object], OutputChunk]:
    """A process's state with up to `limit` bytes of output from `cursor`. Raises
    CursorAhead. In text mode a character or escape sequence cut at the end of the read is
    left for the next read (never all of it, so a read always makes progress), and the text
    is shortened until its JSON takes no more room than base64 of `limit` bytes would (an
    invalid byte becomes a 3-byte U+FFFD, a quote an escaped pair)."""
    running = process.is_running
    chunk = await process.log.read(cursor, limit)
    data = chunk.data
    more = running or chunk.end < chunk.total
    if encoding == "text":
        data, output = _text_within(data, more, limit * 4 // 3 + 4)
    else:
        output = base64.b64encode(data).decode()
    if len(data) != len(chunk.data):
        chunk = OutputChunk(data, chunk.start, chunk.gap, chunk.total)
    fields = process_state(process)
    # The state was taken after the read: a process seen as ended had written all of it.
    fields["total_bytes"] = chunk.total if running else process.log.total
    fields.update(
        output=output,
        encoding=encoding,
        start_cursor=chunk.start,
        next_cursor=chunk.end,
        gap=chunk.gap,
    )
    if chunk.gap:
        fields["dropped_bytes"] = chunk.start - cursor
    return fields, chunk


def _text_within(data: bytes, more: bool, budget: int) -> tuple[bytes, str]:
    """The longest prefix of `data` (all of it, usually) whose safe text fits `budget` bytes
    of JSON, and that text. With `more` output to come, an unfinished tail is held back."""
    while True:
        if more:
            hold = unfinished_tail(data)
            if 0 < hold < len(data):
                data = data[:-hold]
        text = safe_text(data)
        size = _json_size(text)
        if size <= budget or len(data) <= 1:
            return data, text
        data = data[: max(1, len(data) * budget // size)]
        more = True


def _json_size(text: str) -> int:
    """Bytes of `text` as a JSON string body with ensure_ascii=False (safe text holds no
    control characters but newline and tab, which JSON escapes as two bytes each)."""
    return (
        len(text.encode("utf-8"))
        + text.count('"')
        + text.count("\\")
        + text.count("\n")
        + text.count("\t")
    )


def describe(fields: Mapping[str, object], cursor: int) -> str:
    """One line for the human `text` of a result."""
    status = fields["status"]
    if fields.get("reason"):
        status = f"{status} ({fields['reason']}, exit code {fields['exit_code']})"
    line = f"{fields['process_id']}: {status}"
    if "next_cursor" in fields:
        line += (
            f"; output bytes {fields['start_cursor']}..{fields['next_cursor']}"
            f" of {fields['total_bytes']}"
        )
        if fields.get("gap"):
            line += f" ({fields['dropped_bytes']} bytes after cursor {cursor} were dropped)"
    return line


def cursor_ahead(process_id: str, exc: CursorAhead) -> ToolResult:
    return error_result(
        "cursor_ahead",
        f"Cursor {exc.cursor} is past the end of the output of {process_id} "
        f"({exc.total} bytes so far); use a next_cursor from an earlier result.",
        process_id=process_id,
        cursor=exc.cursor,
        total_bytes=exc.total,
    )


# ProcessOutput --------------------------------------------------------------------------------


class ProcessOutputArguments(Arguments):
    process_id: ProcessId | None = Field(
        default=None, description="The process to read (give this or process_ids)."
    )
    process_ids: (
        Annotated[list[ProcessId], Field(min_length=1, max_length=MAX_PROCESS_IDS)] | None
    ) = Field(default=None, description="Several processes to read or wait for at once.")
    cursor: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="Byte offset to read from (a next_cursor from an earlier result); with "
        "process_ids, the cursor of every process not named in `cursors`.",
    )
    cursors: dict[str, Annotated[int, Field(ge=0)]] | None = Field(
        default=None, description="With process_ids: a cursor per process ID."
    )
    limit_bytes: Annotated[int, Field(ge=1, le=MAX_OUTPUT_BYTES)] = Field(
        default=DEFAULT_LIMIT_BYTES,
        description="Most output bytes to return per process (with process_ids, also at most "
        "1 MiB divided by the number of processes).",
    )
    wait: Literal["poll", "any", "all"] = Field(
        default="poll",
        description="poll: return at once; any: wait until a process has output past its "
        "cursor or has ended; all: wait until every process has ended.",
    )
    timeout_ms: Annotated[int, Field(ge=0, le=MAX_WAIT_MS)] | None = Field(
        default=None, description="Longest wait for `any`/`all` (default 10000)."
    )
    encoding: Encoding = Field(
        default="text",
        description="text: UTF-8 with invalid bytes replaced and terminal control sequences "
        "removed; base64: the exact bytes.",
    )


class ProcessOutputArtifact(Artifact):
    process_ids: tuple[str, ...]
    cursors: tuple[int, ...]
    many: bool
    limit_bytes: int
    wait: WaitMode
    timeout_seconds: float
    encoding: Encoding


class ProcessOutput(Tool[ProcessOutputArguments, ProcessOutputArtifact]):
    name = "ProcessOutput"
    description = (
        "Read the output of background processes started by Bash with background: true, from "
        "a cursor (a byte offset), optionally waiting for new output or for them to end. "
        "Returns status, output, next_cursor, total_bytes, gap (older output was dropped), "
        "and exit_code and reason once a process has ended."
    )
    arguments = ProcessOutputArguments
    artifact = ProcessOutputArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = ()

    def __init__(self, services: ProcessServices) -> None:
        self.services = services

    def prepare_args(self, args: ProcessOutputArguments, ctx: ToolContext) -> Prepared:
        if (args.process_id is None) == (args.process_ids is None):
            raise arguments_invalid("process_id", "give exactly one of process_id or process_ids")
        ids = [args.process_id] if args.process_id is not None else list(args.process_ids or [])
        if len(set(ids)) != len(ids):
            raise arguments_invalid("process_ids", "a process ID is listed more than once")
        cursors = dict(args.cursors or {})
        if cursors and args.process_ids is None:
            raise arguments_invalid("cursors", "cursors go with process_ids; use cursor")
        for key in cursors:
            if key not in ids:
                raise arguments_invalid(f"cursors.{key}", "the ID is not in process_ids")
        wait = WaitMode(args.wait)
        timeout_ms = args.timeout_ms
        if timeout_ms is None:
            timeout_ms = 0 if wait is WaitMode.POLL else DEFAULT_WAIT_MS
        limit = min(args.limit_bytes, MAX_OUTPUT_BYTES // len(ids))
        first = display(ids[0][:_MAX_ID_CHARS])
        summary = f"ProcessOutput {first}" + (f" (+{len(ids) - 1})" if len(ids) > 1 else "")
        return Prepared(
            summary=summary,
            requirements=(),
            artifact=ProcessOutputArtifact(
                process_ids=tuple(ids),
                cursors=tuple(cursors.get(i, args.cursor) for i in ids),
                many=args.process_ids is not None,
                limit_bytes=limit,
                wait=wait,
                timeout_seconds=timeout_ms / 1000,
                encoding=args.encoding,
            ),
        )

    async def run(self, artifact: ProcessOutputArtifact, ctx: ToolContext) -> ToolResult:
        targets: list[tuple[SupervisedProcess, int]] = []
        for process_id, cursor in zip(artifact.process_ids, artifact.cursors, strict=True):
            process = self.services.find(ctx, process_id)
            if process is None:
                return not_found(process_id)
            if cursor > process.log.total:
                return cursor_ahead(process_id, CursorAhead(cursor, process.log.total))
            targets.append((process, cursor))
        if artifact.wait is not WaitMode.POLL:
            await self.services.supervisor(ctx).wait(
                targets, artifact.wait, artifact.timeout_seconds
            )
        results: list[dict[str, object]] = []
        for process, cursor in targets:
            try:
                fields, _ = await read_output(
                    process, cursor, artifact.limit_bytes, artifact.encoding
                )
            except CursorAhead as exc:  # pragma: no cover - output only grows
                return cursor_ahead(process.process_id, exc)
            results.append(fields)
        text = "\n".join(describe(f, c) for f, (_, c) in zip(results, targets, strict=True))
        if artifact.many:
            return json_result(text, {"processes": results})
        return json_result(text, results[0])


# ProcessInput ---------------------------------------------------------------------------------


class ProcessInputArguments(Arguments):
    process_id: ProcessId = Field(description="The background process to write to.")
    data: str = Field(default="", description="Text to write to its stdin (UTF-8, at most 1 MiB).")
    eof: bool = Field(default=False, description="Close its stdin after writing `data`.")


class ProcessInputArtifact(Artifact):
    process_id: str
    data: str
    eof: bool


class ProcessInput(Tool[ProcessInputArguments, ProcessInputArtifact]):
    name = "ProcessInput"
    description = (
        "Write text to the stdin of a background process started by Bash with background: "
        "true; eof: true closes its stdin afterwards. A write the process does not take within "
        "a few seconds stops with input_backpressure."
    )
    arguments = ProcessInputArguments
    artifact = ProcessInputArtifact
    requirement_kinds = (RequirementKind.PROCESS_INPUT.value,)

    def __init__(self, services: ProcessServices) -> None:
        self.services = services

    def prepare_args(self, args: ProcessInputArguments, ctx: ToolContext) -> Prepared:
        size = len(args.data.encode("utf-8"))
        cap = self.services.settings.input_max_bytes
        if size > cap:
            raise arguments_invalid("data", f"at most {cap} bytes can be written at once")
        if not args.data and not args.eof:
            raise arguments_invalid("data", "give data to write, or eof: true")
        process = self.services.find(ctx, args.process_id)
        if process is None:
            # The same answer for an unknown ID and for another loop's or session's.
            raise arguments_invalid("process_id", "this loop has no process with that ID")
        command = process.command
        requirement = Requirement(
            kind=RequirementKind.PROCESS_INPUT.value,
            scope="",
            match=command,
            description=f"write {size} bytes{' and end-of-file' if args.eof else ''} to the "
            f"stdin of the background command: {display(command)}",
        )
        eof_note = ", eof" if args.eof else ""
        return Prepared(
            summary=f"ProcessInput {process.process_id} ({size} bytes{eof_note})",
            requirements=(requirement,),
            artifact=ProcessInputArtifact(
                process_id=process.process_id, data=args.data, eof=args.eof
            ),
            candidates=(
                RuleCandidate(
                    RequirementKind.PROCESS_INPUT.value,
                    command,
                    f"write to the stdin of: {display(command)}",
                ),
            ),
        )

    async def run(self, artifact: ProcessInputArtifact, ctx: ToolContext) -> ToolResult:
        process = self.services.find(ctx, artifact.process_id)
        if process is None:
            return not_found(artifact.process_id)
        data = artifact.data.encode("utf-8")
        outcome = await self.services.supervisor(ctx).write_input(
            process, data, artifact.eof, self.services.settings.input_timeout_seconds
        )
        fields = process_state(process)
        fields.update(accepted_bytes=outcome.accepted_bytes, eof=outcome.eof_sent)
        match outcome.outcome:
            case InputOutcome.WRITTEN:
                text = f"{process.process_id}: wrote {outcome.accepted_bytes} bytes" + (
                    " and closed stdin" if outcome.eof_sent else ""
                )
                return json_result(text, fields)
            case InputOutcome.BACKPRESSURE:
                return error_result(
                    "input_backpressure",
                    f"{process.process_id} did not take its input in time: "
                    f"{outcome.accepted_bytes} of {len(data)} bytes were accepted; read its "
                    "output or wait before writing more.",
                    **fields,
                )
            case InputOutcome.STDIN_CLOSED:
                return error_result(
                    "stdin_closed",
                    f"The stdin of {process.process_id} is closed; nothing more can be written.",
                    **fields,
                )
            case InputOutcome.NOT_RUNNING:
                return error_result(
                    "process_exited",
                    f"{process.process_id} has ended; its stdin takes no more input.",
                    **fields,
                )


# ProcessStop ----------------------------------------------------------------------------------


class ProcessStopArguments(Arguments):
    process_id: ProcessId = Field(description="The background process to stop.")
    mode: Literal["interrupt", "terminate", "kill"] = Field(
        default="terminate",
        description="interrupt: SIGINT; terminate: SIGTERM, then SIGKILL after grace_ms; kill: "
        "SIGKILL. Sent to the whole process tree.",
    )
    grace_ms: Annotated[int, Field(ge=0, le=MAX_STOP_GRACE_MS)] = Field(
        default=DEFAULT_STOP_GRACE_MS,
        description="How long terminate waits before SIGKILL (and interrupt waits for the "
        "process to end).",
    )


class ProcessStopArtifact(Artifact):
    process_id: str
    mode: StopMode
    grace_seconds: float


class ProcessStop(Tool[ProcessStopArguments, ProcessStopArtifact]):
    name = "ProcessStop"
    description = (
        "Stop a background process started by Bash with background: true (interrupt, "
        "terminate or kill its whole process tree). Stopping an ended process returns its "
        "final status."
    )
    arguments = ProcessStopArguments
    artifact = ProcessStopArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = ()

    def __init__(self, services: ProcessServices) -> None:
        self.services = services

    def prepare_args(self, args: ProcessStopArguments, ctx: ToolContext) -> Prepared:
        return Prepared(
            summary=f"ProcessStop {display(args.process_id)} ({args.mode})",
            requirements=(),
            artifact=ProcessStopArtifact(
                process_id=args.process_id,
                mode=StopMode(args.mode),
                grace_seconds=args.grace_ms / 1000,
            ),
        )

    async def run(self, artifact: ProcessStopArtifact, ctx: ToolContext) -> ToolResult:
        process = self.services.find(ctx, artifact.process_id)
        if process is None:
            return not_found(artifact.process_id)
        already = not process.is_running
        await self.services.supervisor(ctx).stop(process, artifact.mode, artifact.grace_seconds)
        fields = process_state(process)
        fields["already_finished"] = already
        return json_result(describe(fields, 0), fields)
