"""Build tools, package managers, interpreters and wrappers: which commands a family covers,
what candidates are offered, and what deny families see through."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pytest

from callgate.server.commands.matching import command_denied, family_words, parse_family
from callgate.server.commands.programs import Program, table_dev

from .cases import FAMILY, Case, case, check

CASES = (
    # make runs recipes: its family implies running code, but covers only options it knows.
    case("make -j4 test", "Bash(make:*)", True),
    case("make -j 4 test", "Bash(make:*)", True),
    case("make --jobs=4 -k all", "Bash(make:*)", True),
    case("make -C sub -f other.mk all", "Bash(make:*)", True),
    case("make -n install", "Bash(make:*)", True),
    case("make --eval='X=1' all", "Bash(make:*)", True),
    case("make --frobnicate", "Bash(make:*)", False),
    case("make -Z", "Bash(make:*)", False),
    case("make test -k", "Bash(make test:*)", True),
    case("make test --frobnicate", "Bash(make test:*)", False),
    case("gmake -j2", "Bash(gmake:*)", True),
    # npm: scripts run; `--` hands the rest to the script, an unknown option is npm's config.
    case("npm test -- --watch", "Bash(npm test:*)", True),
    case("npm test --watch", "Bash(npm test:*)", False),
    case("npm t", "Bash(npm test:*)", False),
    case("npm run build", "Bash(npm run:*)", True),
    case("npm run test:unit -- --watch", "Bash(npm run test:unit:*)", True),
    case("npm run build", "Bash(npm run test:unit:*)", False),
    case("npm run build --script-shell=/bin/bash", "Bash(npm run:*)", True),
    case("npm frobnicate", "Bash(npm:*)", False),
    case("npm ls --json", "Bash(npm:*)", True),
    # npm ls reads, but npm itself writes its log and may ask the registry: never a candidate.
    case("npm ls", "Bash(npm ls:*)", True),
    case("npm ls --json --all --depth 2", "Bash(npm ls:*)", True),
    case("npm ls -alp", "Bash(npm ls:*)", True),
    case("npm ls --no-unicode", "Bash(npm ls:*)", True),
    case("npm ls --script-shell=./x", "Bash(npm ls:*)", False),
    case("npm ls --browser ./x", "Bash(npm ls:*)", False),
    case("npm ls --frobnicate", "Bash(npm ls:*)", False),
    case("npm --json ls", "Bash(npm ls:*)", False),
    case("npm list --omit dev", "Bash(npm list:*)", True),
    case("npm view react version", "Bash(npm view:*)", True),
    case("npm view react --registry https://registry.example", "Bash(npm view:*)", True),
    case("npm view react --editor ./x", "Bash(npm view:*)", False),
    case("npm audit --json", "Bash(npm audit:*)", True),
    case("npm audit fix", "Bash(npm audit:*)", False),
    case("npm help install", "Bash(npm help:*)", False),
    case("npm config get registry", "Bash(npm config get:*)", True),
    case("npm config set x=y", "Bash(npm config get:*)", False),
    case("npm install", "Bash(npm ls:*)", False),
    case("npm install --save-dev left-pad", "Bash(npm install:*)", True),
    case("npm i -D left-pad", "Bash(npm i:*)", True),
    case("npm ci --ignore-scripts", "Bash(npm ci:*)", True),
    # npx, pnpm, yarn, uv: their own options before the command; the rest is theirs to run.
    case("npx prettier --check .", "Bash(npx:*)", True),
    case("npx prettier --frobnicate", "Bash(npx prettier:*)", True),
    case("npx --frobnicate prettier", "Bash(npx:*)", False),
    case("pnpm install --frozen-lockfile", "Bash(pnpm install:*)", True),
    case("pnpm -r --filter web test", "Bash(pnpm:*)", True),
    case("pnpm --frobnicate install", "Bash(pnpm:*)", False),
    case("yarn --cwd web test", "Bash(yarn:*)", True),
    case("uv run pytest -x", "Bash(uv run:*)", True),
    case("uv --offline pip list", "Bash(uv:*)", True),
    case("uv --frobnicate sync", "Bash(uv:*)", False),
    # pip list asks PyPI for a newer pip unless told not to: only then is --outdated a change.
    case("pip list", "Bash(pip list:*)", True),
    case("pip list --outdated", "Bash(pip list:*)", True),
    case("pip list --python ./venv/bin/python", "Bash(pip list:*)", False),
    case("pip list --outdated", "Bash(pip list --disable-pip-version-check:*)", False),
    case(
        "pip list --disable-pip-version-check --format=json",
        "Bash(pip list --disable-pip-version-check:*)",
        True,
    ),
    case(
        "pip list --disable-pip-version-check -o",
        "Bash(pip list --disable-pip-version-check:*)",
        False,
    ),
    case(
        "pip list --disable-pip-version-check --index-url https://index.example",
        "Bash(pip list --disable-pip-version-check:*)",
        False,
    ),
    case(
        "pip list --disable-pip-version-check --log out.txt",
        "Bash(pip list --disable-pip-version-check:*)",
        False,
    ),
    # pip show, freeze, check: read-only, offered as families.
    case("pip show requests", "Bash(pip show:*)", True, FAMILY),
    case("pip show -f requests", "Bash(pip show:*)", True, FAMILY),
    case("pip show --files requests -v", "Bash(pip show:*)", True, FAMILY),
    case("pip show requests --log out.txt", "Bash(pip show:*)", False),
    case("pip show --log=out.txt requests", "Bash(pip show:*)", False),
    case("pip show --python=./evil requests", "Bash(pip show:*)", False),
    case("pip show --keyring-provider subprocess requests", "Bash(pip show:*)", False),
    case("pip show --frobnicate requests", "Bash(pip show:*)", False),
    case("pip freeze --all", "Bash(pip freeze:*)", True, FAMILY),
    case("pip freeze -r requirements.txt", "Bash(pip freeze:*)", True, FAMILY),
    case("pip check", "Bash(pip check:*)", True, FAMILY),
    case("pip cache dir", "Bash(pip cache dir:*)", True, FAMILY),
    case("pip cache purge", "Bash(pip cache dir:*)", False),
    case("pip config list", "Bash(pip config list:*)", True, FAMILY),
    case("pip3 show requests", "Bash(pip3 show:*)", True),
    case("pip install requests", "Bash(pip show:*)", False),
    case("pip install -r requirements.txt", "Bash(pip install:*)", True),
    case("pip uninstall -y requests", "Bash(pip uninstall:*)", True),
    # Interpreters: options only before the program; after -c or -m everything is its own.
    case("python -c 'print(1)'", "Bash(python:*)", True),
    case("python -m http.server 8000", "Bash(python:*)", True),
    case("python -c 'x' --frobnicate", "Bash(python:*)", True),
    case("python script.py --frobnicate", "Bash(python:*)", True),
    case("python -I -B -Werror -X dev script.py", "Bash(python:*)", True),
    case("python -OO -c pass", "Bash(python:*)", True),
    case("python --version", "Bash(python:*)", True),
    case("python --frobnicate", "Bash(python:*)", False),
    case("python3 -c 'x'", "Bash(python:*)", False),
    case("python3 -c 'x'", "Bash(python3:*)", True),
    case("python3.11 -q --frobnicate", "Bash(python3.11:*)", False),
    case("python -m pytest -x", "Bash(python -m pytest:*)", True),
    case("node -e 'console.log(1)'", "Bash(node:*)", True),
    case("node x.js --frobnicate", "Bash(node:*)", True),
    case("node --frobnicate x.js", "Bash(node:*)", False),
    case("nodejs --version", "Bash(nodejs:*)", True),
    case("perl -ne print notes.txt", "Bash(perl:*)", True),
    case("perl -pi.bak -e 's/a/b/' notes.txt", "Bash(perl:*)", True),
    case("perl --frobnicate", "Bash(perl:*)", False),
    case("ruby -e 'puts 1'", "Bash(ruby:*)", True),
    case("pytest -x -k 'not slow' tests", "Bash(pytest:*)", True),
    case("pytest --basetemp=tmp tests", "Bash(pytest:*)", True),
    # pytest is opaque (plugins add options): its family covers any arguments.
    case("pytest -n 4 --cov=src", "Bash(pytest:*)", True),
    # cargo is rustup's proxy, which runs the toolchain rust-toolchain.toml names: all code.
    case("cargo build --release", "Bash(cargo build:*)", True),
    case("cargo b -r", "Bash(cargo b:*)", True),
    case("cargo test -- --nocapture", "Bash(cargo test:*)", True),
    case("cargo test --frobnicate", "Bash(cargo test:*)", False),
    case("cargo --frobnicate build", "Bash(cargo:*)", False),
    case("cargo version", "Bash(cargo version:*)", True),
    case("cargo version --frobnicate", "Bash(cargo version:*)", False),
    case("cargo locate-project --workspace", "Bash(cargo locate-project:*)", True),
    case("cargo metadata --no-deps --format-version 1", "Bash(cargo metadata:*)", True),
    case("cargo metadata --frobnicate", "Bash(cargo metadata:*)", False),
    case("cargo fmt --check", "Bash(cargo fmt --check:*)", True),
    case("cargo fmt --check -- --emit files", "Bash(cargo fmt --check:*)", False),
    case("cargo fmt --all", "Bash(cargo fmt:*)", True),
    # Wrappers: the wrapped command is read in turn.
    case("timeout 5 git log --oneline", "Bash(timeout 5 git log:*)", True),
    case("timeout 5 git log --output=x", "Bash(timeout 5 git log:*)", False),
    case("timeout 5 git log", "Bash(timeout:*)", True),
    case("timeout -s KILL 5 git status", "Bash(timeout:*)", True),
    case("timeout 5 rm x", "Bash(timeout:*)", True),
    case("timeout 5 mytool", "Bash(timeout:*)", False),
    case("timeout 5 git log --frobnicate", "Bash(timeout:*)", False),
    case("timeout --frobnicate 5 ls", "Bash(timeout:*)", False),
    case("env FOO=1 git log", "Bash(env:*)", True),
    case("env -i PATH=/bin git status", "Bash(env:*)", True),
    case("env -S 'git log'", "Bash(env:*)", False),
    case("env --split-string='git log'", "Bash(env:*)", False),
    case("nice -n 5 git log", "Bash(nice:*)", True),
    case("nice -5 git log", "Bash(nice:*)", True),
    case("nice -n 5 git log --output=x", "Bash(nice -n 5 git log:*)", False),
    case("nohup git log --oneline", "Bash(nohup git log:*)", True),
    case("stdbuf -oL git log", "Bash(stdbuf -oL git log:*)", True),
    case("setsid -f git status", "Bash(setsid:*)", True),
    case("ionice -c 3 git status", "Bash(ionice:*)", True),
    case("ionice -p 1", "Bash(ionice:*)", False),
    # xargs appends words read from its input: a family naming it implies running code.
    case("xargs rm", "Bash(xargs:*)", True),
    case("xargs git log --output=x", "Bash(xargs git log:*)", True),
    case("xargs --frobnicate rm", "Bash(xargs:*)", False),
    # command -v only looks names up.
    case("command -v git", "Bash(command -v:*)", True),
    case("command git push", "Bash(command -v:*)", False),
    case("command -v git", "Bash(command:*)", True),
)


@pytest.mark.parametrize("item", CASES, ids=str)
def test_dev_programs(item: Case) -> None:
    """Each family covers exactly what the table says, and only read-only entries are
    offered as families."""
    check(item)


DENIED = (
    ("xargs rm", "Bash(rm:*)"),
    ("xargs -0 -n 1 unlink", "Bash(rm:*)"),
    ("timeout 5 rm x", "Bash(rm:*)"),
    ("env rm x", "Bash(rm:*)"),
    ("env FOO=1 rm x", "Bash(rm:*)"),
    ("env -S 'rm x'", "Bash(rm:*)"),
    ("nice -n 5 unlink x", "Bash(rm:*)"),
    ("nohup unlink x", "Bash(rm:*)"),
    ("stdbuf -oL rm x", "Bash(rm:*)"),
    ("setsid rm x", "Bash(rm:*)"),
    ("ionice -c 3 rm x", "Bash(rm:*)"),
    ("npm ci", "Bash(rm:*)"),
    ("npm uninstall left-pad", "Bash(rm:*)"),
    ("npm cache clean --force", "Bash(rm:*)"),
    ("pip uninstall -y requests", "Bash(rm:*)"),
    ("pip cache purge", "Bash(rm:*)"),
    ("cargo clean", "Bash(rm:*)"),
    ("xargs git push -f", "Bash(git push --force:*)"),
    ("timeout 5 git push --force", "Bash(git push --force:*)"),
    ("pip list -o", "Bash(pip list --outdated:*)"),
    ("npm i -D left-pad", "Bash(npm install --save-dev:*)"),
    ("cargo b -r", "Bash(cargo build --release:*)"),
)


@pytest.mark.parametrize(("command", "family"), DENIED, ids=str)
def test_deny_families_see_through_wrappers_and_equivalents(command: str, family: str) -> None:
    """A deny family matches the command behind a wrapper, what the table knows to do the
    same (deleting files), and the same options in another spelling."""
    assert command_denied(command, (), [parse_family(family)])


NOT_DENIED = (
    ("npm ls", "Bash(rm:*)"),
    ("pip show requests", "Bash(rm:*)"),
    ("cargo build", "Bash(rm:*)"),
    ("timeout 5 git log", "Bash(rm:*)"),
    ("pip list", "Bash(pip list --outdated:*)"),
)


@pytest.mark.parametrize(("command", "family"), NOT_DENIED, ids=str)
def test_deny_families_do_not_match_programs_that_do_not_do_it(command: str, family: str) -> None:
    """Programs that neither name nor do what a deny family names are not denied by it."""
    assert not command_denied(command, (), [parse_family(family)])


@pytest.mark.parametrize(
    "pattern",
    [
        "Bash(make -n:*)",
        "Bash(python --version:*)",
        "Bash(xargs git log:*)",
        "Bash(cargo version:*)",
        "Bash(cargo fmt --check:*)",
    ],
)
def test_dry_runs_and_version_queries_of_code_runners_still_imply_running_code(
    pattern: str,
) -> None:
    """`make -n` still runs `$(shell …)` and recursive makes; `python --version` is still
    python; a family over xargs runs whatever its input adds; rustup's cargo runs the
    toolchain the workspace names: their words say so."""
    assert "runs code" in family_words(pattern)


def test_npm_families_say_that_npm_writes_its_log() -> None:
    """The approver is told that every npm command writes its own log and may reach the
    registry, which is why no npm family is offered."""
    words = family_words("Bash(npm ls:*)")
    assert "~/.npm" in words
    assert "registry" in words


def _entries(entries: Iterable[Program], path: str = "") -> Iterator[tuple[str, Program]]:
    """Every entry of the table and its subcommands once, with its path (aliases skipped)."""
    for entry in entries:
        here = f"{path} {entry.name}".strip()
        yield here, entry
        subcommands = {id(sub): sub for sub in entry.subcommands.values()}
        yield from _entries(subcommands.values(), here)


ENTRIES = dict(_entries(table_dev.PROGRAMS))


@pytest.mark.parametrize("path", list(ENTRIES))
def test_each_entry_cites_its_manual_and_names_each_option_once(path: str) -> None:
    """Every entry cites a manual, and no option name is listed twice in one entry (the
    reader would silently keep one of them)."""
    entry = ENTRIES[path]
    assert entry.manual
    names = [name for option in entry.options for name in option.names]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
