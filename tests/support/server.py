"""A real callgate server for tests: grpc.aio on 127.0.0.1:0 and a Unix socket, real files."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from callgate.server.app import App, RunningServer
from callgate.server.config import load_config
from callgate.server.tools.registry import AnyTool
from callgate.v1 import tool_service_pb2_grpc

if TYPE_CHECKING:
    from callgate.v1.tool_service_pb2_grpc import ToolServiceAsyncStub

Metadata = tuple[tuple[str, str], ...]


class _AuthMetadata:
    def __init__(self, token: str | None) -> None:
        self._metadata: Metadata = (("authorization", f"Bearer {token}"),) if token else ()

    def details(self, details: Any) -> Any:
        metadata = tuple(details.metadata or ()) + self._metadata
        return details._replace(metadata=metadata)


# grpc.aio files each interceptor under the first interceptor type it matches, so unary and
# streaming calls need separate objects.
class _UnaryAuth(_AuthMetadata, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        return await continuation(self.details(details), request)


class _StreamAuth(_AuthMetadata, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        return await continuation(self.details(details), request)


class _BidiAuth(_AuthMetadata, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(
        self, continuation: Callable[..., Any], details: Any, request_iterator: Any
    ) -> Any:
        return await continuation(self.details(details), request_iterator)


@dataclass
class Harness:
    """A running server plus what tests need to talk to it."""

    running: RunningServer
    app: App
    workspace: Path
    state_dir: Path
    tokens: dict[str, str]
    channels: list[grpc.aio.Channel]

    @property
    def tcp_target(self) -> str:
        return next(a for a in self.running.addresses if not a.startswith("unix://"))

    @property
    def unix_target(self) -> str:
        return next(a for a in self.running.addresses if a.startswith("unix://"))

    def channel(
        self, role: str | None = "agent", token: str | None = None, unix: bool = False
    ) -> grpc.aio.Channel:
        """A channel that sends the given role's token (or `token`; role None: no token)."""
        secret = token if token is not None else (self.tokens[role] if role else None)
        target = self.unix_target if unix else self.tcp_target
        channel = grpc.aio.insecure_channel(
            target.replace("unix://", "unix:") if unix else target,
            interceptors=[_UnaryAuth(secret), _StreamAuth(secret), _BidiAuth(secret)],
        )
        self.channels.append(channel)
        return channel

    def stub(
        self, role: str | None = "agent", token: str | None = None, unix: bool = False
    ) -> ToolServiceAsyncStub:
        return tool_service_pb2_grpc.ToolServiceStub(self.channel(role, token, unix))


@asynccontextmanager
async def serve(
    tmp_path: Path, extra_tools: Iterable[AnyTool] = (), **overrides: Any
) -> AsyncIterator[Harness]:
    """Start a server with a fresh workspace and state dir under `tmp_path`, offering
    `extra_tools` (test tools such as `Slow`) besides its own; `overrides` are config keys."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    state_dir = tmp_path / "state"
    sock_dir = Path(tempfile.mkdtemp(prefix="cg", dir="/tmp"))  # short: AF_UNIX paths max 107 bytes
    settings: dict[str, Any] = {
        "listen": ["127.0.0.1:0", f"unix://{sock_dir}/s.sock"],
        "workspace": str(workspace),
        "state_dir": str(state_dir),
        "sandbox": "none",
    }
    settings.update(overrides)
    config = load_config(None, settings, environ={})
    app = App(config)
    for tool in extra_tools:
        app.tools.register(tool)
    channels: list[grpc.aio.Channel] = []
    try:
        async with app.running() as running:
            assert running.token_dir is not None
            tokens = {
                role: (running.token_dir / role).read_text().strip()
                for role in ("agent", "approver", "admin")
            }
            harness = Harness(running, app, workspace, state_dir, tokens, channels)
            try:
                yield harness
            finally:
                for channel in channels:
                    await channel.close()
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
