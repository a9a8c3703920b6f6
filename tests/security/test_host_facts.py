"""From the agent's seat: no answer (gRPC status and its details, the ToolCall's summary,
requirements and denial as GetCall shows them, the result) carries a host path the agent did
not send, and "missing" and "forbidden" answer alike outside the workspace and allowed roots.

The server runs in this process, so its cwd, interpreter and open files are this test's:
`/proc/self/...` on the server names them."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from callgate.v1 import tool_call_pb2, tool_service_pb2
from tests.support.calls import invoke, open_session, prepare
from tests.support.server import Harness, serve

pytestmark = pytest.mark.anyio

CWD = "here"  # the server's working directory during a test: a directory in the workspace
NOTES = "notes.txt"


@dataclass(frozen=True)
class Answer:
    """What the agent learns from one request: a failure, or a call with its result."""

    outcome: str  # the status code name, or the call's state
    kind: str  # ErrorInfo.reason, or the denial kind
    texts: tuple[str, ...]

    def without(self, sent: str) -> Answer:
        """The answer with the text the agent sent replaced, to compare two requests."""
        return Answer(self.outcome, self.kind, tuple(t.replace(sent, "<sent>") for t in self.texts))


def _status_answer(error: grpc.aio.AioRpcError) -> Answer:
    texts = [error.details() or ""]
    reason = ""
    for key, value in error.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        assert isinstance(value, bytes)
        status = status_pb2.Status.FromString(value)
        texts.append(status.message)
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason = info.reason
                texts += [info.domain, *info.metadata.keys(), *info.metadata.values()]
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                texts += [t for v in bad.field_violations for t in (v.field, v.description)]
            else:
                texts.append(str(detail))
    return Answer(error.code().name, reason, tuple(texts))


def _call_answer(call: tool_call_pb2.ToolCall) -> Answer:
    texts = [call.summary, call.denial.description]
    texts += [call.result.error_code, call.result.text, call.result.json]
    for requirement in call.requirements:
        texts += [requirement.scope, requirement.match, requirement.description]
    state = tool_call_pb2.State.Name(call.state)
    return Answer(state, tool_call_pb2.DenialKind.Name(call.denial.kind), tuple(texts))


async def _seen(harness: Harness, session: str, call: tool_call_pb2.ToolCall) -> Answer:
    """The call as Prepare returned it and as GetCall shows it, as one answer."""
    got = await harness.stub().GetCall(
        tool_service_pb2.GetCallRequest(session_id=session, execution_id=call.execution_id)
    )
    first, again = _call_answer(call), _call_answer(got.call)
    return Answer(first.outcome, first.kind, first.texts + again.texts)


async def prepare_answer(
    harness: Harness, session: str, tool: str, arguments: dict[str, object]
) -> Answer:
    try:
        call = await prepare(harness.stub(), session, tool, arguments, evaluate=True)
    except grpc.aio.AioRpcError as error:
        return _status_answer(error)
    return await _seen(harness, session, call)


def host_facts(harness: Harness, *extra: str) -> list[str]:
    """Host paths the agent never sends: the server's cwd and interpreter, the state
    directory (tokens), and what a test's symlinks or descriptors point to."""
    facts = [
        os.getcwd(),
        sys.executable,
        os.path.realpath(sys.executable),
        os.path.realpath("/proc/self/exe"),
        os.path.realpath(harness.state_dir),
        *extra,
    ]
    return [fact for fact in dict.fromkeys(facts) if fact not in ("", "/")]


def assert_no_host_facts(answer: Answer, sent: str, facts: list[str]) -> None:
    for fact in facts:
        if fact in sent:
            continue
        leaked = [text for text in answer.texts if fact in text]
        assert not leaked, f"{fact!r} leaked for {sent!r}: {leaked}"


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    async with serve(tmp_path) as running:
        yield running


@pytest.fixture
async def permissive(tmp_path: Path) -> AsyncIterator[Harness]:
    """Reads outside the workspace and commands allowed by policy: nothing waits for a human."""
    async with serve(tmp_path, access={"outside_read": "allow", "command": "allow"}) as running:
        yield running


@pytest.fixture
def server_cwd(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The server's working directory moved into its workspace, as under `make run`."""
    here = Path(os.path.realpath(harness.workspace)) / CWD
    here.mkdir()
    (here / NOTES).write_text("notes\n")
    monkeypatch.chdir(here)
    return here


@pytest.fixture
def open_file(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """A descriptor the server process holds open, and the path it names."""
    target = tmp_path / "open-elsewhere" / "held.txt"
    target.parent.mkdir()
    target.write_text("held\n")
    fd = os.open(target, os.O_RDONLY)
    try:
        yield fd, str(os.path.realpath(target))
    finally:
        os.close(fd)


@pytest.fixture
def links(harness: Harness) -> Path:
    """Symlinks in the workspace to /etc, to the server's state directory and to
    /proc/1/root (a link the server may not even read: resolving it raises EACCES)."""
    workspace = Path(os.path.realpath(harness.workspace))
    (workspace / "to_etc").symlink_to("/etc")
    (workspace / "to_state").symlink_to(os.path.realpath(harness.state_dir))
    (workspace / "to_init").symlink_to("/proc/1/root")
    return workspace


PROC_DECLARATIONS = [
    "/proc/self/cwd",
    "tree:/proc/self/cwd",
    f"/proc/self/cwd/{NOTES}",
    "/proc/self/exe",
    "/proc/self/fd/3",
    "/proc/self/fd/{fd}",
    "tree:/proc/self/fd/{fd}/..",
    "/proc/1/root",
    "tree:/proc/1/root",
    "//proc/./self/cwd",
    "tree:/sys/kernel",
]


@pytest.mark.parametrize("verb", ["read", "write"])
@pytest.mark.parametrize("declared", PROC_DECLARATIONS)
async def test_proc_declarations_are_refused_without_telling_where_they_lead(
    harness: Harness, server_cwd: Path, open_file: tuple[int, str], declared: str, verb: str
) -> None:
    """A Bash declaration in /proc or /sys is ARGUMENTS_INVALID naming its field, and says
    nothing of the server's cwd, interpreter or open files."""
    fd, held = open_file
    declared = declared.replace("{fd}", str(fd))
    session = await open_session(harness.stub())
    answer = await prepare_answer(
        harness, session, "Bash", {"command": "true", "access": {verb: [declared]}}
    )
    assert (answer.outcome, answer.kind) == ("INVALID_ARGUMENT", "ARGUMENTS_INVALID")
    assert f"arguments.access.{verb}[0]" in answer.texts
    facts = host_facts(harness, str(server_cwd), held, os.path.dirname(held))
    assert_no_host_facts(answer, declared, facts)


async def test_declarations_through_workspace_symlinks_never_show_the_target(
    harness: Harness, links: Path
) -> None:
    """A declaration that leaves the workspace through a symlink in it (to /etc, to the state
    directory) is refused with one answer, whatever the target and whether it exists."""
    declarations = [
        f"{links}/to_etc/hostname",
        f"tree:{links}/to_etc",
        "to_etc/hostname",
        f"{links}/to_state/tokens/agent",
        f"{links}/to_state/tokens/no-such-token",
        "tree:to_state",
        f"tree:{links}/to_state/tokens",
        "to_init/etc/hostname",
        f"tree:{links}/to_init",
    ]
    session = await open_session(harness.stub())
    answers = []
    for declared in declarations:
        answer = await prepare_answer(
            harness, session, "Bash", {"command": "true", "access": {"read": [declared]}}
        )
        assert (answer.outcome, answer.kind) == ("INVALID_ARGUMENT", "ARGUMENTS_INVALID")
        assert_no_host_facts(answer, declared, host_facts(harness, "/etc/"))
        answers.append(answer.without(declared))
    assert all(answer == answers[0] for answer in answers), answers


FORBIDDEN_AND_MISSING = [
    ("/root/.bashrc", "/root/no-such-file"),
    ("tree:/root/.cargo", "tree:/root/no-such-dir"),
    ("{state}/tokens/agent", "{state}/tokens/no-such-token"),
    ("tree:{state}/tokens", "tree:{state}/no-such-dir"),
]


@pytest.mark.parametrize("verb", ["read", "write"])
@pytest.mark.parametrize(("existing", "missing"), FORBIDDEN_AND_MISSING)
async def test_missing_and_forbidden_declarations_answer_alike(
    harness: Harness, existing: str, missing: str, verb: str
) -> None:
    """Outside the workspace a declaration that exists where the agent may not look (the
    server's home, its state directory) and one that does not exist get the same answer."""
    state = os.path.realpath(harness.state_dir)
    existing, missing = existing.replace("{state}", state), missing.replace("{state}", state)
    if not os.path.exists(existing.removeprefix("tree:")):
        pytest.skip(f"{existing} does not exist on this machine")
    session = await open_session(harness.stub())
    answers = []
    for declared in (existing, missing):
        answer = await prepare_answer(
            harness, session, "Bash", {"command": "true", "access": {verb: [declared]}}
        )
        assert_no_host_facts(answer, declared, host_facts(harness))
        answers.append(answer.without(declared.removeprefix("tree:")))
    assert answers[0] == answers[1]


async def test_a_symlink_outside_the_workspace_is_never_followed_or_named(
    permissive: Harness, tmp_path: Path
) -> None:
    """A declaration through a symlink outside the workspace (to the state directory) shows
    only what the agent wrote and, approved by policy, is refused at Invoke: nothing runs."""
    door = tmp_path / "door"
    door.symlink_to(os.path.realpath(permissive.state_dir) + "/tokens")
    declared = f"{door}/agent"
    stub = permissive.stub()
    session = await open_session(stub)
    command = f"cat {declared} > stolen.txt"
    call = await prepare(
        stub, session, "Bash", {"command": command, "access": {"read": [declared]}}, evaluate=True
    )
    assert call.state == tool_call_pb2.STATE_APPROVED, call.denial.description
    assert [r.match for r in call.requirements][1:] == [declared]
    response = await invoke(stub, session, call.execution_id)
    assert response.call.state == tool_call_pb2.STATE_FAILED
    assert response.result.error_code == "resolution_changed"
    assert not (permissive.workspace / "stolen.txt").exists()
    answer = await _seen(permissive, session, response.call)
    assert_no_host_facts(answer, command, host_facts(permissive))


PATH_ARGUMENTS: list[tuple[str, str, dict[str, object]]] = [
    ("ReadFile", "path", {}),
    ("WriteFile", "path", {"content": "x"}),
    ("EditFile", "path", {"old": "a", "new": "b"}),
    ("Glob", "root", {"pattern": "*"}),
    ("Grep", "path", {"pattern": "a"}),
    ("Bash", "workdir", {"command": "true"}),
]

OUTSIDE_PATHS = [
    "../../etc/passwd",
    "/proc/self/cwd",
    f"/proc/self/cwd/{NOTES}",
    "/proc/self/root{workspace}/" + CWD,
    "{workspace}/to_etc",
    "{workspace}/to_state/tokens/agent",
    "to_state/tokens/agent",
    "to_state/no-such-file",
    "to_init/etc/hostname",
    "/root/.bashrc",
    "/root/no-such-file",
]


@pytest.mark.parametrize(("tool", "field", "extra"), PATH_ARGUMENTS)
async def test_path_arguments_outside_the_workspace_get_one_answer(
    harness: Harness, server_cwd: Path, links: Path, tool: str, field: str, extra: dict[str, object]
) -> None:
    """Every path argument that is or leads outside the workspace (`..`, /proc, a symlink to
    /etc or the state directory, a path in /root that exists or not) gets one and the same
    ARGUMENTS_INVALID answer, naming nothing the agent did not send."""
    session = await open_session(harness.stub())
    answers = []
    for template in OUTSIDE_PATHS:
        raw = template.replace("{workspace}", str(links))
        answer = await prepare_answer(harness, session, tool, {field: raw, **extra})
        assert (answer.outcome, answer.kind) == ("INVALID_ARGUMENT", "ARGUMENTS_INVALID"), raw
        assert_no_host_facts(answer, raw, host_facts(harness, str(server_cwd), "/etc/"))
        answers.append(answer.without(raw))
    assert all(answer == answers[0] for answer in answers), answers


async def test_glob_passes_over_a_symlink_it_may_not_resolve(harness: Harness, links: Path) -> None:
    """A workspace symlink whose target the server may not read (/proc/1/root) is left out
    of a Glob listing, like any link leading outside, instead of failing the call."""
    (links / NOTES).write_text("notes\n")
    stub = harness.stub()
    session = await open_session(stub)
    call = await prepare(stub, session, "Glob", {"pattern": "*"}, evaluate=True)
    response = await invoke(stub, session, call.execution_id)
    assert response.call.state == tool_call_pb2.STATE_SUCCEEDED, response.result.text
    assert response.result.text.splitlines()[0] == NOTES


async def test_workspaces_outside_the_allowed_roots_get_one_answer(
    harness: Harness, server_cwd: Path, tmp_path: Path
) -> None:
    """OpenSession on a workspace outside the allowed roots answers the same whether the
    directory exists or not, and `/proc/self/cwd` (the server's cwd, inside an allowed root)
    is refused like them rather than opened."""
    (tmp_path / "elsewhere").mkdir()
    workspaces = [
        "/root",
        "/root/no-such-dir",
        str(tmp_path / "elsewhere"),
        str(tmp_path / "nowhere"),
        "/proc/self/cwd",
        f"/proc/self/root{server_cwd}",
        f"{server_cwd}/../../elsewhere",
    ]
    answers = []
    for workspace in workspaces:
        try:
            response = await harness.stub().OpenSession(
                tool_service_pb2.OpenSessionRequest(workspace=workspace)
            )
        except grpc.aio.AioRpcError as error:
            answer = _status_answer(error)
        else:
            answer = Answer("OK", "", (response.session.workspace,))
        assert (answer.outcome, answer.kind) == ("INVALID_ARGUMENT", "WORKSPACE_INVALID"), workspace
        assert_no_host_facts(answer, workspace, host_facts(harness, str(server_cwd)))
        answers.append(answer.without(workspace))
    assert all(answer == answers[0] for answer in answers), answers
