"""Attack review of least authority, from the agent seat (agent token, calls policy allows, files it
writes in the workspace). Skipped tests are successful attacks (the skip reason names the
finding) that the lead fixes and unskips; the others are attacks that held, where no other
test covers them."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.calls import open_session, run
from tests.support.sandbox import bwrap_only
from tests.support.server import Harness, serve

pytestmark = [pytest.mark.anyio, *bwrap_only]

SECRET = "s3cr3t-value-7f1d"
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def sandboxed(tmp_path: Path) -> AsyncIterator[Harness]:
    """Commands are allowed by policy and run under bubblewrap."""
    async with serve(tmp_path, sandbox="bwrap", access={"command": "allow"}) as running:
        yield running


async def bash(harness: Harness, session: str, command: str) -> str:
    response = await run(harness.stub(), session, "Bash", {"command": command})
    return response.result.text


def make_repository(workspace: Path, *, hooks: bool = True) -> Path:
    """The user's repository; `hooks=False`: one made without templates (no hooks folder)."""
    git = workspace / ".git"
    git.mkdir()
    if hooks:
        (git / "hooks").mkdir()
    (git / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "objects").mkdir()
    (git / "refs" / "heads").mkdir(parents=True)
    return git


# --------------------------------------------------- read-only files that do not exist yet


async def test_a_command_cannot_add_a_hook_to_a_repository_that_has_no_hooks_directory(
    sandboxed: Harness,
) -> None:
    """A repository made without `.git/hooks` gets the empty directory `git init` makes before
    a command runs, bound read-only: no hook can be planted for the user's git to run."""
    git = make_repository(sandboxed.workspace, hooks=False)
    session = await open_session(sandboxed.stub())
    await bash(
        sandboxed,
        session,
        "mkdir -p .git/hooks; printf '#!/bin/sh\\ntouch pwned\\n' > .git/hooks/pre-commit; true",
    )
    assert (git / "hooks").is_dir()
    assert list((git / "hooks").iterdir()) == []


@pytest.mark.parametrize("relative", [".git/commondir", ".mcp.json", ".vscode/tasks.json"])
async def test_known_gap_a_file_that_runs_code_and_does_not_exist_yet_can_be_created(
    sandboxed: Harness, relative: str
) -> None:
    """Pins a documented gap (README, Security: what is not covered): bubblewrap makes only
    existing paths read-only, and a placeholder would change the user's repository (an empty
    `.git/commondir` breaks git), so a command can still create these files. When this test
    fails, the gap is closed: move the case to the tests above and update the README."""
    make_repository(sandboxed.workspace)
    session = await open_session(sandboxed.stub())
    path = sandboxed.workspace / relative
    await bash(sandboxed, session, f"mkdir -p {path.parent} && printf 'x\\n' > {relative}; true")
    assert path.exists()


# --------------------------------------- the walk skips what it cannot list (non-root server)

# Run in a server process without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH: what any server not
# running as root is. The walk cannot list a directory mode 0311, skips it silently, so its
# secrets are not masked and its directories not pinned; the command then lists nothing but
# opens by name.
_NON_ROOT_SERVER = textwrap.dedent(
    """
    import sys, anyio
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from tests.support.calls import open_session, run
    from tests.support.server import serve

    async def main() -> None:
        async with serve(Path({tmp!r}), sandbox="bwrap", access={{"command": "allow"}}) as h:
            (h.workspace / "cfg").mkdir()
            (h.workspace / "cfg" / ".env").write_text("T={secret}\\n")
            git = h.workspace / ".git"
            (git / "hooks").mkdir(parents=True)
            (git / "config").write_text("[core]\\n")
            stub = h.stub()
            session = await open_session(stub)
            for command in (
                "chmod 311 cfg .git; true",
                "chmod 755 cfg .git; cat cfg/.env; echo '[x]' >> .git/config; true",
            ):
                response = await run(stub, session, "Bash", {{"command": command}})
                print(response.result.text)
            print("config:", (git / "config").read_text().replace("\\n", " "))

    anyio.run(main)
    """
)


def test_an_unlistable_directory_does_not_unmask_its_secrets(tmp_path: Path) -> None:
    """A command making a secret's directory (or `.git`) unreadable to the server's walk
    gets neither the secret nor a writable `.git/config` in its next command."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is needed to drop the DAC capabilities")
    script = _NON_ROOT_SERVER.format(root=str(REPO_ROOT), tmp=str(tmp_path), secret=SECRET)
    done = subprocess.run(
        [setpriv, "--bounding-set", "-dac_override,-dac_read_search", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "config: [core] " in done.stdout
    assert SECRET not in done.stdout
    assert "[x]" not in done.stdout


# ------------------------------------------------------------- ripgrep's output is parsed


async def test_a_newline_in_a_file_name_does_not_make_grep_report_another_file(
    sandboxed: Harness,
) -> None:
    """Grep (confined ripgrep) reports only lines that match, in the files that hold them."""
    (sandboxed.workspace / "b").write_text("one\ntwo\nunrelated\n")
    (sandboxed.workspace / "x\nb").write_text("no\nno\nneedle\n")
    session = await open_session(sandboxed.stub())
    response = await run(sandboxed.stub(), session, "Grep", {"pattern": "needle"})
    assert "unrelated" not in response.result.text
    assert "needle" in response.result.text


# ------------------------------------------------------------------------ attacks that held


async def test_an_x32_syscall_cannot_set_a_setuid_bit(sandboxed: Harness) -> None:
    """chmod through the x32 ABI (syscall number | 0x40000000), which a filter for x86_64
    numbers alone would not inspect, ends the command and leaves no setuid bit."""
    if not Path("/usr/bin/python3").exists():
        pytest.skip("needs python3 in the sandbox")
    if platform.machine() != "x86_64":
        pytest.skip("the x32 ABI exists only on x86_64")
    session = await open_session(sandboxed.stub())
    text = await bash(
        sandboxed,
        session,
        "cp /bin/true f; /usr/bin/python3 -c 'import ctypes; "
        'ctypes.CDLL(None).syscall(0x40000000 | 90, b"f", 0o4755)\'; echo after=$?',
    )
    assert "after=159" in text  # 128 + SIGSYS: the filter killed it
    assert (sandboxed.workspace / "f").stat().st_mode & 0o6000 == 0
