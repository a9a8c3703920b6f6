"""The tool-call lifecycle: sessions, loops, and Prepare -> Approve -> Invoke (design section 2).

This is the one place that changes a call's state. The RPC layer converts requests, calls one
method here and converts the answer back.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import anyio

from .arguments import decode_arguments
from .board import ApprovalBoard
from .call_checks import (
    call_error,
    check_batch_id,
    check_client_execution_id,
    check_request_id,
    execution_id_exists,
    outside_allowed_roots,
    request_fingerprint,
    request_id_conflict,
    tool_not_found,
)
from .call_journal import journal_change
from .calls import CallRecord, CallSnapshot, compute_digest
from .decisions import CallDecisions
from .definitions import BuildScope
from .effects import DryRunnable
from .errors import (
    CallgateError,
    FailedPrecondition,
    InternalError,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
    request_invalid,
)
from .fair_gate import FairGate
from .gate import Gate
from .journal import Journal, JsonValue, NullJournal
from .models import RequirementKind, State, ToolInfo, ToolResult
from .paths import ProtectedPaths, Workspace, is_within, lexical_path, real_path
from .principals import Principal, Role
from .resources import SessionResources, Spawn
from .retention import Retention, open_bytes, release, return_memory_to_os
from .sessions import (
    MAX_ID_LENGTH,
    Clock,
    LifecycleSettings,
    Session,
    SessionSnapshot,
    SystemClock,
    ToolCatalog,
    new_id,
)
from .telemetry import NO_TELEMETRY, Phase, Telemetry
from .tool import LoopState, OutputSink, ToolContext, ToolPlugin, Warmable

__all__ = [
    "APPROVE_WAIT_CAP_SECONDS",
    "Clock",
    "Lifecycle",
    "LifecycleSettings",
    "SessionSnapshot",
    "SystemClock",
    "ToolCatalog",
]

log = logging.getLogger(__name__)

APPROVE_WAIT_CAP_SECONDS = 60.0
_MAX_LABELS = 16
_SESSION_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_MAX_LABEL_BYTES = 256


class Lifecycle:
    """Sessions and the call state machine, with the gate in front of every effect."""

    def __init__(
        self,
        settings: LifecycleSettings,
        tools: ToolCatalog,
        gate: Gate,
        protected: ProtectedPaths,
        clock: Clock | None = None,
        board: ApprovalBoard | None = None,
        journal: Journal | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.settings = settings
        self.journal: Journal = journal or NullJournal()
        self.telemetry: Telemetry = telemetry or NO_TELEMETRY
        self.board = board or ApprovalBoard()
        # Every kept call of every open session, for approvers (who decide across sessions).
        self._calls_by_id: dict[str, CallRecord] = {}
        self.tools = tools
        self.gate = gate
        self.protected = protected
        self.clock: Clock = clock or SystemClock()
        self._sessions: dict[str, Session] = {}
        # Turns at warming (a tool's heavy pure work in a thread), session by session.
        self._warm_gate = FairGate()
        # (owner, name) -> session ID of the open named sessions.
        self._named: dict[tuple[str, str], str] = {}
        self._running_total = 0
        # Set (and dropped) when the last running invocation ends; see `wait_idle`.
        self._idle: anyio.Event | None = None
        self._shutting_down = False
        self._spawn: Spawn | None = None
        self.retention = Retention(
            settings.max_retained_bytes, settings.max_retained_bytes_per_session
        )
        self.decisions = CallDecisions(settings, gate, self.board, self.clock, self.telemetry)
        self._state_root = (
            Path(settings.session_state_root) if settings.session_state_root else None
        )

    def attach_task_group(self, spawn: Spawn) -> None:
        """Give session resources a task group to run their background tasks in."""
        self._spawn = spawn

    def spawn(self, task: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `task` in the server's task group (dry runs the server makes on its own)."""
        if self._spawn is None:
            raise RuntimeError("no task group is attached to the lifecycle")
        self._spawn(task)

    def call_record(self, execution_id: str) -> CallRecord | None:
        """An open session's call by its ID (for the server's own use, not a principal's)."""
        record = self._calls_by_id.get(execution_id)
        return record if record is not None and record.session_id in self._sessions else None

    def tool_of(self, record: CallRecord) -> ToolPlugin | None:
        """The tool of the loop that prepared an open session's call."""
        session = self._sessions.get(record.session_id)
        loop = session.loops.get(record.loop_id) if session is not None else None
        return loop.tools.get(record.tool_name) if loop is not None else None

    def dry_run_context(self, record: CallRecord) -> ToolContext:
        """The context a dry run of an open session's call runs in: as its Invoke would,
        with the programs deny families name masked."""
        session = self._sessions[record.session_id]
        return self._context(
            session,
            session.loops[record.loop_id],
            None,
            record.execution_id,
            denied_programs=self.gate.rules.denied_programs(
                session.session_id, session.workspace.root
            ),
        )

    # ------------------------------------------------------------------ sessions

    def open_session(
        self, principal: Principal, workspace: str, labels: Mapping[str, str], name: str = ""
    ) -> SessionSnapshot:
        principal.require(Role.AGENT)
        self._check_accepting()
        if name and not _SESSION_NAME.fullmatch(name):
            raise request_invalid("name", "a session name is 1-64 characters of [A-Za-z0-9._-]")
        root = self._resolve_workspace(workspace)
        named = self._named.get((principal.name, name)) if name else None
        if named is not None:
            existing = self._sessions[named]
            if workspace and existing.workspace.root != root:
                raise FailedPrecondition(
                    "SESSION_NAME_TAKEN",
                    "Your session of that name has another workspace; close it first "
                    "(callgate session close NAME) or choose another name.",
                )
            self._touch(existing)
            self.journal.record(
                "session.reopened", session_id=existing.session_id, principal=principal.name
            )
            return self._session_snapshot(existing)
        if len(labels) > _MAX_LABELS:
            raise request_invalid("labels", f"at most {_MAX_LABELS} labels are allowed")
        for key, value in labels.items():
            if (
                not key
                or len(key.encode()) > _MAX_LABEL_BYTES
                or len(value.encode()) > _MAX_LABEL_BYTES
            ):
                raise request_invalid(
                    "labels",
                    f"keys must be 1-{_MAX_LABEL_BYTES} bytes, values at most {_MAX_LABEL_BYTES}",
                )
        if len(self._sessions) >= self.settings.max_sessions:
            raise ResourceExhausted(
                "SESSION_LIMIT",
                f"The server has {self.settings.max_sessions} open sessions; close one first.",
            )
        now = self.clock.now()
        loop_id = new_id("loop_")
        session_id = new_id("ses_")
        session = Session(
            session_id=session_id,
            owner=principal.name,
            workspace=Workspace(root, self.protected),
            default_loop_id=loop_id,
            labels=dict(labels),
            create_time=now,
            resources=SessionResources(session_id, self._state_root, self._spawn),
            name=name,
        )
        self._touch(session)
        session.tools = self.tools.build(session_id, "", BuildScope.SESSION)
        session.loops[loop_id] = self._new_loop(session, loop_id)
        self._sessions[session.session_id] = session
        if name:
            self._named[(principal.name, name)] = session_id
        self.journal.record(
            "session.opened",
            session_id=session_id,
            principal=principal.name,
            data={"workspace": root, "loop_id": loop_id},
        )
        log.info("session opened", extra={"session_id": session.session_id})
        return self._session_snapshot(session)

    async def close_session(self, principal: Principal, session_id: str) -> None:
        """Close a session: cancel its calls, stop what runs, release its resources (process
        trees are terminated and confirmed gone before this returns)."""
        session = self._session(principal, session_id)
        self._drop_session(session)
        await self._close(session)
        log.info("session closed", extra={"session_id": session_id})

    def _drop_session(self, session: Session) -> None:
        self._sessions.pop(session.session_id, None)
        if session.name and self._named.get((session.owner, session.name)) == session.session_id:
            del self._named[(session.owner, session.name)]

    def _touch(self, session: Session) -> None:
        session.last_used = self.clock.now()
        session.last_used_monotonic = self.clock.monotonic()

    def list_sessions(self, principal: Principal) -> list[SessionSnapshot]:
        """The caller's open sessions, oldest first."""
        principal.require(Role.AGENT)
        mine = [s for s in self._sessions.values() if s.owner == principal.name]
        return [self._session_snapshot(s) for s in sorted(mine, key=lambda s: s.create_time)]

    async def close_idle(self) -> int:
        """Close every named session unused for `session_idle_seconds` while no call of it runs
        (its background processes are stopped with it);
        returns how many were closed."""
        closed = 0
        for session in list(self._sessions.values()):
            # Checked again for each one: closing the previous one awaited, and meanwhile this
            # one may have been closed by its owner, reopened or used.
            horizon = self.clock.monotonic() - self.settings.session_idle_seconds
            if (
                self._sessions.get(session.session_id) is not session
                or not session.name
                or session.running
                or session.last_used_monotonic >= horizon
            ):
                continue
            self._drop_session(session)
            await self._close(session)
            closed += 1
            log.info("idle session closed", extra={"session_id": session.session_id})
        return closed

    async def _close(self, session: Session) -> None:
        session.closed = True
        now = self.clock.now()
        for record in session.calls.values():
            self._calls_by_id.pop(record.execution_id, None)
            self.retention.forget(record)
            if record.state is State.RUNNING:
                if record.cancel_scope is not None:
                    record.cancel_requested = True
                    record.cancel_scope.cancel()
            elif not record.state.is_terminal:
                record.move(State.CANCELLED, now)
        self.journal.record(
            "session.closed", session_id=session.session_id, principal=session.owner
        )
        # Session-scoped rules go away with their session.
        self.gate.rules.remove_scope(f"session:{session.session_id}")
        await session.resources.aclose()
        session.calls.clear()
        session.prepare_requests.clear()
        session.invoke_requests.clear()
        return_memory_to_os()

    def get_session(self, principal: Principal, session_id: str) -> SessionSnapshot:
        return self._session_snapshot(self._session(principal, session_id))

    def open_loop(self, principal: Principal, session_id: str) -> str:
        session = self._session(principal, session_id)
        if len(session.loops) >= self.settings.max_loops_per_session:
            raise ResourceExhausted(
                "LOOP_LIMIT",
                f"The session already has {self.settings.max_loops_per_session} loops.",
            )
        loop_id = new_id("loop_")
        session.loops[loop_id] = self._new_loop(session, loop_id)
        return loop_id

    def _new_loop(self, session: Session, loop_id: str) -> LoopState:
        """A loop with fresh tools: the session's, and its own from every loop definition."""
        tools = {**session.tools, **self.tools.build(session.session_id, loop_id, BuildScope.LOOP)}
        return LoopState(loop_id, tools=tools)

    def list_tools(self, principal: Principal, session_id: str) -> list[ToolInfo]:
        session = self._session(principal, session_id)
        return self.tools.infos(session.workspace)

    # ------------------------------------------------------------------ calls

    async def warm(
        self, principal: Principal, session_id: str, loop_id: str, tool_name: str, arguments: str
    ) -> None:
        """Before `prepare`: a tool's heavy pure work, off the event loop (`Warmable`). Does
        nothing for an unknown session, loop or tool (Prepare answers those)."""
        session = self._sessions.get(session_id)
        if session is None or session.owner != principal.name:
            return
        if len(arguments) > self.settings.max_argument_bytes:
            return  # Prepare refuses it unread
        loop = session.loops.get(loop_id or session.default_loop_id)
        tool = loop.tools.get(tool_name) if loop is not None else None
        # A plain attribute lookup: every Prepare passes here, and isinstance against a
        # runtime-checkable Protocol costs microseconds.
        warm = getattr(tool, "warm", None)
        if warm is not None:
            # Sessions take turns here too: one session's flood of long commands delays
            # another's by at most one parse.
            async with self._warm_gate.turn(session_id):
                await cast("Warmable", tool).warm(arguments)

    def prepare(
        self,
        principal: Principal,
        session_id: str,
        loop_id: str,
        tool_name: str,
        arguments_json: str,
        request_id: str,
        evaluate: bool,
        batch_id: str = "",
        execution_id: str = "",
    ) -> CallSnapshot:
        self._check_accepting()
        started = time.perf_counter()
        session = self._session(principal, session_id)
        self._touch(session)
        loop = self._loop(session, loop_id)
        check_request_id(request_id)
        check_batch_id(batch_id)
        check_client_execution_id(execution_id)
        fingerprint = ""
        if request_id:
            fingerprint = request_fingerprint(
                loop.loop_id, tool_name, arguments_json, evaluate, batch_id, execution_id
            )
            seen = session.prepare_requests.get(request_id)
            if seen is not None:
                if seen[0] != fingerprint:
                    raise request_id_conflict()
                record = session.calls.get(seen[1])
                if record is not None:
                    self.decisions.refresh(record)
                    return record.snapshot()
        if execution_id and (
            execution_id in self._calls_by_id or self.journal.holds_execution(execution_id)
        ):
            # An ID names one call, ever: one the journal holds (a closed session's, an earlier
            # run's) would mix two calls in the audit trail.
            raise execution_id_exists()
        tool = loop.tools.get(tool_name)
        if tool is None:
            raise tool_not_found(tool_name)
        if session.open_calls >= self.settings.max_open_calls_per_session:
            for old in list(session.calls.values()):
                self.decisions.refresh(old)
            if session.open_calls >= self.settings.max_open_calls_per_session:
                raise ResourceExhausted(
                    "CALL_LIMIT",
                    f"The session has {session.open_calls} open calls; invoke or cancel some.",
                )
        raw = decode_arguments(arguments_json, max_bytes=self.settings.max_argument_bytes)
        ctx = self._context(session, loop, None)
        prepared = tool.prepare(raw, ctx)
        del raw
        undeclared = {r.kind for r in prepared.requirements} - set(tool.requirement_kinds)
        if undeclared:
            # A tool (a plugin, most likely) asking for more than ListTools says it may: a bug
            # in the tool, and nothing of the call is kept.
            log.error(
                "a tool asked for requirement kinds it does not declare",
                extra={"detail": f"{tool.name}: {', '.join(sorted(undeclared))[:200]}"},
            )
            raise InternalError()
        size = open_bytes(arguments_json, prepared)
        self._make_room(self.retention.check(session.session_id, size))
        now = self.clock.now()
        record = CallRecord(
            execution_id=execution_id or new_id("call_"),
            session_id=session.session_id,
            loop_id=loop.loop_id,
            tool_name=tool.name,
            summary=prepared.summary,
            requirements=prepared.requirements,
            candidates=prepared.candidates,
            artifact=prepared.artifact,
            digest=compute_digest(tool.name, prepared, batch_id),
            batch_id=batch_id,
            preview=prepared.preview,
            command=prepared.command,
            working_directory=prepared.working_directory,
            create_time=now,
            update_time=now,
            deadline=self.clock.monotonic() + self.settings.call_ttl_seconds,
            expire_time=now + timedelta(seconds=self.settings.call_ttl_seconds),
        )
        self._store(session, record, size)
        self.journal.record(
            "call.prepared",
            session_id=session.session_id,
            execution_id=record.execution_id,
            principal=session.owner,
            data={
                "tool": record.tool_name,
                "loop_id": record.loop_id,
                "summary": record.summary,
                "requirements": [
                    {"kind": r.kind, "scope": r.scope, "match": r.match}
                    for r in record.requirements
                ],
                "digest": record.digest,
                **({"batch_id": batch_id} if batch_id else {}),
            },
        )
        if request_id:
            record.prepare_request_id = request_id
            session.prepare_requests[request_id] = (fingerprint, record.execution_id)
        if evaluate:
            self.decisions.decide_by_policy(session, record)
        self.telemetry.phase(Phase.PREPARE, time.perf_counter() - started)
        return record.snapshot()

    async def approve(
        self, principal: Principal, session_id: str, execution_id: str, wait_seconds: float
    ) -> CallSnapshot:
        session = self._session(principal, session_id)
        record = self._call(session, execution_id)
        if not math.isfinite(wait_seconds) or wait_seconds < 0:
            raise request_invalid("wait", "the wait must be a non-negative duration")
        wait_seconds = min(wait_seconds, APPROVE_WAIT_CAP_SECONDS)
        started = time.perf_counter()
        if record.state is State.PREPARED:
            self.decisions.decide_by_policy(session, record)
        if record.state is State.AWAITING_APPROVAL and wait_seconds > 0:
            deadline = self.clock.monotonic() + wait_seconds
            if record.deadline is not None:
                deadline = min(deadline, record.deadline)
            with anyio.move_on_after(max(0.0, deadline - self.clock.monotonic())):
                await record.decided_event().wait()
            self.decisions.refresh(record)
        if record.state is State.EXPIRED:
            raise call_error(record)
        if record.state in (State.RUNNING, State.SUCCEEDED, State.FAILED, State.CANCELLED):
            raise FailedPrecondition(
                "CALL_STATE_INVALID",
                f"The call is {record.state.value}; only a prepared or gated call can be approved.",
                metadata={"state": record.state.value},
            )
        self.telemetry.phase(Phase.APPROVE, time.perf_counter() - started)
        return record.snapshot()

    async def invoke(
        self,
        principal: Principal,
        session_id: str,
        execution_id: str,
        request_id: str,
        output: OutputSink | None = None,
        *,
        detach: bool = False,
    ) -> CallSnapshot:
        if detach:
            return await self._detached(principal, session_id, execution_id, request_id)
        session = self._session(principal, session_id)
        self._touch(session)
        check_request_id(request_id)
        if request_id:
            seen = session.invoke_requests.get(request_id)
            if seen is not None and seen != execution_id:
                raise request_id_conflict()
        record = self._call(session, execution_id)
        if request_id and record.invoke_request_id == request_id:
            # A retry of an Invoke that already started: never run again; return its outcome.
            await record.finished_event().wait()
            return record.snapshot()
        if record.state is not State.APPROVED:
            raise call_error(record)
        self._check_accepting()
        if session.running >= self.settings.max_running_per_session:
            raise ResourceExhausted(
                "CONCURRENCY_LIMIT",
                f"The session already runs {session.running} calls; wait for one to finish.",
            )
        if self._running_total >= self.settings.max_running_total:
            raise ResourceExhausted(
                "CONCURRENCY_LIMIT",
                "The server is running its maximum number of calls; retry shortly.",
            )
        # APPROVED -> RUNNING with no await in between: single use.
        record.move(State.RUNNING, self.clock.now())
        record.invoke_request_id = request_id
        if request_id:
            session.invoke_requests[request_id] = execution_id
        record.run_started = self.clock.monotonic()
        started = time.perf_counter()
        # A call waiting for its journal commit is an invocation in progress: it counts
        # against the running limits from the moment it left APPROVED.
        session.running += 1
        self._running_total += 1
        full: ToolResult | None = None
        try:
            # Invariant 10: the record that authorizes the effect is committed before it
            # starts; without it nothing runs (fail closed). A tool whose answer is its only
            # effect, invoked unary, commits it with its end before the answer (Tool).
            try:
                await self._journal_invoked(session, record, streamed=output is not None)
            except CallgateError:
                record.result = ToolResult.error(
                    "journal_unavailable",
                    "The audit journal could not record the invocation; nothing was run.",
                )
                record.move(State.FAILED, self.clock.now())
                return record.snapshot()
            except BaseException:
                self._finish_cancelled(record)
                raise
            full = await self._run(session, record, output)
        finally:
            session.running -= 1
            self._running_total -= 1
            if not self._running_total and self._idle is not None:
                self._idle.set()
                self._idle = None
            # The ended call keeps its (capped) result: make room for it.
            self._make_room(self.retention.total - self.retention.max_bytes)
            self.telemetry.phase(Phase.INVOKE, time.perf_counter() - started)
        snapshot = record.snapshot()
        if full is not None and snapshot.result is not full:
            # The ended call keeps a capped result; its Invoke returns all of it.
            snapshot = dataclasses.replace(snapshot, result=full)
        return snapshot

    @staticmethod
    def _tool(session: Session, record: CallRecord) -> ToolPlugin:
        """The tool of the loop that prepared the call (built for that loop)."""
        return session.loops[record.loop_id].tools[record.tool_name]

    async def _journal_invoked(self, session: Session, record: CallRecord, streamed: bool) -> None:
        """Journal `call.invoked`: committed before the tool runs, or, for a tool whose answer
        is its only effect invoked unary, left for the commit before the answer (Tool)."""
        kind = "call.invoked"
        data: dict[str, JsonValue] = {"tool": record.tool_name, "digest": record.digest}
        if record.apply_plan is not None and record.dry_run is not None:
            # The intent: exactly this change set is applied, the command does not run.
            change_set = record.dry_run
            data["apply"] = change_set.effect_digest
            data["paths"] = len(change_set.changes) + change_set.omitted_changes
        ids = {"session_id": session.session_id, "execution_id": record.execution_id}
        if not streamed and self._tool(session, record).answer_only:
            self.journal.record(kind, **ids, principal=session.owner, data=data)
        else:
            await self.journal.record_durable(kind, **ids, principal=session.owner, data=data)

    async def _run(
        self, session: Session, record: CallRecord, output: OutputSink | None
    ) -> ToolResult | None:
        """Run the call's artifact; return the tool's whole result (None when cancelled)."""
        tool = self._tool(session, record)
        ctx = self._context(
            session,
            session.loops[record.loop_id],
            output,
            record.execution_id,
            read_only=record.decision is not None and record.decision.read_only,
            # Only a call that runs a command masks programs: other calls skip the rule scan.
            denied_programs=self.gate.rules.denied_programs(
                session.session_id, session.workspace.root
            )
            if any(r.kind == RequirementKind.COMMAND_EXECUTE for r in record.requirements)
            else frozenset(),
            network_origins=self._network_origins(session, record),
        )
        result: ToolResult | None = None
        with anyio.CancelScope() as scope:
            record.cancel_scope = scope
            try:
                assert record.artifact is not None  # an open call keeps its artifact
                if record.apply_plan is not None:
                    result = await self._apply(session, record, tool, ctx)
                else:
                    result = await tool.invoke(record.artifact, ctx)
            except CallgateError as error:
                # The RPC reports the error, but the call must still end: left RUNNING it would
                # count as open forever and an Invoke retry would wait for it indefinitely.
                record.result = ToolResult.error(error.reason.lower(), error.message)
                record.move(State.FAILED, self.clock.now())
                raise
            except Exception:
                log.exception(
                    "tool failed unexpectedly",
                    extra={"execution_id": record.execution_id, "session_id": session.session_id},
                )
                result = ToolResult.error(
                    "internal_error",
                    "The tool failed unexpectedly; the server log has the details.",
                )
            except BaseException:
                # The client went away (RPC cancelled) or the server is stopping.
                self._finish_cancelled(record)
                raise
        if result is None or scope.cancelled_caught:
            self._finish_cancelled(record)
            return None
        record.result = result
        record.move(State.FAILED if result.is_error else State.SUCCEEDED, self.clock.now())
        return result

    async def run_allowed(
        self, principal: Principal, session_id: str, prepared: CallSnapshot, request_id: str
    ) -> CallSnapshot:
        """The second half of a one-message call (PrepareRequest.invoke): a call the gate
        approved at once (policy or a remembered rule) runs now; any other is returned as it
        is. A repeat of the Prepare (same request_id) finds the call as the first left it: one
        still APPROVED (its first run never started) runs under the same Invoke request ID, one
        running is waited for, and one that ended is returned with its result: it never runs
        twice."""
        if prepared.state is State.APPROVED:
            decision = prepared.decision
            if decision is None or decision.decided_by != "policy":
                return prepared  # approved by a human: that approval's Invoke runs it
            # The Prepare's request ID serves its Invoke too (a UUID, in another table).
            invoke_id = request_id
            try:
                return await self.invoke(principal, session_id, prepared.execution_id, invoke_id)
            except (ResourceExhausted, Unavailable):
                # Not started (a running limit, shutting down): the call stays APPROVED and
                # the answer says so; the caller's Invoke gets the reason.
                return prepared
        if prepared.state is State.RUNNING and request_id:
            return await self.invoke(principal, session_id, prepared.execution_id, request_id)
        return prepared

    async def _detached(
        self, principal: Principal, session_id: str, execution_id: str, request_id: str
    ) -> CallSnapshot:
        """An Invoke whose call runs to its end in the server's task group, whatever becomes
        of the caller: a caller that goes away only stops waiting (the same request_id gets
        the outcome later), and CancelCall still stops the call."""
        if not request_id:
            raise request_invalid(
                "request_id", "a detached Invoke needs a request_id to get its outcome again"
            )
        done = anyio.Event()
        outcome: list[CallSnapshot | Exception] = []

        async def run() -> None:
            try:
                outcome.append(await self.invoke(principal, session_id, execution_id, request_id))
            except Exception as exc:  # the caller's to raise, if it still waits
                outcome.append(exc)
            finally:
                done.set()

        self.spawn(run)
        await done.wait()
        if isinstance(outcome[0], Exception):
            raise outcome[0]
        return outcome[0]

    async def _apply(
        self, session: Session, record: CallRecord, tool: ToolPlugin, ctx: ToolContext
    ) -> ToolResult:
        """ "Apply exactly this": the recorded change set instead of the command, and the paths
        applied journaled after it (with the call's end)."""
        if not isinstance(tool, DryRunnable) or record.artifact is None:
            raise InternalError()
        with anyio.CancelScope(shield=True):  # never stopped half-way through its paths
            result = await tool.apply(record.artifact, record.apply_plan, ctx)
        applied: JsonValue = json.loads(result.json).get("applied", []) if result.json else []
        self.journal.record(
            "call.applied",
            session_id=session.session_id,
            execution_id=record.execution_id,
            principal=session.owner,
            data={"paths": applied, "error": result.error_code},
        )
        return result

    def _finish_cancelled(self, record: CallRecord) -> None:
        if record.state is State.RUNNING:
            if record.result is None:
                record.result = ToolResult.error(
                    "cancelled", "The call was cancelled before it finished."
                )
            record.move(State.CANCELLED, self.clock.now())

    def get_call(self, principal: Principal, session_id: str, execution_id: str) -> CallSnapshot:
        session = self._session(principal, session_id)
        return self._call(session, execution_id).snapshot()

    def list_calls(self, principal: Principal, session_id: str) -> list[CallSnapshot]:
        session = self._session(principal, session_id)
        records = list(session.calls.values())
        for record in records:
            self.decisions.refresh(record)
        return [r.snapshot() for r in reversed(records)]

    def cancel_call(self, principal: Principal, session_id: str, execution_id: str) -> CallSnapshot:
        session = self._session(principal, session_id)
        record = self._call(session, execution_id)
        if record.state is State.CANCELLED:
            return record.snapshot()
        if record.state.is_terminal:
            raise FailedPrecondition(
                "CALL_STATE_INVALID",
                f"The call already ended ({record.state.value}); there is nothing to cancel.",
                metadata={"state": record.state.value},
            )
        if record.state is State.RUNNING:
            record.cancel_requested = True
            if record.cancel_scope is not None:
                record.cancel_scope.cancel()
            return record.snapshot()
        record.move(State.CANCELLED, self.clock.now())
        return record.snapshot()

    async def watch_call(
        self, principal: Principal, session_id: str, execution_id: str
    ) -> AsyncIterator[CallSnapshot]:
        """The call now, then after every change; ends after a terminal state."""
        session = self._session(principal, session_id)
        record = self._call(session, execution_id)
        last: CallSnapshot | None = None
        while True:
            changed = record.changed()
            snapshot = record.snapshot()
            if last is None or (snapshot.state, snapshot.update_time) != (
                last.state,
                last.update_time,
            ):
                yield snapshot
                last = snapshot
            if snapshot.state.is_terminal:
                return
            # Expiry and approval timeouts are applied lazily: wake at the deadline too.
            delay = math.inf
            if record.deadline is not None:
                delay = max(0.0, record.deadline - self.clock.monotonic())
            with anyio.move_on_after(delay):
                await changed.wait()
            self.decisions.refresh(record)

    # ------------------------------------------------------------------ approvers

    def find_call(self, principal: Principal, execution_id: str) -> tuple[str, CallRecord]:
        """An approver's view of any open session's call: (owner, record)."""
        principal.require(Role.APPROVER)
        if not execution_id:
            raise request_invalid("execution_id", "the execution_id is required")
        record = self._calls_by_id.get(execution_id)
        session = self._sessions.get(record.session_id) if record is not None else None
        if record is None or session is None:
            raise NotFound("CALL_NOT_FOUND", "No open session has a call with that execution ID.")
        self.decisions.refresh(record)
        return session.owner, record

    def session_workspace(self, principal: Principal, session_id: str) -> str:
        """An approver's view of any open session: its workspace root."""
        principal.require(Role.APPROVER)
        session = self._sessions.get(session_id) if len(session_id) <= MAX_ID_LENGTH else None
        if session is None:
            raise NotFound("SESSION_NOT_FOUND", "No open session has that ID.")
        return session.workspace.root

    def call_workspace(self, record: CallRecord) -> str:
        return self._sessions[record.session_id].workspace.root

    def decide_by_human(
        self,
        record: CallRecord,
        decided_by: str,
        approve: bool,
        note: str,
        rule_ids: tuple[str, ...] = (),
    ) -> CallSnapshot:
        """Apply an approver's decision to a call AWAITING_APPROVAL (checked by the caller
        with no await since)."""
        return self.decisions.decide_by_human(record, decided_by, approve, note, rule_ids)

    def reevaluate_pending(self) -> None:
        """Ask the gate again about every pending call (new rules may now cover some)."""
        for item in self.board.pending_approvals():
            record = self._calls_by_id.get(item.execution_id)
            session = self._sessions.get(item.call.session_id)
            if record is None or session is None or record.state is not State.AWAITING_APPROVAL:
                continue
            if record.deciding:
                continue
            verdict = self.gate.evaluate(
                record.requirements, session.session_id, session.workspace.root
            )
            self.decisions.settle_by_policy(record, verdict)

    # ------------------------------------------------------------------ maintenance

    def sweep(self) -> None:
        """Expire overdue calls and time out unanswered approvals (also done lazily on access)."""
        for session in list(self._sessions.values()):
            for record in list(session.calls.values()):
                self.decisions.refresh(record)

    def begin_shutdown(self) -> None:
        """Refuse new sessions, calls and invocations; running ones go on."""
        self._shutting_down = True
        self.board.close()

    def cancel_all(self) -> None:
        """Cancel every running invocation (end of the shutdown grace period)."""
        for session in self._sessions.values():
            for record in session.calls.values():
                if record.state is State.RUNNING and record.cancel_scope is not None:
                    record.cancel_requested = True
                    record.cancel_scope.cancel()

    async def close_all(self) -> None:
        """Close every session (server shutdown): calls cancelled, process trees gone."""
        sessions = list(self._sessions.values())
        self._sessions.clear()
        self._named.clear()
        for session in sessions:
            await self._close(session)

    async def wait_idle(self) -> None:
        """Return once no invocation is running (the shutdown grace period waits on this)."""
        while self._running_total:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()

    @property
    def running_total(self) -> int:
        return self._running_total

    @property
    def session_count(self) -> int:
        return len(self._sessions)

    def session_resources(self) -> list[SessionResources]:
        """Every open session's resources (for gauges read at scrape time)."""
        return [s.resources for s in self._sessions.values()]

    # ------------------------------------------------------------------ internals

    def _store(self, session: Session, record: CallRecord, size: int) -> None:
        session.calls[record.execution_id] = record
        self._calls_by_id[record.execution_id] = record
        self.retention.add(record, size)
        session.open_calls += 1
        telemetry, retention = self.telemetry, self.retention
        max_result_bytes = self.settings.max_retained_result_bytes

        def ended() -> None:
            session.call_ended()
            telemetry.call_finished(record.tool_name, record.state)
            # Only what GetCall returns is kept of an ended call, never its raw arguments.
            release(record, max_result_bytes)
            retention.ended(record)

        record.on_terminal = ended
        record.on_change = functools.partial(
            journal_change, self.journal, self.clock, session.owner
        )
        excess = len(session.calls) - self.settings.max_kept_calls_per_session
        if excess <= 0:
            return
        # Forget the oldest finished calls, with the request IDs that pointed at them.
        victims: list[CallRecord] = []
        for old in session.calls.values():
            if len(victims) >= excess:
                break
            if old.state.is_terminal:
                victims.append(old)
        for old in victims:
            self._forget(session, old)

    def _forget(self, session: Session, record: CallRecord) -> None:
        """Forget an ended call, with the request IDs that pointed at it."""
        del session.calls[record.execution_id]
        self._calls_by_id.pop(record.execution_id, None)
        self.retention.forget(record)
        session.prepare_requests.pop(record.prepare_request_id, None)
        session.invoke_requests.pop(record.invoke_request_id, None)

    def _make_room(self, needed: int) -> None:
        """Forget the oldest ended calls, server-wide, until `needed` bytes are free."""
        if needed <= 0:
            return
        for record in self.retention.oldest_ended(needed):
            session = self._sessions.get(record.session_id)
            if session is not None and record.execution_id in session.calls:
                self._forget(session, record)
            else:
                self.retention.forget(record)
        return_memory_to_os()

    def _network_origins(self, session: Session, record: CallRecord) -> dict[str, str]:
        """What approved each network requirement of a decided call: a human (`approved by
        <approver>`), the first allow rule of the decision that covers it (`rule <id>`), or
        the access default (`access default`)."""
        decision = record.decision
        wanted = [r for r in record.requirements if r.kind == RequirementKind.NETWORK]
        if decision is None or not wanted:
            return {}
        if decision.decided_by != "policy":
            return {r.match: f"approved by {decision.decided_by}" for r in wanted}
        rules = [rule for i in decision.rule_ids if (rule := self.gate.rules.get(i)) is not None]
        origins: dict[str, str] = {}
        for requirement in wanted:
            rule = next((r for r in rules if r.covers(requirement)), None)
            origins[requirement.match] = (
                f"rule {rule.rule_id}" if rule is not None else "access default"
            )
        return origins

    def _context(
        self,
        session: Session,
        loop: LoopState,
        output: OutputSink | None,
        execution_id: str = "",
        *,
        read_only: bool = False,
        denied_programs: frozenset[str] = frozenset(),
        network_origins: Mapping[str, str] | None = None,
    ) -> ToolContext:
        return ToolContext(
            session_id=session.session_id,
            loop=loop,
            workspace=session.workspace,
            limits=self.settings.tool_limits,
            resources=session.resources,
            execution_id=execution_id,
            principal=session.owner,
            output=output,
            read_only=read_only,
            denied_programs=denied_programs,
            network_origins=network_origins or {},
        )

    def _session(self, principal: Principal, session_id: str) -> Session:
        principal.require(Role.AGENT)
        if not session_id:
            raise request_invalid("session_id", "the session_id is required")
        session = self._sessions.get(session_id) if len(session_id) <= MAX_ID_LENGTH else None
        # Another principal's session is indistinguishable from one that does not exist.
        if session is None or session.owner != principal.name:
            raise NotFound(
                "SESSION_NOT_FOUND",
                "No open session has that ID for this caller; open one with OpenSession.",
            )
        return session

    def _loop(self, session: Session, loop_id: str) -> LoopState:
        loop = session.loops.get(loop_id or session.default_loop_id)
        if loop is None:
            raise NotFound("LOOP_NOT_FOUND", "The session has no loop with that ID.")
        return loop

    def _call(self, session: Session, execution_id: str) -> CallRecord:
        if not execution_id:
            raise request_invalid("execution_id", "the execution_id is required")
        record = session.calls.get(execution_id)
        if record is None:
            raise NotFound("CALL_NOT_FOUND", "The session has no call with that execution ID.")
        self.decisions.refresh(record)
        return record

    def _resolve_workspace(self, workspace: str) -> str:
        """The canonical root of a requested workspace. Outside the allowed roots the answer
        is one and the same whether the directory exists or not, and a path whose text is
        outside them (`/proc/self/cwd`) is refused before anything is looked up."""
        raw = workspace or self.settings.default_workspace
        if "\x00" in raw or not os.path.isabs(raw):
            raise InvalidArgument(
                "WORKSPACE_INVALID", "The workspace must be an absolute path to a directory."
            )
        if workspace and not self._in_allowed_roots(lexical_path(workspace)):
            raise outside_allowed_roots()
        root = real_path(raw)
        if root is None or not self._in_allowed_roots(root):
            raise outside_allowed_roots()
        if not os.path.isdir(root):
            raise InvalidArgument(
                "WORKSPACE_INVALID", "The workspace is not an existing directory."
            )
        if self.protected.is_protected(root):
            raise InvalidArgument(
                "WORKSPACE_INVALID",
                "The workspace is a protected directory (secrets or server state).",
            )
        return root

    def _in_allowed_roots(self, path: str) -> bool:
        return any(is_within(path, allowed) for allowed in self.settings.allowed_roots)

    def _check_accepting(self) -> None:
        if self._shutting_down:
            raise Unavailable(
                "SHUTTING_DOWN", "The server is shutting down; retry on another instance."
            )

    def _session_snapshot(self, session: Session) -> SessionSnapshot:
        return SessionSnapshot(
            session_id=session.session_id,
            workspace=session.workspace.root,
            default_loop_id=session.default_loop_id,
            sandbox_mode=self.settings.sandbox_mode,
            sandbox_warning=self.settings.sandbox_warning,
            sandbox_limits=self.settings.sandbox_limits,
            create_time=session.create_time,
            labels=dict(session.labels),
            name=session.name,
            last_used_time=session.last_used,
            dry_run=self.settings.dry_run,
        )
