"""From the agent's seat: a workspace file that keeps flipping between a regular file and a
symlink to a file outside the workspace (the admin token) must never turn Grep into a
match/no-match oracle on that file. ripgrep opens paths by name after the server's checks, so
it runs confined to a view that holds only the searched part of the workspace."""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from tests.support.calls import open_session, run
from tests.support.sandbox import bwrap_only
from tests.support.server import Harness, serve

pytestmark = [pytest.mark.anyio, *bwrap_only]

ATTEMPTS = 2000
# The generated tokens are 43 URL-safe characters; the flipper's own file never matches.
TOKEN_PATTERN = "^[A-Za-z0-9_-]{40,}$"


@pytest.fixture(params=[True, False], ids=["ripgrep", "walk"])
async def harness(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """Both engines: ripgrep confined by bubblewrap, and the walk in the server."""
    async with serve(tmp_path, sandbox="bwrap", tools={"ripgrep": request.param}) as running:
        yield running


@contextmanager
def flipping(name: Path, target: Path) -> Iterator[list[int]]:
    """Keep `name` flipping between a regular file (no match) and a symlink to `target`, by
    atomic renames, as a background command of the agent's would. Yields the flip count."""
    link, plain = name.with_name(".flip-link"), name.with_name(".flip-plain")
    stop = threading.Event()
    flips = [0]

    def flip() -> None:
        while not stop.is_set():
            plain.write_text("nothing to see\n")
            os.replace(plain, name)
            link.unlink(missing_ok=True)
            link.symlink_to(target)
            os.replace(link, name)
            flips[0] += 1

    thread = threading.Thread(target=flip, daemon=True)
    thread.start()
    try:
        yield flips
    finally:
        stop.set()
        thread.join(timeout=5)


async def test_a_flipping_symlink_never_makes_grep_read_outside(harness: Harness) -> None:
    """2,000 Greps of the workspace while `flip` races between a file and a symlink to the
    admin token: not one reports a match in `flip`."""
    token_file = harness.running.token_dir
    assert token_file is not None
    stub = harness.stub()
    session = await open_session(stub)
    (harness.workspace / "readme.md").write_text("hello\n")
    hits: list[str] = []
    with flipping(harness.workspace / "flip", token_file / "admin") as flips:

        async def grep_many(count: int) -> None:
            for _ in range(count):
                response = await run(stub, session, "Grep", {"pattern": TOKEN_PATTERN})
                if "flip" in response.result.text:
                    hits.append(response.result.text)

        async with anyio.create_task_group() as group:
            for _ in range(4):
                group.start_soon(grep_many, ATTEMPTS // 4)
    # The race ran: the file flipped all along (the walk answers faster than ripgrep starts,
    # so it sees fewer flips per Grep; at least one per two Greps either way).
    assert flips[0] > ATTEMPTS // 2
    assert hits == []
