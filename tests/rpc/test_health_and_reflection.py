"""grpc.health.v1 and server reflection are always on, without a token."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.support.server import Harness

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent.parent


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


async def _reflect(
    channel: grpc.aio.Channel, service: str, request: reflection_pb2.ServerReflectionRequest
) -> reflection_pb2.ServerReflectionResponse:
    """One reflection exchange with `service` (v1 or v1alpha: the same messages on the wire)."""
    method = channel.stream_stream(
        f"/{service}/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )

    async def requests() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
        yield request

    async for response in method(requests(), timeout=5):
        assert isinstance(response, reflection_pb2.ServerReflectionResponse)
        return response
    raise AssertionError("no reflection answer")


@pytest.mark.parametrize(
    "service", ["grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"]
)
async def test_reflection_v1_and_v1alpha_serve_the_protos_comments(
    harness: Harness, service: str
) -> None:
    """Both reflection protocols answer, list each other, and serve callgate's files with
    their source info, so that `grpcurl describe` shows the comments."""
    async with grpc.aio.insecure_channel(harness.tcp_target) as channel:
        listed = await _reflect(
            channel, service, reflection_pb2.ServerReflectionRequest(list_services="")
        )
        names = {s.name for s in listed.list_services_response.service}
        found = await _reflect(
            channel,
            service,
            reflection_pb2.ServerReflectionRequest(
                file_containing_symbol="callgate.v1.ToolService"
            ),
        )
        v1 = await _reflect(
            channel,
            service,
            reflection_pb2.ServerReflectionRequest(
                file_containing_symbol="grpc.reflection.v1.ServerReflection"
            ),
        )
    assert {"grpc.reflection.v1.ServerReflection", "callgate.v1.ToolService"} <= names
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in found.file_descriptor_response.file_descriptor_proto
    ]
    tool_service = next(f for f in files if f.name == "callgate/v1/tool_service.proto")
    comments = " ".join(
        location.leading_comments for location in tool_service.source_code_info.location
    )
    assert "ToolService is what an agent uses" in comments
    assert "never both (ARGUMENTS_INVALID)" in comments
    v1_files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw).package
        for raw in v1.file_descriptor_response.file_descriptor_proto
    ]
    assert "grpc.reflection.v1" in v1_files


async def test_buf_curl_lists_the_methods_over_reflection_v1(harness: Harness) -> None:
    buf = shutil.which("buf") or str(ROOT / ".tools/node_modules/.bin/buf")
    if not Path(buf).exists():
        pytest.skip("buf is not installed (make buf-lint installs it)")
    done = await anyio.run_process(
        [
            buf, "curl", "--protocol", "grpc", "--http2-prior-knowledge",
            "--reflect-protocol", "grpc-v1", "--list-methods",
            f"http://{harness.tcp_target}",
        ],
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert "callgate.v1.ToolService/Prepare" in done.stdout.decode()
