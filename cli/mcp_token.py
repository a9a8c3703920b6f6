"""The bearer token that guards `callgate mcp --http`: where it comes from and how it is checked.

An MCP client sends `Authorization: Bearer <token>` with every HTTP request; the bridge checks
it with the MCP SDK's bearer middleware through `StaticTokenVerifier` (SHA-256 digests compared
in constant time). The token comes from, in order: `--http-token-file FILE` (a private file the
operator wrote), `$CALLGATE_MCP_TOKEN`, or a file the bridge generates once in the CLI's token
directory and reuses on later starts, so an MCP client's configuration survives restarts.

Every refusal is an `HttpTokenError` (a `ValueError`) whose message is one actionable sentence.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from mcp.server.auth.provider import AccessToken

__all__ = [
    "MCP_TOKEN_ENV",
    "MCP_TOKEN_FILE_NAME",
    "MIN_TOKEN_LENGTH",
    "HttpToken",
    "HttpTokenError",
    "StaticTokenVerifier",
    "check_http_token",
    "read_token_file",
    "resolve_http_token",
]

MCP_TOKEN_ENV: Final = "CALLGATE_MCP_TOKEN"  # noqa: S105 - a variable name, not a secret
"""The environment variable that may hold the HTTP token."""

MCP_TOKEN_FILE_NAME: Final = "mcp-http"  # noqa: S105 - a file name, not a secret
"""The generated token's file name in the CLI's token directory."""

MIN_TOKEN_LENGTH: Final = 32
"""Shortest token accepted from an operator (a generated one has 43 characters)."""

# RFC 6750 b64token: what a client can put after "Bearer " without quoting.
_B64TOKEN: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


class HttpTokenError(ValueError):
    """The HTTP token cannot be used; the message says what to do."""


@dataclass(frozen=True)
class HttpToken:
    """The token the bridge accepts, and where the operator finds it (never the token)."""

    value: str = field(repr=False)
    source: str
    created: bool = False


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


class StaticTokenVerifier:
    """The MCP SDK's `TokenVerifier` for one static token, compared in constant time."""

    def __init__(self, token: str) -> None:
        self._digest = _digest(token)

    async def verify_token(self, token: str) -> AccessToken | None:
        """The token's access info if it is the bridge's token, else None (the SDK answers 401)."""
        if not hmac.compare_digest(_digest(token), self._digest):
            return None
        return AccessToken(token=token, client_id="callgate-mcp-http", scopes=[])


def check_http_token(token: str, agent_token: str) -> None:
    """Refuses a token that is short, not sendable in a header, or the bridge's agent token."""
    if len(token) < MIN_TOKEN_LENGTH or not _B64TOKEN.fullmatch(token):
        raise HttpTokenError(
            f"the HTTP token must be at least {MIN_TOKEN_LENGTH} characters of letters, digits "
            "and -._~+/ (e.g. from `openssl rand -base64 33`); omit it to have one generated"
        )
    if agent_token and hmac.compare_digest(_digest(token), _digest(agent_token)):
        raise HttpTokenError(
            "the HTTP token is the bridge's own agent token; give MCP clients a separate token "
            "(omit --http-token-file and $CALLGATE_MCP_TOKEN to have one generated)"
        )


def read_token_file(path: Path) -> str:
    """The token in `path`, a regular file of ours that no other user can read or write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise HttpTokenError(f"cannot read the token file {path} ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise HttpTokenError(f"the token file {path} is not a regular file; name a file")
        if info.st_uid != os.geteuid():
            raise HttpTokenError(
                f"the token file {path} belongs to another user; write your own with mode 0600"
            )
        if info.st_mode & 0o077:
            raise HttpTokenError(
                f"the token file {path} is open to other users "
                f"(mode {stat.S_IMODE(info.st_mode):04o}); run `chmod 600 {path}`"
            )
        token = handle.read(4096).decode("utf-8", "replace").strip()
    if not token:
        raise HttpTokenError(f"the token file {path} is empty; write a token or delete the file")
    return token


def _create_token_file(path: Path) -> str | None:
    """A fresh token written to `path` (0600), or None when the file already exists."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    try:
        # O_EXCL: two bridges starting at once never overwrite each other's token.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    return token


def resolve_http_token(
    token_file: Path | None, environ: Mapping[str, str], default_file: Path
) -> HttpToken:
    """The operator's token (file, then environment), else the one generated in `default_file`."""
    if token_file is not None:
        return HttpToken(read_token_file(token_file), str(token_file))
    from_env = environ.get(MCP_TOKEN_ENV, "").strip()
    if from_env:
        return HttpToken(from_env, f"${MCP_TOKEN_ENV}")
    try:
        created = _create_token_file(default_file)
    except OSError as exc:
        raise HttpTokenError(
            f"cannot write the HTTP token file {default_file} ({exc.strerror}); pass "
            f"--http-token-file or set ${MCP_TOKEN_ENV}"
        ) from None
    if created is not None:
        return HttpToken(created, str(default_file), created=True)
    return HttpToken(read_token_file(default_file), str(default_file))
