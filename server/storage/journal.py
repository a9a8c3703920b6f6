"""The durable audit journal in SQLite (WAL) at <state_dir>/journal.db.

Durability: `synchronous = "normal"` (the default) commits to the WAL without an fsync per
commit — an acknowledged record survives a crash or kill -9 of the server (the WAL is in the
kernel's page cache), but the last few milliseconds may be lost if the MACHINE loses power.
`"full"` fsyncs every commit (measured: about +1 ms per Invoke on these machines, which puts
the fast path and Bash over their benchmark targets). Set `[journal] synchronous` accordingly.

Ordering: every event gets its `seq` on the event loop when it is recorded, with no await, so
the journal order is the order things happened and `seq` is gap-free within a run. Writes go
through one lock to one connection in a worker thread, oldest first: the writer task commits
what is pending in batches shortly after it is recorded, and `record_durable` (the record that
authorizes an effect, `call.invoked`) commits everything up to and including its own event
before it returns. A failed write keeps its events pending, in order, for the next attempt;
a durable record that cannot be committed raises `JournalUnavailable`.

Nothing secret is written here by construction: the lifecycle passes only IDs, names,
summaries, requirements, digests, outcomes and error codes (design invariant 9).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import anyio

from callgate.server.core.errors import CallgateError, ErrorCode, Unavailable
from callgate.server.core.journal import Event, EventQuery, JsonValue

log = logging.getLogger(__name__)

JOURNAL_DB = "journal.db"
_RETRY_SECONDS = 1.0
_INSERT = "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    time TEXT NOT NULL,
    kind TEXT NOT NULL,
    session_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    data JSON NOT NULL
);
CREATE INDEX IF NOT EXISTS events_session ON events (session_id, seq);
CREATE INDEX IF NOT EXISTS events_execution ON events (execution_id, seq);
"""

# A call whose last event in its run is one of these was left open when that run ended.
_OPEN_CALLS = """
SELECT e.execution_id, e.session_id, e.principal, e.run_id FROM events e
WHERE e.kind IN ('call.prepared', 'call.invoked') AND e.run_id != ?
  AND NOT EXISTS (
    SELECT 1 FROM events t WHERE t.execution_id = e.execution_id AND t.seq > e.seq
      AND (t.kind IN ('call.finished', 'call.abandoned', 'call.invoked')
           OR (t.kind = 'call.decided' AND json_extract(t.data, '$.outcome') = 'denied'))
  )
  AND NOT (e.kind = 'call.prepared' AND EXISTS (
    SELECT 1 FROM events i WHERE i.execution_id = e.execution_id AND i.kind = 'call.invoked'))
ORDER BY e.seq
"""


class JournalUnacknowledged(CallgateError):
    """The request took effect but its records could not be committed before the answer.
    Not UNAVAILABLE on purpose: clients retry that automatically, and a retry would repeat
    the effect (or fail against the call's new state)."""

    code = ErrorCode.INTERNAL

    def __init__(self) -> None:
        super().__init__(
            "JOURNAL_UNACKNOWLEDGED",
            "The request took effect but the audit journal could not record it; look the call "
            "up with GetCall before repeating anything.",
        )


class JournalUnavailable(Unavailable):
    """The journal could not commit a record that must be durable before an effect."""

    def __init__(self) -> None:
        super().__init__(
            "JOURNAL_UNAVAILABLE", "The audit journal is unavailable; nothing was run."
        )


class SqliteJournal:
    """The journal of one server run, appended to the journal of the runs before it."""

    def __init__(self, path: Path, synchronous: str = "normal") -> None:
        if synchronous not in ("normal", "full"):
            raise ValueError("synchronous must be 'normal' or 'full'")
        self.path = path
        self.synchronous = synchronous
        self.run_id = "run_" + uuid.uuid4().hex
        self._connection: sqlite3.Connection | None = None
        # Looks execution IDs up from the event loop's thread (readers never wait in WAL mode).
        self._lookup: sqlite3.Connection | None = None
        # fast_acquire: an uncontended commit does not yield to the event loop first.
        self._lock = anyio.Lock(fast_acquire=True)
        self._pending: list[Event] = []
        # The batch a worker thread is writing (synchronous = "full"), until it is committed.
        self._writing: list[Event] = []
        self._next_seq = 0
        self._committed_seq = 0
        self._wake = anyio.Event()
        self._committed = anyio.Event()
        self._closed = False
        # The last seq a write committed (set by the write itself, in whichever thread).
        self._written_through = 0
        # Failed writes so far: waiters compare it to learn that their commit failed.
        self._failures = 0
        self._writer_running = False

    # ------------------------------------------------------------------ recording

    def record(
        self,
        kind: str,
        *,
        session_id: str = "",
        execution_id: str = "",
        principal: str = "",
        data: Mapping[str, JsonValue] | None = None,
    ) -> None:
        if self._connection is None:
            log.error(
                "an audit event was recorded while the journal is closed", extra={"kind": kind}
            )
            return
        self._append(kind, session_id, execution_id, principal, data)

    async def record_durable(
        self,
        kind: str,
        *,
        session_id: str = "",
        execution_id: str = "",
        principal: str = "",
        data: Mapping[str, JsonValue] | None = None,
    ) -> None:
        if self._connection is None:
            raise JournalUnavailable()
        seq = self._append(kind, session_id, execution_id, principal, data)
        try:
            await self._commit_through(seq)
        except Exception:
            log.exception("the audit journal could not commit a durable record")
            raise JournalUnavailable() from None

    async def _commit_through(self, seq: int) -> None:
        """Return once every event up to `seq` is committed; raise if the write fails.

        With "normal" the caller writes inline (no await inside the write, so a cancelled
        caller cannot interrupt one). With "full" the write runs in a thread, and only the
        writer task writes: an RPC task cancelled by gRPC while a thread writes would
        otherwise put the batch back (written twice) and free the connection mid-write.
        """
        while self._committed_seq < seq:
            if self.synchronous == "normal" or not self._writer_running:
                async with self._lock:
                    if self._committed_seq < seq:
                        await self._flush_locked()
                return
            failures = self._failures
            changed = self._committed
            self._wake.set()
            await changed.wait()
            if self._committed_seq < seq and self._failures != failures:
                raise JournalUnavailable()

    def _append(
        self,
        kind: str,
        session_id: str,
        execution_id: str,
        principal: str,
        data: Mapping[str, JsonValue] | None,
    ) -> int:
        self._next_seq += 1
        self._pending.append(
            Event(
                seq=self._next_seq,
                run_id=self.run_id,
                time=datetime.now(UTC),
                kind=kind,
                session_id=session_id,
                execution_id=execution_id,
                principal=principal,
                data=json.dumps(dict(data or {}), sort_keys=True, separators=(",", ":")),
            )
        )
        self._wake.set()
        return self._next_seq

    async def _flush_locked(self) -> None:
        batch = self._pending
        if not batch:
            return
        self._pending = []
        try:
            if self.synchronous == "normal":
                # No fsync: appending a few rows to the WAL is cheaper inline than a thread
                # hand-off (measured), and every Invoke pays for this write.
                self._write(batch)
            else:
                # Only the writer task gets here while it runs (see _commit_through).
                self._writing = batch
                try:
                    await anyio.to_thread.run_sync(self._write, batch)
                finally:
                    self._writing = []
        except BaseException as exc:
            if self._written_through >= batch[-1].seq:
                # Written after all (the caller was cancelled once the thread had finished):
                # putting it back would write it twice.
                self._mark_committed(batch[-1].seq)
                raise
            # Keep them, in order, ahead of anything recorded since (gap-free).
            self._pending = batch + self._pending
            if isinstance(exc, Exception):
                self._failures += 1
                self._notify()  # waiters for a commit learn that it failed
            raise
        self._mark_committed(batch[-1].seq)

    def _mark_committed(self, seq: int) -> None:
        self._committed_seq = seq
        self._notify()

    def _notify(self) -> None:
        self._committed.set()
        self._committed = anyio.Event()

    def changed(self) -> anyio.Event:
        return self._committed

    def _write(self, batch: Sequence[Event]) -> None:
        connection = self._connection
        assert connection is not None
        if len(batch) == 1:
            # One statement in autocommit mode is its own transaction: the cheapest commit.
            connection.execute(_INSERT, batch[0].row())
        else:
            with connection:
                connection.execute("BEGIN IMMEDIATE")
                connection.executemany(_INSERT, [e.row() for e in batch])
        self._written_through = batch[-1].seq

    async def commit(self) -> None:
        """Commit everything recorded so far before an RPC answers; raises
        `JournalUnavailable` if that cannot be done (the events stay pending, in order)."""
        if self._committed_seq >= self._next_seq:
            return
        if self._connection is None:
            raise JournalUnacknowledged()
        try:
            await self._commit_through(self._next_seq)
        except Exception:
            log.exception("the audit journal could not commit before an answer")
            raise JournalUnacknowledged() from None

    async def flush(self) -> None:
        """Commit everything recorded so far."""
        async with self._lock:
            await self._flush_locked()

    # ------------------------------------------------------------------ lifetime

    async def open(self) -> None:
        """Open (creating if needed) the database, record `server.started`, and record every
        call a previous run left open as `call.abandoned`; all committed before returning."""
        abandoned = await anyio.to_thread.run_sync(self._open)
        self.record("server.started", data={"abandoned_calls": len(abandoned)})
        for execution_id, session_id, principal, run_id in abandoned:
            self.record(
                "call.abandoned",
                session_id=session_id,
                execution_id=execution_id,
                principal=principal,
                data={"previous_run_id": run_id},
            )
        await self.flush()

    def _open(self) -> list[tuple[str, str, str, str]]:
        connection = sqlite3.connect(
            self.path, timeout=10.0, isolation_level=None, check_same_thread=False
        )
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
            connection.executescript(_SCHEMA)
            last = connection.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0]
            rows = connection.execute(_OPEN_CALLS, (self.run_id,)).fetchall()
        except BaseException:
            connection.close()
            raise
        self._connection = connection
        self._lookup = sqlite3.connect(
            self.path, timeout=10.0, isolation_level=None, check_same_thread=False
        )
        self._next_seq = self._committed_seq = self._written_through = int(last)
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    async def run_writer(self) -> None:
        """The writer task: commit pending events soon after they are recorded. Runs until
        cancelled (in the app's task group); `aclose` commits what is left."""
        self._writer_running = True
        try:
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                if not self._pending:
                    continue  # committed meanwhile by the RPC that recorded it (the fast path)
                try:
                    await self.flush()
                except Exception:
                    log.exception("the audit journal could not commit; retrying")
                    await anyio.sleep(_RETRY_SECONDS)
                    self._wake.set()
        finally:
            self._writer_running = False
            self._notify()  # waiters commit for themselves from now on

    async def aclose(self) -> None:
        """Commit what is pending and close the database."""
        if self._connection is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                await self.flush()
            except Exception:
                log.exception("the audit journal lost events at shutdown")
            async with self._lock:
                connection, self._connection = self._connection, None
                if connection is not None:
                    connection.close()
                lookup, self._lookup = self._lookup, None
                if lookup is not None:
                    lookup.close()

    # ------------------------------------------------------------------ reading

    def holds_execution(self, execution_id: str) -> bool:
        """Any event of `execution_id`, pending or committed, this run or before (one indexed
        row lookup). A journal that cannot be read holds it, so the ID is refused."""
        if any(e.execution_id == execution_id for e in (*self._pending, *self._writing)):
            return True
        if self._lookup is None:
            return False
        try:
            row = self._lookup.execute(
                "SELECT 1 FROM events WHERE execution_id = ? LIMIT 1", (execution_id,)
            ).fetchone()
        except sqlite3.Error:
            log.exception("the audit journal could not be read")
            return True
        return row is not None

    async def events(self, query: EventQuery) -> list[Event]:
        """Committed events matching `query`, oldest first (every answered request's are
        committed). Reading never writes; a database that cannot be read is UNAVAILABLE."""
        try:
            return await anyio.to_thread.run_sync(self._select, query)
        except sqlite3.Error:
            log.exception("the audit journal could not be read")
            raise Unavailable(
                "JOURNAL_UNAVAILABLE", "The audit journal cannot be read now; try again later."
            ) from None

    def _select(self, query: EventQuery) -> list[Event]:
        clauses = ["seq > ?"]
        params: list[object] = [query.after_seq]
        for column, value in (
            ("session_id", query.session_id),
            ("execution_id", query.execution_id),
        ):
            if value:
                clauses.append(f"{column} = ?")
                params.append(value)
        if query.kind.endswith("."):
            clauses.append("substr(kind, 1, ?) = ?")
            params += [len(query.kind), query.kind]
        elif query.kind:
            clauses.append("kind = ?")
            params.append(query.kind)
        # Times are stored as UTC ISO 8601 text, which orders like the times themselves.
        if query.start_time is not None:
            clauses.append("time >= ?")
            params.append(query.start_time.astimezone(UTC).isoformat())
        if query.end_time is not None:
            clauses.append("time < ?")
            params.append(query.end_time.astimezone(UTC).isoformat())
        params.append(query.limit)
        where = " AND ".join(clauses)
        # Only the fixed column names above are interpolated; every value is a parameter.
        sql = f"SELECT * FROM events WHERE {where} ORDER BY seq LIMIT ?"  # noqa: S608
        # A separate read connection: readers never wait behind the writer in WAL mode.
        connection = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        try:
            rows = connection.execute(sql, params).fetchall()
        finally:
            connection.close()
        return [
            Event(
                seq=r[0],
                run_id=r[1],
                time=datetime.fromisoformat(r[2]),
                kind=r[3],
                session_id=r[4],
                execution_id=r[5],
                principal=r[6],
                data=r[7],
            )
            for r in rows
        ]
