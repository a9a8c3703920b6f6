"""What the server keeps of calls, and the budget that bounds it (design section 7).

An open call (PREPARED, AWAITING_APPROVAL, APPROVED, RUNNING) keeps its frozen artifact: that
is what Invoke runs. Once a call ends (denied, expired, cancelled, succeeded or failed) it keeps
only what GetCall and ListCalls return — summary, requirements, digest, decision or denial and a
result capped at `max_result_bytes` — and the artifact, the approver's copy of the command and
the rule candidates are let go.

Every kept call is accounted an estimate of the bytes it holds, computed once per change (never
by walking objects): the arguments' size while it is open, its summary, requirements and result
after. The sum is bounded server-wide (`limits.max_retained_bytes`) and, for open calls, per
session (`limits.max_retained_bytes_per_session`, so one session cannot take the budget from the
others). A Prepare that would exceed a bound first lets the oldest ended calls go, server-wide,
and is otherwise refused with RESOURCE_EXHAUSTED `MEMORY_BUDGET`, changing nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator

from .calls import CallRecord
from .errors import ResourceExhausted
from .models import ToolResult
from .tool import Prepared

log = logging.getLogger(__name__)

# What a record costs beyond its strings: the record, its snapshot fields, events, datetimes,
# dict entries (measured with tracemalloc at about 2.5 KiB; rounded up).
RECORD_OVERHEAD = 3 << 10


def open_bytes(arguments_json: str, prepared: Prepared) -> int:
    """An open call's estimate: its arguments (the artifact holds them, decoded and frozen),
    what the approver is shown, and the record."""
    return (
        RECORD_OVERHEAD
        + 2 * len(arguments_json)
        + len(prepared.summary)
        + len(prepared.command)
        + sum(len(r.description) + len(r.match) for r in prepared.requirements)
        + sum(len(c.description) + len(c.match) for c in prepared.candidates)
        + (len(prepared.preview.text) if prepared.preview is not None else 0)
    )


def ended_bytes(record: CallRecord) -> int:
    """An ended call's estimate: what GetCall returns of it."""
    size = RECORD_OVERHEAD + len(record.summary)
    size += sum(len(r.description) + len(r.match) for r in record.requirements)
    if record.denial is not None:
        size += len(record.denial.description)
    if record.decision is not None:
        size += len(record.decision.reason)
    if record.result is not None:
        size += len(record.result.text) + len(record.result.json)
    return size


def kept_result(result: ToolResult, max_bytes: int) -> ToolResult:
    """The result an ended call keeps: itself when it fits in `max_bytes`, else its text cut
    to fit (on a character boundary) with the structured part dropped, and `omitted_bytes`
    counting everything left out. Invoke has already returned the whole result to its caller."""
    text_bytes = len(result.text.encode("utf-8", "surrogatepass"))
    json_bytes = len(result.json.encode("utf-8", "surrogatepass"))
    if text_bytes + json_bytes <= max_bytes:
        return result
    note = (
        f"\n[callgate keeps at most {max_bytes} bytes of an ended call's result; Invoke returned "
        "all of it]"
    )
    room = max(0, max_bytes - len(note))
    cut = result.text.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore")
    kept = len(cut.encode("utf-8", "surrogatepass"))
    return ToolResult(
        text=cut + note,
        is_error=result.is_error,
        error_code=result.error_code,
        json="",
        exit_code=result.exit_code,
        omitted_bytes=result.omitted_bytes + (text_bytes - kept) + json_bytes,
    )


def release(record: CallRecord, max_result_bytes: int) -> None:
    """Let an ended call's raw arguments go: what remains is what GetCall returns."""
    record.artifact = None
    record.dry_run = record.dry_run_plan = record.apply_plan = None
    record.candidates = ()
    record.command = ""
    record.working_directory = ""
    record.preview = None
    if record.result is not None:
        record.result = kept_result(record.result, max_result_bytes)


class Retention:
    """The accounting of kept calls; the lifecycle removes what this says to evict."""

    def __init__(self, max_bytes: int, max_open_bytes_per_session: int) -> None:
        self.max_bytes = max_bytes
        self.max_open_bytes_per_session = max_open_bytes_per_session
        self.total = 0
        self._open_by_session: dict[str, int] = {}
        # Ended calls, oldest first: the first to go when the budget is short.
        self._ended: OrderedDict[str, CallRecord] = OrderedDict()
        self._ended_total = 0
        self._sizes: dict[str, int] = {}

    def check(self, session_id: str, size: int) -> int:
        """Raise MEMORY_BUDGET unless a new open call of `size` bytes can be kept, counting
        every ended call as evictable; return how many bytes must be let go first."""
        session_open = self._open_by_session.get(session_id, 0)
        if session_open + size > self.max_open_bytes_per_session:
            raise ResourceExhausted(
                "MEMORY_BUDGET",
                "The session's open calls hold "
                f"{session_open >> 20} MiB of arguments, its share of the server's memory "
                "budget; invoke or cancel some of them first.",
                metadata={"limit_bytes": str(self.max_open_bytes_per_session)},
            )
        excess = self.total + size - self.max_bytes
        if excess > self._ended_total:
            raise ResourceExhausted(
                "MEMORY_BUDGET",
                "The server's memory budget for kept calls is spent by open calls; invoke or "
                "cancel open calls, or close a session, then retry.",
                metadata={"limit_bytes": str(self.max_bytes)},
            )
        return max(0, excess)

    def oldest_ended(self, needed: int) -> Iterator[CallRecord]:
        """The oldest ended calls whose bytes add up to at least `needed` (not yet removed:
        the caller forgets each, which calls `forget`)."""
        freed = 0
        for record in list(self._ended.values()):
            if freed >= needed:
                return
            freed += self._sizes.get(record.execution_id, 0)
            yield record

    def add(self, record: CallRecord, size: int) -> None:
        self._sizes[record.execution_id] = size
        self.total += size
        self._open_by_session[record.session_id] = (
            self._open_by_session.get(record.session_id, 0) + size
        )

    def ended(self, record: CallRecord) -> None:
        """The call reached a terminal state and was released: account what it still keeps."""
        old = self._sizes.get(record.execution_id)
        if old is None:
            return
        open_bytes = self._open_by_session.get(record.session_id, 0) - old
        if open_bytes > 0:
            self._open_by_session[record.session_id] = open_bytes
        else:
            self._open_by_session.pop(record.session_id, None)
        new = ended_bytes(record)
        self._sizes[record.execution_id] = new
        self.total += new - old
        self._ended[record.execution_id] = record
        self._ended_total += new

    def forget(self, record: CallRecord) -> None:
        size = self._sizes.pop(record.execution_id, None)
        if size is None:
            return
        self.total -= size
        if self._ended.pop(record.execution_id, None) is not None:
            self._ended_total -= size
        else:
            open_bytes = self._open_by_session.get(record.session_id, 0) - size
            if open_bytes > 0:
                self._open_by_session[record.session_id] = open_bytes
            else:
                self._open_by_session.pop(record.session_id, None)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] | None = getattr(ctypes.CDLL(name), "malloc_trim", None)
    except OSError:
        return None
    return trim


def return_memory_to_os() -> None:
    """Ask glibc to give freed heap pages back (after a session closes or many calls were let
    go); a no-op with another C library."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
