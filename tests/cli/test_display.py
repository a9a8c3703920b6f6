"""What an approver reads is complete and cannot be disguised by what the server relays."""

from __future__ import annotations

import io
import unicodedata
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from callgate.cli.console import wants_colour
from callgate.cli.display import (
    count_hidden,
    render_approval,
    render_question,
    render_rules,
    visible,
)
from callgate.client import (
    CallgateClient,
    PendingApproval,
    PendingQuestion,
    Preview,
    Requirement,
    RuleCandidate,
    State,
)
from callgate.client.conversion import approval_item_from_proto, rule_from_proto
from callgate.v1 import approval_service_pb2, tool_call_pb2
from tests.client.scripted_server import TIME, call_message
from tests.support.server import serve

DIGEST = "0123456789abcdef" * 4


def _approval(
    command: str = "",
    *,
    summary: str = "WriteFile notes/a.txt",
    match: str = "/ws/notes/a.txt",
    tool: str = "WriteFile",
) -> PendingApproval:
    call = call_message(tool_call_pb2.STATE_AWAITING_APPROVAL, "ex-7", tool_name=tool)
    call.summary = summary
    call.digest = DIGEST
    requirement = tool_call_pb2.Requirement(
        kind="command.execute" if command else "filesystem.write",
        scope="",
        match=command or match,
        description="run a command" if command else f"write {match}",
    )
    call.requirements.append(requirement)
    message = approval_service_pb2.PendingApproval(
        call=call,
        unmet=[requirement],
        candidates=[approval_service_pb2.RuleCandidate(kind=requirement.kind, match=match)],
        command=command,
        working_directory="/ws" if command else "",
        requested_by="agent",
        workspace="/ws",
    )
    message.deadline.FromDatetime(TIME + timedelta(minutes=10))
    item = approval_item_from_proto(approval_service_pb2.WatchApprovalsResponse(approval=message))
    assert isinstance(item, PendingApproval)
    return item


def _pane_safe(text: str) -> bool:
    """No character a terminal would act on or hide, except the newlines between lines."""
    return all(
        unicodedata.category(char) not in {"Cc", "Cf", "Zl", "Zp"} for char in text if char != "\n"
    )


def test_plain_ascii_text_is_shown_unchanged() -> None:
    """Ordinary text, backslashes included, is shown exactly as it is."""
    text = r"grep -rn 'a\.b' src | sort -u > out.txt"
    assert visible(text) == text
    assert count_hidden(text) == 0


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("echo safe\x1b[2K\rrm -rf ~", "echo safe\\x1b[2K\\rrm -rf ~"),
        ("a\tb\nc", "a\\tb\\nc"),
        ("ls \u202etxt.exe", "ls \\u202etxt.exe"),
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("nb\u00a0sp", "nb\\xa0sp"),
        ("c1\x9bcsi", "c1\\x9bcsi"),
        ("del\x7f", "del\\x7f"),
        ("line\u2028sep", "line\\u2028sep"),
        ("tag\U000e0041", "tag\\U000e0041"),
    ],
)
def test_control_and_invisible_characters_are_escaped(text: str, shown: str) -> None:
    """ESC, CR, TAB, LF, C1, DEL, bidi overrides, zero-width and odd spaces become escapes."""
    assert visible(text) == shown
    assert count_hidden(text) == shown.count("\\") - text.count("\\")


def test_non_ascii_letters_are_kept() -> None:
    """Non-Latin text a human can read is not escaped."""
    assert visible("café 日本語 Ωμέγα") == "café 日本語 Ωμέγα"


@given(st.text())
def test_visible_never_emits_a_control_or_format_character(text: str) -> None:
    """Whatever the server sends, the shown text has no control or format character."""
    assert _pane_safe(visible(text))
    assert "\n" not in visible(text)


def test_an_approval_shows_every_detail_in_full() -> None:
    """Tool, summary, requester, workspace, unmet requirement, digest, candidates, deadline."""
    shown = render_approval(_approval(), now=TIME)
    for expected in (
        "WriteFile",
        "WriteFile notes/a.txt",
        "agent",
        "/ws",
        "filesystem.write",
        "/ws/notes/a.txt",
        "write /ws/notes/a.txt",
        DIGEST,
        "ex-7",
        "(in 10m 00s)",
    ):
        assert expected in shown
    assert "WARNING" not in shown


def test_a_command_with_terminal_escapes_is_shown_escaped_with_a_warning() -> None:
    """An erase-line escape and a carriage return cannot hide the start of a command."""
    command = "echo harmless \x1b[2K\rrm -rf ~/important"
    shown = render_approval(_approval(command), now=TIME)
    assert _pane_safe(shown)
    assert "echo harmless \\x1b[2K\\rrm -rf ~/important" in shown
    assert "WARNING" in shown
    assert "/ws" in shown


def test_a_bidi_override_in_a_path_is_shown_escaped() -> None:
    """U+202E cannot make a path read backwards in the summary or the requirement."""
    path = "/ws/invoice\u202etxt.sh"
    shown = render_approval(_approval(summary=f"WriteFile {path}", match=path), now=TIME)
    assert "\u202e" not in shown
    assert "/ws/invoice\\u202etxt.sh" in shown
    assert "WARNING" in shown


def test_a_very_long_command_is_not_truncated() -> None:
    """A 10 000-character command is shown whole, on one line."""
    command = "echo " + "x" * 10_000 + " && rm -rf /tmp/target"
    shown = render_approval(_approval(command), now=TIME)
    assert any(line.endswith(command) for line in shown.splitlines())


def test_a_multi_line_command_is_shown_one_gutter_line_per_line() -> None:
    """Each line of a command is its own gutter line, and the line count is stated."""
    shown = render_approval(_approval("cd /tmp\nrm -rf build"), now=TIME)
    assert "(2 lines)" in shown
    assert "    │ cd /tmp" in shown
    assert "    │ rm -rf build" in shown


def test_a_question_numbers_its_choices_and_escapes_them() -> None:
    """Choices are numbered from 1; an escape in the question text is shown escaped."""
    question = PendingQuestion(
        execution_id="ex-q",
        session_id="s-1",
        question="Deploy now?\x1b]0;pwned\x07",
        choices=("yes", "no"),
        requested_by="agent",
        deadline=datetime(2030, 1, 1, tzinfo=UTC),
    )
    shown = render_question(question, now=datetime(2029, 12, 31, 23, 59, tzinfo=UTC))
    assert _pane_safe(shown)
    assert "Deploy now?\\x1b]0;pwned\\x07" in shown
    assert "    1. yes" in shown
    assert "    2. no" in shown
    assert "(in 1m 00s)" in shown


def test_rules_table_aligns_columns_and_escapes_cells() -> None:
    """Every rule is one line with all its columns; an escape in a match is shown escaped."""
    rules = [
        rule_from_proto(
            approval_service_pb2.Rule(
                rule_id="r-1",
                effect=approval_service_pb2.RULE_EFFECT_ALLOW,
                kind="command.execute",
                match="Bash(git log:*)",
                scope="workspace:/ws",
                origin="approver",
            )
        ),
        rule_from_proto(
            approval_service_pb2.Rule(
                rule_id="r-2",
                effect=approval_service_pb2.RULE_EFFECT_DENY,
                kind="filesystem.write",
                match="/ws/x\x1b[31m",
                origin="config",
            )
        ),
    ]
    lines = render_rules(rules).splitlines()
    assert lines[0].split() == ["id", "effect", "kind", "match", "scope", "origin"]
    assert lines[1].split() == [
        "r-1",
        "allow",
        "command.execute",
        "Bash(git",
        "log:*)",
        "workspace:/ws",
        "approver",
    ]
    assert lines[2].split() == ["r-2", "deny", "filesystem.write", "/ws/x\\x1b[31m", "-", "config"]
    assert lines[1].index("Bash") == lines[2].index("/ws/x") == lines[0].index("match")
    assert "WARNING" in lines[-1]


def test_resolved_and_candidates_convert_from_the_wire() -> None:
    """A resolved item carries the call's state; candidates keep kind, match, description."""
    resolved = approval_item_from_proto(
        approval_service_pb2.WatchApprovalsResponse(
            resolved=approval_service_pb2.Resolved(
                execution_id="ex-1", state=tool_call_pb2.STATE_DENIED
            )
        )
    )
    assert resolved is not None
    assert not isinstance(resolved, PendingApproval | PendingQuestion)
    assert resolved.state is State.DENIED
    item = _approval()
    assert item.candidates == (
        RuleCandidate(kind="filesystem.write", match="/ws/notes/a.txt", description=""),
    )
    assert item.unmet[0] == Requirement(
        kind="filesystem.write",
        scope="",
        match="/ws/notes/a.txt",
        description="write /ws/notes/a.txt",
    )
    assert item.deadline == TIME + timedelta(minutes=10)
    assert approval_item_from_proto(approval_service_pb2.WatchApprovalsResponse()) is None


def _with_preview(kind: str, text: str, omitted: int = 0) -> PendingApproval:
    item = _approval()
    preview = Preview(kind=kind, text=text, omitted_bytes=omitted)
    return item.model_copy(update={"call": item.call.model_copy(update={"preview": preview})})


DIFF = "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 20\n"


def test_a_preview_is_shown_in_full_and_a_diff_in_colour_only_when_asked() -> None:
    item = _with_preview("diff", DIFF)
    plain = render_approval(item)
    assert "what it would do (diff, 6 lines):" in plain
    assert "    │ -b = 2\n    │ +b = 20" in plain
    assert "\x1b" not in plain
    coloured = render_approval(item, colour=True)
    assert "    │ \x1b[31m-b = 2\x1b[0m" in coloured
    assert "    │ \x1b[32m+b = 20\x1b[0m" in coloured
    assert "    │ \x1b[36m@@ -1,2 +1,2 @@\x1b[0m" in coloured
    content = render_approval(_with_preview("content", "-not a diff line\n"), colour=True)
    assert "\x1b" not in content


def test_a_preview_is_escaped_again_by_the_terminal_and_says_what_was_left_out() -> None:
    """The server escapes previews; the terminal does not rely on it."""
    shown = render_approval(_with_preview("content", "x\x1b[2Jy\u202ez\tw\n", omitted=1234))
    assert "\x1b" not in shown
    assert "\u202e" not in shown
    assert "x\\x1b[2Jy\\u202ez" in shown
    assert "\t" not in shown  # tabs are expanded, not escaped
    assert "(1234 bytes not shown)" in shown
    assert "WARNING: 2 control or invisible" in shown


def test_colour_follows_the_terminal_and_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert wants_colour(Terminal())
    assert not wants_colour(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_colour(Terminal())


@pytest.mark.anyio
async def test_a_plain_command_shows_no_warning_for_callgates_own_line_breaks(
    tmp_path: Path,
) -> None:
    """The Bash requirement's description is several lines by design (the command below its
    heading): an ordinary command, as the server describes it, draws no warning; only
    characters in the agent's own text do."""
    async with serve(tmp_path) as harness:
        async with CallgateClient(harness.tcp_target, token=harness.tokens["agent"]) as agent:
            session = await agent.open_session()
            call = await session.prepare("Bash", {"command": "git status"}, evaluate=True)
        async with CallgateClient(harness.tcp_target, token=harness.tokens["approver"]) as human:
            pending = await human.approvals.pending(call.execution_id)
    assert "\n" in pending.unmet[0].description
    shown = render_approval(pending, now=TIME)
    assert "git status" in shown
    assert "WARNING" not in shown
