"""Strict decoding and validation of tool arguments: every bad input is ARGUMENTS_INVALID."""

from __future__ import annotations

import json
from typing import Annotated

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from callgate.server.core.arguments import (
    MAX_DEPTH,
    decode_arguments,
    parse_arguments,
    validate_arguments,
)
from callgate.server.core.errors import InvalidArgument
from callgate.server.core.tool import Arguments


class Item(Arguments):
    name: str


class Sample(Arguments):
    path: str
    count: int = 1
    flag: bool = False
    items: list[Item] = Field(default_factory=list)


def nested_objects(depth: int) -> str:
    """`depth` objects nested in each other: {"a": {"a": ... 1 ...}}."""
    return '{"a":' * depth + "1" + "}" * depth


def reject(text: str, *, max_bytes: int = 1 << 20) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as caught:
        decode_arguments(text, max_bytes=max_bytes)
    assert caught.value.reason == "ARGUMENTS_INVALID"
    assert len(caught.value.violations) == 1
    return caught.value


def field_of(error: InvalidArgument) -> str:
    return error.violations[0].field


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("   \n", id="blank"),
        pytest.param("{", id="unterminated"),
        pytest.param('{"path": "x",}', id="trailing-comma"),
        pytest.param("{'path': 'x'}", id="single-quotes"),
        pytest.param('{"path": "x"} {}', id="two-documents"),
        pytest.param('{"path": "a\x00b"}', id="raw-nul-in-string"),
        pytest.param("[]", id="array"),
        pytest.param('"text"', id="string"),
        pytest.param("5", id="number"),
        pytest.param("true", id="boolean"),
        pytest.param("null", id="null"),
        pytest.param('{"n": NaN}', id="nan"),
        pytest.param('{"n": Infinity}', id="infinity"),
        pytest.param('{"n": -Infinity}', id="negative-infinity"),
        pytest.param("[" * 100_000 + "]" * 100_000, id="array-100000-deep"),
        pytest.param(nested_objects(100_000), id="object-100000-deep"),
        pytest.param('{"path": "' + "x" * (2 << 20) + '"}', id="2MiB"),
    ],
)
def test_malformed_or_non_object_arguments_are_rejected_as_a_whole(text: str) -> None:
    """Anything that is not exactly one well-formed JSON object names the whole arguments."""
    assert field_of(reject(text)) == "arguments"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        pytest.param('{"path": "a", "path": "b"}', "arguments.path", id="top-level"),
        pytest.param('{"a": {"b": 1, "b": 2}}', "arguments.a.b", id="nested-object"),
        pytest.param('{"a": [{"k": 1, "k": 1}]}', "arguments.a[0].k", id="inside-array"),
    ],
)
def test_duplicate_keys_are_rejected_with_their_full_path(text: str, field: str) -> None:
    """A key given twice is refused (never last-one-wins) and the violation names where it is."""
    assert field_of(reject(text)) == field


@pytest.mark.parametrize(
    ("text", "field"),
    [
        pytest.param('{"path": "a\\u0000b"}', "arguments.path", id="nul-in-value"),
        pytest.param('{"a": ["ok", "\\u0000"]}', "arguments.a[1]", id="nul-in-list-item"),
        pytest.param('{"a\\u0000b": 1}', "arguments.a\\u0000b", id="nul-in-key"),
        pytest.param('{"path": "\\ud800"}', "arguments.path", id="escaped-lone-surrogate"),
        pytest.param('{"path": "\ud800"}', "arguments.path", id="raw-lone-surrogate"),
        pytest.param('{"\\udfff": 1}', "arguments.\\udfff", id="lone-surrogate-key"),
    ],
)
def test_nul_bytes_and_lone_surrogates_are_rejected(text: str, field: str) -> None:
    """Text that is not NUL-free valid UTF-8 is refused, naming the key or value that holds it."""
    assert field_of(reject(text)) == field


@pytest.mark.parametrize(
    "text",
    [
        '{"\\ud800": 1}',
        '{"a\\u0000": 1, "a\\u0000": 2}',
        '{"\\u001b[31m": {"\\udc80": "\\u0000"}}',
        '{"' + "k" * 100_000 + '": "\\u0000"}',
    ],
)
def test_violation_fields_can_always_travel_in_a_status(text: str) -> None:
    """The field path is NUL-free, printable, encodable UTF-8 and short, whatever keys were sent."""
    field = field_of(reject(text))
    field.encode("utf-8")
    assert field.isprintable()
    assert len(field) < 300


def test_thirty_two_levels_of_nesting_are_accepted() -> None:
    """Nesting up to the limit decodes (objects and arrays count alike)."""
    assert MAX_DEPTH == 32
    decoded = decode_arguments(nested_objects(32))
    assert isinstance(decoded["a"], dict)
    decode_arguments('{"a":' * 31 + "[1]" + "}" * 31)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(nested_objects(33), id="objects-33"),
        pytest.param('{"a":' * 32 + "[1]" + "}" * 32, id="array-at-33"),
        pytest.param('{"a":' + "[" * 32 + "]" * 32 + "}", id="arrays-33"),
        pytest.param(nested_objects(100), id="objects-100"),
    ],
)
def test_nesting_deeper_than_thirty_two_levels_is_rejected_with_a_path(text: str) -> None:
    """The first level too deep is named by its path below `arguments`."""
    field = field_of(reject(text))
    assert field.startswith("arguments.a")


def test_the_size_cap_counts_utf8_bytes_not_characters() -> None:
    """A document at the cap decodes; one byte more, or multi-byte text over it, is refused."""
    at_cap = '{"p": "' + "x" * 25 + '"}'
    assert len(at_cap) == 34
    assert decode_arguments(at_cap, max_bytes=34) == {"p": "x" * 25}
    assert field_of(reject(at_cap, max_bytes=33)) == "arguments"
    wide = '{"p": "' + "é" * 20 + '"}'
    assert len(wide) <= 34 < len(wide.encode())
    assert field_of(reject(wide, max_bytes=34)) == "arguments"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        pytest.param({}, "arguments.path", id="missing-field"),
        pytest.param({"path": "x", "extra": 1}, "arguments.extra", id="unknown-field"),
        pytest.param({"path": 5}, "arguments.path", id="number-for-string"),
        pytest.param({"path": "x", "count": "05"}, "arguments.count", id="leading-zero-int"),
        pytest.param({"path": "x", "count": "5.0"}, "arguments.count", id="decimal-for-int"),
        pytest.param({"path": "x", "count": " 5"}, "arguments.count", id="spaced-int"),
        pytest.param({"path": "x", "count": "+5"}, "arguments.count", id="plus-int"),
        pytest.param({"path": "x", "count": "1e3"}, "arguments.count", id="exponent-int"),
        pytest.param({"path": "x", "count": "5_000"}, "arguments.count", id="underscore-int"),
        pytest.param({"path": "x", "flag": "yes"}, "arguments.flag", id="yes-for-bool"),
        pytest.param({"path": "x", "flag": "1"}, "arguments.flag", id="one-for-bool"),
        pytest.param({"path": "x", "flag": "True"}, "arguments.flag", id="capital-true"),
        pytest.param({"path": "x", "count": True}, "arguments.count", id="bool-for-int"),
        pytest.param({"path": "x", "count": 1.5}, "arguments.count", id="float-for-int"),
        pytest.param({"path": "x", "flag": 1}, "arguments.flag", id="int-for-bool"),
        pytest.param({"path": "x", "items": {}}, "arguments.items", id="object-for-list"),
        pytest.param(
            {"path": "x", "items": [{"name": "a"}, {"name": 1}]},
            "arguments.items[1].name",
            id="nested-wrong-type",
        ),
        pytest.param(
            {"path": "x", "items": [{"name": "a", "x": 0}]},
            "arguments.items[0].x",
            id="nested-unknown-field",
        ),
    ],
)
def test_strict_validation_rejects_unknown_fields_and_wrong_types(
    raw: dict[str, object], field: str
) -> None:
    """Validation takes no ambiguous form (true, 1.5, "05", "5.0" are not ints; "yes" and
    "1" are not booleans) and names the offending field."""
    with pytest.raises(InvalidArgument) as caught:
        validate_arguments(Sample, raw)
    assert caught.value.reason == "ARGUMENTS_INVALID"
    assert field_of(caught.value) == field


class Numbers(Arguments):
    limit: Annotated[int, Field(ge=1)] | None = None
    ratio: float = 1.0
    label: str | int = ""
    nested: list[Sample] = Field(default_factory=list)


def test_unambiguous_string_forms_are_taken_as_models_send_them() -> None:
    """MCP Inspector's CLI and models send `end_line=2` as "2": decimal integers, decimal
    numbers and exactly "true"/"false" become the typed value (also in nested objects), and
    the model holds the converted value; a field that also takes strings keeps the string."""
    parsed = validate_arguments(
        Sample, {"path": "x", "count": "-12", "flag": "true", "items": [{"name": "2"}]}
    )
    assert parsed == Sample(path="x", count=-12, flag=True, items=[Item(name="2")])
    assert validate_arguments(Sample, {"path": "x", "flag": "false"}).flag is False
    numbers = validate_arguments(
        Numbers,
        {"limit": "2", "ratio": "0.25", "label": "7", "nested": [{"path": "p", "count": "3"}]},
    )
    assert numbers.limit == 2
    assert numbers.ratio == 0.25
    assert numbers.label == "7"
    assert numbers.nested[0].count == 3
    with pytest.raises(InvalidArgument) as caught:
        validate_arguments(Numbers, {"limit": "0"})
    assert field_of(caught.value) == "arguments.limit"  # converted, then the bound applies
    with pytest.raises(InvalidArgument) as caught:
        validate_arguments(Sample, {"path": 5, "count": "2"})
    assert field_of(caught.value) == "arguments.path"  # never a number for a string


def test_parse_arguments_decodes_and_validates_in_one_step() -> None:
    """Valid JSON becomes the typed model; a bad document fails before validation."""
    parsed = parse_arguments(Sample, '{"path": "a.txt", "items": [{"name": "n"}]}', max_bytes=1024)
    assert parsed == Sample(path="a.txt", items=[Item(name="n")])
    with pytest.raises(InvalidArgument) as caught:
        parse_arguments(Sample, '{"path": "a", "path": "b"}', max_bytes=1024)
    assert field_of(caught.value) == "arguments.path"


safe_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"))
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | safe_text
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(safe_text, children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(document=st.dictionaries(safe_text, json_values, max_size=6), ascii_only=st.booleans())
def test_any_safe_json_object_round_trips(document: dict[str, object], ascii_only: bool) -> None:
    """A JSON object of safe values with unique keys decodes to exactly what was encoded."""
    text = json.dumps(document, ensure_ascii=ascii_only)
    assert decode_arguments(text) == document


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(max_size=64)
    | st.lists(st.sampled_from(["{", "}", "[", "]", '"a"', ":", ",", "1", "NaN", '"\\u0000"'])).map(
        "".join
    )
)
def test_decoding_fails_only_with_arguments_invalid(text: str) -> None:
    """Whatever the text, decoding returns an object or raises ARGUMENTS_INVALID, nothing else."""
    outcome: dict[str, object] | InvalidArgument
    try:
        outcome = decode_arguments(text)
    except InvalidArgument as error:
        outcome = error
    if isinstance(outcome, InvalidArgument):
        assert outcome.reason == "ARGUMENTS_INVALID"
        field_of(outcome).encode("utf-8")
    else:
        assert isinstance(outcome, dict)
