"""Principals, roles and bearer-token authentication (design section 7)."""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import PermissionDenied, Unauthenticated


class Role(enum.StrEnum):
    AGENT = "agent"
    APPROVER = "approver"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller. `admin` holds every role."""

    name: str
    roles: frozenset[Role]

    def has(self, role: Role) -> bool:
        return role in self.roles or Role.ADMIN in self.roles

    def require(self, role: Role) -> None:
        if not self.has(role):
            raise PermissionDenied(
                "ROLE_REQUIRED",
                f"This call needs the {role.value} role, which this token does not have.",
                metadata={"role": role.value},
            )


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class TokenAuthenticator:
    """Maps `authorization: Bearer <token>` to a principal, comparing digests in constant time."""

    def __init__(self, entries: Iterable[tuple[Principal, bytes]]) -> None:
        self._entries = tuple(entries)

    def authenticate(self, authorization: str | None) -> Principal:
        if not authorization:
            raise Unauthenticated(
                "TOKEN_MISSING", "Send a token as 'authorization: Bearer <token>' metadata."
            )
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated(
                "TOKEN_INVALID", "The authorization metadata must be 'Bearer <token>'."
            )
        digest = token_digest(token.strip())
        found: Principal | None = None
        for principal, expected in self._entries:
            # Compare against every entry so timing does not reveal which one matched.
            if hmac.compare_digest(digest, expected):
                found = principal
        if found is None:
            raise Unauthenticated("TOKEN_INVALID", "The token is not valid for this server.")
        return found
