"""The client library's approver API against a real server: watch, decide, watch_call."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

import anyio
import pytest

from callgate.client import (
    CallgateClient,
    CallStateError,
    DecisionKind,
    PendingApproval,
    PermissionDeniedError,
    Resolved,
    State,
    ToolCall,
)
from tests.support.server import Harness


def _client(harness: Harness, role: str) -> CallgateClient:
    return CallgateClient(harness.tcp_target, token=harness.tokens[role])


@pytest.mark.anyio
async def test_an_approver_sees_the_pending_call_and_the_agent_watches_it_get_approved(
    harness: Harness,
) -> None:
    """watch() shows the gated call with its digest; a wrong digest is refused; the right
    one approves, watch_call reports the change, and the approver sees it resolved."""
    states: list[State] = []
    async with (
        _client(harness, "agent") as agent,
        _client(harness, "approver") as approver,
        agent.open_session() as session,
    ):
        call = await session.prepare(
            "WriteFile", {"path": "out.txt", "content": "x"}, evaluate=True
        )
        assert call.state is State.AWAITING_APPROVAL

        async def watch_call() -> None:
            async with aclosing(session.watch_call(call.execution_id)) as calls:
                async for seen in calls:
                    states.append(seen.state)
                    if seen.state is State.APPROVED:
                        return

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(watch_call)
                async with aclosing(approver.approvals.watch()) as items:
                    async for item in items:
                        if isinstance(item, PendingApproval):
                            assert item.execution_id == call.execution_id
                            assert item.call.digest == call.digest
                            assert item.unmet[0].match == str(harness.workspace / "out.txt")
                            with pytest.raises(CallStateError) as raised:
                                await approver.approvals.decide(
                                    call.execution_id, "0" * 64, DecisionKind.APPROVE_ONCE
                                )
                            assert raised.value.reason == "DIGEST_MISMATCH"
                            decided: ToolCall = await approver.approvals.decide(
                                call.execution_id, item.call.digest, DecisionKind.APPROVE_ONCE
                            )
                            assert decided.state is State.APPROVED
                        elif isinstance(item, Resolved):
                            assert (item.execution_id, item.state) == (
                                call.execution_id,
                                State.APPROVED,
                            )
                            # Who decided, and how: what the console lists as decided.
                            assert item.decided_by == "approver"
                            assert item.reason.startswith("approved by approver")
                            break
    assert states[0] is State.AWAITING_APPROVAL
    assert states[-1] is State.APPROVED


async def _first(items: AsyncGenerator[object, None]) -> object:
    async with aclosing(items):
        return await anext(items)


@pytest.mark.anyio
async def test_an_agent_token_cannot_watch_approvals(harness: Harness) -> None:
    """The approver API refuses the agent's principal with ROLE_REQUIRED."""
    async with _client(harness, "agent") as agent:
        with anyio.fail_after(5), pytest.raises(PermissionDeniedError) as raised:
            await _first(agent.approvals.watch())
        assert raised.value.reason == "ROLE_REQUIRED"
        with anyio.fail_after(5), pytest.raises(PermissionDeniedError):
            await agent.approvals.list_rules()
