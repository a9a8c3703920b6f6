"""Driving a dry run from both seats: the agent prepares a gated Bash call, the approver asks
for a dry run, reads the change set, and decides (apply exactly this, approve, deny)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_call_pb2, tool_service_pb2

from .approvals import Watcher, approver
from .calls import invoke, open_session, prepare
from .server import Harness, serve

APPLY = apb.DECISION_KIND_APPLY_CHANGES


@dataclass
class Pending:
    """A gated Bash call as both sides see it."""

    harness: Harness
    session_id: str
    call: tool_call_pb2.ToolCall
    approval: apb.PendingApproval

    async def dry_run(self) -> apb.ChangeSet:
        response = await approver(self.harness).DryRun(
            apb.DryRunRequest(execution_id=self.call.execution_id, digest=self.call.digest),
            timeout=60,
        )
        return response.change_set

    async def decide(
        self, kind: apb.DecisionKind.ValueType, effect_digest: str = ""
    ) -> tool_call_pb2.ToolCall:
        response = await approver(self.harness).Decide(
            apb.DecideRequest(
                execution_id=self.call.execution_id,
                digest=self.call.digest,
                kind=kind,
                effect_digest=effect_digest,
            ),
            timeout=10,
        )
        return response.call

    async def invoke(self) -> tool_service_pb2.InvokeResponse:
        with anyio.fail_after(60):
            return await invoke(self.harness.stub(), self.session_id, self.call.execution_id)


@asynccontextmanager
async def dry_run_server(tmp_path: Path, **overrides: Any) -> AsyncIterator[Harness]:
    async with serve(tmp_path, sandbox="bwrap", **overrides) as harness:
        yield harness


async def pending_bash(
    harness: Harness, command: str, *, session_id: str = "", **extra: Any
) -> Pending:
    """`command` prepared and gated (nothing allows it), with its pending approval; in a new
    session unless `session_id` names one."""
    stub = harness.stub()
    session_id = session_id or await open_session(stub)
    watcher = Watcher(approver(harness))
    try:
        call = await prepare(stub, session_id, "Bash", {"command": command, **extra}, evaluate=True)
        assert call.state == tool_call_pb2.STATE_AWAITING_APPROVAL, call
        approval = await watcher.approval(call.execution_id)
    finally:
        watcher.cancel()
    return Pending(harness, session_id, call, approval)


def tree(root: Path) -> dict[str, object]:
    """Every path under `root` with its bytes (files), target (symlinks) or None (dirs) and
    mode: a byte-for-byte picture of a workspace."""
    shown: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        info = path.lstat()
        if path.is_symlink():
            shown[rel] = ("link", str(path.readlink()))
        elif path.is_dir():
            shown[rel] = ("dir", oct(info.st_mode))
        else:
            shown[rel] = ("file", path.read_bytes(), oct(info.st_mode))
    return shown


def applied_paths(response: tool_service_pb2.InvokeResponse) -> list[str]:
    return list(json.loads(response.result.json)["applied"])
