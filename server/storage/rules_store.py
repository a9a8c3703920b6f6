"""Workspace rules persisted in SQLite (WAL) under the state directory (design section 8).

Every call runs the blocking sqlite3 work in a worker thread; each operation opens its own
connection, so there is no connection shared across threads. A write returns only once it is
committed (synchronous=FULL), which is what lets APPROVE_ALWAYS approve after it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import anyio

from callgate.server.core.rules import Effect, Rule, shown_pattern

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rules (
    rule_id TEXT PRIMARY KEY,
    effect TEXT NOT NULL,
    kind TEXT NOT NULL,
    match TEXT NOT NULL,
    scope TEXT NOT NULL,
    origin TEXT NOT NULL,
    create_time TEXT NOT NULL
)
"""


class SqliteRuleStore:
    """The persisted workspace rules, one row per rule."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        connection.execute("PRAGMA synchronous=FULL")
        return connection

    def _open(self) -> None:
        connection = self._connect()
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(_SCHEMA)
        finally:
            connection.close()

    def _load(self) -> list[Rule]:
        self._open()
        connection = self._connect()
        try:
            rows = connection.execute(
                "SELECT rule_id, effect, kind, match, scope, origin, create_time FROM rules "
                "ORDER BY create_time, rule_id"
            ).fetchall()
        finally:
            connection.close()
        return [
            Rule(
                rule_id=row[0],
                effect=Effect(row[1]),
                kind=row[2],
                match=shown_pattern(row[2], row[3]),
                scope=row[4],
                origin=row[5],
                create_time=datetime.fromisoformat(row[6]),
            )
            for row in rows
        ]

    def _add(self, rules: Sequence[Rule]) -> None:
        connection = self._connect()
        try:
            with connection:
                connection.execute("BEGIN IMMEDIATE")
                connection.executemany(
                    "INSERT INTO rules VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            r.rule_id,
                            r.effect.value,
                            r.kind,
                            r.match,
                            r.scope,
                            r.origin,
                            r.create_time.isoformat(),
                        )
                        for r in rules
                    ],
                )
        finally:
            connection.close()

    def _delete(self, rule_id: str) -> None:
        connection = self._connect()
        try:
            with connection:
                connection.execute("BEGIN IMMEDIATE")
                connection.execute("DELETE FROM rules WHERE rule_id = ?", (rule_id,))
        finally:
            connection.close()

    async def load(self) -> list[Rule]:
        """Create the database if needed and read every persisted rule."""
        return await anyio.to_thread.run_sync(self._load)

    async def add(self, rules: Sequence[Rule]) -> None:
        await anyio.to_thread.run_sync(self._add, list(rules))

    async def delete(self, rule_id: str) -> None:
        await anyio.to_thread.run_sync(self._delete, rule_id)
