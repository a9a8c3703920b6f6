"""The composition root: builds every part from the configuration and runs the gRPC server."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import ipaddress
import logging
import os
import pwd
import resource
import shutil
import signal
import socket
import stat
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from callgate.server import state_directory
from callgate.server.config import ConfigError, ServerConfig, default_state_dir
from callgate.server.core.approvals import Approvals
from callgate.server.core.audit import Audit
from callgate.server.core.board import ApprovalBoard
from callgate.server.core.dry_runs import DryRuns
from callgate.server.core.effects import DryRunSettings
from callgate.server.core.gate import AccessDefaults, Gate
from callgate.server.core.lifecycle import Lifecycle, LifecycleSettings
from callgate.server.core.models import SandboxMode
from callgate.server.core.paths import (
    DEFAULT_DENIED_GLOBS,
    DEFAULT_READONLY_GLOBS,
    ProtectedPaths,
)
from callgate.server.core.principals import TokenAuthenticator
from callgate.server.core.rules import CONFIG_ORIGIN, Rule, RuleBook
from callgate.server.core.tool import ToolLimits
from callgate.server.credentials import load_authenticator
from callgate.server.metrics import MetricsServer, PrometheusTelemetry, serve_metrics
from callgate.server.rpc import reflection
from callgate.server.rpc.approval_service import ApprovalServicer
from callgate.server.rpc.audit_service import AuditServicer
from callgate.server.rpc.handlers import register_service
from callgate.server.rpc.output_stream import StreamBudget
from callgate.server.rpc.tool_service import ToolServicer
from callgate.server.sandbox.bwrap import BwrapRunner, lifeline_works
from callgate.server.sandbox.limits import CGROUP_RECORD, CommandLimiter, CommandLimits
from callgate.server.sandbox.overlay import overlay_precondition
from callgate.server.sandbox.probe import SandboxStatus, detect_sandbox
from callgate.server.sandbox.runner import CommandRunner
from callgate.server.sandbox.unconfined import UnconfinedRunner
from callgate.server.storage.journal import JOURNAL_DB, SqliteJournal
from callgate.server.storage.rules_store import SqliteRuleStore
from callgate.server.tools.catalog import builtin_definitions
from callgate.server.tools.registry import ToolRegistry
from callgate.v1 import approval_service_pb2, audit_service_pb2, tool_service_pb2

from .core.definitions import Service
from .net.egress import FDS_PER_CONNECTION, ConnectionRecord, EgressProxy, EgressSettings
from .plugins import load_plugins
from .sandbox import proctree
from .tools.bash.background import SupervisedBash
from .tools.bash.command_spec import CommandSettings
from .tools.network import HttpAccess
from .tools.processes.output_log import SpoolBudget
from .tools.processes.process_tools import ProcessServices
from .tools.processes.supervisor import SUPERVISOR, SupervisorSettings
from .tools.services import CommandServices, HelperSandbox, SkillSource
from .tools.tasks import TaskTextBudget

log = logging.getLogger(__name__)

TOOL_SERVICE = "callgate.v1.ToolService"
APPROVAL_SERVICE = "callgate.v1.ApprovalService"
AUDIT_SERVICE = "callgate.v1.AuditService"
RULES_DB = "rules.db"
SWEEP_INTERVAL_SECONDS = 1.0
SWITCH_INTERVAL_SECONDS = 0.001
# After the grace period: how long cancelled invocations get to send their answers.
ANSWER_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class RunningServer:
    """A started server: where it listens and the parts tests and the CLI need."""

    addresses: tuple[str, ...]
    lifecycle: Lifecycle
    token_dir: Path | None
    sandbox: SandboxStatus
    state_dir: Path
    # host:port of the Prometheus /metrics endpoint, when metrics are on.
    metrics_address: str | None = None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _tool_limits(config: ServerConfig) -> ToolLimits:
    t = config.tools
    return ToolLimits(
        read_max_bytes=t.read_max_bytes,
        read_max_lines=t.read_max_lines,
        edit_max_bytes=t.edit_max_bytes,
        write_max_bytes=t.write_max_bytes,
        glob_max_results=t.glob_max_results,
        grep_max_matches=t.grep_max_matches,
        grep_max_bytes=t.grep_max_bytes,
        grep_timeout_seconds=t.grep_timeout_seconds,
        scan_seconds=t.scan_seconds,
        preview_max_bytes=t.preview_max_bytes,
    )


def build_rules(config: ServerConfig) -> RuleBook:
    created = datetime.now(UTC)
    return RuleBook(
        Rule(
            rule_id=f"config-{index}",
            effect=item.effect,
            kind=item.kind,
            match=item.normalized(),
            scope="",
            origin=CONFIG_ORIGIN,
            create_time=created,
        )
        for index, item in enumerate(config.rules)
    )


def build_limiter(config: ServerConfig, state_dir: Path | None = None) -> CommandLimiter:
    """Per-command limits (sandbox/limits.py); raises ConfigError when `cgroup` is asked
    for and cannot be had. With `state_dir` (whose lock this server holds), the cgroups are
    recorded there and what its earlier runs left is removed."""
    limits = config.command_limits
    try:
        return CommandLimiter(
            CommandLimits(
                pids=limits.pids,
                memory_bytes=limits.memory_bytes,
                cpu_seconds=limits.cpu_seconds,
                file_size_bytes=limits.file_size_bytes,
            ),
            limits.mechanism,
            record=state_dir / CGROUP_RECORD if state_dir is not None else None,
        )
    except RuntimeError as exc:
        raise ConfigError(f"command_limits.mechanism: {exc}") from None


# Descriptors the server needs besides its proxy's connections (clients, journal, commands).
OPEN_FILES_RESERVE = 4096


def _raise_open_files(wanted: int) -> int:
    """Raise this process's soft limit on open files toward `wanted` (never above the hard
    limit): a soft limit of 1024, common for services, would fail the proxy's connections and
    then everything else with EMFILE long before any of its own limits. Returns the soft
    limit now (`wanted` when it is unlimited)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return int(soft)


def build_egress(config: ServerConfig) -> EgressProxy:
    """The egress proxy, with room in this process's open-file limit for its connections:
    the limit is raised toward what they need, and where the hard limit is lower, the proxy
    holds fewer at once (so that its connections never take the descriptors the rest of the
    server needs)."""
    settings = egress_settings(config)
    wanted = FDS_PER_CONNECTION * settings.max_open_total + OPEN_FILES_RESERVE
    soft = _raise_open_files(wanted)
    room = (soft - OPEN_FILES_RESERVE) // FDS_PER_CONNECTION
    if room < settings.max_open_total:
        log.warning(
            "the open-file limit bounds the egress proxy",
            extra={"detail": f"{max(room, 16)} connections at once (raise RLIMIT_NOFILE)"},
        )
        settings = dataclasses.replace(settings, max_open_total=max(room, 16))
    return EgressProxy(settings)


def egress_settings(config: ServerConfig) -> EgressSettings:
    """The `[network]` table as what the egress proxy enforces beyond a call's approvals."""
    network = config.network
    return EgressSettings.build(
        config.allow_networks(),
        network.methods.items(),
        max_connections=network.max_connections_per_call,
        max_bytes=network.max_bytes_per_call,
        connect_seconds=network.connect_timeout_seconds,
        session_share=config.limits.session_share,
    )


def build_runner(
    sandbox: SandboxStatus,
    limiter: CommandLimiter | None = None,
    egress: EgressProxy | None = None,
    record: Callable[[ConnectionRecord], None] | None = None,
) -> CommandRunner:
    """bubblewrap when the startup self-test passed, else unconfined (already warned about).
    The mode is in the startup log, in every Session and in health-check trailers. `egress`
    is the proxy commands approved for network reach out through, `record` where each of
    their connections is reported."""
    if sandbox.mode is SandboxMode.BWRAP and sandbox.bwrap_path:
        runner = BwrapRunner(
            sandbox.bwrap_path,
            seccomp=sandbox.seccomp,
            limiter=limiter,
            egress=egress,
            record=record,
        )
        # With cgroups the watchdog guards (started here); without, the per-command lifeline,
        # which must be seen to work first.
        if runner.guard() == "lifeline" and not lifeline_works(sandbox.bwrap_path, sandbox.seccomp):
            runner.lifeline = False
            log.warning(
                "the sandbox lifeline does not work here",
                extra={
                    "detail": "a kill -9 of the server within milliseconds of a spawn can "
                    "leave that command running (bubblewrap's --die-with-parent race)"
                },
            )
        return runner
    return UnconfinedRunner(limiter)


def command_settings(config: ServerConfig, environ: Mapping[str, str]) -> CommandSettings:
    """What every command gets besides its call: the configured passthrough variables (by
    value, now) and what the sandbox hides on top of the server's state directory: the
    server user's home (secrets such as ~/.ssh and cloud credentials live there; the
    workspace and declared paths inside it are bound back) and the server's Unix sockets."""
    passthrough = {n: environ[n] for n in config.bash.env_passthrough if n in environ}
    homes = {os.path.realpath(h) for h in (environ.get("HOME"), _user_home()) if h}
    sockets = [
        os.path.realpath(a.removeprefix("unix://"))
        for a in config.listen_addresses()
        if a.startswith("unix://")
    ]
    return CommandSettings(
        env_passthrough=passthrough,
        hidden_dirs=tuple(sorted(h for h in homes if h != "/" and os.path.isdir(h))),
        masked_paths=tuple(sockets),
    )


def supervisor_settings(config: ServerConfig, state_dir: Path | None = None) -> SupervisorSettings:
    """The `[processes]` table as the settings of every session's process supervisor; their
    spools share one budget (and keep the journal's reserve on the state directory's disk)."""
    p = config.processes
    budget = (
        SpoolBudget(
            p.spool_budget_bytes,
            config.journal.reserve_bytes,
            state_dir,
            session_share=int(p.spool_budget_bytes * config.limits.session_share),
        )
        if state_dir is not None
        else None
    )
    return SupervisorSettings(
        spool_budget=budget,
        max_running_per_loop=p.max_running_per_loop,
        max_running_per_session=p.max_running_per_session,
        max_finished_kept=p.max_finished_kept,
        ring_bytes=p.ring_bytes,
        spool_bytes=p.spool_bytes,
        input_timeout_seconds=p.input_timeout_seconds,
        timeout_grace_seconds=p.timeout_grace_seconds,
        close_grace_seconds=p.close_grace_seconds,
    )


def _user_home() -> str | None:
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return None


SANDBOX_MODE_METADATA = "callgate-sandbox-mode"
SANDBOX_SECCOMP_METADATA = "callgate-sandbox-seccomp"
SANDBOX_LIMITS_METADATA = "callgate-sandbox-limits"
SANDBOX_LIMITS_CONDITION_METADATA = "callgate-sandbox-limits-condition"
COMMAND_FAMILIES_METADATA = "callgate-command-families"
DRY_RUN_METADATA = "callgate-dry-run"
# Said at start, in health and in every Session when no sandbox holds command families.
FAMILIES_GATED = (
    "command families (Bash(...:*) rules) allow nothing by themselves without the sandbox: "
    "every command they would allow waits for a human; exact command rules still apply"
)


class SandboxReportingHealth(health.aio.HealthServicer):  # type: ignore[misc]  # untyped base
    """grpc.health.v1 whose Check answers also carry the sandbox mode in effect as trailing
    metadata (`callgate-sandbox-mode: bwrap|none`, `callgate-sandbox-seccomp: on|off`,
    `callgate-sandbox-limits: cgroup-v2|cgroup-v1|rlimit|none`, and
    `callgate-sandbox-limits-condition: ok|recreated|unavailable`, read at each Check: whether
    the command cgroups vanished and were made again, or cannot be, so commands are refused
    with `sandbox_unavailable`; `callgate-command-families: enforced|gated`: whether the
    sandbox holds what command families promise, or they allow nothing by themselves;
    `callgate-dry-run: on_request|gated|off|unavailable: <why>`: whether approvers can
    dry-run commands): the
    health "details" an operator can read with `callgate health` or `grpcurl -v`, since
    HealthCheckResponse has no details field."""

    def __init__(
        self,
        sandbox_mode: str,
        seccomp: bool = False,
        limits: str = "none",
        condition: Callable[[], str] = lambda: "ok",
        families: str = "enforced",
        dry_run: str = "off",
    ) -> None:
        super().__init__()
        self._trailer = (
            (SANDBOX_MODE_METADATA, sandbox_mode),
            (SANDBOX_SECCOMP_METADATA, "on" if seccomp else "off"),
            (SANDBOX_LIMITS_METADATA, limits),
            (COMMAND_FAMILIES_METADATA, families),
            (DRY_RUN_METADATA, dry_run),
        )
        self._condition = condition

    async def Check(  # the gRPC method name
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> health_pb2.HealthCheckResponse:
        context.set_trailing_metadata(
            (*self._trailer, (SANDBOX_LIMITS_CONDITION_METADATA, self._condition()))
        )
        response: health_pb2.HealthCheckResponse = await super().Check(request, context)
        return response


def dry_run_status(config: ServerConfig, mode: SandboxMode) -> tuple[str, str]:
    """Why dry runs cannot be made here ("" when they can: they need overlay mounts in the
    sandbox, sandbox/overlay.py), and what health and GetSession say of them."""
    if config.bash.dry_run == "off":
        return "", "off"
    unavailable = (
        overlay_precondition()
        if mode is SandboxMode.BWRAP
        else "commands run without the sandbox here"
    )
    return unavailable, f"unavailable: {unavailable}" if unavailable else config.bash.dry_run


def _check_socket_placement(config: ServerConfig, roots: list[Path]) -> None:
    """A Unix socket is never inside the workspace or an allowed root: tools and commands could
    replace it (or its directory) with a symlink while the server binds and chmods it."""
    for address in config.listen_addresses():
        if not address.startswith("unix://"):
            continue
        path = Path(os.path.realpath(Path(address.removeprefix("unix://")).expanduser()))
        for root in roots:
            if path.is_relative_to(root):
                raise ConfigError(
                    f"config key listen: {address} lies inside {root}, which tools can change; "
                    "put the socket outside it (e.g. in the state directory)"
                )


def _chmod_socket(path: str) -> None:
    """chmod 0660 exactly the socket just bound: opened without following a symlink and
    changed through its fd's /proc link, so a name swapped meanwhile changes nothing else."""
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise ConfigError(f"config key listen: {path} is not the socket this server bound")
        os.chmod(f"/proc/self/fd/{fd}", 0o660)
    finally:
        os.close(fd)


MAX_PORT = 65535


def _add_port(address: str, add: Callable[[], int]) -> int:
    """The port grpc bound for `address`; a ConfigError naming it when it could not bind."""
    try:
        return add()
    except RuntimeError:  # grpc: "Failed to bind to address ..."
        raise ConfigError(
            f"config key listen: cannot listen on {address} (in use, or not permitted here)"
        ) from None


def _clear_stale_socket(path: Path) -> None:
    """Remove what an earlier server left at a socket path, and only that: a socket nobody
    accepts on. A socket another process serves, or anything that is not a socket, is not ours
    to remove (two servers configured with one path must not steal it from each other)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    address = f"unix://{path}"
    if not stat.S_ISSOCK(info.st_mode):
        raise ConfigError(
            f"config key listen: {address} exists and is not a socket; remove it or choose "
            "another path"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        probe.settimeout(1.0)
        probe.connect(str(path))
    except ConnectionRefusedError:
        path.unlink()  # stale: no process listens on it any more
        return
    except OSError as exc:
        raise ConfigError(
            f"config key listen: {address} cannot be checked ({exc.strerror or exc}); "
            "choose another path"
        ) from None
    finally:
        probe.close()
    raise ConfigError(
        f"config key listen: {address} is in use by another server; choose another path"
    )


def _lock_state_dir(state_dir: Path) -> int:
    """Hold `<state_dir>/lock` exclusively for as long as this server lives: two servers on
    one state directory would share the journal's sequence, abandon each other's calls and
    remove each other's session files."""
    fd = os.open(
        state_dir / "lock",
        os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
        state_directory.FILE_MODE,
    )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(
            f"config key state_dir: {state_dir} is in use by another callgate server"
        ) from None
    return fd


class App:
    """Everything one server process runs, built from one configuration."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._drained = False
        self.state_dir = config.state_path()
        self.workspace = config.workspace_path()
        if not self.workspace.is_dir():
            raise ConfigError(f"config key workspace: {self.workspace} is not a directory")
        allowed = [Path(os.path.realpath(Path(r).expanduser())) for r in config.allowed_roots]
        state_directory.check_placement(
            self.state_dir,
            [
                ("workspace", self.workspace),
                *((f"allowed_roots.{i}", root) for i, root in enumerate(allowed)),
            ],
            suggestion=default_state_dir(os.environ).resolve(),
        )
        _check_socket_placement(config, [self.workspace, *allowed])
        state_directory.prepare(self.state_dir)
        self._lock_fd: int | None = _lock_state_dir(self.state_dir)
        (self.state_dir / state_directory.SESSIONS).mkdir(
            mode=state_directory.DIRECTORY_MODE, exist_ok=True
        )
        state_directory.create_private_file(self.state_dir / JOURNAL_DB)
        state_directory.create_private_file(self.state_dir / RULES_DB)
        self.authenticator: TokenAuthenticator
        self.authenticator, self.token_dir = load_authenticator(config, self.state_dir)
        self.sandbox = detect_sandbox(config.sandbox)
        globs = config.denied_paths if config.denied_paths is not None else DEFAULT_DENIED_GLOBS
        readonly = (
            config.readonly_paths if config.readonly_paths is not None else DEFAULT_READONLY_GLOBS
        )
        self.protected = ProtectedPaths(globs, roots=[str(self.state_dir)], readonly_globs=readonly)
        self.rules = build_rules(config)
        # What a `Bash(…:*)` family promises is held by the sandbox (read-only families run
        # read-only, denied programs are masked); without one, families allow nothing alone.
        families_enforced = self.sandbox.mode is SandboxMode.BWRAP
        self.gate = Gate(
            AccessDefaults.model_validate(config.access.model_dump()),
            self.rules,
            self.protected,
            families_enforced=families_enforced,
        )
        sandbox_warning = self.sandbox.warning
        if not families_enforced:
            log.warning("command families are not enforced", extra={"detail": FAMILIES_GATED})
            sandbox_warning = (
                f"{sandbox_warning}; {FAMILIES_GATED}" if sandbox_warning else (FAMILIES_GATED)
            )
        rg = shutil.which("rg") if config.tools.ripgrep else None
        self.limiter = build_limiter(config, self.state_dir)
        # The sandboxes' only way out (net/egress.py): its own thread, started at first use.
        self.egress = build_egress(config)
        self.runner = build_runner(self.sandbox, self.limiter, self.egress, self._connection)
        self.command_settings = command_settings(config, os.environ)
        # The audit journal; opened (and the previous run's open calls abandoned) at start.
        self.journal = SqliteJournal(self.state_dir / JOURNAL_DB, config.journal.synchronous)
        self.processes = ProcessServices(supervisor_settings(config, self.state_dir), self.journal)
        background = SupervisedBash(self.processes, self.runner, self.command_settings)
        headless = config.approval_mode == "headless"
        self.board = ApprovalBoard()
        # Every tool comes from a definition (core/definitions.py), callgate's own and the
        # plugins the config names; each gets only the services it declares, and one that
        # needs a service missing here, fails to build or clashes stops the start.
        services: dict[Service, object] = {
            Service.COMMANDS: CommandServices(self.runner, self.command_settings, background),
            Service.PROCESSES: self.processes,
            Service.APPROVAL_BOARD: self.board,
            Service.NETWORK: HttpAccess(config.allow_networks()),
            Service.HELPERS: HelperSandbox(
                rg,
                self.sandbox.bwrap_path if self.runner.mode is SandboxMode.BWRAP else None,
                self.sandbox.seccomp,
            ),
            Service.SKILLS: SkillSource(config.skills.directory or None),
        }
        self.tools = ToolRegistry(
            [
                *builtin_definitions(
                    config.ask.timeout_seconds,
                    headless,
                    TaskTextBudget(
                        config.limits.max_task_text_bytes,
                        int(config.limits.max_task_text_bytes * config.limits.session_share),
                    ),
                ),
                *load_plugins(config.tools.plugins),
            ],
            services,
            settings=config.tools.settings,
        )
        self.metrics = (
            PrometheusTelemetry(i.name for i in self.tools.infos())
            if config.metrics_listen
            else None
        )
        roots = [str(self.workspace), *(str(root) for root in allowed)]
        dry_unavailable, dry_status = dry_run_status(config, self.runner.mode)
        self.lifecycle = Lifecycle(
            LifecycleSettings(
                default_workspace=str(self.workspace),
                allowed_roots=tuple(os.path.realpath(r) for r in roots),
                headless=headless,
                sandbox_mode=self.sandbox.mode,
                sandbox_warning=sandbox_warning,
                sandbox_limits=self.limiter.mechanism,
                call_ttl_seconds=config.calls.ttl_seconds,
                approval_timeout_seconds=config.approval.timeout_seconds,
                session_idle_seconds=config.sessions.idle_seconds,
                max_sessions=config.limits.max_sessions,
                max_loops_per_session=config.limits.max_loops_per_session,
                max_open_calls_per_session=config.limits.max_open_calls_per_session,
                max_kept_calls_per_session=config.limits.max_kept_calls_per_session,
                max_running_per_session=config.limits.max_running_per_session,
                max_running_total=config.limits.max_running_total,
                max_argument_bytes=config.limits.max_argument_bytes,
                max_retained_bytes=config.limits.max_retained_bytes,
                max_retained_bytes_per_session=config.limits.max_retained_bytes_per_session,
                max_retained_result_bytes=config.limits.max_retained_result_bytes,
                tool_limits=_tool_limits(config),
                session_state_root=str(self.state_dir / "sessions"),
                dry_run=dry_status,
            ),
            self.tools,
            self.gate,
            self.protected,
            board=self.board,
            journal=self.journal,
            telemetry=self.metrics,
        )
        if self.metrics is not None:
            self._watch_gauges(self.metrics)
        self.tool_servicer = ToolServicer(
            self.lifecycle,
            StreamBudget(
                config.limits.stream_buffer_bytes,
                config.limits.stream_buffer_total_bytes,
                per_session=int(
                    config.limits.stream_buffer_total_bytes * config.limits.session_share
                ),
            ),
        )
        self._build_approvals(config, dry_unavailable)

    def _build_approvals(self, config: ServerConfig, dry_unavailable: str) -> None:
        """The approver's side: durable rules, decisions, dry runs, the audit reader."""
        # Workspace rules persisted by approvers; loaded into the rule book at start.
        self.rule_store = SqliteRuleStore(self.state_dir / RULES_DB)
        self.approvals = Approvals(self.lifecycle, self.rules, self.rule_store)
        self.dry_runs = DryRuns(
            self.lifecycle,
            config.bash.dry_run,
            dry_unavailable,
            DryRunSettings(config.bash.dry_run_timeout_seconds, config.bash.dry_run_max_bytes),
        )
        self.approval_servicer = ApprovalServicer(self.approvals, self.dry_runs)
        self.audit = Audit(self.journal)
        self.audit_servicer = AuditServicer(self.audit)

    def _watch_gauges(self, metrics: PrometheusTelemetry) -> None:
        lifecycle, board = self.lifecycle, self.board

        def running_processes() -> float:
            supervisors = (r.peek(SUPERVISOR) for r in lifecycle.session_resources())
            return sum(s.running_count() for s in supervisors if s is not None)

        metrics.watch(
            sessions=lambda: lifecycle.session_count,
            running_calls=lambda: lifecycle.running_total,
            running_processes=running_processes,
            pending_approvals=lambda: len(board.pending_approvals()),
            retained_bytes=lambda: lifecycle.retention.total,
            retained_budget_bytes=lambda: lifecycle.retention.max_bytes,
        )

    def _grpc_server(self) -> tuple[grpc.aio.Server, health.aio.HealthServicer]:
        size = self.config.limits.max_message_bytes
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", size),
                ("grpc.max_send_message_length", size),
                ("grpc.so_reuseport", 0),
            ]
        )
        register_service(
            server,
            tool_service_pb2.DESCRIPTOR.services_by_name["ToolService"],
            tool_service_pb2,
            self.tool_servicer.handlers(),
            self.authenticator,
        )
        register_service(
            server,
            approval_service_pb2.DESCRIPTOR.services_by_name["ApprovalService"],
            approval_service_pb2,
            self.approval_servicer.handlers(),
            self.authenticator,
        )
        register_service(
            server,
            audit_service_pb2.DESCRIPTOR.services_by_name["AuditService"],
            audit_service_pb2,
            self.audit_servicer.handlers(),
            self.authenticator,
        )
        health_servicer = SandboxReportingHealth(
            self.sandbox.mode.value,
            seccomp=self.sandbox.seccomp is not None,
            limits=self.limiter.mechanism,
            condition=lambda: self.limiter.condition,
            families="enforced" if self.gate.families_enforced else "gated",
            dry_run=self.dry_runs.status,
        )
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        # v1 and v1alpha, with the protos' comments (rpc/reflection.py).
        reflection.enable(
            server, (TOOL_SERVICE, APPROVAL_SERVICE, AUDIT_SERVICE, health.SERVICE_NAME)
        )
        return server, health_servicer

    def _bind(self, server: grpc.aio.Server) -> list[str]:
        bound: list[str] = []
        for address in self.config.listen_addresses():
            if address.startswith("unix://"):
                path = Path(address.removeprefix("unix://"))
                path.parent.mkdir(parents=True, exist_ok=True)
                _clear_stale_socket(path)
                server.add_insecure_port(f"unix:{path}")
                bound.append(f"unix://{path}")
                continue
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(
                    f"config key listen: {address!r} is not unix:///path or host:port"
                )
            if int(port) > MAX_PORT:
                # grpc would take the port modulo 65536 and listen somewhere else.
                raise ConfigError(
                    f"config key listen: {address!r} has port {port}; a port is 0 to {MAX_PORT}"
                )
            tls = self.config.tls
            if tls.cert_file and tls.key_file:
                server_credentials = grpc.ssl_server_credentials(
                    [(Path(tls.key_file).read_bytes(), Path(tls.cert_file).read_bytes())],
                    root_certificates=Path(tls.client_ca_file).read_bytes()
                    if tls.client_ca_file
                    else None,
                    require_client_auth=tls.client_ca_file is not None,
                )
                actual = _add_port(
                    address, functools.partial(server.add_secure_port, address, server_credentials)
                )
            elif _is_loopback(host) or tls.insecure:
                actual = _add_port(address, functools.partial(server.add_insecure_port, address))
            else:
                raise ConfigError(
                    f"config key listen: {address} is not loopback; set tls.cert_file and "
                    "tls.key_file (or tls.insecure = true)"
                )
            bound.append(f"{host}:{actual}")
        return bound

    @asynccontextmanager
    async def running(self) -> AsyncIterator[RunningServer]:
        """Start serving; on exit, drain gracefully and stop."""
        # Worker threads (a long command's parse, see Bash.warm) hand the GIL back to the
        # event loop's thread after 1 ms rather than Python's default 5 ms, so that requests
        # such as the health check wait at most a few of those behind them.
        sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
        await self.journal.open()
        await anyio.to_thread.run_sync(self._sweep_session_dirs)
        for rule in await self.rule_store.load():
            self.rules.add(rule)
        server, health_servicer = self._grpc_server()
        addresses = self._bind(server)
        await server.start()
        for address in addresses:
            if address.startswith("unix://"):
                _chmod_socket(address.removeprefix("unix://"))
        await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        await health_servicer.set(TOOL_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        await health_servicer.set(APPROVAL_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        await health_servicer.set(AUDIT_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        metrics_server: MetricsServer | None = None
        if self.metrics is not None:
            metrics_server = serve_metrics(self.config.metrics_listen, self.metrics.registry)
        log.info(
            "callgate serving",
            extra={"address": ",".join(addresses), "mode": self.sandbox.mode.value},
        )
        try:
            async with anyio.create_task_group() as tasks:
                self.lifecycle.attach_task_group(tasks.start_soon)
                tasks.start_soon(self._sweep_forever)
                tasks.start_soon(self.journal.run_writer)
                if os.getpid() == 1:
                    tasks.start_soon(self._reap_orphans)
                try:
                    yield RunningServer(
                        addresses=tuple(addresses),
                        lifecycle=self.lifecycle,
                        token_dir=self.token_dir,
                        sandbox=self.sandbox,
                        state_dir=self.state_dir,
                        metrics_address=metrics_server.address if metrics_server else None,
                    )
                finally:
                    # Drain while the task group still runs session background tasks.
                    with anyio.CancelScope(shield=True):
                        await self._drain(server, health_servicer)
                    tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self._drain(server, health_servicer)
                if metrics_server is not None:
                    await anyio.to_thread.run_sync(metrics_server.stop)
                self.release()

    async def _reap_orphans(self) -> None:
        """As PID 1 of its PID namespace (the sidecar image), the server inherits every orphan
        in it. bubblewrap's outer process exits with its command's status as soon as the
        sandbox's init reports it, without waiting for that init, which then becomes ours:
        left unreaped, one zombie per sandboxed command until no process can start. Reaped on
        every SIGCHLD (`proctree.reap_orphaned_inits`: inits of nested namespaces only)."""
        with anyio.open_signal_receiver(signal.SIGCHLD) as signals:
            proctree.reap_orphaned_inits()
            async for _ in signals:
                proctree.reap_orphaned_inits()

    async def _drain(
        self, server: grpc.aio.Server, health_servicer: health.aio.HealthServicer
    ) -> None:
        """Graceful stop (idempotent; design section 7): refuse new work at once (UNAVAILABLE /
        SHUTTING_DOWN), give running invocations the grace period, cancel the rest so that
        they answer CANCELLED, close every session (process trees confirmed gone), wait for
        the answers to go out, then commit the journal and close it."""
        if self._drained:
            return
        self._drained = True
        grace = self.config.shutdown_grace_seconds
        log.info(
            "shutting down",
            extra={"detail": f"{self.lifecycle.running_total} running, grace {grace:g} s"},
        )
        self.lifecycle.begin_shutdown()
        self.tool_servicer.begin_shutdown()
        self.audit.begin_shutdown()
        await health_servicer.enter_graceful_shutdown()
        async with anyio.create_task_group() as stopping:
            # Stops accepting connections and RPCs now; returns once every RPC has ended.
            stopping.start_soon(server.stop, grace + ANSWER_SECONDS)
            with anyio.move_on_after(grace):
                await self.lifecycle.wait_idle()
            self.lifecycle.cancel_all()
            await self.lifecycle.close_all()
        # Every command is gone, and its proxy listener with it; end the proxy's thread.
        await anyio.to_thread.run_sync(self.egress.stop)
        await self.journal.aclose()
        log.info("stopped")

    def _connection(self, record: ConnectionRecord) -> None:
        """Journal one connection a sandboxed command asked its proxy for."""
        self.journal.record(
            "network.connection",
            session_id=record.session_id,
            execution_id=record.execution_id,
            data=record.journal_data(),
        )

    def release(self) -> None:
        """Give up the state directory (idempotent; also when the server never ran)."""
        fd = getattr(self, "_lock_fd", None)  # None too if __init__ failed before the lock
        self._lock_fd = None
        if fd is not None:
            os.close(fd)
        limiter = getattr(self, "limiter", None)
        if limiter is not None:
            limiter.close()
        egress = getattr(self, "egress", None)
        if egress is not None:
            egress.stop()

    def __del__(self) -> None:
        self.release()

    def _sweep_session_dirs(self) -> None:
        """Sessions do not survive a restart: remove what a previous run's sessions left in
        the state directory (process output spools), which a crash would otherwise keep."""
        sessions = self.state_dir / "sessions"
        if not sessions.is_dir() or sessions.is_symlink():
            return
        for entry in sessions.iterdir():
            try:
                if entry.is_dir() and not entry.is_symlink():
                    # rmtree does not follow symlinks inside (fd-based on Linux).
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
            except OSError:
                log.warning("could not remove a stale session directory", exc_info=True)

    async def _sweep_forever(self) -> None:
        while True:
            await anyio.sleep(SWEEP_INTERVAL_SECONDS)
            try:
                self.lifecycle.sweep()
                await self.lifecycle.close_idle()
            except Exception:
                # One failed sweep must not end the server (its task group): the next retries.
                log.exception("the sweep of expired calls and idle sessions failed")
