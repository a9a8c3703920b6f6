"""Prometheus metrics (design section 9): the `Telemetry` the lifecycle reports to, on a
registry of its own, served as `/metrics` over HTTP when `metrics_listen` is set.

Label values are bounded sets only: registered tool names, call states, decision outcomes,
decider kinds (`policy` | `human`) and phases. Never a path, a command, an ID or a principal.
Children are resolved once, up front, so the request path does a dict lookup and an add.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from callgate.server.config import ConfigError
from callgate.server.core.models import State
from callgate.server.core.telemetry import Decider, DecisionOutcome, Phase

# Sub-millisecond policy decisions up to commands and approvals that take minutes.
PHASE_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip
# A tool name that is not registered (never expected) is counted under this label.
OTHER_TOOL = "other"


class PrometheusTelemetry:
    """Counters, a phase histogram and scrape-time gauges on a dedicated registry."""

    def __init__(self, tool_names: Iterable[str]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        calls = Counter(
            "callgate_calls",
            "Tool calls that reached a final state, by tool and state.",
            ("tool", "state"),
            registry=self.registry,
        )
        decisions = Counter(
            "callgate_decisions",
            "Approval decisions, by outcome and by who decided (policy or a human).",
            ("outcome", "decider"),
            registry=self.registry,
        )
        phases = Histogram(
            "callgate_phase_seconds",
            "Time spent in Prepare, Approve (including waiting for a human) and Invoke.",
            ("phase",),
            buckets=PHASE_BUCKETS,
            registry=self.registry,
        )
        terminal = [s for s in State if s.is_terminal]
        names = {*tool_names, OTHER_TOOL}
        self._calls = {
            (tool, state): calls.labels(tool, state.value) for tool in names for state in terminal
        }
        self._other = {state: self._calls[(OTHER_TOOL, state)] for state in terminal}
        self._decisions = {
            (o, d): decisions.labels(o.value, d.value) for o in DecisionOutcome for d in Decider
        }
        self._phases = {p: phases.labels(p.value) for p in Phase}
        self._gauges = {
            name: Gauge(name, doc, registry=self.registry)
            for name, doc in (
                ("callgate_sessions", "Open sessions."),
                ("callgate_running_calls", "Tool calls running now."),
                ("callgate_running_processes", "Supervised background processes running now."),
                ("callgate_pending_approvals", "Calls awaiting a human approval."),
                ("callgate_retained_bytes", "Bytes kept calls hold (an estimate, see retention)."),
                ("callgate_retained_budget_bytes", "The budget of retained bytes."),
            )
        }

    def watch(
        self,
        *,
        sessions: Callable[[], float],
        running_calls: Callable[[], float],
        running_processes: Callable[[], float],
        pending_approvals: Callable[[], float],
        retained_bytes: Callable[[], float],
        retained_budget_bytes: Callable[[], float],
    ) -> None:
        """Read the gauges from the live objects at scrape time."""
        self._gauges["callgate_sessions"].set_function(sessions)
        self._gauges["callgate_running_calls"].set_function(running_calls)
        self._gauges["callgate_running_processes"].set_function(running_processes)
        self._gauges["callgate_pending_approvals"].set_function(pending_approvals)
        self._gauges["callgate_retained_bytes"].set_function(retained_bytes)
        self._gauges["callgate_retained_budget_bytes"].set_function(retained_budget_bytes)

    # ------------------------------------------------------------------ Telemetry

    def call_finished(self, tool: str, state: State) -> None:
        child = self._calls.get((tool, state)) or self._other.get(state)
        if child is not None:
            child.inc()

    def decided(self, outcome: DecisionOutcome, decider: Decider) -> None:
        self._decisions[(outcome, decider)].inc()

    def phase(self, phase: Phase, seconds: float) -> None:
        self._phases[phase].observe(seconds)


class MetricsServer:
    """`/metrics` over HTTP on its own thread (prometheus_client's server); stop() ends it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        host = str(host)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(address: str, registry: CollectorRegistry) -> MetricsServer:
    """Start serving `registry` on host:port (port 0: any free port)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"config key metrics_listen: {address!r} is not host:port")
    server, thread = start_http_server(int(port), addr=host.strip("[]"), registry=registry)
    return MetricsServer(server, thread)
