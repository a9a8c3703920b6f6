"""Reading the audit journal back (AuditService): validated filters, paging, following.

Readers need the approver role (admin has it). The journal holds no secrets by construction
(see `journal`), so an approver may read every session's events — the same calls it decides.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final

import anyio

from .errors import Unavailable, request_invalid
from .journal import Event, EventQuery, JournalReader
from .principals import Principal, Role

DEFAULT_PAGE_SIZE: Final = 100
MAX_PAGE_SIZE: Final = 1000
# Events read per query while following; a watcher catches up in batches of this many.
WATCH_BATCH: Final = 500
# After a commit wakes a watcher, it waits this long so that one read covers the commits of
# a busy moment (hundreds per second under load) instead of one read per commit.
WATCH_COALESCE_SECONDS: Final = 0.05
_ID_MAX: Final = 128
_KIND = re.compile(r"[a-z][a-z_]*(\.[a-z][a-z_]*)*\.?")
_PAGE_PREFIX: Final = "after:"
_MAX_SEQ: Final = 2**63 - 1  # SQLite's INTEGER


@dataclass(frozen=True, slots=True)
class EventFilter:
    """What an audit reader asked for; empty fields match everything."""

    session_id: str = ""
    execution_id: str = ""
    kind: str = ""
    start_time: datetime | None = None
    end_time: datetime | None = None


@dataclass(frozen=True, slots=True)
class EventPage:
    events: list[Event]
    # Empty when this page is the last one now.
    next_page_token: str


def _check_filter(event_filter: EventFilter) -> None:
    for field, value in (
        ("filter.session_id", event_filter.session_id),
        ("filter.execution_id", event_filter.execution_id),
    ):
        if len(value) > _ID_MAX or not value.isprintable():
            raise request_invalid(field, f"must be an ID of at most {_ID_MAX} printable characters")
    kind = event_filter.kind
    if kind and (len(kind) > 64 or not _KIND.fullmatch(kind)):
        raise request_invalid(
            "filter.kind", 'must be an event kind such as "call.finished", or a family "call."'
        )
    start, end = event_filter.start_time, event_filter.end_time
    if start is not None and end is not None and end <= start:
        raise request_invalid("filter.end_time", "must be after filter.start_time")


def encode_page_token(after_seq: int) -> str:
    return base64.urlsafe_b64encode(f"{_PAGE_PREFIX}{after_seq}".encode()).decode()


def decode_page_token(token: str) -> int:
    """The seq a page token continues after; REQUEST_INVALID for anything this server did not
    hand out."""
    if not token:
        return 0
    try:
        text = base64.urlsafe_b64decode(token.encode("ascii")).decode("ascii")
    except (binascii.Error, UnicodeError, ValueError):
        text = ""
    number = text.removeprefix(_PAGE_PREFIX)
    if (
        not text.startswith(_PAGE_PREFIX)
        or not number.isdigit()
        or len(number) > 19
        or int(number) > _MAX_SEQ
    ):
        raise request_invalid("page_token", "pass the next_page_token of the previous page")
    return int(number)


class Audit:
    """The AuditService's core: list and follow journal events."""

    def __init__(self, reader: JournalReader) -> None:
        self._reader = reader
        self._stopping = anyio.Event()

    def begin_shutdown(self) -> None:
        """End every watch (UNAVAILABLE / SHUTTING_DOWN) and refuse new ones."""
        self._stopping.set()

    async def list_events(
        self, principal: Principal, event_filter: EventFilter, page_size: int, page_token: str
    ) -> EventPage:
        principal.require(Role.APPROVER)
        _check_filter(event_filter)
        if page_size < 0 or page_size > MAX_PAGE_SIZE:
            raise request_invalid("page_size", f"must be 0 (the default) to {MAX_PAGE_SIZE}")
        limit = page_size or DEFAULT_PAGE_SIZE
        after = decode_page_token(page_token)
        # One more than a page tells whether there is a next page.
        events = await self._reader.events(_query(event_filter, after, limit + 1))
        if len(events) > limit:
            events = events[:limit]
            return EventPage(events, encode_page_token(events[-1].seq))
        return EventPage(events, "")

    async def watch(
        self, principal: Principal, event_filter: EventFilter, after_seq: int
    ) -> AsyncIterator[Event]:
        """Matching events after `after_seq`, then each new one once committed; raises
        UNAVAILABLE / SHUTTING_DOWN when the server stops."""
        principal.require(Role.APPROVER)
        _check_filter(event_filter)
        if after_seq < 0:
            raise request_invalid("after_seq", "must be 0 (from the start) or a seq")
        query = _query(event_filter, after_seq, WATCH_BATCH)
        while True:
            if self._stopping.is_set():
                raise _shutting_down()
            changed = self._reader.changed()
            events = await self._reader.events(query)
            for event in events:
                yield event
            if events:
                query = replace(query, after_seq=events[-1].seq)
            if len(events) < WATCH_BATCH:
                await _first_of(changed, self._stopping)
                with anyio.move_on_after(WATCH_COALESCE_SECONDS):
                    await self._stopping.wait()


def _query(event_filter: EventFilter, after_seq: int, limit: int) -> EventQuery:
    return EventQuery(
        session_id=event_filter.session_id,
        execution_id=event_filter.execution_id,
        kind=event_filter.kind,
        after_seq=after_seq,
        start_time=event_filter.start_time,
        end_time=event_filter.end_time,
        limit=limit,
    )


def _shutting_down() -> Unavailable:
    return Unavailable("SHUTTING_DOWN", "The server is shutting down; retry on another instance.")


async def _first_of(*events: anyio.Event) -> None:
    async with anyio.create_task_group() as waiters:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            waiters.cancel_scope.cancel()

        for event in events:
            waiters.start_soon(wait, event)
