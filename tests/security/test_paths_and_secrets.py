"""Paths that escape the workspace, symlinks swapped after approval, and protected secrets."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from callgate.v1 import tool_call_pb2
from tests.support.calls import approve, invoke, open_session, prepare, run
from tests.support.server import Harness, serve
from tests.support.status import failure

pytestmark = pytest.mark.anyio


@pytest.fixture
async def writable(tmp_path: Path) -> AsyncIterator[Harness]:
    workspace = os.path.realpath(tmp_path / "ws")
    rules = [{"effect": "allow", "kind": "filesystem.write", "match": f"tree:{workspace}"}]
    async with serve(tmp_path, rules=rules) as running:
        yield running


ESCAPES = ["../outside.txt", "sub/../../outside.txt", "/etc/passwd", "escape/outside.txt"]

PATH_TOOLS: list[tuple[str, str, dict[str, object]]] = [
    ("ReadFile", "path", {}),
    ("WriteFile", "path", {"content": "x"}),
    ("EditFile", "path", {"old": "a", "new": "b"}),
    ("Glob", "root", {"pattern": "*"}),
    ("Grep", "path", {"pattern": "a"}),
]


@pytest.mark.parametrize("escape", ESCAPES)
@pytest.mark.parametrize(("tool", "field", "extra"), PATH_TOOLS)
async def test_paths_escaping_the_workspace_are_refused_at_prepare(
    writable: Harness, tmp_path: Path, escape: str, tool: str, field: str, extra: dict[str, object]
) -> None:
    """`../`, absolute paths and symlinked directories that leave the workspace fail Prepare."""
    (tmp_path / "outside.txt").write_text("secret outside")
    if not (writable.workspace / "escape").exists():
        (writable.workspace / "escape").symlink_to(tmp_path)
    stub = writable.stub()
    session = await open_session(stub)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await prepare(stub, session, tool, {field: escape, **extra})
    got = failure(raised.value)
    assert (got.code, got.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGUMENTS_INVALID")
    assert got.fields == [f"arguments.{field}"]
    assert "secret outside" not in got.message


async def test_symlink_swapped_between_approve_and_invoke_is_refused(
    writable: Harness, tmp_path: Path
) -> None:
    """ReadFile re-resolves at run: a directory swapped for a symlink gives resolution_changed."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere/data.txt").write_text("outside data")
    (writable.workspace / "d").mkdir()
    (writable.workspace / "d/data.txt").write_text("inside data")
    stub = writable.stub()
    session = await open_session(stub)
    call = await prepare(stub, session, "ReadFile", {"path": "d/data.txt"})
    assert (await approve(stub, session, call.execution_id)).state == tool_call_pb2.STATE_APPROVED
    (writable.workspace / "d/data.txt").unlink()
    (writable.workspace / "d").rmdir()
    (writable.workspace / "d").symlink_to(tmp_path / "elsewhere")
    response = await invoke(stub, session, call.execution_id)
    assert response.call.state == tool_call_pb2.STATE_FAILED
    assert response.result.error_code == "resolution_changed"
    assert "outside data" not in response.result.text


async def test_write_through_a_swapped_symlink_has_no_effect(
    writable: Harness, tmp_path: Path
) -> None:
    """An approved write to d/new.txt writes nothing once d is a symlink out of the workspace."""
    (tmp_path / "elsewhere").mkdir()
    (writable.workspace / "d").mkdir()
    stub = writable.stub()
    session = await open_session(stub)
    call = await prepare(
        stub, session, "WriteFile", {"path": "d/new.txt", "content": "pwned"}, evaluate=True
    )
    assert call.state == tool_call_pb2.STATE_APPROVED
    (writable.workspace / "d").rmdir()
    (writable.workspace / "d").symlink_to(tmp_path / "elsewhere")
    response = await invoke(stub, session, call.execution_id)
    assert response.result.error_code == "resolution_changed"
    assert list((tmp_path / "elsewhere").iterdir()) == []


async def test_final_component_symlink_swapped_in_is_refused(
    writable: Harness, tmp_path: Path
) -> None:
    """A file replaced by a symlink after approval is not followed."""
    (tmp_path / "target.txt").write_text("outside")
    (writable.workspace / "f.txt").write_text("inside")
    stub = writable.stub()
    session = await open_session(stub)
    call = await prepare(stub, session, "ReadFile", {"path": "f.txt"}, evaluate=True)
    (writable.workspace / "f.txt").unlink()
    (writable.workspace / "f.txt").symlink_to(tmp_path / "target.txt")
    response = await invoke(stub, session, call.execution_id)
    assert response.result.is_error
    assert "outside" not in response.result.text


SECRET_CALLS: list[tuple[str, dict[str, object]]] = [
    ("ReadFile", {"path": ".env"}),
    ("ReadFile", {"path": "sub/.env.local"}),
    ("ReadFile", {"path": ".ssh/id_rsa"}),
    ("WriteFile", {"path": ".env", "content": "X=1"}),
    ("WriteFile", {"path": "new.pem", "content": "k"}),
    ("EditFile", {"path": ".env", "old": "TOKEN", "new": "X"}),
    ("Glob", {"pattern": "*", "root": ".ssh"}),
    ("Grep", {"pattern": "TOKEN", "path": ".env"}),
]


@pytest.mark.parametrize(("tool", "arguments"), SECRET_CALLS)
async def test_protected_secrets_are_denied_for_every_file_tool(
    writable: Harness, tool: str, arguments: dict[str, object]
) -> None:
    """Secret paths are DENIED (REFUSED) by the gate for every tool, with no effect."""
    (writable.workspace / ".env").write_text("TOKEN=hunter2\n")
    (writable.workspace / "sub").mkdir(exist_ok=True)
    (writable.workspace / "sub/.env.local").write_text("TOKEN=hunter2\n")
    (writable.workspace / ".ssh").mkdir(exist_ok=True)
    (writable.workspace / ".ssh/id_rsa").write_text("KEY\n")
    stub = writable.stub()
    session = await open_session(stub)
    call = await prepare(stub, session, tool, arguments, evaluate=True)
    assert call.state == tool_call_pb2.STATE_DENIED
    assert call.denial.kind == tool_call_pb2.DENIAL_KIND_REFUSED
    assert "hunter2" not in call.denial.description
    assert (writable.workspace / ".env").read_text() == "TOKEN=hunter2\n"
    assert not (writable.workspace / "new.pem").exists()


async def test_glob_and_grep_never_list_protected_files(harness: Harness) -> None:
    """A workspace-wide Glob/Grep omits .env, keys and .ssh contents."""
    (harness.workspace / ".env").write_text("TOKEN=hunter2\n")
    (harness.workspace / "app.key").write_text("TOKEN=hunter2\n")
    (harness.workspace / ".ssh").mkdir()
    (harness.workspace / ".ssh/config").write_text("TOKEN=hunter2\n")
    (harness.workspace / "visible.txt").write_text("TOKEN=visible\n")
    stub = harness.stub()
    session = await open_session(stub)
    globbed = await run(stub, session, "Glob", {"pattern": "**/*"})
    assert ".env" not in globbed.result.text
    assert "app.key" not in globbed.result.text
    assert ".ssh" not in globbed.result.text
    assert "visible.txt" in globbed.result.text
    grepped = await run(stub, session, "Grep", {"pattern": "TOKEN"})
    assert "hunter2" not in grepped.result.text
    assert "visible.txt:1:TOKEN=visible" in grepped.result.text


async def test_a_symlink_from_the_workspace_to_the_state_directory_reaches_no_token(
    tmp_path: Path,
) -> None:
    """The state directory lies outside the workspace; a workspace symlink to it (the agent
    can plant one) reads, lists and greps none of its token files."""
    async with serve(tmp_path) as harness:
        (harness.workspace / "state").symlink_to(harness.state_dir)
        stub = harness.stub()
        session = await open_session(stub)
        with pytest.raises(grpc.aio.AioRpcError) as raised:  # it resolves outside the workspace
            await prepare(stub, session, "ReadFile", {"path": "state/tokens/agent"})
        assert failure(raised.value).code == grpc.StatusCode.INVALID_ARGUMENT
        globbed = await run(stub, session, "Glob", {"pattern": "**/*"})
        assert "tokens" not in globbed.result.text
        grepped = await run(stub, session, "Grep", {"pattern": "."})
        assert harness.tokens["agent"] not in grepped.result.text
