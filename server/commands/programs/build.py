"""Short constructors for the table's entries: `flags("-a --all", "-l")` is two read-only
options, the first with two names. Names are separated by spaces in one string."""

from __future__ import annotations

from .model import Effect, Option, Takes


def _names(spec: str) -> tuple[str, ...]:
    names = tuple(spec.split())
    if not names or not all(n.startswith("-") for n in names):
        raise ValueError(f"option names start with '-': {spec!r}")
    return names


def flags(*specs: str) -> tuple[Option, ...]:
    """Options without a value that only change what is read or printed."""
    return tuple(Option(_names(spec)) for spec in specs)


def values(*specs: str, example: str = "1") -> tuple[Option, ...]:
    """Options with a required value that only change what is read or printed."""
    return tuple(Option(_names(spec), Takes.VALUE, example=example) for spec in specs)


def attached(*specs: str, example: str = "") -> tuple[Option, ...]:
    """Options with an optional, attached value (`--color[=WHEN]`) that only read."""
    return tuple(Option(_names(spec), Takes.ATTACHED, example=example) for spec in specs)


def does(
    spec: str,
    effect: Effect,
    what: str,
    *,
    takes: Takes = Takes.NOTHING,
    example: str = "1",
    actions: frozenset[str] = frozenset(),
    until: tuple[str, ...] = (),
    ends_options: bool = False,
) -> Option:
    """An option that writes, deletes, runs code or reaches the network: `what` says how."""
    return Option(
        _names(spec),
        takes,
        effect,
        what,
        example=example,
        actions=actions,
        until=until,
        ends_options=ends_options,
    )


def mode(spec: str, *effects: Effect, takes: Takes = Takes.NOTHING, example: str = "1") -> Option:
    """A mode switch (`tar -t`, `unzip -l`): the program then does only `effects`."""
    return Option(_names(spec), takes, example=example, mode=frozenset(effects))


def script(spec: str, *, example: str = "p") -> Option:
    """An option whose value is a script the program's reader checks (`sed -e`)."""
    return Option(_names(spec), Takes.VALUE, example=example, script=True)


DELETE = frozenset({"delete"})
"""The action of `rm`: deny families over rm see every option or program that deletes files."""
HTTP = frozenset({"http"})
"""The action of curl and wget: downloading or uploading over HTTP."""
PERMISSIONS = frozenset({"permissions"})
"""The action of chmod, chown and chgrp."""

NAMED_BY: dict[str, frozenset[str]] = {
    "delete": frozenset({"rm", "unlink", "rmdir", "shred"}),
    "http": frozenset({"curl", "wget"}),
    "permissions": frozenset({"chmod", "chown", "chgrp"}),
}
"""The programs whose deny family stands for an action: `Bash(rm:*)` denies whatever deletes
files. Other programs carrying an action (gzip deletes its input) are caught by these
families; a deny family over them (`Bash(gzip:*)`) denies only themselves."""
