"""Principals from the config, or generated token files under <state_dir>/tokens/ (DESIGN 7)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from callgate.server.config import ConfigError, ServerConfig
from callgate.server.core.principals import Principal, Role, TokenAuthenticator, token_digest

GENERATED_PRINCIPALS: dict[str, frozenset[Role]] = {
    "agent": frozenset({Role.AGENT}),
    "approver": frozenset({Role.APPROVER}),
    "admin": frozenset({Role.ADMIN, Role.AGENT, Role.APPROVER}),
}


def token_dir(state_dir: Path) -> Path:
    return state_dir / "tokens"


def _read_or_create_token(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        token = ""
    if token:
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
        return token
    token = secrets.token_urlsafe(32)
    # O_EXCL: two servers starting at once never overwrite each other's token.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text(encoding="utf-8").strip()
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    return token


def load_authenticator(
    config: ServerConfig, state_dir: Path
) -> tuple[TokenAuthenticator, Path | None]:
    """Build the authenticator. Returns the token directory when tokens were generated."""
    if config.principals:
        entries: list[tuple[Principal, bytes]] = []
        for index, item in enumerate(config.principals):
            principal = Principal(item.name, frozenset(item.roles))
            if item.token_sha256 is not None:
                entries.append((principal, bytes.fromhex(item.token_sha256)))
            else:
                assert item.token_env is not None
                value = os.environ.get(item.token_env, "").strip()
                if not value:
                    raise ConfigError(
                        f"config key principals.{index}.token_env: ${item.token_env} is not set"
                    )
                entries.append((principal, token_digest(value)))
        return TokenAuthenticator(entries), None
    directory = token_dir(state_dir)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    entries = [
        (Principal(name, roles), token_digest(_read_or_create_token(directory / name)))
        for name, roles in GENERATED_PRINCIPALS.items()
    ]
    return TokenAuthenticator(entries), directory
