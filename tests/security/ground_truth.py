"""The ground-truth check of the program table: a fixture workspace, a snapshot of everything in
it, bubblewrap runs of commands (one, or a batch in one sandbox) against a copy of it, the
read-only families over the table (`targets`), and the commands to run for each: every
read-only option alone (`single_option_commands`) and Hypothesis draws (`commands`).

The table says which options only read; this module lets a test run such commands for real and
see whether anything changed. They run only inside bubblewrap: a read-only root, the workspace
copy and an empty HOME as the only writable places, no network, no other processes, a session
of their own, callgate's command environment.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import os
import shlex
import shutil
import stat
import subprocess
import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from callgate.server.commands.matching import command_allowed, parse_family
from callgate.server.commands.programs import TABLE, Effect, Operands, Option, Program, Style, Takes
from callgate.server.tools.bash.command_spec import CommandSettings, command_env

# ---------------------------------------------------------------- the fixture workspace

NOTES = "first line\nfoo bar\nline three\na b c\nlast line\n"
FILES: Mapping[str, str] = {
    "notes.txt": NOTES,
    "a.py": "def main() -> None:\n    print('foo')\n\n\nmain()\n",
    "data.csv": "name,count\na,1\nb,2\nc,3\n",
    "x": "x\n",
    "sub/b.txt": "b line\nfoo\n",
    "sub/deeper/c.md": "# c\n\nfoo line\n",
    ".gitignore": "*.log\n",
    "build.log": "ignored\n",
    "data.json": '{"a": 1, "b": [1, 2], "c": {"d": "foo"}}\n',
    "change.patch": "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-x\n+y\n",
}
"""Text files of the fixture workspace (`x` is there for options whose example value is `x`)."""

_GIT_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/nonexistent",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Fixture",
    "GIT_AUTHOR_EMAIL": "fixture@example.invalid",
    "GIT_COMMITTER_NAME": "Fixture",
    "GIT_COMMITTER_EMAIL": "fixture@example.invalid",
    "LANG": "C",
}


def _git(root: Path, *args: str, date: str = "2024-01-01T12:00:00Z") -> None:
    """One of the fixture's own fixed git commands (init, add, commit, tag, branch)."""
    env = dict(_GIT_ENV, GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    git = shutil.which("git")
    assert git is not None, "the fixture workspace needs git"
    subprocess.run(
        [git, "-c", "init.defaultBranch=main", *args],
        cwd=root,
        env=env,
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        timeout=30,
    )


def _write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def build_workspace(root: Path) -> None:
    """A workspace with something for every kind of command to read: a git repository with
    three commits, two tags (one annotated), a second branch, a stash, a remote (never
    reached), a modified and untracked files, a patch, text files, a
    subdirectory, a symlink, an ignored file, JSON, and tar, tar.gz, zip, gzip, bzip2, xz and
    lzma archives."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text in FILES.items():
        _write(root, name, text)
    _git(root, "init", "-q")
    _git(root, "add", "notes.txt", "a.py", ".gitignore")
    _git(root, "commit", "-q", "-m", "First: notes and a.py", date="2024-01-01T12:00:00Z")
    _git(root, "tag", "-a", "v0", "-m", "First release")
    _write(root, "notes.txt", NOTES + "added line\n")
    _git(root, "add", "notes.txt", "data.csv", "sub/b.txt")
    _git(root, "commit", "-q", "-m", "Second: data and sub", date="2024-01-02T12:00:00Z")
    _git(root, "tag", "v1")
    _git(root, "branch", "feature")
    _write(root, "notes.txt", NOTES + "added line\nfoo again\n")
    _git(root, "add", "notes.txt", "x")
    _git(root, "commit", "-q", "-m", "Third: foo again", date="2024-01-03T12:00:00Z")
    _write(root, "notes.txt", NOTES + "added line\nfoo again\nstashed line\n")
    _git(root, "stash", "-q", date="2024-01-04T12:00:00Z")
    _git(root, "remote", "add", "origin", "https://example.invalid/repo.git")
    _write(root, "a.py", FILES["a.py"] + "# changed, not committed\n")

    with tarfile.open(root / "archive.tar", "w") as tar:
        tar.add(root / "notes.txt", arcname="notes.txt")
        tar.add(root / "sub" / "b.txt", arcname="sub/b.txt")
    with tarfile.open(root / "archive.tar.gz", "w:gz") as tar:
        tar.add(root / "data.csv", arcname="data.csv")
    with zipfile.ZipFile(root / "archive.zip", "w") as archive:
        archive.write(root / "notes.txt", "notes.txt")
        archive.write(root / "a.py", "a.py")
    with gzip.open(root / "notes.txt.gz", "wb") as packed:
        packed.write(NOTES.encode())
    (root / "notes.txt.bz2").write_bytes(bz2.compress(NOTES.encode()))
    (root / "notes.txt.xz").write_bytes(lzma.compress(NOTES.encode()))
    (root / "notes.txt.lzma").write_bytes(lzma.compress(NOTES.encode(), lzma.FORMAT_ALONE))
    (root / "link.txt").symlink_to("notes.txt")


# ---------------------------------------------------------------- snapshots

Entry = tuple[str, int, int, int, int, str]
"""One path of a snapshot: kind, inode, mode, size, mtime_ns, and the content's SHA-256 (a
file) or the link target (a symlink). The inode sees a file replaced by another (`sed -i`
renames a new file over the old one)."""


def snapshot(root: Path, *, include_root: bool = True) -> dict[str, Entry]:
    """Every path under `root` (symlinks not followed), with its kind, mode, size, mtime and
    content; `root` itself as "." when `include_root`."""
    found: dict[str, Entry] = {}
    if include_root:
        found["."] = _entry(str(root), os.lstat(root))

    def walk(directory: str, prefix: str) -> None:
        with os.scandir(directory) as items:
            for item in items:
                info = item.stat(follow_symlinks=False)
                name = prefix + item.name
                found[name] = _entry(item.path, info)
                if stat.S_ISDIR(info.st_mode):
                    walk(item.path, name + "/")

    walk(str(root), "")
    return found


def _entry(path: str, info: os.stat_result) -> Entry:
    mode = info.st_mode
    if stat.S_ISDIR(mode):
        kind, content = "directory", ""
    elif stat.S_ISLNK(mode):
        kind, content = "symlink", os.readlink(path)
    elif stat.S_ISREG(mode):
        with open(path, "rb") as handle:
            kind, content = "file", hashlib.sha256(handle.read()).hexdigest()
    else:
        kind, content = "other", ""
    return (kind, info.st_ino, mode, info.st_size, info.st_mtime_ns, content)


_FIELDS = ("kind", "inode", "mode", "size", "mtime", "content")


def differences(before: Mapping[str, Entry], after: Mapping[str, Entry]) -> list[str]:
    """What changed between two snapshots, one line per path; a directory whose only change
    is its mtime had a file created and removed again in it (a lock or temporary file)."""
    lines: list[str] = []
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if old is None:
            lines.append(f"created {name}")
        elif new is None:
            lines.append(f"removed {name}")
        elif old != new:
            changed = [field for field, a, b in zip(_FIELDS, old, new, strict=True) if a != b]
            if old[0] == "directory" and changed == ["mtime"]:
                changed = ["mtime: a file was created or removed in it"]
            lines.append(f"changed {name} ({', '.join(changed)})")
    return lines


def staged_entries(index: Path) -> list[tuple[bytes, bytes, int, bytes]] | None:
    """The entries of a git index (version 2 or 3): mode, object id, flags and path of each,
    without the stat data git caches beside them; None when it cannot be read.

    gitformat-index(5), "Index entry": ctime, mtime, dev, ino (the stat cache), then mode,
    uid, gid, size, the object id, 16 bits of flags and the NUL-terminated path, padded with
    NULs to a multiple of 8 bytes."""
    try:
        data = index.read_bytes()
    except OSError:
        return None
    if len(data) < 12 or data[:4] != b"DIRC" or data[4:8] not in (b"\0\0\0\2", b"\0\0\0\3"):
        return None
    count = int.from_bytes(data[8:12], "big")
    entries: list[tuple[bytes, bytes, int, bytes]] = []
    offset = 12
    for _ in range(count):
        start = offset
        mode = data[offset + 24 : offset + 28]
        oid = data[offset + 40 : offset + 60]
        flags = int.from_bytes(data[offset + 60 : offset + 62], "big")
        offset += 62
        if flags & 0x4000:  # extended flags (version 3)
            offset += 2
        end = data.find(b"\0", offset)
        if end < 0:
            return None
        entries.append((mode, oid, flags, data[offset:end]))
        offset = start + (end - start + 8) // 8 * 8
    return entries


# ---------------------------------------------------------------- running confined

TIMEOUT = 2.5
"""Seconds a command may run; one still running then is killed and checked all the same (a
timeout is not a failure: `tail -f` never ends)."""
SHORT_TIMEOUT = 0.3
"""The timeout once a workspace has already waited `TIMEOUT` for commands that did not end, so
an option that follows files forever costs tenths of a second per drawn command, not seconds."""
WORKDIR = "/tmp/work"
"""Where the workspace copy is inside the sandbox (under the sandbox's own /tmp, so the mount
point exists on any machine)."""
HOME = "/tmp/home"


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one confined run ended: its exit status (None when killed at the timeout) and the
    start of what it wrote to stderr."""

    exit_code: int | None
    stderr: str

    def __str__(self) -> str:
        ended = "timed out" if self.exit_code is None else f"exit {self.exit_code}"
        return f"{ended}; stderr: {self.stderr[:300]!r}"


def sandbox_env() -> dict[str, str]:
    """The environment callgate gives every command (`command_env`), exactly."""
    return command_env(HOME, "/tmp", CommandSettings(env_passthrough={}))


BASH_BUILTINS = frozenset(
    {"command", "type", "echo", "printf", "test", "[", "pwd", "true", "false", "hash", "help"}
)
"""bash builtins a table may list: they run without an executable on PATH."""


def executable(program: str) -> str | None:
    """Where the sandbox finds `program` (on callgate's PATH; "builtin" for a bash builtin),
    or None."""
    if program in BASH_BUILTINS:
        return "builtin"
    return shutil.which(program, path=sandbox_env()["PATH"])


def starts_slowly(program: str) -> bool:
    """A Python or Node script (pip, npm): tenths of a second before it does anything, so its
    commands get `SLOW_PER_COMMAND` and its tests are marked slow."""
    path = executable(program)
    if path is None or program in BASH_BUILTINS:
        return False
    try:
        with open(path, "rb") as handle:
            first = handle.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and (b"python" in first or b"node" in first)


BATCH = 25
"""Commands run in one sandbox by `changes_of_each`."""
PER_COMMAND = 0.3
"""Seconds each command of a batch may run (`tail -f` is killed then, and checked)."""
SLOW_PER_COMMAND = 2.0
"""The same for a program that starts slowly (`starts_slowly`): pip takes 0.2 s to start."""


class ConfinedWorkspace:
    """A copy of the fixture workspace and an empty HOME, the only writable places of the
    bubblewrap runs made in it; `changes()` says what the runs changed since the copy was made
    (or restored)."""

    def __init__(self, bwrap: str, pristine: Path, base: Path) -> None:
        self.bwrap = bwrap
        self.pristine = pristine
        self.work = base / "work"
        self.home = base / "home"
        self.waited = 0.0
        self.restore()

    def restore(self) -> None:
        """A fresh copy of the pristine workspace and an empty HOME."""
        for directory in (self.work, self.home):
            if directory.exists():
                shutil.rmtree(directory)
        shutil.copytree(self.pristine, self.work, symlinks=True)
        self.home.mkdir()
        self.before = self.snapshot()
        self.staged = staged_entries(self.work / ".git" / "index")

    def fresh(self) -> ConfinedWorkspace:
        """The workspace as the pristine copy (restored only if an earlier run changed it),
        with the whole `TIMEOUT` to wait again."""
        if self.changes():
            self.restore()
        self.waited = 0.0
        return self

    def snapshot(self) -> dict[str, Entry]:
        found = snapshot(self.work)
        found.update({f"HOME/{k}": v for k, v in snapshot(self.home, include_root=False).items()})
        return found

    def changes(self) -> list[str]:
        """What changed since the copy was made, one line per path (see `differences`); a
        rewritten git index says whether its staged entries changed too."""
        lines = differences(self.before, self.snapshot())
        refreshed = [line for line in lines if line.startswith("changed .git/index (")]
        if refreshed and staged_entries(self.work / ".git" / "index") == self.staged:
            # Decision: git's stat refresh is not a change. `git status`, `git diff` and
            # `git describe --dirty` rewrite the index with the same staged entries, updating
            # only the file stat data git caches beside them (git 2.39 `git diff` does it even
            # with GIT_OPTIONAL_LOCKS=0); `.git` then shows the index.lock it renamed.
            stat_refresh = {
                refreshed[0],
                "changed .git (mtime: a file was created or removed in it)",
            }
            if set(lines) <= stat_refresh:
                return []
        return lines

    def _argv(self, command: str) -> list[str]:
        argv = [
            self.bwrap,
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--tmpfs", "/tmp",
            "--bind", str(self.work), WORKDIR,
            "--bind", str(self.home), HOME,
            "--chdir", WORKDIR,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
        ]  # fmt: skip
        for name, value in sandbox_env().items():
            argv += ["--setenv", name, value]
        return [*argv, "--", "bash", "-c", command]

    def run(self, command: str) -> Outcome:
        """Run `command` with bash inside bubblewrap in the workspace copy, for `TIMEOUT`
        seconds (`SHORT_TIMEOUT` once this workspace has waited that long)."""
        timeout = TIMEOUT if self.waited < TIMEOUT else SHORT_TIMEOUT
        try:
            done = subprocess.run(
                self._argv(command),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as expired:
            self.waited += timeout
            return Outcome(None, _text(expired.stderr))
        return Outcome(done.returncode, _text(done.stderr))

    def run_batch(
        self, commands: Sequence[str], per_command: float = PER_COMMAND
    ) -> list[int | None]:
        """Run commands one after the other in one sandbox, each for at most `per_command`
        seconds (coreutils `timeout`); their exit statuses, None for one killed at its timeout
        (or not reached). Each runs with `bash -c`, as callgate runs commands (`echo`, `test`,
        `command` are bash's builtins)."""
        script = "\n".join(
            f"timeout -s KILL {per_command} bash -c {shlex.quote(command)} </dev/null >/dev/null"
            " 2>&1; echo $?"
            for command in commands
        )
        try:
            done = subprocess.run(
                self._argv(script),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=per_command * len(commands) + TIMEOUT,
                check=False,
            )
            printed = done.stdout.decode().split()
        except subprocess.TimeoutExpired as expired:
            printed = _text(expired.stdout).split()
        statuses: list[int | None] = [None if s == "137" else int(s) for s in printed]
        return statuses + [None] * (len(commands) - len(statuses))

    def changes_of_each(
        self, commands: Sequence[str], per_command: float = PER_COMMAND
    ) -> tuple[list[str], list[int | None]]:
        """Run each command (see `run_batch`) and say which changed what, one
        line each, with the exit statuses of the batch runs.

        The commands run in batches of `BATCH`, one sandbox per batch; a batch that changed
        something is run again one command at a time, each from a fresh copy, to name the
        command (or, failing that, the batch)."""
        found: list[str] = []
        statuses: list[int | None] = []
        for start in range(0, len(commands), BATCH):
            batch = commands[start : start + BATCH]
            statuses += self.run_batch(batch, per_command)
            if not self.changes():
                continue
            self.restore()
            named = False
            for command in batch:
                outcome = self.run(command)
                changes = self.changes()
                if changes:
                    named = True
                    found.append(f"{command!r} changed {changes[:10]} ({outcome})")
                    self.restore()
            if not named:
                found.append(f"these commands together changed the workspace: {list(batch)}")
        return found, statuses


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data[:2000].decode(errors="replace")


# ---------------------------------------------------------------- what to draw


@dataclass(frozen=True, slots=True)
class Target:
    """A family the rules treat as read-only, and the entry whose options are drawn for it:
    a read-only entry (`Bash(git log:*)`), or a read-only mode switch of another entry
    (`Bash(tar -t:*)`), whose words then lead every drawn command."""

    path: tuple[str, ...]
    entry: Program
    lead: tuple[str, ...]

    @property
    def family(self) -> str:
        return f"Bash({' '.join(self.lead)}:*)"

    @property
    def label(self) -> str:
        return " ".join(self.lead)


def _walk(path: tuple[str, ...], entry: Program) -> list[tuple[tuple[str, ...], Program]]:
    found = [(path, entry)]
    for name, sub in entry.subcommands.items():
        found += _walk((*path, name), sub)
    return found


def targets(table: Mapping[str, Program] = TABLE) -> tuple[Target, ...]:
    """Every read-only family over the table: each read-only entry (subcommands included), and
    each read-only mode switch (`tar -t`) of an entry that reads files, when the family over its
    words covers the bare command."""
    seen: set[int] = set()
    found: list[Target] = []
    for _, top in sorted(table.items()):
        if id(top) in seen:
            continue
        seen.add(id(top))
        for path, entry in _walk((top.name,), top):
            if entry.read_only:
                found.append(Target(path, entry, path))
                continue
            if entry.subcommands or entry.operands not in (Operands.FILES, Operands.SCRIPT):
                continue
            for option in entry.options:
                switch = option.names[0]
                if option.mode != frozenset({Effect.READ}) or option.takes is not Takes.NOTHING:
                    continue
                lead = (*path, switch)
                if command_allowed(shlex.join(lead), (), [parse_family(_family(lead))]):
                    found.append(Target(path, entry, lead))
    return tuple(found)


def _family(words: Sequence[str]) -> str:
    return f"Bash({' '.join(words)}:*)"


def drawable(option: Option) -> bool:
    """An option the table says only reads: effect READ, no mode switch or a read-only one,
    and it does not take the rest of the command (`-exec … ;`)."""
    return (
        option.effect is Effect.READ
        and option.mode in (None, frozenset({Effect.READ}))
        and not option.until
        and not option.ends_options
    )


FILE_OPERANDS = (
    "notes.txt",
    "a.py",
    "data.csv",
    "x",
    ".",
    "sub",
    "sub/b.txt",
    "link.txt",
    "archive.tar",
    "archive.tar.gz",
    "archive.zip",
    "notes.txt.gz",
    "data.json",
)
GIT_REVISIONS = ("HEAD", "HEAD~1", "main", "feature", "v1", "HEAD~2..HEAD")
GIT_PATHS = ("notes.txt", "a.py", "sub", ".")
PATTERNS = ("foo", "line", "^a", "x")
SED_SCRIPTS = ("p", "1,2p", "=", "$!d", "s/a/b/g", "/line/p", "n;p", "l", "2q")
AWK_PROGRAMS = (
    "{ print }",
    "NR==1",
    "{ print $1 }",
    "END { print NR }",
    '/line/ { print NR ": " $0 }',
    "BEGIN { n = 0 } { n += length($0) } END { print n }",
)
FIND_STARTS = (".", "sub", "notes.txt")

LEADING_OPERANDS: Mapping[tuple[str, ...], tuple[str, ...]] = {
    ("rg",): PATTERNS,
    ("grep",): PATTERNS,
    ("egrep",): PATTERNS,
    ("fgrep",): PATTERNS,
    ("git", "grep"): PATTERNS,
}
"""A first operand that is not a file (a search pattern), by entry path."""

SCRIPTS: Mapping[str, tuple[str, ...]] = {"sed": SED_SCRIPTS, "awk": AWK_PROGRAMS}
"""Read-only scripts for programs whose first operand is a script, by entry name."""

_TWO_FILES = (("notes.txt", "sub/b.txt"), ("notes.txt", "a.py"), ("data.csv", "data.csv"))
OPERANDS: Mapping[tuple[str, ...], tuple[tuple[str, ...], ...]] = {
    ("tar",): (("-f", "archive.tar"), ("-f", "archive.tar", "notes.txt"), ("-f", "archive.tar.gz")),
    ("unzip",): (("archive.zip",), ("archive.zip", "notes.txt")),
    ("zipinfo",): (("archive.zip",),),
    ("gzip",): (("notes.txt.gz",),),
    ("gunzip",): (("notes.txt.gz",),),
    ("zcat",): (("notes.txt.gz",), ("archive.tar.gz",)),
    ("bzip2",): (("notes.txt.bz2",),),
    ("bunzip2",): (("notes.txt.bz2",),),
    ("bzcat",): (("notes.txt.bz2",),),
    ("xz",): (("notes.txt.xz",),),
    ("unxz",): (("notes.txt.xz",),),
    ("xzcat",): (("notes.txt.xz",),),
    ("lzcat",): (("notes.txt.lzma",),),
    ("jq",): ((".", "data.json"), (".a", "data.json"), ("keys", "data.json")),
    ("pip",): ((),),
    ("pip", "show"): (("pip",),),
    ("pip", "hash"): (("notes.txt",),),
    ("pip", "help"): (("list",),),
    ("pip", "config", "get"): (("global.index-url",),),
    ("git", "config"): (("user.name",), ("core.bare",), ()),
    ("git", "diff-tree"): (("HEAD",), ("HEAD~1", "HEAD")),
    ("git", "diff-index"): (("HEAD",), ("--cached", "HEAD")),
    ("git", "ls-tree"): (("HEAD",), ("HEAD", "sub")),
    ("git", "rev-list"): (("HEAD",), ("HEAD~2..HEAD",)),
    ("git", "describe"): (("HEAD",), ()),
    ("git", "cat-file"): (("-p", "HEAD"), ("blob", "HEAD:notes.txt")),
    ("git", "show-ref"): ((), ("v0",)),
    ("git", "merge-base"): (("HEAD", "feature"),),
    ("git", "count-objects"): ((),),
    ("git", "check-ignore"): (("build.log",), ("notes.txt",)),
    ("git", "check-attr"): (("diff", "notes.txt"),),
    ("git", "var"): (("GIT_AUTHOR_IDENT",),),
    ("git", "help"): (("log",),),
    ("git", "range-diff"): (("HEAD~2..HEAD~1", "HEAD~1..HEAD"),),
    ("git", "cherry"): (("feature",),),
    ("git", "archive"): (("HEAD",), ("HEAD", "sub")),
    ("git", "stash"): ((), ("stash@{0}",)),
    ("git", "worktree"): ((),),
    ("git", "remote"): (("origin",),),
    ("git", "notes"): ((),),
    ("git", "reflog"): (("HEAD",), ()),
    ("git", "reflog", "delete"): (("HEAD@{1}",),),
    ("git", "bisect"): ((),),
    ("git", "commit"): ((), ("notes.txt",)),
    ("git", "mv"): (("x", "moved.txt"),),
    ("git", "rm"): (("x",),),
    ("git", "add"): (("a.py",), (".",)),
    ("git", "apply"): (("change.patch",),),
    ("git", "prune"): ((),),
    ("git", "ls-remote"): (("origin",),),
    ("git", "format-patch"): (("-1",), ("HEAD~2..HEAD",)),
    ("sleep",): (("0",), ("0.01",)),
    ("seq",): (("3",), ("1", "2", "5")),
    ("factor",): (("12",),),
    ("expr",): (("1", "+", "1"), ("length", "abc")),
    ("printf",): (("%s\\n", "x"),),
    ("echo",): (("x",), ()),
    ("yes",): (("x",),),
    ("test",): (("-f", "notes.txt"), ("-d", "sub")),
    ("basename",): (("sub/b.txt",), ("sub/b.txt", ".txt")),
    ("dirname",): (("sub/b.txt",),),
    ("which",): (("ls",),),
    ("command",): (("ls",),),
    ("tr",): (("a", "b"),),
    ("cut",): (("-f1", "data.csv"), ("-c1-3", "notes.txt")),
    ("readlink",): (("link.txt",),),
    ("id",): ((),),
    ("nproc",): ((),),
    ("uname",): ((),),
    ("pwd",): ((),),
    ("diff",): _TWO_FILES,
    ("cmp",): _TWO_FILES,
    ("comm",): _TWO_FILES,
    ("join",): _TWO_FILES,
}
"""Operands that make sense for a program or subcommand (the longest matching entry path):
archives for archivers, a filter for jq, numbers for seq, two files for diff."""


def _specific(target: Target) -> tuple[tuple[str, ...], ...] | None:
    for end in range(len(target.path), 0, -1):
        found = OPERANDS.get(target.path[:end])
        if found is not None:
            return found
    return None


def _value(option: Option) -> str:
    return option.example if option.example else "1"


@st.composite
def _spelled(draw: st.DrawFn, option: Option, entry: Program) -> list[str]:
    """One option in one of the spellings the table reads: `--name=value`, `--name value`,
    `-xVALUE`, `-x VALUE`, `-name value` (find), `--no-name` (git)."""
    name = draw(st.sampled_from(option.names))
    long = name.startswith("--")
    short = not long and len(name) == 2
    if option.takes is Takes.NOTHING:
        negate = draw(st.integers(0, 3)) == 0
        if entry.negatable and long and not name.startswith("--no-") and negate:
            return ["--no-" + name[2:]]
        return [name]
    if option.takes is Takes.ATTACHED:
        if not option.example or not (long or short) or draw(st.booleans()):
            return [name]
        return [f"{name}={option.example}" if long else f"{name}{option.example}"]
    value = _value(option)
    if (long or short) and draw(st.booleans()):
        return [f"{name}={value}" if long else f"{name}{value}"]
    return [name, value]


def _cluster(words: list[list[str]]) -> list[list[str]]:
    """Short flags given one by one (`-a`, `-l`) joined into one word (`-al`)."""
    flags = [w[0] for w in words if len(w) == 1 and len(w[0]) == 2 and w[0][0] == "-"]
    flags = [f for f in flags if f[1] != "-"]
    if len(flags) < 2:
        return words
    rest = [w for w in words if not (len(w) == 1 and w[0] in flags)]
    return [["-" + "".join(f[1] for f in flags)], *rest]


@st.composite
def _operands(draw: st.DrawFn, target: Target, script_given: bool) -> list[str]:
    entry = target.entry
    specific = _specific(target)
    if specific is not None:
        return list(draw(st.sampled_from(specific)))
    words: list[str] = []
    leading = LEADING_OPERANDS.get(target.path)
    if leading is not None:
        words.append(draw(st.sampled_from(leading)))
    if entry.operands is Operands.SCRIPT and not script_given:
        words.append(draw(st.sampled_from(SCRIPTS.get(entry.name, SED_SCRIPTS))))
    if target.path[0] == "git":
        # Revisions before paths, as git reads them.
        words += draw(st.lists(st.sampled_from(GIT_REVISIONS), max_size=2, unique=True))
        words += draw(st.lists(st.sampled_from(GIT_PATHS), max_size=2, unique=True))
    else:
        words += draw(st.lists(st.sampled_from(FILE_OPERANDS), max_size=3, unique=True))
    return words


def _plain_operands(target: Target, script_given: bool) -> list[str]:
    """The operands of `single_option_commands`: the first of `OPERANDS` for the target, or a
    pattern for searches, a script for sed and awk, then notes.txt (a path for git), or `.`
    for find."""
    if target.entry.style is Style.FIND:
        return ["."]
    specific = _specific(target)
    if specific is not None:
        return list(specific[0])
    words: list[str] = []
    leading = LEADING_OPERANDS.get(target.path)
    if leading is not None:
        words.append(leading[0])
    if target.entry.operands is Operands.SCRIPT and not script_given:
        words.append(SCRIPTS.get(target.entry.name, SED_SCRIPTS)[0])
    return [*words, "notes.txt"]


def _plain_spelling(option: Option) -> list[str]:
    """An option under its long name where it has one (`--lines 1`, `-name x`, `--color`)."""
    name = option.name
    if option.takes is Takes.NOTHING or (option.takes is Takes.ATTACHED and not option.example):
        return [name]
    if option.takes is Takes.ATTACHED:
        return [f"{name}={option.example}" if name.startswith("--") else name + option.example]
    return [name, _value(option)]


def single_option_commands(target: Target) -> list[str]:
    """The target's bare command, and the command with each of its read-only options alone:
    every option the table says only reads runs at least once, whatever Hypothesis draws."""
    found = [shlex.join([*target.lead, *_plain_operands(target, False)])]
    lead_options = set(target.lead[len(target.path) :])
    for option in target.entry.options:
        if not drawable(option) or set(option.names) & lead_options:
            continue
        spelled = _plain_spelling(option)
        operands = _plain_operands(target, option.script)
        if target.entry.style is Style.FIND:
            found.append(shlex.join([*target.lead, *operands, *spelled]))
        else:
            found.append(shlex.join([*target.lead, *spelled, *operands]))
    return found


@st.composite
def commands(draw: st.DrawFn, target: Target) -> str:
    """A command for `target`: 0 to 4 of its read-only options in drawn spellings, placed before
    or after operands that make sense for it (files of the fixture, revisions for git, a
    pattern for searches, a read-only script for sed and awk), quoted for the shell."""
    entry = target.entry
    lead_options = target.lead[len(target.path) :]
    pool = [o for o in entry.options if drawable(o) and not set(o.names) & set(lead_options)]
    chosen = draw(st.lists(st.sampled_from(pool), max_size=4, unique_by=id)) if pool else []
    spelled = [draw(_spelled(option, entry)) for option in chosen]
    if entry.style is not Style.FIND and draw(st.booleans()):
        spelled = _cluster(spelled)
    script_given = any(option.script for option in chosen)

    if entry.style is Style.FIND:
        starts = draw(st.lists(st.sampled_from(FIND_STARTS), min_size=1, max_size=2, unique=True))
        words = [*target.lead, *starts, *(w for words in spelled for w in words)]
        return shlex.join(words)

    operands = draw(_operands(target, script_given))
    before: list[str] = []
    after: list[str] = []
    permutes = entry.style is Style.GNU and operands
    for words in spelled:
        # After the operands one time in four: GNU programs permute, git's revision parser
        # refuses some options there, and most drawn commands should run to the end.
        (after if permutes and draw(st.integers(0, 3)) == 0 else before).extend(words)
    separator = ["--"] if permutes and not after and draw(st.booleans()) else []
    return shlex.join([*target.lead, *before, *separator, *operands, *after])
