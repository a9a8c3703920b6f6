"""What the program knowledge base costs the command rules: the commit before it and
the current tree, side by side, in one run.

Every Bash Prepare asks the rules whether a deny family matches, whether allow families cover
the command, and (when a human must decide) which candidates to offer. Since the program table each
segment is also read with the program table. This measures those three calls in-process, on
command texts never seen before (the parse cache cannot help: each sample changes a number),
with the families an approver would typically have saved.

How: a temporary `git worktree` of BEFORE_COMMIT; the same driver (DRIVER below) run by this
interpreter with PYTHONPATH at each tree's `src`; rounds alternate between the sides so drift
spreads over both. Prints p50 and p90 in microseconds per case, before and after.

Usage: bench/rules.py [--before COMMIT] [--rounds N] [--samples N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BEFORE_COMMIT = "f0990fc"
ROOT = Path(__file__).resolve().parents[1]

DRIVER = r"""
import json, statistics, sys, time
from callgate.server.commands.matching import CommandMatcher, parse_family, rule_candidates
allow = CommandMatcher((), [parse_family(p) for p in (
    "Bash(git status:*)", "Bash(git log:*)", "Bash(git diff:*)", "Bash(ls:*)", "Bash(rg:*)",
    "Bash(sed:*)", "Bash(head:*)", "Bash(wc:*)")])
deny = CommandMatcher((), [parse_family(p) for p in (
    "Bash(rm:*)", "Bash(git push:*)", "Bash(curl:*)")])
cases = {
    "one segment (git log)": "git log --oneline -{n} -- src/a{n}.py",
    "pipeline of 3 (rg | sed | head)": "rg -n foo{n} src | sed -n 1,{n}p | head -{n}",
    "not covered (git log --output)": "git log --output=out{n}.txt -{n}",
}
samples, offset = int(sys.argv[1]), int(sys.argv[2])
out = {}
for name, template in cases.items():
    for call, fn in (("deny+allow", lambda c: (deny.denies(c), allow.allows(c))),
                     ("candidates", rule_candidates)):
        times = []
        for i in range(samples):
            command = template.format(n=offset + i)
            start = time.perf_counter()
            fn(command)
            times.append(time.perf_counter() - start)
        times.sort()
        out[f"{name}: {call}"] = times
print(json.dumps(out))
"""


def run(tree: Path, samples: int, offset: int) -> dict[str, list[float]]:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(samples), str(offset)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    result: dict[str, list[float]] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE_COMMIT)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--samples", type=int, default=400)
    args = parser.parse_args()
    git = shutil.which("git")
    if git is None:
        raise SystemExit("git is needed for the worktree of the commit before")
    with tempfile.TemporaryDirectory(prefix="cg-rules-") as scratch:
        before = Path(scratch) / "before"
        subprocess.run(
            [git, "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(before), args.before],
            check=True,
        )
        try:
            sides: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
            for round_ in range(args.rounds):
                order = [("before", before), ("after", ROOT)]
                if round_ % 2:
                    order.reverse()
                for side, tree in order:
                    offset = round_ * args.samples * 10
                    for case, times in run(tree, args.samples, offset).items():
                        sides[side].setdefault(case, []).extend(times)
        finally:
            subprocess.run(
                [git, "-C", str(ROOT), "worktree", "remove", "--force", str(before)],
                check=False,
            )

    def quantile(times: list[float], q: float) -> float:
        ordered = sorted(times)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6

    print(f"command rules, µs per call on unseen commands (before = {args.before}, same run)")
    print(f"{'case':<52} {'before p50':>10} {'after p50':>10} {'before p90':>10} {'after p90':>10}")
    for case in sides["after"]:
        b, a = sides["before"][case], sides["after"][case]
        print(
            f"{case:<52} {quantile(b, 0.5):>10.0f} {quantile(a, 0.5):>10.0f} "
            f"{quantile(b, 0.9):>10.0f} {quantile(a, 0.9):>10.0f}"
        )


if __name__ == "__main__":
    main()
