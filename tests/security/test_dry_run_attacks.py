"""Attacks on dry runs from the agent's seat: only the agent token, calls the policy allows,
files it can write in the workspace; an approver who asks for a dry run of what it prepared.

- A dry run signals, writes to or waits on nothing outside its overlay: no host process is
  visible, the root is read-only, a FIFO or socket the agent planted is masked.
- Its output and effect digest reach the agent before a decision by no RPC.
- A change set holding a symlink out of the workspace, a protected path, a hard link or a
  special file is never applied; a parent swapped for a symlink after the dry run is stale.
- A flood of dry runs from one session is bounded: one at a time, and the overlay's size.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import anyio
import grpc
import pytest

from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_service_pb2
from tests.support.approvals import Watcher, approver
from tests.support.dry_runs import APPLY, dry_run_server, pending_bash, tree
from tests.support.sandbox import bwrap_only

pytestmark = [
    *bwrap_only,
    pytest.mark.anyio,
    pytest.mark.skipif(os.geteuid() != 0, reason="overlay mounts need the server to run as root"),
]


async def test_a_dry_run_sees_no_host_process_and_cannot_signal_one(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])  # noqa: S607, ASYNC220  # ours, ended below
    try:
        async with dry_run_server(tmp_path) as harness:
            pending = await pending_bash(
                harness,
                f"ls /proc | grep -c '^[0-9]'; kill -9 {sleeper.pid}; echo kill=$?; "
                f"kill -STOP {os.getpid()}; echo stop=$?",
            )
            change_set = await pending.dry_run()
        assert sleeper.poll() is None  # still running: the signal reached nothing
        assert "kill=1" in change_set.output_head
        assert "stop=1" in change_set.output_head
    finally:
        sleeper.kill()
        sleeper.wait()


async def test_a_fifo_and_a_socket_planted_in_the_workspace_are_masked(tmp_path: Path) -> None:
    """The agent plants a FIFO with a reader outside and a listening socket: a dry run that
    writes to the FIFO or connects to the socket reaches neither (each is masked)."""
    async with dry_run_server(tmp_path) as harness:
        fifo = harness.workspace / "pipe"
        os.mkfifo(fifo)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(harness.workspace / "sock"))
        listener.listen()
        listener.setblocking(False)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            pending = await pending_bash(
                harness,
                "echo escaped > pipe; echo fifo=$?; "
                "python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); "
                's.connect("sock"); print("connected")\' ; echo sock=$?',
            )
            change_set = await pending.dry_run()
            assert os.read(reader, 100) == b""  # nothing came through
            with pytest.raises(BlockingIOError):
                listener.accept()
        finally:
            os.close(reader)
            listener.close()
    assert "fifo=1" in change_set.output_head
    assert "connected" not in change_set.output_head


async def test_the_agent_sees_no_output_or_effect_digest_before_a_decision(
    tmp_path: Path,
) -> None:
    marker = "out-7c1e-put"  # printed, never written in the command
    async with dry_run_server(tmp_path) as harness:
        pending = await pending_bash(harness, "printf 'out-%s-put\\n' 7c1e; echo x > x.txt")
        change_set = await pending.dry_run()
        stub = harness.stub()
        seen = [
            str(
                await stub.GetCall(
                    tool_service_pb2.GetCallRequest(
                        session_id=pending.session_id, execution_id=pending.call.execution_id
                    )
                )
            ),
            str(
                await stub.ListCalls(
                    tool_service_pb2.ListCallsRequest(session_id=pending.session_id)
                )
            ),
            str(
                await stub.Approve(
                    tool_service_pb2.ApproveRequest(
                        session_id=pending.session_id, execution_id=pending.call.execution_id
                    )
                )
            ),
        ]
        denied = await pending.decide(apb.DECISION_KIND_DENY)
        seen.append(
            str(
                await stub.GetCall(
                    tool_service_pb2.GetCallRequest(
                        session_id=pending.session_id, execution_id=pending.call.execution_id
                    )
                )
            )
        )
    assert change_set.effect_digest
    for text in [*seen, str(denied)]:
        assert marker not in text
        assert change_set.effect_digest not in text


async def test_the_agent_cannot_ask_for_a_dry_run_or_apply(tmp_path: Path) -> None:
    async with dry_run_server(tmp_path) as harness:
        pending = await pending_bash(harness, "echo x > x.txt")
        agent = approver(harness, role="agent")
        for attempt in (
            agent.DryRun(
                apb.DryRunRequest(
                    execution_id=pending.call.execution_id, digest=pending.call.digest
                )
            ),
            agent.Decide(
                apb.DecideRequest(
                    execution_id=pending.call.execution_id,
                    digest=pending.call.digest,
                    kind=APPLY,
                    effect_digest="0" * 64,
                )
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await attempt
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_a_symlink_out_of_the_workspace_is_refused_at_apply(tmp_path: Path) -> None:
    async with dry_run_server(tmp_path) as harness:
        before = tree(harness.workspace)
        pending = await pending_bash(harness, "ln -s /etc/passwd passwd; echo ok > ok.txt")
        change_set = await pending.dry_run()
        link = next(c for c in change_set.changes if c.path == "passwd")
        assert "refused at apply" in link.detail
        await pending.decide(APPLY, change_set.effect_digest)
        response = await pending.invoke()
        assert response.result.error_code == "unsafe_change"
        assert tree(harness.workspace) == before


async def test_a_parent_swapped_for_a_symlink_after_the_dry_run_is_stale(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    async with dry_run_server(tmp_path) as harness:
        (harness.workspace / "dir").mkdir()
        (harness.workspace / "dir" / "f").write_text("old\n")
        pending = await pending_bash(harness, "echo new > dir/f")
        change_set = await pending.dry_run()
        (harness.workspace / "dir" / "f").rename(outside / "f")
        (harness.workspace / "dir").rmdir()
        (harness.workspace / "dir").symlink_to(outside)
        await pending.decide(APPLY, change_set.effect_digest)
        response = await pending.invoke()
    assert response.result.error_code == "stale_workspace"
    assert (outside / "f").read_text() == "old\n"


async def test_protected_paths_hard_links_and_fifos_leave_only_command_approval(
    tmp_path: Path,
) -> None:
    async with dry_run_server(tmp_path) as harness:
        (harness.workspace / "a").write_text("a\n")
        cases = {
            "echo SECRET=1 > .env": "protected path",
            "ln a b": "hard link",
            "mkfifo f": "special file",
        }
        for command, why in cases.items():
            pending = await pending_bash(harness, command)
            change_set = await pending.dry_run()
            assert why in change_set.unrepresentable, (command, change_set)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await pending.decide(APPLY, change_set.effect_digest)
            assert "NOTHING_TO_APPLY" in str(refused.value.trailing_metadata())
            await pending.decide(apb.DECISION_KIND_DENY)


async def test_one_dry_run_per_session_at_a_time(tmp_path: Path) -> None:
    async with dry_run_server(tmp_path) as harness:
        stub = harness.stub()
        first = await pending_bash(harness, "sleep 3; echo done > d.txt")
        # A second call of the same session.
        watcher = Watcher(approver(harness))
        try:
            from tests.support.calls import prepare

            call = await prepare(
                stub, first.session_id, "Bash", {"command": "echo y > y.txt"}, evaluate=True
            )
            await watcher.approval(call.execution_id)
        finally:
            watcher.cancel()
        results: list[object] = []
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: _collect(results, first.dry_run()))
            await anyio.sleep(0.5)  # the first is under way (it sleeps 3 s in the overlay)
            with pytest.raises(grpc.aio.AioRpcError) as busy:
                await approver(harness).DryRun(
                    apb.DryRunRequest(execution_id=call.execution_id, digest=call.digest)
                )
        assert busy.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "DRY_RUN_BUSY" in str(busy.value.trailing_metadata())


async def _collect(results: list[object], coroutine: object) -> None:
    results.append(await coroutine)  # type: ignore[misc]


async def test_a_dry_run_that_writes_past_its_cap_is_not_applicable(tmp_path: Path) -> None:
    async with dry_run_server(tmp_path, bash={"dry_run_max_bytes": 1 << 20}) as harness:
        pending = await pending_bash(harness, "head -c 3000000 /dev/zero > big; echo rc=$?")
        change_set = await pending.dry_run()
    assert "size cap" in change_set.unrepresentable
    assert "No space left on device" in change_set.output_head


async def test_the_plans_one_session_keeps_in_memory_are_bounded(tmp_path: Path) -> None:
    """An agent's flood of dry-run-able calls that each write up to the cap would make the
    server keep every plan's content until its call ends: past one dry run's cap per session
    the oldest plan is let go (shown as such, no longer applicable); the newest applies."""
    async with dry_run_server(tmp_path, bash={"dry_run_max_bytes": 1 << 20}) as harness:
        first = await pending_bash(harness, "head -c 700000 /dev/zero > a.bin")
        first_changes = await first.dry_run()
        assert first_changes.unrepresentable == ""
        second = await pending_bash(
            harness, "head -c 700000 /dev/zero > b.bin", session_id=first.session_id
        )
        second_changes = await second.dry_run()
        assert second_changes.unrepresentable == ""
        shown = await approver(harness).GetPendingApproval(
            apb.GetPendingApprovalRequest(execution_id=first.call.execution_id)
        )
        assert "let go" in shown.approval.change_set.unrepresentable
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await first.decide(APPLY, first_changes.effect_digest)
        assert "NOTHING_TO_APPLY" in str(refused.value.trailing_metadata())
        await second.decide(APPLY, second_changes.effect_digest)
        response = await second.invoke()
    assert not response.result.is_error, response.result.text
    assert (harness.workspace / "b.bin").stat().st_size == 700_000
    assert not (harness.workspace / "a.bin").exists()
