"""Command analysis: the shell parse, command rule matching (exact commands and
`Bash(<tokens>:*)` families) and the program table with its data. It imports nothing else of
the server; the gate, the rule book and the Bash tool use it through this surface.
"""

from .matching import (
    MAX_NESTING,
    CommandMatcher,
    CommandPatternError,
    Family,
    ParsedCommand,
    Segment,
    WordKind,
    command_allowed,
    command_denied,
    command_inert,
    command_pattern,
    command_warnings,
    denied_program,
    family_read_only,
    family_words,
    is_family_pattern,
    normalize_command,
    parse_command,
    parse_family,
    rule_candidates,
    words_inert,
)

__all__ = [
    "MAX_NESTING",
    "CommandMatcher",
    "CommandPatternError",
    "Family",
    "ParsedCommand",
    "Segment",
    "WordKind",
    "command_allowed",
    "command_denied",
    "command_inert",
    "command_pattern",
    "command_warnings",
    "denied_program",
    "family_read_only",
    "family_words",
    "is_family_pattern",
    "normalize_command",
    "parse_command",
    "parse_family",
    "rule_candidates",
    "words_inert",
]
