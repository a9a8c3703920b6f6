"""A TCP forwarder on loopback whose connections a test can cut, as a network failure would,
while it keeps accepting new ones."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketStream, TaskGroup


class Forwarder:
    """Forwards every connection made to `target` (`host:port`) to the upstream server."""

    def __init__(self, upstream: str, port: int) -> None:
        host, _, upstream_port = upstream.rpartition(":")
        self._upstream = (host, int(upstream_port))
        self.target = f"127.0.0.1:{port}"
        self._connections: set[anyio.CancelScope] = set()
        self.accepted = 0

    def cut(self) -> None:
        """Closes every forwarded connection now open."""
        for scope in self._connections:
            scope.cancel()

    async def handle(self, client: SocketStream) -> None:
        self.accepted += 1
        async with client, await anyio.connect_tcp(*self._upstream) as upstream:
            with anyio.CancelScope() as scope:
                self._connections.add(scope)
                try:
                    async with anyio.create_task_group() as pipes:
                        pipes.start_soon(_pipe, client, upstream, pipes)
                        pipes.start_soon(_pipe, upstream, client, pipes)
                finally:
                    self._connections.discard(scope)


async def _pipe(source: ByteStream, sink: ByteStream, pipes: TaskGroup) -> None:
    try:
        async for chunk in source:
            await sink.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass
    # Either side gone ends the whole connection.
    pipes.cancel_scope.cancel()


@asynccontextmanager
async def forward(upstream: str) -> AsyncIterator[Forwarder]:
    """A forwarder to `upstream` (`host:port`), stopped with every connection on exit."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    # anyio's typed attribute lookup, not Django's QuerySet.extra.
    port = listener.extra(SocketAttribute.local_port)  # noqa: S610
    forwarder = Forwarder(upstream, port)
    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, forwarder.handle, tasks)
        try:
            yield forwarder
        finally:
            tasks.cancel_scope.cancel()
