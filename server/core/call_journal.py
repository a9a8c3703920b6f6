"""What the journal records of a call's decisions and ends (design section 8)."""

from __future__ import annotations

import logging

from .calls import CallRecord
from .journal import Journal, JsonValue
from .models import State
from .sessions import Clock

log = logging.getLogger("callgate.server.core.lifecycle")


def journal_change(
    journal: Journal, clock: Clock, owner: str, record: CallRecord, previous: State
) -> None:
    """Journal a decision or an end (RUNNING is journaled durably by invoke itself)."""
    state = record.state
    data: dict[str, JsonValue]
    if state in (State.APPROVED, State.DENIED) and previous is not State.RUNNING:
        kind = "call.decided"
        decision = record.decision
        denial = record.denial if state is State.DENIED else None
        data = {
            "outcome": state.value,
            "decided_by": decision.decided_by if decision is not None else "policy",
            "rule_ids": list(decision.rule_ids) if decision is not None else [],
            "denial_kind": denial.kind.value if denial is not None else "",
            "read_only": decision.read_only if decision is not None else False,
        }
    elif state.is_terminal:
        kind = "call.finished"
        result = record.result
        duration = None
        if previous is State.RUNNING and record.run_started is not None:
            duration = round(clock.monotonic() - record.run_started, 6)
        data = {
            "state": state.value,
            "is_error": result.is_error if result is not None else False,
            "error_code": result.error_code if result is not None else "",
            "exit_code": result.exit_code if result is not None else None,
            "duration_seconds": duration,
        }
    else:
        return
    journal.record(
        kind,
        session_id=record.session_id,
        execution_id=record.execution_id,
        principal=owner,
        data=data,
    )
    # One log line per end that is not a policy-allowed success, and per decision that is a
    # denial or a human's, with the IDs and no arguments or output (the journal has all).
    by_policy = record.decision is not None and record.decision.decided_by == "policy"
    if kind == "call.decided" and state is State.APPROVED and by_policy:
        return
    # A call the policy allowed that ran well is routine (at debug): the journal has it; the
    # log keeps at info what an operator looks at (denials, human decisions, failures).
    level = (
        logging.DEBUG
        if kind == "call.finished" and state is State.SUCCEEDED and by_policy
        else logging.INFO
    )
    if log.isEnabledFor(level):
        log.log(
            level,
            "call decided" if kind == "call.decided" else "call finished",
            extra={
                "session_id": record.session_id,
                "execution_id": record.execution_id,
                "detail": " ".join(
                    str(v)
                    for v in (
                        record.tool_name,
                        state.value,
                        data.get("decided_by") or data.get("error_code") or "",
                    )
                    if v
                ),
            },
        )
