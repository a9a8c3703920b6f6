"""A command approved for one host reaches that host and nothing else (issue: approving one
host opened the whole network). The agent's seat: a policy that allows its commands and one
network target, `127.0.0.1:P`; its commands then try every other way out: the proxy for another
port, `curl --noproxy '*'`, bash's /dev/tcp, a raw socket, UDP, and DNS. Each probe's target
counts what reached it, so a test sees that nothing arrived, not only that a command failed."""

from __future__ import annotations

import shlex
from pathlib import Path

import anyio
import pytest

from callgate.v1 import tool_call_pb2
from tests.support.calls import invoke, open_session, prepare
from tests.support.egress import counting_server, udp_sink
from tests.support.sandbox import bwrap_only
from tests.support.server import Harness, serve

pytestmark = [pytest.mark.anyio, *bwrap_only]

BOUND = 60.0
LOOPBACK = {"allow_networks": ["127.0.0.0/8"]}
RAW_TCP = (
    "import socket,sys\n"
    "try:\n"
    " socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3); print('raw-connected')\n"
    "except OSError as e: print('raw-refused', e.errno)\n"
)
UDP = (
    "import socket,sys\n"
    "s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "try:\n"
    " s.sendto(b'leak', ('127.0.0.1', int(sys.argv[1]))); print('udp-sent')\n"
    "except OSError as e: print('udp-refused', e.errno)\n"
)


def rules_for(*commands: str, network: tuple[str, ...] = ()) -> list[dict[str, str]]:
    rules = [{"effect": "allow", "kind": "command.execute", "match": c} for c in commands]
    rules += [{"effect": "allow", "kind": "network", "match": f"tcp://{t}"} for t in network]
    return rules


async def run(harness: Harness, command: str, network: list[str]) -> str:
    stub = harness.stub()
    session = await open_session(stub)
    call = await prepare(
        stub, session, "Bash", {"command": command, "access": {"network": network}}, evaluate=True
    )
    assert call.state == tool_call_pb2.STATE_APPROVED, call.denial.description
    with anyio.fail_after(BOUND):
        response = await invoke(stub, session, call.execution_id)
    return str(response.result.text)


async def test_an_approved_host_is_the_only_host(tmp_path: Path) -> None:
    with (
        counting_server("approved") as approved,
        counting_server("other") as other,
        udp_sink() as udp,
    ):
        target = f"127.0.0.1:{approved.port}"
        probes = [
            f"curl -sS -m 5 http://{target}/",
            f"curl -sS -m 5 http://127.0.0.1:{other.port}/; echo curl-other=$?",
            f"curl -sS -m 5 --noproxy '*' http://127.0.0.1:{other.port}/; echo noproxy=$?",
            f"(exec 3<>/dev/tcp/127.0.0.1/{other.port}) 2>/dev/null && echo devtcp-connected",
            f"python3 -c {shlex.quote(RAW_TCP)} {other.port}",
            f"python3 -c {shlex.quote(UDP)} {udp.port}",
            "getent ahosts example.org || echo dns-failed",
        ]
        command = "; ".join(probes)
        async with serve(
            tmp_path, sandbox="bwrap", fetch=LOOPBACK, rules=rules_for(command, network=(target,))
        ) as harness:
            text = await run(harness, command, [target])
    print(text)
    assert "approved\n" in text
    assert approved.requests and approved.requests[0][0] == "GET"
    assert "other\n" not in text and "devtcp-connected" not in text
    assert "raw-connected" not in text
    assert "dns-failed" in text
    assert other.accepted == 0, text
    assert udp.received == [], text
