"""callgate.v1.AuditService: journal events, listed in pages or followed as they commit."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf import timestamp_pb2

from callgate.server.core.audit import Audit, EventFilter
from callgate.server.core.errors import request_invalid
from callgate.server.core.journal import Event
from callgate.v1 import audit_service_pb2 as pb

from .convert import timestamp
from .handlers import Call, StreamHandler, UnaryHandler


def _time(message: pb.EventFilter, field: str) -> datetime | None:
    if not message.HasField(field):  # type: ignore[arg-type]  # a field name of EventFilter
        return None
    value: timestamp_pb2.Timestamp = getattr(message, field)
    try:
        return value.ToDatetime(UTC)
    except (ValueError, OverflowError):
        raise request_invalid(
            f"filter.{field}", "must be a valid time between years 1 and 9999"
        ) from None


def filter_from_proto(message: pb.EventFilter) -> EventFilter:
    return EventFilter(
        session_id=message.session_id,
        execution_id=message.execution_id,
        kind=message.kind,
        start_time=_time(message, "start_time"),
        end_time=_time(message, "end_time"),
    )


def event_to_proto(event: Event) -> pb.AuditEvent:
    return pb.AuditEvent(
        seq=event.seq,
        run_id=event.run_id,
        time=timestamp(event.time),
        kind=event.kind,
        session_id=event.session_id,
        execution_id=event.execution_id,
        principal=event.principal,
        data_json=event.data,
    )


class AuditServicer:
    """Handlers for every AuditService method."""

    def __init__(self, audit: Audit) -> None:
        self.audit = audit

    def handlers(self) -> dict[str, UnaryHandler | StreamHandler]:
        return {"ListEvents": self.list_events, "WatchEvents": self.watch_events}

    async def list_events(self, request: pb.ListEventsRequest, call: Call) -> pb.ListEventsResponse:
        page = await self.audit.list_events(
            call.principal, filter_from_proto(request.filter), request.page_size, request.page_token
        )
        return pb.ListEventsResponse(
            events=[event_to_proto(e) for e in page.events], next_page_token=page.next_page_token
        )

    async def watch_events(self, request: pb.WatchEventsRequest, call: Call) -> None:
        events = self.audit.watch(
            call.principal, filter_from_proto(request.filter), request.after_seq
        )
        async for event in events:
            await call.context.write(pb.WatchEventsResponse(event=event_to_proto(event)))
