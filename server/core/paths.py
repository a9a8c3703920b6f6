"""Workspace path containment and the protected (secret) path matcher.

Every path a tool touches is resolved through symlinks to a canonical absolute path and must
stay inside the session's workspace. Protected paths (secrets, the server's own state) are
matched on the canonical path and refused for every tool.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence

from .errors import arguments_invalid

# Secrets: refused to every tool and masked in every sandbox, at any depth, matched without
# regard to case. Compared with what gitleaks, trufflehog and Anthropic's sandbox-runtime
# protect: environment files and their backups, private keys and key stores, credential
# files of the common CLIs (git, npm, PyPI, cargo, docker, kubectl, AWS, GCP, Azure).
DEFAULT_DENIED_GLOBS: tuple[str, ...] = (
    "**/.env*",
    "**/*.env",
    "**/.ssh/**",
    "**/.aws/**",
    "**/.azure/**",
    "**/.gnupg/**",
    "**/.config/gcloud/**",
    "**/.docker/config.json",
    "**/.kube/config",
    "**/*.pem",
    "**/*.key",
    "**/*.p12",
    "**/*.pfx",
    "**/*.jks",
    "**/*.keystore",
    "**/*.ppk",
    "**/*.kdbx",
    "**/id_rsa*",
    "**/id_dsa*",
    "**/id_ecdsa*",
    "**/id_ed25519*",
    "**/id_xmss*",
    "**/.netrc",
    "**/_netrc",
    "**/.git-credentials",
    "**/.npmrc",
    "**/.pypirc",
    "**/.pgpass",
    "**/.htpasswd",
    "**/.cargo/credentials*",
    "**/.gem/credentials",
)

# Files that make programs run code (git's config and hooks, shell startup files, editor and
# agent configuration): read-only to every command even inside the writable workspace, and a
# WriteFile or EditFile on them always waits for a human. Matched without regard to case.
DEFAULT_READONLY_GLOBS: tuple[str, ...] = (
    "**/.git/config",
    "**/.git/config.worktree",
    # A `commondir` file sends git to the config (and hooks) of another directory.
    "**/.git/**/commondir",
    "**/.git/hooks/**",
    "**/.git/modules/**/config",
    "**/.git/modules/**/hooks/**",
    "**/.git/info/attributes",
    "**/.gitmodules",
    "**/.gitconfig",
    "**/.bashrc",
    "**/.bash_profile",
    "**/.bash_login",
    "**/.bash_logout",
    "**/.profile",
    "**/.zshrc",
    "**/.zshenv",
    "**/.zprofile",
    "**/.zlogin",
    "**/.ripgreprc",
    "**/.mcp.json",
    "**/.vscode/**",
    "**/.idea/**",
    "**/.claude/**",
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


_LITERAL_BREAKS = re.compile(r"\[[^\]]*\]|[*?/{}]")


class _GlobSet:
    """A set of globs matched against absolute paths, below /, in any case: a case-insensitive
    filesystem, or a tool that folds case, must not open `.ENV`.

    Fast enough to call for every entry of a large tree: globs of the form `**/<name>` (most of
    them) are one regex over the last component; the others are tried only when the path holds
    their longest literal run (`.ssh`, `config.json`)."""

    def __init__(self, globs: Sequence[str]) -> None:
        names: list[str] = []
        self._others: list[tuple[str, re.Pattern[str]]] = []
        for raw in globs:
            glob = raw.removeprefix("/")
            rest = glob.removeprefix("**/")
            if rest != glob and rest and "/" not in rest and "**" not in rest:
                names.append(glob_to_regex(rest))
                continue
            pieces = [piece for piece in _LITERAL_BREAKS.split(glob) if piece]
            literal = max(pieces, key=len, default="").casefold()
            regex = re.compile(glob_to_regex(glob) + r"\Z", re.IGNORECASE)
            self._others.append((literal, regex))
        joined = "(?:" + "|".join(names) + r")\Z"
        self._names = re.compile(joined, re.IGNORECASE) if names else None

    def matches(self, path: str) -> bool:
        rel = path.lstrip("/")
        if self._names is not None and self._names.match(rel.rpartition("/")[2]):
            return True
        if self._others:
            folded = rel.casefold()
            for literal, regex in self._others:
                if literal in folded and regex.match(rel):
                    return True
        return False

    def in_directory(self, directory: str) -> Callable[[str], bool]:
        """`matches` for the entries of one directory, by name: a literal run never holds a
        `/`, so the directory's part of the test is done once (a walk calls this per entry)."""
        prefix = directory.rstrip("/") + "/"
        folded = prefix.casefold()
        live = [regex for literal, regex in self._others if literal in folded]
        pending = [(literal, regex) for literal, regex in self._others if literal not in folded]
        names = self._names

        def matches(name: str) -> bool:
            if names is not None and names.match(name):
                return True
            if not live and not pending:
                return False
            rel = (prefix + name).lstrip("/")
            if any(regex.match(rel) for regex in live):
                return True
            if pending:
                name_folded = name.casefold()
                return any(
                    literal in name_folded and regex.match(rel) for literal, regex in pending
                )
            return False

        return matches


class ProtectedPaths:
    """Decides whether a canonical absolute path is protected (secret or server state), and
    whether it is read-only to commands and needs a human to be written (`is_readonly`).

    A directory counts as protected when it is itself matched, so `tree:` requirements over a
    protected directory are refused; files beneath an unprotected tree are filtered one by one.
    """

    def __init__(
        self,
        globs: Sequence[str],
        roots: Iterable[str] = (),
        readonly_globs: Sequence[str] = DEFAULT_READONLY_GLOBS,
    ) -> None:
        self.globs = tuple(globs)
        self.readonly_globs = tuple(readonly_globs)
        self.roots = tuple(sorted({os.path.realpath(r) for r in roots}))
        self._secrets = _GlobSet(self.globs)
        self._readonly = _GlobSet(self.readonly_globs)

    def is_protected(self, path: str) -> bool:
        for root in self.roots:
            if path == root or path.startswith(root + "/"):
                return True
        return self._secrets.matches(path)

    def is_readonly(self, path: str) -> bool:
        """True for a file that makes programs run code (`DEFAULT_READONLY_GLOBS`)."""
        return self._readonly.matches(path)

    def needs_human_to_write(self, path: str) -> bool:
        """True when a file tool's write to `path` must wait for a human, each time: a
        read-only file, or a file named `.git` (a `gitdir:` pointer sends git to a config
        elsewhere; a `.git` directory stays writable to commands, so it is no read-only glob)."""
        return self.is_readonly(path) or os.path.basename(path).lower() == ".git"

    def overlaps_tree(self, root: str) -> bool:
        """True when `root` itself, or a directory it sits in, is protected."""
        return self.is_protected(root)

    def children(self, directory: str) -> ChildPaths:
        """The same answers for the entries of canonical `directory`, by name (for walks)."""
        return ChildPaths(self, directory)


class ChildPaths:
    """`ProtectedPaths` answers for the entries of one directory, asked by name: what depends
    only on the directory is worked out once, which makes a walk of a large tree cheaper."""

    def __init__(self, protected: ProtectedPaths, directory: str) -> None:
        directory = directory.rstrip("/") or "/"
        inside_root = any(is_within(directory, root) for root in protected.roots)
        self._roots = frozenset(
            os.path.basename(root) for root in protected.roots if os.path.dirname(root) == directory
        )
        self._all_protected = inside_root
        self._secret = protected._secrets.in_directory(directory)
        self._readonly = protected._readonly.in_directory(directory)

    def is_protected(self, name: str) -> bool:
        return self._all_protected or name in self._roots or self._secret(name)

    def is_readonly(self, name: str) -> bool:
        return self._readonly(name)

    def needs_human_to_write(self, name: str) -> bool:
        return self._readonly(name) or name.lower() == ".git"


def is_within(path: str, root: str) -> bool:
    """True when canonical `path` is `root` or below it."""
    return path == root or path.startswith(root.rstrip("/") + "/")


# Kernel views of processes and devices: `/proc/self/cwd`, `/proc/self/exe` and
# `/proc/self/fd/N` resolve, on the server, to the server's own directory, interpreter and open
# files. No path below them is ever looked up on a caller's behalf.
MAGIC_ROOTS: tuple[str, ...] = ("/proc", "/sys")


def lexical_path(absolute: str) -> str:
    """An absolute path with `.`, `..`, repeated and trailing slashes folded by its text alone,
    nothing looked up on the host (POSIX keeps a leading `//`; it is folded too)."""
    folded = os.path.normpath(absolute)
    return "/" + folded.lstrip("/") if folded.startswith("//") else folded


def real_path(path: str) -> str | None:
    """`os.path.realpath`, or None where it fails: a symlink the server may not read (such
    as `/proc/1/root`) raises PermissionError, which must answer like any other escape, not
    as an internal error.

    A path that exists is resolved by the kernel (an `O_PATH` descriptor, whose
    `/proc/self/fd` link names where it leads: three system calls instead of a look-up per
    component); any other (missing, a dangling link) by `os.path.realpath`, as before."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (OSError, ValueError):
        fd = -1
    if fd >= 0:
        try:
            resolved = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            resolved = ""
        finally:
            os.close(fd)
        if resolved.startswith("/") and not resolved.endswith(" (deleted)"):
            return resolved
    try:
        return os.path.realpath(path)
    except OSError:
        return None


def is_magic(path: str) -> bool:
    """True for a lexical absolute path in /proc or /sys (`MAGIC_ROOTS`)."""
    return any(is_within(path, root) for root in MAGIC_ROOTS)


OUTSIDE_WORKSPACE = (
    "the path is outside the workspace or leads out of it (through .. or a symbolic link); "
    "use a path inside the workspace"
)


class Workspace:
    """A session's workspace root and path resolution inside it."""

    def __init__(self, root: str, protected: ProtectedPaths) -> None:
        self.root = os.path.realpath(root)
        self.protected = protected

    def contains(self, path: str) -> bool:
        return is_within(path, self.root)

    def resolve(self, raw: str, field: str) -> str:
        """Resolve a workspace-relative (or absolute, inside the workspace) path through
        symlinks to a canonical absolute path; anything that escapes is ARGUMENTS_INVALID.

        An absolute path whose text is outside the workspace is refused before anything is
        looked up (`/proc/self/cwd` would resolve to the server's directory), and every escape
        gets the same answer: where a path leads outside, and whether it exists there, is never
        told."""
        if not raw:
            raise arguments_invalid(field, "the path is empty")
        if "\x00" in raw:
            # os.path.realpath would raise ValueError (an INTERNAL error) instead.
            raise arguments_invalid(field, "the path holds a NUL byte")
        if len(raw) > 4096:
            raise arguments_invalid(field, "the path is longer than 4096 characters")
        if raw.startswith("/") and not self.contains(lexical_path(raw)):
            raise arguments_invalid(field, OUTSIDE_WORKSPACE)
        joined = raw if raw.startswith("/") else os.path.join(self.root, raw)
        canonical = real_path(joined)
        if canonical is None or not self.contains(canonical):
            raise arguments_invalid(field, OUTSIDE_WORKSPACE)
        return canonical

    def relative(self, canonical: str) -> str:
        """The workspace-relative form of a canonical path, for summaries and results."""
        if canonical == self.root:
            return "."
        if not self.contains(canonical):
            raise ValueError("the path is outside the workspace")
        return canonical[len(self.root.rstrip("/")) + 1 :]
