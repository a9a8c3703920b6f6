"""Command rules that know what programs do, attacked from the agent's seat: an
allowed family never writes, runs code or reaches the network behind the approver's back.

The agent holds only its token, uses only calls policy allows (a permissive workspace-write
policy and allow families an approver would plausibly have saved), and plants files first."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from callgate.v1 import tool_call_pb2 as cpb
from tests.support.approvals import Watcher, approver
from tests.support.calls import open_session, prepare, run
from tests.support.sandbox import bwrap_only
from tests.support.server import Harness, serve

pytestmark = [pytest.mark.anyio, *bwrap_only]

FAMILIES = ("Bash(git status:*)", "Bash(git log:*)", "Bash(sed:*)", "Bash(find:*)", "Bash(rg:*)")


def _rules(*patterns: str, effect: str = "allow") -> list[dict[str, str]]:
    return [{"effect": effect, "kind": "command.execute", "match": p} for p in patterns]


def _serve(tmp_path: Path, **overrides: Any) -> Any:
    settings: dict[str, Any] = {
        "access": {"workspace_write": "allow"},
        "rules": _rules(*FAMILIES),
        "approval_mode": "headless",
        # Families allow by themselves only where the sandbox holds them.
        "sandbox": "bwrap",
    }
    settings.update(overrides)
    return serve(tmp_path, **settings)


@pytest.fixture
async def headless(tmp_path: Path) -> AsyncIterator[Harness]:
    async with _serve(tmp_path) as running:
        yield running


async def _outcome(harness: Harness, session: str, command: str, **args: Any) -> Any:
    """Run a command the policy allows (the call must be approved by policy)."""
    return await run(harness.stub(), session, "Bash", {"command": command, **args})


async def _decided(harness: Harness, session: str, command: str) -> Any:
    """Prepare with evaluation: the settled call (APPROVED, or DENIED when headless)."""
    return await prepare(harness.stub(), session, "Bash", {"command": command}, evaluate=True)


@pytest.mark.parametrize(
    "command",
    [
        "git log --output=../planted.txt",
        "git log --output ../planted.txt",
        "git log HEAD --output=../planted.txt",
        "sed -n '1e touch planted' notes.txt",
        "sed -n 1,2p -i notes.txt",
        "sed 's/x/touch planted/e' notes.txt",
        "sed -n '1w planted' notes.txt",
        "find . -name notes.txt -delete",
        "find . -fprint planted",
        "rg --pre=./planted.sh x",
        "rg -z x",
        "git -c core.pager=./planted.sh log",
        "git status --frobnicate",
    ],
)
async def test_an_allowed_family_does_not_cover_options_that_write_or_run_code(
    headless: Harness, command: str
) -> None:
    """With the families an approver would save by clicking "always" on harmless commands,
    the options that write, delete or run code still need a human: headless, they are
    refused, and nothing runs."""
    (headless.workspace / "notes.txt").write_text("x\ny\n")
    session = await open_session(headless.stub())
    call = await _decided(headless, session, command)
    assert call.state == cpb.STATE_DENIED, (command, call)
    assert not (headless.workspace / "planted").exists()
    assert (headless.workspace / "notes.txt").read_text() == "x\ny\n"


async def test_the_same_families_still_allow_read_only_use(headless: Harness) -> None:
    """The control: read-only spellings of the same programs run without a human."""
    (headless.workspace / "notes.txt").write_text("x\ny\n")
    session = await open_session(headless.stub())
    response = await _outcome(headless, session, "sed -n 1,1p notes.txt && find . -name notes.txt")
    assert response.call.state == cpb.STATE_SUCCEEDED, response.call
    assert response.result.text.splitlines()[:2] == ["x", "./notes.txt"]


async def test_a_deny_on_rm_catches_what_else_deletes_files(tmp_path: Path) -> None:
    """`Bash(rm:*)` denied, everything else allowed: `find -delete`, `unlink`, `git clean`
    and `xargs rm` are denied as well, and the file survives."""
    rules = _rules("Bash(rm:*)", effect="deny")
    async with _serve(tmp_path, rules=rules, access={"command": "allow"}) as harness:
        (harness.workspace / "keep.txt").write_text("k")
        session = await open_session(harness.stub())
        for command in (
            "find . -name keep.txt -delete",
            "unlink keep.txt",
            "git clean -fdx",
            "echo keep.txt | xargs rm",
            "timeout 5 rm keep.txt",
        ):
            call = await _decided(harness, session, command)
            assert call.state == cpb.STATE_DENIED, (command, call)
        assert (harness.workspace / "keep.txt").exists()
        allowed = await _outcome(harness, session, "ls")
        assert allowed.call.state == cpb.STATE_SUCCEEDED


async def test_the_approver_is_warned_of_options_that_run_code(tmp_path: Path) -> None:
    """A pending command says what its options and scripts do beyond its words; the warning
    is part of the requirement the digest covers; candidates say in words what they cover."""
    async with serve(tmp_path) as harness:
        session = await open_session(harness.stub())
        watcher = Watcher(approver(harness))
        call = await prepare(
            harness.stub(),
            session,
            "Bash",
            {"command": "sed -n '1e id' notes.txt | git log --output=x"},
            evaluate=True,
        )
        pending = await watcher.approval(call.execution_id)
        (requirement,) = [r for r in pending.unmet if r.kind == "command.execute"]
        assert "runs code: sed script command `e`" in requirement.description
        assert "writes files: git log option --output" in requirement.description
        assert [c.match for c in pending.candidates] == [pending.command]

        plain = await prepare(
            harness.stub(), session, "Bash", {"command": "git log --oneline"}, evaluate=True
        )
        pending = await watcher.approval(plain.execution_id)
        (requirement,) = [r for r in pending.unmet if r.kind == "command.execute"]
        assert "warning" not in requirement.description
        family = pending.candidates[1]
        assert family.match == "Bash(git log:*)"
        assert "read-only options" in family.description


@bwrap_only[0]
@bwrap_only[1]
async def test_a_planted_bare_repository_does_not_run_code_through_git_status(
    tmp_path: Path,
) -> None:
    """Plant: WriteFile (allowed in the workspace) writes a bare repository whose config names
    an fsmonitor program. Trigger: `git status` in it, allowed by `Bash(git status:*)`. git
    would run the program (verified on git 2.39); commands run with
    `safe.bareRepository=explicit`, so git refuses the planted repository instead."""
    async with _serve(tmp_path, sandbox="bwrap") as harness:
        session = await open_session(harness.stub())
        planted = {
            "evil/HEAD": "ref: refs/heads/main\n",
            "evil/config": (
                "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ..\n"
                '\tfsmonitor = "touch pwned; false"\n'
            ),
            "evil/objects/.keep": "",
            "evil/refs/.keep": "",
        }
        for path, content in planted.items():
            written = await run(
                harness.stub(), session, "WriteFile", {"path": path, "content": content}
            )
            assert written.call.state == cpb.STATE_SUCCEEDED, (path, written.call)
        response = await _outcome(harness, session, "git status", workdir="evil")
        assert response.call.state == cpb.STATE_SUCCEEDED, response.call
        assert "safe.bareRepository" in response.result.text
        assert not (harness.workspace / "pwned").exists()
        assert not (harness.workspace / "evil" / "pwned").exists()
