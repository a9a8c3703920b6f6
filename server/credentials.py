"""Principals from the config, or generated token files in <state_dir>/tokens/ (design section 7).

The server keeps only SHA-256 digests of tokens; a plaintext token exists in its file (0600,
written once for the CLI) and, from a `token_env` principal, in the server's environment,
which no command or helper process inherits."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path
from typing import NoReturn

from callgate.server.config import ConfigError, ServerConfig
from callgate.server.core.principals import Principal, Role, TokenAuthenticator, token_digest

GENERATED_PRINCIPALS: dict[str, frozenset[Role]] = {
    "agent": frozenset({Role.AGENT}),
    "approver": frozenset({Role.APPROVER}),
    "admin": frozenset({Role.ADMIN, Role.AGENT, Role.APPROVER}),
}


TOKEN_DIR_MODE = 0o700
TOKEN_FILE_MODE = 0o600


def token_dir(state_dir: Path) -> Path:
    return state_dir / "tokens"


def _refuse(path: Path, problem: str) -> NoReturn:
    raise ConfigError(f"config key state_dir: the token file {path} {problem}")


def _open_private(name: str, dir_fd: int, path: Path) -> int | None:
    """A read descriptor of our own regular token file (made 0600), None when it is absent.
    A symlink or a file owned by someone else is refused, never followed or fixed."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            _refuse(path, "is a symbolic link; remove it and restart to get a new token")
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        _refuse(path, "is not a regular file of this server's user; remove it and restart")
    if stat.S_IMODE(info.st_mode) != TOKEN_FILE_MODE:
        os.fchmod(fd, TOKEN_FILE_MODE)
    return fd


def _read_or_create_token(name: str, dir_fd: int, path: Path) -> str:
    """The token in `<dir>/<name>`; a new one when the file is absent or empty, written to a
    temporary file and renamed into place, so a reader never sees half a token."""
    fd = _open_private(name, dir_fd, path)
    if fd is not None:
        with os.fdopen(fd, encoding="utf-8") as handle:
            token = handle.read(4096).strip()
        if token:
            return token
    token = secrets.token_urlsafe(32)
    temporary = f".{name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(
        temporary,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        TOKEN_FILE_MODE,
        dir_fd=dir_fd,
    )
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        os.unlink(temporary, dir_fd=dir_fd)
        raise
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
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, TOKEN_DIR_MODE)
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(
            f"config key state_dir: {directory} is not a directory of its own ({exc.strerror}); "
            "remove it and restart"
        ) from None
    try:
        info = os.fstat(dir_fd)
        if info.st_uid != os.geteuid():
            raise ConfigError(
                f"config key state_dir: {directory} is owned by uid {info.st_uid}; remove it"
            )
        if stat.S_IMODE(info.st_mode) != TOKEN_DIR_MODE:
            os.fchmod(dir_fd, TOKEN_DIR_MODE)
        # Only the digests are kept: the plaintext leaves memory with this comprehension.
        entries = [
            (
                Principal(name, roles),
                token_digest(_read_or_create_token(name, dir_fd, directory / name)),
            )
            for name, roles in GENERATED_PRINCIPALS.items()
        ]
    finally:
        os.close(dir_fd)
    return TokenAuthenticator(entries), directory
