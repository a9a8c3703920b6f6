"""The journal's durability setting is validated where it is configured."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from callgate.server.config import ConfigError, load_config
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
