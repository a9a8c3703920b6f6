"""Workspace path containment and the protected (secret) path matcher.

Every path a tool touches is resolved through symlinks to a canonical absolute path and must
stay inside the session's workspace. Protected paths (secrets, the server's own state) are
matched on the canonical path and refused for every tool.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence

from .errors import arguments_invalid

DEFAULT_DENIED_GLOBS: tuple[str, ...] = (
    "**/.env",
    "**/.env.*",
    "**/.ssh/**",
    "**/.aws/**",
    "**/.gnupg/**",
    "**/*.pem",
    "**/*.key",
    "**/id_rsa*",
    "**/id_ed25519*",
    "**/.netrc",
    "**/.git-credentials",
)


def glob_to_regex(pattern: str) -> str:
    """Translate a path glob to a regex body: `**` spans directories, `*` and `?` stay within
    one path component, `[...]` is a character class. Anchoring is left to the caller.
    `**` spans every character, newlines included (`(?s:...)`), whatever flags the caller
    compiles with: a file name may hold a newline, and it must not hide a secret from a glob."""
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append("(?:(?s:.*)/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == n:
            out.append("(?:/(?s:.*))?")
            i += 3
        elif pattern.startswith("**", i):
            out.append("(?s:.*)")
            i += 2
        else:
            char = pattern[i]
            if char == "*":
                out.append("[^/]*")
            elif char == "?":
                out.append("[^/]")
            elif char == "[":
                end = pattern.find("]", i + 1)
                if end == -1:
                    out.append(re.escape(char))
                else:
                    body = pattern[i + 1 : end].replace("\\", "\\\\")
                    if body.startswith("!"):
                        body = "^" + body[1:]
                    out.append(f"(?!/)[{body}]")
                    i = end
            else:
                out.append(re.escape(char))
            i += 1
    return "".join(out)


class ProtectedPaths:
    """Decides whether a canonical absolute path is protected (secret or server state).

    A directory counts as protected when it is itself matched, so `tree:` requirements over a
    protected directory are refused; files beneath an unprotected tree are filtered one by one.
    """

    def __init__(self, globs: Sequence[str], roots: Iterable[str] = ()) -> None:
        self.globs = tuple(globs)
        self.roots = tuple(sorted({os.path.realpath(r) for r in roots}))
        parts = [glob_to_regex(g.removeprefix("/")) for g in self.globs]
        # Globs are matched against the path without its leading slash, anywhere below /.
        self._regex = re.compile("(?:" + "|".join(parts) + r")\Z") if parts else None

    def is_protected(self, path: str) -> bool:
        for root in self.roots:
            if path == root or path.startswith(root + "/"):
                return True
        if self._regex is None:
            return False
        return self._regex.match(path.lstrip("/")) is not None

    def overlaps_tree(self, root: str) -> bool:
        """True when `root` itself, or a directory it sits in, is protected."""
        return self.is_protected(root)


def is_within(path: str, root: str) -> bool:
    """True when canonical `path` is `root` or below it."""
    return path == root or path.startswith(root.rstrip("/") + "/")


class Workspace:
    """A session's workspace root and path resolution inside it."""

    def __init__(self, root: str, protected: ProtectedPaths) -> None:
        self.root = os.path.realpath(root)
        self.protected = protected

    def contains(self, path: str) -> bool:
        return is_within(path, self.root)

    def resolve(self, raw: str, field: str) -> str:
        """Resolve a workspace-relative (or absolute, inside the workspace) path through
        symlinks to a canonical absolute path; anything that escapes is ARGUMENTS_INVALID."""
        if not raw:
            raise arguments_invalid(field, "the path is empty")
        if "\x00" in raw:
            # os.path.realpath would raise ValueError (an INTERNAL error) instead.
            raise arguments_invalid(field, "the path holds a NUL byte")
        if len(raw) > 4096:
            raise arguments_invalid(field, "the path is longer than 4096 characters")
        joined = raw if raw.startswith("/") else os.path.join(self.root, raw)
        canonical = os.path.realpath(joined)
        if not self.contains(canonical):
            raise arguments_invalid(
                field, "the path resolves outside the workspace; use a path inside it"
            )
        return canonical

    def relative(self, canonical: str) -> str:
        """The workspace-relative form of a canonical path, for summaries and results."""
        if canonical == self.root:
            return "."
        if not self.contains(canonical):
            raise ValueError("the path is outside the workspace")
        return canonical[len(self.root.rstrip("/")) + 1 :]
