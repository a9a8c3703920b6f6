"""AskUser: a question for the human, answered through ApprovalService.Answer (design section 5).

It needs no requirement (the policy approves it) and is frozen at Prepare like every tool.
Invoke publishes the question on the approval board (WatchApprovals) and waits for an answer:
`no_answer` after the timeout, `no_user` at once when the server runs headless.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, ClassVar

import anyio
from pydantic import Field

from callgate.server.core.board import ApprovalBoard, PendingQuestion
from callgate.server.core.errors import arguments_invalid
from callgate.server.core.models import State, ToolResult
from callgate.server.core.tool import Arguments, Artifact, Prepared, Tool, ToolContext

MAX_QUESTION_CHARS = 4096
MAX_CHOICES = 16
MAX_CHOICE_CHARS = 256
DEFAULT_TIMEOUT_SECONDS = 600.0
_SUMMARY_CHARS = 80


class AskUserArguments(Arguments):
    question: Annotated[str, Field(min_length=1, max_length=MAX_QUESTION_CHARS)] = Field(
        description="The question for the user."
    )
    choices: list[str] | None = Field(
        default=None,
        description=(
            f"Optional answers to choose from (at most {MAX_CHOICES}, distinct, non-empty, "
            f"each at most {MAX_CHOICE_CHARS} characters); the user may also answer 'other'."
        ),
    )


class AskUserArtifact(Artifact):
    question: str
    choices: tuple[str, ...]


class AskUser(Tool[AskUserArguments, AskUserArtifact]):
    name: ClassVar[str] = "AskUser"
    description: ClassVar[str] = (
        "Ask the human user a question and wait for the answer (up to the server's ask "
        "timeout). With `choices`, the answer is one of them or 'other'. The result text is "
        'the answer; result.json is {"answer": ...}. Fails with no_user when no human is '
        "attached (headless server) and no_answer when nobody answers in time."
    )
    arguments: ClassVar[type[Arguments]] = AskUserArguments
    artifact: ClassVar[type[Artifact]] = AskUserArtifact
    requirement_kinds: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        board: ApprovalBoard,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        headless: bool = False,
    ) -> None:
        self.board = board
        self.timeout_seconds = timeout_seconds
        self.headless = headless

    def prepare_args(self, args: AskUserArguments, ctx: ToolContext) -> Prepared:
        if not args.question.strip():
            raise arguments_invalid("question", "the question must not be blank")
        choices = tuple(args.choices or ())
        if len(choices) > MAX_CHOICES:
            raise arguments_invalid("choices", f"at most {MAX_CHOICES} choices are allowed")
        for index, choice in enumerate(choices):
            if not choice.strip() or len(choice) > MAX_CHOICE_CHARS:
                raise arguments_invalid(
                    f"choices[{index}]",
                    f"a choice must be non-empty and at most {MAX_CHOICE_CHARS} characters",
                )
        if len(set(choices)) != len(choices):
            raise arguments_invalid("choices", "the choices must be distinct")
        first_line = args.question.strip().splitlines()[0]
        if len(first_line) > _SUMMARY_CHARS:
            first_line = first_line[: _SUMMARY_CHARS - 3] + "..."
        return Prepared(
            summary=f"AskUser: {first_line}",
            requirements=(),
            artifact=AskUserArtifact(question=args.question, choices=choices),
        )

    async def run(self, artifact: AskUserArtifact, ctx: ToolContext) -> ToolResult:
        if self.headless:
            return ToolResult.error(
                "no_user", "No user can answer: the server runs headless. Decide without asking."
            )
        deadline = datetime.now(UTC) + timedelta(seconds=self.timeout_seconds)
        question = self.board.ask(
            PendingQuestion(
                execution_id=ctx.execution_id,
                session_id=ctx.session_id,
                question=artifact.question,
                choices=artifact.choices,
                requested_by=ctx.principal,
                deadline=deadline,
            )
        )
        outcome = State.CANCELLED
        try:
            with anyio.move_on_after(self.timeout_seconds):
                await question.answered.wait()
            if question.answer is None:
                outcome = State.FAILED
                return ToolResult.error(
                    "no_answer",
                    f"Nobody answered within {self.timeout_seconds:g} seconds.",
                )
            outcome = State.SUCCEEDED
            return ToolResult(text=question.answer, json=json.dumps({"answer": question.answer}))
        finally:
            # No-op when Answer already resolved it.
            self.board.resolve(ctx.execution_id, outcome)
