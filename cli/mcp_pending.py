"""The calls `callgate mcp` answered as pending, kept where the agent's next bridge finds them.

A client that starts a bridge per call (langchain-mcp-adapters' default) ends the process that
answered "awaiting an approver"; the same call made again arrives at a new process. The ledger
is a small file per agent and named session (its name a keyed digest of both: another agent
using the same session name has another file) in a directory of the user's own (0700; the file
0600, never followed through a symlink, refused if another user owns it), locked with `flock`
(never blocking the event loop: the caller runs it in a thread, and a lock held for more than
`LOCK_WAIT` seconds makes the ledger unusable for that call), so that the new process finds the
call by its call key and follows it instead of preparing another.

An entry holds the request IDs the bridge prepared the call with (Prepare's, with its execution
ID and batch ID, and Invoke's): the next bridge prepares it again with them, and the server
returns that same call only if tool and arguments are the same as well (its request
fingerprint; ALREADY_EXISTS otherwise, and the bridge prepares afresh), and runs it only if it
was approved, once. What an entry says decides nothing. An unreadable or malformed ledger is
empty.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import string
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["LEDGER_MAX", "LOCK_WAIT", "Ledger", "LedgerEntry", "default_ledger_dir", "ledger_name"]

LEDGER_MAX: Final = 1024
"""Entries a ledger keeps (the oldest are forgotten first)."""

LOCK_WAIT: Final = 1.0
"""Seconds a ledger operation waits for the file's lock before giving up."""

_MAX_BYTES: Final = 1 << 20
_ID_CHARS: Final = frozenset(string.ascii_letters + string.digits + "-_.:")


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    prepare_request_id: str
    execution_id: str
    batch_id: str
    invoke_request_id: str
    saved: float  # wall-clock seconds


def ledger_name(token: str, session_name: str) -> str:
    """The ledger file's name for an agent (its token) and a named session."""
    digest = hashlib.blake2b(
        f"{session_name}\0{token}".encode(), key=b"callgate mcp ledger", digest_size=16
    )
    return digest.hexdigest()


def default_ledger_dir() -> Path:
    """`$XDG_RUNTIME_DIR/callgate-mcp`, else `~/.cache/callgate/mcp`."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return Path(runtime) / "callgate-mcp"
    return Path.home() / ".cache" / "callgate" / "mcp"


def _plain_id(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 64 and set(value) <= _ID_CHARS


class Ledger:
    """The pending calls of one agent's named session, in `<directory>/<name>.json` (`name`:
    `ledger_name`). Blocking: run its methods in a worker thread."""

    def __init__(self, directory: Path, name: str, keep_seconds: float) -> None:
        if not name or "/" in name or name.startswith("."):
            raise ValueError("a ledger needs a plain name")
        self._directory = directory
        self._path = directory / f"{name}.json"
        self._keep = keep_seconds

    def may_hold(self) -> bool:
        """False only when the ledger surely holds nothing (no file, or an empty one): one
        `stat`, no lock, so a bridge's every call need not read the file."""
        try:
            return os.stat(self._path, follow_symlinks=False).st_size > len(b"{}")
        except FileNotFoundError:
            return False
        except OSError:
            return True  # a real look, which says what is wrong

    def find(self, key: str) -> LedgerEntry | None:
        with self._locked() as entries:
            return entries.get(key)

    def put(self, key: str, entry: LedgerEntry) -> None:
        with self._locked(write=True) as entries:
            entries.pop(key, None)
            entries[key] = entry

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
            _lock(fd)
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
        except (ValueError, RecursionError):
            loaded = {}
        oldest = time.time() - self._keep
        entries: dict[str, LedgerEntry] = {}
        if isinstance(loaded, dict):
            for key, value in loaded.items():
                if not (isinstance(value, list) and len(value) == 5):
                    continue
                prepare, execution, batch, invoke, saved = value
                if (
                    _plain_id(key)
                    and all(_plain_id(i) for i in (prepare, execution, invoke))
                    and (batch == "" or _plain_id(batch))
                    and isinstance(saved, int | float)
                    and saved >= oldest
                ):
                    entries[key] = LedgerEntry(prepare, execution, batch, invoke, float(saved))
        return entries

    def _write(self, fd: int, entries: dict[str, LedgerEntry]) -> None:
        kept = list(entries.items())[-LEDGER_MAX:]
        data = json.dumps(
            {
                key: [e.prepare_request_id, e.execution_id, e.batch_id, e.invoke_request_id,
                      e.saved]
                for key, e in kept
            },
            separators=(",", ":"),
        ).encode()  # fmt: skip
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)


def _lock(fd: int) -> None:
    """Take the file's lock, waiting at most LOCK_WAIT seconds (then BlockingIOError)."""
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
