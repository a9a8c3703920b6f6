"""What a rule promises, the kernel holds, attacked from the agent's seat.

bash evaluates array subscripts in `test -v` (and `[ -v ]`, `let`, `read`, `printf -v`, `declare
-i`), so a single-quoted word under a read-only family runs any `$(…)` it holds; `${x@P}` and
`mapfile -C` run code too. Reading the text better does not end this, so:
- a command allowed by a read-only family (not by a human decision on this exact call) runs in a
  sandbox where every bind is read-only, HOME read-only, TMPDIR a throwaway tmpfs, no network;
- a program a deny family names (`Bash(rm:*)`) is masked in every sandboxed command, so no
  spelling, no loader and no copy runs it, even after a human approval;
- no family is offered for a command whose words are not provably inert;
- without the sandbox, families allow nothing by themselves.
Every command here runs inside bubblewrap, in temporary workspaces, against loopback only.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from callgate.server.commands.matching import rule_candidates
from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.support.approvals import approver, decide
from tests.support.calls import invoke, open_session, prepare
from tests.support.sandbox import needs_bwrap
from tests.support.server import Harness, serve

pytestmark = pytest.mark.anyio

READ_ONLY_FAMILIES = ("Bash(test:*)", "Bash(echo:*)", "Bash(cat:*)", "Bash(ls:*)")


def _rules(*patterns: str, effect: str = "allow") -> list[dict[str, str]]:
    return [{"effect": effect, "kind": "command.execute", "match": p} for p in patterns]


async def _policy_run(harness: Harness, session: str, command: str) -> Any:
    """Prepare with evaluation; Invoke when the policy approved it. None when it did not."""
    stub = harness.stub()
    call = await prepare(stub, session, "Bash", {"command": command}, evaluate=True)
    if call.state != cpb.STATE_APPROVED:
        return None
    return (await invoke(stub, session, call.execution_id)).result


async def _human_run(harness: Harness, session: str, command: str) -> Any:
    """Prepare with evaluation; an approver approves it once when it waits; then Invoke.
    None when the gate denied it (a deny rule read it from the text)."""
    stub = harness.stub()
    call = await prepare(stub, session, "Bash", {"command": command}, evaluate=True)
    if call.state == cpb.STATE_DENIED:
        return None
    assert call.state == cpb.STATE_AWAITING_APPROVAL, call
    approved = await decide(approver(harness), call, apb.DECISION_KIND_APPROVE_ONCE)
    assert approved.state == cpb.STATE_APPROVED, approved
    return (await invoke(stub, session, call.execution_id)).result


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(root.rglob("*"))
    }


# Each runs code through a word a read-only family covers: a subscript that `test -v` evaluates,
# prompt expansion and a mapfile callback inside it, and `echo` reaching them through `test`.
SUBSCRIPT_ATTACKS = [
    "test -v 'a[$(touch planted)]'",
    "test -v 'a[$(rm victim.txt)]'",
    "test -v 'a[$(echo changed > victim.txt)]'",
    "test -v 'a[$(x=\"\\$(touch prompt)\"; echo ${x@P})]'",
    "test -v 'a[$(mapfile -C \"touch callback\" -c 1 lines < victim.txt)]'",
    "test -v 'a[$(touch ~/in-home; touch \"$TMPDIR/in-tmp\"; touch /tmp/in-slash-tmp)]'",
    'test -v \'a[$(python3 -c "open(\\"py.txt\\", \\"w\\").write(\\"x\\")")]\'',
    "test -f victim.txt && test -v 'a[$(mkdir made)]' && echo done",
    "test -v 'a[$(cp victim.txt copy.txt)]' ; ls",
]


@pytest.fixture
async def read_only_families(tmp_path: Path) -> AsyncIterator[Harness]:
    async with serve(
        tmp_path,
        sandbox="bwrap",
        rules=_rules(*READ_ONLY_FAMILIES),
        approval_mode="headless",
    ) as harness:
        yield harness


@needs_bwrap
@pytest.mark.parametrize("command", SUBSCRIPT_ATTACKS)
async def test_a_read_only_family_runs_read_only_whatever_the_shell_does(
    read_only_families: Harness, command: str
) -> None:
    """Under read-only families, a command that runs code through a subscript, a prompt
    expansion or a mapfile callback runs by policy, and changes nothing: no file made,
    changed or deleted in the workspace, none in the session's HOME."""
    harness = read_only_families
    (harness.workspace / "victim.txt").write_text("original\n")
    before = _snapshot(harness.workspace)
    session = await open_session(harness.stub())
    # A first command makes the session's private HOME and TMPDIR.
    assert await _policy_run(harness, session, "test -e victim.txt") is not None
    private = harness.state_dir / "sessions" / session
    assert private.is_dir()
    private_before = _snapshot(private)
    result = await _policy_run(harness, session, command)
    assert result is not None, "the family should allow this by policy (it did before)"
    assert _snapshot(harness.workspace) == before, result.text
    assert _snapshot(private) == private_before


@needs_bwrap
async def test_a_read_only_family_reaches_no_network(read_only_families: Harness) -> None:
    """A subscript under a read-only family reaches no listener on loopback, by curl, by
    bash's /dev/tcp or by Python."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        session = await open_session(read_only_families.stub())
        for command in (
            f"test -v 'a[$(curl -s -m 5 http://127.0.0.1:{port}/curl)]'",
            f"test -v 'a[$(echo GET > /dev/tcp/127.0.0.1/{port})]'",
            "test -v 'a[$(python3 -c \"import socket; "
            f'socket.create_connection((\\"127.0.0.1\\", {port}), 5)")]\'',
        ):
            result = await _policy_run(read_only_families, session, command)
            assert result is not None
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected


@needs_bwrap
async def test_the_read_only_sandbox_applies_to_families_only(tmp_path: Path) -> None:
    """The same write allowed by an exact rule (a human saved exactly this command) or by a
    family that writes keeps today's sandbox: read-only is for read-only families."""
    rules = _rules("touch exact.txt", "Bash(touch:*)")
    async with serve(tmp_path, sandbox="bwrap", rules=rules, approval_mode="headless") as harness:
        session = await open_session(harness.stub())
        assert (await _policy_run(harness, session, "touch exact.txt")) is not None
        assert (harness.workspace / "exact.txt").exists()
        assert (await _policy_run(harness, session, "touch family.txt")) is not None
        assert (harness.workspace / "family.txt").exists()


# Spellings that reach `rm` past a deny family's reading of the text (each one deleted its
# victim after a human approval on the old code), plus the loader and a copy.
RM_SPELLINGS = [
    "test -v 'a[$(rm victim.txt)]'",
    'echo "${x:-`rm victim.txt`}"',
    "x='$(rm victim.txt)'; echo ${x@P}",
    "mapfile -C 'rm victim.txt #' -c 1 lines < keep.txt",
    "git -c core.fsmonitor='rm victim.txt; false' status",
    "script -qec 'rm victim.txt' /dev/null",
    "setpriv --reuid 0 rm victim.txt",
    "chrt -o 0 rm victim.txt",
    "tar -cf /dev/null -I 'rm victim.txt #' keep.txt",
    "/lib64/ld-linux-x86-64.so.2 /usr/bin/rm victim.txt",
    "cp /usr/bin/rm ./myrm; chmod +x ./myrm; ./myrm victim.txt",
    'python3 -c \'import subprocess; subprocess.run(["rm", "victim.txt"])\'',
    'python3 -c \'import os; os.execv("/bin/rm", ["rm", "victim.txt"])\'',
    "busybox rm victim.txt || true",
]


@pytest.fixture
async def rm_denied(tmp_path: Path) -> AsyncIterator[Harness]:
    async with serve(
        tmp_path, sandbox="bwrap", rules=_rules("Bash(rm:*)", effect="deny")
    ) as harness:
        (harness.workspace / "keep.txt").write_text("one line\n")
        yield harness


@needs_bwrap
async def test_a_denied_program_cannot_run_by_any_spelling_even_approved(
    rm_denied: Harness,
) -> None:
    """With `Bash(rm:*)` denied, every spelling that gets past the text (and an approver who
    approves it) still cannot run rm: its files are masked in the sandbox, so neither a
    wrapper, nor the ELF loader, nor a copy of it deletes the victim."""
    harness = rm_denied
    session = await open_session(harness.stub())
    ran = 0
    for command in RM_SPELLINGS:
        victim = harness.workspace / "victim.txt"
        victim.write_text("keep me\n")
        result = await _human_run(harness, session, command)
        if result is not None:
            ran += 1
        assert victim.exists(), (command, result.text if result is not None else "denied")
    assert ran >= len(RM_SPELLINGS) // 2, "most spellings should get past the text"


@pytest.mark.parametrize(
    "command",
    [
        "test -v 'a[$(id)]'",
        "ls 'a[1]'",
        'cat "$HOME/notes"',
        "echo '${x@P}'",
        "cat notes`id`.txt",
        "ls \\$x",
        'test -n "a[$(id)]"',
        "cat 'x$(id)'",
    ],
)
def test_no_family_is_offered_for_words_that_may_run_code(command: str) -> None:
    """A remembered family is offered only for words the parse proves inert; otherwise a
    "session" or "always" decision saves the exact command only."""
    assert rule_candidates(command) == [command]


@pytest.mark.parametrize(
    ("command", "family"),
    [("test -f notes.txt", "Bash(test:*)"), ("ls -la 'my dir'", "Bash(ls:*)")],
)
def test_inert_words_still_get_their_family(command: str, family: str) -> None:
    """Plain words (quoted or not) are inert: the family is still offered for them."""
    assert family in rule_candidates(command)


async def _families_trailer(harness: Harness) -> str:
    async with grpc.aio.insecure_channel(harness.tcp_target) as channel:
        call = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        await call
        trailer = dict(await call.trailing_metadata() or ())
        return str(trailer.get("callgate-command-families", ""))


async def test_without_the_sandbox_a_family_allows_nothing_by_itself(tmp_path: Path) -> None:
    """Where the kernel cannot hold a family (no sandbox), a command it covers is gated, an
    exact rule still allows its command, and health and GetSession say so."""
    rules = _rules("Bash(ls:*)", "echo exact")
    async with serve(tmp_path, sandbox="none", rules=rules) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        gated = await prepare(stub, session, "Bash", {"command": "ls -la"}, evaluate=True)
        assert gated.state == cpb.STATE_AWAITING_APPROVAL
        exact = await prepare(stub, session, "Bash", {"command": "echo exact"}, evaluate=True)
        assert exact.state == cpb.STATE_APPROVED
        assert await _families_trailer(harness) == "gated"
        got = await stub.GetSession(tpb.GetSessionRequest(session_id=session))
        assert "famil" in got.session.sandbox_warning


@needs_bwrap
async def test_with_the_sandbox_families_are_enforced(tmp_path: Path) -> None:
    """With bubblewrap, health says families are held by the kernel, and a call a read-only
    family allowed says it runs read-only (an exact rule's call does not)."""
    rules = _rules("Bash(ls:*)", "ls -la exact")
    async with serve(tmp_path, sandbox="bwrap", rules=rules) as harness:
        assert await _families_trailer(harness) == "enforced"
        stub = harness.stub()
        session = await open_session(stub)
        call = await prepare(stub, session, "Bash", {"command": "ls -la"}, evaluate=True)
        assert call.state == cpb.STATE_APPROVED
        assert call.decision.read_only
        result = (await invoke(stub, session, call.execution_id)).result
        assert not result.is_error, result.text
        exact = await prepare(stub, session, "Bash", {"command": "ls -la exact"}, evaluate=True)
        assert exact.state == cpb.STATE_APPROVED
        assert not exact.decision.read_only


@needs_bwrap
@pytest.mark.parametrize(
    ("writing", "prefix"),
    [("Bash(cd:*)", "cd . && "), ("Bash(tee:*)", "echo notes | tee notes.txt; ")],
)
async def test_a_writing_family_beside_a_read_only_one_does_not_lift_the_sandbox(
    tmp_path: Path, writing: str, prefix: str
) -> None:
    """A segment a writing family covers beside a read-only family's segment whose words run
    code: the policy does not allow it (the writable sandbox would run that code with the
    writing family's authority); it waits for a human, and headless nothing runs."""
    rules = _rules("Bash(test:*)", "Bash(echo:*)", writing)
    async with serve(tmp_path, sandbox="bwrap", rules=rules, approval_mode="headless") as harness:
        (harness.workspace / "victim.txt").write_text("keep\n")
        session = await open_session(harness.stub())
        command = prefix + "test -v 'a[$(rm victim.txt)]'"
        call = await prepare(harness.stub(), session, "Bash", {"command": command}, evaluate=True)
        assert call.state == cpb.STATE_DENIED
        assert call.denial.kind == cpb.DENIAL_KIND_APPROVAL_REQUIRED
        assert (harness.workspace / "victim.txt").read_text() == "keep\n"
        # Inert words beside the writing family are still allowed, in the normal sandbox.
        plain = prefix + "test -f victim.txt"
        allowed = await prepare(harness.stub(), session, "Bash", {"command": plain}, evaluate=True)
        assert allowed.state == cpb.STATE_APPROVED
        assert not allowed.decision.read_only


@needs_bwrap
async def test_a_denied_programs_packaged_copy_is_masked_too(tmp_path: Path) -> None:
    """With `Bash(git:*)` denied, git's own copy outside PATH (`/usr/lib/git-core/git` and its
    `git-*` links on Debian) cannot run either, even approved by a human."""
    packaged = Path("/usr/lib/git-core/git")
    if not packaged.is_file():
        pytest.skip("no packaged copy of git here")
    async with serve(tmp_path, sandbox="bwrap", rules=_rules("Bash(git:*)", effect="deny")) as h:
        session = await open_session(h.stub())
        ran = 0
        for command in (
            "/usr/lib/git-core/git-init -q r1",
            "test -v 'a[$(/usr/lib/git-core/git init -q r2)]'",
            "cp /usr/lib/git-core/git ./g && ./g init -q r3",
        ):
            ran += await _human_run(h, session, command) is not None
        assert ran >= 2
        assert not [p.name for p in h.workspace.iterdir() if (p / ".git").exists()]
