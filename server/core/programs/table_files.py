"""Table: programs that list, read, copy, move and delete files (GNU coreutils and friends).

Each entry cites the manual its options were read from. Options not listed are unknown:
a family never covers them (they need an exact rule or a human).
"""

from __future__ import annotations

from .build import DELETE, attached, flags, values
from .model import Effect, Program

LS = Program(
    "ls",
    manual="ls(1), GNU coreutils 9.1; coreutils manual §10.1 ls: List directory contents",
    options=(
        *flags(
            "-a --all",
            "-A --almost-all",
            "--author",
            "-b --escape",
            "-B --ignore-backups",
            "-c",
            "-C",
            "-d --directory",
            "-D --dired",
            "-f",
            "-F",
            "--file-type",
            "--full-time",
            "-g",
            "--group-directories-first",
            "-G --no-group",
            "-h --human-readable",
            "--si",
            "-H --dereference-command-line",
            "--dereference-command-line-symlink-to-dir",
            "-i --inode",
            "-k --kibibytes",
            "-l",
            "-L --dereference",
            "-m",
            "-n --numeric-uid-gid",
            "-N --literal",
            "-o",
            "-p",
            "-q --hide-control-chars",
            "--show-control-chars",
            "-Q --quote-name",
            "-r --reverse",
            "-R --recursive",
            "-s --size",
            "-S",
            "-t",
            "-u",
            "-U",
            "-v",
            "-x",
            "-X",
            "-Z --context",
            "-1",
            "--zero",
            "--help",
            "--version",
        ),
        *values(
            "--block-size",
            "--format",
            "--hide",
            "--indicator-style",
            "-I --ignore",
            "--quoting-style",
            "--sort",
            "--time",
            "--time-style",
            "-T --tabsize",
            "-w --width",
            example="1",
        ),
        *attached("--color --colour", "--hyperlink", "--classify"),
    ),
)

CAT = Program(
    "cat",
    manual="cat(1), GNU coreutils 9.1; coreutils manual §3.1 cat: Concatenate and write files",
    options=flags(
        "-A --show-all",
        "-b --number-nonblank",
        "-e",
        "-E --show-ends",
        "-n --number",
        "-s --squeeze-blank",
        "-t",
        "-T --show-tabs",
        "-u",
        "-v --show-nonprinting",
        "--help",
        "--version",
    ),
)

RM = Program(
    "rm",
    manual="rm(1), GNU coreutils 9.1; coreutils manual §11.5 rm: Remove files or directories",
    effects=frozenset({Effect.DELETE}),
    actions=DELETE,
    options=(
        *flags(
            "-f --force",
            "-i",
            "-I",
            "--one-file-system",
            "--no-preserve-root",
            "--preserve-root",
            "-r -R --recursive",
            "-d --dir",
            "-v --verbose",
            "--help",
            "--version",
        ),
        *attached("--interactive"),
    ),
)

UNLINK = Program(
    "unlink",
    manual="unlink(1), GNU coreutils 9.1; coreutils manual §11.6 unlink: Remove files via "
    "the unlink syscall",
    effects=frozenset({Effect.DELETE}),
    actions=DELETE,
    options=flags("--help", "--version"),
)

PROGRAMS: tuple[Program, ...] = (LS, CAT, RM, UNLINK)
