"""The approval board: what approvers watch (design section 4.3 step 5, AskUser in section 5).

It holds every pending approval and AskUser question in arrival order and fans each change
out to its subscribers (WatchApprovals streams). Every subscriber has a bounded queue, so a
slow watcher never blocks a decider or an agent: when its queue is full it is dropped and its
stream ends with RESOURCE_EXHAUSTED / WATCH_QUEUE_FULL (the approver reconnects and gets the
current pending items again). Everything runs on the event loop; no method awaits except
`Subscription.next`.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import anyio

from .calls import CallSnapshot
from .effects import ChangeSet
from .errors import CallgateError, ResourceExhausted, Unavailable
from .models import Requirement, RuleCandidate, State

DEFAULT_QUEUE_LIMIT = 1024


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A call AWAITING_APPROVAL with everything an approver needs to decide it."""

    call: CallSnapshot
    # Only the candidates that cover an unmet requirement (what a "session"/"always"
    # decision would save).
    candidates: tuple[RuleCandidate, ...]
    unmet: tuple[Requirement, ...]
    command: str
    working_directory: str
    requested_by: str
    workspace: str
    deadline: datetime
    # Why the call has no dry run ("" when an approver may ask for one: core/dry_runs.py),
    # and the last dry run's change set, once there is one.
    dry_run_refusal: str = "not offered"
    change_set: ChangeSet | None = None

    @property
    def execution_id(self) -> str:
        return self.call.execution_id


class BoardHooks(Protocol):
    """What the dry runs add to the board: whether each new approval can have one
    (`annotate`), and the dry run the server makes itself in "gated" mode (`published`)."""

    def annotate(self, item: PendingApproval) -> PendingApproval: ...

    def published(self, item: PendingApproval) -> None: ...


@dataclass(frozen=True, slots=True)
class PendingQuestion:
    """An AskUser question waiting for an answer."""

    execution_id: str
    session_id: str
    question: str
    choices: tuple[str, ...]
    requested_by: str
    deadline: datetime


@dataclass(frozen=True, slots=True)
class Resolved:
    """An approval or question that is no longer pending, the call's state now, who decided
    (empty when nobody did) and how it ended, in one line."""

    execution_id: str
    state: State
    decided_by: str = ""
    reason: str = ""


BoardItem = PendingApproval | PendingQuestion | Resolved


@dataclass(eq=False, slots=True)
class Question:
    """The asking side of a pending question: `answered` is set once `answer` holds the text."""

    item: PendingQuestion
    answered: anyio.Event = field(default_factory=anyio.Event)
    answer: str | None = None


class Subscription:
    """One watcher's queue: the items pending when it subscribed, then every change."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._items: deque[BoardItem] = deque()
        self._ready = anyio.Event()
        self._error: CallgateError | None = None

    def _push(self, item: BoardItem) -> bool:
        if len(self._items) >= self._limit:
            return False
        self._items.append(item)
        self._ready.set()
        return True

    def _end(self, error: CallgateError) -> None:
        self._error = error
        self._ready.set()

    async def next(self) -> BoardItem:
        """The next item; raises the error that ended the subscription (overflow, shutdown)."""
        while True:
            if self._error is not None:
                raise self._error
            if self._items:
                return self._items.popleft()
            self._ready = anyio.Event()
            await self._ready.wait()


class ApprovalBoard:
    """Pending approvals and questions, and the watchers that see them."""

    def __init__(self, queue_limit: int = DEFAULT_QUEUE_LIMIT) -> None:
        self._queue_limit = queue_limit
        # Insertion order is arrival order: a new subscriber gets the oldest first.
        self._pending: dict[str, PendingApproval | PendingQuestion] = {}
        self._questions: dict[str, Question] = {}
        self._subscribers: set[Subscription] = set()
        self._closed = False
        self.hooks: BoardHooks | None = None

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def pending_approval(self, execution_id: str) -> PendingApproval | None:
        item = self._pending.get(execution_id)
        return item if isinstance(item, PendingApproval) else None

    def pending_approvals(self) -> list[PendingApproval]:
        return [i for i in self._pending.values() if isinstance(i, PendingApproval)]

    def question(self, execution_id: str) -> Question | None:
        return self._questions.get(execution_id)

    @contextmanager
    def subscribe(self) -> Iterator[Subscription]:
        """Watch the board: the current pending items first, then each change."""
        subscription = Subscription(self._queue_limit)
        if self._closed:
            subscription._end(_shutting_down())
        else:
            # The snapshot of what is pending is not bounded by the queue limit.
            subscription._items.extend(self._pending.values())
            subscription._ready.set()
            self._subscribers.add(subscription)
        try:
            yield subscription
        finally:
            self._subscribers.discard(subscription)

    def publish(self, item: PendingApproval) -> None:
        """A call started waiting for a human decision."""
        if self.hooks is not None:
            item = self.hooks.annotate(item)
        self._pending[item.execution_id] = item
        self._broadcast(item)
        if self.hooks is not None:
            self.hooks.published(item)

    def attach(self, execution_id: str, change_set: ChangeSet) -> None:
        """A dry run of a pending call ended: approvers get the approval again, with its
        change set (no-op when the call is no longer pending)."""
        item = self._pending.get(execution_id)
        if not isinstance(item, PendingApproval):
            return
        item = dataclasses.replace(item, change_set=change_set)
        self._pending[execution_id] = item
        self._broadcast(item)

    def resolve(
        self, execution_id: str, state: State, decided_by: str = "", reason: str = ""
    ) -> None:
        """An approval or question stopped being pending (no-op when it was not pending)."""
        if self._pending.pop(execution_id, None) is None:
            return
        self._questions.pop(execution_id, None)
        self._broadcast(Resolved(execution_id, state, decided_by, reason))

    def ask(self, item: PendingQuestion) -> Question:
        """Publish an AskUser question; the asker waits on the returned `Question.answered`
        and calls `resolve` when it stops waiting."""
        question = Question(item)
        self._questions[item.execution_id] = question
        self._pending[item.execution_id] = item
        self._broadcast(item)
        return question

    def close(self) -> None:
        """Server shutdown: end every watch with UNAVAILABLE / SHUTTING_DOWN."""
        self._closed = True
        for subscription in self._subscribers:
            subscription._end(_shutting_down())
        self._subscribers.clear()

    def _broadcast(self, item: BoardItem) -> None:
        for subscription in list(self._subscribers):
            if not subscription._push(item):
                self._subscribers.discard(subscription)
                subscription._end(
                    ResourceExhausted(
                        "WATCH_QUEUE_FULL",
                        "This watcher fell too far behind and was dropped; watch again to get "
                        "the pending items.",
                        metadata={"queue_limit": str(self._queue_limit)},
                    )
                )


def _shutting_down() -> Unavailable:
    return Unavailable("SHUTTING_DOWN", "The server is shutting down; watch another instance.")
