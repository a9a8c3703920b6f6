"""A bare grpc.aio echo server (bytes in, bytes out) that gives the benchmark its RPC floor:
a unary method, and a bidirectional stream that writes back each message it reads (the floor
of the pipelined fast path, which sends two messages on an open stream and reads two answers).

Usage: echo_server.py ADDRESS (`unix:/path.sock` or `127.0.0.1:0`). Prints `READY <address>`
on stdout once it serves, then runs until it is terminated.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator

import grpc

SERVICE = "bench.Echo"
METHOD = "Echo"
STREAM_METHOD = "Exchange"


async def _echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return request


async def _exchange(
    requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[bytes, bytes]
) -> None:
    # Read with the request iterator and answer with context.write, as callgate's Exchange does.
    async for request in requests:
        await context.write(request)


async def serve(address: str) -> None:
    server = grpc.aio.server()
    # No serializers: the handler sees and returns the raw message bytes.
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            METHOD: grpc.unary_unary_rpc_method_handler(_echo),
            STREAM_METHOD: grpc.stream_stream_rpc_method_handler(_exchange),
        },
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port(address)
    await server.start()
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopped.set)
    bound = address if address.startswith("unix:") else f"{address.rpartition(':')[0]}:{port}"
    print(f"READY {bound}", flush=True)
    await stopped.wait()
    await server.stop(None)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: echo_server.py ADDRESS")
    asyncio.run(serve(sys.argv[1]))


if __name__ == "__main__":
    main()
