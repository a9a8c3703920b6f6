"""What the lifecycle keeps per session, its settings and clock (design section 2)."""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from .calls import CallRecord
from .definitions import BuildScope
from .models import SandboxMode, ToolInfo
from .paths import Workspace
from .resources import SessionResources
from .tool import LoopState, ToolLimits, ToolPlugin

MAX_ID_LENGTH = 128


class Clock(Protocol):
    def monotonic(self) -> float: ...
    def now(self) -> datetime: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)


class ToolCatalog(Protocol):
    """The tools a server offers (`tools.registry.ToolRegistry`): fresh tools for a session or
    a loop from its definitions, and what ListTools shows."""

    def build(self, session_id: str, loop_id: str, scope: BuildScope) -> dict[str, ToolPlugin]: ...
    def infos(self, workspace: Workspace | None = None) -> list[ToolInfo]: ...


@dataclass(frozen=True, slots=True)
class LifecycleSettings:
    default_workspace: str
    allowed_roots: tuple[str, ...]
    headless: bool = False
    sandbox_mode: SandboxMode = SandboxMode.NONE
    sandbox_warning: str = ""
    # The per-command limits' mechanism (sandbox/limits.py): cgroup-v2|cgroup-v1|rlimit|none.
    sandbox_limits: str = "none"
    # Dry runs (core/dry_runs.py): "on_request", "gated", "off" or "unavailable: <why>".
    dry_run: str = "off"
    call_ttl_seconds: float = 900.0
    # A named session unused this long (no open, call or running invocation) is closed.
    session_idle_seconds: float = 3600.0
    approval_timeout_seconds: float = 600.0
    max_sessions: int = 64
    max_loops_per_session: int = 64
    max_open_calls_per_session: int = 256
    max_kept_calls_per_session: int = 1000
    max_running_per_session: int = 16
    max_running_total: int = 64
    max_argument_bytes: int = 1 << 20
    # The bytes kept calls may hold server-wide, open calls per session, and of one ended
    # call's result (core/retention.py).
    max_retained_bytes: int = 256 << 20
    max_retained_bytes_per_session: int = 64 << 20
    max_retained_result_bytes: int = 256 << 10
    tool_limits: ToolLimits = field(default_factory=ToolLimits)
    # Where sessions get their private directories (<root>/<session_id>); None: no directories.
    session_state_root: str | None = None


@dataclass(frozen=True, slots=True)
class SessionSnapshot:
    session_id: str
    workspace: str
    default_loop_id: str
    sandbox_mode: SandboxMode
    sandbox_warning: str
    sandbox_limits: str
    create_time: datetime
    labels: Mapping[str, str]
    name: str = ""
    last_used_time: datetime | None = None
    dry_run: str = "off"


@dataclass(eq=False, slots=True)
class Session:
    session_id: str
    owner: str
    workspace: Workspace
    default_loop_id: str
    labels: dict[str, str]
    create_time: datetime
    resources: SessionResources
    loops: dict[str, LoopState] = field(default_factory=dict)
    # The name it was opened with (reopened by its owner by that name), or "".
    name: str = ""
    # When it was last used, by the wall clock and the monotonic one (idle expiry).
    last_used: datetime | None = None
    last_used_monotonic: float = 0.0
    # The tools of the session's session-scoped definitions, shared by its loops.
    tools: dict[str, ToolPlugin] = field(default_factory=dict)
    calls: OrderedDict[str, CallRecord] = field(default_factory=OrderedDict)
    prepare_requests: dict[str, tuple[str, str]] = field(default_factory=dict)
    invoke_requests: dict[str, str] = field(default_factory=dict)
    running: int = 0
    open_calls: int = 0
    closed: bool = False

    def call_ended(self) -> None:
        self.open_calls -= 1


def new_id(prefix: str) -> str:
    # 144 random bits, URL-safe, opaque.
    return prefix + secrets.token_urlsafe(18)
