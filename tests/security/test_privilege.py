"""No privilege leaves the sandbox: from inside a real bubblewrap sandbox, with the commands'
seccomp filter, no route sets a setuid or setgid bit that the host then sees, and the syscalls
a confined command never needs (ptrace, keyring, bpf, io_uring, new namespaces, ...) fail.

Every attempt runs only inside bubblewrap (read-only root, a temporary workspace); what is
checked on the host is the workspace's files, with os.lstat."""

from __future__ import annotations

import errno
import json
import os
import platform
import shlex
import signal
import stat
from pathlib import Path

import anyio
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from callgate.server.sandbox.bwrap import BwrapRunner
from callgate.server.sandbox.seccomp import build_program
from callgate.v1 import tool_call_pb2
from tests.sandbox.helpers import Layout, finish, make_layout, started
from tests.support.calls import invoke, open_session, prepare
from tests.support.sandbox import bwrap_only, bwrap_path
from tests.support.server import serve

pytestmark = [pytest.mark.anyio, *bwrap_only]

SETID = stat.S_ISUID | stat.S_ISGID


@pytest.fixture
def runner() -> BwrapRunner:
    path = bwrap_path()
    assert path is not None
    return BwrapRunner(path, seccomp=build_program())


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return make_layout(tmp_path)


def setid_files(root: Path) -> list[str]:
    """Every path under `root` (root included) whose host inode has a setuid/setgid bit."""
    found = [str(root)] if os.lstat(root).st_mode & SETID else []
    for directory, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = os.path.join(directory, name)
            if os.lstat(path).st_mode & SETID:
                found.append(path)
    return found


async def run(runner: BwrapRunner, layout: Layout, command: str) -> tuple[int, str]:
    async with started(runner, layout.spec(command)) as running:
        code, out = await finish(running)
    return code, out.decode(errors="replace")


def python(source: str, *args: str) -> str:
    """A shell command running `source` with the sandbox's python3 (the system one)."""
    return shlex.join(["/usr/bin/python3", "-c", source, *args])


COPY = "cp /bin/true t && "
# Every route a command has to a file with a setuid/setgid bit; each must fail.
SETID_ROUTES = {
    "chmod u+s": COPY + "chmod u+s t",
    "chmod 4755": COPY + "chmod 4755 t",
    "chmod 2755": COPY + "chmod 2755 t",
    "chmod g+s on a directory": "mkdir d && chmod g+s d",
    "os.chmod": COPY + python("import os; os.chmod('t', 0o4755)"),
    "os.fchmod": python("import os; fd = os.open('t', os.O_WRONLY | os.O_CREAT, 0o755); "
                        "os.fchmod(fd, 0o6755)"),
    "fchmodat": COPY + python(
        "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.fchmodat(-100, b't', 0o4755, 0): raise OSError(ctypes.get_errno(), 'fchmodat')"
    ),
    "fchmodat2": COPY + python(
        "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.syscall(452, -100, b't', 0o4755, 0):"
        " raise OSError(ctypes.get_errno(), 'fchmodat2')"
    ),
    "install -m 4755": "install -m 4755 /bin/true t",
    "install -m 2755": "install -m 2755 /bin/true t",
    "cp --preserve of a setuid file": "cp --preserve=mode /usr/bin/passwd t",
    "open O_CREAT 0o4755": python("import os; os.open('t', os.O_WRONLY | os.O_CREAT, 0o4755)"),
    "openat O_CREAT 0o2755": python(
        "import os; d = os.open('.', os.O_RDONLY)\n"
        "os.open('t', os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o2755, dir_fd=d)"
    ),
    "O_TMPFILE then linkat": python(
        "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True)\n"
        "fd = os.open('.', os.O_TMPFILE | os.O_WRONLY, 0o4755)\n"
        "if libc.linkat(fd, b'', -100, b't', 0x1000):"  # AT_EMPTY_PATH
        " raise OSError(ctypes.get_errno(), 'linkat')"
    ),
    "creat": python(
        "import ctypes; libc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.creat(b't', 0o4755) < 0: raise OSError(ctypes.get_errno(), 'creat')"
    ),
    "mknod of a setuid regular file": python(
        "import os, stat; os.mknod('t', stat.S_IFREG | 0o4755)"
    ),
}  # fmt: skip


@pytest.mark.parametrize("command", SETID_ROUTES.values(), ids=SETID_ROUTES.keys())
async def test_setid_bits_never_reach_the_host(
    runner: BwrapRunner, layout: Layout, command: str
) -> None:
    """Each route to a setuid/setgid file fails inside the sandbox and the host sees no such
    bit on anything in the workspace."""
    if "/usr/bin/passwd" in command and not os.path.exists("/usr/bin/passwd"):
        pytest.skip("no /usr/bin/passwd to copy here")
    code, out = await run(runner, layout, command)
    assert code != 0, out
    assert setid_files(layout.workspace) == []


async def test_device_nodes_cannot_be_made(runner: BwrapRunner, layout: Layout) -> None:
    """mknod of a character or block device fails and leaves nothing in the workspace (the
    dropped CAP_MKNOD refuses it too: this holds with either wall down)."""
    code, out = await run(runner, layout, "mknod c c 1 3 || mknod b b 7 0 || exit 0; exit 9")
    assert code == 0, out
    assert list(layout.workspace.iterdir()) == []


# A probe run inside the sandbox: tries one syscall, prints {"errno": N} (0: it worked).
# Numbers are per architecture for the syscalls libc has no wrapper for.
PROBE = r"""
import ctypes, fcntl, json, mmap, os, platform, socket, sys, termios, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {
    "x86_64": dict(add_key=248, keyctl=250, request_key=249, bpf=321, userfaultfd=323,
                   perf_event_open=298, io_uring_setup=425, clone3=435, openat2=437),
    "aarch64": dict(add_key=217, keyctl=219, request_key=218, bpf=280, userfaultfd=282,
                    perf_event_open=241, io_uring_setup=425, clone3=435, openat2=437),
}[platform.machine()]

def check(result):
    return ctypes.get_errno() if result == -1 else 0

def raw(name, *args):
    return check(libc.syscall(NR[name], *args))

def ptrace():
    child = os.fork()
    if child == 0:
        time.sleep(10)
        os._exit(0)
    try:
        return check(libc.ptrace(16, child, None, None))  # PTRACE_ATTACH
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)

def process_vm_readv():
    buf = ctypes.create_string_buffer(8)
    iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
    return check(libc.process_vm_readv(os.getppid(), iov, 1, iov, 1, 0))

def tiocsti():
    master, slave = os.openpty()
    child = os.fork()
    if child == 0:
        os.setsid()
        fd = os.open(os.ttyname(slave), os.O_RDWR)  # becomes the controlling terminal
        try:
            fcntl.ioctl(fd, termios.TIOCSTI, b"x")
            os._exit(0)
        except OSError as exc:
            os._exit(exc.errno)
    return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])

def vsock():
    try:
        socket.socket(40, socket.SOCK_STREAM).close()  # AF_VSOCK
        return 0
    except OSError as exc:
        return exc.errno

def io_uring():
    params = ctypes.create_string_buffer(120)
    return raw("io_uring_setup", 1, params)

def perf_event_open():
    attr = ctypes.create_string_buffer(128)
    ctypes.c_uint32.from_buffer(attr, 0).value = 1  # PERF_TYPE_SOFTWARE, config 0: CPU clock
    ctypes.c_uint32.from_buffer(attr, 4).value = 128  # size
    ctypes.c_uint64.from_buffer(attr, 40).value = 1 << 5 | 1 << 6  # exclude kernel, hv
    return raw("perf_event_open", attr, 0, -1, -1, 0)

def bpf():
    # BPF_PROG_LOAD of a socket filter that returns 0: allowed unprivileged where
    # kernel.unprivileged_bpf_disabled is 0; BPF_OBJ_GET_INFO_BY_FD on a bad fd otherwise.
    insns = (ctypes.c_uint64 * 2)(0xB7, 0x95)  # r0 = 0; exit
    license = ctypes.create_string_buffer(b"GPL")
    attr = ctypes.create_string_buffer(128)
    ctypes.c_uint32.from_buffer(attr, 0).value = 1  # BPF_PROG_TYPE_SOCKET_FILTER
    ctypes.c_uint32.from_buffer(attr, 4).value = 2
    ctypes.c_uint64.from_buffer(attr, 8).value = ctypes.addressof(insns)
    ctypes.c_uint64.from_buffer(attr, 16).value = ctypes.addressof(license)
    loaded = raw("bpf", 5, attr, 128)  # BPF_PROG_LOAD
    if loaded != errno_EPERM:
        return loaded
    info = ctypes.create_string_buffer(16)
    ctypes.c_uint32.from_buffer(info, 0).value = 0x7FFFFFFF  # no such fd: EBADF unfiltered
    return raw("bpf", 15, info, 16)  # BPF_OBJ_GET_INFO_BY_FD

errno_EPERM = 1
ATTEMPTS = {
    "ptrace": ptrace,
    "process_vm_readv": process_vm_readv,
    "add_key": lambda: raw("add_key", b"user", b"callgate", b"x", 1, -2),  # process keyring
    "keyctl": lambda: raw("keyctl", 0, -3, 0),  # KEYCTL_GET_KEYRING_ID, session keyring
    "request_key": lambda: raw("request_key", b"user", b"callgate", None, 0),
    "bpf": bpf,
    "perf_event_open": perf_event_open,
    "userfaultfd": lambda: raw("userfaultfd", 1),  # UFFD_USER_MODE_ONLY: no privilege needed
    "io_uring_setup": io_uring,
    "TIOCSTI": tiocsti,
    "unshare CLONE_NEWUSER": lambda: check(libc.unshare(0x10000000)),
    "personality ADDR_NO_RANDOMIZE": lambda: check(libc.personality(0x0040000)),
    "socket AF_VSOCK": vsock,
    "clone3": lambda: raw("clone3", None, 88),
    "openat2": lambda: raw("openat2", -100, b".", None, 24),
}
print(json.dumps({"errno": ATTEMPTS[sys.argv[1]]()}))
"""

REFUSED = (
    "ptrace",
    "process_vm_readv",
    "add_key",
    "keyctl",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "TIOCSTI",
    "unshare CLONE_NEWUSER",
    "personality ADDR_NO_RANDOMIZE",
    "socket AF_VSOCK",
)


async def probe(runner: BwrapRunner, layout: Layout, attempt: str) -> int:
    code, out = await run(runner, layout, python(PROBE, attempt))
    assert code == 0, out
    result: int = json.loads(out)["errno"]
    return result


@pytest.mark.parametrize("attempt", REFUSED)
async def test_syscalls_a_command_never_needs_are_refused(
    runner: BwrapRunner, layout: Layout, attempt: str
) -> None:
    """Tracing other processes, the keyring, bpf, perf, userfaultfd, io_uring, terminal
    injection, user namespaces, personality flags and VM sockets all answer EPERM."""
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("the probe knows syscall numbers for x86_64 and aarch64 only")
    assert await probe(runner, layout, attempt) == errno.EPERM


@pytest.mark.parametrize("attempt", ["clone3", "openat2"])
async def test_syscalls_with_unreadable_arguments_answer_enosys(
    runner: BwrapRunner, layout: Layout, attempt: str
) -> None:
    """clone3 and openat2 (flags and mode behind a pointer) look absent, so callers fall back
    to clone and openat, which the filter can read."""
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("the probe knows syscall numbers for x86_64 and aarch64 only")
    assert await probe(runner, layout, attempt) == errno.ENOSYS


SHELL_TOOLS = {
    "unshare -U": "unshare -U true",
    "strace": "strace -o /dev/null true",
    "gdb": "gdb -batch -ex run /bin/true",
}


@pytest.mark.parametrize("command", SHELL_TOOLS.values(), ids=SHELL_TOOLS.keys())
async def test_namespace_and_tracing_tools_fail(
    runner: BwrapRunner, layout: Layout, command: str
) -> None:
    """`unshare` cannot make a user namespace and `strace`/`gdb` cannot trace (where
    installed: the tool itself must exist for the attempt to mean anything)."""
    tool = command.split(maxsplit=1)[0]
    if not any(os.access(f"{d}/{tool}", os.X_OK) for d in ("/usr/bin", "/bin")):
        pytest.skip(f"{tool} is not installed")
    code, out = await run(runner, layout, f"{command} && echo TRACED-OR-UNSHARED")
    assert "TRACED-OR-UNSHARED" not in out
    assert code != 0


# mov eax, 20 (getpid in the i386 table); int 0x80; ret
INT80_GETPID = "b814000000cd80c3"


async def test_a_32bit_syscall_ends_the_command(runner: BwrapRunner, layout: Layout) -> None:
    """A syscall through the i386 entry (int 0x80) from a 64-bit program, which would reach
    the i386 syscall table past every rule, kills the process instead."""
    if platform.machine() != "x86_64":
        pytest.skip("int 0x80 is the x86_64 kernel's i386 entry")
    source = (
        "import ctypes, mmap, sys\n"
        "code = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
        f"code.write(bytes.fromhex({INT80_GETPID!r}))\n"
        "address = ctypes.addressof(ctypes.c_char.from_buffer(code))\n"
        "print('i386' + '-answered', ctypes.CFUNCTYPE(ctypes.c_int)(address)(), flush=True)\n"
    )
    code, out = await run(runner, layout, python(source))
    assert "i386-answered" not in out
    assert code == 128 + signal.SIGSYS  # the kernel's kill for a syscall of a filtered ABI


ORDINARY = (
    "cp /bin/true t && chmod 755 t && chmod +x t && ./t && chmod 1777 . && chmod 755 . && "
    "mkdir -p d/e && mkdir -m 700 f && mkfifo p && ln -s t l && cp -a t u && "
    "install -m 755 /bin/true v && (sleep 0 & wait) && "
    + python(
        "import os, subprocess, threading\n"
        "thread = threading.Thread(target=int); thread.start(); thread.join()\n"
        "subprocess.run(['true'], check=True)\n"
        "os.close(os.open('w', os.O_CREAT | os.O_WRONLY, 0o755))"
    )
    + " && echo ordinary-ok"
)


async def test_ordinary_file_and_process_work_is_untouched(
    runner: BwrapRunner, layout: Layout
) -> None:
    """Modes without setid bits, FIFOs, symlinks, threads, subprocesses and the sticky bit
    still work under the filter."""
    code, out = await run(runner, layout, ORDINARY)
    assert (code, out) == (0, "ordinary-ok\n")


ALLOW_CP_AND_CHMOD = [
    {"effect": "allow", "kind": "command.execute", "match": "Bash(cp:*)"},
    {"effect": "allow", "kind": "command.execute", "match": "Bash(chmod:*)"},
]


async def test_the_server_confines_the_agents_commands_with_the_filter(tmp_path: Path) -> None:
    """From the agent's seat (agent token, commands policy allows): `chmod 4755` on a file it
    wrote fails, the host sees no setuid bit, and health reports the filter on."""
    async with serve(tmp_path, sandbox="bwrap", rules=ALLOW_CP_AND_CHMOD) as harness:
        stub = harness.stub()
        session = await open_session(stub)
        command = "cp /bin/true tool && chmod 4755 tool"
        call = await prepare(stub, session, "Bash", {"command": command}, evaluate=True)
        assert call.state == tool_call_pb2.STATE_APPROVED, call.denial.description
        with anyio.fail_after(60):
            response = await invoke(stub, session, call.execution_id)
        async with grpc.aio.insecure_channel(harness.tcp_target) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
            await check
            trailers = dict(await check.trailing_metadata() or ())
    assert response.result.exit_code != 0
    assert (harness.workspace / "tool").exists()
    assert setid_files(harness.workspace) == []
    assert trailers["callgate-sandbox-seccomp"] == "on"
