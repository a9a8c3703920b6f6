"""The definitions of callgate's own tools (core/definitions.py): each tool family's name, the
services it needs, the annotations of its tools and how it is built. The composition root
registers them with the services it provides; settings that are configuration (time limits,
headless mode) are captured here, services that are objects come through the bindings."""

from __future__ import annotations

from ..core.board import ApprovalBoard
from ..core.definitions import (
    Bindings,
    BuildScope,
    Service,
    ToolAnnotations,
    ToolDefinition,
)
from ..core.taskgraph import TaskGraph
from ..core.tool import ToolPlugin
from .ask import AskUser
from .bash.bash_tool import Bash
from .fetch import Fetch
from .files.file_tools import EditFile, ReadFile, WriteFile
from .network import HttpAccess
from .processes.process_tools import ProcessInput, ProcessOutput, ProcessServices, ProcessStop
from .search.glob_tool import Glob
from .search.grep_tool import Grep
from .services import CommandServices, HelperSandbox, SkillSource
from .skill import Skill
from .tasks import TaskCreate, TaskGet, TaskList, TaskTextBudget, TaskUpdate

READS = ToolAnnotations(read_only=True, idempotent=True)


def file_definition() -> ToolDefinition:
    """ReadFile, WriteFile and EditFile: they keep nothing; the loop's observations are in
    its LoopState."""
    return ToolDefinition(
        name="files",
        build=lambda bindings: [ReadFile(), WriteFile(), EditFile()],
        annotations={
            "ReadFile": READS,
            "WriteFile": ToolAnnotations(destructive=True, idempotent=True),
            "EditFile": ToolAnnotations(destructive=True),
        },
    )


def search_definition() -> ToolDefinition:
    """Glob and Grep. Grep runs ripgrep only confined (`Service.HELPERS`); without bubblewrap
    it searches in Python (same output, slower)."""

    def build(bindings: Bindings) -> list[ToolPlugin]:
        helpers = bindings.service(Service.HELPERS, HelperSandbox)
        return [Glob(), Grep(helpers.rg_path, helpers.bwrap_path, helpers.seccomp)]

    return ToolDefinition(
        name="search",
        build=build,
        annotations={"Glob": READS, "Grep": READS},
        requires=Service.HELPERS,
    )


def command_definition() -> ToolDefinition:
    """Bash on the server's runner (bubblewrap or unconfined, chosen at start); without a
    background starter, `background: true` is refused at Prepare."""

    def build(bindings: Bindings) -> list[ToolPlugin]:
        commands = bindings.service(Service.COMMANDS, CommandServices)
        return [Bash(commands.runner, commands.settings, commands.background)]

    return ToolDefinition(
        name="bash",
        build=build,
        annotations={"Bash": ToolAnnotations(destructive=True, open_world=True)},
        requires=Service.COMMANDS,
    )


def process_definition() -> ToolDefinition:
    """ProcessOutput, ProcessInput and ProcessStop over the sessions' supervisors (the same
    services background Bash starts its processes with)."""

    def build(bindings: Bindings) -> list[ToolPlugin]:
        services = bindings.service(Service.PROCESSES, ProcessServices)
        return [ProcessOutput(services), ProcessInput(services), ProcessStop(services)]

    return ToolDefinition(
        name="processes",
        build=build,
        annotations={
            "ProcessOutput": ToolAnnotations(read_only=True),
            "ProcessInput": ToolAnnotations(destructive=True),
            "ProcessStop": ToolAnnotations(destructive=True, idempotent=True),
        },
        requires=Service.PROCESSES,
    )


def ask_definition(timeout_seconds: float, headless: bool) -> ToolDefinition:
    """AskUser, publishing its questions on the approval board (`no_user` when headless)."""

    def build(bindings: Bindings) -> list[ToolPlugin]:
        board = bindings.service(Service.APPROVAL_BOARD, ApprovalBoard)
        return [AskUser(board, timeout_seconds, headless)]

    return ToolDefinition(
        name="ask",
        build=build,
        annotations={"AskUser": ToolAnnotations(read_only=True)},
        requires=Service.APPROVAL_BOARD,
    )


def skill_definition() -> ToolDefinition:
    """Skill, loading from each session's `.skills` and then the configured directory."""

    def build(bindings: Bindings) -> list[ToolPlugin]:
        return [Skill(bindings.service(Service.SKILLS, SkillSource).directory)]

    return ToolDefinition(
        name="skill",
        build=build,
        annotations={"Skill": READS},
        requires=Service.SKILLS,
    )


def task_definition(budget: TaskTextBudget | None = None) -> ToolDefinition:
    """A bundle: TaskCreate, TaskUpdate, TaskGet and TaskList over one task graph, fresh for
    every loop; with a `budget`, the text it stores counts against the session's share."""

    def build(bindings: Bindings) -> list[ToolPlugin]:
        ledger = budget.ledger(bindings.session_id) if budget is not None else None
        graph = TaskGraph(ledger)
        return [
            TaskCreate(graph, ledger),
            TaskUpdate(graph, ledger),
            TaskGet(graph, ledger),
            TaskList(graph, ledger),
        ]

    return ToolDefinition(
        name="tasks",
        build=build,
        annotations={
            "TaskCreate": ToolAnnotations(),
            "TaskUpdate": ToolAnnotations(),
            "TaskGet": READS,
            "TaskList": READS,
        },
        scope=BuildScope.LOOP,
    )


def fetch_definition() -> ToolDefinition:
    """Fetch, through the server's network client and its address policy."""

    def build(bindings: Bindings) -> list[ToolPlugin]:
        return [Fetch(bindings.service(Service.NETWORK, HttpAccess))]

    return ToolDefinition(
        name="fetch",
        build=build,
        annotations={"Fetch": ToolAnnotations(open_world=True)},
        requires=Service.NETWORK,
    )


def builtin_definitions(
    ask_timeout_seconds: float, headless: bool, task_budget: TaskTextBudget | None = None
) -> list[ToolDefinition]:
    """Every family callgate ships, in the order ListTools used to list them by."""
    return [
        file_definition(),
        search_definition(),
        command_definition(),
        process_definition(),
        ask_definition(ask_timeout_seconds, headless),
        fetch_definition(),
        skill_definition(),
        task_definition(task_budget),
    ]
