"""`callgate mcp`: an MCP server that fronts one callgate session.

An MCP client (an IDE, an agent framework) sees callgate's tools as MCP tools:

- `tools/list` is the session's ListTools: names, descriptions, argument JSON Schemas, and
  MCP annotations (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`) as
  each tool's definition declares them (`ToolInfo.annotations`).
- `tools/call` is Prepare -> Approve -> Invoke (`ClientSession.run`). A gated call waits
  for a human through callgate's approval channel (ApprovalService: `callgate approvals`
  or any other approver), at most `approval_timeout` seconds.

Two error planes, as MCP asks: a call that was denied, timed out waiting for an approver,
had invalid arguments, or ran and failed is a tool result with `isError: true` whose text
says why; an unknown tool or a callgate server that cannot be reached is a protocol error.

Elicitation is not used: approvals always go through callgate's approval channel, so one
call is never asked about in two places.

Over HTTP every request needs `Authorization: Bearer <token>` (see `mcp_token`): without it, or
with another token, the SDK's bearer middleware answers 401 before anything runs. The bridge
binds loopback unless the caller allows a remote address.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from collections.abc import Mapping
from typing import Any, Final

import mcp_types as types
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from pydantic import AnyHttpUrl

from callgate.client.connection import CallgateClient
from callgate.client.errors import (
    ApprovalTimeoutError,
    CallDeniedError,
    CallgateClientError,
    InvalidArgumentsError,
    ToolNotFoundError,
)
from callgate.client.models import ToolResult, ToolSpec
from callgate.client.session import ClientSession

from .mcp_token import StaticTokenVerifier, check_http_token

__all__ = [
    "DEFAULT_APPROVAL_TIMEOUT",
    "LOOPBACK",
    "McpBridge",
    "is_loopback",
    "parse_http_address",
    "serve_http",
    "serve_stdio",
    "tool_annotations",
]

DEFAULT_APPROVAL_TIMEOUT: Final = 600.0
"""How long a gated call waits for an approver by default, in seconds."""

_MCP_PATH: Final = "/mcp"

LOOPBACK: Final = "127.0.0.1"
"""Where `--http` binds when the address names no host."""

# JSON-RPC codes (MCP uses the JSON-RPC 2.0 ones).
_INVALID_PARAMS: Final = -32602
_INTERNAL_ERROR: Final = -32603


def tool_annotations(spec: ToolSpec) -> types.ToolAnnotations:
    """The MCP hints for a tool: the annotations its definition declares (ToolInfo)."""
    hints = spec.annotations
    return types.ToolAnnotations(
        read_only_hint=hints.read_only,
        destructive_hint=None if hints.read_only else hints.destructive,
        idempotent_hint=hints.idempotent,
        open_world_hint=hints.open_world,
    )


def _error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _call_result(result: ToolResult) -> types.CallToolResult:
    """A callgate tool result as an MCP one: text, structured content when it is a JSON
    object (MCP before 2026-07-28 allows nothing else), and the error flag."""
    text = result.text
    if result.is_error and not text:
        text = f"The tool failed ({result.error_code or 'no error code'})."
    structured = result.parsed_json()
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content=structured if isinstance(structured, dict) else None,
        is_error=result.is_error,
    )


class McpBridge:
    """The MCP handlers over one callgate session."""

    def __init__(
        self, session: ClientSession, approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT
    ) -> None:
        if approval_timeout < 0:
            raise ValueError("approval_timeout must be zero or more seconds")
        self._session = session
        self._approval_timeout = approval_timeout

    def server(self) -> Server[Any]:
        """A low-level MCP server whose tools are the session's."""
        return Server(
            "callgate",
            instructions="Tools run through callgate's policy gate; a gated call waits for "
            "a human approver, and a denied call returns an error result with the reason.",
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """`tools/list`: the session's tools, all on one page."""
        try:
            specs = await self._session.tools()
        except CallgateClientError as exc:
            raise _protocol_error(exc) from exc
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=spec.name,
                    description=spec.description,
                    input_schema=dict(spec.input_schema),
                    annotations=tool_annotations(spec),
                )
                for spec in specs
            ]
        )

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """`tools/call`: Prepare -> Approve (waiting for a human if gated) -> Invoke."""
        arguments: Mapping[str, object] = params.arguments or {}
        try:
            result = await self._session.run(params.name, arguments, wait=self._approval_timeout)
        except CallDeniedError as exc:
            description = exc.denial.description or "no reason was given"
            return _error_result(f"callgate denied the call ({exc.kind}): {description}")
        except ApprovalTimeoutError as exc:
            return _error_result(exc.message)
        except InvalidArgumentsError as exc:
            detail = "; ".join(f"{field}: {text}" for field, text in exc.violations)
            return _error_result(
                exc.message + (f" ({detail})" if detail and detail not in exc.message else "")
            )
        except CallgateClientError as exc:
            raise _protocol_error(exc) from exc
        return _call_result(result)


def _protocol_error(exc: CallgateClientError) -> MCPError:
    code = _INVALID_PARAMS if isinstance(exc, ToolNotFoundError) else _INTERNAL_ERROR
    return MCPError(code, f"callgate: {exc.reason or exc.code}: {exc.message}")


def parse_http_address(address: str) -> tuple[str, int]:
    """`PORT`, `:PORT`, `HOST:PORT` or `[V6]:PORT` split, with no host (or `localhost`)
    meaning 127.0.0.1; raises ValueError on anything else."""
    host, _, port = address.rpartition(":")
    if not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected PORT or HOST:PORT, got {address!r}")
    host = host.removeprefix("[").removesuffix("]")
    return (LOOPBACK if host in ("", "localhost") else host), int(port)


def is_loopback(host: str) -> bool:
    """Whether `host` is a literal loopback address (a name never is: it may resolve anywhere)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def serve_stdio(
    target: str,
    token: str,
    *,
    workspace: str = "",
    approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
) -> None:
    """Serves MCP on stdin/stdout until stdin closes, over one session on `target`."""
    async with (
        CallgateClient(target, token=token) as client,
        client.open_session(workspace) as session,
    ):
        server = McpBridge(session, approval_timeout).server()
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


async def serve_http(
    target: str,
    token: str,
    address: str,
    *,
    http_token: str,
    allow_remote: bool = False,
    workspace: str = "",
    approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
) -> None:
    """Serves MCP over streamable HTTP at `http://<address>/mcp` until interrupted, to clients
    that send `Authorization: Bearer <http_token>`.

    Port 0 picks a free port; the address actually bound is printed to stderr. A host that is
    not a loopback address is refused unless `allow_remote` (TLS is then a reverse proxy's job).
    """
    import uvicorn

    host, port = parse_http_address(address)
    if not allow_remote and not is_loopback(host):
        raise ValueError(f"{host} is not a loopback address and remote clients were not allowed")
    check_http_token(http_token, token)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        # Listening before the address is printed: a client that connects at once waits in
        # the backlog for uvicorn instead of being refused.
        listener.listen()
        bound_port = listener.getsockname()[1]
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        base_url = f"http://{shown}:{bound_port}"
        async with (
            CallgateClient(target, token=token) as client,
            client.open_session(workspace) as session,
        ):
            app = (
                McpBridge(session, approval_timeout)
                .server()
                .streamable_http_app(
                    streamable_http_path=_MCP_PATH,
                    host=host,
                    # AuthSettings insists on an issuer; the bridge issued the token, and with
                    # no authorization server and no resource metadata the URL is never served.
                    auth=AuthSettings(issuer_url=AnyHttpUrl(base_url), resource_server_url=None),
                    token_verifier=StaticTokenVerifier(http_token),
                )
            )
            print(
                f"callgate: mcp serving on {base_url}{_MCP_PATH}",
                file=sys.stderr,
                flush=True,
            )
            config = uvicorn.Config(app, log_level="warning", lifespan="on")
            await uvicorn.Server(config).serve(sockets=[listener])
    finally:
        listener.close()
