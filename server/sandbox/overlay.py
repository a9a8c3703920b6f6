"""The dry run's copy-on-write workspace: a kernel overlay whose upper layer the server owns.

For a dry run the server makes a size-capped tmpfs with the new mount API (`fsopen`,
`fsconfig`, `fsmount`): a *detached* mount, attached nowhere on the host, that only the
server's file descriptor reaches. It holds `upper/`, `work/` and `merged/`. The command starts
through a short helper (this Python, `-I -S`, single-threaded) that enters a private mount
namespace, attaches the tmpfs at a server-owned empty directory there (`move_mount`), mounts
the overlay (the workspace as its read-only lower layer, `upper/` and `work/` from the tmpfs)
on `merged/`, and execs bubblewrap, which binds `merged/` as the workspace. So:

- nothing the command writes reaches the workspace: the lower layer is never written by
  overlayfs, and no other writable path exists in the dry-run sandbox;
- the host sees no mount (the namespace is private, and dies with the command);
- the upper layer's size is the tmpfs's (`ENOSPC` past the cap), a kernel bound;
- after the command the server reads the upper layer through its own descriptor, beneath it,
  never following a symlink (`read_upper`), and closing that descriptor frees the tmpfs.

The upper layer as overlayfs leaves it: new and changed files and directories as themselves
(changed files whole), a deleted path as a 0:0 character device (a whiteout), a directory that
replaced one of the lower layer marked opaque (`trusted.overlay.opaque`). `redirect_dir`,
`metacopy`, `index` and `xino` are off, so nothing else appears.

Needs CAP_SYS_ADMIN (the server running as root): `overlay_precondition()` says why not
otherwise.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

__all__ = [
    "OVERLAY_OPTIONS",
    "DryRunMount",
    "UpperEntry",
    "overlay_precondition",
    "read_upper",
]

_SYS_MOVE_MOUNT: Final = 429
_SYS_FSOPEN: Final = 430
_SYS_FSCONFIG: Final = 431
_SYS_FSMOUNT: Final = 432
_FSOPEN_CLOEXEC: Final = 1
_FSCONFIG_SET_STRING: Final = 1
_FSCONFIG_CMD_CREATE: Final = 6
_FSMOUNT_CLOEXEC: Final = 1
_MOUNT_ATTR_NOSUID: Final = 0x2

OVERLAY_OPTIONS: Final = "redirect_dir=off,index=off,metacopy=off,xino=off"
OPAQUE_XATTR: Final = "trusted.overlay.opaque"

# The helper: its arguments are the tmpfs fd, the mountpoint, the lower directory, "--" and
# bubblewrap's argv. It never returns: it execs bubblewrap, or exits 125 saying why not.
_HELPER: Final = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def check(result, what):
    if result < 0:
        error = ctypes.get_errno()
        sys.stderr.write("callgate: dry run: " + what + ": " + os.strerror(error) + "\n")
        os._exit(125)
fd, mountpoint, lower = int(sys.argv[1]), sys.argv[2], sys.argv[3]
check(libc.unshare(0x00020000), "unshare")
check(libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None), "private mounts")
check(libc.syscall(429, fd, b"", -100, mountpoint.encode(), 4), "attach")
options = "lowerdir=%s,upperdir=%s/upper,workdir=%s/work,%s" % (
    lower, mountpoint, mountpoint, sys.argv[4])
check(libc.mount(b"overlay", (mountpoint + "/merged").encode(), b"overlay", 0x2,
                 options.encode()), "overlay")
os.close(fd)
os.execv(sys.argv[6], sys.argv[6:])
"""

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")
    return result


def _fsconfig(fd: int, key: str, value: str) -> None:
    _check(
        _libc.syscall(_SYS_FSCONFIG, fd, _FSCONFIG_SET_STRING, key.encode(), value.encode(), 0),
        f"fsconfig {key}",
    )


def lower_refusal(lower: str) -> str:
    """Why `lower` cannot be an overlay's lower directory ("" when it can): the mount options
    are comma- and colon-separated."""
    if any(c in lower for c in ",:\\\n") or not os.path.isabs(lower):
        return "the workspace path holds a character overlay mounts cannot name (, : \\)"
    return ""


class DryRunMount:
    """One dry run's detached tmpfs (see the module docstring); `close` frees it."""

    def __init__(self, mountpoint: str, lower: str, size_bytes: int) -> None:
        if lower_refusal(lower):
            raise OSError(lower_refusal(lower))
        self.mountpoint = mountpoint
        self.lower = lower
        fs = _check(_libc.syscall(_SYS_FSOPEN, b"tmpfs", _FSOPEN_CLOEXEC), "fsopen")
        try:
            _fsconfig(fs, "size", str(max(size_bytes, 4096)))
            _fsconfig(fs, "mode", "0700")
            _fsconfig(fs, "nr_inodes", str(max(size_bytes // 1024, 1024)))
            _check(_libc.syscall(_SYS_FSCONFIG, fs, _FSCONFIG_CMD_CREATE, None, None, 0), "create")
            self.fd = _check(
                _libc.syscall(_SYS_FSMOUNT, fs, _FSMOUNT_CLOEXEC, _MOUNT_ATTR_NOSUID),
                "fsmount",
            )
        finally:
            os.close(fs)
        try:
            for name in ("upper", "work", "merged"):
                os.mkdir(name, 0o755, dir_fd=self.fd)
        except BaseException:
            os.close(self.fd)
            raise

    @property
    def merged(self) -> str:
        """Where the helper mounts the overlay: bubblewrap binds it as the workspace."""
        return f"{self.mountpoint}/merged"

    def helper_argv(self, argv: list[str]) -> list[str]:
        """`argv` (bubblewrap's) started through the helper; pass `self.fd` to the child."""
        return [
            sys.executable, "-I", "-S", "-c", _HELPER,
            str(self.fd), self.mountpoint, self.lower, OVERLAY_OPTIONS, "--", *argv,
        ]  # fmt: skip

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


@dataclass(frozen=True, slots=True)
class UpperEntry:
    """One path of the upper layer, relative to the workspace (`a/b`), in walk order (a
    directory before what it holds)."""

    path: str
    kind: str  # "file", "directory", "symlink", "whiteout", "special"
    mode: int = 0  # permission bits
    content: bytes = b""  # a file's bytes
    target: str = ""  # a symlink's target
    opaque: bool = False  # a directory that replaced the lower one
    links: int = 1  # a file's hard link count


def read_upper(mount: DryRunMount, max_entries: int) -> Iterator[UpperEntry]:
    """Walk the upper layer beneath the server's own descriptor: never through a symlink,
    never opening anything but directories and regular files (FIFOs included: O_NONBLOCK and a
    type check first). Raises OverflowError past `max_entries`."""
    count = 0
    root = os.open("upper", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=mount.fd)
    stack: list[tuple[int, str]] = [(root, "")]
    try:
        while stack:
            dir_fd, prefix = stack.pop()
            try:
                names = sorted(os.listdir(dir_fd))
                for name in names:
                    count += 1
                    if count > max_entries:
                        raise OverflowError(f"more than {max_entries} paths changed")
                    entry, child = _entry(dir_fd, name, prefix + name)
                    yield entry
                    if child is not None:
                        stack.append((child, prefix + name + "/"))
            finally:
                os.close(dir_fd)
    finally:
        for fd, _ in stack:
            os.close(fd)


def _entry(dir_fd: int, name: str, path: str) -> tuple[UpperEntry, int | None]:
    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISDIR(info.st_mode):
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            opaque = os.getxattr(fd, OPAQUE_XATTR) == b"y"
        except OSError:
            opaque = False
        return UpperEntry(path, "directory", mode, opaque=opaque), fd
    if stat.S_ISLNK(info.st_mode):
        return UpperEntry(path, "symlink", target=os.readlink(name, dir_fd=dir_fd)), None
    if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:
        return UpperEntry(path, "whiteout"), None
    if not stat.S_ISREG(info.st_mode):
        return UpperEntry(path, "special", mode), None
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            return UpperEntry(path, "special", mode), None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return UpperEntry(path, "file", mode, b"".join(chunks), links=opened.st_nlink), None


def overlay_precondition() -> str:
    """Why dry runs cannot be made here, from what is cheap to check at start ("" when they
    may): root, overlayfs in the kernel, and a detached tmpfs that can be made."""
    if os.geteuid() != 0:
        return "dry runs need the server to run as root (overlay mounts)"
    try:
        with open("/proc/filesystems", encoding="ascii") as listing:
            if not any(line.split()[-1:] == ["overlay"] for line in listing):
                return "the kernel has no overlay filesystem"
        fs = _check(_libc.syscall(_SYS_FSOPEN, b"tmpfs", _FSOPEN_CLOEXEC), "fsopen")
        os.close(fs)
    except OSError as exc:
        return f"overlay mounts do not work here ({exc.strerror or exc})"[:200]
    return ""
