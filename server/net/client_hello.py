"""The server name a TLS ClientHello asks for (its SNI extension, RFC 6066), read from the first
bytes a client sends into a tunnel, so that the proxy can refuse a tunnel whose TLS names
another host than the one it was opened to."""

from __future__ import annotations

import enum
from dataclasses import dataclass

HANDSHAKE = 0x16
CLIENT_HELLO = 0x01
SERVER_NAME = 0x0000
HOST_NAME = 0x00
RECORD_HEADER_BYTES = 5
# A ClientHello is a few hundred bytes to a few KiB (post-quantum key shares included); one that
# needs more than this is not read further and the tunnel is refused.
MAX_HELLO_BYTES = 64 << 10
# Real clients send a ClientHello in one record, two with large post-quantum key shares; one
# split into more is refused (a hello in 1-byte records would cost a parse per record).
MAX_HELLO_RECORDS = 4
# A TLS alert record: fatal (2), access_denied (49); sent to a client whose tunnel is refused
# after it was opened, so it fails at once with a TLS error rather than a hang.
ACCESS_DENIED_ALERT = bytes([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31])


class Verdict(enum.Enum):
    """What the first bytes are: not TLS at all, TLS (with or without a server name), not
    yet known (more bytes are needed), or a TLS record that is not a readable ClientHello."""

    NOT_TLS = enum.auto()
    HELLO = enum.auto()
    INCOMPLETE = enum.auto()
    MALFORMED = enum.auto()


@dataclass(frozen=True, slots=True)
class Hello:
    verdict: Verdict
    # The host name the ClientHello names (as sent, ASCII), or None.
    server_name: str | None = None
    # For INCOMPLETE: how many bytes in all are needed before the next look.
    needed: int = 0


class _Short(Exception):
    """The bytes end before the field does."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise _Short
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk

    def number(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vector(self, length_bytes: int) -> _Reader:
        return _Reader(self.take(self.number(length_bytes)))

    def rest(self) -> bytes:
        return self.take(self.left)

    @property
    def left(self) -> int:
        return len(self.data) - self.at


def read_hello(data: bytes) -> Hello:
    """Classify the first bytes a client sent. A ClientHello may span several handshake
    records; the message is put together from them."""
    if not data:
        return Hello(Verdict.INCOMPLETE, needed=1)
    if data[0] != HANDSHAKE:
        return Hello(Verdict.NOT_TLS)
    message = bytearray()
    at = 0
    records = 0
    while True:
        if records == MAX_HELLO_RECORDS:
            return Hello(Verdict.MALFORMED)
        if len(data) < at + RECORD_HEADER_BYTES:
            return Hello(Verdict.INCOMPLETE, needed=at + RECORD_HEADER_BYTES)
        if data[at] != HANDSHAKE or data[at + 1] != 0x03:
            return Hello(Verdict.MALFORMED)
        length = int.from_bytes(data[at + 3 : at + 5], "big")
        if length == 0 or length > 16384 + 2048:
            return Hello(Verdict.MALFORMED)
        end = at + RECORD_HEADER_BYTES + length
        if end > MAX_HELLO_BYTES:
            return Hello(Verdict.MALFORMED)
        if len(data) < end:
            return Hello(Verdict.INCOMPLETE, needed=end)
        message += data[at + RECORD_HEADER_BYTES : end]
        at = end
        records += 1
        if len(message) >= 4:
            if message[0] != CLIENT_HELLO:
                return Hello(Verdict.MALFORMED)
            total = 4 + int.from_bytes(message[1:4], "big")
            if total > MAX_HELLO_BYTES:
                return Hello(Verdict.MALFORMED)
            if len(message) >= total:
                return _parse(bytes(message[4:total]))


def _parse(body: bytes) -> Hello:
    try:
        hello = _Reader(body)
        hello.take(2 + 32)  # legacy_version, random
        hello.vector(1)  # legacy_session_id
        hello.vector(2)  # cipher_suites
        hello.vector(1)  # legacy_compression_methods
        if hello.left == 0:
            return Hello(Verdict.HELLO)  # no extensions at all
        extensions = hello.vector(2)
        names: list[str] = []
        seen: set[int] = set()
        while extensions.left:
            kind = extensions.number(2)
            data = extensions.vector(2)
            if kind in seen:
                return Hello(Verdict.MALFORMED)  # RFC 8446 4.2: at most one of each
            seen.add(kind)
            if kind == SERVER_NAME:
                entries = data.vector(2)
                while entries.left:
                    name_type = entries.number(1)
                    name = entries.vector(2).rest()
                    if name_type == HOST_NAME:
                        names.append(name.decode("ascii"))
    except (_Short, UnicodeDecodeError):
        return Hello(Verdict.MALFORMED)
    if len(names) > 1:
        return Hello(Verdict.MALFORMED)  # RFC 6066: one host_name
    return Hello(Verdict.HELLO, server_name=names[0] if names else None)
