"""What least authority costs Grep and Bash: the commit before it and the current
tree, side by side, in one run.

Since least authority every sandboxed Bash command walks the whole workspace (`scan_tree`: secrets
at any depth, their hard links, files that run code), and Grep runs ripgrep only inside a
bubblewrap view of the searched tree after one such walk. Before (BEFORE_COMMIT), masks came
from a walk of 4 levels / 2,000 entries and ripgrep ran on the host.

How: a temporary `git worktree` of BEFORE_COMMIT; two drivers (bench/confinement_driver.py),
each run by this interpreter with PYTHONPATH at one tree's `src`, each serving the same two
workspaces with `callgate serve --sandbox bwrap` (headless) and calling through the client
library (`session.run`). Batches of samples alternate between the sides, the side going first
swapping every round, so drift spreads over both. Cases, per workspace (~1,000 and ~50,000
files: a node_modules-like tree, a source tree, a .git with config and hooks, a few secrets
at depth):
  Grep  `Grep {"pattern": NEEDLE}` over the whole workspace (NEEDLE_FILES matching lines);
  Bash  `Bash {"command": "true"}`, sandboxed;
  Read  `ReadFile` of a 4 KiB file with one link (the control: untouched by least authority);
and the bare `scan_tree` of each workspace in the current tree's driver (after only), beside
`rg --files --no-ignore --hidden` over it (spawn included) for the issue's "as fast as ripgrep's
walker".

Usage: bench/confinement.py [--quick] [--before COMMIT] [--large FILES]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final

BENCH_DIR: Final = Path(__file__).resolve().parent
REPO: Final = BENCH_DIR.parent
BEFORE_COMMIT: Final = "d5bec13"
"""The last commit before least authority (helpers confined, secrets masked)."""
NEEDLE: Final = "CGBENCH_NEEDLE"  # confinement_driver.NEEDLE
NEEDLE_FILES: Final = 3
SMALL_FILES: Final = 1_000
LARGE_FILES: Final = 50_000
SIDES: Final = ("before", "after")
CASES: Final = (
    ("grep", "Grep workspace-wide"),
    ("bash", "Bash `true`"),
    ("read", "ReadFile 4 KiB"),
)


class BenchmarkError(Exception):
    """The benchmark could not measure what it claims to."""


@dataclass(frozen=True)
class Plan:
    """Samples per case and side for one workspace, taken in batches of `batch`."""

    name: str
    files: int
    samples: int
    warmup: int
    batch: int
    scans: int


def plans(quick: bool, large: int) -> list[Plan]:
    if quick:
        return [Plan("1k", SMALL_FILES, 10, 2, 5, 3), Plan("50k", large, 4, 1, 2, 2)]
    return [Plan("1k", SMALL_FILES, 200, 10, 10, 20), Plan("50k", large, 60, 3, 4, 5)]


# --- the workspaces -----------------------------------------------------------------------


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def build_workspace(root: Path, files: int) -> int:
    """About `files` files: 80 % a node_modules tree (packages with lib/ and nested
    node_modules), 15 % sources, 5 % a .git directory (config, hooks, objects); secrets at
    depth 12, inside node_modules and .git; the ReadFile control; NEEDLE in NEEDLE_FILES
    source files. Returns the number of files written."""
    written = 0

    def put(relative: str, text: str) -> None:
        nonlocal written
        write(root / relative, text)
        written += 1

    body = "".join(f"export const value{i} = {i} * 2; // filler line\n" for i in range(12))
    # .git: what makes `git status` run code, and objects.
    put(".git/HEAD", "ref: refs/heads/main\n")
    put(".git/config", "[core]\n\trepositoryformatversion = 0\n\tbare = false\n")
    for hook in ("pre-commit", "post-checkout", "pre-push", "commit-msg"):
        put(f".git/hooks/{hook}", "#!/bin/sh\nexit 0\n")
    put(".git/refs/heads/main", "0" * 40 + "\n")
    for index in range(max(files * 5 // 100 - written, 0)):
        put(f".git/objects/{index % 256:02x}/{index:038x}", body)
    # Sources.
    sources = max(files * 15 // 100, NEEDLE_FILES)
    step = sources // NEEDLE_FILES
    for index in range(sources):
        needle = index % step == 0 and index < step * NEEDLE_FILES
        marker = f"const marker = '{NEEDLE}';\n" if needle else ""
        put(f"src/mod{index % 10}/sub{index % 7}/file{index}.ts", body + marker)
    # Secrets and files that run code.
    put(".env", "API_KEY=bench\n")
    put("/".join(f"d{level}" for level in range(11)) + "/.env", "DEEP=1\n")
    put("node_modules/pkg-7/.env", "NPM=1\n")
    put(".git/.env.local", "GIT=1\n")
    put("config/id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY-----\n")
    put(".vscode/settings.json", "{}\n")
    put(".bashrc", "true\n")
    # The ReadFile control: 4 KiB, 64 numbered lines (the driver checks for "line 64").
    words = "the quick brown fox jumps over the lazy dog " * 3
    lines = [f"line {n:02d}: " + words[: 63 - len(f"line {n:02d}: ")] for n in range(1, 65)]
    put("file4k.txt", "".join(line + "\n" for line in lines))
    # node_modules: packages of ~20 files, every fifth with a nested node_modules.
    package = 0
    while written < files:
        base = f"node_modules/pkg-{package}"
        if package % 5 == 4:
            base = f"node_modules/pkg-{package - 1}/node_modules/pkg-{package}"
        put(f"{base}/package.json", f'{{"name": "pkg-{package}", "version": "1.0.0"}}\n')
        put(f"{base}/index.js", body)
        for index in range(min(18, files - written)):
            put(f"{base}/lib/part{index // 6}/file{index}.js", body)
        package += 1
    return written


# --- the sides ----------------------------------------------------------------------------


@contextmanager
def before_tree(commit: str, scratch: Path) -> Iterator[Path]:
    """A detached `git worktree` of `commit`, removed on exit."""
    git = shutil.which("git")
    if git is None:
        raise BenchmarkError("no git on PATH: it makes the worktree of the commit before")
    tree = scratch / "before-tree"
    done = subprocess.run(
        [git, "-C", str(REPO), "worktree", "add", "--detach", str(tree), commit],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BenchmarkError(f"git worktree add {commit} failed: {done.stderr.strip()}")
    try:
        yield tree
    finally:
        subprocess.run(
            [git, "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
            capture_output=True,
            check=False,
        )


class Side:
    """One driver process: this interpreter with PYTHONPATH at one tree's `src`."""

    def __init__(self, name: str, src: Path, scratch: Path, workspaces: list[str]) -> None:
        self.name = name
        self.src = src
        scratch.mkdir()
        self.log = (scratch / "driver.log").open("w", encoding="utf-8")
        environment = {**os.environ, "PYTHONPATH": str(src)}
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(BENCH_DIR / "confinement_driver.py"),
                "--scratch",
                str(scratch),
                *(f"--workspace={spec}" for spec in workspaces),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=environment,
            cwd=scratch,
        )

    def wait_ready(self) -> None:
        """Waits until the driver's servers are SERVING; fails unless it runs `self.src`."""
        loaded = os.path.realpath(str(self.answer()["callgate"]))
        expected = os.path.realpath(self.src / "callgate" / "__init__.py")
        if loaded != expected:
            raise BenchmarkError(f"the {self.name} driver loaded {loaded}, not {expected}")

    def _stdio(self) -> tuple[IO[str], IO[str]]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        return self.process.stdin, self.process.stdout

    def answer(self) -> dict[str, object]:
        line = self._stdio()[1].readline()
        if not line:
            raise BenchmarkError(
                f"the {self.name} driver exited ({self.process.wait()}); see {self.log.name}"
            )
        message: dict[str, object] = json.loads(line)
        if "error" in message:
            raise BenchmarkError(f"{self.name}: {message['error']}")
        return message

    def ask(self, op: str, workspace: str, count: int) -> dict[str, object]:
        stdin = self._stdio()[0]
        stdin.write(json.dumps({"op": op, "workspace": workspace, "count": count}) + "\n")
        stdin.flush()
        return self.answer()

    def samples(self, op: str, workspace: str, count: int) -> list[int]:
        taken = self.ask(op, workspace, count)["samples_ns"]
        assert isinstance(taken, list)
        return [int(sample) for sample in taken]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


# --- measuring ----------------------------------------------------------------------------


@dataclass
class Series:
    samples_ns: list[int] = field(default_factory=list)

    def percentile_ms(self, fraction: float) -> float:
        """Nearest rank: the smallest sample at or above `fraction` of all samples."""
        ordered = sorted(self.samples_ns)
        return ordered[max(1, math.ceil(fraction * len(ordered))) - 1] / 1e6


def measure(sides: dict[str, Side], plan: Plan) -> dict[tuple[str, str], Series]:
    """Warm-ups, then rounds of one batch per case and side; the side going first alternates."""
    results = {(op, side): Series() for op, _ in CASES for side in sides}
    for op, _ in CASES:
        for side in sides.values():
            side.samples(op, plan.name, plan.warmup)
    rounds = math.ceil(plan.samples / plan.batch)
    for index in range(rounds):
        order = list(SIDES) if index % 2 == 0 else list(reversed(SIDES))
        for op, _ in CASES:
            for name in order:
                results[(op, name)].samples_ns += sides[name].samples(op, plan.name, plan.batch)
    return results


def walk_with_ripgrep(workspace: Path, count: int) -> Series:
    """`rg --files --no-ignore --hidden` over the workspace, spawn and exit included."""
    rg = shutil.which("rg")
    if rg is None:
        raise BenchmarkError("no ripgrep (rg) on PATH; run `make install-system`")
    taken = Series()
    for _ in range(count):
        started = time.perf_counter_ns()
        subprocess.run(
            [rg, "--files", "--no-ignore", "--hidden", "--no-config", str(workspace)],
            stdout=subprocess.DEVNULL,
            check=True,
        )
        taken.samples_ns.append(time.perf_counter_ns() - started)
    return taken


def ratio(after: float, before: float) -> str:
    return f"{after / before:.2f}x" if before > 0 else "—"


def print_table(
    plans_run: list[Plan],
    results: dict[str, dict[tuple[str, str], Series]],
    scans: dict[str, tuple[Series, str]],
    walks: dict[str, Series],
    commit: str,
) -> None:
    print(
        f"Before: {commit}; after: the current tree. p50 / p95 in ms, sandbox bwrap, "
        "end to end through `session.run`.\n"
    )
    print(
        "| case | files | samples | before p50 | after p50 | after/before p50 "
        "| before p95 | after p95 | after/before p95 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for plan in plans_run:
        for op, label in CASES:
            before = results[plan.name][(op, "before")]
            after = results[plan.name][(op, "after")]
            b50, a50 = before.percentile_ms(0.5), after.percentile_ms(0.5)
            b95, a95 = before.percentile_ms(0.95), after.percentile_ms(0.95)
            print(
                f"| {label} | {plan.files:,} | {len(after.samples_ns)} | {b50:.1f} | {a50:.1f} "
                f"| {ratio(a50, b50)} | {b95:.1f} | {a95:.1f} | {ratio(a95, b95)} |"
            )
        scan, detail = scans[plan.name]
        print(
            f"| bare `scan_tree` (after only; {detail}) | {plan.files:,} "
            f"| {len(scan.samples_ns)} | — | {scan.percentile_ms(0.5):.1f} | — | — "
            f"| {scan.percentile_ms(0.95):.1f} | — |"
        )
        walk = walks[plan.name]
        print(
            f"| reference: `rg --files --no-ignore --hidden` | {plan.files:,} "
            f"| {len(walk.samples_ns)} | — | {walk.percentile_ms(0.5):.1f} | — | — "
            f"| {walk.percentile_ms(0.95):.1f} | — |"
        )


def run(args: argparse.Namespace, scratch: Path) -> None:
    plans_run = plans(args.quick, args.large)
    specs = []
    for plan in plans_run:
        workspace = scratch / f"ws-{plan.name}"
        started = time.monotonic()
        written = build_workspace(workspace, plan.files)
        print(f"workspace {plan.name}: {written:,} files in {time.monotonic() - started:.1f} s")
        specs.append(f"{plan.name}={workspace}:{NEEDLE_FILES}")
    with ExitStack() as stack:
        before_src = stack.enter_context(before_tree(args.before, scratch)) / "src"
        sides: dict[str, Side] = {}
        for name, src in (("before", before_src), ("after", REPO / "src")):
            side = Side(name, src, scratch / name, specs)
            stack.callback(side.close)
            sides[name] = side
        for side in sides.values():
            side.wait_ready()
        started = time.monotonic()
        results = {plan.name: measure(sides, plan) for plan in plans_run}
        scans: dict[str, tuple[Series, str]] = {}
        for plan in plans_run:
            answer = sides["after"].ask("scan", plan.name, plan.scans)
            taken = answer["samples_ns"]
            assert isinstance(taken, list)
            scans[plan.name] = (Series([int(t) for t in taken]), str(answer["detail"]))
        walks = {
            plan.name: walk_with_ripgrep(scratch / f"ws-{plan.name}", plan.scans)
            for plan in plans_run
        }
        print(f"measured in {time.monotonic() - started:.0f} s\n")
    print_table(plans_run, results, scans, walks, args.before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run: a few samples each")
    parser.add_argument("--before", default=BEFORE_COMMIT, help="the commit measured as before")
    parser.add_argument(
        "--large", type=int, default=LARGE_FILES, help="files in the large workspace"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cgbench-confinement-") as scratch:
        try:
            run(args, Path(scratch).resolve())
        except BenchmarkError as exc:
            sys.exit(f"benchmark failed: {exc}")


if __name__ == "__main__":
    main()
