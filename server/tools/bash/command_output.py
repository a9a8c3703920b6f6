"""A foreground command's output and lifetime: its first and last bytes kept, streamed as it
comes, its process tree terminated at the time limit or when the call is cancelled."""

from __future__ import annotations

import anyio
from anyio import ClosedResourceError, EndOfStream

from ...core.models import ToolResult
from ...core.tool import OutputSink
from ...net.egress import refused_footer
from ...sandbox.runner import RunningCommand

OUTPUT_HEAD_BYTES = 16 << 10
OUTPUT_TAIL_BYTES = 16 << 10
KILL_GRACE_SECONDS = 2.0
LEFTOVER_GRACE_SECONDS = 0.5
DRAIN_AFTER_EXIT_SECONDS = 2.0
# What a result says when the command ran into one of the sandbox's limits (sandbox/limits.py).
LIMIT_FOOTERS = {
    "pids_limit": "stopped by the sandbox's limit on processes (a fork failed)",
    "memory_limit": "stopped by the sandbox's memory limit (the kernel killed a process)",
    "cpu_limit": "stopped by the sandbox's CPU time limit",
    "file_size_limit": "stopped by the sandbox's file size limit",
}
# Large reads keep streaming fast: fewer wake-ups, fewer and larger output messages.
READ_CHUNK_BYTES = 256 << 10


class OutputCapture:
    """Keeps the first `head` and the last `tail` bytes of a stream and counts the rest."""

    def __init__(self, head: int = OUTPUT_HEAD_BYTES, tail: int = OUTPUT_TAIL_BYTES) -> None:
        self._head_max = head
        self._tail_max = tail
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        view = memoryview(chunk)
        room = self._head_max - len(self.head)
        if room > 0:
            self.head += view[:room]
            view = view[room:]
        if not view:
            return
        if len(view) >= self._tail_max:
            self.tail[:] = view[len(view) - self._tail_max :]
        else:
            self.tail += view
            excess = len(self.tail) - self._tail_max
            if excess > 0:
                del self.tail[:excess]

    @property
    def omitted(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if not self.omitted:
            return head + tail
        separator = "" if head.endswith("\n") else "\n"
        return f"{head}{separator}[... {self.omitted} bytes omitted ...]\n{tail}"


def _with_footer(text: str, footer: str) -> str:
    if text and not text.endswith("\n"):
        text += "\n"
    return text + footer


async def _pump(
    running: RunningCommand, capture: OutputCapture, sink: OutputSink | None, done: anyio.Event
) -> None:
    try:
        while True:
            chunk = await running.output.receive(READ_CHUNK_BYTES)
            capture.add(chunk)
            if sink is not None:
                await sink(chunk)
    except (EndOfStream, ClosedResourceError):
        pass
    finally:
        done.set()


async def run_foreground(
    running: RunningCommand,
    time_limit: float,
    sink: OutputSink | None,
    *,
    kill_grace: float = KILL_GRACE_SECONDS,
) -> ToolResult:
    """Collect and stream a started command's output until it exits or `time_limit` passes;
    whatever happens (cancellation included), its process tree is gone on return."""
    capture = OutputCapture()
    drained = anyio.Event()
    exit_code: int | None = None
    finished = False
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_pump, running, capture, sink, drained)
            with anyio.move_on_after(time_limit):
                exit_code = await running.wait()
            with anyio.CancelScope(shield=True):
                if exit_code is None:
                    await running.terminate_tree(kill_grace)
                else:
                    await running.terminate_tree(LEFTOVER_GRACE_SECONDS)
            with anyio.move_on_after(DRAIN_AFTER_EXIT_SECONDS):
                await drained.wait()
            group.cancel_scope.cancel()
        finished = True
    finally:
        with anyio.CancelScope(shield=True):
            if not finished:
                await running.terminate_tree(kill_grace)
            await running.output.aclose()
            if running.stdin is not None:
                await running.stdin.aclose()
    text = capture.text()
    refused = refused_footer(running.network_refused)
    if refused:
        text = _with_footer(text, refused)
    hit = running.limit_hit
    if hit is not None:
        return ToolResult(
            text=_with_footer(text, f"[{LIMIT_FOOTERS[hit]}; exit code: {exit_code}]"),
            is_error=True,
            error_code=hit,
            exit_code=exit_code,
            omitted_bytes=capture.omitted,
        )
    if exit_code is None:
        return ToolResult(
            text=_with_footer(
                text, f"[timed out after {time_limit:g} s; the process tree was terminated]"
            ),
            is_error=True,
            error_code="timed_out",
            omitted_bytes=capture.omitted,
        )
    return ToolResult(
        text=_with_footer(text, f"[exit code: {exit_code}]"),
        exit_code=exit_code,
        omitted_bytes=capture.omitted,
    )
