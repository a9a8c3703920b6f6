"""A command approved for one host reaches that host and nothing else (issue: approving one
host opened the whole network). The agent's seat: a policy that allows its commands and one
network target, `127.0.0.1:P`; its commands then try every other way out: the proxy for another
port, `curl --noproxy '*'`, bash's /dev/tcp, a raw socket, UDP, and DNS. Each probe's target
counts what reached it, so a test sees that nothing arrived, not only that a command failed."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import anyio
import grpc
import pytest

from callgate.v1 import approval_service_pb2, audit_service_pb2_grpc, tool_call_pb2
from callgate.v1 import audit_service_pb2 as apb
from tests.support.approvals import Watcher, approver, decide
from tests.support.calls import invoke, open_session, prepare
from tests.support.egress import counting_server, udp_sink
from tests.support.sandbox import bwrap_only
from tests.support.server import Harness, serve

pytestmark = [pytest.mark.anyio, *bwrap_only]

BOUND = 60.0
APPROVE_ONCE = approval_service_pb2.DECISION_KIND_APPROVE_ONCE
LOOPBACK = {"allow_networks": ["127.0.0.0/8", "::1/128"]}
RAW_TCP = (
    "import socket,sys\n"
    "try:\n"
    " socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3)\n"
    " print('raw-connected')\n"
    "except OSError as e: print('raw-refused', e.errno)\n"
)
URLLIB = (
    "import sys, urllib.request\n"
    "print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode(), end='')\n"
)
# A TLS client that opens a tunnel to argv[1] (host:port) through the proxy and starts TLS
# naming argv[2]: prints how it ended.
TLS_THROUGH = (
    "import os, socket, ssl, sys\n"
    "proxy = os.environ['HTTPS_PROXY'].rsplit(':', 1)\n"
    "conn = socket.create_connection((proxy[0][7:], int(proxy[1])), timeout=5)\n"
    "conn.sendall(f'CONNECT {sys.argv[1]} HTTP/1.1\\r\\n\\r\\n'.encode())\n"
    "print(conn.recv(100).split(b'\\r\\n')[0].decode())\n"
    "context = ssl.create_default_context()\n"
    "try:\n"
    " context.wrap_socket(conn, server_hostname=sys.argv[2])\n"
    " print('tls-up')\n"
    "except ssl.SSLError as e: print('tls-refused', e.reason)\n"
    "except OSError as e: print('tls-closed', e)\n"
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


async def run(harness: Harness, command: str, network: list[str]) -> tuple[str, str]:
    """Prepare and invoke a Bash call the config rules allow; its text and execution ID."""
    stub = harness.stub()
    session = await open_session(stub)
    call = await prepare(
        stub, session, "Bash", {"command": command, "access": {"network": network}}, evaluate=True
    )
    assert call.state == tool_call_pb2.STATE_APPROVED, call.denial.description
    with anyio.fail_after(BOUND):
        response = await invoke(stub, session, call.execution_id)
    return str(response.result.text), str(call.execution_id)


async def connections(harness: Harness, execution_id: str, count: int) -> list[dict[str, object]]:
    """The call's first `count` `network.connection` events, as they are committed."""
    stub = audit_service_pb2_grpc.AuditServiceStub(harness.channel("admin"))
    request = apb.WatchEventsRequest(
        filter=apb.EventFilter(execution_id=execution_id, kind="network.connection")
    )
    found: list[dict[str, object]] = []
    with anyio.fail_after(BOUND):
        async for item in stub.WatchEvents(request):
            found.append(json.loads(item.event.data_json))
            if len(found) == count:
                break
    return found


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
            tmp_path, sandbox="bwrap", network=LOOPBACK, rules=rules_for(command, network=(target,))
        ) as harness:
            text, execution_id = await run(harness, command, [target])
            records = await connections(harness, execution_id, 2)
    assert "approved\n" in text
    assert [r[0] for r in approved.requests] == ["GET"]
    assert f"callgate refused 127.0.0.1:{other.port}: not approved for this command." in text
    assert "other\n" not in text
    assert "devtcp-connected" not in text
    assert "raw-connected" not in text
    assert "dns-failed" in text
    assert other.accepted == 0, text
    assert udp.received == [], text
    # The result names what was refused, so that the model can ask for it in a new call.
    assert f"[network refused: 127.0.0.1:{other.port} (not approved for this command)." in text
    # The journal holds each connection: host, port, allowed or refused and by what, bytes.
    assert [(r["port"], r["allowed"], r["rule"], r["refusal"]) for r in records] == [
        (approved.port, True, "rule config-1", ""),
        (other.port, False, "", "not_approved"),
    ]
    assert isinstance(records[0]["bytes_down"], int)
    assert records[0]["bytes_down"] > len("approved\n")


def _git_repository(root: Path, git: str) -> Path:
    """A bare repository prepared for git's dumb HTTP protocol (a static file server)."""
    source = root / "source"
    source.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "GIT_CONFIG_NOSYSTEM": "1"}
    for argv in (
        [git, "init", "-q", "-b", "main"],
        [git, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
         "-m", "over the proxy"],
    ):  # fmt: skip
        subprocess.run(argv, cwd=source, env=env, check=True)
    bare = root / "served" / "repo.git"
    subprocess.run([git, "clone", "-q", "--bare", str(source), str(bare)], env=env, check=True)
    subprocess.run([git, "update-server-info"], cwd=bare, env=env, check=True)
    return bare


async def test_urllib_and_git_reach_the_approved_host_and_nothing_else(tmp_path: Path) -> None:
    """Python's urllib and git (libcurl) honour the proxy variables and reach the approved
    host; the same clients aimed at another port are refused by the proxy."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    bare = _git_repository(tmp_path, git)
    served = bare.parent
    with (
        counting_server("approved", directory=served) as approved,
        counting_server("other", directory=served) as other,
    ):
        target = f"127.0.0.1:{approved.port}"
        command = (
            f"python3 -c {shlex.quote(URLLIB)} http://{target}/hello; "
            f"python3 -c {shlex.quote(URLLIB)} http://127.0.0.1:{other.port}/hello "
            "2>&1 | tail -1; "
            f"git clone -q http://{target}/repo.git cloned && git -C cloned log --format=%s; "
            f"git clone -q http://127.0.0.1:{other.port}/repo.git refused 2>&1 | tail -1; true"
        )
        async with serve(
            tmp_path, sandbox="bwrap", network=LOOPBACK, rules=rules_for(command, network=(target,))
        ) as harness:
            text, _ = await run(harness, command, [target])
    assert text.startswith("approved\n"), text
    assert "HTTP Error 403" in text
    assert "over the proxy\n" in text
    assert other.accepted == 0, text


async def test_a_tunnel_whose_tls_names_another_host_is_refused(tmp_path: Path) -> None:
    """CONNECT to the approved name with a TLS ClientHello naming another host (domain
    fronting): refused with a TLS alert, and not a byte reaches the host."""
    with counting_server("approved") as approved:
        target = f"localhost:{approved.port}"
        command = (
            f"python3 -c {shlex.quote(TLS_THROUGH)} {target} evil.example; "
            f"python3 -c {shlex.quote(TLS_THROUGH)} 127.0.0.1:{approved.port} localhost"
        )
        async with serve(
            tmp_path, sandbox="bwrap", network=LOOPBACK, rules=rules_for(command, network=(target,))
        ) as harness:
            text, execution_id = await run(harness, command, [target])
            records = await connections(harness, execution_id, 2)
    lines = text.splitlines()
    assert lines[0] == "HTTP/1.1 200 Connection established"
    assert lines[1].startswith("tls-refused"), text
    assert lines[2] == "HTTP/1.1 403 Forbidden"
    assert approved.requests == []
    assert [r["refusal"] for r in records] == ["server_name", "not_approved"]


async def test_a_background_process_reports_what_its_proxy_refused(tmp_path: Path) -> None:
    with counting_server("other") as other:
        command = f"curl -sS -m 5 http://127.0.0.1:{other.port}/; sleep 0.1"
        target = "127.0.0.1:9"
        async with serve(
            tmp_path, sandbox="bwrap", network=LOOPBACK, rules=rules_for(command, network=(target,))
        ) as harness:
            stub = harness.stub()
            session = await open_session(stub)
            call = await prepare(
                stub,
                session,
                "Bash",
                {"command": command, "background": True, "access": {"network": [target]}},
                evaluate=True,
            )
            started = json.loads((await invoke(stub, session, call.execution_id)).result.json)
            waited = await prepare(
                stub,
                session,
                "ProcessOutput",
                {"process_id": started["process_id"], "wait": "all", "timeout_ms": 30000},
                evaluate=True,
            )
            with anyio.fail_after(BOUND):
                ended = json.loads((await invoke(stub, session, waited.execution_id)).result.json)
    assert ended["status"] != "running"
    assert ended["network_refused"] == [f"127.0.0.1:{other.port}: not approved for this command"]
    assert other.accepted == 0


async def test_a_host_a_human_approved_is_journaled_as_theirs(tmp_path: Path) -> None:
    """Gated network (no rule): the call runs only after an approver decides, and each of its
    connections names that approver; the agent's token cannot decide."""
    with counting_server("approved") as approved:
        target = f"127.0.0.1:{approved.port}"
        command = f"curl -sS -m 5 http://{target}/"
        async with serve(
            tmp_path, sandbox="bwrap", network=LOOPBACK, rules=rules_for(command)
        ) as harness:
            stub = harness.stub()
            session = await open_session(stub)
            watcher = Watcher(approver(harness))
            call = await prepare(
                stub, session, "Bash", {"command": command, "access": {"network": [target]}},
                evaluate=True,
            )  # fmt: skip
            assert call.state == tool_call_pb2.STATE_AWAITING_APPROVAL
            pending = await watcher.approval(call.execution_id)
            assert [(r.kind, r.match) for r in pending.unmet] == [("network", f"tcp://{target}")]
            assert "through callgate's proxy; nothing else" in pending.unmet[0].description
            with pytest.raises(grpc.aio.AioRpcError):
                await decide(approver(harness, "agent"), pending.call, APPROVE_ONCE)
            await decide(approver(harness), pending.call, APPROVE_ONCE)
            watcher.cancel()
            with anyio.fail_after(BOUND):
                response = await invoke(stub, session, call.execution_id)
            [record] = await connections(harness, call.execution_id, 1)
    assert response.result.text.startswith("approved\n")
    assert record["rule"] == "approved by approver"
    assert record["allowed"] is True
