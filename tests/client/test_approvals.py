"""The approver API and the terminal approver, against a scripted ApprovalService on loopback."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from typing import Any

import anyio
import grpc
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from google.protobuf import message

from callgate.cli.console import ApproverConsole
from callgate.cli.display import ONCE_ONLY_PROMPT
from callgate.client import (
    ApproveOnceOnlyError,
    CallgateClient,
    DecisionKind,
    PendingApproval,
    PermissionDeniedError,
    Resolved,
    RuleEffect,
    RuleReadOnlyError,
    State,
)
from callgate.v1 import approval_service_pb2, approval_service_pb2_grpc, tool_call_pb2
from tests.client.scripted_server import TIME, call_message, rich_status

Context = grpc.aio.ServicerContext[message.Message, message.Message]
Code = grpc.StatusCode
DIGEST = "fe" * 32


class ScriptedApprovalService(approval_service_pb2_grpc.ApprovalServiceServicer):
    """WatchApprovals relays what the test sends; Decide and Answer record their requests and
    answer as a server would; rules live in a dict; `refuse` scripts one error per method."""

    def __init__(self) -> None:
        self.items: tuple[
            MemoryObjectSendStream[approval_service_pb2.WatchApprovalsResponse],
            MemoryObjectReceiveStream[approval_service_pb2.WatchApprovalsResponse],
        ] = anyio.create_memory_object_stream[approval_service_pb2.WatchApprovalsResponse](100)
        self.decided: list[approval_service_pb2.DecideRequest] = []
        self.answered: list[approval_service_pb2.AnswerRequest] = []
        self.created: list[approval_service_pb2.CreateRuleRequest] = []
        self.refuse: dict[str, grpc.Status] = {}
        self.watchers = 0

    async def _refused(self, method: str, context: Context) -> None:
        status = self.refuse.pop(method, None)
        if status is not None:
            await context.abort_with_status(status)

    async def WatchApprovals(
        self, request: approval_service_pb2.WatchApprovalsRequest, context: Context
    ) -> AsyncIterator[approval_service_pb2.WatchApprovalsResponse]:
        await self._refused("WatchApprovals", context)
        self.watchers += 1
        async for item in self.items[1]:
            yield item

    async def GetPendingApproval(
        self, request: approval_service_pb2.GetPendingApprovalRequest, context: Context
    ) -> approval_service_pb2.GetPendingApprovalResponse:
        await context.abort(grpc.StatusCode.NOT_FOUND, "this scripted server keeps no calls")

    async def Decide(
        self, request: approval_service_pb2.DecideRequest, context: Context
    ) -> approval_service_pb2.DecideResponse:
        await self._refused("Decide", context)
        self.decided.append(request)
        state = (
            tool_call_pb2.STATE_DENIED
            if request.kind == approval_service_pb2.DECISION_KIND_DENY
            else tool_call_pb2.STATE_APPROVED
        )
        return approval_service_pb2.DecideResponse(
            call=call_message(state, request.execution_id, tool_name="WriteFile")
        )

    async def DecideBatch(
        self, request: approval_service_pb2.DecideBatchRequest, context: Context
    ) -> approval_service_pb2.DecideBatchResponse:
        await self._refused("DecideBatch", context)
        calls = []
        for decision in request.requests:
            calls.append((await self.Decide(decision, context)).call)
        return approval_service_pb2.DecideBatchResponse(calls=calls)

    async def DryRun(
        self, request: approval_service_pb2.DryRunRequest, context: Context
    ) -> approval_service_pb2.DryRunResponse:
        await context.abort(
            grpc.StatusCode.FAILED_PRECONDITION, "this scripted server runs nothing"
        )

    async def Answer(
        self, request: approval_service_pb2.AnswerRequest, context: Context
    ) -> approval_service_pb2.AnswerResponse:
        await self._refused("Answer", context)
        self.answered.append(request)
        return approval_service_pb2.AnswerResponse()

    async def ListRules(
        self, request: approval_service_pb2.ListRulesRequest, context: Context
    ) -> approval_service_pb2.ListRulesResponse:
        rules = [
            approval_service_pb2.Rule(
                rule_id=f"r-{number}",
                effect=created.effect,
                kind=created.kind,
                match=created.match,
                scope=created.scope,
                origin="approver",
            )
            for number, created in enumerate(self.created, 1)
        ]
        return approval_service_pb2.ListRulesResponse(rules=rules)

    async def CreateRule(
        self, request: approval_service_pb2.CreateRuleRequest, context: Context
    ) -> approval_service_pb2.CreateRuleResponse:
        self.created.append(request)
        rule = approval_service_pb2.Rule(
            rule_id=f"r-{len(self.created)}",
            effect=request.effect,
            kind=request.kind,
            match=request.match,
            scope=request.scope,
            origin="approver",
        )
        rule.create_time.FromDatetime(TIME)
        return approval_service_pb2.CreateRuleResponse(rule=rule)

    async def DeleteRule(
        self, request: approval_service_pb2.DeleteRuleRequest, context: Context
    ) -> approval_service_pb2.DeleteRuleResponse:
        await self._refused("DeleteRule", context)
        return approval_service_pb2.DeleteRuleResponse()

    async def pending(
        self, execution_id: str, *, tool: str = "WriteFile", human_only: bool = False
    ) -> None:
        call = call_message(tool_call_pb2.STATE_AWAITING_APPROVAL, execution_id, tool_name=tool)
        call.digest = DIGEST
        requirement = tool_call_pb2.Requirement(
            kind="filesystem.write",
            match="/ws/a.txt",
            description="write /ws/a.txt",
            human_only=human_only,
        )
        call.requirements.append(requirement)
        await self.items[0].send(
            approval_service_pb2.WatchApprovalsResponse(
                approval=approval_service_pb2.PendingApproval(
                    call=call, unmet=[requirement], requested_by="agent", workspace="/ws"
                )
            )
        )

    async def question(self, execution_id: str, *choices: str) -> None:
        await self.items[0].send(
            approval_service_pb2.WatchApprovalsResponse(
                question=approval_service_pb2.PendingQuestion(
                    execution_id=execution_id,
                    session_id="s-1",
                    question="Which branch?",
                    choices=choices,
                    requested_by="agent",
                )
            )
        )

    async def resolved(self, execution_id: str, state: tool_call_pb2.State.ValueType) -> None:
        await self.items[0].send(
            approval_service_pb2.WatchApprovalsResponse(
                resolved=approval_service_pb2.Resolved(execution_id=execution_id, state=state)
            )
        )


class Screen(io.StringIO):
    """The console's output, which a test can wait on."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = anyio.Event()

    def write(self, text: str) -> int:
        written = super().write(text)
        self._changed.set()
        self._changed = anyio.Event()
        return written

    async def shows(self, text: str, count: int = 1) -> None:
        """Waits until `text` has been written `count` times in all."""
        while self.getvalue().count(text) < count:
            await self._changed.wait()


@pytest.fixture
def service() -> ScriptedApprovalService:
    return ScriptedApprovalService()


@pytest.fixture
async def approver(service: ScriptedApprovalService) -> AsyncIterator[CallgateClient]:
    server = grpc.aio.server()
    approval_service_pb2_grpc.add_ApprovalServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with CallgateClient(f"127.0.0.1:{port}", token="approver", max_attempts=1) as client:
            yield client
    finally:
        await server.stop(None)


class Keyboard:
    """Lines typed into the console."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[str](100)

    async def type(self, line: str) -> None:
        await self.send.send(line)


async def _run(
    console: ApproverConsole, keyboard: Keyboard, results: list[int], *, task_status: Any
) -> None:
    task_status.started()
    results.append(await console.run(keyboard.receive))


@pytest.mark.anyio
async def test_watch_yields_pending_items_and_decide_sends_the_digest(
    approver: CallgateClient, service: ScriptedApprovalService
) -> None:
    """watch() turns stream items into models; decide() sends id, digest, kind and note."""
    with anyio.fail_after(5):
        await service.pending("ex-1")
        await service.resolved("ex-0", tool_call_pb2.STATE_CANCELLED)
        items = []
        async for item in approver.approvals.watch():
            items.append(item)
            if len(items) == 2:
                break
        first = items[0]
        assert isinstance(first, PendingApproval)
        assert first.call.digest == DIGEST
        assert first.unmet[0].match == "/ws/a.txt"
        assert items[1] == Resolved(execution_id="ex-0", state=State.CANCELLED)
        call = await approver.approvals.decide("ex-1", DIGEST, DecisionKind.DENY, note="not today")
        assert call.state is State.DENIED
        assert service.decided[0] == approval_service_pb2.DecideRequest(
            execution_id="ex-1",
            digest=DIGEST,
            kind=approval_service_pb2.DECISION_KIND_DENY,
            note="not today",
        )


@pytest.mark.anyio
async def test_rule_methods_round_trip_and_a_config_rule_is_read_only(
    approver: CallgateClient, service: ScriptedApprovalService
) -> None:
    """create/list return Rule models; RULE_READ_ONLY raises RuleReadOnlyError."""
    with anyio.fail_after(5):
        rule = await approver.approvals.create_rule(
            RuleEffect.ALLOW, "command.execute", "Bash(git log:*)", "workspace:/ws"
        )
        assert (rule.rule_id, rule.effect, rule.create_time) == ("r-1", RuleEffect.ALLOW, TIME)
        assert [r.match for r in await approver.approvals.list_rules()] == ["Bash(git log:*)"]
        service.refuse["DeleteRule"] = rich_status(Code.FAILED_PRECONDITION, "RULE_READ_ONLY")
        with pytest.raises(RuleReadOnlyError) as raised:
            await approver.approvals.delete_rule("config-1")
        assert raised.value.reason == "RULE_READ_ONLY"
        with pytest.raises(ValueError, match="allow or deny"):
            await approver.approvals.create_rule(RuleEffect.UNSPECIFIED, "k", "m", "s")


@pytest.mark.anyio
async def test_console_approves_once_with_the_digest_it_showed(
    approver: CallgateClient, service: ScriptedApprovalService
) -> None:
    """`o` sends APPROVE_ONCE with the displayed digest; with once=True the console ends."""
    screen, keyboard, results = Screen(), Keyboard(), list[int]()
    console = ApproverConsole(approver.approvals, screen, once=True)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            await tasks.start(_run, console, keyboard, results)
            await service.pending("ex-1")
            await screen.shows("[o]nce")
            assert DIGEST in screen.getvalue()
            await keyboard.type("o")
    assert results == [0]
    assert [(d.execution_id, d.digest, d.kind) for d in service.decided] == [
        ("ex-1", DIGEST, approval_service_pb2.DECISION_KIND_APPROVE_ONCE)
    ]


@pytest.mark.anyio
async def test_console_denies_with_a_note_and_shows_the_next_item(
    approver: CallgateClient, service: ScriptedApprovalService
) -> None:
    """`d` asks for a note and sends DENY with it; an item that arrived meanwhile follows."""
    screen, keyboard, results = Screen(), Keyboard(), list[int]()
    console = ApproverConsole(approver.approvals, screen)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            await tasks.start(_run, console, keyboard, results)
            await service.pending("ex-1")
            await screen.shows("[o]nce")
            await service.pending("ex-2", tool="Bash")
            await screen.shows("(new: call to Bash from agent; 1 waiting)")
            await keyboard.type("d")
            await screen.shows("note for the agent")
            await keyboard.type("use the staging copy")
            await screen.shows("ex-2")
            await screen.shows("[o]nce", count=3)
            keyboard.send.close()
    assert results == [0]
    assert [(d.execution_id, d.kind, d.note) for d in service.decided] == [
        ("ex-1", approval_service_pb2.DECISION_KIND_DENY, "use the staging copy")
    ]


@pytest.mark.anyio
async def test_console_withdraws_an_item_resolved_elsewhere_and_answers_questions(
    approver: CallgateClient, service: ScriptedApprovalService
) -> None:
    """A call decided by another approver is withdrawn; a choice number answers a question."""
    screen, keyboard, results = Screen(), Keyboard(), list[int]()
    console = ApproverConsole(approver.approvals, screen)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            await tasks.start(_run, console, keyboard, results)
            await service.pending("ex-1")
            await service.question("ex-q", "main", "dev")
            await screen.shows("(new: question from agent; 1 waiting)")
            await service.resolved("ex-1", tool_call_pb2.STATE_APPROVED)
            await screen.shows("resolved elsewhere: ex-1 is now approved")
            await screen.shows("    2. dev")
            await keyboard.type("2")
            await screen.shows("answered ex-q: dev")
            keyboard.send.close()
    assert results == [0]
    assert service.decided == []
    assert [(a.execution_id, a.answer) for a in service.answered] == [("ex-q", "dev")]


@pytest.mark.anyio
async def test_console_reports_a_refused_decision_and_moves_on(
    approver: CallgateClient, service: ScriptedApprovalService
) -> None:
    """A call already decided elsewhere (CALL_STATE_INVALID) is reported and dropped."""
    screen, keyboard, results = Screen(), Keyboard(), list[int]()
    console = ApproverConsole(approver.approvals, screen)
    service.refuse["Decide"] = rich_status(Code.FAILED_PRECONDITION, "CALL_STATE_INVALID")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            await tasks.start(_run, console, keyboard, results)
            await service.pending("ex-1")
            await screen.shows("[o]nce")
            await keyboard.type("a")
            await screen.shows("could not send it: CALL_STATE_INVALID")
            await screen.shows("no pending calls")
            keyboard.send.close()
    assert results == [0]


@pytest.mark.anyio
async def test_console_offers_only_once_or_deny_for_a_human_only_call(
    approver: CallgateClient, service: ScriptedApprovalService
) -> None:
    """A human-only call is shown as such; `a` and `s` are refused on the spot (nothing is
    sent) and `o` approves it once."""
    screen, keyboard, results = Screen(), Keyboard(), list[int]()
    console = ApproverConsole(approver.approvals, screen, once=True)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            await tasks.start(_run, console, keyboard, results)
            await service.pending("ex-1", human_only=True)
            await screen.shows(ONCE_ONLY_PROMPT)
            assert "ONLY A HUMAN" in screen.getvalue()
            for word in ("a", "session"):
                await keyboard.type(word)
            await screen.shows(ONCE_ONLY_PROMPT, count=3)
            assert service.decided == []
            await keyboard.type("o")
    assert results == [0]
    assert [d.kind for d in service.decided] == [approval_service_pb2.DECISION_KIND_APPROVE_ONCE]


@pytest.mark.anyio
async def test_an_approve_once_only_refusal_keeps_the_call_on_screen(
    approver: CallgateClient, service: ScriptedApprovalService
) -> None:
    """APPROVE_ONCE_ONLY raises ApproveOnceOnlyError; the console asks again instead of
    dropping the call."""
    with anyio.fail_after(5):
        service.refuse["Decide"] = rich_status(Code.FAILED_PRECONDITION, "APPROVE_ONCE_ONLY")
        with pytest.raises(ApproveOnceOnlyError):
            await approver.approvals.decide("ex-1", DIGEST, DecisionKind.APPROVE_ALWAYS)
    screen, keyboard, results = Screen(), Keyboard(), list[int]()
    console = ApproverConsole(approver.approvals, screen, once=True)
    service.refuse["Decide"] = rich_status(Code.FAILED_PRECONDITION, "APPROVE_ONCE_ONLY")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            await tasks.start(_run, console, keyboard, results)
            await service.pending("ex-1")  # a server that marks nothing still refuses
            await screen.shows("[o]nce")
            await keyboard.type("a")
            await screen.shows("could not send it: APPROVE_ONCE_ONLY")
            await screen.shows("[o]nce", count=2)
            await keyboard.type("o")
    assert results == [0]
    assert [d.kind for d in service.decided] == [approval_service_pb2.DECISION_KIND_APPROVE_ONCE]


@pytest.mark.anyio
async def test_console_exits_with_2_when_the_token_lacks_the_approver_role(
    approver: CallgateClient, service: ScriptedApprovalService
) -> None:
    """A stream refused with ROLE_REQUIRED ends the console with exit code 2 and the reason."""
    screen, keyboard = Screen(), Keyboard()
    service.refuse["WatchApprovals"] = rich_status(Code.PERMISSION_DENIED, "ROLE_REQUIRED")
    with anyio.fail_after(5):
        code = await ApproverConsole(approver.approvals, screen).run(keyboard.receive)
    assert code == 2
    assert "ROLE_REQUIRED" in screen.getvalue()
    service.refuse["Answer"] = rich_status(Code.PERMISSION_DENIED, "ROLE_REQUIRED")
    with pytest.raises(PermissionDeniedError):
        await approver.approvals.answer("ex-q", "yes")
