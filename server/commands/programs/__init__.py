"""The program knowledge base: one reviewed table of what programs and their options do.

`TABLE` maps a command name to its entry. The entries live in `table_*.py`, grouped by kind of
program, each citing its manual; `model` is their shape, `reading` applies them to a command's
words, `scripts` reads sed and awk scripts.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from . import table_archive, table_dev, table_files, table_git, table_net, table_text
from .model import EVERYTHING, READ_ONLY, Effect, Finding, Operands, Option, Program, Style, Takes
from .reading import Reading, lookup, read

_GROUPS = (table_archive, table_dev, table_files, table_git, table_net, table_text)


def _table() -> Mapping[str, Program]:
    table: dict[str, Program] = {}
    for group in _GROUPS:
        for entry in group.PROGRAMS:
            for name in (entry.name, *entry.aliases):
                if name in table:
                    raise AssertionError(f"the program table lists {name!r} twice")
                table[name] = entry
    return MappingProxyType(table)


TABLE: Mapping[str, Program] = _table()

__all__ = [
    "EVERYTHING",
    "READ_ONLY",
    "TABLE",
    "Effect",
    "Finding",
    "Operands",
    "Option",
    "Program",
    "Reading",
    "Style",
    "Takes",
    "lookup",
    "read",
]
