"""Session-scoped resources: state shared by every loop of one session, created on first use
(the process supervisor, the session's private directory) and closed with the session."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, cast, runtime_checkable

import anyio

log = logging.getLogger(__name__)

T = TypeVar("T")

Task = Callable[[], Coroutine[Any, Any, None]]
Spawn = Callable[[Task], object]


@runtime_checkable
class Closeable(Protocol):
    async def aclose(self) -> None: ...


class ResourceKey(Generic[T]):
    """Names one kind of session resource; `SessionResources.get` returns the one instance."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"ResourceKey({self.name!r})"


class SessionResources:
    """What one session owns beyond its calls. Closing it closes every resource (newest
    first) and removes the session's private directory."""

    def __init__(self, session_id: str, state_root: Path | None, spawn: Spawn | None) -> None:
        self.session_id = session_id
        self._state_root = state_root
        self._spawn = spawn
        self._resources: dict[str, object] = {}
        self._closed = False
        self._write_lock: anyio.Lock | None = None

    @property
    def write_lock(self) -> anyio.Lock:
        """Held while a tool writes the workspace through the server (WriteFile, EditFile,
        applying a dry run's change set), so that no two such writes interleave."""
        if self._write_lock is None:
            self._write_lock = anyio.Lock()
        return self._write_lock

    def get(self, key: ResourceKey[T], factory: Callable[[], T]) -> T:
        """The session's instance for `key`, built by `factory` on first use."""
        if self._closed:
            raise RuntimeError("the session is closed")
        if key.name not in self._resources:
            self._resources[key.name] = factory()
        return cast(T, self._resources[key.name])

    def peek(self, key: ResourceKey[T]) -> T | None:
        return cast("T | None", self._resources.get(key.name))

    def private_dir(self) -> Path:
        """The session's private directory (mode 0700), created on first use."""
        if self._state_root is None:
            raise RuntimeError("no state directory is configured for session resources")
        path = self._state_root / self.session_id
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path

    def spawn(self, task: Task) -> None:
        """Run `task` in the server's task group (it must end when its resource closes)."""
        if self._spawn is None:
            raise RuntimeError("no task group is attached to session resources")
        self._spawn(task)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            for name, resource in reversed(list(self._resources.items())):
                if isinstance(resource, Closeable):
                    try:
                        await resource.aclose()
                    except Exception:
                        log.exception("closing a session resource failed", extra={"detail": name})
            self._resources.clear()
            if self._state_root is not None:
                shutil.rmtree(self._state_root / self.session_id, ignore_errors=True)
