"""A line-oriented terminal approver: shows each pending call or question in full and sends
the human's decision or answer (what `callgate approvals` runs).

Two tasks feed one event stream: one reads WatchApprovals, one reads input lines. The loop
takes events one at a time, so new items keep arriving (and are announced) while the human
thinks, and an item resolved elsewhere is withdrawn even while it is being shown.
"""

from __future__ import annotations

import math
import os
import stat
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal, TextIO

import anyio
import anyio.to_thread
from anyio.abc import ObjectSendStream

from callgate.client.approvals import Approvals
from callgate.client.conversion import ApprovalItem
from callgate.client.errors import CallgateClientError, CallStateError, NotFoundError
from callgate.client.models import DecisionKind, PendingApproval, PendingQuestion, Resolved

from .display import (
    approve_once_only,
    decision_prompt,
    render_approval,
    render_change_set,
    render_question,
    render_resolved,
    visible,
)

__all__ = ["ApproverConsole", "read_lines"]

_CHOICES: Final = {
    "o": DecisionKind.APPROVE_ONCE,
    "once": DecisionKind.APPROVE_ONCE,
    "s": DecisionKind.APPROVE_FOR_SESSION,
    "session": DecisionKind.APPROVE_FOR_SESSION,
    "a": DecisionKind.APPROVE_ALWAYS,
    "always": DecisionKind.APPROVE_ALWAYS,
}
_DENY: Final = frozenset({"d", "deny"})
_DRY_RUN: Final = frozenset({"r", "dry", "dry run"})
_APPLY: Final = frozenset({"x", "apply"})
_SKIP: Final = frozenset({"k", "skip"})
_NOTE_PROMPT: Final = "note for the agent (why it is denied) ? "


@dataclass(frozen=True)
class _EndOfInput:
    pass


@dataclass(frozen=True)
class _StreamLost:
    error: CallgateClientError | None  # None: the server ended the stream


_Event = ApprovalItem | str | _EndOfInput | _StreamLost
_Pending = PendingApproval | PendingQuestion


def _item_id(item: _Pending) -> str:
    return item.execution_id


def wants_colour(out: TextIO) -> bool:
    """True when `out` is a terminal and the NO_COLOR convention does not forbid colour."""
    if os.environ.get("NO_COLOR"):
        return False
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


async def read_lines(fd: int = 0) -> AsyncGenerator[str, None]:
    """Lines from a file descriptor (stdin by default) without blocking the event loop: a
    terminal, pipe or socket is waited on until readable; a regular file never blocks, so it is
    read directly; anything else (a device such as /dev/null, which no event loop can poll) is
    read in a worker thread."""
    mode = os.fstat(fd).st_mode
    pollable = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)
    buffer = b""
    while True:
        if pollable:
            await anyio.wait_readable(fd)
            chunk = os.read(fd, 65536)
        elif stat.S_ISREG(mode):
            chunk = os.read(fd, 65536)
        else:
            chunk = await anyio.to_thread.run_sync(os.read, fd, 65536, abandon_on_cancel=True)
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode("utf-8", errors="replace")
    if buffer:
        yield buffer.decode("utf-8", errors="replace")


class ApproverConsole:
    """Shows pending items one at a time on `out` and acts on the lines typed in answer.

    For a call: `o` approves once, `s` for the session, `a` always, `d` asks for a note and
    denies, `k` skips (the call stays pending for other approvers); a call with a human-only
    requirement takes only `o`, `d` or `k`. For a question: a choice
    number or text answers it, an empty line skips it. The digest sent with a decision is
    the one shown. With `once`, the console returns after its first decision or answer.
    """

    def __init__(
        self,
        approvals: Approvals,
        out: TextIO,
        *,
        once: bool = False,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        colour: bool | None = None,
    ) -> None:
        self._approvals = approvals
        self._out = out
        self._once = once
        # None: colour a diff when `out` is a terminal and NO_COLOR is not set (no-color.org).
        self._colour = wants_colour(out) if colour is None else colour
        self._clock = clock
        self._queue: deque[_Pending] = deque()
        self._seen: set[str] = set()
        self._ours: set[str] = set()
        self._skipped: set[str] = set()
        self._current: _Pending | None = None
        self._stage: Literal["choose", "note", "answer"] = "choose"

    async def run(self, lines: AsyncIterator[str]) -> int:
        """Runs until the input ends (0), `once` is done (0), or the stream is lost (2)."""
        send, receive = anyio.create_memory_object_stream[_Event](math.inf)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._pump_items, send.clone())
            tasks.start_soon(self._pump_lines, lines, send.clone())
            send.close()
            self._write("waiting for pending calls and questions (Ctrl-D or Ctrl-C quits)\n")
            try:
                async with receive:
                    code = await self._loop(receive)
            finally:
                tasks.cancel_scope.cancel()
        return code

    async def _pump_items(self, send: ObjectSendStream[_Event]) -> None:
        async with send:
            try:
                async with aclosing(self._approvals.watch()) as items:
                    async for item in items:
                        await send.send(item)
            except CallgateClientError as error:
                await send.send(_StreamLost(error))
            else:
                await send.send(_StreamLost(None))

    async def _pump_lines(self, lines: AsyncIterator[str], send: ObjectSendStream[_Event]) -> None:
        async with send:
            async for line in lines:
                await send.send(line)
            await send.send(_EndOfInput())

    async def _loop(self, events: AsyncIterator[_Event]) -> int:
        async for event in events:
            match event:
                case _EndOfInput():
                    self._write("\n")
                    return 0
                case _StreamLost(error=error):
                    why = "the server ended it" if error is None else _describe(error)
                    self._write(f"\ncallgate: lost the approvals stream: {why}\n")
                    return 2
                case str():
                    if await self._on_line(event.rstrip("\r")) and self._once:
                        return 0
                case Resolved():
                    self._on_resolved(event)
                case PendingApproval() | PendingQuestion():
                    self._on_pending(event)
        return 0

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()

    def _prompt(self) -> None:
        match self._current, self._stage:
            case None, _:
                return
            case PendingQuestion(choices=choices), _:
                numbers = f"1-{len(choices)}, " if choices else ""
                self._write(f"answer ({numbers}text; empty line skips) ? ")
            case _, "note":
                self._write(_NOTE_PROMPT)
            case PendingApproval() as item, _:
                self._write(decision_prompt(item))

    def _show_next(self) -> None:
        self._current = self._queue.popleft() if self._queue else None
        if self._current is None:
            skipped = f" ({len(self._skipped)} skipped still pending)" if self._skipped else ""
            self._write(f"no pending calls or questions; waiting{skipped}\n")
            return
        now = self._clock()
        if isinstance(self._current, PendingApproval):
            self._stage = "choose"
            self._write(render_approval(self._current, now=now, colour=self._colour) + "\n")
        else:
            self._stage = "answer"
            self._write(render_question(self._current, now=now) + "\n")
        if self._queue:
            self._write(f"({len(self._queue)} more waiting)\n")
        self._prompt()

    def _on_pending(self, item: _Pending) -> None:
        if _item_id(item) in self._seen:
            self._on_update(item)
            return
        self._seen.add(_item_id(item))
        self._queue.append(item)
        if self._current is None:
            self._show_next()
            return
        what = (
            f"call to {visible(item.call.tool_name)}"
            if isinstance(item, PendingApproval)
            else "question"
        )
        self._write(
            f"\n(new: {what} from {visible(item.requested_by) or '?'}; "
            f"{len(self._queue)} waiting)\n"
        )
        self._prompt()

    def _on_update(self, item: _Pending) -> None:
        """An approval sent again with a dry run's change set (asked for by someone else, or
        made by the server): the queued or shown item is replaced, and shown again."""
        if not isinstance(item, PendingApproval) or item.change_set is None:
            return
        if self._current is not None and _item_id(self._current) == _item_id(item):
            if isinstance(self._current, PendingApproval) and self._current.change_set != (
                item.change_set
            ):
                self._current = item
                self._write("\n" + render_change_set(item.change_set, colour=self._colour) + "\n")
                self._prompt()
            return
        for index, queued in enumerate(self._queue):
            if _item_id(queued) == _item_id(item):
                self._queue[index] = item

    def _on_resolved(self, resolved: Resolved) -> None:
        execution_id = resolved.execution_id
        self._skipped.discard(execution_id)
        if execution_id in self._ours:
            return  # Our own decision coming back.
        if self._current is not None and _item_id(self._current) == execution_id:
            self._write("\n" + render_resolved(execution_id, resolved.state) + "\n")
            self._show_next()
            return
        for item in self._queue:
            if _item_id(item) == execution_id:
                self._queue.remove(item)
                self._write("\n" + render_resolved(execution_id, resolved.state) + "\n")
                self._prompt()
                return

    async def _on_line(self, line: str) -> bool:
        """Acts on one typed line; True when a decision or answer was sent."""
        current = self._current
        if current is None:
            if line.strip():
                self._write("nothing is pending; waiting\n")
            return False
        if isinstance(current, PendingQuestion):
            return await self._on_answer(current, line.strip())
        if self._stage == "note":
            return await self._decide(current, DecisionKind.DENY, line.strip())
        word = line.strip().lower()
        once_only = approve_once_only(current)
        if once_only and _CHOICES.get(word, DecisionKind.APPROVE_ONCE) is not (
            DecisionKind.APPROVE_ONCE
        ):
            self._write(
                "this call writes a file that makes programs run code: only a human can "
                "approve it, once; type o, d or k, then Enter\n"
            )
            self._prompt()
            return False
        if word in _DRY_RUN and not current.dry_run_refusal:
            return await self._dry_run(current)
        if word in _APPLY and current.change_set is not None and current.change_set.applicable:
            return await self._decide(current, DecisionKind.APPLY_CHANGES)
        if word in _CHOICES:
            return await self._decide(current, _CHOICES[word])
        if word in _DENY:
            self._stage = "note"
        elif word in _SKIP:
            self._skipped.add(current.execution_id)
            self._write(f"skipped {visible(current.execution_id)} (it stays pending)\n")
            self._show_next()
            return False
        else:
            self._write(
                "type o, d or k, then Enter\n"
                if once_only
                else "type o, s, a, d or k, then Enter\n"
            )
        self._prompt()
        return False

    async def _on_answer(self, question: PendingQuestion, text: str) -> bool:
        if not text:
            self._skipped.add(question.execution_id)
            self._write(f"skipped {visible(question.execution_id)} (it stays pending)\n")
            self._show_next()
            return False
        answer = text
        if text.isdecimal() and question.choices:
            number = int(text)
            if not 1 <= number <= len(question.choices):
                self._write(f"choose 1-{len(question.choices)}, or type your answer\n")
                self._prompt()
                return False
            answer = question.choices[number - 1]
        self._ours.add(question.execution_id)
        try:
            await self._approvals.answer(question.execution_id, answer)
        except CallgateClientError as error:
            self._ours.discard(question.execution_id)
            return self._failed(error)
        self._write(f"answered {visible(question.execution_id)}: {visible(answer)}\n")
        self._show_next()
        return True

    async def _dry_run(self, item: PendingApproval) -> bool:
        """Asks for a dry run of the shown call and shows its change set; the call stays."""
        self._write(f"dry run of {visible(item.execution_id)}: running it in the overlay...\n")
        try:
            change_set = await self._approvals.dry_run(item.execution_id, item.call.digest)
        except CallgateClientError as error:
            return self._failed(error)
        if self._current is not None and _item_id(self._current) == item.execution_id:
            self._current = item.model_copy(update={"change_set": change_set})
        self._write(render_change_set(change_set, colour=self._colour) + "\n")
        self._prompt()
        return False

    async def _decide(self, item: PendingApproval, kind: DecisionKind, note: str = "") -> bool:
        call = item.call
        self._ours.add(call.execution_id)
        try:
            if kind is DecisionKind.APPLY_CHANGES:
                assert item.change_set is not None
                decided = await self._approvals.apply_changes(
                    call.execution_id, call.digest, item.change_set.effect_digest, note
                )
            else:
                decided = await self._approvals.decide(call.execution_id, call.digest, kind, note)
        except CallgateClientError as error:
            self._ours.discard(call.execution_id)
            return self._failed(error)
        self._write(
            f"{kind.value.replace('_', ' ')}: {visible(call.execution_id)} "
            f"is now {decided.state.value}\n"
        )
        self._show_next()
        return True

    def _failed(self, error: CallgateClientError) -> bool:
        """Reports a refused decision or answer: an item that is gone or no longer pending is
        dropped; anything else (say, the server is briefly unreachable) is asked again."""
        self._write(f"callgate: could not send it: {_describe(error)}\n")
        if isinstance(error, CallStateError | NotFoundError):
            self._show_next()
        else:
            if self._current is not None and isinstance(self._current, PendingApproval):
                self._stage = "choose"
            self._prompt()
        return False


def _describe(error: CallgateClientError) -> str:
    label = error.reason or (error.code.name if error.code is not None else "error")
    return f"{visible(label)}: {visible(error.message)}"
