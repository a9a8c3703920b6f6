"""The connection to a callgate server: the channel, its credentials, and opening sessions."""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Final, Self

import anyio
import grpc

from callgate.client.approvals import Approvals
from callgate.client.audit import Audit
from callgate.client.conversion import session_from_proto, tool_spec_from_proto
from callgate.client.exchange import Exchange
from callgate.client.models import Session, ToolSpec
from callgate.client.session import ClientSession
from callgate.client.transport import Transport
from callgate.v1 import (
    approval_service_pb2_grpc,
    audit_service_pb2_grpc,
    tool_service_pb2,
    tool_service_pb2_grpc,
)

if TYPE_CHECKING:
    from callgate.v1.tool_service_pb2_grpc import ToolServiceAsyncStub

__all__ = [
    "MAX_MESSAGE_BYTES",
    "CallgateClient",
    "OpeningSession",
    "default_state_dir",
    "default_token",
]

MAX_MESSAGE_BYTES: Final = 4 * 1024 * 1024
"""The largest message sent or received, the same as the server's limit."""

_SERVICE: Final = "callgate.v1.ToolService"
_APPROVAL_SERVICE: Final = "callgate.v1.ApprovalService"

# Retried on UNAVAILABLE by the channel. Safe because no retry can repeat an effect: Invoke
# is single-use on the server (a retry gets the original result with the same request ID,
# CALL_ALREADY_INVOKED without one) and Prepare has no effect. OpenSession and OpenLoop are
# left out: a retry after a lost answer would leave an orphan session or loop.
_RETRIED_METHODS: Final = (
    "CloseSession",
    "GetSession",
    "ListTools",
    "Prepare",
    "Approve",
    "Invoke",
    "InvokeStream",
    "GetCall",
    "ListCalls",
    "CancelCall",
    "WatchCall",
)

# Reads only. Decide, Answer and CreateRule are left out: a retry after a lost answer would
# be refused (already decided) or would create a second rule.
_RETRIED_APPROVAL_METHODS: Final = ("WatchApprovals", "ListRules")


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where `callgate serve` keeps its state (tokens, socket) when not told otherwise:
    `$CALLGATE_STATE_DIR`, else `$XDG_STATE_HOME/callgate`, else `~/.local/state/callgate`."""
    env = os.environ if environ is None else environ
    if env.get("CALLGATE_STATE_DIR"):
        return Path(env["CALLGATE_STATE_DIR"]).expanduser()
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg.startswith("/"):  # the XDG spec ignores a relative value
        return Path(xdg) / "callgate"
    home = env.get("HOME", "")
    if not home.startswith("/"):
        home = pwd.getpwuid(os.geteuid()).pw_dir
    return Path(home) / ".local" / "state" / "callgate"


def default_token(state_dir: str | os.PathLike[str] | None = None, role: str = "agent") -> str:
    """The token the server created for `role` ("agent", "approver" or "admin") in
    `<state_dir>/tokens/<role>` on first start (state_dir: `default_state_dir()`)."""
    directory = default_state_dir() if state_dir is None else Path(state_dir)
    return _read_token(directory / "tokens" / role)


def _read_token(path: Path) -> str:
    token = path.read_text(encoding="utf-8").strip()
    if not token:
        raise ValueError(f"The token file {path} is empty; write the token into it.")
    return token


def _checked_token(token: str) -> str:
    # gRPC rejects such metadata values only when the first call is sent, with an obscure
    # error; saying so at construction names the actual problem.
    if not token or not token.isascii() or not token.isprintable() or " " in token:
        raise ValueError("The token must be non-empty printable ASCII without spaces.")
    return token


def _service_config(max_attempts: int) -> str:
    retry_policy = {
        "maxAttempts": max_attempts,
        "initialBackoff": "0.1s",
        "maxBackoff": "2s",
        "backoffMultiplier": 2,
        "retryableStatusCodes": ["UNAVAILABLE"],
    }
    names = [{"service": _SERVICE, "method": method} for method in _RETRIED_METHODS] + [
        {"service": _APPROVAL_SERVICE, "method": method} for method in _RETRIED_APPROVAL_METHODS
    ]
    return json.dumps({"methodConfig": [{"name": names, "retryPolicy": retry_policy}]})


class OpeningSession:
    """What `open_session` returns: `await` it for a session, or `async with` it to also
    close the session on exit."""

    def __init__(self, opener: Callable[[], Coroutine[object, object, ClientSession]]) -> None:
        self._opener = opener
        self._session: ClientSession | None = None

    def __await__(self) -> Generator[object, None, ClientSession]:
        return self._opener().__await__()

    async def __aenter__(self) -> ClientSession:
        self._session = await self._opener()
        return self._session

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.__aexit__(exc_type, exc, traceback)


class CallgateClient:
    """An async client of callgate's ToolService; use it as `async with CallgateClient(...)`.

    `target` is `unix:///path/to.sock` or `host:port`. The token (given, or read from
    `token_file`) is sent as `authorization: Bearer <token>` on every call. TLS is used when
    `tls` is set or any certificate is given (`root_certificates` to trust a private CA,
    `private_key` and `certificate_chain` for mutual TLS). Calls that cannot repeat an
    effect are retried on UNAVAILABLE up to `max_attempts` times in all (1 turns retries off).

    With `exchange` (the default) the lifecycle operations (prepare, approve, invoke,
    get_call, cancel) travel over one Exchange stream per client instead of one RPC each,
    which roughly halves their latency; against a server without Exchange the client falls
    back to the unary RPCs by itself. `session.run` sends one message for a call the policy
    allows (`PrepareRequest.invoke`: prepared, decided and run in one round trip). If the
    stream breaks, operations waiting on it fail with
    `ServerUnavailableError` (with retries on, one that cannot repeat an effect is first sent
    once more on a new stream), and the next operation opens a new stream.
    """

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        tls: bool = False,
        root_certificates: bytes | None = None,
        private_key: bytes | None = None,
        certificate_chain: bytes | None = None,
        max_attempts: int = 3,
        channel_options: Sequence[tuple[str, str | int]] = (),
        exchange: bool = True,
    ) -> None:
        if token is not None and token_file is not None:
            raise ValueError("Give either token or token_file, not both.")
        if not 1 <= max_attempts <= 5:
            raise ValueError("max_attempts must be between 1 and 5 (gRPC's own cap).")
        if token_file is not None:
            token = _read_token(Path(token_file))
        metadata = [] if token is None else [("authorization", f"Bearer {_checked_token(token)}")]
        self._target = target
        self._metadata = tuple(metadata)
        self._exchange = exchange
        self._max_attempts = max_attempts
        self._credentials: grpc.ChannelCredentials | None = None
        if tls or root_certificates or private_key or certificate_chain:
            self._credentials = grpc.ssl_channel_credentials(
                root_certificates, private_key, certificate_chain
            )
        options: list[tuple[str, str | int]] = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            # Its own connection: by default grpc shares one between channels with the same
            # target and options, so a client made after the server restarted would inherit
            # the old connection's failure and reconnect backoff (UNAVAILABLE for seconds).
            ("grpc.use_local_subchannel_pool", 1),
        ]
        if max_attempts > 1:
            options += [
                ("grpc.enable_retries", 1),
                ("grpc.service_config", _service_config(max_attempts)),
            ]
        self._options = [*options, *channel_options]
        self._channel: grpc.aio.Channel | None = None
        self._stub_or_none: ToolServiceAsyncStub | None = None
        self._transport_or_none: Transport | None = None
        self._approvals_or_none: Approvals | None = None
        self._audit_or_none: Audit | None = None

    @property
    def target(self) -> str:
        """The address this client connects to."""
        return self._target

    async def __aenter__(self) -> Self:
        # The channel is made here, inside the running event loop that grpc.aio binds it to.
        if self._channel is None:
            if self._credentials is None:
                self._channel = grpc.aio.insecure_channel(self._target, options=self._options)
            else:
                self._channel = grpc.aio.secure_channel(
                    self._target, self._credentials, options=self._options
                )
            stub = tool_service_pb2_grpc.ToolServiceStub(self._channel)
            metadata = self._metadata
            exchange = None
            if self._exchange:
                exchange = Exchange(lambda: stub.Exchange(metadata=metadata))
            self._stub_or_none = stub
            self._transport_or_none = Transport(metadata, exchange, resend=self._max_attempts > 1)
            self._approvals_or_none = Approvals(
                approval_service_pb2_grpc.ApprovalServiceStub(self._channel),
                self._transport_or_none,
            )
            self._audit_or_none = Audit(
                audit_service_pb2_grpc.AuditServiceStub(self._channel), self._transport_or_none
            )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the channel, cancelling RPCs still in flight. Sessions stay open on the server."""
        channel, self._channel, self._stub_or_none = self._channel, None, None
        transport, self._transport_or_none = self._transport_or_none, None
        self._approvals_or_none = None
        self._audit_or_none = None
        # Shielded: a caller cancelled while leaving `async with` must still release both.
        with anyio.CancelScope(shield=True):
            if transport is not None:
                await transport.close()
            if channel is not None:
                await channel.close()

    @property
    def _stub(self) -> ToolServiceAsyncStub:
        if self._stub_or_none is None:
            raise RuntimeError(
                "The client is not open; use it as `async with CallgateClient(...)`."
            )
        return self._stub_or_none

    @property
    def _transport(self) -> Transport:
        if self._transport_or_none is None:
            raise RuntimeError(
                "The client is not open; use it as `async with CallgateClient(...)`."
            )
        return self._transport_or_none

    @property
    def approvals(self) -> Approvals:
        """ApprovalService: pending approvals and questions, decisions, rules. Needs a token
        of a principal with the approver role (`<state_dir>/tokens/approver`)."""
        if self._approvals_or_none is None:
            raise RuntimeError(
                "The client is not open; use it as `async with CallgateClient(...)`."
            )
        return self._approvals_or_none

    @property
    def audit(self) -> Audit:
        """AuditService: the audit journal, listed or followed. Needs a token of a principal
        with the approver role (`<state_dir>/tokens/approver`) or admin."""
        if self._audit_or_none is None:
            raise RuntimeError(
                "The client is not open; use it as `async with CallgateClient(...)`."
            )
        return self._audit_or_none

    def open_session(
        self,
        workspace: str | os.PathLike[str] = "",
        labels: Mapping[str, str] | None = None,
        name: str = "",
    ) -> OpeningSession:
        """Opens a session on `workspace` (empty: the server's default workspace).

        With a `name`, the principal's open session of that name is reopened as it was (its
        read state, processes, tasks and session approvals), or a new one is opened under it;
        it lives until closed, idle past the server's limit, or the server restarts.
        `session = await client.open_session()` leaves closing to the caller;
        `async with client.open_session() as session:` closes it on exit.
        """
        stub, transport = self._stub, self._transport
        request = tool_service_pb2.OpenSessionRequest(
            workspace=os.fspath(workspace), labels=dict(labels or {}), name=name
        )

        async def opener() -> ClientSession:
            response = await transport.unary(stub.OpenSession, request)
            return ClientSession(stub, transport, session_from_proto(response.session))

        return OpeningSession(opener)

    async def list_sessions(self) -> list[Session]:
        """This principal's open sessions, oldest first."""
        response = await self._transport.unary(
            self._stub.ListSessions, tool_service_pb2.ListSessionsRequest()
        )
        return [session_from_proto(session) for session in response.sessions]

    async def get_session(self, session_id: str) -> ClientSession:
        """Attaches to a session this principal opened earlier."""
        stub = self._stub
        response = await self._transport.unary(
            stub.GetSession, tool_service_pb2.GetSessionRequest(session_id=session_id)
        )
        return ClientSession(stub, self._transport, session_from_proto(response.session))

    async def tools(self, session_id: str) -> list[ToolSpec]:
        """The tools a session offers, with their argument schemas."""
        response = await self._transport.unary(
            self._stub.ListTools, tool_service_pb2.ListToolsRequest(session_id=session_id)
        )
        return [tool_spec_from_proto(tool) for tool in response.tools]
