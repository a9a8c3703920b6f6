"""The calls `callgate mcp` answered as pending, kept where the agent's next bridge finds them.

A client that starts a bridge per call (langchain-mcp-adapters' default) ends the process that
answered "awaiting an approver"; the same call made again arrives at a new process. The ledger
is a small file per named session in a directory of the user's own (0700; the file 0600, never
followed through a symlink), locked with `flock` while it is read and rewritten, so that the
new process finds the call by its call key and follows it instead of preparing another.

An entry holds only the call's execution ID and the Invoke request ID the bridge uses for it
(so that two bridges invoking it run it once). Whatever an entry says, the server decides:
a call is invoked only if it is APPROVED in the bridge's own session, and a bridge checks that
the call it finds is of the tool it was asked for. An unreadable or malformed ledger is empty.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import string
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["LEDGER_MAX", "Ledger", "LedgerEntry", "default_ledger_dir"]

LEDGER_MAX: Final = 1024
"""Entries a ledger keeps (the oldest are forgotten first)."""

_MAX_BYTES: Final = 1 << 20
_ID_CHARS: Final = frozenset(string.ascii_letters + string.digits + "-_")


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    execution_id: str
    invoke_request_id: str
    saved: float  # wall-clock seconds


def default_ledger_dir() -> Path:
    """`$XDG_RUNTIME_DIR/callgate-mcp`, else `~/.cache/callgate/mcp`."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return Path(runtime) / "callgate-mcp"
    return Path.home() / ".cache" / "callgate" / "mcp"


def _plain_id(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 64 and set(value) <= _ID_CHARS


class Ledger:
    """The pending calls of one named session, in `<directory>/<session name>.json`."""

    def __init__(self, directory: Path, session_name: str, keep_seconds: float) -> None:
        if not session_name or "/" in session_name or session_name.startswith("."):
            raise ValueError("a ledger needs a plain session name")
        self._directory = directory
        self._path = directory / f"{session_name}.json"
        self._keep = keep_seconds

    def find(self, key: str) -> LedgerEntry | None:
        with self._locked() as entries:
            return entries.get(key)

    def put(self, key: str, execution_id: str, invoke_request_id: str) -> None:
        with self._locked(write=True) as entries:
            entries.pop(key, None)
            entries[key] = LedgerEntry(execution_id, invoke_request_id, time.time())

    def drop(self, key: str) -> None:
        with self._locked(write=True) as entries:
            entries.pop(key, None)

    @contextlib.contextmanager
    def _locked(self, write: bool = False) -> Iterator[dict[str, LedgerEntry]]:
        """The entries, read under an exclusive lock and written back when `write`."""
        self._directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_uid != os.geteuid():
                raise PermissionError(f"{self._path} belongs to another user")
            os.fchmod(fd, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            entries = self._read(fd)
            yield entries
            if write:
                self._write(fd, entries)
        finally:
            os.close(fd)  # releases the lock

    def _read(self, fd: int) -> dict[str, LedgerEntry]:
        raw = os.pread(fd, _MAX_BYTES + 1, 0)
        try:
            loaded = json.loads(raw) if raw and len(raw) <= _MAX_BYTES else {}
        except ValueError:
            loaded = {}
        oldest = time.time() - self._keep
        entries: dict[str, LedgerEntry] = {}
        if isinstance(loaded, dict):
            for key, value in loaded.items():
                if not (isinstance(value, list) and len(value) == 3):
                    continue
                execution_id, request_id, saved = value
                if (
                    _plain_id(key)
                    and _plain_id(execution_id)
                    and _plain_id(request_id)
                    and isinstance(saved, int | float)
                    and saved >= oldest
                ):
                    entries[key] = LedgerEntry(execution_id, request_id, float(saved))
        return entries

    def _write(self, fd: int, entries: dict[str, LedgerEntry]) -> None:
        kept = list(entries.items())[-LEDGER_MAX:]
        data = json.dumps(
            {key: [e.execution_id, e.invoke_request_id, e.saved] for key, e in kept},
            separators=(",", ":"),
        ).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
