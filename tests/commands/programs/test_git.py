"""git: which commands a family covers, what candidates are offered, and what deny families
see, per subcommand (server/commands/programs/table_git.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from callgate.server.commands.matching import command_denied, parse_family
from callgate.server.commands.programs import TABLE, Effect, Program, read
from callgate.server.commands.programs.table_git import pretty_format, pull_rebase
from callgate.server.commands.shell_parse import parse_command

from .cases import FAMILY, Case, case, check

CASES = (
    # Read-only subcommands: covered by their family, which is offered.
    case("git log --oneline -5", "Bash(git log:*)", True, FAMILY),
    case(
        "git log -n5 -pz --stat=100 --since 2.weeks -L1,2:notes.txt",
        "Bash(git log:*)",
        True,
        FAMILY,
    ),
    case("git log --graph --all --decorate=short --format=%H%n%s", "Bash(git log:*)", True, FAMILY),
    case("git log --format=%%G", "Bash(git log:*)", True, FAMILY),
    case("git log -p --textconv -- src", "Bash(git log:*)", True, FAMILY),
    case("git log -U 3", "Bash(git log:*)", True, FAMILY),
    case("git show --stat HEAD", "Bash(git show:*)", True, FAMILY),
    case("git show --textconv HEAD:notes.txt", "Bash(git show:*)", True, FAMILY),
    case("git whatchanged -3", "Bash(git whatchanged:*)", True, FAMILY),
    case("git status -sb --porcelain=v2", "Bash(git status:*)", True, FAMILY),
    case("git diff --cached --stat -- notes.txt", "Bash(git diff:*)", True, FAMILY),
    case("git diff --no-index a b", "Bash(git diff:*)", True, FAMILY),
    case("git diff -M50 --word-diff=color HEAD~1", "Bash(git diff:*)", True, FAMILY),
    case("git diff-tree --no-commit-id -r HEAD", "Bash(git diff-tree:*)", True, FAMILY),
    case("git diff-files -q --name-only", "Bash(git diff-files:*)", True, FAMILY),
    case("git diff-index --cached HEAD", "Bash(git diff-index:*)", True, FAMILY),
    case("git blame -L 1,2 -w notes.txt", "Bash(git blame:*)", True, FAMILY),
    case("git annotate notes.txt", "Bash(git annotate:*)", True, FAMILY),
    case("git grep -n -3 -e foo -- src", "Bash(git grep:*)", True, FAMILY),
    case("git grep --textconv -il foo", "Bash(git grep:*)", True, FAMILY),
    case("git ls-files -z --others --exclude-standard", "Bash(git ls-files:*)", True, FAMILY),
    case("git ls-tree -r --name-only HEAD", "Bash(git ls-tree:*)", True, FAMILY),
    case("git rev-parse --abbrev-ref HEAD", "Bash(git rev-parse:*)", True, FAMILY),
    case("git rev-parse --show-toplevel --short=8 HEAD", "Bash(git rev-parse:*)", True, FAMILY),
    case("git rev-list --count HEAD", "Bash(git rev-list:*)", True, FAMILY),
    case("git describe --tags --always --dirty", "Bash(git describe:*)", True, FAMILY),
    case("git shortlog -sn", "Bash(git shortlog:*)", True, FAMILY),
    case("git cat-file -p HEAD", "Bash(git cat-file:*)", True, FAMILY),
    case("git show-ref --heads", "Bash(git show-ref:*)", True, FAMILY),
    case(
        "git for-each-ref '--format=%(refname)' refs/heads",
        "Bash(git for-each-ref:*)",
        True,
        FAMILY,
    ),
    case("git merge-base --is-ancestor a b", "Bash(git merge-base:*)", True, FAMILY),
    case("git name-rev --name-only HEAD", "Bash(git name-rev:*)", True, FAMILY),
    case("git count-objects -vH", "Bash(git count-objects:*)", True, FAMILY),
    case("git check-ignore -v x", "Bash(git check-ignore:*)", True, FAMILY),
    case("git check-attr -a notes.txt", "Bash(git check-attr:*)", True, FAMILY),
    case("git var -l", "Bash(git var:*)", True, FAMILY),
    case("git version --build-options", "Bash(git version:*)", True, FAMILY),
    case("git help log", "Bash(git help:*)", True, FAMILY),
    case("git range-diff a...b", "Bash(git range-diff:*)", True, FAMILY),
    case("git cherry -v origin/main", "Bash(git cherry:*)", True, FAMILY),
    case("git archive HEAD", "Bash(git archive:*)", True, FAMILY),
    # Read-only entries nested under subcommands that also write.
    case("git stash list", "Bash(git stash list:*)", True, FAMILY),
    case("git stash show -p stash@{0}", "Bash(git stash show:*)", True, FAMILY),
    case("git reflog show --oneline", "Bash(git reflog show:*)", True, FAMILY),
    case("git worktree list --porcelain", "Bash(git worktree list:*)", True, FAMILY),
    case("git remote get-url origin", "Bash(git remote get-url:*)", True, FAMILY),
    case("git notes list", "Bash(git notes list:*)", True, FAMILY),
    case("git submodule status --recursive", "Bash(git submodule status:*)", True, FAMILY),
    case("git submodule summary", "Bash(git submodule summary:*)", True, FAMILY),
    case("git bisect log", "Bash(git bisect log:*)", True, FAMILY),
    # An entry with subcommands is never offered, even when it only reads.
    case("git remote -v", "Bash(git remote:*)", True),
    case("git reflog -n 5", "Bash(git reflog:*)", True),
    case("git notes", "Bash(git notes:*)", True),
    # git log: options that write, run code, or that the table does not know.
    case("git log --output=x", "Bash(git log:*)", False),
    case("git log --output x", "Bash(git log:*)", False),
    case("git log HEAD --output=x", "Bash(git log:*)", False),
    case("git log -- --output=x", "Bash(git log:*)", True, FAMILY),
    case("git log --format --output=x", "Bash(git log:*)", False),
    case("git log --ext-diff", "Bash(git log:*)", False),
    case("git log --show-signature", "Bash(git log:*)", False),
    case("git log '--format=%G?'", "Bash(git log:*)", False),
    case("git log --pretty=format:%+GS", "Bash(git log:*)", False),
    case("git log --frobnicate", "Bash(git log:*)", False),
    case("git log --outp=x", "Bash(git log:*)", False),
    case("git show --output=x HEAD", "Bash(git show:*)", False),
    case("git diff --output=x", "Bash(git diff:*)", False),
    case("git diff --ext-diff", "Bash(git diff:*)", False),
    case("git stash show --output=x", "Bash(git stash show:*)", False),
    case("git stash list --ext-diff", "Bash(git stash list:*)", False),
    case("git rev-list --output=x HEAD", "Bash(git rev-list:*)", False),
    # Global options: the leading words are no longer the family's.
    case("git -c core.pager=x log", "Bash(git log:*)", False),
    case("git -C d log", "Bash(git log:*)", False),
    case("git --git-dir=x log", "Bash(git log:*)", False),
    case("git -c core.pager=x log", "Bash(git:*)", True),
    # grep and help run programs with -O and -w/-i.
    case("git grep -O foo", "Bash(git grep:*)", False),
    case("git grep --open-files-in-pager=vi x", "Bash(git grep:*)", False),
    case("git grep -hO foo", "Bash(git grep:*)", False),
    case("git help -w log", "Bash(git help:*)", False),
    case("git help --info log", "Bash(git help:*)", False),
    # archive: -o writes, --remote reaches the network, --exec runs a program.
    case("git archive -o x.tar HEAD", "Bash(git archive:*)", False),
    case("git archive --remote=origin HEAD", "Bash(git archive:*)", False),
    case("git archive --exec=./x --remote=. HEAD", "Bash(git archive:*)", False),
    # branch and tag: listing reads, an operand creates, -d/-D delete.
    case("git branch -a -vv", "Bash(git branch:*)", True),
    case("git branch --merged main", "Bash(git branch:*)", True),
    case("git branch newname", "Bash(git branch:*)", False),
    case("git branch -D x", "Bash(git branch:*)", False),
    case("git branch -m a b", "Bash(git branch:*)", False),
    case("git branch -m a b", "Bash(git branch -m:*)", True),
    case("git branch --edit-description", "Bash(git branch:*)", False),
    case("git tag -l", "Bash(git tag:*)", True),
    case("git tag v1", "Bash(git tag:*)", False),
    case("git tag -d x", "Bash(git tag:*)", False),
    case("git tag -v v1", "Bash(git tag:*)", False),
    # config: writes unless a --get*/--list mode; a mode's negation writes again.
    case("git config --get user.name", "Bash(git config --get:*)", True),
    case("git config --get user.name", "Bash(git config:*)", True),
    case("git config -l --show-origin", "Bash(git config -l:*)", True),
    case("git config core.pager x", "Bash(git config --get:*)", False),
    case("git config --get --no-get core.pager x", "Bash(git config --get:*)", False),
    case("git config --get --unset core.pager", "Bash(git config --get:*)", False),
    case("git config -e", "Bash(git config:*)", False),
    # stash: bare `git stash` pushes; drop and clear delete; -p opens the editor.
    case("git stash", "Bash(git stash:*)", True),
    case("git stash -m drop", "Bash(git stash:*)", True),
    case("git stash drop", "Bash(git stash:*)", False),
    case("git stash -p", "Bash(git stash:*)", False),
    # remote: listing reads; add and set-url write; show asks the remote unless -n.
    case("git remote add x y", "Bash(git remote:*)", False),
    case("git remote set-url origin y", "Bash(git remote:*)", False),
    case("git remote show origin", "Bash(git remote:*)", False),
    case("git remote show -n origin", "Bash(git remote:*)", True),
    case("git remote update", "Bash(git remote:*)", False),
    # reflog: show reads; expire and delete delete.
    case("git reflog expire --expire=now --all", "Bash(git reflog:*)", False),
    # A dry run still takes ref locks (measured: tests/security/test_readonly_ground_truth.py):
    # not a read-only mode.
    case("git reflog expire --dry-run --all", "Bash(git reflog:*)", False),
    case("git reflog expire --dry-run --no-dry-run --all", "Bash(git reflog:*)", False),
    # submodule and bisect: foreach and run run commands.
    case("git submodule foreach ls", "Bash(git submodule:*)", False),
    case("git submodule update --init", "Bash(git submodule:*)", False),
    case("git bisect run make", "Bash(git bisect:*)", False),
    case("git bisect good", "Bash(git bisect:*)", False),
    # Subcommands that write: their family implies writing, not running code.
    case("git add -A", "Bash(git add:*)", True),
    case("git add -p", "Bash(git add:*)", False),
    # `-n` is not a read-only mode (it takes the index lock): `git add -n` implies writing.
    case("git add -n --no-dry-run .", "Bash(git add -n:*)", True),
    case("git commit -m 'a b'", "Bash(git commit:*)", True),
    case("git commit --amend --no-verify -F msg.txt", "Bash(git commit:*)", True),
    case("git commit -e -m x", "Bash(git commit:*)", False),
    case("git commit -S -m x", "Bash(git commit:*)", False),
    case("git commit --dry-run", "Bash(git commit --dry-run:*)", True),
    case("git commit --dry-run --no-dry-run -m x", "Bash(git commit --dry-run:*)", True),
    case("git checkout main", "Bash(git checkout:*)", True),
    case("git checkout -f main", "Bash(git checkout:*)", False),
    case("git switch --discard-changes main", "Bash(git switch:*)", False),
    case("git restore notes.txt", "Bash(git restore:*)", True),
    case("git reset --soft HEAD~1", "Bash(git reset:*)", True),
    case("git reset --hard", "Bash(git reset:*)", False),
    case("git rm x", "Bash(git rm:*)", True),
    case("git rm --cached x", "Bash(git rm --cached:*)", True),
    case("git rm --cached --no-cached x", "Bash(git rm --cached:*)", False),
    case("git clean -n", "Bash(git clean:*)", True),
    case("git merge feature", "Bash(git merge:*)", True),
    case("git merge -s ours feature", "Bash(git merge:*)", False),
    case("git merge --verify-signatures feature", "Bash(git merge:*)", False),
    case("git rebase main", "Bash(git rebase:*)", True),
    case("git rebase -i main", "Bash(git rebase:*)", False),
    case("git rebase -x make main", "Bash(git rebase:*)", False),
    case("git rebase --exec=make main", "Bash(git rebase:*)", False),
    case("git cherry-pick -x abc", "Bash(git cherry-pick:*)", True),
    case("git revert --no-edit abc", "Bash(git revert:*)", True),
    case("git am -3 patches.mbox", "Bash(git am:*)", True),
    case("git apply --check p.diff", "Bash(git apply --check:*)", True),
    case("git apply --check --apply p.diff", "Bash(git apply --check:*)", False),
    case("git apply --reject p.diff", "Bash(git apply:*)", True),
    case("git init", "Bash(git init:*)", True),
    case("git init --template=t x", "Bash(git init:*)", False),
    case("git clone https://example.com/x.git", "Bash(git clone:*)", True),
    case("git clone -u ./x https://example.com/x.git", "Bash(git clone:*)", False),
    case("git clone -c core.fsmonitor=x https://example.com/x.git", "Bash(git clone:*)", False),
    case("git fetch --prune origin", "Bash(git fetch:*)", True),
    case("git fetch --upload-pack=./x origin", "Bash(git fetch:*)", False),
    case("git fetch --dry-run", "Bash(git fetch --dry-run:*)", True),
    case("git pull --rebase", "Bash(git pull:*)", True),
    case("git pull --rebase=interactive", "Bash(git pull:*)", False),
    case("git pull --upload-pack=./x", "Bash(git pull:*)", False),
    case("git push -f origin main", "Bash(git push:*)", True),
    case("git push --exec=./x origin", "Bash(git push:*)", False),
    case("git ls-remote origin", "Bash(git ls-remote:*)", True),
    case("git ls-remote --upload-pack=./x origin", "Bash(git ls-remote:*)", False),
    case("git format-patch --stdout -1", "Bash(git format-patch --stdout:*)", True),
    case("git format-patch --stdout --no-stdout -1", "Bash(git format-patch --stdout:*)", False),
    case("git format-patch --stdout -o out -1", "Bash(git format-patch --stdout:*)", False),
    case("git gc --prune=now", "Bash(git gc:*)", True),
    case("git prune -n", "Bash(git prune -n:*)", True),
    case("git filter-branch --tree-filter x", "Bash(git filter-branch:*)", True),
    case("git difftool", "Bash(git difftool:*)", True),
    case("git verify-commit HEAD", "Bash(git verify-commit:*)", True),
)


@pytest.mark.parametrize("item", CASES, ids=str)
def test_git(item: Case) -> None:
    check(item)


DENIED = (
    # Deny equivalence: whatever removes work-tree files or saved changes is `rm`.
    ("git rm x", "Bash(rm:*)", True),
    ("git -C d rm -r x", "Bash(rm:*)", True),
    ("git clean -fdx", "Bash(rm:*)", True),
    ("git stash drop", "Bash(rm:*)", True),
    ("git stash clear", "Bash(rm:*)", True),
    ("git reset --hard", "Bash(rm:*)", True),
    ("git checkout -f main", "Bash(rm:*)", True),
    ("git switch --discard-changes main", "Bash(rm:*)", True),
    ("git worktree remove x", "Bash(rm:*)", True),
    ("git submodule deinit -f x", "Bash(rm:*)", True),
    # Deny over-matches: `git rm --cached` keeps the files, but `git rm` is rm's equivalent.
    ("git rm --cached x", "Bash(rm:*)", True),
    ("git log", "Bash(rm:*)", False),
    ("git stash", "Bash(rm:*)", False),
    ("git stash list", "Bash(rm:*)", False),
    ("git reset --soft HEAD~1", "Bash(rm:*)", False),
    # Deleting a branch deletes a ref, not files.
    ("git branch -D x", "Bash(rm:*)", False),
    # A family with options denies them in any spelling, after global options.
    ("git -C d push -f", "Bash(git push --force:*)", True),
    ("git push origin main", "Bash(git push --force:*)", False),
    ("git tag --delete v1", "Bash(git tag -d:*)", True),
    ("git branch --delete x", "Bash(git branch -d:*)", True),
    ("git -c x=y config --unset core.pager", "Bash(git config --unset:*)", True),
)


@pytest.mark.parametrize(("command", "family", "expected"), DENIED, ids=str)
def test_git_deny_families(command: str, family: str, expected: bool) -> None:
    """A deny family over `rm` sees git's deleting subcommands and options; a family with
    options sees them in any spelling."""
    assert command_denied(command, (), [parse_family(family)]) is expected


def _entries(entry: Program, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Program]]:
    found = [(path, entry)]
    for word, sub in entry.subcommands.items():
        found += _entries(sub, (*path, word))
    return found


_READ_ONLY_SUBCOMMANDS = (
    "log",
    "show",
    "whatchanged",
    "status",
    "diff",
    "diff-tree",
    "diff-files",
    "diff-index",
    "blame",
    "annotate",
    "grep",
    "ls-files",
    "ls-tree",
    "rev-parse",
    "rev-list",
    "describe",
    "shortlog",
    "cat-file",
    "show-ref",
    "for-each-ref",
    "merge-base",
    "name-rev",
    "count-objects",
    "check-ignore",
    "check-attr",
    "var",
    "version",
    "help",
    "range-diff",
    "cherry",
    "archive",
)
READ_ONLY = {("git", word) for word in _READ_ONLY_SUBCOMMANDS} | {
    ("git", "stash", "list"),
    ("git", "stash", "show"),
    ("git", "reflog", "show"),
    ("git", "reflog", "exists"),
    ("git", "worktree", "list"),
    ("git", "remote", "get-url"),
    ("git", "notes", "list"),
    ("git", "notes", "show"),
    ("git", "notes", "get-ref"),
    ("git", "submodule", "status"),
    ("git", "submodule", "summary"),
    ("git", "bisect", "help"),
    ("git", "bisect", "log"),
    ("git", "bisect", "terms"),
}


def test_exactly_the_read_only_git_entries_offer_families() -> None:
    """The entries families are offered for are the reviewed read-only list, and each cites
    its Git 2.39 manual page."""
    entries = _entries(TABLE["git"], ("git",))
    assert {path for path, entry in entries if entry.read_only} == READ_ONLY
    for path, entry in entries:
        assert "Git 2.39" in entry.manual, path
        page = f"git-{path[1]}(1)" if len(path) > 1 else "git(1)"
        assert entry.manual.startswith(page), path


@pytest.mark.parametrize(
    ("text", "effects"),
    [
        ("%H %s", ()),
        ("format:%h%n%G?", (Effect.CODE,)),
        ("%GS", (Effect.CODE,)),
        ("%+GK", (Effect.CODE,)),
        ("% GG", (Effect.CODE,)),
        ("%%G", ()),
        ("%%%G?", (Effect.CODE,)),
        ("%C(red)%h%Creset", ()),
        ("G", ()),
        ("%", ()),
    ],
)
def test_pretty_formats_run_gpg_only_for_the_g_placeholders(
    text: str, effects: tuple[Effect, ...]
) -> None:
    """`%G…` placeholders (with any `+`, `-` or space modifier) check signatures with gpg;
    `%%G` is a literal."""
    assert tuple(effect for effect, _ in pretty_format(text)) == effects


@pytest.mark.parametrize(
    ("value", "effects"),
    [
        ("true", ()),
        ("merges", ()),
        ("false", ()),
        ("interactive", (Effect.CODE,)),
        ("i", (Effect.CODE,)),
        ("preserve", (Effect.UNKNOWN,)),
    ],
)
def test_pull_rebase_modes(value: str, effects: tuple[Effect, ...]) -> None:
    """`git pull --rebase=interactive` opens the editor; an unknown mode is unknown."""
    assert tuple(effect for effect, _ in pull_rebase(value)) == effects


# ------------------------------------------------------------------ ground truth

# Each command does something the words before it suggest it would not; the table must flag it.
GROUND_TRUTH = (
    # revision.c takes --format only as --format=…; --output is still opened.
    ("git log --format --output=out.txt", "out.txt"),
    ("git commit -q --allow-empty -m x --dry-run --no-dry-run", ".git/refs/heads/main"),
    ("git config --get --no-get user.x y", ".git/config"),
    ("git format-patch --stdout --no-stdout -1", "0001-x.patch"),
)


def _confined(command: str, work: Path) -> subprocess.CompletedProcess[bytes]:
    bash, bwrap = shutil.which("bash"), shutil.which("bwrap")
    if bash is None or bwrap is None:
        pytest.skip("bubblewrap is needed to run adversarial commands safely")
    # Adversarial commands run only inside a read-only sandbox whose one writable place is
    # this test's temporary directory.
    confine = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    confine += ["--tmpfs", "/tmp", "--bind", str(work), str(work)]
    confine += ["--unshare-all", "--die-with-parent", "--new-session", "--chdir", str(work)]
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(work),
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@example.com",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@example.com",
    }
    return subprocess.run(
        [*confine, bash, "-c", command],
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=20,
        check=False,
    )


@pytest.mark.parametrize(("command", "made"), GROUND_TRUTH, ids=str)
def test_git_writes_what_the_table_says(command: str, made: str, tmp_path: Path) -> None:
    """Run by a real git (confined), each command writes `made`, and the table reads it as
    writing."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    work = tmp_path / "repo"
    work.mkdir()
    setup = _confined(
        "git init -q -b main . && git commit -q --allow-empty -m x",
        work,
    )
    assert setup.returncode == 0, setup.stderr
    target = work / made
    before = target.read_bytes() if target.exists() else None
    _confined(command, work)
    assert target.exists()
    assert target.read_bytes() != before
    (segment,) = parse_command(command).segments
    effects = read(TABLE, segment.words, segment.kinds).all_effects
    assert effects & {Effect.WRITE, Effect.DELETE}, command
