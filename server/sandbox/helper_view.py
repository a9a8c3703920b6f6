"""A read-only view for helper processes that read workspace content for a tool (ripgrep): the
system's programs and libraries, and one tree of the workspace with its secrets masked. Nothing
else of the host exists there: not the server's state directory, not its home, not /etc, not
/proc.

Why: a helper opens paths by name after the server's checks, so a workspace file that flips
between a regular file and a symlink would otherwise make it read whatever the server can read
(the admin token). In this view a symlink can only lead to another visible file of the tree.

The tree itself is bound from a directory fd the server opened without following symlinks, so
the view is exactly the tree that was checked even if a name on its path is swapped meanwhile.
The helper runs in new namespaces (no network), with no capabilities, `no_new_privs`, under the
commands' seccomp filter, in its own session, and dies with the server.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Sequence

from ..core.paths import is_within

# Where programs and their libraries live. On a merged-/usr system the top-level ones are
# symlinks into /usr and are recreated as such; otherwise they are bound read-only.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@functools.cache
def _system_view() -> tuple[str, ...]:
    args: list[str] = []
    for path in _SYSTEM_DIRS:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            args += ["--symlink", os.readlink(path), path]
        elif stat.S_ISDIR(mode):
            args += ["--ro-bind", path, path]
    return tuple(args)


def _depth(path: str) -> int:
    return path.rstrip("/").count("/")


def helper_argv(
    bwrap: str,
    tree: str,
    tree_fd: int,
    masked: Sequence[str],
    workdir: str,
    command: Sequence[str],
    seccomp_fd: int | None = None,
) -> list[str]:
    """bubblewrap's command line running `command` in `workdir` with only `tree` (bound from
    `tree_fd`, read-only) visible beside the system directories; `masked` paths inside the
    tree are covered (a directory by an empty tmpfs, a file by /dev/null, which opens as
    EACCES because bubblewrap binds it nodev)."""
    argv = [bwrap, *_system_view(), "--ro-bind-fd", str(tree_fd), tree]
    masks: list[tuple[int, str, list[str]]] = []
    for path in dict.fromkeys(masked):
        if path == tree or not is_within(path, tree):
            continue
        try:
            is_dir = stat.S_ISDIR(os.lstat(path).st_mode)
        except OSError:
            continue  # gone since the walk: nothing to cover
        args = ["--tmpfs", path] if is_dir else ["--ro-bind", "/dev/null", path]
        masks.append((_depth(path), path, args))
    for _, _, args in sorted(masks):
        argv += args
    argv += ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    argv += ["--chdir", workdir, "--", *command]
    return argv
