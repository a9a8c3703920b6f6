"""The egress proxy's listener on a sandbox's own loopback (design section 6).

Every sandboxed command runs in a network namespace of its own (bubblewrap's `--unshare-net`),
where only loopback is up. For a command approved for network, the server makes a listening
socket on 127.0.0.1:PROXY_PORT inside that namespace while the sandbox's init is held at its
start gate, and the egress proxy (`net/egress.py`) serves it from the server's own namespace: a
socket stays in the namespace it was made in, whichever thread then uses it. Nothing runs
inside the sandbox for it, and the command cannot reach anything else.

- As root (CAP_SYS_ADMIN over the sandbox's namespace, which bubblewrap made without a user
  namespace), a short-lived thread enters the namespace (`setns`), makes the socket and ends;
  setns moves only that thread, and the thread is gone before anyone else could use it.
- As any other user, bubblewrap made a user namespace that owns the network namespace. Entering
  it takes a single-threaded process, so a helper (this Python, `-I -S`) joins that user
  namespace (found from the network namespace itself, NS_GET_USERNS) and then the network
  namespace, makes the socket and hands it back over a socket pair (SCM_RIGHTS). The helper
  touches no path an agent controls.

Either way the namespace is found through the init's PID, checked against its pidfd after the
namespace is opened (a PID cannot be reused while its process lives), and never the server's own.
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import socket
import subprocess
import sys
import threading

from . import proctree

log = logging.getLogger(__name__)

PROXY_PORT = 3128
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
# The variables a command finds the proxy by; NO_PROXY is never set (nothing is bypassed).
PROXY_ENV_NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
ALL_PROXY_ENV_NAMES = frozenset(
    {*PROXY_ENV_NAMES, *(n.lower() for n in PROXY_ENV_NAMES), "NO_PROXY", "no_proxy"}
)
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
NS_GET_USERNS = 0xB701  # ioctl_ns(2): _IO(0xb7, 0x1)
LISTEN_BACKLOG = 128
HELPER_SECONDS = 10.0

# Run by the helper: argv = user-namespace fd, network-namespace fd, socket-pair fd, port.
HELPER = r"""
import ctypes, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
user, net, channel, port = (int(a) for a in sys.argv[1:5])
mine = os.stat("/proc/self/ns/user")
theirs = os.fstat(user)
if (mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino):
    if libc.setns(user, 0x10000000) != 0:
        sys.exit("setns user: " + os.strerror(ctypes.get_errno()))
if libc.setns(net, 0x40000000) != 0:
    sys.exit("setns net: " + os.strerror(ctypes.get_errno()))
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.bind(("127.0.0.1", port))
listener.listen(128)
socket.send_fds(socket.socket(fileno=channel), [b"l"], [listener.fileno()])
"""


def proxy_env() -> dict[str, str]:
    """The variables that point a command's HTTP clients at its proxy."""
    return {name: PROXY_URL for base in PROXY_ENV_NAMES for name in (base, base.lower())}


class ListenerError(Exception):
    """The listener could not be made; the message is for the log."""


_libc = ctypes.CDLL(None, use_errno=True)


class Listeners:
    """Makes proxy listeners in sandboxes' namespaces. `how`: "auto" (a thread's setns while
    it works here, the helper once it is refused), "setns" or "helper"."""

    def __init__(self, how: str = "auto") -> None:
        if how not in ("auto", "setns", "helper"):
            raise ValueError(how)
        self.how = how

    def listen_in(self, init_pid: int, init_fd: int) -> socket.socket:
        """A listening TCP socket on 127.0.0.1:PROXY_PORT in the network namespace of the
        sandbox whose init is `init_pid` (held by the pidfd `init_fd`). Blocking: call it from
        a worker thread. Raises ListenerError."""
        try:
            net_fd = os.open(f"/proc/{init_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise ListenerError(f"open the sandbox's network namespace: {exc.strerror}") from None
        try:
            if proctree.has_exited(init_fd):
                raise ListenerError("the sandbox's init is gone")
            own = os.stat("/proc/self/ns/net")
            target = os.fstat(net_fd)
            if (own.st_dev, own.st_ino) == (target.st_dev, target.st_ino):
                raise ListenerError("the sandbox shares the server's network namespace")
            if self.how != "helper":
                try:
                    return _in_thread(net_fd)
                except PermissionError:
                    if self.how == "setns":
                        raise ListenerError("setns is not permitted here") from None
                    self.how = "helper"  # not root: it will not work next time either
            return _by_helper(net_fd)
        finally:
            os.close(net_fd)


def _in_thread(net_fd: int) -> socket.socket:
    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def enter_and_listen() -> None:
        try:
            if _libc.setns(net_fd, CLONE_NEWNET) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, os.strerror(errno))
            made.append(_listener())
        except BaseException as exc:
            failed.append(exc)

    # A fresh thread, which ends here: nothing else ever runs in the sandbox's namespace.
    thread = threading.Thread(target=enter_and_listen, name="callgate-netns")
    thread.start()
    thread.join()
    if failed:
        if isinstance(failed[0], PermissionError):
            raise failed[0]
        raise ListenerError(f"make the listener: {failed[0]}")
    return made[0]


def _listener() -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", PROXY_PORT))
        listener.listen(LISTEN_BACKLOG)
    except BaseException:
        listener.close()
        raise
    return listener


def _by_helper(net_fd: int) -> socket.socket:
    try:
        # The user namespace that owns the network namespace (not the init's current one,
        # which bubblewrap may replace by a nested one while we look).
        user_fd = fcntl.ioctl(net_fd, NS_GET_USERNS)
    except OSError as exc:
        raise ListenerError(f"find the sandbox's user namespace: {exc.strerror}") from None
    os.set_inheritable(user_fd, False)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        argv = [sys.executable, "-I", "-S", "-c", HELPER]
        argv += [str(user_fd), str(net_fd), str(theirs.fileno()), str(PROXY_PORT)]
        try:
            done = subprocess.run(  # a fixed script and our own fds
                argv,
                pass_fds=(user_fd, net_fd, theirs.fileno()),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env={},
                cwd="/",
                timeout=HELPER_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ListenerError(f"the namespace helper did not run: {exc}") from None
        theirs.close()
        if done.returncode != 0:
            detail = done.stderr.decode("utf-8", "replace").strip()[-300:]
            raise ListenerError(f"the namespace helper failed: {detail}")
        ours.settimeout(HELPER_SECONDS)
        _, fds, _, _ = socket.recv_fds(ours, 16, 1)
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise ListenerError("the namespace helper sent no listener")
        return socket.socket(fileno=fds[0])
    finally:
        os.close(user_fd)
        ours.close()
        theirs.close()
