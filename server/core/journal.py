"""The audit journal seam (design sections 2 and 8): what the lifecycle records, and a no-op.

Core never touches the database; `callgate.server.storage.journal` implements this over SQLite.
Events are recorded in order with no await (`record`); the one record that authorizes an effect
(`call.invoked`) is awaited with `record_durable`, which returns only once that event and every
event before it are committed, and raises if they cannot be.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import anyio

JsonValue = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]


@dataclass(frozen=True, slots=True)
class Event:
    """One journal record."""

    seq: int
    run_id: str
    time: datetime
    kind: str
    session_id: str
    execution_id: str
    principal: str
    # A JSON object (see `Journal.record`).
    data: str

    def row(self) -> tuple[int, str, str, str, str, str, str, str]:
        return (
            self.seq,
            self.run_id,
            self.time.isoformat(),
            self.kind,
            self.session_id,
            self.execution_id,
            self.principal,
            self.data,
        )


@dataclass(frozen=True, slots=True)
class EventQuery:
    """Filters and paging for `JournalReader.events` (empty filters match everything)."""

    session_id: str = ""
    execution_id: str = ""
    # An exact kind, or a family ending in "." ("call.").
    kind: str = ""
    after_seq: int = 0
    start_time: datetime | None = None
    end_time: datetime | None = None
    limit: int = 100


class JournalReader(Protocol):
    """Reading the journal back (the AuditService)."""

    async def events(self, query: EventQuery) -> list[Event]:
        """Committed events matching `query`, oldest first (at most `query.limit`)."""
        ...

    def changed(self) -> anyio.Event:
        """An event set when the next commit lands (get it before reading, then wait)."""
        ...


class Journal(Protocol):
    """An ordered, gap-free event log. Data must never hold arguments, contents or output."""

    def record(
        self,
        kind: str,
        *,
        session_id: str = "",
        execution_id: str = "",
        principal: str = "",
        data: Mapping[str, JsonValue] | None = None,
    ) -> None:
        """Append an event now (ordered); it becomes durable shortly after."""
        ...

    async def record_durable(
        self,
        kind: str,
        *,
        session_id: str = "",
        execution_id: str = "",
        principal: str = "",
        data: Mapping[str, JsonValue] | None = None,
    ) -> None:
        """Append an event and return once it (and everything before it) is committed."""
        ...

    async def commit(self) -> None:
        """Return once every event recorded so far is committed (raises if it cannot be):
        what an RPC acknowledges is in the journal before the answer leaves."""
        ...

    def holds_execution(self, execution_id: str) -> bool:
        """True when the journal has any event of the call `execution_id`, from this run or
        an earlier one (an execution ID names one call, ever)."""
        ...


class NullJournal:
    """Records nothing: for tests of the core and servers run without a state directory."""

    def holds_execution(self, execution_id: str) -> bool:
        return False

    def record(
        self,
        kind: str,
        *,
        session_id: str = "",
        execution_id: str = "",
        principal: str = "",
        data: Mapping[str, JsonValue] | None = None,
    ) -> None:
        return None

    async def record_durable(
        self,
        kind: str,
        *,
        session_id: str = "",
        execution_id: str = "",
        principal: str = "",
        data: Mapping[str, JsonValue] | None = None,
    ) -> None:
        return None

    async def commit(self) -> None:
        return None
