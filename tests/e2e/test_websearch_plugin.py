"""The example plugin (examples/websearch, installed by `make install`) end to end: listed,
prepared, gated, approved, invoked against a search provider served on 127.0.0.1, journaled;
and held to the server's network policy like Fetch."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import grpc
import pytest

from callgate.server.storage.journal import JOURNAL_DB
from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.support.approvals import approver, decide
from tests.support.calls import invoke, open_session, prepare
from tests.support.server import serve
from tests.support.status import failure

pytestmark = pytest.mark.anyio


@dataclass
class Provider:
    """A search provider on 127.0.0.1: answers /search?q=…&n=… with JSON results."""

    url: str
    queries: list[dict[str, list[str]]] = field(default_factory=list)


@pytest.fixture
def provider() -> Iterator[Provider]:
    queries: list[dict[str, list[str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

        def do_GET(self) -> None:
            split = urlsplit(self.path)
            query = parse_qs(split.query)
            queries.append(query)
            count = int(query["n"][0])
            results = [
                {
                    "title": f"Result {i} for {query['q'][0]}",
                    "url": f"https://example.org/{i}",
                    "snippet": f"snippet {i}",
                }
                for i in range(1, count + 1)
            ]
            body = json.dumps({"results": results}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Provider(f"http://127.0.0.1:{server.server_address[1]}/search", queries)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _config(provider: Provider, allow_loopback: bool = True) -> dict[str, Any]:
    config: dict[str, Any] = {
        "tools": {"plugins": ["websearch"], "settings": {"websearch": {"endpoint": provider.url}}}
    }
    if allow_loopback:
        config["fetch"] = {"allow_networks": ["127.0.0.0/8"]}
    return config


def test_the_example_plugin_is_installed() -> None:
    """`make install` installs it; everything below needs it."""
    import callgate_websearch

    assert callgate_websearch.definition.name == "websearch"


async def test_websearch_is_listed_gated_approved_invoked_and_journaled(
    tmp_path: Path, provider: Provider
) -> None:
    async with serve(tmp_path, **_config(provider)) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        listed = await stub.ListTools(tpb.ListToolsRequest(session_id=session))
        (tool,) = [t for t in listed.tools if t.name == "WebSearch"]
        assert tool.annotations.read_only
        assert tool.annotations.open_world
        assert tuple(tool.requirement_kinds) == ("network",)

        call = await prepare(
            stub,
            session,
            "WebSearch",
            {"query": "callgate  plugins", "max_results": 2},
            evaluate=True,
        )
        assert call.state == cpb.STATE_AWAITING_APPROVAL
        (requirement,) = call.requirements
        assert requirement.kind == "network"
        assert requirement.match == "tcp://" + provider.url.split("/")[2]
        assert provider.queries == []  # Prepare has no effect

        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await invoke(stub, session, call.execution_id)
        assert failure(raised.value).reason == "CALL_NOT_APPROVED"
        assert provider.queries == []

        approvals = approver(harness)
        pending = await approvals.GetPendingApproval(
            apb.GetPendingApprovalRequest(execution_id=call.execution_id)
        )
        assert '"callgate plugins"' in pending.approval.call.preview.text
        await decide(approvals, call, apb.DECISION_KIND_APPROVE_ONCE)
        result = (await invoke(stub, session, call.execution_id)).result
        assert not result.is_error, result.text
        assert "Result 1 for callgate plugins" in result.text
        assert "Result 2" in result.text
        assert "Result 3" not in result.text
        assert provider.queries == [{"q": ["callgate plugins"], "n": ["2"]}]

    connection = sqlite3.connect(harness.state_dir / JOURNAL_DB)
    try:
        kinds = [
            row[0]
            for row in connection.execute(
                "SELECT kind FROM events WHERE execution_id = ? ORDER BY seq",
                (call.execution_id,),
            )
        ]
    finally:
        connection.close()
    assert kinds == ["call.prepared", "call.decided", "call.invoked", "call.finished"]


async def test_websearch_obeys_the_network_policy(tmp_path: Path, provider: Provider) -> None:
    """Without [fetch] allow_networks the provider on 127.0.0.1 is an internal address: the
    approved call ends with a tool error and the provider sees nothing."""
    async with serve(tmp_path, **_config(provider, allow_loopback=False)) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        call = await prepare(stub, session, "WebSearch", {"query": "x"}, evaluate=True)
        await decide(approver(harness), call, apb.DECISION_KIND_APPROVE_ONCE)
        result = (await invoke(stub, session, call.execution_id)).result
        assert result.is_error
        assert result.error_code == "address_refused"
    assert provider.queries == []


async def test_websearch_without_its_endpoint_stops_the_start(tmp_path: Path) -> None:
    from callgate.server.core.definitions import DefinitionBuildError

    with pytest.raises(DefinitionBuildError, match="endpoint"):
        async with serve(tmp_path, tools={"plugins": ["websearch"]}):
            pass
