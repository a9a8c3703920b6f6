"""The task graph: minted IDs, patches, deletes, and the invariants every change keeps."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.server.core.taskgraph import (
    MAX_DEPENDENCIES,
    MAX_TASKS,
    TaskDraft,
    TaskGraph,
    TaskGraphError,
    TaskPatch,
    TaskStatus,
)
from tests.core.strategies import task_operations

PENDING, IN_PROGRESS, COMPLETED = TaskStatus.PENDING, TaskStatus.IN_PROGRESS, TaskStatus.COMPLETED


def _graph(*blockers: tuple[str, ...]) -> TaskGraph:
    """A graph with one task per entry (t1, t2, ...) blocked by the IDs given."""
    graph = TaskGraph()
    for index, blocked_by in enumerate(blockers, start=1):
        graph.create(TaskDraft(subject=f"task {index}", blocked_by=blocked_by))
    return graph


def _refused(graph: TaskGraph, change: Callable[[], object], code: str) -> None:
    """`change()` must raise TaskGraphError with `code` and leave the graph unchanged."""
    before = graph.snapshot()
    with pytest.raises(TaskGraphError) as raised:
        change()
    assert raised.value.code == code
    assert graph.snapshot() == before


def test_ids_are_minted_in_order_and_never_reused() -> None:
    """Tasks get t1, t2, ...; a deleted task's ID is not handed out again."""
    graph = _graph((), ())
    graph.delete("t2")
    task = graph.create(TaskDraft(subject="again"))
    assert task.id == "t3"
    assert [t.id for t in graph.tasks()] == ["t1", "t3"]


def test_a_new_task_is_pending_and_blocks_are_derived() -> None:
    """Creation starts pending; `blocks` is the inverse of `blocked_by`."""
    graph = _graph((), ("t1",), ("t1", "t2"))
    assert graph.get("t3").status is PENDING
    assert graph.blocks("t1") == ("t2", "t3")
    assert graph.blocks("t3") == ()


def test_an_update_changes_only_the_fields_it_names() -> None:
    """None leaves a field alone; add and remove edit the blockers."""
    graph = _graph((), (), ("t1",))
    task = graph.update("t3", TaskPatch(description="d", add_blocked_by=("t2",)))
    assert (task.subject, task.description, task.blocked_by) == ("task 3", "d", ("t1", "t2"))
    task = graph.update("t3", TaskPatch(remove_blocked_by=("t1", "t2")))
    assert task.blocked_by == ()
    assert task.description == "d"


def test_unknown_and_self_dependencies_are_refused() -> None:
    """A blocker must name another task of the graph."""
    graph = _graph(())
    _refused(
        graph, lambda: graph.create(TaskDraft(subject="x", blocked_by=("t9",))), "unknown_task"
    )
    _refused(
        graph, lambda: graph.update("t1", TaskPatch(add_blocked_by=("t1",))), "self_dependency"
    )
    _refused(graph, lambda: graph.update("t7", TaskPatch(subject="x")), "unknown_task")
    _refused(graph, lambda: graph.delete("t7"), "unknown_task")


def test_a_cycle_is_refused() -> None:
    """t1 <- t2 <- t3 cannot be closed by making t1 wait for t3."""
    graph = _graph((), ("t1",), ("t2",))
    _refused(graph, lambda: graph.update("t1", TaskPatch(blocked_by=("t3",))), "cycle")


def test_in_progress_needs_completed_blockers() -> None:
    """A task may start only when its blockers are completed."""
    graph = _graph((), ("t1",))
    _refused(graph, lambda: graph.update("t2", TaskPatch(status=IN_PROGRESS)), "blocked")
    graph.update("t1", TaskPatch(status=COMPLETED))
    graph.update("t2", TaskPatch(status=IN_PROGRESS))


def test_a_blocker_of_a_running_task_cannot_be_reopened() -> None:
    """Moving a completed blocker back is refused while a task it blocks is in progress."""
    graph = _graph((), ("t1",), ())
    graph.update("t1", TaskPatch(status=COMPLETED))
    graph.update("t2", TaskPatch(status=IN_PROGRESS))
    _refused(graph, lambda: graph.update("t1", TaskPatch(status=PENDING)), "blocked")
    _refused(graph, lambda: graph.update("t2", TaskPatch(add_blocked_by=("t3",))), "blocked")


def test_deleting_a_blocker_removes_the_edge() -> None:
    """Tasks that waited for a deleted task keep existing, without that blocker."""
    graph = _graph((), ("t1",), ("t1", "t2"))
    deletion = graph.delete("t1")
    assert deletion.unblocked == ("t2", "t3")
    assert graph.get("t2").blocked_by == ()
    assert graph.get("t3").blocked_by == ("t2",)


def test_the_task_and_dependency_limits_hold() -> None:
    """At most MAX_TASKS tasks per graph and MAX_DEPENDENCIES blockers per task."""
    graph = _graph(*[()] * MAX_TASKS)
    _refused(graph, lambda: graph.create(TaskDraft(subject="one more")), "limit")
    ids = tuple(f"t{n}" for n in range(1, MAX_DEPENDENCIES + 1))
    graph.update(f"t{MAX_TASKS}", TaskPatch(blocked_by=ids))
    _refused(
        graph, lambda: graph.update(f"t{MAX_TASKS}", TaskPatch(add_blocked_by=("t200",))), "limit"
    )


def _check_invariants(graph: TaskGraph) -> None:
    """The invariants, checked independently of the graph's own validation (Kahn's sort)."""
    tasks = {task.id: task for task in graph.tasks()}
    for task in tasks.values():
        assert task.id not in task.blocked_by
        assert set(task.blocked_by) <= tasks.keys()
        assert len(set(task.blocked_by)) == len(task.blocked_by)
        if task.status is IN_PROGRESS:
            assert all(tasks[b].status is COMPLETED for b in task.blocked_by)
    waiting = {task_id: len(task.blocked_by) for task_id, task in tasks.items()}
    ready = [task_id for task_id, count in waiting.items() if count == 0]
    seen = 0
    while ready:
        done = ready.pop()
        seen += 1
        for task_id in graph.blocks(done):
            waiting[task_id] -= 1
            if waiting[task_id] == 0:
                ready.append(task_id)
    assert seen == len(tasks), "the blocked-by relation has a cycle"


def _apply(graph: TaskGraph, operation: tuple[object, ...]) -> None:
    match operation:
        case ("create", list() as ids):
            graph.create(TaskDraft(subject="s", blocked_by=tuple(str(i) for i in ids)))
        case ("status", str(task_id), str(status)):
            graph.update(task_id, TaskPatch(status=TaskStatus(status)))
        case ("add", str(task_id), list() as ids):
            graph.update(task_id, TaskPatch(add_blocked_by=tuple(str(i) for i in ids)))
        case ("remove", str(task_id), list() as ids):
            graph.update(task_id, TaskPatch(remove_blocked_by=tuple(str(i) for i in ids)))
        case ("replace", str(task_id), list() as ids):
            graph.update(task_id, TaskPatch(blocked_by=tuple(str(i) for i in ids)))
        case ("delete", str(task_id)):
            graph.delete(task_id)
        case _:
            raise AssertionError(operation)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 8), st.lists(task_operations, max_size=40))
def test_no_sequence_of_changes_breaks_the_graph(
    initial: int, operations: list[tuple[object, ...]]
) -> None:
    """After any change the invariants hold, and a refused change leaves the graph as it was."""
    graph = _graph(*[()] * initial)
    for operation in operations:
        before = graph.snapshot()
        try:
            _apply(graph, operation)
        except TaskGraphError:
            assert graph.snapshot() == before
        _check_invariants(graph)
