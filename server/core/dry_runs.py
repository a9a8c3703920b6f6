"""Dry runs of pending calls (core/effects.py): the approver's "dry run", and "apply exactly
this".

A dry run is a decision of its own: an approver asks for it (ApprovalService.DryRun) on a call
AWAITING_APPROVAL whose tool can dry-run it, bound to the digest the approver was shown; or,
with `[bash] dry_run = "gated"`, the server makes one for every such call before a human looks
(journaled as by "policy"). It is journaled (`call.dry_run` when it starts, with who asked;
`call.dry_run_done` with its effect digest and counts, never contents), and its change set is
attached to the pending approval, which the board sends again: only approvers see it. The
agent sees nothing of it before a decision: not the output, not the effect digest.

One dry run per session at a time (DRY_RUN_BUSY otherwise), and at most `max_running` across
the server; in "gated" mode a session's calls wait their turn, at most `GATED_QUEUE` of them.

The plans kept for "apply exactly this" hold the files' new content in memory until their call
ends: at most one dry run's cap (`DryRunSettings.max_bytes`) per session and `HELD_RUNS` of
them across the server. Past that the oldest plans of pending calls are let go (the session's
own first): their change sets stay shown, say so, and can no longer be applied (a plan already
chosen for an Invoke is never let go).
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections import OrderedDict
from typing import Final

import anyio

from .board import PendingApproval
from .calls import CallRecord
from .effects import ChangeSet, DryRunnable, DryRunSettings, effect_digest
from .errors import CallgateError, FailedPrecondition, ResourceExhausted
from .lifecycle import Lifecycle
from .models import State
from .principals import Principal, Role

__all__ = ["DRY_RUN_MODES", "DryRuns"]

log = logging.getLogger(__name__)

DRY_RUN_MODES: Final = ("on_request", "gated", "off")
GATED_QUEUE: Final = 8
HELD_RUNS: Final = 4
"""Server-wide, the plans held for "apply exactly this" hold at most this many dry runs' cap."""
LET_GO: Final = (
    "its changes were let go to bound the memory dry runs hold (a newer dry run took their "
    "place); ask for the dry run again"
)
POLICY: Final = "policy"


class DryRuns:
    """Dry runs over the lifecycle's pending calls (the board's hooks)."""

    def __init__(
        self,
        lifecycle: Lifecycle,
        mode: str = "on_request",
        unavailable: str = "",
        settings: DryRunSettings | None = None,
        max_running: int = 2,
    ) -> None:
        if mode not in DRY_RUN_MODES:
            raise ValueError(f"dry_run must be one of {', '.join(DRY_RUN_MODES)}")
        self.lifecycle = lifecycle
        self.mode = mode
        # Why dry runs cannot be made on this machine ("" when they can: overlay.py's probe).
        self.unavailable = unavailable
        self.settings = settings or DryRunSettings()
        self._secret = secrets.token_bytes(32)
        self._locks: dict[str, anyio.Lock] = {}  # one dry run per session at a time
        self._queued: dict[str, int] = {}
        # Pending calls holding a plan, oldest first: execution ID -> (session ID, bytes).
        self._held: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._slots = anyio.Semaphore(max(max_running, 1))
        lifecycle.board.hooks = self

    @property
    def status(self) -> str:
        """What health and GetSession say: the mode, or why dry runs are unavailable."""
        if self.mode == "off":
            return "off"
        return f"unavailable: {self.unavailable}" if self.unavailable else self.mode

    def refusal(self, record: CallRecord) -> str:
        """Why `record` cannot be dry-run ("" when it can)."""
        if self.mode == "off":
            return "dry runs are off on this server"
        if self.unavailable:
            return self.unavailable
        tool = _dry_runnable(self.lifecycle.tool_of(record))
        if tool is None:
            return f"{record.tool_name} calls have no dry run"
        if record.artifact is None:
            return "the call has ended"
        return tool.dry_run_refusal(record.artifact)

    async def run(self, principal: Principal, execution_id: str, digest: str) -> ChangeSet:
        """An approver's dry run of a pending call (bound to the digest shown)."""
        principal.require(Role.APPROVER)
        _, record = self.lifecycle.find_call(principal, execution_id)
        _check_pending(record)
        if digest != record.digest:
            raise FailedPrecondition(
                "DIGEST_MISMATCH",
                "The digest is not the call's digest; ask for the dry run of the call as it "
                "is shown now.",
            )
        refusal = self.refusal(record)
        if refusal:
            raise FailedPrecondition("DRY_RUN_UNAVAILABLE", f"This call has no dry run: {refusal}.")
        if self._lock(record.session_id).locked():
            raise ResourceExhausted(
                "DRY_RUN_BUSY",
                "A dry run of this session is under way; ask again once it has ended.",
            )
        return await self._run(record, principal.name)

    def _lock(self, session_id: str) -> anyio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = anyio.Lock()
        return lock

    def _release(self, session_id: str) -> None:
        lock = self._locks.get(session_id)
        if lock is not None and not lock.locked() and not lock.statistics().tasks_waiting:
            del self._locks[session_id]

    async def _run(self, record: CallRecord, requested_by: str) -> ChangeSet:
        try:
            async with self._lock(record.session_id), self._slots:
                _check_pending(record)
                change_set, plan, held = await self._dry_run(record, requested_by)
        finally:
            self._release(record.session_id)
        if record.state is State.AWAITING_APPROVAL:
            record.dry_run, record.dry_run_plan = change_set, plan
            if plan is not None:
                self._hold(record, held)
            self.lifecycle.board.attach(record.execution_id, change_set)
        return change_set

    def _hold(self, record: CallRecord, size: int) -> None:
        """Count `record`'s new plan, and let go of the oldest others past the bounds."""
        self._held.pop(record.execution_id, None)
        self._held[record.execution_id] = (record.session_id, size)
        held: dict[str, CallRecord] = {}
        for execution_id in list(self._held):
            other = self.lifecycle.call_record(execution_id)
            if other is None or (other.dry_run_plan is None and other.apply_plan is None):
                del self._held[execution_id]  # ended, or its plan is gone already
            else:
                held[execution_id] = other
        session_cap = self.settings.max_bytes
        server_cap = HELD_RUNS * self.settings.max_bytes

        def totals() -> tuple[int, int]:
            mine = sum(n for s, n in self._held.values() if s == record.session_id)
            return mine, sum(n for _, n in self._held.values())

        for execution_id, (session_id, _) in list(self._held.items()):
            mine, everyone = totals()
            if mine <= session_cap and everyone <= server_cap:
                return
            other = held[execution_id]
            over_mine = mine > session_cap and session_id == record.session_id
            evictable = other is not record and other.apply_plan is None
            if evictable and (over_mine or everyone > server_cap):
                self._let_go(other)

    def _let_go(self, record: CallRecord) -> None:
        del self._held[record.execution_id]
        record.dry_run_plan = None
        if record.dry_run is not None:
            record.dry_run = dataclasses.replace(record.dry_run, unrepresentable=LET_GO)
            self.lifecycle.board.attach(record.execution_id, record.dry_run)

    async def _dry_run(
        self, record: CallRecord, requested_by: str
    ) -> tuple[ChangeSet, object | None, int]:
        ids = {"session_id": record.session_id, "execution_id": record.execution_id}
        await self.lifecycle.journal.record_durable(
            "call.dry_run", **ids, principal=requested_by, data={"digest": record.digest}
        )
        tool = _dry_runnable(self.lifecycle.tool_of(record))
        artifact = record.artifact
        if tool is None or artifact is None:
            raise FailedPrecondition("CALL_STATE_INVALID", "The call has ended.")
        ctx = self.lifecycle.dry_run_context(record)
        with anyio.CancelScope(shield=True):  # an approver who hangs up stops nothing half-way
            outcome = await tool.dry_run(artifact, ctx, self.settings)
        change_set = dataclasses.replace(
            outcome.change_set,
            effect_digest=effect_digest(self._secret, record.digest, outcome.covered),
            requested_by=requested_by,
            time=self.lifecycle.clock.now(),
        )
        self.lifecycle.journal.record(
            "call.dry_run_done",
            **ids,
            principal=requested_by,
            data={
                "effect_digest": change_set.effect_digest,
                "changes": len(change_set.changes) + change_set.omitted_changes,
                "exit_code": change_set.exit_code,
                "unrepresentable": change_set.unrepresentable,
                "failure": change_set.failure,
            },
        )
        return change_set, outcome.plan, outcome.plan_bytes

    # ------------------------------------------------------------------ board hooks

    def annotate(self, item: PendingApproval) -> PendingApproval:
        record = self.lifecycle.call_record(item.execution_id)
        refusal = self.refusal(record) if record is not None else "the call has ended"
        return dataclasses.replace(item, dry_run_refusal=refusal)

    def published(self, item: PendingApproval) -> None:
        """Gated mode: a dry run of each call that can have one, before a human looks."""
        if self.mode != "gated" or item.dry_run_refusal:
            return
        record = self.lifecycle.call_record(item.execution_id)
        if record is None:
            return
        queued = self._queued.get(record.session_id, 0)
        if queued >= GATED_QUEUE:
            return  # a flood: an approver can still ask for one
        self._queued[record.session_id] = queued + 1

        async def gated() -> None:
            try:
                if record.state is State.AWAITING_APPROVAL and record.dry_run is None:
                    await self._run(record, POLICY)
            except CallgateError:
                pass  # decided or gone meanwhile
            except Exception:
                log.exception("a gated dry run failed", extra={"execution_id": record.execution_id})
            finally:
                left = self._queued.get(record.session_id, 1) - 1
                if left > 0:
                    self._queued[record.session_id] = left
                else:
                    self._queued.pop(record.session_id, None)

        self.lifecycle.spawn(gated)


def _dry_runnable(tool: object) -> DryRunnable | None:
    return tool if isinstance(tool, DryRunnable) else None


def _check_pending(record: CallRecord) -> None:
    if record.state is not State.AWAITING_APPROVAL or record.deciding:
        raise FailedPrecondition(
            "CALL_STATE_INVALID",
            f"The call is {record.state.value}; only a call awaiting approval has a dry run.",
            metadata={"state": record.state.value},
        )
