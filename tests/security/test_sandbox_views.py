"""From the agent's seat (agent token, commands policy allows): what a sandboxed command can see
and change. Secrets are masked wherever they are (any depth, noise directories, hard links);
files that make programs run code are read-only; nothing a command does moves a secret out
from under the next command's masks."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.calls import open_session, run
from tests.support.sandbox import bwrap_only
from tests.support.server import Harness, serve

pytestmark = [pytest.mark.anyio, *bwrap_only]

SECRET = "s3cr3t-value-7f1d"


@pytest.fixture
async def sandboxed(tmp_path: Path) -> AsyncIterator[Harness]:
    """Commands are allowed by policy and run under bubblewrap."""
    async with serve(tmp_path, sandbox="bwrap", access={"command": "allow"}) as running:
        yield running


async def bash(harness: Harness, command: str) -> str:
    stub = harness.stub()
    session = await open_session(stub)
    response = await run(stub, session, "Bash", {"command": command})
    return response.result.text


def plant_large_workspace(workspace: Path, files: int) -> list[Path]:
    """`files` small files in a node_modules-like tree, and secrets where masks used to miss
    them: depth 12, behind a large sibling directory, inside node_modules and .git."""
    per_directory = 100
    for index in range(files // per_directory):
        directory = workspace / "node_modules" / f"pkg{index // 10}" / f"lib{index % 10}"
        directory.mkdir(parents=True)
        for number in range(per_directory):
            (directory / f"m{number}.js").write_text("module.exports = 1\n")
    deep = workspace.joinpath(*[f"d{level}" for level in range(12)])
    deep.mkdir(parents=True)
    secrets = [
        deep / ".env",
        workspace / "zz" / ".env",
        workspace / "node_modules" / "pkg0" / ".env",
        workspace / ".git" / "credentials.key",
        workspace / "conf" / ".ENV",
        workspace / "keys" / "id_ecdsa",
    ]
    for path in secrets:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"TOKEN={SECRET}\n")
    os.link(deep / ".env", workspace / "notes.txt")
    return secrets


async def test_masks_hold_in_a_50000_file_workspace(sandboxed: Harness) -> None:
    """Every secret, and a hard link to one, reads as nothing; a recursive grep finds none."""
    secrets = plant_large_workspace(sandboxed.workspace, 50_000)
    names = " ".join(str(p.relative_to(sandboxed.workspace)) for p in secrets)
    text = await bash(sandboxed, f"cat {names} notes.txt; grep -r {SECRET} . ; echo done")
    assert SECRET not in text
    assert text.endswith("done\n[exit code: 0]")


async def test_a_secret_cannot_be_carried_out_from_under_the_masks(sandboxed: Harness) -> None:
    """Renaming a directory that holds a secret, or the secret itself, or linking it, fails:
    the next command's masks still cover it."""
    (sandboxed.workspace / "cfg").mkdir()
    (sandboxed.workspace / "cfg" / ".env").write_text(f"T={SECRET}\n")
    text = await bash(
        sandboxed,
        "mv cfg moved; mv cfg/.env cfg/plain; ln cfg/.env linked; cp cfg/.env copy; "
        "cat moved/.env cfg/plain linked copy; echo done",
    )
    assert "done" in text
    assert not (sandboxed.workspace / "moved").exists()
    text = await bash(sandboxed, "cat cfg/.env moved/.env cfg/plain linked copy 2>&1; echo done")
    assert SECRET not in text
    assert (sandboxed.workspace / "cfg" / ".env").read_text() == f"T={SECRET}\n"


def make_repository(workspace: Path) -> Path:
    git = workspace / ".git"
    (git / "hooks").mkdir(parents=True)
    (git / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "objects").mkdir()
    (git / "refs" / "heads").mkdir(parents=True)
    return git


async def test_git_config_and_hooks_are_read_only_to_commands(sandboxed: Harness) -> None:
    """No route from a command changes .git/config or adds a hook, and a config planted in
    the private HOME is not read: an allowed `git status` runs nothing of the agent's."""
    git = make_repository(sandboxed.workspace)
    (sandboxed.workspace / ".bashrc").write_text("# user's\n")
    (sandboxed.workspace / "sub").mkdir()
    (sandboxed.workspace / "sub" / ".git").write_text("gitdir: ../.git\n")
    before = (git / "config").read_text()
    marker = sandboxed.workspace / "pwned"
    attack = (
        f"echo '[core]' >> .git/config; printf 'fsmonitor = touch {marker}\\n' >> .git/config; "
        "git config core.fsmonitor 'touch pwned'; "
        f"printf '#!/bin/sh\\ntouch {marker}\\n' > .git/hooks/pre-commit; "
        "chmod +x .git/hooks/pre-commit; rm -f .git/config; mv .git/config .git/c2; "
        "mv .git .g; mv .git/hooks .git/h2; echo x >> .bashrc; "
        "git config --global core.fsmonitor 'touch pwned'; "
        f"printf '[core]\\n\\tfsmonitor = touch {marker}\\n' > ~/.gitconfig; "
        "echo 'gitdir: /tmp/planted' > sub/.git; rm -f sub/.git; echo done"
    )
    text = await bash(sandboxed, attack)
    assert text.endswith("done\n[exit code: 0]")
    assert (git / "config").read_text() == before
    assert list((git / "hooks").iterdir()) == []
    assert (sandboxed.workspace / ".bashrc").read_text() == "# user's\n"
    assert (sandboxed.workspace / "sub" / ".git").read_text() == "gitdir: ../.git\n"
    assert (sandboxed.workspace / ".git").is_dir()
    await bash(sandboxed, "git status >/dev/null 2>&1; true")
    assert not marker.exists()


async def test_a_workspace_too_large_to_check_in_time_is_refused(tmp_path: Path) -> None:
    """Past the scan budget the command is refused with a clear error, never run half-masked."""
    async with serve(
        tmp_path, sandbox="bwrap", access={"command": "allow"}, tools={"scan_seconds": 0.001}
    ) as harness:
        plant_large_workspace(harness.workspace, 5_000)
        stub = harness.stub()
        session = await open_session(stub)
        marker = harness.workspace / "ran"
        response = await run(stub, session, "Bash", {"command": f"touch {marker}"})
        assert response.result.is_error
        assert response.result.error_code == "scan_timed_out"
        assert not marker.exists()


async def test_grep_and_a_hard_linked_read_over_the_scan_budget_fail_closed(
    tmp_path: Path,
) -> None:
    """Past the scan budget, confined Grep (ripgrep) is refused (`scan_timed_out`) rather than
    search with masks that might be incomplete, and a file with several names is not read (it
    might be another name of a secret)."""
    tools = {"scan_seconds": 0.001, "ripgrep": True}
    async with serve(tmp_path, sandbox="bwrap", tools=tools) as harness:
        plant_large_workspace(harness.workspace, 5_000)
        (harness.workspace / "plain.txt").write_text("plain\n")
        os.link(harness.workspace / "plain.txt", harness.workspace / "plain-too.txt")
        stub = harness.stub()
        session = await open_session(stub)
        grep = await run(stub, session, "Grep", {"pattern": "plain"})
        assert grep.result.error_code == "scan_timed_out"
        read = await run(stub, session, "ReadFile", {"path": "plain-too.txt"})
        assert read.result.error_code == "read_denied"
        assert "plain" not in read.result.text.replace("plain-too.txt", "")
        single = await run(stub, session, "ReadFile", {"path": "node_modules/pkg0/lib0/m0.js"})
        assert "module.exports" in single.result.text


async def test_the_walking_grep_over_the_scan_budget_skips_a_file_with_several_names(
    tmp_path: Path,
) -> None:
    """The in-server Grep needs no scan up front; a file with several names would cost one,
    and past the budget it is not read (fail closed): neither of its names is reported."""
    async with serve(tmp_path, sandbox="bwrap", tools={"scan_seconds": 0.001}) as harness:
        plant_large_workspace(harness.workspace, 5_000)
        (harness.workspace / "plain.txt").write_text("plain\n")
        os.link(harness.workspace / "plain.txt", harness.workspace / "plain-too.txt")
        (harness.workspace / "single.txt").write_text("plain single\n")
        stub = harness.stub()
        session = await open_session(stub)
        grep = await run(stub, session, "Grep", {"pattern": "plain"})
    assert not grep.result.is_error, grep.result.text
    assert "single.txt:1:plain single" in grep.result.text
    assert "plain.txt:" not in grep.result.text
    assert "plain-too.txt:" not in grep.result.text
