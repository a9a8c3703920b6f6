"""Strict decoding of tool arguments: one JSON object, validated once, against a pydantic model.

Rejected with ARGUMENTS_INVALID and a field violation: malformed JSON, a top level that is not
an object, duplicate keys, NaN/Infinity, NUL bytes, lone surrogates (not valid UTF-8),
nesting deeper than 32, documents over the size cap, unknown fields and wrong types.

Arguments as models send them: where a field takes an integer, a number or a boolean and
not a string, the unambiguous string forms are taken for it before the strict check (as
FastMCP's lax validation does, and as MCP Inspector's CLI sends every `--tool-arg`): a
decimal integer such as "2" or "-3" (no sign "+", spaces, underscores, leading zeros or
exponent), a decimal number such as "1.5" for a number, and exactly "true" or "false" for a
boolean. Anything else stays a wrong type. The frozen artifact holds the converted value,
so the approver sees, and the digest covers, what will run.
"""

from __future__ import annotations

import json
import re
import types
import typing
from typing import Annotated, Final, TypeVar, Union

from pydantic import BaseModel, ValidationError

from .errors import InvalidArgument, arguments_invalid

MAX_DEPTH = 32
DEFAULT_MAX_ARGUMENT_BYTES = 1 << 20

ModelT = TypeVar("ModelT", bound=BaseModel)


class _DuplicateKeys(dict[str, object]):
    """A decoded object in which `duplicate` appeared more than once. The hook that builds it
    does not know where the object sits, so the value check reports it with its full path."""

    duplicate: str = ""


def _pairs_without_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            marked = _DuplicateKeys(result)
            marked.duplicate = key
            return marked
        result[key] = value
    return result


def _reject_constant(name: str) -> object:
    raise ValueError(name)


def decode_arguments(
    text: str, *, max_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES
) -> dict[str, object]:
    """Decode `text` as one JSON object with the strict rules above."""
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise arguments_invalid("", f"the arguments are larger than {max_bytes} bytes")
    if not text.strip():
        raise arguments_invalid("", "the arguments must be one JSON object, e.g. {}")
    try:
        value = json.loads(
            text,
            object_pairs_hook=_pairs_without_duplicates,
            parse_constant=_reject_constant,
        )
    except RecursionError:
        raise arguments_invalid("", f"the arguments nest deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else f"{exc} is not valid JSON"
        where = (
            f" at line {exc.lineno} column {exc.colno}"
            if isinstance(exc, json.JSONDecodeError)
            else ""
        )
        raise arguments_invalid("", f"malformed JSON: {detail}{where}") from None
    if not isinstance(value, dict):
        raise arguments_invalid("", "the arguments must be a JSON object, not " + _json_type(value))
    _check_values(value)
    return value


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null"


def _check_text(text: str, path: str) -> None:
    if "\x00" in text:
        raise arguments_invalid(path, "NUL bytes are not allowed")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise arguments_invalid(path, "the text is not valid UTF-8 (a lone surrogate)") from None


def _check_values(root: dict[str, object]) -> None:
    """Depth, NUL and UTF-8 checks over the decoded document, iteratively."""
    stack: list[tuple[object, str, int]] = [(root, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, dict):
            if isinstance(value, _DuplicateKeys):
                child = f"{path}.{value.duplicate}" if path else value.duplicate
                raise arguments_invalid(child, "the key appears more than once")
            if depth > MAX_DEPTH:
                raise arguments_invalid(path, f"nesting deeper than {MAX_DEPTH} levels")
            for key, item in value.items():
                child = f"{path}.{key}" if path else key
                _check_text(key, child)
                stack.append((item, child, depth + 1))
        elif isinstance(value, list):
            if depth > MAX_DEPTH:
                raise arguments_invalid(path, f"nesting deeper than {MAX_DEPTH} levels")
            for index, item in enumerate(value):
                stack.append((item, f"{path}[{index}]", depth + 1))
        elif isinstance(value, str):
            _check_text(value, path)


_INTEGER: Final = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_NUMBER: Final = re.compile(r"-?(?:0|[1-9][0-9]{0,17})(?:\.[0-9]{1,17})?")


_STRING_FORMS: Final[dict[str, dict[str, object]]] = {
    "integer": {"type": "string", "pattern": f"^{_INTEGER.pattern}$"},
    "number": {"type": "string", "pattern": f"^{_NUMBER.pattern}$"},
    "boolean": {"type": "string", "enum": ["true", "false"]},
}


def lenient_schema(schema: dict[str, object]) -> dict[str, object]:
    """A tool's argument schema as clients should check against it: wherever it takes an
    integer, a number or a boolean, also the string forms the server takes for them (`"2"`,
    `"2.5"`, `"true"`: what `validate_arguments` coerces), so that a client that validates
    before sending never refuses what the server accepts."""
    return _lenient(schema)  # type: ignore[return-value]


def _lenient(node: object) -> object:
    if isinstance(node, list):
        return [_lenient(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _lenient(value) for key, value in node.items()}
    kind = out.get("type")
    if isinstance(kind, str) and kind in _STRING_FORMS:
        keep = {k: v for k, v in out.items() if k in ("title", "description", "default")}
        typed = {k: v for k, v in out.items() if k not in keep}
        return {**keep, "anyOf": [typed, dict(_STRING_FORMS[kind])]}
    return out


def _members(annotation: object) -> list[object]:
    """The types a field annotation admits: Annotated, Optional and unions unwrapped."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [member for arg in typing.get_args(annotation) for member in _members(arg)]
    return [annotation]


def _coerced(annotation: object, value: object) -> object:
    """`value` in the form the strict check takes, where a string form is unambiguous."""
    members = _members(annotation)
    if isinstance(value, str):
        if str in members:
            return value
        if bool in members and value in ("true", "false"):
            return value == "true"
        if int in members and _INTEGER.fullmatch(value):
            return int(value)
        if float in members and _NUMBER.fullmatch(value):
            return float(value)
        return value
    if isinstance(value, dict):
        for member in members:
            if isinstance(member, type) and issubclass(member, BaseModel):
                return _coerce_fields(member, value)
        return value
    if isinstance(value, list):
        for member in members:
            if typing.get_origin(member) in (list, tuple):
                args = typing.get_args(member)
                if len(args) == 1 or (len(args) == 2 and args[1] is Ellipsis):
                    return [_coerced(args[0], item) for item in value]
        return value
    return value


def _coerce_fields(model: type[BaseModel], raw: dict[str, object]) -> dict[str, object]:
    coerced = dict(raw)
    for name, info in model.model_fields.items():
        if name in coerced:
            coerced[name] = _coerced(info.annotation, coerced[name])
    return coerced


def validate_arguments(model: type[ModelT], raw: dict[str, object]) -> ModelT:
    """Validate decoded arguments against a strict, extra-forbidding pydantic model, after
    the unambiguous string forms of integers, numbers and booleans are taken (above)."""
    try:
        return model.model_validate(_coerce_fields(model, raw), strict=True)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        # The same path notation as the decoder's: `items[0].name`, not `items.0.name`.
        path = "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"]
        ).removeprefix(".")
        message = str(first["msg"])
        if first["type"] == "extra_forbidden":
            message = "unknown field"
        raise arguments_invalid(path, message) from None


def parse_arguments(model: type[ModelT], text: str, *, max_bytes: int) -> ModelT:
    """Decode and validate in one step."""
    return validate_arguments(model, decode_arguments(text, max_bytes=max_bytes))


__all__ = [
    "DEFAULT_MAX_ARGUMENT_BYTES",
    "MAX_DEPTH",
    "InvalidArgument",
    "decode_arguments",
    "lenient_schema",
    "parse_arguments",
    "validate_arguments",
]
