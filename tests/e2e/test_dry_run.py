"""Approve the effect, not the text: an approver dry-runs a pending command, sees exactly what
it would change, and "apply exactly this" lands that change byte for byte without running the
command again (real server, real bubblewrap, a kernel overlay)."""

from __future__ import annotations

from pathlib import Path

import anyio
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from callgate.cli.console import ApproverConsole
from callgate.client import CallgateClient
from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_call_pb2, tool_service_pb2
from tests.client.test_approvals import Keyboard, Screen, _run
from tests.support.approvals import Watcher, approver
from tests.support.dry_runs import APPLY, applied_paths, dry_run_server, pending_bash, tree
from tests.support.sandbox import bwrap_only
from tests.support.server import serve

pytestmark = [*bwrap_only, pytest.mark.anyio]

needs_root = pytest.mark.skipif(
    __import__("os").geteuid() != 0, reason="overlay mounts need the server to run as root"
)


@needs_root
async def test_sed_in_place_shows_its_diff_and_lands_it_byte_for_byte(tmp_path: Path) -> None:
    async with dry_run_server(tmp_path) as harness:
        (harness.workspace / "notes.txt").write_text("one\nold two\nthree\n")
        pending = await pending_bash(harness, "sed -i 's/old/new/' notes.txt && echo edited")
        assert pending.approval.dry_run_refusal == ""
        before = tree(harness.workspace)
        change_set = await pending.dry_run()
        assert tree(harness.workspace) == before  # nothing reached the workspace
        assert [(c.path, c.kind) for c in change_set.changes] == [("notes.txt", "modified")]
        assert "-old two\n+new two\n" in change_set.changes[0].detail
        assert change_set.exit_code == 0
        assert "edited" in change_set.output_head
        assert change_set.unrepresentable == ""
        assert change_set.requested_by == "approver"
        decided = await pending.decide(APPLY, change_set.effect_digest)
        assert decided.state == tool_call_pb2.STATE_APPROVED
        response = await pending.invoke()
    assert not response.result.is_error, response.result.text
    assert "edited" in response.result.text
    assert applied_paths(response) == ["notes.txt"]
    assert (harness.workspace / "notes.txt").read_text() == "one\nnew two\nthree\n"


@needs_root
async def test_a_formatter_like_script_rm_and_mkdir_land_exactly(tmp_path: Path) -> None:
    script = (
        'for f in src/*.py; do tr -s \' \' < "$f" > "$f.tmp" && mv "$f.tmp" "$f"; done; '
        "rm old.log; mkdir -p build/out/deep && printf 'x\\0y' > build/out/deep/bin.dat; "
        "chmod 700 run.sh; ln -s ../src build/src-link"
    )
    async with dry_run_server(tmp_path) as harness:
        ws = harness.workspace
        (ws / "src").mkdir()
        (ws / "src" / "a.py").write_text("x  =   1\n")
        (ws / "src" / "b.py").write_text("y = 2\n")
        (ws / "old.log").write_text("log\n")
        (ws / "run.sh").write_text("#!/bin/sh\n")
        pending = await pending_bash(harness, script)
        change_set = await pending.dry_run()
        kinds = {c.path: c.kind for c in change_set.changes}
        assert kinds == {
            "src/a.py": "modified",
            "old.log": "deleted",
            "build": "directory",
            "build/out": "directory",
            "build/out/deep": "directory",
            "build/out/deep/bin.dat": "created",
            "run.sh": "mode",
            "build/src-link": "symlink",
        }, kinds
        # What the command would leave, made in a copy by running it for real, unconfined
        # nowhere: the reference is the dry run's own upper layer applied.
        await pending.decide(APPLY, change_set.effect_digest)
        response = await pending.invoke()
        assert not response.result.is_error, response.result.text
    assert (ws / "src" / "a.py").read_text() == "x = 1\n"
    assert (ws / "src" / "b.py").read_text() == "y = 2\n"
    assert not (ws / "old.log").exists()
    assert (ws / "build" / "out" / "deep" / "bin.dat").read_bytes() == b"x\0y"
    assert (ws / "run.sh").stat().st_mode & 0o777 == 0o700
    assert (ws / "build" / "src-link").readlink() == Path("../src")


@needs_root
async def test_a_workspace_edited_after_the_dry_run_fails_stale_and_changes_nothing(
    tmp_path: Path,
) -> None:
    async with dry_run_server(tmp_path) as harness:
        ws = harness.workspace
        (ws / "a.txt").write_text("a\n")
        (ws / "b.txt").write_text("b\n")
        pending = await pending_bash(harness, "echo A > a.txt; echo B > b.txt; touch c.txt")
        change_set = await pending.dry_run()
        assert len(change_set.changes) == 3
        (ws / "b.txt").write_text("edited meanwhile\n")
        before = tree(ws)
        await pending.decide(APPLY, change_set.effect_digest)
        response = await pending.invoke()
    assert response.result.is_error
    assert response.result.error_code == "stale_workspace"
    assert "b.txt changed since the dry run; nothing was applied" in response.result.text
    assert tree(ws) == before


@needs_root
async def test_a_denied_call_leaves_the_workspace_byte_identical(tmp_path: Path) -> None:
    async with dry_run_server(tmp_path) as harness:
        (harness.workspace / "keep.txt").write_text("keep\n")
        before = tree(harness.workspace)
        pending = await pending_bash(harness, "rm keep.txt; echo new > new.txt")
        change_set = await pending.dry_run()
        assert {c.kind for c in change_set.changes} == {"deleted", "created"}
        denied = await pending.decide(apb.DECISION_KIND_DENY)
        assert denied.state == tool_call_pb2.STATE_DENIED
        assert tree(harness.workspace) == before


@needs_root
async def test_network_and_writes_outside_the_workspace_fail_in_the_dry_run(
    tmp_path: Path,
) -> None:
    # Not under /tmp, which is the sandbox's own tmpfs.
    outside = Path("/var/tmp") / f"callgate-dry-run-{tmp_path.name}"
    async with dry_run_server(tmp_path) as harness:
        pending = await pending_bash(
            harness,
            f"echo x > {outside}; echo wrote=$?; "
            "exec 3<>/dev/tcp/127.0.0.1/9 && echo connected || echo no-network",
        )
        try:
            change_set = await pending.dry_run()
        finally:
            outside.unlink(missing_ok=True)
    assert "Read-only file system" in change_set.output_head
    assert "wrote=1" in change_set.output_head
    assert "no-network" in change_set.output_head
    assert "connected" not in change_set.output_head.replace("no-network", "")


@needs_root
async def test_approving_the_command_after_a_dry_run_runs_it_as_before(tmp_path: Path) -> None:
    async with dry_run_server(tmp_path) as harness:
        pending = await pending_bash(harness, "echo $RANDOM$RANDOM > r.txt")
        change_set = await pending.dry_run()
        dry = change_set.changes[0].detail
        await pending.decide(apb.DECISION_KIND_APPROVE_ONCE)
        response = await pending.invoke()
    assert not response.result.is_error
    assert response.result.json == ""  # it ran, nothing was applied
    assert (harness.workspace / "r.txt").read_text() not in dry  # a new random number


@needs_root
async def test_apply_needs_the_effect_digest_of_the_last_dry_run(tmp_path: Path) -> None:
    async with dry_run_server(tmp_path) as harness:
        pending = await pending_bash(harness, "echo x > x.txt")
        with pytest.raises(grpc.aio.AioRpcError) as no_dry_run:
            await pending.decide(APPLY, "0" * 64)
        assert no_dry_run.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        change_set = await pending.dry_run()
        with pytest.raises(grpc.aio.AioRpcError) as wrong:
            await pending.decide(APPLY, change_set.effect_digest[::-1])
        assert "EFFECT_MISMATCH" in str(wrong.value.trailing_metadata())
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await pending.decide(APPLY)
        assert missing.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert not (harness.workspace / "x.txt").exists()


@needs_root
async def test_gated_mode_dry_runs_every_gated_command_before_a_human_looks(
    tmp_path: Path,
) -> None:
    async with dry_run_server(tmp_path, bash={"dry_run": "gated"}) as harness:
        watcher = Watcher(approver(harness))
        try:
            pending = await pending_bash(harness, "echo gated > g.txt")
            while True:  # the approval comes again, with the change set the server made
                item = await watcher.approval(pending.call.execution_id)
                if item.HasField("change_set"):
                    break
        finally:
            watcher.cancel()
        assert item.change_set.requested_by == "policy"
        assert [(c.path, c.kind) for c in item.change_set.changes] == [("g.txt", "created")]
        assert not (harness.workspace / "g.txt").exists()
        await pending.decide(APPLY, item.change_set.effect_digest)
        response = await pending.invoke()
    assert not response.result.is_error
    assert (harness.workspace / "g.txt").read_text() == "gated\n"


@needs_root
async def test_health_and_sessions_say_whether_dry_runs_work_here(tmp_path: Path) -> None:
    async with dry_run_server(tmp_path) as harness:
        session = await harness.stub().OpenSession(tool_service_pb2.OpenSessionRequest())
        call = health_pb2_grpc.HealthStub(harness.channel()).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
        await call
        trailers = dict(await call.trailing_metadata() or ())
    assert session.session.dry_run == "on_request"
    assert trailers["callgate-dry-run"] == "on_request"


async def test_without_the_sandbox_dry_runs_are_unavailable_and_say_why(tmp_path: Path) -> None:
    async with serve(tmp_path) as harness:  # sandbox "none"
        session = await harness.stub().OpenSession(tool_service_pb2.OpenSessionRequest())
        pending = await pending_bash(harness, "echo x")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pending.dry_run()
    assert session.session.dry_run == "unavailable: commands run without the sandbox here"
    assert pending.approval.dry_run_refusal == "commands run without the sandbox here"
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "DRY_RUN_UNAVAILABLE" in str(refused.value.trailing_metadata())


async def test_calls_with_network_or_in_the_background_have_no_dry_run(tmp_path: Path) -> None:
    async with dry_run_server(tmp_path) as harness:
        network = await pending_bash(
            harness, "curl http://example.org", access={"network": ["example.org:80"]}
        )
        background = await pending_bash(harness, "sleep 1", background=True)
    assert network.approval.dry_run_refusal == "it declares network access"
    assert background.approval.dry_run_refusal == "it runs in the background"


@needs_root
async def test_the_terminal_approver_dry_runs_and_applies(tmp_path: Path) -> None:
    async with dry_run_server(tmp_path) as harness:
        (harness.workspace / "t.txt").write_text("before\n")
        pending = await pending_bash(harness, "sed -i s/before/after/ t.txt")
        screen, keyboard, results = Screen(), Keyboard(), list[int]()
        async with CallgateClient(harness.tcp_target, token=harness.tokens["approver"]) as client:
            console = ApproverConsole(client.approvals, screen, once=True)
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tasks:
                    await tasks.start(_run, console, keyboard, results)
                    await screen.shows("[r]dry run")
                    await keyboard.type("r")
                    await screen.shows("[x]apply exactly this")
                    assert "+after" in screen.getvalue()
                    assert (harness.workspace / "t.txt").read_text() == "before\n"
                    await keyboard.type("x")
        response = await pending.invoke()
    assert results == [0]
    assert "apply changes" in screen.getvalue()
    assert not response.result.is_error
    assert (harness.workspace / "t.txt").read_text() == "after\n"


@needs_root
async def test_a_change_in_a_large_directory_is_applicable_and_lands(tmp_path: Path) -> None:
    """Only a directory the command deletes is walked whole: editing one file of a directory
    of 10,001 entries (more than a deleted tree may hold) is an ordinary change set."""
    async with dry_run_server(tmp_path) as harness:
        crowded = harness.workspace / "crowded"
        crowded.mkdir()
        for number in range(10_001):
            (crowded / f"f{number:05d}").write_bytes(b"")
        (crowded / "target.txt").write_text("old\n")
        pending = await pending_bash(harness, "echo new > crowded/target.txt")
        change_set = await pending.dry_run()
        assert change_set.unrepresentable == "", change_set.unrepresentable
        assert [(c.path, c.kind) for c in change_set.changes] == [
            ("crowded/target.txt", "modified")
        ]
        await pending.decide(APPLY, change_set.effect_digest)
        response = await pending.invoke()
    assert not response.result.is_error, response.result.text
    assert (crowded / "target.txt").read_text() == "new\n"


@needs_root
async def test_a_dry_run_asked_with_bad_input_is_refused_and_runs_nothing(
    tmp_path: Path,
) -> None:
    async with dry_run_server(tmp_path) as harness:
        pending = await pending_bash(harness, "echo x > x.txt")
        stub = approver(harness)
        cases = [
            (pending.call.execution_id, "0" * 64, grpc.StatusCode.FAILED_PRECONDITION,
             "DIGEST_MISMATCH"),
            ("call_" + "0" * 32, pending.call.digest, grpc.StatusCode.NOT_FOUND,
             "CALL_NOT_FOUND"),
            ("", pending.call.digest, grpc.StatusCode.INVALID_ARGUMENT, "execution_id"),
        ]  # fmt: skip
        for execution_id, digest, code, said in cases:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.DryRun(apb.DryRunRequest(execution_id=execution_id, digest=digest))
            assert refused.value.code() == code
            assert said in str(refused.value.trailing_metadata()) + (refused.value.details() or "")
        shown = await stub.GetPendingApproval(
            apb.GetPendingApprovalRequest(execution_id=pending.call.execution_id)
        )
    assert not shown.approval.HasField("change_set")
    assert not (harness.workspace / "x.txt").exists()
