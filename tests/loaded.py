"""`make test-loaded`: the whole suite on a loaded machine, beside a second copy of itself and a
busy server, as on a shared host where several people work at once.

It starts a `callgate serve` (its own workspace, state directory and socket, in a temporary
directory) and agents that keep it busy with sandboxed Bash calls; then it runs two copies of
the suite side by side (each with its own pytest base temporary directory). It reports each
copy's failures and whether every one of the busy server's calls succeeded, and exits 0 only
when there were no failures and no failed calls.

    python tests/loaded.py [--agents N] [pytest arguments...]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from callgate.client import CallgateClient

ROOT = Path(__file__).resolve().parent.parent
CALLGATE = str(Path(sys.executable).with_name("callgate"))
START_SECONDS = 60.0
STOP_SECONDS = 60.0
CONFIG = """approval_mode = "headless"
[access]
command = "allow"
"""
# Each agent's calls: a short pipeline, a file written and read back in the workspace.
COMMANDS = (
    "echo busy | tr a-z A-Z",
    "ls / > /dev/null && date +%s",
    "seq 1 200 | sort -r | head -3",
)
SUMMARY = re.compile(r"^=*\s*(.*\b(passed|failed|error|errors)\b.*?)\s*=*$")


@dataclass
class Tally:
    ok: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, problem: str | None) -> None:
        with self.lock:
            if problem is None:
                self.ok += 1
            else:
                self.failed += 1
                if len(self.failures) < 10:
                    self.failures.append(problem)


def start_server(root: Path) -> tuple[subprocess.Popen[str], str, str]:
    """A `callgate serve` of its own under `root`; returns it, its target and an agent token."""
    (root / "w").mkdir(parents=True)
    (root / "callgate.toml").write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    serve = [CALLGATE, "serve", "--config", str(root / "callgate.toml")]
    places = ["--listen", f"unix://{root}/s.sock", "--workspace", str(root / "w")]
    process = subprocess.Popen(
        [*serve, *places, "--state-dir", str(root / "s")],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    deadline = time.monotonic() + START_SECONDS
    for line in process.stderr:
        if "serving on" in line:
            break
        if time.monotonic() > deadline:
            break
    else:
        raise SystemExit("test-loaded: the busy server exited before serving")
    # Keep reading its log so that it never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in process.stderr or ()], daemon=True).start()
    token = (root / "s" / "tokens" / "agent").read_text().strip()
    return process, f"unix://{root}/s.sock", token


async def agent(target: str, token: str, tally: Tally, stop: threading.Event) -> None:
    async with CallgateClient(target, token=token) as client, client.open_session() as session:
        turn = 0
        while not stop.is_set():
            command = COMMANDS[turn % len(COMMANDS)]
            turn += 1
            try:
                result = await session.run("Bash", {"command": command, "timeout": 120})
            except Exception as exc:  # counted and reported: the point is to see them
                tally.count(f"{command!r}: {type(exc).__name__}: {exc}")
                continue
            if result.is_error or result.exit_code != 0:
                tally.count(f"{command!r}: {result.error_code or result.exit_code}: {result.text}")
            else:
                tally.count(None)


def drive(target: str, token: str, agents: int, tally: Tally, stop: threading.Event) -> None:
    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            for _ in range(agents):
                tasks.start_soon(agent, target, token, tally, stop)

    try:
        anyio.run(main)
    except Exception as exc:  # an agent that could not even connect
        tally.count(f"agents stopped: {type(exc).__name__}: {exc}")


def run_copy(name: str, base: Path, pytest_args: list[str]) -> subprocess.Popen[bytes]:
    log = (base / f"{name}.log").open("wb")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--basetemp",
            str(base / name),
            *pytest_args,
        ],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def report(name: str, log: Path, code: int) -> tuple[str, list[str]]:
    lines = log.read_text(errors="replace").splitlines()
    failed = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    summary = next(
        (m.group(1) for line in reversed(lines) if (m := SUMMARY.match(line))),
        f"no summary (exit {code})",
    )
    return f"{name}: {summary}", failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=2, help="busy agents (default 2)")
    options, pytest_args = parser.parse_known_args()
    base = Path(tempfile.mkdtemp(prefix="cgload", dir="/tmp"))  # short: the socket lives here
    server, target, token = start_server(base / "server")
    tally, stop = Tally(), threading.Event()
    driver = threading.Thread(target=drive, args=(target, token, options.agents, tally, stop))
    started = time.monotonic()
    try:
        driver.start()
        copies = {name: run_copy(name, base, pytest_args) for name in ("suite-1", "suite-2")}
        codes = {name: process.wait() for name, process in copies.items()}
    finally:
        stop.set()
        driver.join(STOP_SECONDS)
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    print(f"test-loaded: {time.monotonic() - started:.0f} s, logs in {base}")
    clean = True
    for name, code in codes.items():
        line, failed = report(name, base / f"{name}.log", code)
        print(line)
        for entry in failed:
            print(f"  {entry}")
        clean = clean and code == 0 and not failed
    print(f"busy server: {tally.ok + tally.failed} calls, {tally.failed} failed")
    for problem in tally.failures:
        print(f"  {problem[:300]}")
    clean = clean and tally.failed == 0 and tally.ok > 0
    print("test-loaded: " + ("0 failures, 0 failed calls" if clean else "FAILED"))
    if clean:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
