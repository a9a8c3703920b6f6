"""One loop's task graph (design section 5, TaskCreate/TaskUpdate/TaskGet/TaskList).

Every change is applied to a copy, the whole copy is validated, and only a valid copy
replaces the graph, so a refused change leaves the graph exactly as it was. The graph holds
these invariants after every change:

- at most `MAX_TASKS` tasks, each with at most `MAX_DEPENDENCIES` blockers;
- every blocker names a task in the graph, never the task itself;
- the blocked-by relation has no cycle;
- an `in_progress` task has only `completed` blockers.

Changes never await, so on one event loop each change is atomic. Refusals raise
`TaskGraphError` with a stable `code` (`unknown_task`, `self_dependency`, `cycle`,
`blocked`, `limit`, `task_budget`) that the tools return as an error result. The text a graph
stores (subjects, descriptions, active forms, metadata, plus a fixed cost per task) is counted
by its ledger, which may refuse a change that would hold more than the session's share.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

MAX_TASKS = 256
MAX_DEPENDENCIES = 128
SUBJECT_MAX_BYTES = 512
ACTIVE_FORM_MAX_BYTES = 512
DESCRIPTION_MAX_BYTES = 16 << 10
METADATA_MAX_BYTES = 16 << 10
# What a task costs its ledger beyond its text: its ID, status and edges.
TASK_OVERHEAD_BYTES = 256
# Task IDs are minted `t1`, `t2`, ... per loop and never reused after a delete.
TASK_ID_PATTERN = r"^t[1-9][0-9]{0,8}$"

T = TypeVar("T")


class TaskStatus(enum.StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


class TaskGraphError(Exception):
    """A change the graph refuses; `code` is stable, the message is one sentence."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Task:
    """One task. `metadata_json` is the canonical JSON text of a JSON object."""

    id: str
    subject: str
    description: str = ""
    active_form: str = ""
    status: TaskStatus = TaskStatus.PENDING
    blocked_by: tuple[str, ...] = ()
    metadata_json: str = "{}"


@dataclass(frozen=True, slots=True)
class TaskDraft:
    """What TaskCreate supplies; the graph mints the ID and starts the task `pending`."""

    subject: str
    description: str = ""
    active_form: str = ""
    blocked_by: tuple[str, ...] = ()
    metadata_json: str = "{}"


@dataclass(frozen=True, slots=True)
class TaskPatch:
    """What TaskUpdate changes; None leaves a field as it is. `blocked_by` replaces the whole
    list; `add_blocked_by` / `remove_blocked_by` edit it (adding an existing edge or removing
    an absent one changes nothing)."""

    subject: str | None = None
    description: str | None = None
    active_form: str | None = None
    status: TaskStatus | None = None
    blocked_by: tuple[str, ...] | None = None
    add_blocked_by: tuple[str, ...] = ()
    remove_blocked_by: tuple[str, ...] = ()
    metadata_json: str | None = None


@dataclass(frozen=True, slots=True)
class Deletion:
    """A delete's outcome: the task removed and the tasks whose `blocked_by` lost it."""

    task_id: str
    unblocked: tuple[str, ...]


class TextLedger(Protocol):
    """Counts the bytes graphs store: `reserve` a growth (raising TaskGraphError
    `task_budget` when it does not fit), `release` a shrink."""

    def reserve(self, size: int) -> None: ...
    def release(self, size: int) -> None: ...


def task_bytes(task: Task) -> int:
    """What a task costs: the UTF-8 bytes of its text, and its overhead."""
    text = (task.subject, task.description, task.active_form, task.metadata_json)
    return TASK_OVERHEAD_BYTES + sum(len(part.encode()) for part in text) + 8 * len(task.blocked_by)


class TaskGraph:
    """The tasks of one loop, in creation order."""

    def __init__(self, ledger: TextLedger | None = None) -> None:
        self._tasks: dict[str, Task] = {}
        self._next_number = 1
        self._ledger = ledger
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._tasks)

    def get(self, task_id: str) -> Task:
        task = self._tasks.get(task_id)
        if task is None:
            raise _unknown(task_id)
        return task

    def tasks(self, status: TaskStatus | None = None) -> list[Task]:
        """The tasks in creation order, optionally only those with `status`."""
        return [t for t in self._tasks.values() if status is None or t.status is status]

    def blocks(self, task_id: str) -> tuple[str, ...]:
        """The tasks `task_id` blocks (derived from every task's `blocked_by`)."""
        return tuple(t.id for t in self._tasks.values() if task_id in t.blocked_by)

    def snapshot(self) -> tuple[tuple[Task, ...], int]:
        """Everything the graph holds, comparable with `==` (for tests and audits)."""
        return tuple(self._tasks.values()), self._next_number

    def create(self, draft: TaskDraft) -> Task:
        if len(self._tasks) >= MAX_TASKS:
            raise TaskGraphError(
                "limit", f"The loop already has {MAX_TASKS} tasks; delete finished ones first."
            )
        task = Task(
            id=f"t{self._next_number}",
            subject=draft.subject,
            description=draft.description,
            active_form=draft.active_form,
            blocked_by=_distinct(draft.blocked_by),
            metadata_json=draft.metadata_json,
        )
        candidate = dict(self._tasks)
        candidate[task.id] = task
        self._commit(candidate, changed=(task.id,))
        self._next_number += 1
        return task

    def update(self, task_id: str, patch: TaskPatch) -> Task:
        current = self.get(task_id)
        blocked_by = current.blocked_by if patch.blocked_by is None else patch.blocked_by
        blocked_by = _distinct(
            [*blocked_by, *patch.add_blocked_by], without=set(patch.remove_blocked_by)
        )
        task = replace(
            current,
            subject=_or(patch.subject, current.subject),
            description=_or(patch.description, current.description),
            active_form=_or(patch.active_form, current.active_form),
            status=_or(patch.status, current.status),
            blocked_by=blocked_by,
            metadata_json=_or(patch.metadata_json, current.metadata_json),
        )
        candidate = dict(self._tasks)
        candidate[task_id] = task
        self._commit(candidate, changed=(task_id,))
        return task

    def delete(self, task_id: str) -> Deletion:
        """Remove a task; tasks it blocked drop it from their `blocked_by` (the edge goes,
        the dependent stays)."""
        self.get(task_id)
        candidate = dict(self._tasks)
        del candidate[task_id]
        unblocked: list[str] = []
        for other in list(candidate.values()):
            if task_id in other.blocked_by:
                edges = tuple(d for d in other.blocked_by if d != task_id)
                candidate[other.id] = replace(other, blocked_by=edges)
                unblocked.append(other.id)
        self._commit(candidate, changed=())
        return Deletion(task_id, tuple(unblocked))

    def _commit(self, candidate: dict[str, Task], changed: Iterable[str]) -> None:
        validate(candidate, first=changed)
        size = sum(task_bytes(task) for task in candidate.values())
        if self._ledger is not None:
            if size > self._bytes:
                self._ledger.reserve(size - self._bytes)
            elif size < self._bytes:
                self._ledger.release(self._bytes - size)
        self._bytes = size
        self._tasks = candidate

    @property
    def stored_bytes(self) -> int:
        """What the graph's tasks cost its ledger now."""
        return self._bytes


def validate(tasks: Mapping[str, Task], first: Iterable[str] = ()) -> None:
    """Raise TaskGraphError unless `tasks` holds every invariant. Tasks named in `first` are
    checked before the rest, so the error names the task a change touched."""
    if len(tasks) > MAX_TASKS:
        raise TaskGraphError("limit", f"A loop may hold at most {MAX_TASKS} tasks.")
    order = [*(t for t in first if t in tasks), *tasks]
    for task_id in order:
        task = tasks[task_id]
        if len(task.blocked_by) > MAX_DEPENDENCIES:
            raise TaskGraphError(
                "limit", f"Task {task_id} would have more than {MAX_DEPENDENCIES} blockers."
            )
        for blocker in task.blocked_by:
            if blocker == task_id:
                raise TaskGraphError("self_dependency", f"Task {task_id} cannot block itself.")
            if blocker not in tasks:
                raise _unknown(blocker)
    for task_id in order:
        task = tasks[task_id]
        if task.status is TaskStatus.IN_PROGRESS:
            for blocker in task.blocked_by:
                if tasks[blocker].status is not TaskStatus.COMPLETED:
                    raise TaskGraphError(
                        "blocked",
                        f"Task {task_id} is in progress but its blocker {blocker} is not "
                        "completed; complete the blocker first or move the task back to pending.",
                    )
    cycle = find_cycle(tasks)
    if cycle:
        raise TaskGraphError(
            "cycle", "The change would create a dependency cycle: " + " -> ".join(cycle) + "."
        )


def find_cycle(tasks: Mapping[str, Task]) -> list[str]:
    """A cycle in the blocked-by relation as a closed path of IDs, or [] when there is none
    (iterative depth-first search; every blocker must name a task in `tasks`)."""
    done: set[str] = set()
    for root in tasks:
        if root in done:
            continue
        path: list[str] = [root]
        on_path = {root}
        stack = [iter(tasks[root].blocked_by)]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
            elif nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(tasks[nxt].blocked_by))
    return []


def _distinct(ids: Iterable[str], without: set[str] | None = None) -> tuple[str, ...]:
    skip = without or set()
    return tuple(dict.fromkeys(i for i in ids if i not in skip))


def _or(value: T | None, default: T) -> T:
    return default if value is None else value


def _unknown(task_id: str) -> TaskGraphError:
    return TaskGraphError(
        "unknown_task", f"The loop has no task {task_id}; TaskList shows the tasks it has."
    )
