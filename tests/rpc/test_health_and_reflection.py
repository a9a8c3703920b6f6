"""grpc.health.v1 and server reflection are always on, without a token."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.support.server import Harness

pytestmark = pytest.mark.anyio


async def test_health_reports_serving(harness: Harness) -> None:
    """The overall, ToolService and ApprovalService health are SERVING."""
    async with grpc.aio.insecure_channel(harness.tcp_target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "callgate.v1.ToolService", "callgate.v1.ApprovalService"):
            response = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert response.status == health_pb2.HealthCheckResponse.SERVING


async def test_health_reports_the_sandbox_mode_in_effect(harness: Harness) -> None:
    """Check answers carry the sandbox mode and whether a seccomp filter confines commands as
    trailing metadata (the server here runs `none`, so no filter)."""
    async with grpc.aio.insecure_channel(harness.tcp_target) as channel:
        call = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        await call
        trailers = dict(await call.trailing_metadata() or ())
        assert trailers["callgate-sandbox-mode"] == "none"
        assert trailers["callgate-sandbox-seccomp"] == "off"


async def test_reflection_lists_the_tool_service(harness: Harness) -> None:
    """Reflection lists callgate.v1.ToolService so grpcurl works without the proto files."""
    async with grpc.aio.insecure_channel(harness.tcp_target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)

        async def requests() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
            yield reflection_pb2.ServerReflectionRequest(list_services="")

        names: list[str] = []
        async for response in stub.ServerReflectionInfo(requests(), timeout=5):
            names.extend(s.name for s in response.list_services_response.service)
        assert "callgate.v1.ToolService" in names
        assert "callgate.v1.ApprovalService" in names
