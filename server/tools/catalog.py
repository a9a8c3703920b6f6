"""The tool families the composition root registers, built from their configuration."""

from __future__ import annotations

from callgate.server.core.board import ApprovalBoard
from callgate.server.core.tool import ToolPlugin
from callgate.server.sandbox.runner import CommandRunner
from callgate.server.sandbox.seccomp import SeccompProgram

from .ask import AskUser
from .bash.bash_tool import BackgroundStarter, Bash
from .bash.command_spec import CommandSettings
from .fetch import Fetch
from .files.file_tools import EditFile, ReadFile, WriteFile
from .processes.process_tools import ProcessInput, ProcessOutput, ProcessServices, ProcessStop
from .search.glob_tool import Glob
from .search.grep_tool import Grep
from .skill import Skill
from .tasks import TaskCreate, TaskGet, TaskList, TaskUpdate


def file_tools(
    rg_path: str | None, bwrap_path: str | None = None, seccomp: SeccompProgram | None = None
) -> list[ToolPlugin]:
    """ReadFile, WriteFile, EditFile, Glob and Grep. `rg_path` is the ripgrep executable
    Grep runs confined by bubblewrap at `bwrap_path` (under the commands' `seccomp` filter);
    without both, Grep searches in Python (same output, slower)."""
    return [ReadFile(), WriteFile(), EditFile(), Glob(), Grep(rg_path, bwrap_path, seccomp)]


def process_tools(services: ProcessServices) -> list[ToolPlugin]:
    """ProcessOutput, ProcessInput and ProcessStop over the sessions' supervisors (the same
    `services` background Bash starts its processes with)."""
    return [ProcessOutput(services), ProcessInput(services), ProcessStop(services)]


def command_tools(
    runner: CommandRunner, settings: CommandSettings, background: BackgroundStarter | None = None
) -> list[ToolPlugin]:
    """Bash on the server's runner (bubblewrap or unconfined, chosen at start). Without a
    `background` starter, `background: true` is refused at Prepare."""
    return [Bash(runner, settings, background)]


def ask_tools(board: ApprovalBoard, timeout_seconds: float, headless: bool) -> list[ToolPlugin]:
    """AskUser, publishing its questions on the approval board (`no_user` when headless)."""
    return [AskUser(board, timeout_seconds, headless)]


def skill_tools(skills_dir: str | None) -> list[ToolPlugin]:
    """Skill, loading from each session's `.skills` and then `skills_dir` (None: none)."""
    return [Skill(skills_dir)]


def task_tools() -> list[ToolPlugin]:
    """TaskCreate, TaskUpdate, TaskGet and TaskList over each loop's task graph."""
    return [TaskCreate(), TaskUpdate(), TaskGet(), TaskList()]


def fetch_tools(allow_networks: list[str]) -> list[ToolPlugin]:
    """Fetch, which may reach internal addresses only inside `allow_networks` (CIDRs)."""
    return [Fetch(allow_networks)]
