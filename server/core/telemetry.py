"""The metrics seam: what the lifecycle reports, with no metrics library behind it.

`Lifecycle` calls a `Telemetry` at the few points where a call changes state; `app.py` passes
the Prometheus implementation (`callgate.server.metrics`) when metrics are enabled, and the
no-op `NO_TELEMETRY` otherwise. Every argument is a bounded value: a registered tool name, a
`State`, a `DecisionOutcome`, a `Decider` or a `Phase`, never a path, command, ID or principal.
"""

from __future__ import annotations

import enum
from typing import Protocol

from .models import State


class DecisionOutcome(enum.StrEnum):
    APPROVED = "approved"
    DENIED = "denied"
    # No approver decided within the approval timeout (the call ends DENIED).
    TIMED_OUT = "timed_out"


class Decider(enum.StrEnum):
    """Who decided: the policy (rules, access defaults, headless mode, timeouts) or a human
    approver. Never the approver's name."""

    POLICY = "policy"
    HUMAN = "human"


class Phase(enum.StrEnum):
    PREPARE = "prepare"
    APPROVE = "approve"
    INVOKE = "invoke"


class Telemetry(Protocol):
    """Called on the request path: implementations must be cheap and must not block."""

    def call_finished(self, tool: str, state: State) -> None:
        """A call reached a terminal state."""

    def decided(self, outcome: DecisionOutcome, decider: Decider) -> None:
        """A call AWAITING or PREPARED was approved or denied."""

    def phase(self, phase: Phase, seconds: float) -> None:
        """How long one Prepare, Approve or Invoke took inside the lifecycle."""


class NoTelemetry:
    """The default: records nothing."""

    def call_finished(self, tool: str, state: State) -> None:
        pass

    def decided(self, outcome: DecisionOutcome, decider: Decider) -> None:
        pass

    def phase(self, phase: Phase, seconds: float) -> None:
        pass


NO_TELEMETRY: Telemetry = NoTelemetry()
