"""The task tools: TaskCreate, TaskUpdate, TaskGet and TaskList over the loop's task graph
(design section 5).

They are pure: no requirement, so the policy approves them. Prepare checks the arguments
(types, byte limits, ID syntax) and freezes them; Invoke applies the change to the loop's
graph (`LoopState.tasks`), which validates the whole graph and refuses a change that breaks
it with an error result (`unknown_task`, `self_dependency`, `cycle`, `blocked`, `limit`),
leaving the graph as it was. Results are JSON in `result.json`: `{"task": {...}}`,
`{"tasks": [...]}` or `{"deleted_task_id": ..., "unblocked_task_ids": [...]}`.
"""

from __future__ import annotations

import json
from typing import Annotated, ClassVar, Literal

from pydantic import Field, JsonValue

from callgate.server.core.errors import ResourceExhausted, arguments_invalid
from callgate.server.core.models import ToolResult
from callgate.server.core.resources import ResourceKey
from callgate.server.core.taskgraph import (
    ACTIVE_FORM_MAX_BYTES,
    DESCRIPTION_MAX_BYTES,
    MAX_DEPENDENCIES,
    METADATA_MAX_BYTES,
    SUBJECT_MAX_BYTES,
    TASK_ID_PATTERN,
    Task,
    TaskDraft,
    TaskGraph,
    TaskGraphError,
    TaskPatch,
    TaskStatus,
    task_bytes,
)
from callgate.server.core.tool import Arguments, Artifact, Prepared, Tool, ToolContext

from .common import display

_SUMMARY_CHARS = 60

TaskId = Annotated[str, Field(pattern=TASK_ID_PATTERN, description="A task ID such as t1.")]
TaskIds = Annotated[list[TaskId], Field(max_length=MAX_DEPENDENCIES)]
StatusName = Literal["pending", "in_progress", "completed"]
# One Literal, not a union with StatusName: a union would put its branch into error paths.
UpdateStatusName = Literal["pending", "in_progress", "completed", "deleted"]


def _check_bytes(field: str, text: str, limit: int) -> None:
    if len(text.encode("utf-8")) > limit:
        raise arguments_invalid(field, f"at most {limit} bytes (UTF-8) are allowed")


def _check_subject(subject: str) -> None:
    if not subject.strip():
        raise arguments_invalid("subject", "the subject must not be blank")
    _check_bytes("subject", subject, SUBJECT_MAX_BYTES)


def _check_ids(field: str, ids: list[str]) -> tuple[str, ...]:
    if len(set(ids)) != len(ids):
        raise arguments_invalid(field, "the task IDs must be distinct")
    return tuple(ids)


def _metadata_json(metadata: dict[str, JsonValue]) -> str:
    text = json.dumps(metadata, ensure_ascii=False, separators=(",", ":"))
    _check_bytes("metadata", text, METADATA_MAX_BYTES)
    return text


def _short(text: str) -> str:
    line = display(text.strip().splitlines()[0] if text.strip() else "")
    return line if len(line) <= _SUMMARY_CHARS else line[: _SUMMARY_CHARS - 3] + "..."


def task_json(task: Task, graph: TaskGraph) -> dict[str, object]:
    """A task as the tools return it, with the derived `blocks`."""
    return {
        "id": task.id,
        "subject": task.subject,
        "description": task.description,
        "active_form": task.active_form,
        "status": task.status.value,
        "blocked_by": list(task.blocked_by),
        "blocks": list(graph.blocks(task.id)),
        "metadata": json.loads(task.metadata_json),
    }


def _task_line(task: Task) -> str:
    line = f"{task.id} [{task.status.value}] {_short(task.subject)}"
    if task.blocked_by:
        line += " (blocked by " + ", ".join(task.blocked_by) + ")"
    return line


def _task_result(verb: str, task: Task, graph: TaskGraph) -> ToolResult:
    return ToolResult(
        text=f"{verb} {_task_line(task)}", json=json.dumps({"task": task_json(task, graph)})
    )


def _refused(error: TaskGraphError) -> ToolResult:
    return ToolResult.error(error.code, error.message)


# TaskCreate ----------------------------------------------------------------------------------


class TaskTextBudget:
    """The text all task graphs may store together (`limits.max_task_text_bytes`), and the
    most one session's graphs may (its share), counted in bytes (`taskgraph.task_bytes`)."""

    def __init__(self, total: int, per_session: int) -> None:
        self.total = total
        self.per_session = per_session
        self.used = 0
        self.by_session: dict[str, int] = {}

    def room(self, session_id: str) -> int:
        return max(
            0,
            min(self.total - self.used, self.per_session - self.by_session.get(session_id, 0)),
        )

    def ledger(self, session_id: str) -> SessionTaskText:
        return SessionTaskText(self, session_id)

    def release_session(self, session_id: str) -> None:
        self.used -= self.by_session.pop(session_id, 0)


class SessionTaskText:
    """One session's account with the budget (every loop's graph of the session uses one);
    given back whole when the session closes (it is a session resource)."""

    def __init__(self, budget: TaskTextBudget, session_id: str) -> None:
        self.budget = budget
        self.session_id = session_id

    def reserve(self, size: int) -> None:
        if size > self.budget.room(self.session_id):
            raise TaskGraphError("task_budget", _TASK_BUDGET_MESSAGE)
        self.budget.used += size
        self.budget.by_session[self.session_id] = (
            self.budget.by_session.get(self.session_id, 0) + size
        )

    def release(self, size: int) -> None:
        held = self.budget.by_session.get(self.session_id, 0)
        size = min(size, held)
        self.budget.used -= size
        self.budget.by_session[self.session_id] = held - size

    async def aclose(self) -> None:
        self.budget.release_session(self.session_id)


_TASK_BUDGET_MESSAGE = (
    "The session's task lists hold all the task text it may keep (its share of the server's "
    "task budget); delete finished tasks, or close loops you no longer need."
)
TASK_TEXT: ResourceKey[SessionTaskText] = ResourceKey("task text")


def _check_room(ledger: SessionTaskText | None, size: int) -> None:
    """At Prepare: a change that cannot fit is refused before anything is kept."""
    if ledger is not None and size > ledger.budget.room(ledger.session_id):
        raise ResourceExhausted(
            "TASK_BUDGET", _TASK_BUDGET_MESSAGE, metadata={"limit": str(ledger.budget.per_session)}
        )


class _OverGraph:
    """A task tool works on the one task graph its bundle was built with: one per loop. With
    a ledger, the text the graph stores counts against the session's share."""

    def __init__(self, graph: TaskGraph, ledger: SessionTaskText | None = None) -> None:
        self.graph = graph
        self.ledger = ledger

    def _account(self, ctx: ToolContext) -> None:
        """The session gives its task text back when it closes."""
        if self.ledger is not None:
            ledger = self.ledger
            ctx.resources.get(TASK_TEXT, lambda: ledger)


class TaskCreateArguments(Arguments):
    subject: str = Field(
        min_length=1, description=f"What the task is, briefly (at most {SUBJECT_MAX_BYTES} bytes)."
    )
    description: str = Field(
        default="", description=f"Details (at most {DESCRIPTION_MAX_BYTES} bytes)."
    )
    active_form: str = Field(
        default="",
        description=(
            "The subject in the present continuous, shown while the task is in progress "
            f"(at most {ACTIVE_FORM_MAX_BYTES} bytes)."
        ),
    )
    blocked_by: TaskIds = Field(
        default_factory=list,
        description=f"IDs of tasks that must be completed first (at most {MAX_DEPENDENCIES}).",
    )
    metadata: dict[str, JsonValue] = Field(
        default_factory=dict,
        description=f"A JSON object kept with the task (at most {METADATA_MAX_BYTES} bytes).",
    )


class TaskCreateArtifact(Artifact):
    subject: str
    description: str
    active_form: str
    blocked_by: tuple[str, ...]
    metadata_json: str


class TaskCreate(_OverGraph, Tool[TaskCreateArguments, TaskCreateArtifact]):
    name: ClassVar[str] = "TaskCreate"
    description: ClassVar[str] = (
        "Add a task to this loop's task list. It starts 'pending' and gets an ID (t1, t2, ...). "
        "`blocked_by` names tasks that must be completed before it may be in progress; "
        'dependency cycles are refused. result.json is {"task": {...}}.'
    )
    arguments: ClassVar[type[Arguments]] = TaskCreateArguments
    artifact: ClassVar[type[Artifact]] = TaskCreateArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = ()

    def prepare_args(self, args: TaskCreateArguments, ctx: ToolContext) -> Prepared:
        _check_subject(args.subject)
        _check_bytes("description", args.description, DESCRIPTION_MAX_BYTES)
        _check_bytes("active_form", args.active_form, ACTIVE_FORM_MAX_BYTES)
        metadata_json = _metadata_json(args.metadata)
        _check_room(
            self.ledger,
            task_bytes(
                Task(
                    id="t",
                    subject=args.subject,
                    description=args.description,
                    active_form=args.active_form,
                    metadata_json=metadata_json,
                )
            ),
        )
        return Prepared(
            summary=f'TaskCreate "{_short(args.subject)}"',
            requirements=(),
            artifact=TaskCreateArtifact(
                subject=args.subject,
                description=args.description,
                active_form=args.active_form,
                blocked_by=_check_ids("blocked_by", args.blocked_by),
                metadata_json=metadata_json,
            ),
        )

    async def run(self, artifact: TaskCreateArtifact, ctx: ToolContext) -> ToolResult:
        graph = self.graph
        self._account(ctx)
        try:
            task = graph.create(
                TaskDraft(
                    subject=artifact.subject,
                    description=artifact.description,
                    active_form=artifact.active_form,
                    blocked_by=artifact.blocked_by,
                    metadata_json=artifact.metadata_json,
                )
            )
        except TaskGraphError as error:
            return _refused(error)
        return _task_result("Created", task, graph)


# TaskUpdate ----------------------------------------------------------------------------------


class TaskUpdateArguments(Arguments):
    id: TaskId = Field(description="The task to change.")
    subject: str | None = Field(default=None, description="A new subject.")
    description: str | None = Field(default=None, description="A new description.")
    active_form: str | None = Field(default=None, description="A new active form.")
    status: UpdateStatusName | None = Field(
        default=None,
        description=(
            "pending, in_progress (only when every blocker is completed), completed, or "
            "'deleted' to delete the task (alone; tasks it blocked lose that blocker)."
        ),
    )
    blocked_by: TaskIds | None = Field(
        default=None, description="Replace the whole blocker list (not with add/remove)."
    )
    add_blocked_by: TaskIds = Field(default_factory=list, description="Blockers to add.")
    remove_blocked_by: TaskIds = Field(default_factory=list, description="Blockers to remove.")
    metadata: dict[str, JsonValue] | None = Field(
        default=None, description="Replace the metadata object."
    )


class TaskUpdateArtifact(Artifact):
    id: str
    delete: bool = False
    subject: str | None = None
    description: str | None = None
    active_form: str | None = None
    status: TaskStatus | None = None
    blocked_by: tuple[str, ...] | None = None
    add_blocked_by: tuple[str, ...] = ()
    remove_blocked_by: tuple[str, ...] = ()
    metadata_json: str | None = None


class TaskUpdate(_OverGraph, Tool[TaskUpdateArguments, TaskUpdateArtifact]):
    name: ClassVar[str] = "TaskUpdate"
    description: ClassVar[str] = (
        "Change a task: give its `id` and only the fields to change. `add_blocked_by` / "
        "`remove_blocked_by` edit its blockers; `status: 'deleted'` deletes it. A change that "
        "would leave an unknown blocker, a cycle, or an in-progress task with an unfinished "
        'blocker is refused and changes nothing. result.json is {"task": {...}}, or '
        '{"deleted_task_id": ..., "unblocked_task_ids": [...]} after a delete.'
    )
    arguments: ClassVar[type[Arguments]] = TaskUpdateArguments
    artifact: ClassVar[type[Artifact]] = TaskUpdateArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = ()

    def prepare_args(self, args: TaskUpdateArguments, ctx: ToolContext) -> Prepared:
        changed = sorted(args.model_fields_set - {"id"})
        if not changed:
            raise arguments_invalid("", "name at least one field to change besides id")
        if args.status == "deleted":
            extra = [name for name in changed if name != "status"]
            if extra:
                raise arguments_invalid(extra[0], "a delete takes no other field")
            return Prepared(
                summary=f"TaskUpdate {args.id} (delete)",
                requirements=(),
                artifact=TaskUpdateArtifact(id=args.id, delete=True),
            )
        if args.blocked_by is not None and (args.add_blocked_by or args.remove_blocked_by):
            raise arguments_invalid(
                "blocked_by", "replace the blockers or add/remove some, not both"
            )
        if args.subject is not None:
            _check_subject(args.subject)
        if args.description is not None:
            _check_bytes("description", args.description, DESCRIPTION_MAX_BYTES)
        if args.active_form is not None:
            _check_bytes("active_form", args.active_form, ACTIVE_FORM_MAX_BYTES)
        add = _check_ids("add_blocked_by", args.add_blocked_by)
        remove = _check_ids("remove_blocked_by", args.remove_blocked_by)
        if set(add) & set(remove):
            raise arguments_invalid("remove_blocked_by", "a task ID is both added and removed")
        status = None if args.status is None else TaskStatus(args.status)
        shown = f"status: {status.value}" if status is not None else ", ".join(changed)
        return Prepared(
            summary=f"TaskUpdate {args.id} ({shown})",
            requirements=(),
            artifact=TaskUpdateArtifact(
                id=args.id,
                subject=args.subject,
                description=args.description,
                active_form=args.active_form,
                status=status,
                blocked_by=None
                if args.blocked_by is None
                else _check_ids("blocked_by", args.blocked_by),
                add_blocked_by=add,
                remove_blocked_by=remove,
                metadata_json=None if args.metadata is None else _metadata_json(args.metadata),
            ),
        )

    async def run(self, artifact: TaskUpdateArtifact, ctx: ToolContext) -> ToolResult:
        graph = self.graph
        self._account(ctx)
        try:
            if artifact.delete:
                deletion = graph.delete(artifact.id)
                text = f"Deleted task {deletion.task_id}"
                if deletion.unblocked:
                    text += "; it no longer blocks " + ", ".join(deletion.unblocked)
                return ToolResult(
                    text=text + ".",
                    json=json.dumps(
                        {
                            "deleted_task_id": deletion.task_id,
                            "unblocked_task_ids": list(deletion.unblocked),
                        }
                    ),
                )
            task = graph.update(
                artifact.id,
                TaskPatch(
                    subject=artifact.subject,
                    description=artifact.description,
                    active_form=artifact.active_form,
                    status=artifact.status,
                    blocked_by=artifact.blocked_by,
                    add_blocked_by=artifact.add_blocked_by,
                    remove_blocked_by=artifact.remove_blocked_by,
                    metadata_json=artifact.metadata_json,
                ),
            )
        except TaskGraphError as error:
            return _refused(error)
        return _task_result("Updated", task, graph)


# TaskGet -------------------------------------------------------------------------------------


class TaskGetArguments(Arguments):
    id: TaskId = Field(description="The task to show.")


class TaskGetArtifact(Artifact):
    id: str


class TaskGet(_OverGraph, Tool[TaskGetArguments, TaskGetArtifact]):
    name: ClassVar[str] = "TaskGet"
    answer_only: ClassVar[bool] = True
    description: ClassVar[str] = (
        'Show one task of this loop in full. result.json is {"task": {...}} with its '
        "description, metadata, blockers and the tasks it blocks."
    )
    arguments: ClassVar[type[Arguments]] = TaskGetArguments
    artifact: ClassVar[type[Artifact]] = TaskGetArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = ()

    def prepare_args(self, args: TaskGetArguments, ctx: ToolContext) -> Prepared:
        return Prepared(
            summary=f"TaskGet {args.id}", requirements=(), artifact=TaskGetArtifact(id=args.id)
        )

    async def run(self, artifact: TaskGetArtifact, ctx: ToolContext) -> ToolResult:
        graph = self.graph
        try:
            task = graph.get(artifact.id)
        except TaskGraphError as error:
            return _refused(error)
        return _task_result("Task", task, graph)


# TaskList ------------------------------------------------------------------------------------


class TaskListArguments(Arguments):
    status: StatusName | None = Field(
        default=None, description="Only tasks with this status (default: all)."
    )


class TaskListArtifact(Artifact):
    status: TaskStatus | None


class TaskList(_OverGraph, Tool[TaskListArguments, TaskListArtifact]):
    name: ClassVar[str] = "TaskList"
    answer_only: ClassVar[bool] = True
    description: ClassVar[str] = (
        "List this loop's tasks in creation order, optionally only those with one status. "
        'result.json is {"tasks": [...]}, each with id, subject, active_form, status, '
        "blocked_by and blocks (TaskGet shows description and metadata)."
    )
    arguments: ClassVar[type[Arguments]] = TaskListArguments
    artifact: ClassVar[type[Artifact]] = TaskListArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = ()

    def prepare_args(self, args: TaskListArguments, ctx: ToolContext) -> Prepared:
        status = None if args.status is None else TaskStatus(args.status)
        return Prepared(
            summary="TaskList" if status is None else f"TaskList (status: {status.value})",
            requirements=(),
            artifact=TaskListArtifact(status=status),
        )

    async def run(self, artifact: TaskListArtifact, ctx: ToolContext) -> ToolResult:
        graph = self.graph
        tasks = graph.tasks(artifact.status)
        listed = [
            {
                "id": task.id,
                "subject": task.subject,
                "active_form": task.active_form,
                "status": task.status.value,
                "blocked_by": list(task.blocked_by),
                "blocks": list(graph.blocks(task.id)),
            }
            for task in tasks
        ]
        text = "\n".join(_task_line(task) for task in tasks) if tasks else "No tasks."
        return ToolResult(text=text, json=json.dumps({"tasks": listed}))
