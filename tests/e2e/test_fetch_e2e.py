"""Fetch through the real server: Prepare -> Approve -> Invoke against HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from callgate.v1 import tool_call_pb2
from tests.support.calls import approve, invoke, open_session, prepare, run
from tests.support.http_server import WebServer, web_server
from tests.support.server import Harness, serve

pytestmark = pytest.mark.anyio


@pytest.fixture
def web() -> Iterator[WebServer]:
    with web_server() as server:
        yield server


def allow_port(port: int) -> list[dict[str, str]]:
    return [{"effect": "allow", "kind": "network", "match": f"tcp://127.0.0.1:{port}"}]


@pytest.fixture
async def fetching(tmp_path: Path, web: WebServer) -> AsyncIterator[Harness]:
    """A server that may reach loopback and whose rules allow the web server's port."""
    async with serve(
        tmp_path, fetch={"allow_networks": ["127.0.0.0/8"]}, rules=allow_port(web.port)
    ) as running:
        yield running


async def test_fetch_runs_through_prepare_approve_invoke(fetching: Harness, web: WebServer) -> None:
    """An allowed GET is PREPARED with a network requirement, APPROVED by policy, SUCCEEDED."""
    stub = fetching.stub()
    session = await open_session(stub)
    call = await prepare(stub, session, "Fetch", {"url": web.url("/echo?token=secret")})
    assert call.state == tool_call_pb2.STATE_PREPARED
    assert call.summary == f"GET 127.0.0.1:{web.port}"
    assert [(r.kind, r.match) for r in call.requirements] == [
        ("network", f"tcp://127.0.0.1:{web.port}")
    ]
    assert web.recorded.requests == []  # Prepare fetched nothing
    approved = await approve(stub, session, call.execution_id)
    assert approved.state == tool_call_pb2.STATE_APPROVED
    response = await invoke(stub, session, call.execution_id)
    assert response.call.state == tool_call_pb2.STATE_SUCCEEDED
    assert response.result.text.startswith("HTTP 200 OK\n")
    echoed = json.loads(response.result.text.split("\n\n", 1)[1])
    assert echoed["path"] == "/echo?token=secret"
    assert web.recorded.requests == [("GET", "/echo?token=secret")]


async def test_post_and_not_found_are_normal_results(fetching: Harness, web: WebServer) -> None:
    """A POST round trip and a 404 both succeed at tool level."""
    stub = fetching.stub()
    session = await open_session(stub)
    posted = await run(
        stub, session, "Fetch", {"url": web.url("/echo"), "method": "POST", "body": "hi"}
    )
    assert json.loads(posted.result.text.split("\n\n", 1)[1])["body"] == "hi"
    missing = await run(stub, session, "Fetch", {"url": web.url("/missing")})
    assert missing.call.state == tool_call_pb2.STATE_SUCCEEDED
    assert not missing.result.is_error
    assert missing.result.text.startswith("HTTP 404 Not Found\n")


async def test_redirect_to_another_port_fails_naming_only_that_port(
    fetching: Harness, web: WebServer
) -> None:
    """A redirect off the approved host:port ends the call FAILED with redirect_refused."""
    stub = fetching.stub()
    session = await open_session(stub)
    url = web.url("/redirect?to=http://127.0.0.1:1/x%3Ftoken%3Dsecret")
    response = await run(stub, session, "Fetch", {"url": url})
    assert response.call.state == tool_call_pb2.STATE_FAILED
    assert response.result.error_code == "redirect_refused"
    assert "127.0.0.1:1" in response.result.text
    assert "secret" not in response.result.text


async def test_decimal_loopback_is_canonical_and_refused_without_allow_networks(
    tmp_path: Path,
) -> None:
    """`http://2130706433/` asks for tcp://127.0.0.1:80 and, even when allowed by a rule,
    is refused at run time because loopback is not in fetch.allow_networks."""
    async with serve(tmp_path, rules=allow_port(80)) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        call = await prepare(stub, session, "Fetch", {"url": "http://2130706433/?token=secret"})
        assert [r.match for r in call.requirements] == ["tcp://127.0.0.1:80"]
        assert call.summary == "GET 127.0.0.1:80"
        approved = await approve(stub, session, call.execution_id)
        assert approved.state == tool_call_pb2.STATE_APPROVED
        response = await invoke(stub, session, call.execution_id)
        assert response.call.state == tool_call_pb2.STATE_FAILED
        assert response.result.error_code == "address_refused"
        assert "secret" not in response.result.text
