"""`callgate console`: the web approval console (see `app`), served by callgate itself."""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence

import anyio
import uvicorn

from .app import Console
from .fleet import Target, parse_target

__all__ = ["Console", "Target", "bind", "parse_target", "serve"]


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host:port` (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


async def serve(
    targets: Sequence[Target],
    sock: socket.socket,
    *,
    started: Callable[[str], None] | None = None,
    stop: anyio.Event | None = None,
) -> None:
    """Serve the console for `targets` on the bound `sock` until SIGINT/SIGTERM or `stop`
    is set; `started` gets the console's URL once it listens."""
    host, port = sock.getsockname()[:2]
    console = Console(targets, host, port)
    config = uvicorn.Config(
        console.app(),
        log_level="warning",
        lifespan="on",
        server_header=False,
        date_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    shown = f"[{host}]" if ":" in host else host
    if started is not None:
        config_started = server.startup

        async def startup(sockets: list[socket.socket] | None = None) -> None:
            await config_started(sockets)
            started(f"http://{shown}:{port}/")

        server.startup = startup  # type: ignore[method-assign]
    async with anyio.create_task_group() as group:
        if stop is not None:

            async def stopper() -> None:
                await stop.wait()
                await console.close_sessions()  # ends the live streams, so no wait for them
                server.should_exit = True

            group.start_soon(stopper)
        await server.serve(sockets=[sock])
        group.cancel_scope.cancel()
