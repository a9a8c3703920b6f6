"""Server reflection, as generic gRPC tools expect it: both `grpc.reflection.v1` (what current
grpcurl and `buf curl` ask for) and `grpc.reflection.v1alpha`, serving descriptors with their
source info, so that `grpcurl describe` shows the protos' comments.

The descriptors come from `callgate/v1/descriptors.binpb`, made by `make proto` with
`--include_source_info` (the generated `_pb2` modules carry none). The v1 service is the
v1alpha one under its v1 name: the two protocols' messages are the same on the wire, so the
v1alpha servicer answers both, and v1's own descriptor is v1alpha's with the package renamed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from importlib import resources
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection, reflection_pb2

V1_SERVICE = "grpc.reflection.v1.ServerReflection"
V1ALPHA_SERVICE = reflection.SERVICE_NAME
_V1_PACKAGE = "grpc.reflection.v1"
_V1_FILE = "grpc/reflection/v1/reflection.proto"
DESCRIPTORS = "descriptors.binpb"


def _descriptor_set() -> Any:
    return descriptor_pb2.FileDescriptorSet.FromString(
        resources.files("callgate.v1").joinpath(DESCRIPTORS).read_bytes()
    )


def source_pool(files: Any = None) -> descriptor_pool.DescriptorPool:
    """A pool of callgate's files, the health service's, and both reflection protocols'."""
    pool = descriptor_pool.DescriptorPool()
    for file in (files or _descriptor_set()).file:
        pool.Add(file)
    for module in (health_pb2, reflection_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        _add_missing(pool, proto)
    pool.Add(
        _renamed(reflection_pb2.DESCRIPTOR, _V1_PACKAGE, "grpc/reflection/v1/reflection.proto")
    )
    return pool


def _add_missing(pool: descriptor_pool.DescriptorPool, proto: Any) -> None:
    try:
        pool.FindFileByName(proto.name)
    except KeyError:
        for dependency in proto.dependency:
            _add_missing(pool, _default_file(dependency))
        pool.Add(proto)


def _default_file(name: str) -> Any:
    proto = descriptor_pb2.FileDescriptorProto()
    descriptor_pool.Default().FindFileByName(name).CopyToProto(proto)
    return proto


def _renamed(file: Any, new: str, name: str) -> Any:
    """`file`'s descriptor under the package `new` (references included) and file `name`."""
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    old = proto.package
    proto.name = name
    proto.package = new
    for message in proto.message_type:
        for field in message.field:
            if field.type_name.startswith(f".{old}."):
                field.type_name = f".{new}." + field.type_name.removeprefix(f".{old}.")
    for service in proto.service:
        for method in service.method:
            method.input_type = method.input_type.replace(f".{old}.", f".{new}.")
            method.output_type = method.output_type.replace(f".{old}.", f".{new}.")
    return proto


def _with_sources(
    response: reflection_pb2.ServerReflectionResponse, sources: Mapping[str, bytes]
) -> reflection_pb2.ServerReflectionResponse:
    """`response` with each of callgate's files as the descriptor set has it, source info
    included (a descriptor pool keeps none)."""
    if not response.HasField("file_descriptor_response"):
        return response
    files = response.file_descriptor_response.file_descriptor_proto
    for index, raw in enumerate(files):
        name = descriptor_pb2.FileDescriptorProto.FromString(raw).name
        if name in sources:
            files[index] = sources[name]
    return response


def enable(server: grpc.aio.Server, service_names: Iterable[str]) -> None:
    """Serve reflection (v1 and v1alpha) of `service_names` and of the reflection services."""
    names = (*service_names, V1_SERVICE, V1ALPHA_SERVICE)
    files = _descriptor_set()
    sources = {f.name: f.SerializeToString() for f in files.file if f.source_code_info.location}
    servicer = reflection.aio.ReflectionServicer(names, pool=source_pool(files))

    async def info(
        requests: AsyncIterator[reflection_pb2.ServerReflectionRequest], context: Any
    ) -> AsyncIterator[reflection_pb2.ServerReflectionResponse]:
        async for response in servicer.ServerReflectionInfo(requests, context):
            yield _with_sources(response, sources)

    handlers = []
    for service in (V1ALPHA_SERVICE, V1_SERVICE):
        method = grpc.stream_stream_rpc_method_handler(
            info,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
        )
        handlers.append(
            grpc.method_handlers_generic_handler(service, {"ServerReflectionInfo": method})
        )
    server.add_generic_rpc_handlers(tuple(handlers))
