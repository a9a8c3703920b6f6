"""Plain-text rendering of approvals, questions and rules, with every server string made safe
for a terminal: nothing the server sends can move the cursor, erase, recolour or reorder what
the approver reads.

Control characters (C0, DEL, C1, so ESC and CR too), format characters (bidi overrides and
isolates, zero-width characters, BOM), line and paragraph separators, non-ASCII spaces,
private-use, surrogate and unassigned code points are shown escaped as `\\t`, `\\n`, `\\r`,
`\\xNN`, `\\uNNNN` or `\\UNNNNNNNN`. A literal backslash is left as it is, so a renderer that
escaped anything says so in a warning line: without the warning, every backslash shown is
one the text really contains. Nothing is truncated.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Final

from callgate.client.models import (
    ChangeSet,
    PendingApproval,
    PendingQuestion,
    Preview,
    Requirement,
    Rule,
    RuleCandidate,
    State,
)

__all__ = [
    "APPLY_CHOICE",
    "DECISION_PROMPT",
    "DRY_RUN_CHOICE",
    "ONCE_ONLY_PROMPT",
    "approve_once_only",
    "count_hidden",
    "decision_prompt",
    "diff_classes",
    "render_approval",
    "render_change_set",
    "render_question",
    "render_resolved",
    "render_rules",
    "visible",
]

DECISION_PROMPT: Final = "[o]nce  [s]ession  [a]lways  [d]eny  [k]skip ? "
"""The prompt an approver answers for a pending call."""
DRY_RUN_CHOICE: Final = "[r]dry run  "
"""Put before the prompt when the call can be dry-run."""
APPLY_CHOICE: Final = "[x]apply exactly this  "
"""Put before the prompt once a dry run's changes can be applied."""

ONCE_ONLY_PROMPT: Final = "[o]nce  [d]eny  [k]skip (only a human can approve this, once) ? "
"""The prompt for a call with a human-only requirement: no session or always decision."""


def approve_once_only(item: PendingApproval) -> bool:
    """True when the call can be approved only once (a human-only requirement): the server
    refuses APPROVE_FOR_SESSION and APPROVE_ALWAYS for it."""
    return any(r.human_only for r in (*item.unmet, *item.call.requirements))


_HIDDEN_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_NAMED_ESCAPES: Final = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_RULE: Final = "─" * 72


def _is_hidden(char: str) -> bool:
    category = unicodedata.category(char)
    return category in _HIDDEN_CATEGORIES or (category == "Zs" and char != " ")


def _escape(char: str) -> str:
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(text: str) -> str:
    """`text` with every character a terminal would act on, or that a reader cannot see,
    escaped; everything else (including non-ASCII letters) unchanged."""
    if text.isascii() and text.isprintable():
        return text  # The common case: nothing to escape.
    return "".join(_escape(char) if _is_hidden(char) else char for char in text)


def count_hidden(text: str) -> int:
    """How many characters of `text` `visible` escapes."""
    if text.isascii() and text.isprintable():
        return 0
    return sum(1 for char in text if _is_hidden(char))


class _Lines:
    """Lines being rendered, counting the characters escaped on the way."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.hidden = 0

    def safe(self, text: str) -> str:
        self.hidden += count_hidden(text)
        return visible(text)

    def add(self, line: str = "") -> None:
        self.lines.append(line)

    def field(self, label: str, value: str) -> None:
        self.add(f"  {label:<13}{self.safe(value) if value else '-'}")

    def block(self, label: str, text: str) -> None:
        """Multi-line text (a command, a question): one gutter line per line, each escaped."""
        lines = text.split("\n")
        count = f" ({len(lines)} lines)" if len(lines) > 1 else ""
        self.add(f"  {label}{count}:")
        for line in lines:
            self.add(f"    │ {self.safe(line)}")

    def text(self) -> str:
        if self.hidden:
            self.add(
                f"  WARNING: {self.hidden} control or invisible character(s) above are shown "
                "escaped (\\xNN, \\uNNNN); look closely before deciding."
            )
        return "\n".join(self.lines)


def _deadline(deadline: datetime | None, now: datetime | None) -> str:
    if deadline is None:
        return ""
    shown = deadline.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if now is None:
        return shown
    left = int((deadline - now).total_seconds())
    if left <= 0:
        return f"{shown} (passed)"
    minutes, seconds = divmod(left, 60)
    return f"{shown} (in {minutes}m {seconds:02d}s)"


def _requirements(out: _Lines, title: str, requirements: Sequence[Requirement]) -> None:
    out.add(f"  {title}:")
    if not requirements:
        out.add("    (none)")
    for number, requirement in enumerate(requirements, 1):
        out.add(f"    {number}. {out.safe(requirement.kind)}")
        out.add(f"       match:       {out.safe(requirement.match)}")
        if requirement.scope and requirement.scope != requirement.match:
            out.add(f"       scope:       {out.safe(requirement.scope)}")
        # callgate's descriptions are several lines by design (the command below its
        # heading): each line is shown (and escaped) on its own, so the line breaks that
        # callgate writes are not counted as hidden characters of the agent's text.
        first, *rest = requirement.description.split("\n")
        out.add(f"       description: {out.safe(first)}")
        for line in rest:
            out.add(f"                  │ {out.safe(line)}")
        if requirement.human_only:
            out.add("       ONLY A HUMAN can approve this, each time; no rule can cover it")


def _candidates(out: _Lines, candidates: Sequence[RuleCandidate], once_only: bool) -> None:
    if once_only:
        out.add("  [s]ession / [a]lways: not possible, approve once or deny")
        return
    out.add("  [s]ession / [a]lways would also allow:")
    if not candidates:
        out.add("    (nothing: no rule would be saved)")
    for candidate in candidates:
        line = f"    - {out.safe(candidate.kind)}  {out.safe(candidate.match)}"
        if candidate.description:
            line += f"  ({out.safe(candidate.description)})"
        out.add(line)


_DIFF_COLOURS: Final = {"file": "1", "hunk": "36", "add": "32", "del": "31"}
_HUNK: Final = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def diff_classes(lines: Sequence[str]) -> list[str]:
    """Each line of a unified diff classed by its position, never by its text alone: "file"
    and "hunk" headers only between hunks; inside a hunk, as many lines as its header counts,
    "add", "del" or "" (context) by their first character. So an added line that reads like
    a header (`++ x`, `+@@ …`) stays an added line."""
    classes: list[str] = []
    old_left = new_left = 0
    for line in lines:
        if old_left > 0 or new_left > 0:
            first = line[:1]
            if first == "+":
                classes.append("add")
                new_left -= 1
            elif first == "-":
                classes.append("del")
                old_left -= 1
            else:
                classes.append("")
                if first != "\\":  # "\ No newline at end of file" counts for neither side
                    old_left -= 1
                    new_left -= 1
            continue
        hunk = _HUNK.match(line)
        if hunk is not None:
            old_left = 1 if hunk.group(1) is None else int(hunk.group(1))
            new_left = 1 if hunk.group(2) is None else int(hunk.group(2))
            classes.append("hunk")
        elif line.startswith(("--- ", "+++ ")):
            classes.append("file")
        else:
            classes.append("")
    return classes


def _preview(out: _Lines, preview: Preview, colour: bool) -> None:
    """The call's preview, one gutter line per line, escaped again (the server escaped it;
    this terminal does not take that on trust); diff lines coloured when `colour`."""
    lines = preview.text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out.add(f"  what it would do ({out.safe(preview.kind)}, {len(lines)} lines):")
    noted = bool(lines) and lines[0].startswith("[") and "control or invisible" in lines[0]
    classes = [""] * len(lines)
    if preview.kind == "diff":
        classes[noted:] = diff_classes(lines[noted:])
    for line, kind in zip(lines, classes, strict=True):
        shown = out.safe(line.expandtabs(4))
        code = _DIFF_COLOURS.get(kind)
        if colour and code is not None:
            shown = f"\x1b[{code}m{shown}\x1b[0m"
        out.add(f"    │ {shown}")
    if preview.omitted_bytes:
        out.add(f"    │ ({preview.omitted_bytes} bytes not shown)")


def decision_prompt(item: PendingApproval) -> str:
    """What the human may type for `item`: the dry run when it is offered, "apply exactly
    this" once a dry run's changes can be applied."""
    base = ONCE_ONLY_PROMPT if approve_once_only(item) else DECISION_PROMPT
    extra = DRY_RUN_CHOICE if not item.dry_run_refusal else ""
    if item.change_set is not None and item.change_set.applicable:
        extra = APPLY_CHOICE + extra
    return extra + base


def render_change_set(change_set: ChangeSet, *, colour: bool = False) -> str:
    """A dry run's change set: every changed path (diffs in full), the exit code and the ends
    of the output, escaped again here."""
    out = _Lines()
    who = change_set.requested_by or "?"
    out.add(f"  DRY RUN (asked by {out.safe(who)}): what the command would change")
    if change_set.failure:
        out.add(f"    the dry run did not complete: {out.safe(change_set.failure)}")
    if change_set.unrepresentable:
        out.add(
            f"    cannot be applied: {out.safe(change_set.unrepresentable)} "
            "(approve or deny the command)"
        )
    if not change_set.changes and not change_set.unrepresentable:
        out.add("    no file in the workspace would change")
    for change in change_set.changes:
        mode = f" mode {change.mode:04o}" if change.mode and change.kind != "mode" else ""
        out.add(f"    {out.safe(change.kind):<10}{out.safe(change.path)}{mode}")
        lines = [line for line in change.detail.split("\n") if line]
        for line, kind in zip(lines, diff_classes(lines), strict=True):
            shown = out.safe(line.expandtabs(4))
            code = _DIFF_COLOURS.get(kind)
            if colour and code is not None:
                shown = f"\x1b[{code}m{shown}\x1b[0m"
            out.add(f"      │ {shown}")
    if change_set.omitted_changes:
        out.add(f"    ({change_set.omitted_changes} more changed paths not shown)")
    code = "none (it did not exit)" if change_set.exit_code is None else str(change_set.exit_code)
    out.add(f"    exit code {code}; output:")
    for line in change_set.output_head.split("\n")[:-1] or []:
        out.add(f"      │ {out.safe(line)}")
    if change_set.omitted_output_bytes:
        out.add(f"      │ ({change_set.omitted_output_bytes} bytes not shown)")
    for line in change_set.output_tail.split("\n")[:-1] or []:
        out.add(f"      │ {out.safe(line)}")
    out.field("effect", change_set.effect_digest)
    return out.text()


def render_approval(
    item: PendingApproval, *, now: datetime | None = None, colour: bool = False
) -> str:
    """Everything about a pending call, in full, for a human to decide it; `now` adds the
    time left before the deadline; `colour` colours a diff preview (ANSI)."""
    call = item.call
    out = _Lines()
    out.add(_RULE)
    out.add(f"APPROVAL  {out.safe(call.tool_name)}")
    out.field("call", call.execution_id)
    out.field("session", call.session_id)
    if call.batch_id:
        out.field("batch", call.batch_id)
    out.field("summary", call.summary)
    out.field("requested by", item.requested_by)
    out.field("workspace", item.workspace)
    if item.unmet:
        _requirements(out, "unmet requirements (what you decide)", item.unmet)
    else:
        _requirements(out, "requirements", call.requirements)
    if item.command:
        out.block("command, exactly as it would run", item.command)
    if item.working_directory:
        out.field("working dir", item.working_directory)
    if call.preview is not None:
        _preview(out, call.preview, colour)
    out.field("digest", call.digest)
    _candidates(out, item.candidates, approve_once_only(item))
    if item.dry_run_refusal and item.command:
        out.field("dry run", f"none: {item.dry_run_refusal}")
    out.field("deadline", _deadline(item.deadline, now))
    text = out.text()
    if item.change_set is not None:
        text += "\n" + render_change_set(item.change_set, colour=colour)
    return text


def render_question(item: PendingQuestion, *, now: datetime | None = None) -> str:
    """A pending AskUser question with its numbered choices."""
    out = _Lines()
    out.add(_RULE)
    out.add("QUESTION")
    out.field("call", item.execution_id)
    out.field("session", item.session_id)
    out.field("requested by", item.requested_by)
    out.block("question", item.question)
    if item.choices:
        out.add('  choices (answer with a number, or type "other" or your own text):')
        for number, choice in enumerate(item.choices, 1):
            out.add(f"    {number}. {out.safe(choice)}")
    out.field("deadline", _deadline(item.deadline, now))
    return out.text()


def render_resolved(execution_id: str, state: State) -> str:
    """One line: a pending item was resolved somewhere else."""
    return f"resolved elsewhere: {visible(execution_id)} is now {state.value}"


_RULE_COLUMNS: Final = ("id", "effect", "kind", "match", "scope", "origin")


def render_rules(rules: Iterable[Rule]) -> str:
    """A table of rules, one per line, columns aligned; nothing truncated."""
    rows = [list(_RULE_COLUMNS)]
    hidden = 0
    for rule in rules:
        cells = [rule.rule_id, rule.effect.value, rule.kind, rule.match, rule.scope, rule.origin]
        hidden += sum(count_hidden(cell) for cell in cells)
        rows.append([visible(cell) or "-" for cell in cells])
    widths = [max(len(row[column]) for row in rows) for column in range(len(_RULE_COLUMNS))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    if hidden:
        lines.append(f"WARNING: {hidden} control or invisible character(s) are shown escaped.")
    return "\n".join(lines)
