"""The call lifecycle: Prepare -> Approve -> Invoke with a hand-driven clock and real tools."""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from callgate.server.core.calls import CallSnapshot
from callgate.server.core.errors import (
    AlreadyExists,
    CallgateError,
    FailedPrecondition,
    InternalError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)
from callgate.server.core.gate import AccessDefaults, Gate
from callgate.server.core.lifecycle import Lifecycle, LifecycleSettings
from callgate.server.core.models import DenialKind, RequirementKind, SandboxMode, State
from callgate.server.core.paths import DEFAULT_DENIED_GLOBS, ProtectedPaths
from callgate.server.core.principals import Principal, Role
from callgate.server.core.resources import ResourceKey
from callgate.server.core.rules import Effect, Rule, RuleBook
from callgate.server.core.tool import Tool
from tests.support.tools import (
    NOTES_FILE,
    Crash,
    ManualClock,
    NoArguments,
    NoArtifact,
    Slow,
    registry,
)

pytestmark = pytest.mark.anyio

AGENT = Principal("alice", frozenset({Role.AGENT}))
OTHER_AGENT = Principal("bob", frozenset({Role.AGENT}))
APPROVER = Principal("carol", frozenset({Role.APPROVER}))
ADMIN = Principal("root", frozenset({Role.ADMIN}))
HELD_FILE = "held.txt"
TTL = 900.0
APPROVAL_TIMEOUT = 600.0

T = TypeVar("T")
ExtraTool = Tool[NoArguments, NoArtifact]


@dataclass
class World:
    """A lifecycle over a temporary workspace where Note may write notes.txt by rule (so it is
    approved by policy) while any other file it writes stays gated."""

    lifecycle: Lifecycle
    clock: ManualClock
    root: Path
    workspace: Path
    state_dir: Path
    session_id: str
    principal: Principal = AGENT

    def prepare(
        self,
        tool: str = "Note",
        arguments: dict[str, object] | str | None = None,
        *,
        evaluate: bool = False,
        request_id: str = "",
        loop_id: str = "",
    ) -> CallSnapshot:
        if arguments is None:
            arguments = {"text": "hello"}
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return self.lifecycle.prepare(
            self.principal, self.session_id, loop_id, tool, text, request_id, evaluate
        )

    def note(self, text: str, file: str = NOTES_FILE, *, evaluate: bool = True) -> CallSnapshot:
        return self.prepare("Note", {"text": text, "file": file}, evaluate=evaluate)

    async def approve(self, execution_id: str, wait: float = 0.0) -> CallSnapshot:
        return await self.lifecycle.approve(self.principal, self.session_id, execution_id, wait)

    async def invoke(self, execution_id: str, request_id: str = "") -> CallSnapshot:
        return await self.lifecycle.invoke(
            self.principal, self.session_id, execution_id, request_id
        )

    def get(self, execution_id: str) -> CallSnapshot:
        return self.lifecycle.get_call(self.principal, self.session_id, execution_id)

    def cancel(self, execution_id: str) -> CallSnapshot:
        return self.lifecycle.cancel_call(self.principal, self.session_id, execution_id)

    def lines(self, file: str = NOTES_FILE) -> list[str]:
        """The lines Note calls appended to `file`: one per run."""
        path = self.workspace / file
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def build(root: Path, *tools: ExtraTool, **overrides: Any) -> World:
    """A fresh lifecycle with one open session of AGENT in `root/ws`."""
    workspace, state_dir = root / "ws", root / "state"
    workspace.mkdir(exist_ok=True)
    state_dir.mkdir(exist_ok=True)
    protected = ProtectedPaths(DEFAULT_DENIED_GLOBS, roots=[str(state_dir)])
    notes = str((workspace / NOTES_FILE).resolve())
    rules = RuleBook(
        [Rule("notes", Effect.ALLOW, RequirementKind.FILESYSTEM_WRITE, notes, "", "config", _EPOCH)]
    )
    clock = ManualClock()
    settings_ = LifecycleSettings(
        default_workspace=str(workspace),
        allowed_roots=(str(root),),
        call_ttl_seconds=TTL,
        approval_timeout_seconds=APPROVAL_TIMEOUT,
        **overrides,
    )
    lifecycle = Lifecycle(
        settings_, registry(*tools), Gate(AccessDefaults(), rules, protected), protected, clock
    )
    session = lifecycle.open_session(AGENT, "", {})
    return World(lifecycle, clock, root, workspace, state_dir, session.session_id)


_EPOCH = ManualClock().now()


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build(tmp_path)


def new_request_id() -> str:
    return str(uuid.uuid4())


@contextmanager
def expect_precondition(reason: str) -> Iterator[None]:
    """Expect FAILED_PRECONDITION with `reason`."""
    with pytest.raises(FailedPrecondition) as caught:
        yield
    assert caught.value.reason == reason


# ------------------------------------------------------------------ prepare and approve


async def test_prepare_and_approve_have_no_effect(world: World) -> None:
    """Neither Prepare nor Approve writes anything; only Invoke does."""
    call = world.prepare("Note", {"text": "hello"})
    assert call.state is State.PREPARED
    assert call.summary == "Note notes.txt"
    assert [r.kind for r in call.requirements] == [RequirementKind.FILESYSTEM_WRITE]
    assert len(call.digest) == 64
    assert not (world.workspace / NOTES_FILE).exists()
    approved = await world.approve(call.execution_id)
    assert approved.state is State.APPROVED
    assert approved.decision is not None
    assert approved.decision.decided_by == "policy"
    assert approved.decision.rule_ids == ("notes",)
    assert not (world.workspace / NOTES_FILE).exists()


async def test_prepare_with_evaluate_decides_in_the_same_step(world: World) -> None:
    """The fast path returns an already decided call; the effect still waits for Invoke."""
    (world.workspace / "a.txt").write_text("content\n")
    peek = world.prepare("Peek", {"path": "a.txt"}, evaluate=True)
    assert peek.state is State.APPROVED
    assert peek.decision is not None
    assert peek.decision.rule_ids == ()
    note = world.note("hi")
    assert note.state is State.APPROVED
    assert world.lines() == []


async def test_invoke_runs_the_frozen_artifact(world: World) -> None:
    """An approved call runs once and ends SUCCEEDED with the tool's result."""
    (world.workspace / "a.txt").write_text("content\n")
    peek = await world.invoke(world.prepare("Peek", {"path": "a.txt"}, evaluate=True).execution_id)
    assert peek.state is State.SUCCEEDED
    assert peek.result is not None
    assert peek.result.text == "content\n"
    note = await world.invoke(world.note("first line").execution_id)
    assert note.state is State.SUCCEEDED
    assert world.lines() == ["first line"]


async def test_the_artifact_is_frozen_at_prepare(world: World) -> None:
    """Identical arguments give identical digests; different arguments a different digest."""
    first, second = world.note("same", evaluate=False), world.note("same", evaluate=False)
    assert first.execution_id != second.execution_id
    assert first.digest == second.digest
    assert world.note("other", evaluate=False).digest != first.digest


async def test_a_tool_level_failure_is_a_failed_result_not_an_error(world: World) -> None:
    """A tool that ran and failed ends FAILED with an error result; Invoke itself succeeds."""
    call = await world.invoke(
        world.prepare("Peek", {"path": "missing.txt"}, evaluate=True).execution_id
    )
    assert call.state is State.FAILED
    assert call.result is not None
    assert call.result.is_error
    assert call.result.error_code == "file_not_found"


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ("[]", "arguments"),
        ('{"text": "a", "text": "b"}', "arguments.text"),
        ({"text": 5}, "arguments.text"),
        ({"text": "x", "colour": "red"}, "arguments.colour"),
        ({"text": "x", "file": "../outside.txt"}, "arguments.file"),
        ({"text": "x", "file": "/etc/passwd"}, "arguments.file"),
    ],
)
async def test_invalid_arguments_fail_at_prepare_and_store_nothing(
    world: World, arguments: dict[str, object] | str, field: str
) -> None:
    """Bad input is ARGUMENTS_INVALID at Prepare and never becomes a call."""
    with pytest.raises(InvalidArgument) as caught:
        world.prepare("Note", arguments, evaluate=True)
    assert caught.value.reason == "ARGUMENTS_INVALID"
    assert caught.value.violations[0].field == field
    assert world.lifecycle.list_calls(AGENT, world.session_id) == []


async def test_a_gated_call_awaits_an_approver_in_interactive_mode(world: World) -> None:
    """A write without an allow rule waits for a human and cannot be invoked meanwhile."""
    call = world.note("held", HELD_FILE)
    assert call.state is State.AWAITING_APPROVAL
    with expect_precondition("CALL_NOT_APPROVED"):
        await world.invoke(call.execution_id)
    assert world.lines(HELD_FILE) == []


async def test_a_gated_call_is_denied_at_once_in_headless_mode(tmp_path: Path) -> None:
    """Headless servers have no approver: the call is DENIED with APPROVAL_REQUIRED."""
    world = build(tmp_path, headless=True)
    call = world.note("held", HELD_FILE)
    assert call.state is State.DENIED
    assert call.denial is not None
    assert call.denial.kind is DenialKind.APPROVAL_REQUIRED
    with expect_precondition("CALL_DENIED"):
        await world.invoke(call.execution_id)
    assert world.lines(HELD_FILE) == []


async def test_an_unknown_requirement_kind_is_denied(world: World) -> None:
    """A tool asking for a capability the gate does not know is denied by policy."""
    call = world.prepare("Beam", {}, evaluate=True)
    assert call.state is State.DENIED
    assert call.denial is not None
    assert call.denial.kind is DenialKind.OUT_OF_SCOPE


async def test_a_protected_target_is_refused(world: World) -> None:
    """Writing a secret path is refused by the gate even though the path is in the workspace."""
    call = world.note("leak", ".env")
    assert call.state is State.DENIED
    assert call.denial is not None
    assert call.denial.kind is DenialKind.REFUSED


async def test_approve_wait_returns_the_call_still_awaiting_when_the_wait_passes(
    world: World,
) -> None:
    """Approve(wait) is bounded: with no decision it returns AWAITING_APPROVAL."""
    call = world.note("held", HELD_FILE)
    with anyio.fail_after(5):
        waited = await world.approve(call.execution_id, wait=0.05)
    assert waited.state is State.AWAITING_APPROVAL


async def test_approve_wait_ends_as_soon_as_the_call_is_decided(world: World) -> None:
    """A waiting Approve wakes on the call's next decision instead of sleeping out its wait."""
    call = world.note("held", HELD_FILE)
    outcome: list[CallgateError] = []

    async def wait_for_decision() -> None:
        try:
            await world.approve(call.execution_id, wait=30)
        except FailedPrecondition as error:
            outcome.append(error)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(wait_for_decision)
            await anyio.wait_all_tasks_blocked()
            world.cancel(call.execution_id)
    assert [e.reason for e in outcome] == ["CALL_STATE_INVALID"]


@pytest.mark.parametrize("wait", [-1.0, math.nan, math.inf])
async def test_approve_rejects_a_bad_wait(world: World, wait: float) -> None:
    """The wait must be a finite, non-negative duration."""
    call = world.note("held", HELD_FILE)
    with pytest.raises(InvalidArgument) as caught:
        await world.approve(call.execution_id, wait=wait)
    assert caught.value.reason == "REQUEST_INVALID"
    assert caught.value.violations[0].field == "wait"


async def test_approve_of_a_call_that_already_ran_is_refused(world: World) -> None:
    """Only prepared or gated calls can be approved; a finished call is CALL_STATE_INVALID."""
    call = await world.invoke(world.note("once").execution_id)
    with expect_precondition("CALL_STATE_INVALID"):
        await world.approve(call.execution_id)


# ------------------------------------------------------------------ time


async def test_an_unanswered_approval_times_out_as_denied(world: World) -> None:
    """AWAITING_APPROVAL longer than the approval timeout becomes DENIED / APPROVAL_TIMEOUT."""
    call = world.note("held", HELD_FILE)
    world.clock.advance(APPROVAL_TIMEOUT - 1)
    assert world.get(call.execution_id).state is State.AWAITING_APPROVAL
    world.clock.advance(1)
    timed_out = world.get(call.execution_id)
    assert timed_out.state is State.DENIED
    assert timed_out.denial is not None
    assert timed_out.denial.kind is DenialKind.APPROVAL_TIMEOUT
    with expect_precondition("CALL_DENIED"):
        await world.invoke(call.execution_id)


async def test_unused_calls_expire_after_the_ttl(world: World) -> None:
    """PREPARED and APPROVED calls not invoked within the TTL become EXPIRED and cannot run."""
    prepared = world.note("late", evaluate=False)
    approved = world.note("late")
    assert prepared.expire_time == prepared.create_time + timedelta(seconds=TTL)
    assert approved.expire_time == approved.create_time + timedelta(seconds=TTL)
    world.clock.advance(TTL - 1)
    states = {c.execution_id: c.state for c in world.lifecycle.list_calls(AGENT, world.session_id)}
    assert states == {prepared.execution_id: State.PREPARED, approved.execution_id: State.APPROVED}
    world.clock.advance(1)
    for call in (prepared, approved):
        expired = world.get(call.execution_id)
        assert expired.state is State.EXPIRED
        assert expired.expire_time is None
        with expect_precondition("CALL_EXPIRED"):
            await world.invoke(call.execution_id)
        with expect_precondition("CALL_EXPIRED"):
            await world.approve(call.execution_id)
    assert world.lines() == []


async def test_approval_restarts_the_ttl(world: World) -> None:
    """The TTL of an approved call counts from its approval, not from Prepare."""
    call = world.note("slowly", evaluate=False)
    world.clock.advance(TTL - 10)
    await world.approve(call.execution_id)
    world.clock.advance(TTL - 10)
    assert world.get(call.execution_id).state is State.APPROVED
    assert (await world.invoke(call.execution_id)).state is State.SUCCEEDED


async def test_sweep_applies_due_timeouts_to_every_session(world: World) -> None:
    """The periodic sweep expires calls without anyone looking at them."""
    call = world.note("late", evaluate=False)
    world.clock.advance(TTL)
    world.lifecycle.sweep()
    assert world.get(call.execution_id).state is State.EXPIRED


# ------------------------------------------------------------------ single use and idempotency


async def test_a_call_runs_at_most_once(world: World) -> None:
    """A second Invoke is CALL_ALREADY_INVOKED, with or without a new request_id."""
    call = world.note("once")
    await world.invoke(call.execution_id)
    with expect_precondition("CALL_ALREADY_INVOKED"):
        await world.invoke(call.execution_id)
    with expect_precondition("CALL_ALREADY_INVOKED"):
        await world.invoke(call.execution_id, new_request_id())
    assert world.lines() == ["once"]


async def test_an_invoke_retry_with_the_same_request_id_returns_the_original_result(
    world: World,
) -> None:
    """Repeating Invoke with its request_id never repeats the effect."""
    call, request_id = world.note("retry"), new_request_id()
    first = await world.invoke(call.execution_id, request_id)
    second = await world.invoke(call.execution_id, request_id)
    assert second == first
    assert second.state is State.SUCCEEDED
    assert world.lines() == ["retry"]


async def test_an_invoke_request_id_reused_for_another_call_conflicts(world: World) -> None:
    """One request_id names one Invoke; using it for another call is REQUEST_ID_CONFLICT."""
    first, second, request_id = world.note("a"), world.note("b"), new_request_id()
    await world.invoke(first.execution_id, request_id)
    with pytest.raises(AlreadyExists) as caught:
        await world.invoke(second.execution_id, request_id)
    assert caught.value.reason == "REQUEST_ID_CONFLICT"
    assert world.get(second.execution_id).state is State.APPROVED
    assert world.lines() == ["a"]


async def test_a_prepare_replay_returns_the_same_call(world: World) -> None:
    """Prepare with a used request_id and the same payload returns the original call."""
    request_id = new_request_id()
    first = world.prepare("Note", {"text": "x"}, evaluate=True, request_id=request_id)
    again = world.prepare("Note", {"text": "x"}, evaluate=True, request_id=request_id)
    assert again.execution_id == first.execution_id
    assert len(world.lifecycle.list_calls(AGENT, world.session_id)) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"arguments": {"text": "y"}},
        {"evaluate": False},
        {"tool": "Peek", "arguments": {"path": "a"}},
    ],
)
async def test_a_prepare_request_id_with_another_payload_conflicts(
    world: World, change: dict[str, Any]
) -> None:
    """The same request_id with a different payload is REQUEST_ID_CONFLICT, not a new call."""
    request_id = new_request_id()
    world.prepare("Note", {"text": "x"}, evaluate=True, request_id=request_id)
    request: dict[str, Any] = {"tool": "Note", "arguments": {"text": "x"}, "evaluate": True}
    request.update(change)
    with pytest.raises(AlreadyExists) as caught:
        world.prepare(request_id=request_id, **request)
    assert caught.value.reason == "REQUEST_ID_CONFLICT"


@pytest.mark.parametrize("request_id", ["not-a-uuid", "1234", "x" * 64])
async def test_a_request_id_must_be_a_uuid(world: World, request_id: str) -> None:
    """Prepare and Invoke refuse request IDs that are not UUIDs with REQUEST_INVALID."""
    with pytest.raises(InvalidArgument) as caught:
        world.prepare(request_id=request_id)
    assert caught.value.reason == "REQUEST_INVALID"
    assert caught.value.violations[0].field == "request_id"
    call = world.note("x")
    with pytest.raises(InvalidArgument) as caught:
        await world.invoke(call.execution_id, request_id)
    assert caught.value.reason == "REQUEST_INVALID"
    assert world.lines() == []


# ------------------------------------------------------------------ cancellation


@pytest.mark.parametrize("kind", ["prepared", "approved", "awaiting"])
async def test_cancelling_an_open_call_ends_it(world: World, kind: str) -> None:
    """PREPARED, APPROVED and AWAITING calls become CANCELLED and can then never run."""
    call = {
        "prepared": lambda: world.note("x", evaluate=False),
        "approved": lambda: world.note("x"),
        "awaiting": lambda: world.note("x", HELD_FILE),
    }[kind]()
    assert world.cancel(call.execution_id).state is State.CANCELLED
    assert world.cancel(call.execution_id).state is State.CANCELLED
    with expect_precondition("CALL_STATE_INVALID"):
        await world.invoke(call.execution_id)
    assert world.lines() == []
    assert world.lines(HELD_FILE) == []


async def test_cancelling_a_running_call_stops_it(tmp_path: Path) -> None:
    """CancelCall from another task cancels a RUNNING call; its Invoke returns CANCELLED."""
    slow = Slow(anyio.Event())
    world = build(tmp_path, slow)
    call = world.prepare("Slow", {}, evaluate=True)
    finished: list[CallSnapshot] = []

    async def invoke() -> None:
        finished.append(await world.invoke(call.execution_id))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(invoke)
            await slow.started.wait()
            assert world.get(call.execution_id).state is State.RUNNING
            world.cancel(call.execution_id)
    [result] = finished
    assert result.state is State.CANCELLED
    assert result.result is not None
    assert result.result.error_code == "cancelled"
    assert slow.finished_runs == 0
    assert world.get(call.execution_id).state is State.CANCELLED
    assert world.lifecycle.running_total == 0


@pytest.mark.parametrize("kind", ["succeeded", "denied", "expired"])
async def test_cancelling_a_finished_call_is_refused(world: World, kind: str) -> None:
    """A call that already ended cannot be cancelled: CALL_STATE_INVALID."""
    if kind == "succeeded":
        call = await world.invoke(world.note("x").execution_id)
    elif kind == "denied":
        call = world.prepare("Beam", {}, evaluate=True)
    else:
        call = world.note("x")
        world.clock.advance(TTL)
    with expect_precondition("CALL_STATE_INVALID"):
        world.cancel(call.execution_id)


# ------------------------------------------------------------------ failures while running


async def test_an_unexpected_tool_exception_fails_the_call(tmp_path: Path) -> None:
    """A bug in a tool is a FAILED call with an internal_error result, not a crashed RPC."""
    world = build(tmp_path, Crash(domain_error=False))
    call = await world.invoke(world.prepare("Crash", {}, evaluate=True).execution_id)
    assert call.state is State.FAILED
    assert call.result is not None
    assert call.result.error_code == "internal_error"


async def test_a_domain_error_while_running_still_ends_the_call(tmp_path: Path) -> None:
    """A tool raising a domain error surfaces the error and leaves the call FAILED, so it stops
    counting as open and an Invoke retry returns at once instead of waiting forever."""
    world = build(tmp_path, Crash(domain_error=True), max_open_calls_per_session=1)
    call, request_id = world.prepare("Crash", {}, evaluate=True), new_request_id()
    with pytest.raises(InternalError):
        await world.invoke(call.execution_id, request_id)
    after = world.get(call.execution_id)
    assert after.state is State.FAILED
    assert after.result is not None
    assert after.result.is_error
    with anyio.fail_after(5):
        assert (await world.invoke(call.execution_id, request_id)).state is State.FAILED
    assert world.prepare("Crash", {}).state is State.PREPARED
    assert world.lifecycle.running_total == 0


# ------------------------------------------------------------------ isolation and roles


async def test_another_principals_session_does_not_exist_for_them(world: World) -> None:
    """Every method answers SESSION_NOT_FOUND for a session someone else owns (admin too)."""
    call = world.note("mine", evaluate=False)
    lifecycle, sid, eid = world.lifecycle, world.session_id, call.execution_id
    for stranger in (OTHER_AGENT, ADMIN):
        attempts: list[Callable[[], object]] = [
            partial(lifecycle.get_session, stranger, sid),
            partial(lifecycle.open_loop, stranger, sid),
            partial(lifecycle.list_tools, stranger, sid),
            partial(lifecycle.prepare, stranger, sid, "", "Note", '{"text": "x"}', "", True),
            partial(lifecycle.get_call, stranger, sid, eid),
            partial(lifecycle.list_calls, stranger, sid),
            partial(lifecycle.cancel_call, stranger, sid, eid),
        ]
        for attempt in attempts:
            with pytest.raises(NotFound) as caught:
                attempt()
            assert caught.value.reason == "SESSION_NOT_FOUND"
        with pytest.raises(NotFound) as caught:
            await lifecycle.close_session(stranger, sid)
        assert caught.value.reason == "SESSION_NOT_FOUND"
        with pytest.raises(NotFound) as caught:
            await lifecycle.approve(stranger, sid, eid, 0.0)
        assert caught.value.reason == "SESSION_NOT_FOUND"
        with pytest.raises(NotFound) as caught:
            await lifecycle.invoke(stranger, sid, eid, "")
        assert caught.value.reason == "SESSION_NOT_FOUND"
    assert world.get(eid).state is State.PREPARED


async def test_an_unknown_session_looks_the_same_as_a_foreign_one(world: World) -> None:
    """A made-up or oversized ID is SESSION_NOT_FOUND; an empty one is REQUEST_INVALID."""
    for session_id in ("ses_made_up", "s" * 10_000):
        with pytest.raises(NotFound) as caught:
            world.lifecycle.get_session(AGENT, session_id)
        assert caught.value.reason == "SESSION_NOT_FOUND"
    with pytest.raises(InvalidArgument) as invalid:
        world.lifecycle.get_session(AGENT, "")
    assert invalid.value.reason == "REQUEST_INVALID"


async def test_a_principal_without_the_agent_role_cannot_use_sessions(world: World) -> None:
    """An approver-only token gets PERMISSION_DENIED / ROLE_REQUIRED on agent methods."""
    call = world.note("x", evaluate=False)
    lifecycle, sid, eid = world.lifecycle, world.session_id, call.execution_id
    attempts: list[Callable[[], object]] = [
        lambda: lifecycle.open_session(APPROVER, "", {}),
        lambda: lifecycle.get_session(APPROVER, sid),
        lambda: lifecycle.prepare(APPROVER, sid, "", "Note", '{"text": "x"}', "", True),
        lambda: lifecycle.get_call(APPROVER, sid, eid),
        lambda: lifecycle.cancel_call(APPROVER, sid, eid),
    ]
    for attempt in attempts:
        with pytest.raises(PermissionDenied) as caught:
            attempt()
        assert caught.value.reason == "ROLE_REQUIRED"
    with pytest.raises(PermissionDenied):
        await lifecycle.approve(APPROVER, sid, eid, 0.0)
    with pytest.raises(PermissionDenied):
        await lifecycle.invoke(APPROVER, sid, eid, "")
    assert world.get(eid).state is State.PREPARED


# ------------------------------------------------------------------ not found


async def test_unknown_tools_loops_and_calls_are_not_found(world: World) -> None:
    """Each missing thing has its own NOT_FOUND reason; an empty execution ID is invalid."""
    with pytest.raises(NotFound) as caught:
        world.prepare("NoSuchTool", {})
    assert caught.value.reason == "TOOL_NOT_FOUND"
    with pytest.raises(NotFound) as caught:
        world.prepare(loop_id="loop_made_up")
    assert caught.value.reason == "LOOP_NOT_FOUND"
    with pytest.raises(NotFound) as caught:
        world.get("call_made_up")
    assert caught.value.reason == "CALL_NOT_FOUND"
    with pytest.raises(InvalidArgument) as invalid:
        world.get("")
    assert invalid.value.reason == "REQUEST_INVALID"


async def test_calls_in_an_extra_loop_belong_to_that_loop(world: World) -> None:
    """OpenLoop gives a sub-agent its own loop; its calls carry that loop ID."""
    loop_id = world.lifecycle.open_loop(AGENT, world.session_id)
    call = world.prepare(loop_id=loop_id)
    assert call.loop_id == loop_id
    default = world.lifecycle.get_session(AGENT, world.session_id).default_loop_id
    assert world.prepare().loop_id == default != loop_id


async def test_list_calls_shows_newest_first(world: World) -> None:
    """ListCalls returns the session's calls, most recent first."""
    ids = [world.note(str(i), evaluate=False).execution_id for i in range(3)]
    listed = world.lifecycle.list_calls(AGENT, world.session_id)
    assert [c.execution_id for c in listed] == ids[::-1]


async def test_finished_calls_beyond_the_keep_limit_are_forgotten(tmp_path: Path) -> None:
    """Old terminal calls are evicted first; open calls are never dropped."""
    world = build(tmp_path, max_kept_calls_per_session=2)
    open_call = world.note("open", evaluate=False)
    done = await world.invoke(world.note("done").execution_id)
    newest = world.note("newest", evaluate=False)
    with pytest.raises(NotFound):
        world.get(done.execution_id)
    assert world.get(open_call.execution_id).state is State.PREPARED
    assert world.get(newest.execution_id).state is State.PREPARED


# ------------------------------------------------------------------ sessions and limits


async def test_closing_a_session_cancels_its_calls_and_forgets_it(tmp_path: Path) -> None:
    """CloseSession cancels open and running calls (waking anyone waiting on them); the session
    is then SESSION_NOT_FOUND."""
    slow = Slow(anyio.Event())
    world = build(tmp_path, slow)
    waiting = world.note("x", evaluate=False)
    gated = world.note("x", HELD_FILE)
    running = world.prepare("Slow", {}, evaluate=True)
    finished: list[CallSnapshot] = []
    approvals: list[str] = []

    async def invoke() -> None:
        finished.append(await world.invoke(running.execution_id))

    async def approve() -> None:
        try:
            await world.approve(gated.execution_id, wait=30)
        except FailedPrecondition as error:
            approvals.append(error.reason)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(invoke)
            group.start_soon(approve)
            await slow.started.wait()
            await anyio.wait_all_tasks_blocked()
            await world.lifecycle.close_session(AGENT, world.session_id)
    assert [c.state for c in finished] == [State.CANCELLED]
    assert approvals == ["CALL_STATE_INVALID"]
    with pytest.raises(NotFound) as caught:
        world.get(waiting.execution_id)
    assert caught.value.reason == "SESSION_NOT_FOUND"
    assert world.lines() == []


async def test_open_session_returns_the_canonical_workspace(tmp_path: Path) -> None:
    """The session reports its canonical workspace, default loop, sandbox mode and labels."""
    world = build(tmp_path)
    (tmp_path / "ws" / "sub").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "ws" / "sub")
    session = world.lifecycle.open_session(AGENT, str(tmp_path / "alias"), {"team": "a"})
    assert session.workspace == str((tmp_path / "ws" / "sub").resolve())
    assert session.default_loop_id
    assert session.sandbox_mode is SandboxMode.NONE
    assert dict(session.labels) == {"team": "a"}
    default = world.lifecycle.get_session(AGENT, world.session_id)
    assert default.workspace == str((tmp_path / "ws").resolve())


@pytest.mark.parametrize(
    "make_workspace",
    [
        pytest.param(lambda root: "ws", id="relative"),
        pytest.param(lambda root: str(root / "missing"), id="missing"),
        pytest.param(lambda root: str(root / "ws" / "file.txt"), id="not-a-directory"),
        pytest.param(lambda root: str(root.parent), id="outside-allowed-roots"),
        pytest.param(lambda root: "/", id="filesystem-root"),
        pytest.param(lambda root: str(root / "state"), id="state-dir"),
        pytest.param(lambda root: str(root / "state" / "sub"), id="inside-state-dir"),
        pytest.param(lambda root: str(root / "ws" / ".ssh"), id="secret-dir"),
        pytest.param(lambda root: str(root / "escape"), id="symlink-out"),
        pytest.param(lambda root: str(root) + "/ws\x00", id="nul"),
    ],
)
async def test_unsuitable_workspaces_are_refused(
    world: World, make_workspace: Callable[[Path], str]
) -> None:
    """OpenSession accepts only existing, unprotected directories inside the allowed roots."""
    (world.workspace / "file.txt").write_text("x")
    (world.workspace / ".ssh").mkdir()
    (world.state_dir / "sub").mkdir()
    (world.root / "escape").symlink_to(world.root.parent)
    with pytest.raises(InvalidArgument) as caught:
        world.lifecycle.open_session(AGENT, make_workspace(world.root), {})
    assert caught.value.reason == "WORKSPACE_INVALID"


@pytest.mark.parametrize(
    "labels",
    [{f"k{i}": "v" for i in range(17)}, {"": "v"}, {"k": "v" * 257}, {"k" * 257: "v"}],
)
async def test_oversized_labels_are_refused(world: World, labels: dict[str, str]) -> None:
    """Labels are bounded in number and size: REQUEST_INVALID on the labels field."""
    with pytest.raises(InvalidArgument) as caught:
        world.lifecycle.open_session(AGENT, "", labels)
    assert caught.value.reason == "REQUEST_INVALID"
    assert caught.value.violations[0].field == "labels"


async def test_the_session_limit_counts_open_sessions(tmp_path: Path) -> None:
    """Past max_sessions, OpenSession is SESSION_LIMIT; closing one makes room again."""
    world = build(tmp_path, max_sessions=2)
    second = world.lifecycle.open_session(OTHER_AGENT, "", {})
    with pytest.raises(ResourceExhausted) as caught:
        world.lifecycle.open_session(AGENT, "", {})
    assert caught.value.reason == "SESSION_LIMIT"
    await world.lifecycle.close_session(OTHER_AGENT, second.session_id)
    world.lifecycle.open_session(AGENT, "", {})


async def test_the_open_call_limit_counts_only_unfinished_calls(tmp_path: Path) -> None:
    """Past max_open_calls_per_session, Prepare is CALL_LIMIT; ending a call makes room."""
    world = build(tmp_path, max_open_calls_per_session=2)
    first = world.note("1", evaluate=False)
    world.note("2")
    with pytest.raises(ResourceExhausted) as caught:
        world.note("3")
    assert caught.value.reason == "CALL_LIMIT"
    world.cancel(first.execution_id)
    world.note("3")


async def test_the_loop_limit_counts_the_default_loop(tmp_path: Path) -> None:
    """Past max_loops_per_session, OpenLoop is refused with LOOP_LIMIT."""
    world = build(tmp_path, max_loops_per_session=2)
    world.lifecycle.open_loop(AGENT, world.session_id)
    with pytest.raises(ResourceExhausted) as caught:
        world.lifecycle.open_loop(AGENT, world.session_id)
    assert caught.value.reason == "LOOP_LIMIT"


@pytest.mark.parametrize("limit", ["max_running_per_session", "max_running_total"])
async def test_running_calls_are_limited(tmp_path: Path, limit: str) -> None:
    """Past the running limit, Invoke is CONCURRENCY_LIMIT and the refused call stays APPROVED."""
    slow = Slow(anyio.Event())
    world = build(tmp_path, slow, **{limit: 1})
    first = world.prepare("Slow", {}, evaluate=True)
    second = world.prepare("Slow", {}, evaluate=True)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(world.invoke, first.execution_id)
            await slow.started.wait()
            with pytest.raises(ResourceExhausted) as caught:
                await world.invoke(second.execution_id)
            assert caught.value.reason == "CONCURRENCY_LIMIT"
            assert world.get(second.execution_id).state is State.APPROVED
            slow.release.set()
    assert (await world.invoke(second.execution_id)).state is State.SUCCEEDED
    assert slow.finished_runs == 2


async def test_shutdown_refuses_new_work_and_cancels_running_calls(tmp_path: Path) -> None:
    """After begin_shutdown nothing new starts (SHUTTING_DOWN); cancel_all stops what runs."""
    slow = Slow(anyio.Event())
    world = build(tmp_path, slow)
    approved = world.note("later")
    running = world.prepare("Slow", {}, evaluate=True)
    finished: list[CallSnapshot] = []

    async def invoke() -> None:
        finished.append(await world.invoke(running.execution_id))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(invoke)
            await slow.started.wait()
            world.lifecycle.begin_shutdown()
            for attempt in (
                lambda: world.lifecycle.open_session(AGENT, "", {}),
                lambda: world.note("new"),
            ):
                with pytest.raises(Unavailable):
                    attempt()
            with pytest.raises(Unavailable) as caught:
                await world.invoke(approved.execution_id)
            assert caught.value.reason == "SHUTTING_DOWN"
            world.lifecycle.cancel_all()
    assert [c.state for c in finished] == [State.CANCELLED]
    assert world.lines() == []


# ------------------------------------------------------------------ the state machine


def attempt(function: Callable[[], T]) -> T | CallgateError:
    """The result of `function`, or the domain error it raised."""
    try:
        return function()
    except CallgateError as error:
        return error


async def _in_loop(function: Callable[[], T]) -> T:
    """Run a synchronous lifecycle method on the portal's event loop (calls create Events)."""
    return function()


@dataclass
class Observed:
    """What the machine has seen of one call."""

    text: str
    file: str
    states: list[State] = field(default_factory=list)
    # When the model expects the clock to end the current state (TTL or approval timeout).
    deadline: float | None = None

    def expected_state(self, now: float) -> State:
        current = self.states[-1]
        if self.deadline is None or now < self.deadline:
            return current
        return State.DENIED if current is State.AWAITING_APPROVAL else State.EXPIRED


class LifecycleMachine(RuleBasedStateMachine):
    """Random Prepare/Approve/Invoke/Cancel/clock sequences keep the lifecycle invariants: an
    effect happens at most once per call, only calls seen APPROVED ever run, terminal states
    never change, time ends exactly the calls whose TTL or approval timeout passed, and Invoke
    succeeds exactly when the call is APPROVED (or is a replay of the same request)."""

    calls = Bundle("calls")

    def __init__(self) -> None:
        super().__init__()
        self._temporary = tempfile.TemporaryDirectory()
        self._portal_context: AbstractContextManager[BlockingPortal] = start_blocking_portal()
        self.portal = self._portal_context.__enter__()
        self.world = build(Path(self._temporary.name))
        self.observed: dict[str, Observed] = {}
        self.invoked_with: dict[str, str] = {}
        self.count = 0

    def teardown(self) -> None:
        self._portal_context.__exit__(None, None, None)
        self._temporary.cleanup()

    def sync(self, function: Callable[[], T]) -> T:
        return self.portal.call(_in_loop, function)

    def see(self, call: CallSnapshot) -> None:
        observed = self.observed[call.execution_id]
        last = observed.states[-1] if observed.states else None
        if last is not None and last.is_terminal:
            assert call.state is last, "a terminal state changed"
        if call.state is not last:
            now = self.world.clock.monotonic()
            observed.deadline = {
                State.PREPARED: now + TTL,
                State.APPROVED: now + TTL,
                State.AWAITING_APPROVAL: now + APPROVAL_TIMEOUT,
            }.get(call.state)
        observed.states.append(call.state)

    @initialize(target=calls, file=st.sampled_from([NOTES_FILE, HELD_FILE]), evaluate=st.booleans())
    def first_call(self, file: str, evaluate: bool) -> str:
        return self.new_call(file, evaluate)

    @rule(target=calls, file=st.sampled_from([NOTES_FILE, HELD_FILE]), evaluate=st.booleans())
    def prepare(self, file: str, evaluate: bool) -> str:
        return self.new_call(file, evaluate)

    def new_call(self, file: str, evaluate: bool) -> str:
        self.count += 1
        text = f"call-{self.count}"
        call = self.sync(lambda: self.world.note(text, file, evaluate=evaluate))
        self.observed[call.execution_id] = Observed(text, file)
        self.see(call)
        return call.execution_id

    @rule(execution_id=calls)
    def approve(self, execution_id: str) -> None:
        outcome = attempt(lambda: self.portal.call(self.world.approve, execution_id))
        if isinstance(outcome, CallgateError):
            assert isinstance(outcome, FailedPrecondition)
            assert outcome.reason in ("CALL_EXPIRED", "CALL_STATE_INVALID")
        else:
            self.see(outcome)

    @rule(
        execution_id=calls,
        request_id=st.sampled_from(["", *(str(uuid.UUID(int=i)) for i in range(3))]),
    )
    def invoke(self, execution_id: str, request_id: str) -> None:
        before = self.sync(lambda: self.world.get(execution_id))
        self.see(before)
        replay = bool(request_id) and self.invoked_with.get(request_id) == execution_id
        conflict = bool(request_id) and request_id in self.invoked_with and not replay
        outcome = attempt(lambda: self.portal.call(self.world.invoke, execution_id, request_id))
        if isinstance(outcome, AlreadyExists):
            assert conflict
        elif isinstance(outcome, CallgateError):
            assert isinstance(outcome, FailedPrecondition)
            assert not conflict
            assert not replay
            assert before.state is not State.APPROVED
        else:
            assert not conflict
            assert replay or before.state is State.APPROVED
            assert outcome.state.is_terminal
            if request_id and not replay:
                self.invoked_with[request_id] = execution_id
            self.see(outcome)

    @rule(execution_id=calls)
    def cancel(self, execution_id: str) -> None:
        outcome = attempt(lambda: self.sync(lambda: self.world.cancel(execution_id)))
        if isinstance(outcome, CallgateError):
            assert isinstance(outcome, FailedPrecondition)
            assert outcome.reason == "CALL_STATE_INVALID"
        else:
            assert outcome.state is State.CANCELLED
            self.see(outcome)

    @rule(seconds=st.sampled_from([1.0, 60.0, APPROVAL_TIMEOUT, TTL]))
    def advance_clock(self, seconds: float) -> None:
        self.world.clock.advance(seconds)

    @invariant()
    def states_change_only_by_action_or_due_time(self) -> None:
        now = self.world.clock.monotonic()
        for call in self.sync(
            lambda: self.world.lifecycle.list_calls(AGENT, self.world.session_id)
        ):
            assert call.state is self.observed[call.execution_id].expected_state(now)
            if call.state is State.DENIED:
                assert call.denial is not None
                assert call.denial.kind is DenialKind.APPROVAL_TIMEOUT
            self.see(call)

    @invariant()
    def effects_happen_at_most_once_and_only_after_approval(self) -> None:
        written = self.world.lines(NOTES_FILE) + self.world.lines(HELD_FILE)
        assert len(written) == len(set(written)), "a call ran twice"
        approved = {o.text for o in self.observed.values() if State.APPROVED in o.states}
        assert set(written) <= approved, "a call ran without being approved"
        assert self.world.lines(HELD_FILE) == [], "a gated call ran without an approver"


TestLifecycleMachine = LifecycleMachine.TestCase
TestLifecycleMachine.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)


# Named sessions ----------------------------------------------------------------------------


async def test_a_named_session_is_reopened_by_its_owner_with_its_state(tmp_path: Path) -> None:
    """The same principal reopens it by name (the same session: its loops, read state, tasks);
    another principal's name space is its own; ListSessions shows only the caller's."""
    world = build(tmp_path)
    lifecycle = world.lifecycle
    first = lifecycle.open_session(AGENT, "", {}, name="work")
    again = lifecycle.open_session(AGENT, "", {}, name="work")
    assert again.session_id == first.session_id
    assert again.name == "work"
    theirs = lifecycle.open_session(OTHER_AGENT, "", {}, name="work")
    assert theirs.session_id != first.session_id
    mine = [s.session_id for s in lifecycle.list_sessions(AGENT)]
    assert first.session_id in mine
    assert theirs.session_id not in mine
    assert [s.session_id for s in lifecycle.list_sessions(OTHER_AGENT)] == [theirs.session_id]
    await lifecycle.close_session(AGENT, first.session_id)
    reopened = lifecycle.open_session(AGENT, "", {}, name="work")
    assert reopened.session_id != first.session_id  # closed: the name opens a new one


@pytest.mark.parametrize("name", ["a b", "x" * 65, "ünï", "a/b"])
def test_a_bad_session_name_is_refused(tmp_path: Path, name: str) -> None:
    world = build(tmp_path)
    with pytest.raises(InvalidArgument):
        world.lifecycle.open_session(AGENT, "", {}, name=name)


async def test_an_idle_named_session_is_closed_and_a_busy_one_is_not(tmp_path: Path) -> None:
    world = build(tmp_path, session_idle_seconds=60.0)
    lifecycle = world.lifecycle
    idle = lifecycle.open_session(AGENT, "", {}, name="idle")
    used = lifecycle.open_session(AGENT, "", {}, name="used")
    world.clock.advance(50)
    lifecycle.open_session(AGENT, "", {}, name="used")  # reopening is a use
    world.clock.advance(20)
    assert await lifecycle.close_idle() == 1
    remaining = {s.session_id for s in lifecycle.list_sessions(AGENT)}
    assert idle.session_id not in remaining
    assert used.session_id in remaining
    assert world.session_id in remaining  # unnamed sessions live until closed


class _SlowClose:
    """A session resource whose close waits for the test: the idle sweep awaits it."""

    def __init__(self) -> None:
        self.closing = anyio.Event()
        self.release = anyio.Event()

    async def aclose(self) -> None:
        self.closing.set()
        await self.release.wait()


@pytest.mark.parametrize("meanwhile", ["closed by its owner", "reopened", "used"])
async def test_the_idle_sweep_checks_each_session_again_before_closing_it(
    tmp_path: Path, meanwhile: str
) -> None:
    """While the sweep awaits the close of one idle session, its owner closes, reopens or
    uses the next one: the sweep neither crashes (it once did, taking the server down with a
    KeyError) nor closes a session that is no longer idle."""
    world = build(tmp_path, session_idle_seconds=60.0)
    lifecycle = world.lifecycle
    first = lifecycle.open_session(AGENT, "", {}, name="first")
    second = lifecycle.open_session(AGENT, "", {}, name="second")
    slow = _SlowClose()
    lifecycle._sessions[first.session_id].resources.get(ResourceKey("slow"), lambda: slow)
    world.clock.advance(120)
    closed: list[int] = []
    async with anyio.create_task_group() as group:

        async def sweep() -> None:
            closed.append(await lifecycle.close_idle())

        group.start_soon(sweep)
        await slow.closing.wait()
        if meanwhile == "closed by its owner":
            await lifecycle.close_session(AGENT, second.session_id)
        elif meanwhile == "reopened":
            lifecycle.open_session(AGENT, "", {}, name="second")
        else:
            dataclasses.replace(world, session_id=second.session_id).prepare(
                "Note", {"text": "still here"}
            )
        slow.release.set()
    assert closed == [1]
    remaining = {s.session_id for s in lifecycle.list_sessions(AGENT)}
    assert first.session_id not in remaining
    assert (second.session_id in remaining) == (meanwhile != "closed by its owner")
