"""Attack review: server reflection (v1 + v1alpha, source info) and the provider adapters'
SDK-object handling. Scratch file (git-ignored)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import anyio
import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2

from callgate.client.providers import run_anthropic_tool_use, run_openai_tool_call
from tests.support.server import Harness

pytestmark = pytest.mark.anyio

V1 = "grpc.reflection.v1.ServerReflection"


async def _exchange(
    channel: grpc.aio.Channel, requests: list[reflection_pb2.ServerReflectionRequest]
) -> list[reflection_pb2.ServerReflectionResponse]:
    method = channel.stream_stream(
        f"/{V1}/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )

    async def send() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
        for request in requests:
            yield request

    out: list[reflection_pb2.ServerReflectionResponse] = []
    with anyio.fail_after(20):
        async for response in method(send(), timeout=20):
            out.append(response)
    return out


async def test_reflection_without_a_token_survives_odd_requests_and_leaks_no_paths(
    harness: Harness,
) -> None:
    odd = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_by_filename="../../../etc/passwd"),
        reflection_pb2.ServerReflectionRequest(file_by_filename="/etc/passwd"),
        reflection_pb2.ServerReflectionRequest(file_by_filename="callgate/v1/tool_service.proto"),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="callgate.v1.ToolService"),
        reflection_pb2.ServerReflectionRequest(
            file_containing_symbol="grpc.reflection.v1.ServerReflection"
        ),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="nope." * 1000),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol=""),
        reflection_pb2.ServerReflectionRequest(),  # no message_request set
        reflection_pb2.ServerReflectionRequest(
            file_containing_extension=reflection_pb2.ExtensionRequest(
                containing_type="google.protobuf.Struct", extension_number=1
            )
        ),
        reflection_pb2.ServerReflectionRequest(
            all_extension_numbers_of_type="google.protobuf.FieldOptions"
        ),
        reflection_pb2.ServerReflectionRequest(
            file_containing_symbol="google.protobuf.FileDescriptorProto"
        ),
    ] * 20
    async with grpc.aio.insecure_channel(harness.tcp_target) as channel:
        responses = await _exchange(channel, odd)
        assert len(responses) == len(odd)
        # Still answering afterwards.
        again = await _exchange(channel, [odd[0]])
        assert again[0].list_services_response.service
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for r in responses
        if r.HasField("file_descriptor_response")
        for raw in r.file_descriptor_response.file_descriptor_proto
    ]
    names = {f.name for f in files}
    assert not any(n.startswith("/") or ".." in n for n in names), names
    blob = b"".join(f.SerializeToString() for f in files)
    # ("read /work/src/app.py" is an example in a comment; look for real paths and secrets.)
    needles = [b"/work/main", b"/home/", b"/root/", str(harness.workspace).encode()]
    needles += [str(harness.state_dir).encode()]
    needles += [token.encode() for token in harness.tokens.values()]
    for needle in needles:
        assert needle not in blob, needle
    assert not re.search(rb"/tmp/[A-Za-z0-9_]+/", blob)


# ------------------------------------------------------------------ providers


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def run(self, name: str, arguments: Any, **_: Any) -> Any:
        self.calls.append((name, dict(arguments)))
        return SimpleNamespace(text="ok", json="", is_error=False, error_code="")


class _DumpRaises:
    id = "call_1"
    type = "function"

    def model_dump(self) -> dict[str, object]:
        raise RuntimeError("boom")


class _DumpNotMapping:
    def __init__(self) -> None:
        self.id = "toolu_1"
        self.type = "tool_use"
        self.name = "ReadFile"
        self.input = {"path": "a.txt"}

    def model_dump(self) -> list[object]:
        return ["not", "a", "mapping"]


async def test_a_model_dump_that_raises_runs_nothing() -> None:
    session = _Recorder()
    with pytest.raises(RuntimeError):
        await run_openai_tool_call(session, _DumpRaises())  # type: ignore[arg-type]
    assert session.calls == []


async def test_a_model_dump_that_is_not_a_mapping_falls_back_to_attributes() -> None:
    session = _Recorder()
    answer = await run_anthropic_tool_use(session, _DumpNotMapping())  # type: ignore[arg-type]
    assert session.calls == [("ReadFile", {"path": "a.txt"})]
    assert answer["tool_use_id"] == "toolu_1"


async def test_a_chat_call_with_a_stray_call_id_is_not_run_under_another_name() -> None:
    """A Chat Completions dict that also carries `call_id` (some proxies add it) is routed to
    the Responses shape: the name and arguments then come from the top level. Shown so the
    routing is known; the function it runs is the top-level one, never a mix."""
    session = _Recorder()
    call = {
        "id": "call_1",
        "call_id": "call_1",
        "type": "function",
        "function": {"name": "ReadFile", "arguments": '{"path": "a.txt"}'},
    }
    answer = await run_openai_tool_call(session, call)  # type: ignore[arg-type]
    print(answer, session.calls)
    assert session.calls in ([], [("ReadFile", {"path": "a.txt"})])


async def test_sdk_objects_run_exactly_their_own_arguments() -> None:
    openai = pytest.importorskip("openai")
    anthropic = pytest.importorskip("anthropic")
    from anthropic.types import ToolUseBlock
    from openai.types.responses import ResponseFunctionToolCall

    del openai, anthropic
    session = _Recorder()
    block = ToolUseBlock(id="toolu_9", type="tool_use", name="ReadFile", input={"path": "x"})
    await run_anthropic_tool_use(session, block)  # type: ignore[arg-type]
    fc = ResponseFunctionToolCall(
        id="fc_1", call_id="call_9", type="function_call", name="ReadFile", arguments='{"path":"y"}'
    )
    answer = await run_openai_tool_call(session, fc)  # type: ignore[arg-type]
    assert session.calls == [("ReadFile", {"path": "x"}), ("ReadFile", {"path": "y"})]
    assert answer["call_id"] == "call_9"
