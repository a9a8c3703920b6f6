"""Registering servicers with safe request decoding, authentication and error mapping.

Every RPC goes through one wrapper: an undecodable request (bad protobuf, invalid UTF-8 in a
string field) is INVALID_ARGUMENT instead of an opaque INTERNAL; the bearer token is turned
into a principal; domain errors become rich statuses; anything unexpected is logged and sent
as a bare INTERNAL with no details. On a bidirectional stream the token is checked once when
the stream opens, and an undecodable message ends the stream the same way.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message

from callgate.server.core.errors import CallgateError, InternalError, request_invalid
from callgate.server.core.principals import Principal, TokenAuthenticator

from .status import to_status

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]


@dataclass(frozen=True, slots=True)
class Call:
    """What a handler gets besides its request: the caller and the raw gRPC context."""

    principal: Principal
    context: Context


@dataclass(frozen=True, slots=True)
class _Undecodable:
    problem: str


UnaryHandler = Callable[[Any, Call], Awaitable[Message]]
StreamHandler = Callable[[Any, Call], Awaitable[None]]


def acknowledged(handler: UnaryHandler, commit: Callable[[], Awaitable[None]]) -> UnaryHandler:
    """`handler`, answering only once `commit` returned: what the answer acknowledges (a call
    prepared, decided or finished; a rule; a session) is in the audit journal before the
    caller learns of it, so a crash right after an answer cannot lose its record."""

    async def run(request: Any, call: Call) -> Message:
        response = await handler(request, call)
        await commit()
        return response

    return run


def _deserializer(message_type: type[Message]) -> Callable[[bytes], object]:
    def decode(data: bytes) -> object:
        try:
            return message_type.FromString(data)
        except DecodeError:
            return _Undecodable(
                "the request is not a valid protobuf message (a string field must hold valid UTF-8)"
            )

    return decode


def _principal(authenticator: TokenAuthenticator, context: Context) -> Principal:
    authorization = None
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            authorization = value if isinstance(value, str) else value.decode("utf-8", "replace")
            break
    return authenticator.authenticate(authorization)


async def _fail(context: Context, error: Exception) -> None:
    if isinstance(error, CallgateError):
        await context.abort_with_status(to_status(error))
    log.error("unexpected error in an RPC handler", exc_info=error)
    await context.abort_with_status(to_status(InternalError()))


def register_service(
    server: grpc.aio.Server,
    service: ServiceDescriptor,
    messages: object,
    handlers: dict[str, UnaryHandler | StreamHandler],
    authenticator: TokenAuthenticator,
) -> None:
    """Register `handlers` (keyed by method name) for every method of `service`.

    Unary handlers return the response; server-streaming handlers write with
    `call.context.write(...)` and return None; bidirectional handlers get an async iterator of
    requests instead of one request, and write like server-streaming ones. Client-streaming
    methods are not supported.
    """
    method_handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in service.methods:
        handler = handlers.get(method.name)
        if handler is None:
            raise ValueError(f"no handler for {service.full_name}/{method.name}")
        request_type: type[Message] = getattr(messages, method.input_type.name)
        response_type: type[Message] = getattr(messages, method.output_type.name)
        deserialize = _deserializer(request_type)
        serialize = cast(Callable[[Any], bytes], response_type.SerializeToString)
        if method.client_streaming and method.server_streaming:
            method_handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                _bidirectional(handler, authenticator),
                request_deserializer=deserialize,
                response_serializer=serialize,
            )
        elif method.client_streaming:
            raise ValueError(f"{service.full_name}/{method.name}: client streaming is unsupported")
        elif method.server_streaming:
            method_handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _streaming(handler, authenticator),
                request_deserializer=deserialize,
                response_serializer=serialize,
            )
        else:
            method_handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _unary(cast(UnaryHandler, handler), authenticator),
                request_deserializer=deserialize,
                response_serializer=serialize,
            )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, method_handlers),)
    )


def _unary(
    handler: UnaryHandler, authenticator: TokenAuthenticator
) -> Callable[[object, Context], Awaitable[Message | None]]:
    async def run(request: object, context: Context) -> Message | None:
        try:
            if isinstance(request, _Undecodable):
                raise request_invalid("request", request.problem)
            principal = _principal(authenticator, context)
            return await handler(request, Call(principal, context))
        except grpc.aio.AbortError:
            raise
        except Exception as error:
            await _fail(context, error)
            return None

    return run


def _streaming(
    handler: UnaryHandler | StreamHandler, authenticator: TokenAuthenticator
) -> Callable[[object, Context], Awaitable[None]]:
    # A coroutine (not a generator): it writes with context.write, which gives back-pressure.
    async def run(request: object, context: Context) -> None:
        try:
            if isinstance(request, _Undecodable):
                raise request_invalid("request", request.problem)
            principal = _principal(authenticator, context)
            await handler(request, Call(principal, context))
        except grpc.aio.AbortError:
            raise
        except Exception as error:
            await _fail(context, error)

    return run


def _bidirectional(
    handler: UnaryHandler | StreamHandler, authenticator: TokenAuthenticator
) -> Callable[[AsyncIterator[object], Context], Awaitable[None]]:
    async def run(requests: AsyncIterator[object], context: Context) -> None:
        try:
            principal = _principal(authenticator, context)
            await handler(_decoded(requests), Call(principal, context))
        except grpc.aio.AbortError:
            raise
        except Exception as error:
            await _fail(context, error)

    return run


async def _decoded(requests: AsyncIterator[object]) -> AsyncIterator[object]:
    """The messages of a client stream; an undecodable one raises REQUEST_INVALID."""
    async for request in requests:
        if isinstance(request, _Undecodable):
            raise request_invalid("request", request.problem)
        yield request
