"""Prometheus /metrics: counters and gauges move with real calls, and no label value carries
a path, a command, an ID or a principal name."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from callgate.v1 import tool_call_pb2
from tests.support.calls import approve, open_session, prepare, run
from tests.support.server import Harness, serve

pytestmark = pytest.mark.anyio

_SAMPLE = re.compile(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$")


@pytest.fixture
async def metered(tmp_path: Path) -> AsyncIterator[Harness]:
    async with serve(tmp_path, approval_mode="headless", metrics_listen="127.0.0.1:0") as running:
        yield running


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback http URL
        body: bytes = response.read()
    return body.decode()


async def _scrape(harness: Harness) -> str:
    assert harness.running.metrics_address is not None
    url = f"http://{harness.running.metrics_address}/metrics"
    return await anyio.to_thread.run_sync(_get, url)


def _samples(text: str) -> dict[tuple[str, str], float]:
    """(name, labels) -> value, for every sample line of the exposition."""
    samples: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        match = _SAMPLE.match(line)
        assert match, line
        samples[(match[1], match[2] or "")] = float(match[3])
    return samples


async def test_metrics_count_calls_decisions_phases_and_sessions(metered: Harness) -> None:
    """An allowed read, a denied .env read and a gated write (headless: denied) show up in the
    call, decision and phase metrics, and the open session in the sessions gauge."""
    (metered.workspace / "a.txt").write_text("alpha\n")
    (metered.workspace / ".env").write_text("SECRET=1\n")
    stub = metered.stub()
    session = await open_session(stub)
    read = await run(stub, session, "ReadFile", {"path": "a.txt"})
    assert read.call.state == tool_call_pb2.STATE_SUCCEEDED
    secret = await prepare(stub, session, "ReadFile", {"path": ".env"})
    assert (await approve(stub, session, secret.execution_id)).state == tool_call_pb2.STATE_DENIED
    write = await prepare(stub, session, "WriteFile", {"path": "b.txt", "content": "x"})
    assert (await approve(stub, session, write.execution_id)).state == tool_call_pb2.STATE_DENIED

    samples = _samples(await _scrape(metered))

    def value(name: str, labels: str = "") -> float:
        return samples.get((name, labels), 0.0)

    assert value("callgate_calls_total", 'state="succeeded",tool="ReadFile"') == 1
    assert value("callgate_calls_total", 'state="denied",tool="ReadFile"') == 1
    assert value("callgate_calls_total", 'state="denied",tool="WriteFile"') == 1
    assert value("callgate_decisions_total", 'decider="policy",outcome="approved"') == 1
    assert value("callgate_decisions_total", 'decider="policy",outcome="denied"') == 2
    assert value("callgate_decisions_total", 'decider="human",outcome="approved"') == 0
    assert value("callgate_phase_seconds_count", 'phase="prepare"') == 3
    assert value("callgate_phase_seconds_count", 'phase="approve"') == 2
    assert value("callgate_phase_seconds_count", 'phase="invoke"') == 1
    assert value("callgate_sessions") == 1
    assert value("callgate_running_calls") == 0
    assert value("callgate_running_processes") == 0
    assert value("callgate_pending_approvals") == 0


async def test_metrics_labels_carry_no_paths_commands_ids_or_principals(
    metered: Harness,
) -> None:
    """Label values are tool names, states, outcomes, deciders and phases only."""
    (metered.workspace / ".env").write_text("SECRET=1\n")
    stub = metered.stub()
    session = await open_session(stub)
    await prepare(stub, session, "ReadFile", {"path": ".env"}, evaluate=True)
    await prepare(stub, session, "Bash", {"command": "echo marker-7f3a"}, evaluate=True)
    await run(stub, session, "Glob", {"pattern": "*"})
    text = await _scrape(metered)
    labels = " ".join(labels for _, labels in _samples(text))
    forbidden = [str(metered.workspace), "/", "ses_", "call_", "loop_", ".env", "marker-7f3a"]
    forbidden += ["agent", "approver", "admin"]
    for needle in forbidden:
        assert needle not in labels, needle
    assert session not in text


async def test_metrics_are_off_without_an_address(harness: Harness) -> None:
    """No metrics_listen: no endpoint, and the lifecycle reports to the no-op telemetry."""
    assert harness.running.metrics_address is None
    assert harness.app.metrics is None
