"""Glob's and Grep's pattern dialects, checked at Prepare so that both Grep engines accept
exactly the same input:

- Path globs (Glob `pattern`, Grep `glob`): `*` and `?` stay inside one path component,
  `**` as a whole component spans directories, `{a,b}` alternatives (not nested). No
  `[...]`, backslashes or leading `!`. A Glob pattern is matched against the path relative
  to its root; a Grep glob without `/` is matched against file names at any depth, one with
  `/` against the path relative to the searched directory (ripgrep's rule).
- Grep regexes: the subset that RE2 (the Python engine's matcher: linear time, so no
  pattern can stall the server) and ripgrep's Rust regex both read the same way. Refused:
  lookaround, backreferences, atomic groups, possessive quantifiers, conditionals,
  comments, `\\Z`, octal escapes, escapes of characters that are not regex metacharacters, a
  `{` that does not start a repetition, repetitions over 1000, nested classes and class set
  operations (`&&`, `--`, `~~`), inline flags other than `i`, `m`, `s`, and line breaks (a
  match never spans lines). `\\s` means Unicode White_Space in both, `\\d` Unicode decimal
  digits, `\\w` Unicode letters, marks, digits and connectors; `\\b` and `\\B` are about
  ASCII word characters in both (RE2 has no Unicode boundary, so ripgrep is given
  `(?-u:\\b)`: `grep_ripgrep_regex`). Code points: `\\x41`, `\\x{1F600}`,
  `\\u00e9`, `\\U0001F600`.
- Files that are not UTF-8 text (a NUL byte or an invalid sequence anywhere) are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

import re2  # type: ignore[import-untyped]

from ...core.errors import arguments_invalid

MAX_PATTERN_CHARS = 1000
MAX_GLOB_ALTERNATIVES = 64
MAX_REPEAT = 1000
RE2_MAX_MEM = 64 << 20

# Path globs ----------------------------------------------------------------------------------


def _expand_braces(pattern: str, field_name: str) -> list[str]:
    alternatives = [""]
    position = 0
    while position < len(pattern):
        char = pattern[position]
        if char == "}":
            raise arguments_invalid(field_name, "the pattern has a } without a {")
        if char != "{":
            alternatives = [prefix + char for prefix in alternatives]
            position += 1
            continue
        close = pattern.find("}", position + 1)
        if close == -1:
            raise arguments_invalid(field_name, "the pattern has a { without a }")
        body = pattern[position + 1 : close]
        if "{" in body:
            raise arguments_invalid(field_name, "{...} alternatives cannot be nested")
        alternatives = [prefix + option for prefix in alternatives for option in body.split(",")]
        if len(alternatives) > MAX_GLOB_ALTERNATIVES:
            raise arguments_invalid(
                field_name, f"the pattern expands to more than {MAX_GLOB_ALTERNATIVES} globs"
            )
        position = close + 1
    return alternatives


def expand_glob(pattern: str, field_name: str) -> list[str]:
    """Check a path glob against the dialect above; return its `{a,b}` expansions."""
    if not pattern:
        raise arguments_invalid(field_name, "the pattern is empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise arguments_invalid(field_name, f"the pattern is longer than {MAX_PATTERN_CHARS}")
    if not pattern.isprintable():
        raise arguments_invalid(field_name, "the pattern holds control characters")
    if any(char in pattern for char in "[]\\"):
        raise arguments_invalid(
            field_name, "[...] classes and backslashes are not supported; use * and ?"
        )
    if pattern.startswith("!"):
        raise arguments_invalid(field_name, "negated patterns (!...) are not supported")
    expansions = _expand_braces(pattern, field_name)
    for expansion in expansions:
        if expansion.startswith("/"):
            raise arguments_invalid(field_name, "the pattern is relative; it cannot start with /")
        parts = expansion.split("/")
        if "" in parts:
            raise arguments_invalid(field_name, "the pattern has an empty path component")
        if "." in parts or ".." in parts:
            raise arguments_invalid(field_name, "the pattern cannot hold . or .. components")
        if any("**" in part and part != "**" for part in parts):
            raise arguments_invalid(
                field_name, "** must be a whole path component, as in src/**/*.py"
            )
    return expansions


def _glob_body(expansion: str) -> str:
    parts = expansion.split("/")
    out: list[str] = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            out.append("(?s:.*)" if last else "(?:(?s:.*)/)?")
            continue
        for char in part:
            out.append("[^/]*" if char == "*" else "[^/]" if char == "?" else re.escape(char))
        if not last:
            out.append("/")
    return "".join(out)


class PathMatcher(Protocol):
    def match(self, text: str) -> object | None: ...


def compile_path_globs(expansions: list[str]) -> PathMatcher | None:
    """One RE2 matcher for path globs (linear time: `*a*a*a…` cannot stall a walk)."""
    if not expansions:
        return None
    body = "(?:" + "|".join(_glob_body(e) for e in expansions) + r")\z"
    try:
        matcher: PathMatcher = re2.compile(body, _re2_options())
    except re2.error as exc:
        raise arguments_invalid("pattern", f"the glob is too complex ({exc})") from None
    return matcher


@dataclass(frozen=True, slots=True)
class GrepGlob:
    """A Grep `glob` filter: name globs match file names, path globs relative paths."""

    expansions: tuple[str, ...]
    name_regex: PathMatcher | None
    path_regex: PathMatcher | None

    @classmethod
    def parse(cls, pattern: str) -> GrepGlob:
        expansions = expand_glob(pattern, "glob")
        return cls(
            expansions=tuple(expansions),
            name_regex=compile_path_globs([e for e in expansions if "/" not in e]),
            path_regex=compile_path_globs([e for e in expansions if "/" in e]),
        )

    def matches(self, rel: str) -> bool:
        name = rel.rsplit("/", 1)[-1]
        if self.name_regex is not None and self.name_regex.match(name) is not None:
            return True
        return self.path_regex is not None and self.path_regex.match(rel) is not None


# Grep regexes --------------------------------------------------------------------------------

_PUNCTUATION_ESCAPES = frozenset("\\.+*?()|[]{}^$#&-~")
_LETTER_ESCAPES = frozenset("dDwWsSbBAtrfvaxuU")
_CLASS_LETTER_ESCAPES = frozenset("dDwWsStrfvaxuU")
# Unicode White_Space, which is what Rust's \s means (Python's adds \x1c-\x1f).
_WHITE_SPACE = (
    "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"
    "\\x{205f}\\x{3000}"
)
# Rust's Unicode \d and \w (RE2's own are ASCII-only).
_DIGIT = "\\p{Nd}"
_WORD = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_HEX_LENGTH = {"x": 2, "u": 4, "U": 8}
_GROUP_OPENING = re.compile(r"\(\?(?::|P<[A-Za-z_][A-Za-z0-9_]*>|[ims]*(?:-[ims]+)?[:)])")
_REPETITION = re.compile(r"\{([0-9]+)(?:,([0-9]*))?\}")


class PatternUnsupported(ValueError):
    """A Grep regex outside the common dialect; the message says why."""


def _group_problem(rest: str) -> str:
    if rest.startswith(("(?=", "(?!", "(?<=", "(?<!")):
        return "lookaround is not supported"
    if rest.startswith("(?P="):
        return "backreferences are not supported"
    if rest.startswith("(?<"):
        return "write named groups as (?P<name>...) with an ASCII name"
    if rest.startswith("(?P<"):
        return "group names must be ASCII letters, digits and _"
    return "only (...), (?:...), (?P<name>...) and the flags i, m, s are supported in groups"


def _translate_escape(escaped: str, in_class: bool) -> str:
    """The RE2 form of the escape `\\<escaped>` (code point escapes: `_code_point`)."""
    if escaped.isdigit():
        raise PatternUnsupported("backreferences and octal escapes are not supported")
    if escaped == "n":
        raise PatternUnsupported("a match never spans lines; remove \\n")
    if escaped in _PUNCTUATION_ESCAPES:
        return "\\" + escaped
    if not (escaped.isascii() and escaped.isalpha()):
        raise PatternUnsupported(
            f"escape only regex metacharacters; write {escaped} without the backslash"
        )
    if escaped not in (_CLASS_LETTER_ESCAPES if in_class else _LETTER_ESCAPES):
        raise PatternUnsupported(f"the escape \\{escaped} is not supported here")
    if escaped in "SW" and in_class:
        raise PatternUnsupported(f"\\{escaped} inside [...] is not supported")
    members = {"s": _WHITE_SPACE, "d": _DIGIT, "w": _WORD}.get(escaped.lower())
    if members is None:
        return "\\" + escaped
    if in_class:
        return "\\P{Nd}" if escaped == "D" else members
    if escaped == "d":
        return _DIGIT
    if escaped == "D":
        return "\\P{Nd}"
    return f"[^{members}]" if escaped.isupper() else f"[{members}]"


def _code_point(pattern: str, position: int) -> tuple[str, int]:
    """`\\xhh`, `\\x{h…}`, `\\uhhhh`, `\\u{h…}` or `\\Uhhhhhhhh` at `position` (the backslash):
    its RE2 form `\\x{h…}` and how many characters it took."""
    letter = pattern[position + 1]
    start = position + 2
    if pattern.startswith("{", start) and letter != "U":
        close = pattern.find("}", start)
        digits = pattern[start + 1 : close] if close != -1 else ""
        consumed = close + 1 - position
    else:
        digits = pattern[start : start + _HEX_LENGTH[letter]]
        consumed = 2 + len(digits)
        if len(digits) != _HEX_LENGTH[letter]:
            digits = ""
    if not digits or len(digits) > 8 or not set(digits) <= _HEX_DIGITS:
        raise PatternUnsupported(
            f"\\{letter} must be followed by hex digits, as in \\x41, \\u00e9 or \\x{{1F600}}"
        )
    if int(digits, 16) > 0x10FFFF or 0xD800 <= int(digits, 16) <= 0xDFFF:
        raise PatternUnsupported(f"\\{letter}{digits} is not a Unicode scalar value")
    if int(digits, 16) == 0x0A:
        raise PatternUnsupported("a match never spans lines; remove the line break")
    return f"\\x{{{digits}}}", consumed


class _RegexTranslator:
    """One pass over a Grep regex, token by token (see `grep_python_regex`)."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.position = 0
        self.out: list[str] = []
        # The same pattern for ripgrep: as written, but for ASCII word boundaries.
        self.ripgrep: list[str] = []
        self.in_class = False
        self.class_start = 0
        self.quantified = False  # the previous token was a quantifier

    def translate(self) -> str:
        pattern = self.pattern
        while self.position < len(pattern):
            char = pattern[self.position]
            if char == "\n":
                raise PatternUnsupported("a match never spans lines; remove the line break")
            if char == "\\":
                if self.position + 1 == len(pattern):
                    raise PatternUnsupported("the pattern ends with a lone backslash")
                if pattern[self.position + 1] in _HEX_LENGTH:
                    self._emit(*_code_point(pattern, self.position))
                else:
                    escaped = pattern[self.position + 1]
                    boundary = escaped in "bB" and not self.in_class
                    self._emit(
                        _translate_escape(escaped, self.in_class),
                        2,
                        ripgrep=f"(?-u:\\{escaped})" if boundary else None,
                    )
            elif self.in_class:
                self._class_member(char)
            elif char == "[":
                self._open_class()
            elif char == "(" and pattern.startswith("(?", self.position):
                self._group()
            elif char == "{":
                self._repetition()
            elif char == "+" and self.quantified:
                raise PatternUnsupported("possessive quantifiers (*+, ++, ?+) are not supported")
            elif char == "?" and self.quantified:
                # A lazy quantifier: which lines match does not depend on it.
                self._emit(char, 1)
            else:
                self._emit(char, 1, quantifier=char in "*+?")
        return "".join(self.out)

    def _emit(
        self, text: str, consumed: int, *, quantifier: bool = False, ripgrep: str | None = None
    ) -> None:
        self.out.append(text)
        end = self.position + consumed
        self.ripgrep.append(self.pattern[self.position : end] if ripgrep is None else ripgrep)
        self.position += consumed
        self.quantified = quantifier

    def _class_member(self, char: str) -> None:
        if char == "]" and self.position > self.class_start:
            self.in_class = False
        elif char == "[":
            raise PatternUnsupported("nested classes are not supported; write \\[ inside [...]")
        elif self.pattern.startswith(("&&", "--", "~~"), self.position):
            raise PatternUnsupported("class set operations (&&, --, ~~) are not supported")
        self._emit(char, 1)

    def _open_class(self) -> None:
        self.in_class = True
        negated = self.pattern.startswith("[^", self.position)
        self._emit("[^" if negated else "[", 2 if negated else 1)
        self.class_start = self.position  # a ] right here is a literal ]

    def _group(self) -> None:
        opening = _GROUP_OPENING.match(self.pattern, self.position)
        if opening is None:
            raise PatternUnsupported(_group_problem(self.pattern[self.position :]))
        self._emit(opening.group(0), len(opening.group(0)))

    def _repetition(self) -> None:
        repetition = _REPETITION.match(self.pattern, self.position)
        if repetition is None:
            raise PatternUnsupported(
                "a { must start a repetition such as {2} or {1,3}; write \\{ for the character"
            )
        if any(int(bound) > MAX_REPEAT for bound in repetition.groups() if bound):
            raise PatternUnsupported(f"repetitions are limited to {MAX_REPEAT}")
        self._emit(repetition.group(0), len(repetition.group(0)), quantifier=True)


def grep_python_regex(pattern: str) -> str:
    """Translate a Grep regex into the RE2 regex that matches the same lines as ripgrep;
    raises PatternUnsupported for anything outside the common dialect."""
    return _RegexTranslator(pattern).translate()


def grep_ripgrep_regex(pattern: str) -> str:
    """The Grep regex as ripgrep is given it: as written, with `\\b` and `\\B` made ASCII
    (`(?-u:\\b)`), as RE2 reads them; raises PatternUnsupported as `grep_python_regex`."""
    translator = _RegexTranslator(pattern)
    translator.translate()
    return "".join(translator.ripgrep)


class LineMatcher(Protocol):
    def search(self, text: str) -> object | None: ...


def _re2_options() -> Any:
    options = re2.Options()
    # Bounds the compiled program (a pattern that needs more is refused, never run).
    options.max_mem = RE2_MAX_MEM
    options.log_errors = False
    return options


_LINE_BOUND_FLAG = re.compile(r"\(\?[a-zA-Z]*-[a-zA-Z]*m|\(\?[a-zA-Z]*m")


def whole_text_prefilter(pattern: str, ignore_case: bool) -> LineMatcher | None:
    """The pattern compiled for a whole text (multi-line mode), for skipping files: None when
    it might miss a line's match there (`\\A`, or an inline flag that changes `m`)."""
    if "\\A" in pattern or _LINE_BOUND_FLAG.search(pattern):
        return None
    return compile_grep_regex(pattern, ignore_case, multiline=True)


def compile_grep_regex(pattern: str, ignore_case: bool, *, multiline: bool = False) -> LineMatcher:
    """The RE2 matcher for a Grep pattern (linear time in the line's length);
    PatternUnsupported when either engine would refuse it or read it differently. With
    `multiline`, for searching a whole text: `^` and `$` match at every line's start and end,
    so it matches wherever a line of the text would (and perhaps more, never less)."""
    translated = grep_python_regex(pattern)
    flags = ("i" if ignore_case else "") + ("m" if multiline else "")
    try:
        matcher: LineMatcher = re2.compile(
            (f"(?{flags})" if flags else "") + translated, _re2_options()
        )
    except re2.error as exc:
        raise PatternUnsupported(f"invalid regex: {exc}") from None
    return matcher
