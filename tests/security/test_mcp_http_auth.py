"""`callgate mcp --http` from the seat of another local user: no request runs anything without
the bridge's bearer token, the token is private, and the bridge binds loopback only."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest

from callgate.cli.mcp_bridge import is_loopback, parse_http_address
from callgate.v1 import approval_service_pb2 as apb
from tests.support.approvals import approver
from tests.support.mcp_http import (
    bridge_args,
    bridge_env,
    http_bridge,
    mcp_http_session,
    private_file,
)
from tests.support.server import Harness

HTTP_TOKEN = "h" * 43
_PROTOCOL = "2025-06-18"


def _rpc(method: str, params: dict[str, Any], request_id: int | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not None:
        message["id"] = request_id
    return message


def _headers(authorization: str | None, session_id: str = "") -> dict[str, str]:
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    if session_id:
        headers |= {"mcp-session-id": session_id, "mcp-protocol-version": _PROTOCOL}
    if authorization is not None:
        headers["authorization"] = authorization
    return headers


async def _initialized_session(http: httpx.AsyncClient, url: str) -> str:
    """A streamable HTTP session opened with the right token, as the operator's client would."""
    init = _rpc(
        "initialize",
        {
            "protocolVersion": _PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "operator", "version": "1"},
        },
        1,
    )
    good = f"Bearer {HTTP_TOKEN}"
    response = await http.post(url, json=init, headers=_headers(good))
    assert response.status_code == 200, response.text
    session_id = response.headers["mcp-session-id"]
    notified = await http.post(
        url, json=_rpc("notifications/initialized", {}), headers=_headers(good, session_id)
    )
    assert notified.status_code == 202, notified.text
    return session_id


async def _allow_writes(harness: Harness) -> None:
    """A workspace rule lets WriteFile run at once, so a call that got through leaves a file."""
    root = os.path.realpath(harness.workspace)
    await approver(harness).CreateRule(
        apb.CreateRuleRequest(
            effect=apb.RULE_EFFECT_ALLOW,
            kind="filesystem.write",
            match=f"tree:{root}",
            scope=f"workspace:{root}",
        )
    )


def _authorizations(harness: Harness) -> dict[str, str | None]:
    return {
        "none": None,
        "wrong": "Bearer " + "x" * 43,
        "basic": "Basic " + base64.b64encode(f"mcp:{HTTP_TOKEN}".encode()).decode(),
        "agent-token": f"Bearer {harness.tokens['agent']}",
        "empty-bearer": "Bearer",
        "prefix": f"Bearer {HTTP_TOKEN[:-1]}",
    }


@pytest.mark.anyio
@pytest.mark.parametrize(
    "variant", ["none", "wrong", "basic", "agent-token", "empty-bearer", "prefix"]
)
async def test_request_without_the_bridge_token_is_401_and_runs_nothing(
    harness: Harness, tmp_path: Path, variant: str
) -> None:
    """No, a wrong, a Basic, or the agent's token: 401 with `WWW-Authenticate: Bearer`, and a
    tools/call on a live session does not run."""
    await _allow_writes(harness)
    token_file = private_file(tmp_path / "http-token", HTTP_TOKEN)
    args = bridge_args(harness, tmp_path, "--http", "127.0.0.1:0", "--http-token-file")
    authorization = _authorizations(harness)[variant]
    async with (
        http_bridge([*args, str(token_file)]) as (url, _),
        httpx.AsyncClient(timeout=20) as http,
    ):
        session_id = await _initialized_session(http, url)
        call = _rpc(
            "tools/call",
            {"name": "WriteFile", "arguments": {"path": "pwned.txt", "content": "x\n"}},
            2,
        )
        attempts = [
            http.build_request("POST", url, json=call, headers=_headers(authorization, session_id)),
            http.build_request("POST", url, json=call, headers=_headers(authorization)),
            http.build_request("GET", url, headers=_headers(authorization, session_id)),
            http.build_request("DELETE", url, headers=_headers(authorization, session_id)),
        ]
        for request in attempts:
            with anyio.fail_after(20):
                response = await http.send(request, stream=True)
                await response.aclose()
            assert response.status_code == 401, request.method
            assert response.headers["www-authenticate"].startswith("Bearer ")
            assert not (harness.workspace / "pwned.txt").exists()
        # The session the attacker aimed at still works for the token holder.
        granted = await http.post(
            url, json=call, headers=_headers(f"Bearer {HTTP_TOKEN}", session_id)
        )
        assert granted.status_code == 200, granted.text
    assert (harness.workspace / "pwned.txt").read_text() == "x\n"


@pytest.mark.anyio
async def test_right_token_initializes_and_calls_tools_end_to_end(
    harness: Harness, tmp_path: Path
) -> None:
    """The MCP SDK client sending the bridge token initializes, lists and calls tools."""
    (harness.workspace / "hello.txt").write_text("hello with a token\n")
    token_file = private_file(tmp_path / "http-token", HTTP_TOKEN)
    args = bridge_args(harness, tmp_path, "--http", "127.0.0.1:0", "--http-token-file")
    async with (
        http_bridge([*args, str(token_file)]) as (url, _),
        mcp_http_session(url, HTTP_TOKEN) as session,
    ):
        with anyio.fail_after(20):
            listed = await session.list_tools()
            result = await session.call_tool("ReadFile", {"path": "hello.txt"})
    assert "ReadFile" in {tool.name for tool in listed.tools}
    assert not result.is_error
    text = "".join(b.text for b in result.content if isinstance(b, types.TextContent))
    assert "hello with a token" in text


@pytest.mark.anyio
async def test_generated_token_is_private_reused_and_never_printed(
    harness: Harness, tmp_path: Path
) -> None:
    """With no token given, `--http PORT` binds 127.0.0.1 and generates a 0600 token file in
    the state directory's tokens; stderr names the file, not the token; a restart reuses it."""
    args = bridge_args(harness, tmp_path, "--state-dir", str(harness.state_dir), "--http", "0")
    token_file = harness.state_dir / "tokens" / "mcp-http"
    async with http_bridge(args) as (url, stderr):
        assert url.startswith("http://127.0.0.1:")
        assert token_file.stat().st_mode & 0o777 == 0o600
        generated = token_file.read_text().strip()
        assert len(generated) >= 32
        assert generated != harness.tokens["agent"]
        assert str(token_file) in stderr
        assert generated not in stderr
        async with mcp_http_session(url, generated) as session:
            with anyio.fail_after(20):
                await session.list_tools()
    async with (
        http_bridge(args) as (url, stderr),
        mcp_http_session(url, generated) as session,
    ):
        with anyio.fail_after(20):
            await session.list_tools()
        assert generated not in stderr


@pytest.mark.anyio
async def test_token_from_the_environment_is_the_one_accepted(
    harness: Harness, tmp_path: Path
) -> None:
    """`$CALLGATE_MCP_TOKEN` is the token; the state directory gets no generated file."""
    args = bridge_args(harness, tmp_path, "--state-dir", str(harness.state_dir), "--http", ":0")
    env = bridge_env(CALLGATE_MCP_TOKEN=HTTP_TOKEN)
    async with (
        http_bridge(args, env) as (url, _),
        mcp_http_session(url, HTTP_TOKEN) as session,
        httpx.AsyncClient(timeout=20) as http,
    ):
        with anyio.fail_after(20):
            await session.list_tools()
            wrong = await http.post(url, json={}, headers=_headers("Bearer " + "y" * 43))
    assert wrong.status_code == 401
    assert not (harness.state_dir / "tokens" / "mcp-http").exists()


async def _refused(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    with anyio.fail_after(20):
        done = await anyio.run_process(args, check=False, env=env or bridge_env())
    return done.returncode, done.stderr.decode(errors="replace")


@pytest.mark.anyio
@pytest.mark.parametrize("address", ["0.0.0.0:0", "[::]:0", "example.com:8765"])
async def test_non_loopback_address_is_refused_without_allow_remote(
    harness: Harness, tmp_path: Path, address: str
) -> None:
    """A host that is not a loopback address exits 2 naming --http-allow-remote."""
    code, stderr = await _refused(bridge_args(harness, tmp_path, "--http", address))
    assert code == 2
    assert "--http-allow-remote" in stderr
    assert "mcp serving on" not in stderr


@pytest.mark.anyio
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
async def test_token_file_open_to_others_is_refused(
    harness: Harness, tmp_path: Path, mode: int
) -> None:
    """A token file other users can read or write exits 2 naming `chmod 600`."""
    token_file = private_file(tmp_path / "http-token", HTTP_TOKEN, mode)
    args = bridge_args(harness, tmp_path, "--http", "0", "--http-token-file", str(token_file))
    code, stderr = await _refused(args)
    assert code == 2
    assert f"chmod 600 {token_file}" in stderr
    assert HTTP_TOKEN not in stderr


@pytest.mark.anyio
@pytest.mark.parametrize("source", ["file", "env"])
async def test_agent_token_is_refused_as_the_http_token(
    harness: Harness, tmp_path: Path, source: str
) -> None:
    """The bridge's own agent token can never be the token HTTP clients send."""
    args = bridge_args(harness, tmp_path, "--http", "0")
    env = bridge_env()
    if source == "file":
        args += ["--http-token-file", str(tmp_path / "agent-token")]
    else:
        env["CALLGATE_MCP_TOKEN"] = harness.tokens["agent"]
    code, stderr = await _refused(args, env)
    assert code == 2
    assert "agent token" in stderr
    assert harness.tokens["agent"] not in stderr


@pytest.mark.anyio
async def test_short_token_is_refused(harness: Harness, tmp_path: Path) -> None:
    """A guessable operator token (under 32 characters) exits 2."""
    args = bridge_args(harness, tmp_path, "--http", "0")
    code, _ = await _refused(args, bridge_env(CALLGATE_MCP_TOKEN="hunter2"))
    assert code == 2


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("8765", ("127.0.0.1", 8765)),
        (":8765", ("127.0.0.1", 8765)),
        ("localhost:8765", ("127.0.0.1", 8765)),
        ("[::1]:8765", ("::1", 8765)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),  # noqa: S104 - parsed, never bound
    ],
)
def test_http_address_without_a_host_means_loopback(
    address: str, expected: tuple[str, int]
) -> None:
    """A bare port (or `:PORT`, `localhost`) is 127.0.0.1; an explicit host is kept."""
    assert parse_http_address(address) == expected


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("0.0.0.0", False),  # noqa: S104 - a value under test, never bound
        ("::", False),
        ("::ffff:127.0.0.1", False),
        ("localhost", False),
        ("10.0.0.1", False),
    ],
)
def test_only_literal_loopback_addresses_count_as_loopback(host: str, loopback: bool) -> None:
    """Names are not trusted to resolve to loopback; the IPv4-mapped form is refused."""
    assert is_loopback(host) is loopback
