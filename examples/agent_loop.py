"""An agent loop on callgate: a (scripted) model fixes a bug through gated tool calls.

The loop is the one a real Anthropic loop runs: the session's tools go to the model in
Anthropic's format, every `tool_use` block the model answers with runs through callgate
(`run_anthropic_tool_use`: Prepare -> Approve -> Invoke, waiting for a human on gated calls)
and comes back as a `tool_result` block. Only the model is a stand-in (`ScriptedModel`: no
network, no keys); the two commented lines in `run_agent` switch it to the real SDK.

    make run                          # terminal 1: the server
    callgate approvals                # terminal 2: approve the edit and the test run
    python examples/agent_loop.py     # terminal 3: the agent

The agent reads calc.py, edits it (gated: needs an approval), runs the tests with Bash
(gated) and reports. It works on a copy of examples/sample in --workspace, so the sample
stays buggy and the example can be run again.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import anyio
from pydantic import JsonValue

from callgate.client import (
    CallgateClient,
    CallgateClientError,
    anthropic_tools,
    default_state_dir,
    run_anthropic_tool_use,
)

SAMPLE: Final = Path(__file__).resolve().parent / "sample"
SAMPLE_FILES: Final = ("calc.py", "test_calc.py")
TASK: Final = "The tests in test_calc.py fail. Fix calc.py, run the tests and report."
TEST_COMMAND: Final = "python3 test_calc.py"
MAX_TURNS: Final = 10

Block = dict[str, JsonValue]
Message = dict[str, JsonValue]


class ScriptedModel:
    """A stand-in for `anthropic.AsyncAnthropic().messages`: it answers from the conversation
    alone (as a model does), with `tool_use` blocks and finally a text report."""

    async def create(self, *, tools: list[Block], messages: list[Message]) -> Message:
        """The assistant's next message for `messages`, in the Anthropic response shape."""
        offered = {tool["name"] for tool in tools}
        assert {"ReadFile", "EditFile", "Bash"} <= offered, "the session lacks a needed tool"
        results = _last_tool_results(messages)
        turn = sum(1 for message in messages if message["role"] == "assistant")
        if turn == 0:
            return _tool_use(turn, "ReadFile", {"path": "calc.py"})
        (result,) = results
        if result["is_error"]:
            return _report(f"Stopped: {result['content']}")
        if turn == 1:
            bug = re.search(r"return a - b", str(result["content"]))
            if bug is None:
                return _report("calc.py has no `return a - b` in add(); nothing to fix.")
            return _tool_use(
                turn, "EditFile", {"path": "calc.py", "old": "return a - b", "new": "return a + b"}
            )
        if turn == 2:
            return _tool_use(turn, "Bash", {"command": TEST_COMMAND, "timeout": 60})
        output = str(result["content"])
        exit_code = re.search(r"\[exit code: (-?\d+)\]", output)
        passed = exit_code is not None and exit_code.group(1) == "0"
        summary = next((line for line in output.splitlines() if " passed, " in line), "")
        verdict = "the tests passed" if passed else "the tests still fail"
        return _report(f"Edited calc.py: add() now returns a + b; {verdict} ({summary}).")


def _last_tool_results(messages: list[Message]) -> list[Block]:
    """The tool_result blocks of the last user message (none on the first turn)."""
    content = messages[-1]["content"]
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def _tool_use(turn: int, name: str, tool_input: dict[str, JsonValue]) -> Message:
    block: Block = {
        "type": "tool_use",
        "id": f"toolu_{turn:02d}",
        "name": name,
        "input": tool_input,
    }
    return {"role": "assistant", "content": [block], "stop_reason": "tool_use"}


def _report(text: str) -> Message:
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
    }


async def run_agent(target: str, token: str, workspace: Path, wait: float | None) -> str:
    """Runs the loop until the model stops calling tools; returns its final text."""
    async with (
        CallgateClient(target, token=token) as client,
        client.open_session(workspace) as session,
    ):
        tools = anthropic_tools(await session.tools())
        model = ScriptedModel()
        # With a real model (pip install anthropic, ANTHROPIC_API_KEY set) these two lines
        # replace `model = ...` above and `reply = ...` below; nothing else changes:
        #   model = anthropic.AsyncAnthropic().messages
        #   reply = (await model.create(model="claude-sonnet-4-5", max_tokens=4096,
        #            tools=tools, messages=messages)).model_dump(exclude_none=True)
        messages: list[Message] = [{"role": "user", "content": TASK}]
        for _ in range(MAX_TURNS):
            reply = await model.create(tools=tools, messages=messages)
            content = reply["content"]
            assert isinstance(content, list)
            messages.append({"role": "assistant", "content": content})
            uses = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
            if not uses:
                return "\n".join(str(b["text"]) for b in content if isinstance(b, dict))
            results: list[JsonValue] = []
            for block in uses:
                print(f"-> {block['name']} {json.dumps(block['input'])}", flush=True)
                if block["name"] != "ReadFile":
                    print("   (gated: approve it with `callgate approvals`)", flush=True)
                result = await run_anthropic_tool_use(session, block, wait=wait)
                first = (str(result["content"]).splitlines() or [""])[0]
                print(f"<- {'error' if result['is_error'] else 'ok'}: {first}", flush=True)
                results.append(result)
            messages.append({"role": "user", "content": results})
        return f"Stopped after {MAX_TURNS} turns without a report."


def _copy_sample(workspace: Path) -> None:
    """Puts a fresh copy of the sample's files into `workspace` (other files are left alone)."""
    workspace.mkdir(parents=True, exist_ok=True)
    for name in SAMPLE_FILES:
        shutil.copyfile(SAMPLE / name, workspace / name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    state_dir = default_state_dir()
    parser.add_argument(
        "--target",
        default=os.environ.get("CALLGATE_TARGET") or f"unix://{state_dir / 'callgate.sock'}",
        help="server address (default: $CALLGATE_TARGET or the socket in the server's default "
        "state directory, ~/.local/state/callgate/callgate.sock)",
    )
    parser.add_argument(
        "--token-file",
        default=str(state_dir / "tokens" / "agent"),
        help="the agent token (default: tokens/agent in that state directory)",
    )
    parser.add_argument(
        "--workspace",
        default=str(SAMPLE.with_name("sample-run")),
        help="where the sample is copied and worked on; must be inside the server's "
        "allowed roots (default: examples/sample-run)",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=None,
        help="seconds to wait for an approver per call (default: the server's timeout)",
    )
    args = parser.parse_args(argv)
    try:
        token = Path(args.token_file).read_text(encoding="utf-8").strip()
    except OSError as exc:
        print(f"agent: cannot read {args.token_file} ({exc.strerror}); start the server first")
        return 2
    workspace = Path(args.workspace).resolve()
    _copy_sample(workspace)
    try:
        report = anyio.run(run_agent, args.target, token, workspace, args.wait)
    except CallgateClientError as exc:
        print(f"agent: {exc.reason or exc.code}: {exc.message}", file=sys.stderr)
        return 2
    print(f"REPORT: {report}")
    return 0 if "the tests passed" in report else 1


if __name__ == "__main__":
    sys.exit(main())
