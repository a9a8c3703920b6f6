"""Fixtures for client tests: a scripted ToolService on loopback and a client connected to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from callgate.client import CallgateClient
from callgate.v1 import tool_service_pb2_grpc
from tests.client.scripted_server import ScriptedToolService

TOKEN = "agent-test-token"


@pytest.fixture
def service() -> ScriptedToolService:
    return ScriptedToolService()


@pytest.fixture
async def target(service: ScriptedToolService) -> AsyncIterator[str]:
    """The address of a real grpc.aio server running the scripted service."""
    server = grpc.aio.server()
    tool_service_pb2_grpc.add_ToolServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


@pytest.fixture
async def client(target: str) -> AsyncIterator[CallgateClient]:
    """A client without retries, so that each scripted outcome answers exactly one call."""
    async with CallgateClient(target, token=TOKEN, max_attempts=1) as client:
        yield client
