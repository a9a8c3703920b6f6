"""Bash end to end through a real server with real bubblewrap: the frozen command runs, every
escape attempt fails, output streams, and the process tree never outlives the call."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import grpc
import pytest

from callgate.v1 import session_pb2, tool_call_pb2, tool_service_pb2
from tests.support.calls import invoke, open_session, prepare
from tests.support.egress import counting_server
from tests.support.sandbox import bwrap_only, processes_running, sleep_marker
from tests.support.server import Harness, serve
from tests.support.status import failure

pytestmark = [pytest.mark.anyio, *bwrap_only]

BOUND = 60.0
"""Seconds a call may take before the test fails: only a failure gets there, but a loaded
machine starts sandboxes slowly."""


def allow(*commands: str) -> list[dict[str, str]]:
    """Config rules that allow exactly these commands (or families such as `Bash(echo:*)`)."""
    return [{"effect": "allow", "kind": "command.execute", "match": c} for c in commands]


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside both the workspace and /tmp (which the sandbox replaces)."""
    path = Path(tempfile.mkdtemp(prefix="callgate-e2e-", dir="/var/tmp"))
    try:
        yield Path(os.path.realpath(path))
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def run_bash(
    harness: Harness, arguments: dict[str, object]
) -> tool_service_pb2.InvokeResponse:
    """Prepare (the gate decides at once: a config rule must allow it), then Invoke."""
    stub = harness.stub()
    session = await open_session(stub)
    call = await prepare(stub, session, "Bash", arguments, evaluate=True)
    assert call.state == tool_call_pb2.STATE_APPROVED, call.denial.description
    with anyio.fail_after(BOUND):
        return await invoke(stub, session, call.execution_id)


async def test_invoke_runs_the_prepared_command(tmp_path: Path) -> None:
    """Invoke carries no arguments: it runs the command frozen at Prepare, in the sandbox the
    session reports."""
    async with serve(tmp_path, sandbox="bwrap", rules=allow("echo prepared")) as harness:
        stub = harness.stub()
        opened = await stub.OpenSession(tool_service_pb2.OpenSessionRequest())
        assert opened.session.sandbox_mode == session_pb2.SANDBOX_MODE_BWRAP
        assert opened.session.sandbox_warning == ""
        session = opened.session.session_id
        call = await prepare(stub, session, "Bash", {"command": "echo prepared"}, evaluate=True)
        assert call.summary == "Bash: echo prepared"
        assert [(r.kind, r.match) for r in call.requirements] == [
            ("command.execute", "echo prepared")
        ]
        assert "bubblewrap" in call.requirements[0].description
        # Another call with other arguments in between changes nothing about the first.
        await prepare(stub, session, "Bash", {"command": "echo other"})
        response = await invoke(stub, session, call.execution_id)
    assert response.call.state == tool_call_pb2.STATE_SUCCEEDED
    assert response.result.text == "prepared\n[exit code: 0]"
    assert response.result.exit_code == 0


async def test_nonzero_exit_is_a_successful_call(tmp_path: Path) -> None:
    """`exit 3` ends SUCCEEDED with exit_code 3 and is_error false."""
    async with serve(tmp_path, sandbox="bwrap", rules=allow("Bash(exit:*)")) as harness:
        response = await run_bash(harness, {"command": "exit 3"})
    assert response.call.state == tool_call_pb2.STATE_SUCCEEDED
    assert response.result.text == "[exit code: 3]"
    assert (response.result.exit_code, response.result.is_error) == (3, False)


async def test_commands_need_approval_by_default(tmp_path: Path) -> None:
    """command.execute is gated: without a rule a headless server denies the call."""
    async with serve(tmp_path, sandbox="bwrap", approval_mode="headless") as harness:
        stub = harness.stub()
        session = await open_session(stub)
        call = await prepare(stub, session, "Bash", {"command": "true"}, evaluate=True)
    assert call.state == tool_call_pb2.STATE_DENIED


async def test_writes_outside_the_workspace_do_not_reach_the_host(
    tmp_path: Path, outside: Path
) -> None:
    """/tmp is private, /etc and any directory outside the workspace are read-only."""
    host_tmp = f"/tmp/callgate-escape-{secrets.token_hex(6)}"  # the probe itself
    command = (
        f"touch {host_tmp} && echo tmp-private; echo x > /etc/callgate-x || echo etc-refused; "
        f"touch {tmp_path}/outside; touch {outside}/outside || echo outside-refused; "
        "echo inside > made.txt"
    )
    async with serve(tmp_path, sandbox="bwrap", rules=allow(command)) as harness:
        response = await run_bash(harness, {"command": command})
        made = (harness.workspace / "made.txt").read_text()
    text = response.result.text
    assert "tmp-private" in text
    assert "etc-refused" in text
    assert "outside-refused" in text
    assert not Path(host_tmp).exists()
    assert not Path("/etc/callgate-x").exists()
    assert not (tmp_path / "outside").exists()
    assert not (outside / "outside").exists()
    assert made == "inside\n"


async def test_secrets_in_the_workspace_read_as_nothing(tmp_path: Path) -> None:
    """`cat .env` inside the workspace gets nothing of the secret."""
    command = "cat .env; cat deploy/.ssh/id_ed25519; true"
    async with serve(tmp_path, sandbox="bwrap", rules=allow(command)) as harness:
        (harness.workspace / ".env").write_text("API_KEY=hunter2-secret\n")
        (harness.workspace / "deploy" / ".ssh").mkdir(parents=True)
        (harness.workspace / "deploy" / ".ssh" / "id_ed25519").write_text("KEY-secret\n")
        response = await run_bash(harness, {"command": command})
    assert "secret" not in response.result.text
    assert response.result.exit_code == 0


async def test_network_needs_an_approved_declaration(tmp_path: Path) -> None:
    """A real HTTP server on the host is unreachable without a network declaration; once the
    declared target is approved, the command reaches it through its proxy, and only so (bash's
    /dev/tcp, which ignores the proxy, reaches nothing either way)."""
    with counting_server("host") as server:
        target = f"127.0.0.1:{server.port}"
        command = (
            f"(exec 3<>/dev/tcp/127.0.0.1/{server.port}) 2>/dev/null && echo direct; "
            f"curl -sS -m 5 http://{target}/ || echo curl-failed"
        )
        rules = [
            *allow(command),
            {"effect": "allow", "kind": "network", "match": f"tcp://{target}"},
        ]
        async with serve(
            tmp_path, sandbox="bwrap", rules=rules, network={"allow_networks": ["127.0.0.0/8"]}
        ) as harness:
            closed = await run_bash(harness, {"command": command})
            opened = await run_bash(harness, {"command": command, "access": {"network": [target]}})
    assert "curl-failed" in closed.result.text
    assert "direct" not in closed.result.text
    assert opened.result.text == "host\n[exit code: 0]"
    assert server.accepted == 1


async def test_the_servers_environment_is_invisible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither `env` nor /proc shows the server's environment to the command."""
    marker = secrets.token_hex(12)
    monkeypatch.setenv("CALLGATE_E2E_MARKER", marker)
    command = f"env; cat /proc/1/environ; cat /proc/{os.getpid()}/environ; true"
    async with serve(tmp_path, sandbox="bwrap", rules=allow(command)) as harness:
        response = await run_bash(harness, {"command": command})
    assert response.result.exit_code == 0
    assert marker not in response.result.text
    assert "PATH=/usr/local/sbin:" in response.result.text


async def test_token_files_are_invisible_even_outside_the_workspace(
    tmp_path: Path, outside: Path
) -> None:
    """The state directory with the token files is hidden, wherever it is."""
    state = outside / "state"
    command = f"cat {state}/tokens/agent; ls -A {state}"
    async with serve(tmp_path, sandbox="bwrap", state_dir=str(state), rules=allow(command)) as h:
        token = h.tokens["agent"]
        response = await run_bash(h, {"command": command})
    assert token not in response.result.text
    assert "No such file or directory" in response.result.text


async def test_timeout_leaves_no_process_running(tmp_path: Path) -> None:
    """A background job and a double fork with setsid end with the timed-out call."""
    first, second, third = sleep_marker(), sleep_marker(), sleep_marker()
    command = f"sleep {first} & (setsid sleep {second} &); echo started; sleep {third}"
    async with serve(tmp_path, sandbox="bwrap", rules=allow(command)) as harness:
        response = await run_bash(harness, {"command": command, "timeout": 1})
    assert response.call.state == tool_call_pb2.STATE_FAILED
    assert (response.result.is_error, response.result.error_code) == (True, "timed_out")
    assert response.result.text.startswith("started\n[timed out after 1 s")
    for marker in (first, second, third):
        assert processes_running("sleep", marker) == []


async def test_invoke_stream_delivers_chunks_before_the_finished_call(tmp_path: Path) -> None:
    """Output chunks arrive as produced, then one final event with the finished call."""
    command = "for i in 1 2 3; do echo $i; done"
    async with serve(tmp_path, sandbox="bwrap", rules=allow(command)) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        call = await prepare(stub, session, "Bash", {"command": command}, evaluate=True)
        events: list[str] = []
        data = b""
        with anyio.fail_after(BOUND):
            async for response in stub.InvokeStream(
                tool_service_pb2.InvokeStreamRequest(
                    session_id=session, execution_id=call.execution_id
                )
            ):
                kind = response.WhichOneof("event")
                assert kind is not None
                events.append(kind)
                if kind == "output":
                    data += response.output.data
                else:
                    finished = response.finished
    assert events[-1] == "finished"
    assert set(events[:-1]) == {"output"}
    assert data == b"1\n2\n3\n"
    assert finished.state == tool_call_pb2.STATE_SUCCEEDED
    assert finished.result.text == "1\n2\n3\n[exit code: 0]"


async def test_client_deadline_cancels_the_call_and_kills_the_tree(tmp_path: Path) -> None:
    """An Invoke whose client deadline passes ends CANCELLED, with no process left."""
    marker = sleep_marker()
    command = f"sleep {marker}"
    async with serve(tmp_path, sandbox="bwrap", rules=allow(command)) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        call = await prepare(stub, session, "Bash", {"command": command}, evaluate=True)
        request = tool_service_pb2.InvokeRequest(session_id=session, execution_id=call.execution_id)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Invoke(request, timeout=1.0)
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        get = tool_service_pb2.GetCallRequest(session_id=session, execution_id=call.execution_id)
        # The server learns of the deadline on its own schedule; no event reports it.
        with anyio.fail_after(BOUND):
            while (await stub.GetCall(get)).call.state == tool_call_pb2.STATE_RUNNING:  # noqa: ASYNC110  # polled: no RPC reports the change
                await anyio.sleep(0.01)
        state = (await stub.GetCall(get)).call.state
    assert state == tool_call_pb2.STATE_CANCELLED
    # CANCELLED is recorded only after the tree is confirmed gone.
    assert processes_running("sleep", marker) == []


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ('{"command": "true", "shell": "zsh"}', "arguments.shell"),
        ('{"command": 1}', "arguments.command"),
        ('{"command": "true", "timeout": 0}', "arguments.timeout"),
        ('{"command": "true", "timeout": 601}', "arguments.timeout"),
        ('{"command": "true", "timeout": "30s"}', "arguments.timeout"),
        ('{"command": "echo \\u0000"}', "arguments.command"),
        (json.dumps({"command": "x" * (64 * 1024 + 1)}), "arguments.command"),
        ('{"command": "true", "workdir": "../.."}', "arguments.workdir"),
        ('{"command": "true", "workdir": "/"}', "arguments.workdir"),
        ('{"command": "true", "background": "yes"}', "arguments.background"),
        ('{"command": "true", "access": {"network": ["nohost"]}}', "arguments.access.network[0]"),
    ],
)
async def test_bad_arguments_are_invalid_with_a_field_violation(
    harness: Harness, arguments: str, field: str
) -> None:
    """Malformed Bash arguments fail Prepare with ARGUMENTS_INVALID naming the field."""
    stub = harness.stub()
    session = await open_session(stub)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await prepare(stub, session, "Bash", arguments)
    found = failure(raised.value)
    assert (found.code, found.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGUMENTS_INVALID")
    assert found.fields == [field]


async def test_a_long_command_within_the_cap_reaches_the_gate(tmp_path: Path) -> None:
    """A 60 KiB command (under Bash's 64 KiB cap) is evaluated by the gate like any other:
    with an exact allow rule it is APPROVED, not refused for its size."""
    command = "true " + "x" * (60 << 10)
    rules = [{"effect": "allow", "kind": "command.execute", "match": command}]
    async with serve(tmp_path, rules=rules) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        call = await prepare(stub, session, "Bash", {"command": command}, evaluate=True)
        assert call.state == tool_call_pb2.STATE_APPROVED
