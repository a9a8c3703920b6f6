"""Background Bash (`background: true`): the `BackgroundStarter` that starts an approved Bash
call under the session's process supervisor and returns at once with its process ID and
whatever output it produced in its first moments (design section 5)."""

from __future__ import annotations

import anyio

from ...core.models import ToolResult
from ...core.tool import ToolContext
from ...sandbox.runner import CommandRunner, CommandStartError
from ..processes.process_tools import (
    ProcessServices,
    describe,
    error_result,
    json_result,
    process_limit,
    read_output,
)
from ..processes.supervisor import ProcessLimitReached, StopMode, SupervisorClosed, WaitMode
from .artifact import BashArtifact
from .command_spec import CommandRefused, CommandSettings, command_spec

# The result of a start shows up to this much output, waiting at most this long for any.
FIRST_OUTPUT_BYTES = 4 << 10
FIRST_OUTPUT_WAIT_SECONDS = 0.05


class SupervisedBash:
    """Implements `bash.BackgroundStarter` on the sessions' process supervisors."""

    def __init__(
        self,
        services: ProcessServices,
        runner: CommandRunner,
        settings: CommandSettings,
        *,
        first_output_wait: float = FIRST_OUTPUT_WAIT_SECONDS,
    ) -> None:
        self.services = services
        self.runner = runner
        self.settings = settings
        self.first_output_wait = first_output_wait

    def check_capacity(self, ctx: ToolContext) -> None:
        """For Bash's Prepare of a background call: raise ResourceExhausted `PROCESS_LIMIT`
        when the calling loop (or its session) already runs as many processes as it may.
        `start` checks again (the limit is only certain at run time: `process_limit`)."""
        self.services.check_capacity(ctx)

    async def start(self, artifact: BashArtifact, ctx: ToolContext) -> ToolResult:
        """Start the frozen command with a stdin pipe and no deadline unless it has a timeout.
        Result JSON: the ProcessOutput fields of the new process from cursor 0."""
        # The same re-checks and the same spec as a foreground command, plus stdin.
        try:
            spec = await command_spec(artifact, ctx, self.settings, stdin=True)
        except CommandRefused as refused:
            return refused.result
        supervisor = self.services.supervisor(ctx)
        try:
            process = await supervisor.start(
                ctx.loop.loop_id,
                artifact.command,
                lambda: self.runner.start(spec),
                artifact.timeout,
                ctx.execution_id,
            )
        except ProcessLimitReached as exc:
            return process_limit(exc)
        except SupervisorClosed:
            return error_result(
                "session_closing", "The session is closing; no process can start in it."
            )
        except CommandStartError as exc:
            return ToolResult.error(exc.code, str(exc))
        try:
            # A short, bounded look at the first output: a quick command's answer (or a
            # server's banner) comes back with the start instead of costing a round trip.
            await supervisor.wait([(process, 0)], WaitMode.ANY, self.first_output_wait)
            fields, _ = await read_output(process, 0, FIRST_OUTPUT_BYTES, "text")
        except BaseException:
            # The call was cancelled: nobody will learn this process's ID, so it must not run.
            with anyio.CancelScope(shield=True):
                await supervisor.stop(process, StopMode.KILL, 0)
            raise
        return json_result("started " + describe(fields, 0), fields)
