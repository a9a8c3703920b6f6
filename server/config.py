"""The server's configuration: one TOML file, CALLGATE_* environment overrides, then CLI flags,
validated with pydantic at start. A bad value fails with one line naming the key."""

from __future__ import annotations

import ipaddress
import os
import pwd
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from callgate.server.core.gate import AccessDefaults
from callgate.server.core.principals import Role
from callgate.server.core.rules import Effect, RulePatternError, normalize_pattern

from .net.addresses import Endpoint
from .sandbox.runner import FIXED_ENV_NAMES

_STRICT = ConfigDict(extra="forbid", frozen=True)

DEFAULT_TCP_LISTEN = "127.0.0.1:50051"
STATE_DIR_NAME = "callgate"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ConfigError(Exception):
    """A configuration problem, in one line that names the key."""


def default_state_dir(environ: Mapping[str, str]) -> Path:
    """The per-user state directory, outside any workspace: `$XDG_STATE_HOME/callgate`, else
    `~/.local/state/callgate` (root included: /root/.local/state/callgate). The client's
    `callgate.client.default_state_dir` computes the same place."""
    xdg = environ.get("XDG_STATE_HOME", "")
    if xdg.startswith("/"):  # the XDG spec ignores a relative value
        return Path(xdg) / STATE_DIR_NAME
    home = environ.get("HOME", "")
    if not home.startswith("/"):
        home = pwd.getpwuid(os.geteuid()).pw_dir
    return Path(home) / ".local" / "state" / STATE_DIR_NAME


class RuleConfig(BaseModel):
    """One `[[rules]]` entry; `match` is normalized (canonical paths, lower-case hosts)."""

    model_config = _STRICT

    effect: Effect
    kind: str
    match: str

    def normalized(self) -> str:
        return normalize_pattern(self.kind, self.match)


class PrincipalConfig(BaseModel):
    """A caller. Give exactly one of `token_sha256` (hex SHA-256 of the token) or `token_env`
    (the environment variable that holds the token)."""

    model_config = _STRICT

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$")]
    roles: Annotated[list[Role], Field(min_length=1)]
    token_sha256: Annotated[str | None, Field(pattern=r"^[0-9a-f]{64}$")] = None
    token_env: str | None = None


class LimitsConfig(BaseModel):
    model_config = _STRICT

    max_sessions: Annotated[int, Field(ge=1, le=100_000)] = 64
    max_loops_per_session: Annotated[int, Field(ge=1, le=10_000)] = 64
    max_open_calls_per_session: Annotated[int, Field(ge=1, le=100_000)] = 256
    max_kept_calls_per_session: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    max_running_per_session: Annotated[int, Field(ge=1, le=10_000)] = 16
    max_running_total: Annotated[int, Field(ge=1, le=100_000)] = 64
    max_argument_bytes: Annotated[int, Field(ge=1024, le=3 << 20)] = 1 << 20
    max_message_bytes: Annotated[int, Field(ge=64 << 10, le=64 << 20)] = 4 << 20
    # Memory kept calls may hold (core/retention.py): all calls server-wide, the open calls
    # of one session, and the result an ended call keeps (Invoke returns all of it).
    max_retained_bytes: Annotated[int, Field(ge=8 << 20, le=64 << 30)] = 256 << 20
    max_retained_bytes_per_session: Annotated[int, Field(ge=4 << 20, le=64 << 30)] = 64 << 20
    max_retained_result_bytes: Annotated[int, Field(ge=4 << 10, le=64 << 20)] = 256 << 10
    # Output buffered for one InvokeStream reader, and for all of them; a command whose
    # reader pauses waits for it (as on a terminal). A stream is given up (STREAM_BACKLOG,
    # never the call) only when the server-wide buffer is full.
    stream_buffer_bytes: Annotated[int, Field(ge=64 << 10, le=1 << 30)] = 8 << 20
    stream_buffer_total_bytes: Annotated[int, Field(ge=64 << 10, le=16 << 30)] = 64 << 20
    # The most of each server-wide budget one session may hold (spools, stream buffers, task
    # text), so that one session never refuses the others' work.
    session_share: Annotated[float, Field(gt=0, le=1)] = 0.5
    # Task text every loop's task graph may store together (subjects, descriptions, active
    # forms, metadata; 256 bytes more per task): TaskCreate past a session's share of it is
    # RESOURCE_EXHAUSTED TASK_BUDGET.
    max_task_text_bytes: Annotated[int, Field(ge=1 << 20, le=16 << 30)] = 64 << 20

    @model_validator(mode="after")
    def _retained(self) -> LimitsConfig:
        if self.max_retained_bytes_per_session > self.max_retained_bytes:
            raise ValueError("max_retained_bytes_per_session must not exceed max_retained_bytes")
        if self.stream_buffer_bytes > self.stream_buffer_total_bytes:
            raise ValueError("stream_buffer_bytes must not exceed stream_buffer_total_bytes")
        if self.max_retained_bytes_per_session < 2 * self.max_argument_bytes:
            raise ValueError(
                "max_retained_bytes_per_session must hold at least two calls of "
                "max_argument_bytes (it bounds a session's open calls)"
            )
        return self


class CallsConfig(BaseModel):
    model_config = _STRICT

    ttl_seconds: Annotated[float, Field(gt=0, le=86_400)] = 900.0


class ApprovalConfig(BaseModel):
    model_config = _STRICT

    timeout_seconds: Annotated[float, Field(gt=0, le=86_400)] = 600.0


class SessionsConfig(BaseModel):
    model_config = _STRICT

    # A named session (OpenSessionRequest.name) unused this long (no Prepare, Invoke or
    # reopen) while no call of it runs is closed: its background processes are stopped and its
    # session approvals go.
    idle_seconds: Annotated[float, Field(gt=0, le=30 * 86_400)] = 3600.0


class AskConfig(BaseModel):
    model_config = _STRICT

    # How long AskUser waits for an answer before it fails with no_answer.
    timeout_seconds: Annotated[float, Field(gt=0, le=86_400)] = 600.0


class SkillsConfig(BaseModel):
    """The `[skills]` table: an optional absolute directory of `<name>/SKILL.md` skills,
    offered to every session after (and shadowed by) the workspace's own `.skills`."""

    model_config = _STRICT

    directory: str = ""

    @field_validator("directory")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if value and not value.startswith("/"):
            raise ValueError("the skills directory must be an absolute path (or empty)")
        if "\x00" in value:
            raise ValueError("the skills directory holds a NUL byte")
        return value


class ToolsConfig(BaseModel):
    """Tool caps (design section 5 defaults)."""

    model_config = _STRICT

    read_max_bytes: Annotated[int, Field(ge=1024, le=64 << 20)] = 1 << 20
    read_max_lines: Annotated[int, Field(ge=1, le=1_000_000)] = 2000
    write_max_bytes: Annotated[int, Field(ge=1024, le=64 << 20)] = 1 << 20
    edit_max_bytes: Annotated[int, Field(ge=1024, le=64 << 20)] = 1 << 20
    glob_max_results: Annotated[int, Field(ge=1, le=100_000)] = 500
    grep_max_matches: Annotated[int, Field(ge=1, le=100_000)] = 200
    grep_max_bytes: Annotated[int, Field(ge=1024, le=64 << 20)] = 64 << 10
    grep_timeout_seconds: Annotated[float, Field(gt=0, le=600)] = 30.0
    # The walk of a sandbox's trees for secrets (at any depth, hard links included) and files
    # that run code; past this a command or Grep is refused rather than run half-masked.
    scan_seconds: Annotated[float, Field(gt=0, le=600)] = 5.0
    # The bound on what an approver is shown of a call before deciding it (its preview).
    preview_max_bytes: Annotated[int, Field(ge=1024, le=4 << 20)] = 64 << 10
    # Grep's engine: False (default) walks in the server, through descriptors opened beneath
    # the workspace, with RE2 (no process per call: ~3x the calls/s of a confined ripgrep on
    # small trees); True runs ripgrep confined by bubblewrap, a process per call (faster on
    # very large trees).
    ripgrep: bool = False
    # Tool plugins to load: names of installed `callgate.tools` entry points. An installed
    # plugin that is not named here is never imported.
    plugins: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]] = Field(
        default_factory=list
    )
    # Each definition's own settings, `[tools.settings.<definition name>]` (Service.SETTINGS).
    settings: dict[str, dict[str, Any]] = Field(default_factory=dict)


class ProcessesConfig(BaseModel):
    """Supervised (background) processes: limits and output caps (design section 5)."""

    model_config = _STRICT

    max_running_per_loop: Annotated[int, Field(ge=1, le=1000)] = 8
    max_running_per_session: Annotated[int, Field(ge=1, le=10_000)] = 32
    max_finished_kept: Annotated[int, Field(ge=0, le=100_000)] = 100
    # In-memory ring of the most recent output, per process.
    ring_bytes: Annotated[int, Field(ge=4096, le=256 << 20)] = 1 << 20
    # Append-only spool file of the first output, per process (0: no spool).
    spool_bytes: Annotated[int, Field(ge=0, le=16 << 30)] = 64 << 20
    # All processes' spools together, server-wide; a start finding less than 1 MiB left
    # fails (spool_budget) and a spool reaching it stops (reads report the gap).
    spool_budget_bytes: Annotated[int, Field(ge=1 << 20, le=1 << 40)] = 512 << 20
    # How long one ProcessInput may wait for the process to take its input.
    input_timeout_seconds: Annotated[float, Field(gt=0, le=60)] = 5.0
    # SIGTERM -> SIGKILL grace at a process's timeout, and when its session closes.
    timeout_grace_seconds: Annotated[float, Field(ge=0, le=60)] = 2.0
    close_grace_seconds: Annotated[float, Field(ge=0, le=60)] = 2.0


class BashConfig(BaseModel):
    """The `[bash]` table. `env_passthrough` names server environment variables copied into
    every command's otherwise clean environment (default none); the fixed variables (PATH,
    HOME, TMPDIR, LANG, TERM, PAGER, GIT_PAGER, GIT_TERMINAL_PROMPT) cannot be replaced."""

    model_config = _STRICT

    env_passthrough: list[str] = Field(default_factory=list, max_length=256)
    # Dry runs of pending commands (approvers see what a command would change, and may apply
    # exactly that): "on_request" (an approver asks), "gated" (the server dry-runs every gated
    # command that can have one before a human looks), "off".
    dry_run: Literal["on_request", "gated", "off"] = "on_request"
    dry_run_timeout_seconds: Annotated[float, Field(ge=1, le=600)] = 30.0
    # What one dry run may write (its overlay's size), in bytes.
    dry_run_max_bytes: Annotated[int, Field(ge=1 << 20, le=1 << 34)] = 64 << 20

    @field_validator("env_passthrough")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name[:64]!r} is not an environment variable name")
            if name in FIXED_ENV_NAMES:
                raise ValueError(f"{name} is always set by the server and cannot be passed through")
        return value


def _cidrs(value: list[str]) -> list[str]:
    for item in value:
        ipaddress.ip_network(item, strict=False)
    return value


class FetchConfig(BaseModel):
    """`[fetch]`: `allow_networks` is the older name of `network.allow_networks`."""

    model_config = _STRICT

    allow_networks: list[str] = Field(default_factory=list)

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        return _cidrs(value)


_METHOD = re.compile(r"\A[A-Za-z][A-Za-z-]{0,31}\Z")


class NetworkConfig(BaseModel):
    """The `[network]` table: what Fetch and the sandboxes' egress proxy may reach beyond what
    an approval names (`allow_networks`: internal networks, as CIDRs, that may be reached at
    all), per-endpoint method limits for plain-HTTP requests through the proxy (`methods`:
    `"host:port"` or `"*.domain:port"` to method names), and what one call's commands may do
    through the proxy."""

    model_config = _STRICT

    allow_networks: list[str] = Field(default_factory=list)
    methods: dict[str, list[str]] = Field(default_factory=dict, max_length=1024)
    max_connections_per_call: Annotated[int, Field(ge=1, le=1_000_000)] = 256
    # Each way.
    max_bytes_per_call: Annotated[int, Field(ge=1 << 20, le=1 << 50)] = 4 << 30
    connect_timeout_seconds: Annotated[float, Field(ge=1, le=300)] = 10.0

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        return _cidrs(value)

    @field_validator("methods")
    @classmethod
    def _methods(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for endpoint, methods in value.items():
            Endpoint.parse(endpoint, wildcard=True, any_port=True)
            for method in methods:
                if not _METHOD.match(method):
                    raise ValueError(f"{method[:32]!r} is not an HTTP method such as GET")
        return value


class CommandLimitsConfig(BaseModel):
    """The `[command_limits]` table: what one command (and everything it starts) may use,
    sandboxed or not (sandbox/limits.py). `mechanism`: `auto` (cgroups when the server can
    create them, else rlimits), `cgroup` (refuse to start without), `rlimit`, `none`."""

    model_config = _STRICT

    mechanism: Literal["auto", "cgroup", "rlimit", "none"] = "auto"
    pids: Annotated[int, Field(ge=8, le=1_000_000)] = 512
    memory_bytes: Annotated[int, Field(ge=16 << 20, le=1 << 40)] = 2 << 30
    # Per process (RLIMIT_CPU); a command's wall time is bounded by its timeout.
    cpu_seconds: Annotated[int, Field(ge=1, le=86_400)] = 600
    file_size_bytes: Annotated[int, Field(ge=1 << 20, le=1 << 40)] = 1 << 30


class JournalConfig(BaseModel):
    """The audit journal (`<state_dir>/journal.db`). `normal`: an acknowledged record survives a
    server crash or kill -9; `full`: also a power loss, at about +1 ms per Invoke."""

    model_config = _STRICT

    synchronous: Literal["normal", "full"] = "normal"
    # Free space kept on the state directory's filesystem for the journal: process output
    # spools stop before the disk gets this full.
    reserve_bytes: Annotated[int, Field(ge=0, le=1 << 40)] = 256 << 20


class TlsConfig(BaseModel):
    """TLS for TCP listeners. Required for non-loopback TCP unless `insecure` is true."""

    model_config = _STRICT

    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None
    insecure: bool = False


class ServerConfig(BaseModel):
    """The whole configuration file. Every field has a default: an empty file is valid."""

    model_config = _STRICT

    listen: list[str] = Field(default_factory=list)
    workspace: str = "."
    allowed_roots: list[str] = Field(default_factory=list)
    # Tokens, journal, rules, the default socket and session files; never inside the workspace
    # or an allowed root. Empty: the per-user default (`default_state_dir`).
    state_dir: str = ""
    # host:port for Prometheus /metrics over plain HTTP (no authentication: keep it on
    # loopback or a pod-internal address), e.g. "127.0.0.1:9464". Empty: no metrics.
    metrics_listen: str = ""
    approval_mode: Literal["interactive", "headless"] = "interactive"
    sandbox: Literal["auto", "bwrap", "none"] = "auto"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # On SIGTERM/SIGINT: seconds running invocations get to finish before they are cancelled
    # (their process trees killed and confirmed gone); new work is refused at once.
    shutdown_grace_seconds: Annotated[float, Field(ge=0, le=3600)] = 10.0
    # Secret globs (default DEFAULT_DENIED_GLOBS): refused to every tool, masked in every sandbox.
    denied_paths: list[str] | None = None
    # Globs of files that make programs run code (default DEFAULT_READONLY_GLOBS): read-only
    # to commands, and written by WriteFile/EditFile only with a human's approval.
    readonly_paths: list[str] | None = None
    access: AccessDefaults = Field(default_factory=AccessDefaults)
    rules: list[RuleConfig] = Field(default_factory=list)
    principals: list[PrincipalConfig] = Field(default_factory=list)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    calls: CallsConfig = Field(default_factory=CallsConfig)
    approval: ApprovalConfig = Field(default_factory=ApprovalConfig)
    sessions: SessionsConfig = Field(default_factory=SessionsConfig)
    ask: AskConfig = Field(default_factory=AskConfig)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    processes: ProcessesConfig = Field(default_factory=ProcessesConfig)
    fetch: FetchConfig = Field(default_factory=FetchConfig)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    bash: BashConfig = Field(default_factory=BashConfig)
    tls: TlsConfig = Field(default_factory=TlsConfig)
    journal: JournalConfig = Field(default_factory=JournalConfig)
    command_limits: CommandLimitsConfig = Field(default_factory=CommandLimitsConfig)

    @model_validator(mode="after")
    def _one_allow_networks(self) -> ServerConfig:
        if self.fetch.allow_networks and self.network.allow_networks:
            raise ValueError(
                "fetch.allow_networks is the older name of network.allow_networks; set only "
                "network.allow_networks"
            )
        return self

    def allow_networks(self) -> list[str]:
        """The internal networks Fetch and the egress proxy may reach (either name)."""
        return self.network.allow_networks or self.fetch.allow_networks

    def state_path(self) -> Path:
        """The canonical state directory (symlinks resolved, also when it does not exist yet)."""
        path = Path(self.state_dir).expanduser() if self.state_dir else None
        return (path or default_state_dir(os.environ)).resolve()

    def workspace_path(self) -> Path:
        return Path(self.workspace).expanduser().resolve()

    def listen_addresses(self) -> list[str]:
        if self.listen:
            return list(self.listen)
        return [f"unix://{self.state_path() / 'callgate.sock'}", DEFAULT_TCP_LISTEN]


_ENV_PREFIX = "CALLGATE_"
_LIST_KEYS = {"listen", "allowed_roots", "denied_paths", "readonly_paths"}


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """CALLGATE_KEY=value for top-level keys, CALLGATE_SECTION__KEY=value for table keys.
    List keys take comma-separated values. CALLGATE_CONFIG and CALLGATE_TOKEN are not keys."""
    out: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(_ENV_PREFIX) or name in (
            "CALLGATE_CONFIG",
            "CALLGATE_TOKEN",
            "CALLGATE_TARGET",
        ):
            continue
        path = name[len(_ENV_PREFIX) :].lower().split("__")
        target = out
        for part in path[:-1]:
            target = target.setdefault(part, {})
        key = path[-1]
        target[key] = (
            [v for v in value.split(",") if v] if key in _LIST_KEYS and len(path) == 1 else value
        )
    return out


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(
    path: str | None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServerConfig:
    """Load the TOML file (if any), apply environment overrides, then `overrides` (CLI flags)."""
    data: dict[str, Any] = {}
    if path:
        try:
            with open(path, "rb") as handle:
                data = tomllib.load(handle)
        except OSError as exc:
            raise ConfigError(f"config file {path}: cannot be read ({exc.strerror})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: not valid TOML ({exc})") from None
    environ = os.environ if environ is None else environ
    data = _merge(data, _env_overrides(environ))
    data = _merge(data, overrides or {})
    if not data.get("state_dir"):
        data["state_dir"] = str(default_state_dir(environ))
    try:
        config = ServerConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        key = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ConfigError(f"config key {key}: {first['msg']}") from None
    for index, rule in enumerate(config.rules):
        try:
            rule.normalized()
        except RulePatternError as exc:
            raise ConfigError(f"config key rules.{index}.match: {exc}") from None
    for index, principal in enumerate(config.principals):
        if (principal.token_sha256 is None) == (principal.token_env is None):
            raise ConfigError(
                f"config key principals.{index}: give exactly one of token_sha256 or token_env"
            )
        if principal.token_env in config.bash.env_passthrough:
            raise ConfigError(
                f"config key bash.env_passthrough: {principal.token_env} holds the token of "
                f"principal {principal.name}; remove it so that no command can read the token"
            )
    return config
