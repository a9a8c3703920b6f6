"""Roles and bearer-token authentication."""

from __future__ import annotations

import pytest

from callgate.server.core.errors import PermissionDenied, Unauthenticated
from callgate.server.core.principals import Principal, Role, TokenAuthenticator, token_digest

AGENT = Principal("alice", frozenset({Role.AGENT}))
APPROVER = Principal("carol", frozenset({Role.APPROVER}))
ADMIN = Principal("root", frozenset({Role.ADMIN}))


@pytest.fixture
def authenticator() -> TokenAuthenticator:
    return TokenAuthenticator(
        [(AGENT, token_digest("agent-token")), (APPROVER, token_digest("approver-token"))]
    )


@pytest.mark.parametrize(
    ("header", "principal"),
    [
        ("Bearer agent-token", AGENT),
        ("bearer approver-token", APPROVER),
        ("Bearer   agent-token  ", AGENT),
    ],
)
def test_a_valid_bearer_token_maps_to_its_principal(
    authenticator: TokenAuthenticator, header: str, principal: Principal
) -> None:
    """The scheme is case-insensitive and surrounding blanks are ignored."""
    assert authenticator.authenticate(header) == principal


@pytest.mark.parametrize("header", [None, ""])
def test_a_missing_token_is_token_missing(
    authenticator: TokenAuthenticator, header: str | None
) -> None:
    """No authorization metadata at all is UNAUTHENTICATED / TOKEN_MISSING."""
    with pytest.raises(Unauthenticated) as caught:
        authenticator.authenticate(header)
    assert caught.value.reason == "TOKEN_MISSING"


@pytest.mark.parametrize(
    "header",
    [
        "Bearer",
        "Bearer ",
        "Basic agent-token",
        "agent-token",
        "Bearer wrong",
        "Bearer agent-token2",
    ],
)
def test_a_malformed_or_unknown_token_is_token_invalid(
    authenticator: TokenAuthenticator, header: str
) -> None:
    """Anything but `Bearer <known token>` is UNAUTHENTICATED / TOKEN_INVALID."""
    with pytest.raises(Unauthenticated) as caught:
        authenticator.authenticate(header)
    assert caught.value.reason == "TOKEN_INVALID"


def test_admin_holds_every_role_and_others_only_their_own() -> None:
    """`require` passes for a held role (admin holds all) and is ROLE_REQUIRED otherwise."""
    for role in Role:
        ADMIN.require(role)
    AGENT.require(Role.AGENT)
    with pytest.raises(PermissionDenied) as caught:
        AGENT.require(Role.APPROVER)
    assert caught.value.reason == "ROLE_REQUIRED"
    assert caught.value.metadata == {"role": "approver"}
    with pytest.raises(PermissionDenied):
        APPROVER.require(Role.AGENT)
