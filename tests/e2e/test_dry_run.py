"""Approve the effect, not the text: an approver dry-runs a pending command, sees exactly what
it would change, and "apply exactly this" lands that change byte for byte without running the
command again (real server, real bubblewrap, a kernel overlay)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_call_pb2
from tests.support.dry_runs import APPLY, applied_paths, dry_run_server, pending_bash, tree
from tests.support.sandbox import bwrap_only

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
