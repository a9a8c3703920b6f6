"""The docs are true: every command and snippet in them runs, and says what happens.

The pages are the README, `docs/*.md`, `bench/README.md` and `examples/README.md`. Every fenced
block has a language, and each language is checked:

- `sh`: each command runs, in order, with bash, in a temporary copy of the repository (a git
  repository of its own, with this checkout's `.venv` linked in) served by a real `callgate
  serve` in a temporary `HOME`, so that the commands find its socket and tokens where the docs
  say they are. A human approver is played by the test: it approves each pending call once
  and records it. What a command's trailing comment says is checked:
    `# denied...`            it fails, and says "denied";
    `# SOME_REASON: ...`     it fails, and prints that reason;
    `# gated...`             it succeeds, and an approver was asked during it;
    `# 200...` (a number)    it prints that number;
  anything else: it succeeds. A line ending in `&` starts in the background until the block
  ends. Commands that run until stopped (`make run`, `callgate approvals`, `callgate audit
  --follow`) are started, must say they are ready, and are stopped as a human would (Ctrl-C,
  or Ctrl-D for the approver). `make test` is the command CI runs (`.ci/run` runs it; running
  the suite from inside itself would not end). The fixed ports of the docs (50051, 8470, 8765)
  are replaced by free ones, and `make run` serves on its Unix socket only, so that a test
  never takes a port it did not create. Blocks that need docker run only where docker works.
- `python`: runs as a script in the same place; it must exit 0.
- `toml`: loads with the server's configuration loader without an error.
- `text`: output and diagrams; nothing to run.

Besides the blocks: every relative link and every repository path written in backticks names a
file that exists, every `make` target named exists, the README stays an entry page (at most
300 lines), and no file refers to the design notes outside the repository.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from callgate.server.config import ConfigError, load_config
from callgate.v1 import approval_service_pb2 as apb
from callgate.v1 import approval_service_pb2_grpc
from tests.support.sandbox import bwrap_path
from tests.support.serving import CALLGATE, wait_until_serving

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "bench" / "README.md",
        ROOT / "examples" / "README.md",
        *(ROOT / "docs").glob("*.md"),
    ]
)
BASH = shutil.which("bash") or "/bin/bash"
GIT = shutil.which("git") or "/usr/bin/git"
REPOSITORY_PATH = re.compile(r"(server|client|cli|proto|tests|bench|examples|deploy|docs)/[\w./-]*")
LANGUAGES = {"sh", "python", "toml", "text"}
DOC_PORTS = (50051, 8470, 8765)
COMMAND_SECONDS = 180.0
READY_SECONDS = 60.0

# Commands that run until stopped: what they print once ready, and how a human stops them.
UNTIL_STOPPED = {
    "make run": ("serving on", signal.SIGINT),
    "callgate approvals": ("waiting for pending calls", None),  # None: Ctrl-D (end of input)
    "callgate audit --follow": ("", signal.SIGINT),  # ready at its first line
}


@dataclass
class Block:
    page: Path
    line: int
    language: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page (fences may be indented, as inside a list item)."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    index = 0
    while index < len(lines):
        match = re.match(r"^(\s*)```(\S*)\s*$", lines[index])
        if not match:
            index += 1
            continue
        indent, language = match.groups()
        start = index
        index += 1
        body: list[str] = []
        while not re.match(rf"^{indent}```\s*$", lines[index]):
            body.append(lines[index][len(indent) :])
            index += 1
        found.append(Block(page, start + 1, language, "\n".join(body) + "\n"))
        index += 1
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks(page)]


def _ids(selected: list[Block]) -> list[str]:
    return [block.where for block in selected]


@dataclass
class Command:
    text: str
    comment: str


def commands(block: Block) -> list[Command]:
    """The block's commands: continuation lines joined, comment-only lines skipped, the
    trailing comment split off."""
    joined: list[str] = []
    pending = ""
    for raw in block.text.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        joined.append(pending + raw)
        pending = ""
    found = []
    for line in joined:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        text, comment = _split_comment(line)
        found.append(Command(text.strip(), comment.strip()))
    return found


def _split_comment(line: str) -> tuple[str, str]:
    """A line and its trailing comment: the first `#` outside quotes that follows a blank."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and index > 0 and line[index - 1] in " \t":
            return line[:index], line[index + 1 :]
    return line, ""


# ---- static checks ---------------------------------------------------------------------------


def test_every_block_names_a_language_that_is_checked() -> None:
    untagged = [block.where for block in ALL_BLOCKS if block.language not in LANGUAGES]
    assert untagged == []


def test_the_readme_is_an_entry_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    for page in ("docs/architecture.md", "docs/tools.md", "docs/security.md", "docs/api.md"):
        assert f"({page})" in readme, page


def _ignored(path: str) -> bool:
    """A path git ignores: made by running something (`examples/sample-run/`)."""
    checked = subprocess.run([GIT, "check-ignore", "-q", path], cwd=ROOT, check=False, timeout=60)
    return checked.returncode == 0


def test_links_and_paths_in_the_docs_exist() -> None:
    missing = []
    for page in PAGES:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            if not (page.parent / target).exists():
                missing.append(f"{page.relative_to(ROOT)}: link {target}")
        for span in re.findall(r"`([^`\n]+)`", text):
            path = span.split("::")[0]
            if (
                REPOSITORY_PATH.fullmatch(path)
                and not (ROOT / path).exists()
                and not _ignored(path)
            ):
                missing.append(f"{page.relative_to(ROOT)}: path {path}")
    assert missing == []


def test_make_targets_named_in_the_docs_exist() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.MULTILINE))
    named = {
        target
        for page in PAGES
        for target in re.findall(r"`make ([\w-]+)", page.read_text())
        + re.findall(r"^make ([\w-]+)", page.read_text(), re.MULTILINE)
    }
    assert named - targets == set()
    assert named, "the docs name no make target at all: the pattern is broken"


def test_no_file_refers_outside_the_repository() -> None:
    listed = subprocess.run(
        [GIT, "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    outside = []
    for name in filter(None, listed.split("\0")):
        path = ROOT / name
        if path.is_symlink() or not path.is_file() or path.suffix in {".png", ".whl"}:
            continue
        if name == "tests/e2e/test_docs.py":
            continue
        text = path.read_text(errors="replace")
        if re.search(r"\.\./shared|DESIGN\.md|\bDESIGN (section|§)", text):
            outside.append(name)
    assert outside == []


@pytest.mark.parametrize(
    "block",
    [b for b in ALL_BLOCKS if b.language == "toml"],
    ids=_ids([b for b in ALL_BLOCKS if b.language == "toml"]),
)
def test_toml_blocks_load(block: Block, tmp_path: Path) -> None:
    config = tmp_path / "callgate.toml"
    config.write_text(block.text)
    try:
        load_config(str(config), environ={"HOME": str(tmp_path)})
    except ConfigError as exc:
        pytest.fail(f"{block.where}: {exc}")


def test_make_test_is_what_ci_runs() -> None:
    """`make test` cannot run inside the suite it runs; CI runs it (`.ci/run`)."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "make test" in [line.strip() for line in ci]


# ---- running blocks --------------------------------------------------------------------------


@dataclass
class Approver:
    """A human at the approval console: approves every pending call once, answers every
    question with its first choice (or "yes"), and remembers what it was asked. It uses
    gRPC's synchronous API in a thread of its own: no second event loop in the test's
    process."""

    target: str
    token: str
    asked: list[str] = field(default_factory=list)
    _thread: threading.Thread | None = None
    _channel: grpc.Channel | None = None

    def start(self) -> None:
        self._channel = grpc.insecure_channel(self.target)
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._channel is not None:
            self._channel.close()  # ends the watch; the thread then returns
        if self._thread is not None:
            self._thread.join(30)

    def _watch(self) -> None:
        assert self._channel is not None
        stub = approval_service_pb2_grpc.ApprovalServiceStub(self._channel)
        metadata = (("authorization", f"Bearer {self.token}"),)
        # The server or the channel going away ends the human's watch too.
        with contextlib.suppress(grpc.RpcError, ValueError):
            for item in stub.WatchApprovals(apb.WatchApprovalsRequest(), metadata=metadata):
                if item.WhichOneof("item") == "approval":
                    call = item.approval.call
                    self.asked.append(call.execution_id)
                    stub.Decide(
                        apb.DecideRequest(
                            execution_id=call.execution_id,
                            digest=call.digest,
                            kind=apb.DECISION_KIND_APPROVE_ONCE,
                        ),
                        metadata=metadata,
                        timeout=30,
                    )
                elif item.WhichOneof("item") == "question":
                    question = item.question
                    answer = question.choices[0] if question.choices else "yes"
                    stub.Answer(
                        apb.AnswerRequest(execution_id=question.execution_id, answer=answer),
                        metadata=metadata,
                        timeout=30,
                    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Place:
    """Where a page's commands run: a copy of the repository, a HOME, the environment."""

    home: Path
    work: Path
    env: dict[str, str]
    ports: dict[int, int]

    @property
    def state_dir(self) -> Path:
        return self.home / ".local" / "state" / "callgate"


def _copy_repository(work: Path) -> None:
    listed = subprocess.run(
        [GIT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if not source.exists() and not source.is_symlink():
            continue
        target = work / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    (work / ".venv").symlink_to(ROOT / ".venv")
    git = [GIT, "-c", "user.name=docs", "-c", "user.email=docs@example.invalid"]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "docs"]):
        subprocess.run([*git, *step], cwd=work, check=True, timeout=60, capture_output=True)


@pytest.fixture
def place(tmp_path: Path) -> Place:
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    _copy_repository(work)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("CALLGATE_") and key not in ("XDG_STATE_HOME", "NO_COLOR")
    }
    env["HOME"] = str(home)
    env["PATH"] = f"{Path(CALLGATE).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    ports = {port: _free_port() for port in DOC_PORTS}
    return Place(home, work, env, ports)


def _drain(stream: object) -> None:
    """Read a child's pipe to its end in a thread, so that the child never blocks on it."""

    def read() -> None:
        for _ in stream:  # type: ignore[attr-defined]
            pass

    threading.Thread(target=read, daemon=True).start()


def _token(place: Place, role: str) -> str:
    return (place.state_dir / "tokens" / role).read_text().strip()


@contextmanager
def approving(place: Place) -> Iterator[Approver]:
    approver = Approver(f"unix://{place.state_dir / 'callgate.sock'}", _token(place, "approver"))
    approver.start()
    try:
        yield approver
    finally:
        approver.stop()


@contextmanager
def served(place: Place) -> Iterator[None]:
    """`callgate serve` in the copy on its default state directory (its Unix socket only)."""
    env = dict(place.env, CALLGATE_LISTEN=f"unix://{place.state_dir / 'callgate.sock'}")
    process = subprocess.Popen(
        [CALLGATE, "serve"],
        cwd=place.work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_until_serving(process)
        _drain(process.stderr)
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(READY_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # our own session
            process.wait(READY_SECONDS)


def _with_ports(text: str, place: Place) -> str:
    for documented, free in place.ports.items():
        text = re.sub(rf"(?<![\d.]){documented}(?!\d)", str(free), text)
    return text


def _until_stopped(text: str) -> tuple[str, signal.Signals | None] | None:
    bare = text.removeprefix(". .venv/bin/activate && ")
    for prefix, how in UNTIL_STOPPED.items():
        if bare.startswith(prefix):
            return how
    return None


@dataclass
class Running:
    command: str
    process: subprocess.Popen[str]
    stop: signal.Signals | None
    output: list[str] = field(default_factory=list)


def _start(text: str, place: Place, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [BASH, "-c", text],
        cwd=place.work,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _wait_ready(running: Running, ready: str) -> None:
    """Read the command's output until a line holding `ready` (any line when empty)."""
    assert running.process.stdout is not None
    stdout = running.process.stdout
    seen = threading.Event()

    def read() -> None:
        for line in stdout:
            running.output.append(line)
            if ready in line:
                seen.set()
        seen.set()

    threading.Thread(target=read, daemon=True).start()
    if not seen.wait(READY_SECONDS) or running.process.poll() not in (None, 0):
        pytest.fail(f"{running.command!r} did not get ready:\n{''.join(running.output)}")


def _stop(running: Running) -> None:
    process = running.process
    if process.poll() is None:
        if running.stop is None:
            assert process.stdin is not None
            process.stdin.close()  # Ctrl-D
        else:
            os.killpg(process.pid, running.stop)  # Ctrl-C, to its own session
        try:
            code = process.wait(READY_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(READY_SECONDS)
            pytest.fail(f"{running.command!r} did not stop:\n{''.join(running.output)}")
        if running.stop is None:
            assert code == 0, f"{running.command!r} exited {code}:\n{''.join(running.output)}"
    elif process.returncode not in (0, -signal.SIGINT, -signal.SIGTERM):
        pytest.fail(f"{running.command!r} exited {process.returncode}:\n{''.join(running.output)}")


def _check(command: Command, completed: subprocess.CompletedProcess[str], asked: int) -> None:
    output = completed.stdout + completed.stderr
    shown = f"{command.text!r} (# {command.comment}) exited {completed.returncode}:\n{output}"
    comment = command.comment
    reason = re.match(r"([A-Z][A-Z_]{3,}):", comment)
    number = re.match(r"(\d{3})\b", comment)
    if comment.startswith("denied"):
        assert completed.returncode != 0, shown
        assert "denied" in output, shown
    elif reason:
        assert completed.returncode != 0, shown
        assert reason.group(1) in output, shown
    elif number:
        assert completed.returncode == 0, shown
        assert number.group(1) in completed.stdout, shown
    else:
        assert completed.returncode == 0, shown
        if comment.startswith("gated"):
            assert asked > 0, f"{shown}\nno approver was asked"


def _needs_docker(block: Block) -> bool:
    return any(c.text.startswith(("docker ", "make image")) for c in commands(block))


def _docker_works() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    base = re.search(r"^FROM (\S+)", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    checks = [[docker, "info"], [docker, "image", "inspect", base.group(1) if base else ""]]
    return all(
        subprocess.run(argv, check=False, capture_output=True, timeout=60).returncode == 0
        for argv in checks
    )


RUNNABLE = [b for b in ALL_BLOCKS if b.language in ("sh", "python")]


@pytest.mark.parametrize("block", RUNNABLE, ids=_ids(RUNNABLE))
def test_block_runs(block: Block, place: Place) -> None:
    if bwrap_path() is None:
        pytest.skip("the docs' commands run under bubblewrap; it does not work on this machine")
    if block.language == "sh" and _needs_docker(block) and not _docker_works():
        pytest.skip("needs docker with the Dockerfile's base image; not on this machine")
    starts_its_own = block.language == "sh" and any(c.text == "make run" for c in commands(block))
    with ExitStack() as stack:
        approver: Approver | None = None
        if not starts_its_own:
            stack.enter_context(served(place))
            approver = stack.enter_context(approving(place))
        if block.language == "python":
            _run_python(block, place, approver)
            return
        running: list[Running] = []
        try:
            for command in commands(block):
                if command.text == "make test":
                    continue  # test_make_test_is_what_ci_runs
                text = _with_ports(command.text, place)
                env = dict(place.env)
                if command.text == "make run":
                    env["CALLGATE_LISTEN"] = f"unix://{place.state_dir / 'callgate.sock'}"
                    _install_is_current(place, env)
                until = _until_stopped(command.text)
                if until is not None or text.endswith("&"):
                    ready, stop = until if until is not None else ("", signal.SIGINT)
                    entry = Running(text, _start(text.removesuffix("&"), place, env), stop)
                    running.append(entry)
                    if until is not None:
                        _wait_ready(entry, ready)
                    else:
                        assert entry.process.stdout is not None
                        _drain(entry.process.stdout)
                    if command.text == "make run" and approver is None:
                        approver = stack.enter_context(approving(place))
                    continue
                asked = len(approver.asked) if approver is not None else 0
                completed = subprocess.run(
                    [BASH, "-c", text],
                    check=False,
                    cwd=place.work,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=COMMAND_SECONDS,
                )
                now = len(approver.asked) if approver is not None else 0
                _check(command, completed, now - asked)
        finally:
            for entry in reversed(running):
                _stop(entry)


def _install_is_current(place: Place, env: dict[str, str]) -> None:
    """`make run` in the copy installs first; the copy's `.venv` is this checkout's, so an
    install there would point the shared environment at a temporary copy. Run it only when
    make has nothing to install."""
    make = shutil.which("make") or "/usr/bin/make"
    question = subprocess.run(
        [make, "-q", "install"],
        cwd=place.work,
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    if question.returncode != 0:
        pytest.fail("make install is not current here (run it first); not installing from a copy")


def _run_python(block: Block, place: Place, approver: Approver | None) -> None:
    if block.text.startswith("# fragment"):
        # A few lines to paste into a program, shown in its context: they must compile there.
        compile(
            "async def _fragment():\n" + block.text.replace("\n", "\n    "), block.where, "exec"
        )
        return
    script = place.home / "snippet.py"
    script.write_text(block.text)
    completed = subprocess.run(
        [sys.executable, str(script)],
        check=False,
        cwd=place.work,
        env=place.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=COMMAND_SECONDS,
    )
    assert completed.returncode == 0, f"{block.where}:\n{completed.stdout}{completed.stderr}"
