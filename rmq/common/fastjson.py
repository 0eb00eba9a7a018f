"""RocketMQ's JSON dialect: what fastjson 1.2.83 writes and what it accepts.

Writing follows fastjson's defaults: bean properties in alphabetical order, no
blanks, null properties (and null map values) left out. Two map-key styles exist
(spec 2.15): the *legacy* default writes non-string map keys bare
(``{0:"10.0.0.1:10911"}``, not JSON), the *standard* form (BrowserCompatible +
MapSortField, what the 4.9.4+ NameServer uses for route data) quotes them and
escapes every non-ASCII character as ``\\uXXXX``. Map entries are written in sorted
key order in both styles: Java's HashMap order is not significant to any reader,
and sorting keeps the output reproducible.

``loads`` accepts both styles (bare integer keys anywhere, nested maps included);
``loads_object_keyed_map`` reads the maps fastjson writes with bean keys. Readers
raise only ``FastjsonError`` (a ``ValueError``) on malformed input; the protocol
layer turns it into its own error type.

One escape table serves the frame codec's JSON headers and the bodies: ``quote``
is the legacy string writer, ``FASTJSON_ONLY`` the characters where it differs
from json's C encoder.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from json.encoder import encode_basestring as _c_json_str  # C accelerated, ensure_ascii=False
from types import MappingProxyType
from typing import Any, Final

__all__ = [
    "FastjsonError",
    "FASTJSON_ONLY",
    "LEGACY_ESCAPES",
    "quote",
    "quote_standard",
    "dumps",
    "loads",
    "dumps_object_keyed_map",
    "loads_object_keyed_map",
    "split_object_keyed_map",
    "object_members",
    "array_elements",
    "type_name",
]


class FastjsonError(ValueError):
    """Text that is not fastjson output (nor JSON)."""


Text = bytes | bytearray | memoryview | str


# =========================================================================== escapes
def _legacy_escapes() -> Mapping[int, str]:
    # fastjson's default string escapes (SerializeWriter.writeStringWithDoubleQuote,
    # no BrowserCompatible): control characters, 0x7F-0x9F and the JS line
    # separators as \\uXXXX (uppercase hex), the usual short forms, '/' left alone.
    table = {c: f"\\u{c:04X}" for c in range(0x20)}
    table.update({c: f"\\u{c:04X}" for c in range(0x7F, 0xA0)})
    table.update(
        {
            0x08: "\\b",
            0x09: "\\t",
            0x0A: "\\n",
            0x0C: "\\f",
            0x0D: "\\r",
            0x22: '\\"',
            0x5C: "\\\\",
            0x2028: "\\u2028",
            0x2029: "\\u2029",
        }
    )
    return MappingProxyType(table)


#: ``str.translate`` table of fastjson's legacy string escapes.
LEGACY_ESCAPES: Final = _legacy_escapes()

#: The characters ``LEGACY_ESCAPES`` writes differently from json's C encoder: control
#: characters whose \\u escape has a hex letter (fastjson's is uppercase), 0x7F-0x9F and
#: U+2028/9 (the C encoder leaves them raw). Every other string takes the C encoder.
FASTJSON_ONLY: Final = re.compile("[\x0b\x0e\x0f\x1a-\x1f\x7f-\x9f\u2028\u2029]")

_BROWSER_SHORT: Mapping[str, str] = MappingProxyType(
    {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "/": "\\/", "\\": "\\\\"}
)
_NEEDS_BROWSER_ESCAPE = re.compile('["\\\\/\x00-\x1f\x7f-\U0010ffff]')


def quote(s: str) -> str:
    """A JSON string literal exactly as fastjson writes it by default (non-ASCII raw)."""
    if FASTJSON_ONLY.search(s) is None:
        return _c_json_str(s)
    return '"' + s.translate(LEGACY_ESCAPES) + '"'


def _browser_escape(m: re.Match[str]) -> str:
    # BrowserCompatible: short forms for \b \f \n \r \t " / and backslash, every
    # other character below 32 or from 127 up as \\uXXXX of each UTF-16 unit.
    ch = m.group()
    short = _BROWSER_SHORT.get(ch)
    if short is not None:
        return short
    cp = ord(ch)
    if cp < 0x10000:
        return f"\\u{cp:04X}"
    cp -= 0x10000
    return f"\\u{0xD800 + (cp >> 10):04X}\\u{0xDC00 + (cp & 0x3FF):04X}"


def quote_standard(s: str) -> str:
    """A JSON string literal as fastjson writes it with BrowserCompatible (pure ASCII)."""
    if _NEEDS_BROWSER_ESCAPE.search(s) is None:
        return '"' + s + '"'
    return '"' + _NEEDS_BROWSER_ESCAPE.sub(_browser_escape, s) + '"'


# =========================================================================== writing
def _write(value: Any, browser: bool, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(quote_standard(value) if browser else quote(value))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, dict):
        out.append("{")
        first = True
        for k in sorted(value):
            v = value[k]
            if v is None:  # fastjson drops null properties and null map values
                continue
            if not first:
                out.append(",")
            first = False
            if isinstance(k, str):
                out.append(quote_standard(k) if browser else quote(k))
            elif isinstance(k, int) and not isinstance(k, bool):
                # The whole point of the two styles: a Long key is written bare
                # unless BrowserCompatible turns non-string keys into strings.
                out.append(f'"{k}"' if browser else str(k))
            else:
                raise TypeError(f"map key {k!r} is neither str nor int")
            out.append(":")
            _write(v, browser, out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, v in enumerate(value):
            if i:
                out.append(",")
            _write(v, browser, out)
        out.append("]")
    else:
        raise TypeError(f"cannot write {type(value).__name__} as fastjson")


def dumps(obj: Any, standard: bool = False) -> bytes:
    """``obj`` (dicts, lists, str, int, bool, None) as fastjson writes it, UTF-8.

    ``standard=False``: the default (legacy) style, integer map keys bare.
    ``standard=True``: BrowserCompatible style, keys quoted, non-ASCII escaped.
    """
    out: list[str] = []
    _write(obj, standard, out)
    return "".join(out).encode("utf-8", "surrogatepass")


# =========================================================================== reading
def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# strict=False: fastjson accepts raw control characters inside strings.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, strict=False)
_STRING_OR_OPENER = re.compile(r'["{,]')
_STRING_END = re.compile(r'["\\]')
_BARE_KEY = re.compile(r"[ \t\n\r]*(-?[0-9]+)[ \t\n\r]*:")


def _quote_bare_keys(text: str) -> str:
    """Quote integer object keys (``{0:`` / ``,-1 :``) outside string literals.

    A small tokenizer: it walks from one structural character to the next and
    skips string literals whole (honouring backslash escapes), so text inside a
    string such as ``"{0:x}"`` is never touched. After ``{`` or ``,`` an integer
    followed by ``:`` can only be an object key, so quoting it is exact.
    """
    parts: list[str] = []
    last = 0
    pos = 0
    n = len(text)
    search = _STRING_OR_OPENER.search
    while pos < n:
        m = search(text, pos)
        if m is None:
            break
        pos = m.end()
        if m.group() == '"':
            while True:  # skip to the closing quote
                e = _STRING_END.search(text, pos)
                if e is None:
                    pos = n  # unterminated: the parser will say so
                    break
                if e.group() == "\\":
                    pos = e.end() + 1
                    continue
                pos = e.end()
                break
            continue
        k = _BARE_KEY.match(text, pos)
        if k is not None:
            parts.append(text[last : k.start(1)])
            parts.append('"' + k.group(1) + '"')
            last = k.end(1)
            pos = k.end()
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)


def _text(data: Text) -> str:
    if isinstance(data, str):
        return data
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise FastjsonError(f"JSON body is not UTF-8: {e.reason}") from None


def loads(data: Text) -> Any:
    """Parse fastjson output, legacy (bare integer keys) or standard.

    Integer keys come back as strings (``{"0": ...}``). Anything that is not one
    JSON value -> ``FastjsonError``.
    """
    text = _text(data)
    try:
        return _DECODER.decode(text)
    except (ValueError, RecursionError):
        pass
    try:
        return _DECODER.decode(_quote_bare_keys(text))
    except RecursionError:
        raise FastjsonError("JSON body nests too deeply") from None
    except ValueError as e:  # JSONDecodeError, int() digit limit, NaN
        raise FastjsonError(f"malformed JSON body: {e}") from None


def type_name(v: Any) -> str:
    """What a parsed JSON value is, with its article, for error messages."""
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if v is None:
        return "null"
    return f"a {type(v).__name__}"


# =========================================================================== object-keyed maps
_WS = " \t\n\r"


def _skip_ws(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i


def _string_end(text: str, i: int) -> int:
    """Index just past the string literal whose opening quote is at ``text[i]``."""
    j = i + 1
    while True:
        e = _STRING_END.search(text, j)
        if e is None:
            raise FastjsonError("unterminated string in JSON body")
        if e.group() == "\\":
            j = e.end() + 1
            continue
        return e.end()


def _value_end(text: str, i: int) -> int:
    """Index just past the value starting at ``text[i]``: a string, a balanced
    ``{...}``/``[...]`` (strings inside skipped whole) or a scalar."""
    n = len(text)
    if i >= n:
        raise FastjsonError("JSON body ends where a value was expected")
    c = text[i]
    if c == '"':
        return _string_end(text, i)
    if c in "{[":
        depth = 0
        j = i
        while j < n:
            c = text[j]
            if c == '"':
                j = _string_end(text, j)
                continue
            if c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        raise FastjsonError("unbalanced braces in JSON body")
    j = i
    while j < n and text[j] not in ",:}] \t\n\r":
        j += 1
    if j == i:
        raise FastjsonError(f"unexpected {c!r} at {i} in JSON body")
    return j


def _expect(text: str, i: int, ch: str) -> int:
    i = _skip_ws(text, i)
    if i >= len(text) or text[i] != ch:
        got = repr(text[i]) if i < len(text) else "the end"
        raise FastjsonError(f"expected {ch!r} at {i} in JSON body, found {got}")
    return i + 1


def dumps_object_keyed_map(field: str, entries: list[tuple[dict[str, Any], Any]]) -> bytes:
    """fastjson's form of a Map with object keys (TopicStatsTable, ConsumeStats):
    `{"offsetTable":{{"brokerName":..}:{..},..}}` — not strict JSON, but what Java
    mqadmin reads. The reader is ``loads_object_keyed_map``."""
    parts = []
    for key, value in entries:
        parts.append(dumps(key).decode() + ":" + dumps(value).decode())
    return ('{"' + field + '":{' + ",".join(parts) + "}}").encode()


def loads_object_keyed_map(data: Text, field: str) -> list[tuple[dict[str, Any], Any]]:
    """The entries of an object-keyed map in fastjson's output, in body order.

    fastjson writes a ``Map`` whose keys are beans (``TopicStatsTable.offsetTable``,
    ``ConsumeStats.offsetTable``: MessageQueue -> TopicOffset / OffsetWrapper) with the
    key object itself in key position, which no JSON parser accepts::

        {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"maxOffset":3,...},...}}

    ``field`` names the top-level property holding such a map; a body without it
    (or with ``null``) has no entries. Each key must be an object; keys and values are
    read with ``loads``. Anything malformed -> ``FastjsonError``.
    """
    text = _text(data)
    for key, _, start, end in _top_level(text):
        if key == field:
            return _object_keyed_entries(text, start, end)
    return []


def split_object_keyed_map(data: Text, field: str) -> tuple[dict[str, Any], list[tuple[dict[str, Any], Any]]]:
    """A body with one object-keyed map beside ordinary properties (ConsumerRunningInfo's
    ``mqTable``): (the other top-level properties, read with ``loads``; the entries of
    the map at ``field`` as ``loads_object_keyed_map`` reads them)."""
    text = _text(data)
    others: list[str] = []
    entries: list[tuple[dict[str, Any], Any]] = []
    for key, key_text, start, end in _top_level(text):
        if key == field:
            entries = _object_keyed_entries(text, start, end)
        else:
            others.append(key_text + ":" + text[start:end])
    props = loads("{" + ",".join(others) + "}")
    return props, entries


def object_members(text: str) -> Iterator[tuple[Any, int, int]]:
    """(key, value start, value end) of each property of the object in ``text``. The
    values are only delimited, not parsed: one may hold what no JSON parser reads (an
    object-keyed map deeper inside), for the caller to read with the functions above."""
    for key, _, start, end in _top_level(text):
        yield key, start, end


def array_elements(text: str, start: int) -> list[tuple[int, int]]:
    """(start, end) of each element of the array at ``text[start]``, only delimited."""
    i = _expect(text, start, "[")
    spans: list[tuple[int, int]] = []
    while True:
        i = _skip_ws(text, i)
        if i < len(text) and text[i] == "]":
            return spans
        if spans:
            i = _skip_ws(text, _expect(text, i, ","))
        end = _value_end(text, i)
        spans.append((i, end))
        i = end


def _top_level(text: str) -> Iterator[tuple[Any, str, int, int]]:
    """(key, its text, value start, value end) of each top-level property of the object in
    ``text``; values are only delimited, not parsed."""
    i = _expect(text, 0, "{")
    while True:
        i = _skip_ws(text, i)
        if i < len(text) and text[i] == "}":
            return
        k_end = _value_end(text, i)
        key_text = text[i:k_end]
        i = _skip_ws(text, _expect(text, k_end, ":"))
        v_end = _value_end(text, i)
        yield loads(key_text), key_text, i, v_end
        i = _skip_ws(text, v_end)
        if i < len(text) and text[i] == ",":
            i += 1
            continue
        _expect(text, i, "}")
        return


def _object_keyed_entries(text: str, start: int, end: int) -> list[tuple[dict[str, Any], Any]]:
    if text[start:end] == "null":
        return []
    i = _expect(text, start, "{")
    out: list[tuple[dict[str, Any], Any]] = []
    while True:
        i = _skip_ws(text, i)
        if i < end and text[i] == "}":
            return out
        if out:
            i = _skip_ws(text, _expect(text, i, ","))
        k_end = _value_end(text, i)
        key = loads(text[i:k_end])
        if not isinstance(key, dict):
            raise FastjsonError(f"object-keyed map entry has {type_name(key)} as key")
        i = _skip_ws(text, _expect(text, k_end, ":"))
        v_end = _value_end(text, i)
        out.append((key, loads(text[i:v_end])))
        i = v_end
