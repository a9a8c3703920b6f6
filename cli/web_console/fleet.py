"""The console's view of a fleet: for one logged-in approver, a client per callgate server
that accepted the approver's token, a WatchApprovals stream per server (reconnected with
backoff), the pending items of all of them, and the browsers listening for changes.

Everything here runs on the console's event loop; nothing awaits between reading and
changing the pending set, so a browser that connects gets a consistent snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Final

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from pydantic import JsonValue

from callgate.client.connection import CallgateClient
from callgate.client.conversion import ApprovalItem
from callgate.client.errors import AuthenticationError, CallgateClientError, PermissionDeniedError
from callgate.client.models import PendingApproval, PendingQuestion, Resolved

log = logging.getLogger(__name__)

LISTENER_QUEUE: Final = 1000
"""Events a browser may be behind before it is dropped (its page reconnects and gets a fresh
snapshot)."""

RECONNECT_BACKOFF: Final = (0.5, 1.0, 2.0, 5.0, 10.0)

PREVIEWS_KEPT: Final = 64
"""Pending calls per server whose preview text the console keeps (up to 64 KiB each): the
others are sent without it (`preview_deferred`) and the browser fetches one when it shows its
card (`/api/preview`), so a flood of pending calls does not grow the console without bound."""

Event = dict[str, JsonValue]


@dataclass(frozen=True, slots=True)
class Target:
    """One callgate server of the fleet: a name shown on every call, and its address."""

    name: str
    address: str


def parse_target(text: str) -> Target:
    """`NAME=ADDRESS` or `ADDRESS` (then the address is the name)."""
    name, sep, address = text.partition("=")
    if not sep:
        name, address = text, text
    if not name or not address:
        raise ValueError(f"expected NAME=ADDRESS or ADDRESS, got {text!r}")
    return Target(name, address)


def item_event(target: str, item: ApprovalItem) -> Event:
    """The JSON a browser receives for one WatchApprovals item."""
    if isinstance(item, PendingApproval):
        data: Event = item.model_dump(mode="json")
        data["type"] = "approval"
    elif isinstance(item, PendingQuestion):
        data = item.model_dump(mode="json")
        data["type"] = "question"
    else:
        data = {
            "type": "resolved",
            "execution_id": item.execution_id,
            "state": item.state.value,
            "decided_by": item.decided_by,
            "reason": item.reason,
        }
    data["target"] = target
    return data


@dataclass(eq=False)
class FleetView:
    """One approver's connections to the fleet and what is pending on it."""

    token: str
    targets: Sequence[Target]
    clients: dict[str, CallgateClient] = field(default_factory=dict)
    status: dict[str, Event] = field(default_factory=dict)
    pending: dict[tuple[str, str], Event] = field(default_factory=dict)
    # The pending calls whose preview text is kept (at most PREVIEWS_KEPT per server).
    kept: set[tuple[str, str]] = field(default_factory=set)
    listeners: set[MemoryObjectSendStream[Event]] = field(default_factory=set)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    async def login(self, *, per_target: float) -> bool:
        """Check the token against every target (ListRules needs the approver role); keep a
        client for each that accepts it (and for each that is down, retried by its watcher).
        True only when at least one server accepted it: a token no server could check is
        never taken."""
        accepted = False
        for target in self.targets:
            client = self._client(target)
            try:
                with anyio.fail_after(per_target):
                    await client.__aenter__()
                    await client.approvals.list_rules()
            except (AuthenticationError, PermissionDeniedError):
                await client.close()
                self._set_status(target.name, "refused", "this server refused the token")
                continue
            except (CallgateClientError, TimeoutError, OSError) as exc:
                await client.close()
                detail = getattr(exc, "message", "") or "it did not answer"
                self._set_status(target.name, "down", f"cannot reach it: {detail}")
                # Kept: the watcher retries it, with the same token, until it answers (and
                # drops it if it then refuses the token).
                self.clients[target.name] = self._client(target)
                continue
            accepted = True
            self.clients[target.name] = client
        return accepted

    def _client(self, target: Target) -> CallgateClient:
        return CallgateClient(target.address, token=self.token, max_attempts=1, exchange=False)

    def start(self, task_group: TaskGroup) -> None:
        """Start one watcher per accepting target, all under this view's cancel scope."""

        async def run() -> None:
            with self.scope:
                async with anyio.create_task_group() as group:
                    for name, client in self.clients.items():
                        group.start_soon(self._watch, name, client)

        task_group.start_soon(run)

    async def close(self) -> None:
        self.scope.cancel()
        for listener in list(self.listeners):
            listener.close()
        self.listeners.clear()
        for client in self.clients.values():
            with anyio.CancelScope(shield=True):
                await client.close()

    async def _watch(self, name: str, client: CallgateClient) -> None:
        failures = 0
        while True:
            try:
                await client.__aenter__()
                async with aclosing(client.approvals.watch()) as items:
                    self._set_status(name, "connected", "")
                    failures = 0
                    async for item in items:
                        self._apply(name, item)
            except (AuthenticationError, PermissionDeniedError):
                self._set_status(name, "refused", "this server no longer accepts the token")
                self._drop_target(name)
                return
            except (CallgateClientError, OSError) as exc:
                detail = getattr(exc, "message", "") or str(exc)
                self._set_status(name, "down", detail)
            self._drop_target(name)
            await anyio.sleep(RECONNECT_BACKOFF[min(failures, len(RECONNECT_BACKOFF) - 1)])
            failures += 1

    def _apply(self, target: str, item: ApprovalItem) -> None:
        event = item_event(target, item)
        if isinstance(item, Resolved):
            self.pending.pop((target, item.execution_id), None)
            self.kept.discard((target, item.execution_id))
        else:
            execution_id = (
                item.call.execution_id if isinstance(item, PendingApproval) else item.execution_id
            )
            key = (target, execution_id)
            if isinstance(item, PendingApproval) and item.call.preview is not None:
                self._bound_preview(key, event)
            self.pending[key] = event
        self._broadcast(event)

    def _bound_preview(self, key: tuple[str, str], event: Event) -> None:
        """Keep this call's preview text if the server has fewer than PREVIEWS_KEPT kept;
        else send and hold the event without it (the browser fetches it on demand)."""
        target = key[0]
        if key in self.kept or sum(1 for k in self.kept if k[0] == target) < PREVIEWS_KEPT:
            self.kept.add(key)
            return
        call = event["call"]
        assert isinstance(call, dict)
        preview = call.get("preview")
        if isinstance(preview, dict):
            call["preview"] = {**preview, "text": ""}
            event["preview_deferred"] = True

    def _drop_target(self, target: str) -> None:
        """A stream that broke: its items are withdrawn until it is back (then resent)."""
        for key in [key for key in self.pending if key[0] == target]:
            del self.pending[key]
            self.kept.discard(key)
            self._broadcast(
                {"type": "resolved", "target": target, "execution_id": key[1], "state": "unknown"}
            )

    def _set_status(self, target: str, status: str, detail: str) -> None:
        event: Event = {"type": "target", "target": target, "status": status, "detail": detail}
        self.status[target] = event
        self._broadcast(event)

    def _broadcast(self, event: Event) -> None:
        for listener in list(self.listeners):
            try:
                listener.send_nowait(event)
            except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                # Too far behind (or gone): dropped; its page reconnects for a fresh snapshot.
                self.listeners.discard(listener)
                listener.close()

    def snapshot(self) -> list[Event]:
        """What a browser that connects now needs: every target's status, every pending item."""
        return [
            *(self.status[t.name] for t in self.targets if t.name in self.status),
            *self.pending.values(),
        ]

    def listen(self) -> tuple[list[Event], MemoryObjectReceiveStream[Event]]:
        """A snapshot and the stream of every later event, with no event lost in between."""
        send, receive = anyio.create_memory_object_stream[Event](LISTENER_QUEUE)
        self.listeners.add(send)
        return self.snapshot(), receive
