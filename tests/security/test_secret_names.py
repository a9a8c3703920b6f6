"""From the agent's seat: secrets under every name a file tool could reach them by — case
variants, backups, every key type, and other names of the same file (hard links)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from callgate.v1 import tool_call_pb2
from tests.support.calls import invoke, open_session, prepare, run
from tests.support.sandbox import bwrap_path
from tests.support.server import Harness, serve

pytestmark = pytest.mark.anyio

SECRET = "s3cr3t-value-91ab"
NAMES = [
    ".envrc",
    ".env~",
    ".ENV",
    "conf/.Env.Production",
    "keys/id_ecdsa",
    "keys/id_ed25519_sk",
    "certs/client.p12",
    "certs/client.pfx",
    ".npmrc",
    ".pypirc",
    "home/.docker/config.json",
    "home/.kube/config",
]


@pytest.fixture(params=["python", "ripgrep"])
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    """Grep with each engine: Python (no sandbox) and ripgrep (confined by bubblewrap)."""
    if request.param == "ripgrep" and bwrap_path() is None:
        pytest.skip("bubblewrap is not available")
    sandbox = "bwrap" if request.param == "ripgrep" else "none"
    async with serve(tmp_path, sandbox=sandbox) as running:
        yield running


async def read_refused(harness: Harness, session: str, name: str) -> bool:
    """ReadFile of `name` is denied by the gate, or refused at run with read_denied."""
    stub = harness.stub()
    call = await prepare(stub, session, "ReadFile", {"path": name}, evaluate=True)
    if call.state == tool_call_pb2.STATE_DENIED:
        return True
    response = await invoke(stub, session, call.execution_id)
    return response.result.error_code == "read_denied" and SECRET not in response.result.text


def plant(workspace: Path, name: str) -> Path:
    path = workspace / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"TOKEN={SECRET}\n")
    return path


@pytest.mark.parametrize("name", NAMES)
async def test_secret_names_are_refused_to_read_file_and_grep(harness: Harness, name: str) -> None:
    """ReadFile is refused and Grep finds nothing, whatever the case or variant."""
    plant(harness.workspace, name)
    stub = harness.stub()
    session = await open_session(stub)
    assert await read_refused(harness, session, name)
    grep = await run(stub, session, "Grep", {"pattern": SECRET})
    assert SECRET not in grep.result.text


async def test_a_hard_link_to_a_secret_is_protected(harness: Harness) -> None:
    """Another name of `.env` (and of a key deep in node_modules) is refused to ReadFile and
    never shows in Grep; an ordinary file with two names stays readable."""
    env = plant(harness.workspace, "app/.env")
    key = plant(harness.workspace, "node_modules/pkg/deep/server.key")
    os.link(env, harness.workspace / "notes.txt")
    os.link(key, harness.workspace / "readme.md")
    (harness.workspace / "shared.txt").write_text("shared line\n")
    os.link(harness.workspace / "shared.txt", harness.workspace / "shared-too.txt")
    stub = harness.stub()
    session = await open_session(stub)
    for name in ("notes.txt", "readme.md"):
        assert await read_refused(harness, session, name), name
    grep = await run(stub, session, "Grep", {"pattern": "TOKEN|shared"})
    assert SECRET not in grep.result.text
    assert "shared-too.txt:1:shared line" in grep.result.text
    read = await run(stub, session, "ReadFile", {"path": "shared-too.txt"})
    assert "shared line" in read.result.text
