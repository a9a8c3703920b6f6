"""The audit journal seam (DESIGN sections 2 and 8): what the lifecycle records, and a no-op.

Core never touches the database; `callgate.server.storage.journal` implements this over SQLite.
Events are recorded in order with no await (`record`); the one record that authorizes an effect
(`call.invoked`) is awaited with `record_durable`, which returns only once that event and every
event before it are committed, and raises if they cannot be.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

JsonValue = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]


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


class NullJournal:
    """Records nothing: for tests of the core and servers run without a state directory."""

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
