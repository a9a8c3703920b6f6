"""Bash's dry run and its "apply exactly this" (core/effects.py).

The dry run starts the approved command once in the dry-run sandbox (`CommandSpec.dry_run`:
the workspace an overlay whose upper layer is the server's size-capped tmpfs, HOME and TMPDIR
throwaway, everything else read-only, no network, the usual masks, seccomp and limits), with a
deadline of its own; then it reads the upper layer and makes the change set (change_set.py).
Applying never runs the command again: it writes the recorded change set, or nothing when the
workspace changed since the dry run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import anyio.to_thread

from ...core.effects import ChangeSet, DryRunOutcome, DryRunSettings
from ...core.models import SandboxMode, ToolResult
from ...core.paths import Workspace
from ...core.preview import escape
from ...core.tool import ToolContext
from ...sandbox.overlay import DryRunMount, lower_refusal, read_upper
from ...sandbox.runner import CommandRunner, CommandStartError
from .artifact import BashArtifact
from .change_set import (
    Plan,
    Stale,
    Unrepresentable,
    apply_plan,
    check_plan,
    check_protected,
    covered,
    describe,
)
from .change_set import plan_changes as _plan_changes
from .command_output import run_foreground
from .command_spec import CommandRefused, CommandSettings, command_spec

__all__ = ["AppliedPlan", "apply_recorded", "dry_run_refusal", "run_dry"]

SHOWN_OUTPUT_LINES = 40
SHOWN_OUTPUT_BYTES = 4096
SHOWN_CHANGES = 200


@dataclasses.dataclass(frozen=True, slots=True)
class AppliedPlan:
    """What "apply exactly this" applies: the steps, and the result the dry run produced."""

    plan: Plan
    result: ToolResult


def dry_run_refusal(artifact: BashArtifact, runner: CommandRunner) -> str:
    """Why this call cannot be dry-run ("" when it can)."""
    if runner.mode is not SandboxMode.BWRAP:
        return "commands run without the sandbox here"
    if artifact.background:
        return "it runs in the background"
    if artifact.network:
        return "it declares network access"
    if artifact.write:
        return "it declares writes outside the workspace"
    return ""


def _output_ends(text: str) -> tuple[str, str, int]:
    lines = text.splitlines(keepends=True)
    head = "".join(lines[:SHOWN_OUTPUT_LINES])[:SHOWN_OUTPUT_BYTES]
    rest = lines[SHOWN_OUTPUT_LINES:]
    tail = "".join(rest[-SHOWN_OUTPUT_LINES:])[-SHOWN_OUTPUT_BYTES:] if rest else ""
    omitted = len(text.encode()) - len(head.encode()) - len(tail.encode())
    return head, tail, max(omitted, 0)


async def run_dry(
    artifact: BashArtifact,
    ctx: ToolContext,
    runner: CommandRunner,
    command_settings: CommandSettings,
    settings: DryRunSettings,
) -> DryRunOutcome:
    """Run the command once in the dry-run sandbox and report what it would change."""
    refusal = dry_run_refusal(artifact, runner) or lower_refusal(ctx.workspace.root)
    if refusal:
        return _failed(f"no dry run: {refusal}")
    try:
        spec = await command_spec(artifact, ctx, command_settings, mask_specials=True)
    except CommandRefused as refused:
        return _failed(refused.result.text)
    mountpoint = ctx.resources.private_dir() / "dry-run"
    mountpoint.mkdir(mode=0o700, exist_ok=True)
    try:
        mount = await anyio.to_thread.run_sync(
            DryRunMount, str(mountpoint), ctx.workspace.root, settings.max_bytes
        )
    except OSError as exc:
        return _failed(f"the dry run's overlay could not be made ({exc.strerror or exc})")
    try:
        spec = dataclasses.replace(
            spec, dry_run=mount, pinned_dirs=(), egress=None, write_paths=(), stdin=False
        )
        try:
            running = await runner.start(spec)
        except CommandStartError as exc:
            return _failed(str(exc))
        limit = min(artifact.timeout or settings.timeout_seconds, settings.timeout_seconds)
        result = await run_foreground(
            running, limit, None, kill_grace=command_settings.kill_grace_seconds
        )
        return await anyio.to_thread.run_sync(_report, mount, ctx.workspace, result, settings)
    finally:
        mount.close()


def _failed(why: str) -> DryRunOutcome:
    change_set = ChangeSet((), None, "", "", 0, failure=escape(why)[0])
    return DryRunOutcome(change_set, json.dumps(["failed", why]).encode(), None)


def _report(
    mount: DryRunMount, workspace: Workspace, result: ToolResult, settings: DryRunSettings
) -> DryRunOutcome:
    root = workspace.root
    head, tail, omitted = _output_ends(result.text)
    failure = ""
    if result.error_code == "timed_out":
        failure = f"the dry run timed out after {settings.timeout_seconds:g} s"
    elif result.is_error and result.exit_code is None:
        failure = result.text.strip().splitlines()[-1] if result.text.strip() else "it failed"
    unrepresentable = ""
    steps = []
    try:
        entries = list(read_upper(mount, settings.max_paths))
        steps = _plan_changes(root, entries)
        check_protected(workspace, steps)
    except (Unrepresentable, OverflowError) as exc:
        unrepresentable = str(exc)
    full = os.fstatvfs(mount.fd)
    if full.f_bavail * full.f_frsize < 64 << 10 or full.f_favail == 0:
        unrepresentable = f"the dry run wrote up to its size cap ({settings.max_bytes >> 20} MiB)"
    changes = describe(root, steps, 16 << 10) if not unrepresentable else []
    shown = tuple(changes[:SHOWN_CHANGES])
    change_set = ChangeSet(
        changes=shown,
        exit_code=result.exit_code,
        output_head=escape(head)[0],
        output_tail=escape(tail)[0],
        omitted_output_bytes=omitted,
        unrepresentable=escape(unrepresentable)[0],
        failure=escape(failure)[0],
        omitted_changes=len(changes) - len(shown),
    )
    text_digest = hashlib.sha256(result.text.encode()).hexdigest()
    covering = json.dumps(
        [result.exit_code, result.error_code, text_digest, unrepresentable, failure,
         covered(steps)],
        separators=(",", ":"),
    ).encode()  # fmt: skip
    if unrepresentable or failure:
        return DryRunOutcome(change_set, covering, None)
    held = sum(len(step.content) for step in steps) + len(result.text.encode())
    return DryRunOutcome(change_set, covering, AppliedPlan(Plan(tuple(steps)), result), held)


async def apply_recorded(workspace: Workspace, applied: AppliedPlan) -> ToolResult:
    """Apply a recorded change set: nothing when any path changed since the dry run
    (`stale_workspace`, naming it); the dry run's output and exit code otherwise, with the
    paths applied in `json`."""
    root = workspace.root

    def apply() -> ToolResult:
        try:
            check_protected(workspace, list(applied.plan.steps))
            check_plan(root, applied.plan)
        except Stale as exc:
            return ToolResult.error(
                "stale_workspace",
                f"{exc} changed since the dry run; nothing was applied. Run the call again "
                "to have it decided anew.",
            )
        except Unrepresentable as exc:
            return ToolResult.error("unsafe_change", f"{exc}; nothing was applied.")
        paths = apply_plan(root, applied.plan)
        return dataclasses.replace(
            applied.result, json=json.dumps({"applied": paths}, separators=(",", ":"))
        )

    return await anyio.to_thread.run_sync(apply)
