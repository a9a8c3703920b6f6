"""The seccomp filter every sandboxed command runs under: no privilege leaves the sandbox, and
syscalls a confined command never needs are refused (design section 6).

Built once per server with libseccomp (through `pyseccomp`, its ctypes bindings), compiled to
a classic BPF program, and handed to bubblewrap as `--seccomp FD` on every spawn; bubblewrap
loads it just before it executes the command (no_new_privs is already set), so bubblewrap's
own setup is not filtered and the command and everything it starts are.

Why a filter at all: a sandboxed command runs as the server's uid (root here, with every
capability dropped) and owns what it creates. Without CAP_FSETID an owner may still set the
setuid and setgid bits of its own files; the sandbox's view of the workspace is nosuid, the
host's mount is not, so a `chmod 4755` left a setuid-root binary for any local user.

Shape: default ALLOW (an allow-list breaks arbitrary programs), EPERM for what is listed
below, ENOSYS for the two syscalls whose arguments seccomp cannot read (so libc and careful
programs fall back to the inspectable older call). Syscalls of any other ABI than the native
one (i386 `int 0x80` and x32 on x86_64, arm32 on aarch64) kill the process: nothing we run is
32-bit, and one ABI is half the rules to review; a second ABI's numbers would otherwise skip
every rule. Argument checks read only the bits the kernel reads, so garbage in the upper half
of a register neither hides a blocked call nor (for modes) widens the match.

What is refused, by group (compared with Docker's default profile, moby/profiles
seccomp/default.json, and Codex's linux-sandbox, codex-rs/linux-sandbox/src/seccomp.rs):

- setuid/setgid bits (the reason for this module; neither Docker nor Codex has it: Docker
  relies on nosuid-free images and user namespaces, Codex on Landlock without a root server):
  chmod, fchmod, fchmodat, fchmodat2 with S_ISUID or S_ISGID in the mode; open, openat with
  O_CREAT or O_TMPFILE and either bit in the mode; creat with either bit; mknod, mknodat with
  either bit (mknod makes regular files too). Directories: mkdir ignores both bits (a new
  directory only inherits S_ISGID from its parent), so mkdir is left alone; `chmod g+s` on a
  directory is refused like any chmod with S_ISGID (seccomp cannot tell a directory from a
  file), which breaks only git's core.sharedRepository and `install -d -m 2775`.
  openat2 takes its mode inside a struct seccomp cannot read: ENOSYS (glibc never uses it;
  programs that do fall back to openat on kernels before 5.6).
- device nodes: mknod, mknodat of S_IFCHR or S_IFBLK (CAP_MKNOD is dropped already; this
  holds even if a capability ever came back). FIFOs and sockets stay allowed.
- io_uring_setup, io_uring_enter, io_uring_register: io_uring opens files (with any mode)
  and sockets without the open/socket syscalls, so no rule above would see them (Docker and
  Codex both refuse io_uring).
- other processes: ptrace (all of it: gdb and strace do not work in a sandbox),
  process_vm_readv, process_vm_writev, kcmp, pidfd_getfd, process_madvise, migrate_pages,
  move_pages (Docker allows the first two groups from kernel 4.8 and relies on its user
  namespace; Codex refuses ptrace and process_vm_*).
- the kernel keyring: add_key, request_key, keyctl. Keyrings are per uid, not per namespace:
  a root command would reach the host root's user keyring (Docker refuses them too).
- kernel attack surface a command never needs: bpf, perf_event_open, userfaultfd,
  fanotify_init, syslog (Docker: only with CAP_SYS_ADMIN/CAP_BPF/CAP_PERFMON/CAP_SYSLOG).
- terminal injection: ioctl TIOCSTI (push input into a terminal) and TIOCLINUX (the
  virtual console's paste buffer), on the low 32 bits of the request as the kernel reads it
  (a request with high bits set once bypassed Flatpak's filter, CVE-2019-10063).
  `--new-session` already keeps the server's terminal out of reach; this covers any terminal.
- new namespaces: unshare with any CLONE_NEW* flag, clone with any of them (as Docker);
  a user namespace would give the command every capability inside it and the kernel's
  namespace-gated code as attack surface. clone3 passes its flags in a struct: ENOSYS, so
  glibc falls back to clone (Docker does the same). setns: refused.
- mounts: mount, umount2, pivot_root, move_mount, open_tree, open_tree_attr, fsopen, fsmount,
  fsconfig, fspick, mount_setattr, chroot (all need CAP_SYS_ADMIN/CAP_SYS_CHROOT already).
- host administration (all need a capability the command does not have; refused so that a
  capability leak is not enough): kexec_load, kexec_file_load, init_module, finit_module,
  delete_module, swapon, swapoff, reboot, settimeofday, clock_settime, adjtimex,
  clock_adjtime, acct, quotactl, quotactl_fd, lookup_dcookie, name_to_handle_at,
  open_by_handle_at (the "shocker" container escape), iopl, ioperm, vhangup, sethostname,
  setdomainname, and the obsolete _sysctl, sysfs, ustat, uselib, nfsservctl. adjtimex and
  clock_adjtime are refused whole (Docker allows the read-only query; nothing here needs it).
- VM sockets: socket and socketpair with AF_VSOCK reach the hypervisor's host, and
  `--unshare-net` does not cover them (Docker and Codex refuse AF_VSOCK).
- personality: only PER_LINUX (0), PER_LINUX32 (8), UNAME26 and their combination, as Docker;
  everything else (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO, ...) weakens the
  process's own exploit mitigations. Unlike Docker the query value 0xffffffff is refused too
  (libseccomp cannot express "any other bit, unless all of them"); `setarch` fails.

Left allowed on purpose: NUMA policy of the process itself (mbind, set_mempolicy,
get_mempolicy: numeric libraries use them; Docker refuses them), landlock_* (a command may
confine itself further), seccomp (only adds filters), memfd_secret. File capabilities
(setxattr security.capability) need CAP_SETFCAP, which `--cap-drop ALL` removes; seccomp
cannot read the attribute's name.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final


class SeccompUnavailable(Exception):
    """The filter could not be built here (libseccomp missing or too old); the message says
    which and is safe to log."""


# Flag and mode values: identical on x86_64 and aarch64 (asm-generic).
O_CREAT: Final = 0o100
O_TMPFILE: Final = 0o20000000  # __O_TMPFILE alone: O_TMPFILE also sets O_DIRECTORY
SETID_BITS: Final = (stat.S_ISUID, stat.S_ISGID)
S_IFMT: Final = 0o170000  # stat.S_IFMT is a function in Python
DEVICE_TYPES: Final = (stat.S_IFCHR, stat.S_IFBLK)
TIOCSTI: Final = 0x5412
TIOCLINUX: Final = 0x541C
AF_VSOCK: Final = 40
# clone's low byte is the exit signal, so CLONE_NEWTIME (0x80) only counts for unshare.
CLONE_NAMESPACES: Final = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
CLONE_NEWTIME: Final = 0x00000080
# personality bits allowed: PER_LINUX32 (8) and UNAME26 (0x20000); the kernel reads 32 bits.
PERSONA_ALLOWED_BITS: Final = 0x00020008
LOW32: Final = 0xFFFFFFFF

# Refused whatever the arguments (see the module docstring for each group).
DENIED: Final[tuple[str, ...]] = (
    # io_uring: opens files and sockets past every rule here
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    # other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "process_madvise", "migrate_pages", "move_pages",
    # the kernel keyring (per uid, shared with the host's root)
    "add_key", "request_key", "keyctl",
    # kernel attack surface
    "bpf", "perf_event_open", "userfaultfd", "fanotify_init", "syslog",
    # namespaces
    "setns",
    # mounts
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsmount",
    "fsconfig", "fspick", "mount_setattr", "chroot",
    # host administration
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "swapon", "swapoff", "reboot", "settimeofday", "clock_settime", "adjtimex",
    "clock_adjtime", "acct", "quotactl", "quotactl_fd", "lookup_dcookie",
    "name_to_handle_at", "open_by_handle_at", "iopl", "ioperm", "vhangup", "sethostname",
    "setdomainname", "_sysctl", "sysfs", "ustat", "uselib", "nfsservctl",
)  # fmt: skip
# Arguments behind a pointer: ENOSYS, so callers fall back to the inspectable syscall.
UNINSPECTABLE: Final = ("openat2", "clone3")
# Syscalls newer than some libseccomp releases know, by their number (the same on every
# architecture since 5.1's unified numbering).
NUMBERS: Final = {"fchmodat2": 452, "open_tree_attr": 467}
# Refused for a mode argument with a setuid/setgid bit: syscall -> index of the mode.
MODE_ARGUMENT: Final = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "creat": 1}
# Refused with O_CREAT or O_TMPFILE and a setuid/setgid bit: syscall -> (flags, mode) index.
OPEN_ARGUMENTS: Final = {"open": (1, 2), "openat": (2, 3)}
# mknod: setid bits or a device type: syscall -> index of the mode.
MKNOD_MODE: Final = {"mknod": 1, "mknodat": 2}


@dataclass(frozen=True, slots=True)
class SeccompProgram:
    """The compiled filter (a classic BPF program, as `seccomp_export_bpf` writes it)."""

    bpf: bytes

    def open_fd(self) -> int:
        """A fresh fd holding the program, for one bubblewrap (which reads it to its end):
        the read end of a pipe whose write end is already closed. Close-on-exec; the caller
        passes it with pass_fds and closes it once the child has it.

        A pipe rather than a memfd: one syscall fewer to set up, measured the same. The
        program is at most 4096 instructions (32 KiB, the kernel's limit) and in practice a
        few hundred bytes, so the write never blocks even in a one-page pipe."""
        read, write = os.pipe2(os.O_CLOEXEC)
        try:
            os.write(write, self.bpf)
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        return read


def build_program() -> SeccompProgram:
    """Build and compile the filter for this machine's architecture (see the module
    docstring). Raises SeccompUnavailable when libseccomp cannot be loaded or lacks a
    syscall the filter needs."""
    try:
        # Loads libc and libseccomp through ctypes on import: only when a filter is built.
        import pyseccomp
    except (ImportError, RuntimeError, OSError) as exc:
        raise SeccompUnavailable(f"libseccomp could not be loaded ({exc})") from None
    try:
        bpf = _compile(pyseccomp)
    except (OSError, ValueError) as exc:
        raise SeccompUnavailable(f"the seccomp filter could not be built ({exc})") from None
    return SeccompProgram(bpf)


def _compile(sc: Any) -> bytes:  # pyseccomp is untyped; used only here
    filt = sc.SyscallFilter(sc.ALLOW)
    # Any other ABI (i386 int 0x80, x32, arm32) ends the process: see the module docstring.
    filt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    eperm = sc.ERRNO(errno.EPERM)

    def number(name: str) -> int:
        found = int(sc.resolve_syscall(sc.Arch.NATIVE, name))
        if found == -1:  # __NR_SCMP_ERROR: unknown to this libseccomp
            if name not in NUMBERS:
                raise ValueError(f"libseccomp does not know the syscall {name}")
            return NUMBERS[name]
        # Negative pseudo-numbers name syscalls this architecture lacks (open, chmod, creat
        # and mknod on aarch64, where the *at forms are the only ones).
        return found

    def refuse(name: str, *conditions: Any, action: int = eperm) -> None:
        found = number(name)
        if found >= 0:  # a negative pseudo-number: not a syscall of this architecture
            filt.add_rule(action, found, *conditions)

    def bit(index: int, mask: int) -> Any:
        return sc.Arg(index, sc.MASKED_EQ, mask, mask)

    for name in DENIED:
        refuse(name)
    for name in UNINSPECTABLE:
        refuse(name, action=sc.ERRNO(errno.ENOSYS))
    for name, mode in MODE_ARGUMENT.items():
        for setid in SETID_BITS:
            refuse(name, bit(mode, setid))
    for name, (flags, mode) in OPEN_ARGUMENTS.items():
        for creating in (O_CREAT, O_TMPFILE):
            for setid in SETID_BITS:
                refuse(name, bit(flags, creating), bit(mode, setid))
    for name, mode in MKNOD_MODE.items():
        for setid in SETID_BITS:
            refuse(name, bit(mode, setid))
        for device in DEVICE_TYPES:
            refuse(name, sc.Arg(mode, sc.MASKED_EQ, S_IFMT, device))
    for request in (TIOCSTI, TIOCLINUX):
        refuse("ioctl", sc.Arg(1, sc.MASKED_EQ, LOW32, request))
    for name in ("socket", "socketpair"):
        refuse(name, sc.Arg(0, sc.MASKED_EQ, LOW32, AF_VSOCK))
    for flag in CLONE_NAMESPACES:
        # clone's flags are its first argument on x86_64 and aarch64 (s390 differs).
        refuse("clone", bit(0, flag))
    for flag in (*CLONE_NAMESPACES, CLONE_NEWTIME):
        refuse("unshare", bit(0, flag))
    for persona_bit in _bits(LOW32 & ~PERSONA_ALLOWED_BITS):
        refuse("personality", bit(0, persona_bit))
    return _export(filt)


def _bits(mask: int) -> Sequence[int]:
    return [1 << i for i in range(mask.bit_length()) if mask >> i & 1]


def _export(filt: Any) -> bytes:
    fd = os.memfd_create("callgate-seccomp", os.MFD_CLOEXEC)
    try:
        with os.fdopen(os.dup(fd), "rb", closefd=True) as handle:
            filt.export_bpf(handle)
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
