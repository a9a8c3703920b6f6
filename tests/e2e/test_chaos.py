"""Chaos: `kill -9` the real `callgate serve` (bubblewrap sandbox) at random points while calls
run, restart it, and check what design section 8 promises:

- no tool process survives the server (foreground and background Bash, found in /proc by a
  unique `sleep` duration that bubblewrap, bash and sleep all carry on their command lines);
- the journal is consistent: `seq` gap-free over all runs, each run starts with
  `server.started`, every execution's records are in lifecycle order with at most one terminal
  record and nothing after it, `call.invoked` only after an approving `call.decided`, and every
  call a killed run left open is `call.abandoned` exactly once by the next run;
- nothing a client was told is missing from the journal (its `call.prepared` once it had an
  execution ID, its terminal record once it saw a terminal state);
- persisted workspace rules survive every restart (listed, and still allowing the commands);
- no token, file content or command output is in the journal files.

Five killed rounds of ten calls (a rule probe, then long foreground and background `sleep`s,
short `echo`s, WriteFile, ReadFile and a denied command, fired concurrently), then an orderly
SIGTERM with a foreground and a background sleep running. Round 0 is killed once a sleep runs;
round 1 is killed while sandboxes are being spawned (bubblewrap's `--die-with-parent` is racy
there: containers/bubblewrap#633; the server's watchdog kills every command in its cgroups,
each placed there before it runs, and a command not yet placed finds no "go" at its start
gate and never runs; a bubblewrap init whose parent died inside bubblewrap's own setup stays
blocked there without ever running the command: such inits are reported and removed, see
`stuck_in_setup`); the others at a random moment. After each kill the watchdog itself is gone
too, once it has found nothing left. The random schedule is
seeded; the seed is in every failure message (`CHAOS_SEED=<n>` replays the schedule, though
not the server's timing).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from callgate.client import (
    CallgateClient,
    CallgateClientError,
    ClientSession,
    RuleEffect,
    State,
)
from callgate.server.sandbox.limits import CGROUP_RECORD
from tests.support.sandbox import bwrap_only, live_processes

pytestmark = [pytest.mark.anyio, *bwrap_only]

CALLGATE = str(Path(sys.executable).with_name("callgate"))
KILLED_ROUNDS = 5
CALLS_PER_ROUND = 10  # the rule probe and nine random calls: 50 calls across the killed rounds
KILL_AFTER = (0.05, 1.5)  # seconds after the round's calls start
START_TIMEOUT = 20.0
GONE_TIMEOUT = 10.0  # for the killed server, and for its tool processes, to be gone
STUCK_CONFIRM = 0.5  # seconds a survivor must stay stuck in bubblewrap's setup to count so
STOP_TIMEOUT = 20.0  # SIGTERM: 1 s grace for running calls, then process trees are killed
TERMINAL_STATES = {"succeeded", "failed", "denied", "cancelled", "expired"}
# One attempt: a call's outcome is what the killed server answered, not a retry's. (Each
# client has a connection of its own, so a client made after a restart starts afresh.)
CLIENT: dict[str, Any] = {"max_attempts": 1}
KINDS = {"long": 3, "background": 1, "echo": 2, "write": 2, "read": 1, "denied": 1}


@dataclass
class Outcome:
    """What the client saw of one call."""

    round: int
    kind: str
    name: str
    execution_id: str = ""
    state: str = ""  # the last state the client was told
    error: str = ""  # the client error that ended it (expected once the server is killed)


@dataclass
class Chaos:
    root: Path
    seed: int
    marker: str  # a unique `sleep` duration: on the command line of every tool process
    secret: str  # file contents written through WriteFile
    seed_text: str  # the content of a file read through ReadFile
    output_parts: tuple[str, str]  # printf prints them joined: output never in the command
    process: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    rule_ids: list[str] = field(default_factory=list)
    processes_at_kill: list[int] = field(default_factory=list)  # per killed round
    stuck_inits: list[str] = field(default_factory=list)  # see stuck_in_setup

    @property
    def workspace(self) -> Path:
        return self.root / "w"

    @property
    def state_dir(self) -> Path:
        return self.root / "s"

    @property
    def target(self) -> str:
        return f"unix://{self.root}/s.sock"

    def token(self, role: str) -> str:
        return (self.state_dir / "tokens" / role).read_text().strip()

    def context(self) -> str:
        log = self.logs[-1].read_text(errors="replace")[-3000:] if self.logs else ""
        return f"seed {self.seed} (CHAOS_SEED={self.seed} replays it); last server log:\n{log}"


@pytest.fixture
def chaos() -> Iterator[Chaos]:
    seed = int(os.environ.get("CHAOS_SEED", secrets.randbelow(10**9)))
    root = Path(tempfile.mkdtemp(prefix="cgchaos", dir="/tmp"))  # short: the socket lives here
    run = Chaos(
        root=root,
        seed=seed,
        marker=f"30.{secrets.randbelow(10**12):012d}",
        secret=f"chaos-content-{secrets.token_hex(8)}",
        seed_text=f"chaos-seed-file-{secrets.token_hex(8)}",
        output_parts=(f"out{secrets.token_hex(4)}", f"put{secrets.token_hex(4)}"),
    )
    run.workspace.mkdir()
    run.state_dir.mkdir(mode=0o700)
    (run.workspace / "seed.txt").write_text(run.seed_text + "\n")
    try:
        yield run
    finally:
        if run.process is not None and run.process.poll() is None:
            run.process.kill()  # our own child
            run.process.wait(timeout=GONE_TIMEOUT)
        # Leftovers are reported by the test; here only those positively ours are removed.
        for pid, _ in marker_processes(run.marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------------- processes


def marker_processes(marker: str) -> list[tuple[int, str]]:
    """Live (non-zombie) processes whose command line contains `marker`: (pid, command line)."""
    wanted = marker.encode()
    found = []
    for pid, cmdline in live_processes():
        if wanted in cmdline and pid != os.getpid():
            text = cmdline.replace(b"\x00", b" ").decode(errors="replace")
            found.append((pid, f"{text[:12]}...{text[-100:]}{_status(str(pid))}"))
    return found


def sandboxes(pid: int) -> list[str]:
    """The server's children that are bubblewrap (not its watchdog)."""
    found = []
    for child in children(pid):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{child}/comm").read_text().strip() == "bwrap":
                found.append(child)
    return found


def watchdogs(parents: list[Path]) -> list[tuple[int, str]]:
    """Live watchdogs of the server whose cgroup parents are `parents` (their command lines
    name them)."""
    return [
        found
        for found in marker_processes("callgate-watchdog")
        if any(str(parent) in found[1] for parent in parents)
    ]


def cgroup_parents(state_dir: Path) -> list[Path]:
    """The command cgroup parents the running server of `state_dir` recorded there (the last
    run's; an earlier run's are removed at start)."""
    try:
        recorded = (state_dir / CGROUP_RECORD).read_text().split()
    except FileNotFoundError:
        return []
    return [Path(line) for line in recorded if Path(line).is_dir()]


def children(pid: int) -> list[str]:
    """The child PIDs of a process (of all its threads): the server's are its sandboxes."""
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += handle.read().split()
    except OSError:
        pass
    return found


def _status(pid: str) -> str:
    """PPid and NSpid (the PID inside the sandbox's PID namespace) of a process, for reports."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return ""
    try:
        with open(f"/proc/{pid}/wchan") as handle:
            wchan = handle.read()
    except OSError:
        wchan = "?"
    fields = ("State:", "PPid:", "NSpid:", "SigBlk:", "SigPnd:", "ShdPnd:")
    return (
        "".join(f" [{line}]" for line in lines if line.startswith(fields))
        + f" [wchan {wchan}] [children {children(int(pid))}]"
    )


def sleeps(chaos: Chaos) -> list[tuple[int, str]]:
    return [p for p in marker_processes(chaos.marker) if p[1].startswith("sleep 30.")]


def stuck_in_setup(pid: int) -> bool:
    """Whether a surviving process is a sandbox's bubblewrap init that never got past
    bubblewrap's own setup: PID 1 of its namespace, no child (the command was never started)
    and blocked reading the eventfd on which the outer bubblewrap, now dead, would have said
    "go". That happens when the server dies between bubblewrap's clone and the end of its
    setup (containers/bubblewrap#633); it can never run the command. Anything else that
    survives is a failure."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return True  # gone meanwhile
    nspid = next(
        (line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), []
    )
    return nspid[-1:] == ["1"] and not children(pid) and wchan == "do_wait_intr_irq"


async def assert_no_survivors(chaos: Chaos, after: str) -> None:
    """No process that runs (or may yet run) a command survives; bubblewrap inits stuck in
    their setup for good (see `stuck_in_setup`) are counted, reported and removed."""
    deadline = time.monotonic() + GONE_TIMEOUT
    settled_since: float | None = None
    while time.monotonic() < deadline:  # /proc: polled, nothing reports an exit
        if not all(stuck_in_setup(pid) for pid, _ in marker_processes(chaos.marker)):
            settled_since = None
        elif settled_since is None:
            settled_since = time.monotonic()
        elif time.monotonic() - settled_since >= STUCK_CONFIRM:
            break  # nothing left, or only inits that stayed stuck: their parent is dead
        await anyio.sleep(0.05)
    survivors = marker_processes(chaos.marker)
    running = [p for p in survivors if not stuck_in_setup(p[0])]
    assert not running, (
        f"tool processes survived {after} by {GONE_TIMEOUT} s: {running}; {chaos.context()}"
    )
    for pid, description in survivors:
        chaos.stuck_inits.append(f"{after}: {description}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # ours (marker), and idle: the test cleans up


async def start_server(chaos: Chaos) -> None:
    log = chaos.root / f"server-{len(chaos.logs)}.log"
    chaos.logs.append(log)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    with log.open("wb") as out:
        chaos.process = subprocess.Popen(  # noqa: ASYNC220  # fork+exec; its exit is polled
            [
                CALLGATE,
                "serve",
                "--listen",
                chaos.target,
                "--workspace",
                str(chaos.workspace),
                "--state-dir",
                str(chaos.state_dir),
                "--sandbox",
                "bwrap",
                "--approval-mode",
                "headless",
                "--shutdown-grace",
                "1",
            ],
            cwd=chaos.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while "serving on" not in log.read_text(errors="replace"):
        assert chaos.process.poll() is None, f"callgate serve exited; {chaos.context()}"
        assert time.monotonic() < deadline, f"callgate serve did not start; {chaos.context()}"
        await anyio.sleep(0.02)


async def wait_exit(chaos: Chaos, within: float) -> int:
    assert chaos.process is not None
    deadline = time.monotonic() + within
    while (code := chaos.process.poll()) is None:
        assert time.monotonic() < deadline, f"the server did not exit; {chaos.context()}"
        await anyio.sleep(0.02)
    return code


# ---------------------------------------------------------------------------------- calls


def call_for(chaos: Chaos, kind: str, name: str) -> tuple[str, dict[str, object]]:
    """The tool and arguments of one call of `kind` (only fixed harmless commands)."""
    if kind == "long":
        return "Bash", {"command": f"sleep {chaos.marker}; echo done"}
    if kind == "background":
        return "Bash", {"command": f"sleep {chaos.marker}", "background": True}
    if kind == "echo":
        return "Bash", {"command": f"echo {name}"}
    if kind == "write":
        return "WriteFile", {"path": f"{name}.txt", "content": f"{chaos.secret} {name}\n"}
    if kind == "read":
        return "ReadFile", {"path": "seed.txt"}
    if kind == "denied":
        return "Bash", {"command": "true"}  # no rule covers it: denied (headless)
    if kind == "probe":
        left, right = chaos.output_parts
        return "Bash", {"command": f"printf '%s%s\\n' {left} {right}"}
    raise AssertionError(kind)


async def run_call(session: ClientSession, chaos: Chaos, outcome: Outcome, delay: float) -> None:
    """Prepare (the gate decides) and invoke; records what the client was told."""
    tool, args = call_for(chaos, outcome.kind, outcome.name)
    await anyio.sleep(delay)
    try:
        call = await session.prepare(tool, args, evaluate=True)
        outcome.execution_id, outcome.state = call.execution_id, call.state.value
        if call.state is State.APPROVED:
            invoked = await session.invoke(call.execution_id)
            outcome.state = invoked.call.state.value
    except CallgateClientError as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"


def new_outcome(chaos: Chaos, round_: int, kind: str) -> Outcome:
    outcome = Outcome(round_, kind, name=f"chaos-{round_}-{len(chaos.outcomes)}")
    chaos.outcomes.append(outcome)
    return outcome


async def check_rules(chaos: Chaos, round_: int) -> None:
    """Round 0 persists the workspace allow rules; later rounds find them all listed."""
    async with CallgateClient(chaos.target, token=chaos.token("admin"), **CLIENT) as admin:
        if not chaos.rule_ids:
            scope = f"workspace:{chaos.workspace}"
            for kind, match in (
                ("command.execute", "Bash(sleep:*)"),
                ("command.execute", "Bash(echo:*)"),
                ("command.execute", "Bash(printf:*)"),
                ("filesystem.write", f"tree:{chaos.workspace}"),
            ):
                rule = await admin.approvals.create_rule(RuleEffect.ALLOW, kind, match, scope)
                chaos.rule_ids.append(rule.rule_id)
        listed = {rule.rule_id: rule for rule in await admin.approvals.list_rules()}
    missing = [rule_id for rule_id in chaos.rule_ids if rule_id not in listed]
    assert not missing, f"round {round_}: persisted rules lost: {missing}; {chaos.context()}"


async def probe(session: ClientSession, chaos: Chaos, round_: int) -> None:
    """A command only a persisted rule allows still runs (headless: it would be denied)."""
    outcome = new_outcome(chaos, round_, "probe")
    tool, args = call_for(chaos, "probe", outcome.name)
    call = await session.prepare(tool, args, evaluate=True)
    outcome.execution_id, outcome.state = call.execution_id, call.state.value
    assert call.state is State.APPROVED, (
        f"round {round_}: the persisted rule no longer allows the probe: {call.state} "
        f"{call.denial}; {chaos.context()}"
    )
    assert call.decision is not None
    assert set(call.decision.rule_ids) & set(chaos.rule_ids), call.decision
    invoked = await session.invoke(call.execution_id)
    outcome.state = invoked.call.state.value
    assert invoked.call.state is State.SUCCEEDED, (invoked, chaos.context())
    assert "".join(chaos.output_parts) in invoked.result.text


async def killed_round(chaos: Chaos, round_: int, rng: random.Random) -> None:
    """Start (or restart), run a random mix of calls, and kill -9 the server among them.

    Every call starts before the kill, at a random point; the kill may land in any RPC. Round 0
    kills only once a sleep of its first call runs (and up to 0.3 s later), so at least one
    round certainly leaves tool processes and an invoked call behind. Round 1 starts only
    sandboxes, all at once, and kills the moment the server has a third child: while one is
    still setting up, the window in which `--die-with-parent` alone does not hold
    (containers/bubblewrap#633)."""
    await start_server(chaos)
    await check_rules(chaos, round_)
    kinds = rng.choices(list(KINDS), weights=list(KINDS.values()), k=CALLS_PER_ROUND - 1)
    kill_after = rng.uniform(*KILL_AFTER)
    delays = [rng.uniform(0, kill_after) for _ in kinds]
    if round_ == 0:
        kill_after = rng.uniform(0, 0.3)  # once the first sleep runs
        delays = [rng.uniform(0, kill_after) for _ in kinds]
        kinds[0], delays[0] = "long", 0.0
    elif round_ == 1:  # every call a sandbox starting at once; kill at the first
        kinds, delays, kill_after = ["long"] * len(kinds), [0.0] * len(kinds), 0.0
    async with CallgateClient(chaos.target, token=chaos.token("agent"), **CLIENT) as client:
        session = await client.open_session()
        await probe(session, chaos, round_)
        try:
            with anyio.fail_after(START_TIMEOUT + GONE_TIMEOUT + KILL_AFTER[1]):
                async with anyio.create_task_group() as tasks:
                    for kind, delay in zip(kinds, delays, strict=True):
                        outcome = new_outcome(chaos, round_, kind)
                        tasks.start_soon(run_call, session, chaos, outcome, delay)
                    if round_ == 0:
                        while not sleeps(chaos):  # noqa: ASYNC110  # /proc: polled
                            await anyio.sleep(0.01)  # bounded by fail_after
                    elif round_ == 1:
                        assert chaos.process is not None
                        # The third sandbox has just been spawned (or 2 s passed).
                        race_end = time.monotonic() + 2
                        while len(sandboxes(chaos.process.pid)) < 3 and time.monotonic() < race_end:
                            await anyio.lowlevel.checkpoint()  # as tight as /proc is read
                    await anyio.sleep(kill_after)
                    assert chaos.process is not None
                    at_kill = marker_processes(chaos.marker)
                    server = chaos.process.pid
                    parents = cgroup_parents(chaos.state_dir)
                    if parents:  # with cgroups the watchdog guards
                        assert watchdogs(parents), f"no watchdog; {chaos.context()}"
                    os.kill(server, signal.SIGKILL)
                    await wait_exit(chaos, GONE_TIMEOUT)
                    deadline = time.monotonic() + GONE_TIMEOUT
                    while watchdogs(parents):  # /proc: polled
                        assert time.monotonic() < deadline, f"a watchdog stayed; {chaos.context()}"
                        await anyio.sleep(0.02)
        except TimeoutError:
            pytest.fail(f"round {round_}: calls hung or never ran; {chaos.context()}")
    chaos.processes_at_kill.append(len(at_kill))
    await assert_no_survivors(
        chaos, f"kill -9 in round {round_} ({len(at_kill)} tool processes ran then)"
    )


async def stopped_round(chaos: Chaos, round_: int) -> None:
    """Restart once more, keep a foreground and a background sleep running, then SIGTERM:
    exit 0, the process trees gone, every call of the run finished in the journal."""
    await start_server(chaos)
    await check_rules(chaos, round_)
    async with CallgateClient(chaos.target, token=chaos.token("agent"), **CLIENT) as client:
        session = await client.open_session()
        await probe(session, chaos, round_)
        background = new_outcome(chaos, round_, "background")
        await run_call(session, chaos, background, 0)
        assert background.state == "succeeded", (background, chaos.context())
        long = new_outcome(chaos, round_, "long")
        with anyio.fail_after(GONE_TIMEOUT + STOP_TIMEOUT):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(run_call, session, chaos, long, 0)
                # Both sleeps (the background one and the foreground one) are running.
                while len(sleeps(chaos)) < 2:  # noqa: ASYNC110  # /proc: polled
                    await anyio.sleep(0.02)  # bounded by fail_after
                assert chaos.process is not None
                chaos.process.send_signal(signal.SIGTERM)
                code = await wait_exit(chaos, STOP_TIMEOUT)
    assert code == 0, f"SIGTERM: exit code {code}; {chaos.context()}"
    await assert_no_survivors(chaos, "the orderly stop (SIGTERM)")


# ---------------------------------------------------------------------------------- journal


@dataclass(frozen=True)
class Event:
    seq: int
    run_id: str
    kind: str
    session_id: str
    execution_id: str
    data: dict[str, object]


def read_journal(state_dir: Path) -> list[Event]:
    uri = f"file:{state_dir / 'journal.db'}?mode=ro"
    connection = sqlite3.connect(uri, uri=True)
    try:
        rows = connection.execute(
            "SELECT seq, run_id, kind, session_id, execution_id, data FROM events ORDER BY seq"
        ).fetchall()
    finally:
        connection.close()
    return [Event(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in rows]


def is_terminal(event: Event) -> bool:
    return event.kind in ("call.finished", "call.abandoned") or (
        event.kind == "call.decided" and event.data.get("outcome") == "denied"
    )


def journal_problems(events: list[Event], runs_expected: int) -> list[str]:
    """Everything inconsistent in the journal of all runs (the last run stopped in order)."""
    problems: list[str] = []
    seqs = [e.seq for e in events]
    if seqs != list(range(1, len(events) + 1)):
        gaps = sorted(set(range(1, (max(seqs) if seqs else 0) + 1)) - set(seqs))
        problems.append(f"seq is not 1..{len(events)} without gaps (missing: {gaps[:20]})")
    runs: list[str] = []
    for e in events:
        if runs and runs[-1] == e.run_id:
            continue
        if e.run_id in runs:
            problems.append(f"seq {e.seq}: run {e.run_id} resumes after another run started")
            continue
        runs.append(e.run_id)
        if e.kind != "server.started":
            problems.append(f"seq {e.seq}: run {e.run_id} starts with {e.kind}")
    if len(runs) != runs_expected:
        problems.append(f"{len(runs)} server runs in the journal, expected {runs_expected}")
    run_index = {run: i for i, run in enumerate(runs)}

    opened: dict[str, str] = {}  # session -> run
    started_processes: dict[str, str] = {}  # process_id -> run
    abandoned_per_run: dict[str, int] = defaultdict(int)
    by_execution: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        if e.kind == "session.opened":
            opened[e.session_id] = e.run_id
        elif e.kind == "call.abandoned":
            abandoned_per_run[e.run_id] += 1
        elif e.kind == "process.started":
            started_processes[str(e.data.get("process_id"))] = e.run_id
        elif e.kind == "process.ended":
            process_id = str(e.data.get("process_id"))
            if started_processes.get(process_id) != e.run_id:
                problems.append(f"seq {e.seq}: process.ended of {process_id} never started")
        if e.execution_id:
            by_execution[e.execution_id].append(e)
            if e.kind != "call.abandoned" and opened.get(e.session_id) != e.run_id:
                problems.append(f"seq {e.seq}: {e.kind} in a session not opened in its run")
    for e in events:
        if e.kind == "server.started" and e.data.get("abandoned_calls") != abandoned_per_run.get(
            e.run_id, 0
        ):
            problems.append(
                f"seq {e.seq}: server.started says {e.data.get('abandoned_calls')} abandoned "
                f"calls, the run recorded {abandoned_per_run.get(e.run_id, 0)}"
            )

    for execution_id, evs in by_execution.items():
        kinds = [e.kind for e in evs]
        where = f"{execution_id} {kinds}"
        if kinds[0] != "call.prepared" or kinds.count("call.prepared") != 1:
            problems.append(f"{where}: not exactly one call.prepared, first")
            continue
        run = evs[0].run_id
        terminals = [i for i, e in enumerate(evs) if is_terminal(e)]
        if len(terminals) > 1:
            problems.append(f"{where}: {len(terminals)} terminal records")
        if terminals and terminals[0] != len(evs) - 1:
            problems.append(f"{where}: records after the terminal one")
        if kinds.count("call.decided") > 1 or kinds.count("call.invoked") > 1:
            problems.append(f"{where}: decided or invoked more than once")
        if "call.invoked" in kinds:
            invoked = kinds.index("call.invoked")
            decided = [e for e in evs[:invoked] if e.kind == "call.decided"]
            if not decided or decided[0].data.get("outcome") != "approved":
                problems.append(f"{where}: invoked without an approving decision before it")
        if "process.started" in kinds and (
            "call.invoked" not in kinds
            or kinds.index("process.started") < kinds.index("call.invoked")
        ):
            problems.append(f"{where}: process.started before call.invoked")
        for e in evs:
            if e.kind == "call.abandoned":
                if run_index.get(e.run_id) != run_index[run] + 1:
                    problems.append(f"{where}: abandoned by run {e.run_id}, not the next run")
                if e.data.get("previous_run_id") != run:
                    problems.append(f"{where}: abandoned names run {e.data.get('previous_run_id')}")
            elif e.run_id != run:
                problems.append(f"{where}: {e.kind} recorded by another run ({e.run_id})")
        open_in_its_run = not any(is_terminal(e) and e.run_id == run for e in evs)
        if open_in_its_run and run_index[run] == len(runs) - 1:
            problems.append(f"{where}: left open by the orderly stop")
        elif open_in_its_run and "call.abandoned" not in kinds:
            problems.append(f"{where}: left open by the killed run, never abandoned")
    return problems


def acknowledged_problems(events: list[Event], outcomes: list[Outcome]) -> list[str]:
    """Records a client was answered for but the journal does not have."""
    problems = []
    by_execution: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        if e.execution_id:
            by_execution[e.execution_id].append(e)
    for outcome in outcomes:
        if not outcome.execution_id:
            continue
        evs = by_execution.get(outcome.execution_id, [])
        kinds = [e.kind for e in evs]
        where = f"round {outcome.round} {outcome.kind} {outcome.execution_id} ({kinds})"
        if "call.prepared" not in kinds:
            problems.append(f"{where}: the client got its execution ID, no call.prepared")
        if outcome.state == "denied":
            if not any(e.kind == "call.decided" and e.data.get("outcome") == "denied" for e in evs):
                problems.append(f"{where}: the client was told denied, no call.decided denied")
        elif outcome.state in TERMINAL_STATES:
            finished = [e for e in evs if e.kind == "call.finished"]
            if not finished or finished[0].data.get("state") != outcome.state:
                problems.append(
                    f"{where}: the client was told {outcome.state}, no such call.finished"
                )
            if outcome.state == "succeeded" and "call.invoked" not in kinds:
                problems.append(f"{where}: the client was told succeeded, no call.invoked")
    return problems


# ---------------------------------------------------------------------------------- the test


async def test_kill_9_loses_no_record_and_leaves_no_process(chaos: Chaos) -> None:
    started = time.monotonic()
    rng = random.Random(chaos.seed)  # noqa: S311 - a replayable schedule, not a secret
    for round_ in range(KILLED_ROUNDS):
        await killed_round(chaos, round_, rng)
    await stopped_round(chaos, KILLED_ROUNDS)

    journal_files = sorted(chaos.state_dir.glob("journal.db*"))
    raw = b"".join(path.read_bytes() for path in journal_files)
    events = read_journal(chaos.state_dir)
    calls = [o for o in chaos.outcomes if o.round < KILLED_ROUNDS]
    assert len(calls) == KILLED_ROUNDS * CALLS_PER_ROUND

    problems = journal_problems(events, KILLED_ROUNDS + 1)
    if not any(e.kind == "call.abandoned" for e in events):
        problems.append("no call.abandoned at all: no kill left an invoked call behind")
    if not chaos.processes_at_kill[0]:
        problems.append("round 0 was killed before any tool process ran")
    created = [e.data.get("rule_id") for e in events if e.kind == "rule.created"]
    if created != chaos.rule_ids or any(e.kind == "rule.deleted" for e in events):
        problems.append(f"rule records: created {created}, expected {chaos.rule_ids}")
    secrets_found = [
        name
        for name, value in (
            ("agent token", chaos.token("agent")),
            ("approver token", chaos.token("approver")),
            ("admin token", chaos.token("admin")),
            ("WriteFile content", chaos.secret),
            ("ReadFile content", chaos.seed_text),
            ("command output", "".join(chaos.output_parts)),
        )
        if value.encode() in raw
    ]
    if secrets_found:
        problems.append(f"in the journal files ({journal_files}): {secrets_found}")
    unacknowledged = acknowledged_problems(events, chaos.outcomes)
    summary = "\n".join(
        f"  round {o.round} {o.kind:10} {o.execution_id or '-':40} {o.state or '-':12} {o.error}"
        for o in chaos.outcomes
    )
    report = (
        f"seed {chaos.seed} (CHAOS_SEED={chaos.seed}), {len(events)} journal records\n"
        "journal inconsistencies:\n  "
        + "\n  ".join(problems or ["none"])
        + "\nanswered to a client but not in the journal:\n  "
        + "\n  ".join(unacknowledged or ["none"])
        + f"\nwhat the client saw:\n{summary}"
    )
    assert not problems, report
    assert not unacknowledged, report
    # Reported, not failed (see stuck_in_setup): shown with `pytest -rP`.
    print(
        f"chaos: seed {chaos.seed}, {time.monotonic() - started:.1f} s, "
        f"{len(chaos.stuck_inits)} bubblewrap init(s) stuck in setup (never ran a command)"
    )
    for line in chaos.stuck_inits:
        print("  " + line)
