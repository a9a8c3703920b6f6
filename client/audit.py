"""Reading callgate's audit journal: `CallgateClient.audit` (AuditService).

async with CallgateClient(target, token=approver_token) as client:
    async for event in client.audit.events(kind="call.finished"):
        print(event.seq, event.kind, event.execution_id, event.data)
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from google.protobuf import timestamp_pb2

from callgate.client.conversion import audit_event_from_proto
from callgate.client.models import AuditEvent
from callgate.client.transport import Transport
from callgate.v1 import audit_service_pb2

if TYPE_CHECKING:
    from callgate.v1.audit_service_pb2_grpc import AuditServiceAsyncStub

__all__ = ["Audit", "AuditEvent", "EventPage"]


@dataclass(frozen=True, slots=True)
class EventPage:
    events: list[AuditEvent]
    # Pass to `list_events(page_token=...)` for the next page; "" when this is the last.
    next_page_token: str


def _filter(
    session_id: str,
    execution_id: str,
    kind: str,
    start_time: datetime | None,
    end_time: datetime | None,
) -> audit_service_pb2.EventFilter:
    message = audit_service_pb2.EventFilter(
        session_id=session_id, execution_id=execution_id, kind=kind
    )
    if start_time is not None:
        message.start_time.CopyFrom(_timestamp(start_time))
    if end_time is not None:
        message.end_time.CopyFrom(_timestamp(end_time))
    return message


def _timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    if value.tzinfo is None:
        raise ValueError("audit filter times must be timezone-aware")
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value)
    return stamp


class Audit:
    """AuditService through one client. Needs a token with the approver role (or admin);
    an agent token gets `PermissionDeniedError`. Filters left empty match everything; `kind`
    is an exact kind ("call.finished") or a family ending in a dot ("process.")."""

    def __init__(self, stub: AuditServiceAsyncStub, transport: Transport) -> None:
        self._stub = stub
        self._transport = transport

    async def list_events(
        self,
        *,
        session_id: str = "",
        execution_id: str = "",
        kind: str = "",
        start_time: datetime | None = None,
        end_time: datetime | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> EventPage:
        """One page of matching events, oldest first."""
        response = await self._transport.unary(
            self._stub.ListEvents,
            audit_service_pb2.ListEventsRequest(
                filter=_filter(session_id, execution_id, kind, start_time, end_time),
                page_size=page_size,
                page_token=page_token,
            ),
        )
        return EventPage(
            [audit_event_from_proto(e) for e in response.events], response.next_page_token
        )

    async def events(
        self,
        *,
        session_id: str = "",
        execution_id: str = "",
        kind: str = "",
        start_time: datetime | None = None,
        end_time: datetime | None = None,
        page_size: int = 0,
    ) -> AsyncGenerator[AuditEvent, None]:
        """Every matching event committed now, oldest first, page by page."""
        token = ""
        while True:
            page = await self.list_events(
                session_id=session_id,
                execution_id=execution_id,
                kind=kind,
                start_time=start_time,
                end_time=end_time,
                page_size=page_size,
                page_token=token,
            )
            for event in page.events:
                yield event
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def watch(
        self,
        *,
        session_id: str = "",
        execution_id: str = "",
        kind: str = "",
        start_time: datetime | None = None,
        end_time: datetime | None = None,
        after_seq: int = 0,
    ) -> AsyncGenerator[AuditEvent, None]:
        """Matching events with a seq above `after_seq` (0: the whole journal), then each new
        one as it is committed. Never ends on its own; leaving the iteration (best inside
        `contextlib.aclosing`) cancels the stream."""
        request = audit_service_pb2.WatchEventsRequest(
            filter=_filter(session_id, execution_id, kind, start_time, end_time),
            after_seq=after_seq,
        )
        async with aclosing(
            self._transport.server_stream(self._stub.WatchEvents, request)
        ) as responses:
            async for response in responses:
                yield audit_event_from_proto(response.event)
