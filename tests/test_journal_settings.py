"""The journal's durability setting is validated where it is configured."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from callgate.server.config import ConfigError, load_config
from callgate.server.core.journal import Event
from callgate.server.storage.journal import SqliteJournal


def test_journal_synchronous_accepts_only_normal_or_full() -> None:
    """`[journal] synchronous` is normal (default) or full; anything else names the key."""
    assert load_config(None, {}, environ={}).journal.synchronous == "normal"
    assert (
        load_config(None, {"journal": {"synchronous": "full"}}, environ={}).journal.synchronous
        == "full"
    )
    with pytest.raises(ConfigError, match=r"journal\.synchronous"):
        load_config(None, {"journal": {"synchronous": "off"}}, environ={})
    with pytest.raises(ValueError, match="synchronous"):
        SqliteJournal(Path("unused.db"), "off")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["normal", "full"])
async def test_the_journal_database_uses_the_configured_mode(tmp_path: Path, mode: str) -> None:
    """The connection runs in WAL mode with the configured synchronous level."""
    journal = SqliteJournal(tmp_path / "journal.db", mode)
    await journal.open()
    try:
        connection = sqlite3.connect(tmp_path / "journal.db")
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        connection.close()
        own = journal._connection  # the journal's own connection holds the setting
        assert own is not None
        assert own.execute("PRAGMA synchronous").fetchone()[0] == {"normal": 1, "full": 2}[mode]
    finally:
        await journal.aclose()


@pytest.mark.anyio
async def test_a_cancelled_commit_in_full_mode_neither_loses_nor_duplicates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `full` the write runs in a thread. gRPC cancels a handler (its asyncio task) when
    the client goes away, maybe while a thread writes that handler's commit: that must not put
    the batch back (written twice, and every later commit would fail) nor free the connection
    for another write meanwhile."""
    journal = SqliteJournal(tmp_path / "journal.db", "full")
    await journal.open()
    entered, release = threading.Event(), threading.Event()
    original = SqliteJournal._write

    def slow_write(self: SqliteJournal, batch: Sequence[Event]) -> None:
        entered.set()
        release.wait(10)
        original(self, batch)

    monkeypatch.setattr(SqliteJournal, "_write", slow_write)
    try:
        async with anyio.create_task_group() as writer:
            writer.start_soon(journal.run_writer)
            journal.record("session.opened", session_id="s1")
            handler = asyncio.get_running_loop().create_task(journal.commit())
            await anyio.to_thread.run_sync(entered.wait, 10)
            handler.cancel()  # as gRPC does, while the thread writes
            with pytest.raises(asyncio.CancelledError):
                await handler
            release.set()
            monkeypatch.setattr(SqliteJournal, "_write", original)
            journal.record("session.closed", session_id="s1")
            with anyio.fail_after(10):
                await journal.record_durable("call.invoked", execution_id="c1")
                await journal.commit()
            writer.cancel_scope.cancel()
    finally:
        release.set()
        await journal.aclose()
    connection = sqlite3.connect(tmp_path / "journal.db")
    kinds = [r[0] for r in connection.execute("SELECT kind FROM events ORDER BY seq")]
    connection.close()
    assert kinds == ["server.started", "session.opened", "session.closed", "call.invoked"]
