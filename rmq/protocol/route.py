"""JSON bodies of the NameServer and client protocol, as fastjson 1.2.83 writes them.

Spec sections 2.7, 2.8, 2.10, 2.14, 2.15 and 2.16. Every body is a dataclass with
``to_json() -> bytes`` and ``from_json(bytes)``; the Java field names live only in
the ``to_obj``/``from_obj`` pairs below.

Writing follows fastjson's defaults: bean properties in alphabetical order, no
blanks, null properties (and null map values) left out, enums by name. Two map-key
styles exist (spec 2.15): the *legacy* default writes non-string map keys bare
(``{0:"10.0.0.1:10911"}``, not JSON), the *standard* form the 4.9.4+ NameServer
uses for route data (BrowserCompatible + MapSortField) quotes them and escapes
every non-ASCII character as ``\\uXXXX``. Map entries are written in sorted key
order in both styles: Java's HashMap order is not significant to any reader, and
sorting keeps our output reproducible.

Reading goes through ``loads_fastjson``, which accepts both styles (bare integer
keys anywhere, including nested maps) and raises ``ProtocolError`` on anything
malformed. Unknown properties are ignored, so 5.x peers' extra fields pass.

Also here: RegisterBrokerBody's compressed form (zlib over length-prefixed
DataVersion JSON, ``TopicConfig.encode()`` lines and the filter server list) and
``SubscriptionData.build`` (FilterAPI tag parsing with Java hash codes).
"""
from __future__ import annotations

import json
import re
import struct
import zlib
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, TypeVar

from rmq.protocol.errors import ProtocolError
from rmq.protocol.message import java_hash

__all__ = [
    "loads_fastjson", "dumps_fastjson", "loads_object_keyed_map",
    "TopicConfig", "DataVersion", "TopicConfigSerializeWrapper", "RegisterBrokerBody",
    "QueueData", "BrokerData", "TopicRouteData", "ClusterInfo", "TopicList", "KVTable",
    "ProducerData", "SubscriptionData", "ConsumerData", "HeartbeatData", "ConsumerIdList",
    "MessageQueue", "LockBatchRequestBody", "LockBatchResponseBody", "UnlockBatchRequestBody",
    "MASTER_ID", "SUB_ALL", "EXPRESSION_TYPE_TAG", "EXPRESSION_TYPE_SQL92",
    "TOPIC_FILTER_TYPES", "DEFAULT_QUEUE_NUMS",
]

MASTER_ID = 0                     # MixAll.MASTER_ID: brokerId of a group's master
SUB_ALL = "*"                     # SubscriptionData.SUB_ALL
EXPRESSION_TYPE_TAG = "TAG"
EXPRESSION_TYPE_SQL92 = "SQL92"
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
DEFAULT_QUEUE_NUMS = 16           # TopicConfig.defaultRead/WriteQueueNums
_PERM_RW = 6                      # PermName.PERM_READ | PERM_WRITE

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1

# A compressed register body inflates to a few bytes per topic; this bound only
# stops a zip bomb from exhausting memory (the frame itself is at most 16 MiB).
_MAX_INFLATED = 256 * 1024 * 1024

_I32 = struct.Struct(">i")
_DECIMAL = re.compile(r"[+-]?[0-9]{1,20}")


# =========================================================================== writing
def _legacy_escapes() -> dict[int, str]:
    # fastjson's default string escapes (SerializeWriter, no BrowserCompatible):
    # control characters, 0x7F-0x9F and the JS line separators as \\uXXXX
    # (uppercase hex), the usual short forms, '/' left alone.
    table = {c: "\\u%04X" % c for c in range(0x20)}
    table.update({c: "\\u%04X" % c for c in range(0x7F, 0xA0)})
    table.update({0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r",
                  0x22: '\\"', 0x5C: "\\\\", 0x2028: "\\u2028", 0x2029: "\\u2029"})
    return table


_LEGACY_ESCAPES: Mapping[int, str] = MappingProxyType(_legacy_escapes())
_BROWSER_SHORT: Mapping[str, str] = MappingProxyType({
    "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r",
    '"': '\\"', "/": "\\/", "\\": "\\\\"})


_NEEDS_LEGACY_ESCAPE = re.compile('["\\\\\x00-\x1f\x7f-\x9f\u2028\u2029]')
_NEEDS_BROWSER_ESCAPE = re.compile('["\\\\/\x00-\x1f\x7f-\U0010ffff]')


def _browser_escape(m: re.Match[str]) -> str:
    # BrowserCompatible: short forms for \b \f \n \r \t " / and backslash, every
    # other character below 32 or from 127 up as \\uXXXX of each UTF-16 unit.
    ch = m.group()
    short = _BROWSER_SHORT.get(ch)
    if short is not None:
        return short
    cp = ord(ch)
    if cp < 0x10000:
        return "\\u%04X" % cp
    cp -= 0x10000
    return "\\u%04X\\u%04X" % (0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF))


def _quote(s: str, browser: bool) -> str:
    if browser:
        if _NEEDS_BROWSER_ESCAPE.search(s) is None:
            return '"' + s + '"'
        return '"' + _NEEDS_BROWSER_ESCAPE.sub(_browser_escape, s) + '"'
    if _NEEDS_LEGACY_ESCAPE.search(s) is None:
        return '"' + s + '"'
    return '"' + s.translate(_LEGACY_ESCAPES) + '"'


def _write(value: Any, browser: bool, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_quote(value, browser))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, dict):
        out.append("{")
        first = True
        for k in sorted(value):
            v = value[k]
            if v is None:      # fastjson drops null properties and null map values
                continue
            if not first:
                out.append(",")
            first = False
            if isinstance(k, str):
                out.append(_quote(k, browser))
            elif isinstance(k, int) and not isinstance(k, bool):
                # The whole point of the two styles: a Long key is written bare
                # unless BrowserCompatible turns non-string keys into strings.
                out.append('"%d"' % k if browser else str(k))
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


def dumps_fastjson(obj: Any, standard: bool = False) -> bytes:
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
            while True:                       # skip to the closing quote
                e = _STRING_END.search(text, pos)
                if e is None:
                    pos = n                   # unterminated: the parser will say so
                    break
                if e.group() == "\\":
                    pos = e.end() + 1
                    continue
                pos = e.end()
                break
            continue
        k = _BARE_KEY.match(text, pos)
        if k is not None:
            parts.append(text[last:k.start(1)])
            parts.append('"' + k.group(1) + '"')
            last = k.end(1)
            pos = k.end()
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)


def loads_fastjson(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse fastjson output, legacy (bare integer keys) or standard.

    Integer keys come back as strings (``{"0": ...}``); the typed ``from_obj``
    readers convert them. Anything that is not one JSON value -> ``ProtocolError``.
    """
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"JSON body is not UTF-8: {e.reason}") from None
    try:
        return _DECODER.decode(text)
    except (ValueError, RecursionError):
        pass
    try:
        return _DECODER.decode(_quote_bare_keys(text))
    except RecursionError:
        raise ProtocolError("JSON body nests too deeply") from None
    except ValueError as e:  # JSONDecodeError, int() digit limit, NaN
        raise ProtocolError(f"malformed JSON body: {e}") from None


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
            raise ProtocolError("unterminated string in JSON body")
        if e.group() == "\\":
            j = e.end() + 1
            continue
        return e.end()


def _value_end(text: str, i: int) -> int:
    """Index just past the value starting at ``text[i]``: a string, a balanced
    ``{...}``/``[...]`` (strings inside skipped whole) or a scalar."""
    n = len(text)
    if i >= n:
        raise ProtocolError("JSON body ends where a value was expected")
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
        raise ProtocolError("unbalanced braces in JSON body")
    j = i
    while j < n and text[j] not in ",:}] \t\n\r":
        j += 1
    if j == i:
        raise ProtocolError(f"unexpected {c!r} at {i} in JSON body")
    return j


def _expect(text: str, i: int, ch: str) -> int:
    i = _skip_ws(text, i)
    if i >= len(text) or text[i] != ch:
        got = repr(text[i]) if i < len(text) else "the end"
        raise ProtocolError(f"expected {ch!r} at {i} in JSON body, found {got}")
    return i + 1


def dumps_object_keyed_map(field: str, entries: list[tuple[dict[str, Any], Any]]) -> bytes:
    """fastjson's form of a Map with object keys (TopicStatsTable, ConsumeStats):
    `{"offsetTable":{{"brokerName":..}:{..},..}}` — not strict JSON, but what Java
    mqadmin reads. The reader is ``loads_object_keyed_map``."""
    parts = []
    for key, value in entries:
        parts.append(dumps_fastjson(key).decode() + ":" + dumps_fastjson(value).decode())
    return ('{"' + field + '":{' + ",".join(parts) + "}}").encode()


def loads_object_keyed_map(data: bytes | bytearray | memoryview | str,
                           field: str) -> list[tuple[dict[str, Any], Any]]:
    """The entries of an object-keyed map in fastjson's output, in body order.

    fastjson writes a ``Map`` whose keys are beans (``TopicStatsTable.offsetTable``,
    ``ConsumeStats.offsetTable``: MessageQueue -> TopicOffset / OffsetWrapper) with the
    key object itself in key position, which no JSON parser accepts::

        {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"maxOffset":3,...},...}}

    ``field`` names the top-level property holding such a map; a body without it
    (or with ``null``) has no entries. Each key must be an object; keys and values are
    read with ``loads_fastjson``. Anything malformed -> ``ProtocolError``.
    """
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"JSON body is not UTF-8: {e.reason}") from None
    i = _expect(text, 0, "{")
    while True:
        i = _skip_ws(text, i)
        if i < len(text) and text[i] == "}":
            return []
        k_end = _value_end(text, i)
        key = loads_fastjson(text[i:k_end])
        i = _skip_ws(text, _expect(text, k_end, ":"))
        v_end = _value_end(text, i)
        if key == field:
            return _object_keyed_entries(text, i, v_end)
        i = _skip_ws(text, v_end)
        if i < len(text) and text[i] == ",":
            i += 1
            continue
        _expect(text, i, "}")
        return []


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
        key = loads_fastjson(text[i:k_end])
        if not isinstance(key, dict):
            raise ProtocolError(f"object-keyed map entry has {_type_name(key)} as key")
        i = _skip_ws(text, _expect(text, k_end, ":"))
        v_end = _value_end(text, i)
        out.append((key, loads_fastjson(text[i:v_end])))
        i = v_end


# =========================================================================== field access
def _type_name(v: Any) -> str:
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if v is None:
        return "null"
    return "a string"


def _as_obj(v: Any, what: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise ProtocolError(f"{what} is {_type_name(v)}, not an object")
    return v


def _str(obj: Mapping[str, Any], key: str, default: str | None = None) -> str | None:
    v = obj.get(key)
    if v is None:
        return default
    if isinstance(v, str):
        return v
    if isinstance(v, (int, bool)):    # fastjson coerces scalars into String fields
        return json.dumps(v)
    raise ProtocolError(f"field {key} is {_type_name(v)}, not a string")


def _req_str(obj: Mapping[str, Any], key: str) -> str:
    v = _str(obj, key)
    if v is None:
        raise ProtocolError(f"missing field {key}")
    return v


def _integer(v: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ProtocolError(f"{what} is {_type_name(v)}, not an integer")
    if isinstance(v, str):            # fastjson parses numeric strings into int fields
        s = v.strip()
        if _DECIMAL.fullmatch(s) is None:
            raise ProtocolError(f"{what} is not an integer: {v[:40]!r}")
        v = int(s)
    if v < lo or v > hi:
        raise ProtocolError(f"{what} is out of range: {v}")
    return v


def _int(obj: Mapping[str, Any], key: str, default: int) -> int:
    v = obj.get(key)
    return default if v is None else _integer(v, f"field {key}", _INT_MIN, _INT_MAX)


def _long(obj: Mapping[str, Any], key: str, default: int) -> int:
    v = obj.get(key)
    return default if v is None else _integer(v, f"field {key}", _LONG_MIN, _LONG_MAX)


def _opt_int(obj: Mapping[str, Any], key: str) -> int | None:
    v = obj.get(key)
    return None if v is None else _integer(v, f"field {key}", _INT_MIN, _INT_MAX)


def _bool(obj: Mapping[str, Any], key: str, default: bool) -> bool:
    v = obj.get(key)
    if v is None:
        return default
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    if isinstance(v, int):
        return v != 0
    raise ProtocolError(f"field {key} is {_type_name(v)}, not a boolean")


def _opt_bool(obj: Mapping[str, Any], key: str) -> bool | None:
    return None if obj.get(key) is None else _bool(obj, key, False)


def _list(obj: Mapping[str, Any], key: str) -> list[Any]:
    v = obj.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        raise ProtocolError(f"field {key} is {_type_name(v)}, not an array")
    return v


def _map(obj: Mapping[str, Any], key: str) -> dict[str, Any]:
    v = obj.get(key)
    if v is None:
        return {}
    return _as_obj(v, f"field {key}")


def _str_list(obj: Mapping[str, Any], key: str) -> list[str]:
    out = []
    for v in _list(obj, key):
        if not isinstance(v, str):
            raise ProtocolError(f"field {key} holds {_type_name(v)}, not strings")
        out.append(v)
    return out


def _str_map(obj: Mapping[str, Any], key: str) -> dict[str, str]:
    out = {}
    for k, v in _map(obj, key).items():
        if v is None:
            continue
        if not isinstance(v, str):
            raise ProtocolError(f"field {key}[{k!r}] is {_type_name(v)}, not a string")
        out[k] = v
    return out


T = TypeVar("T", bound="_Body")


class _Body:
    """Shared ``to_json``/``from_json`` over each class's ``to_obj``/``from_obj``."""

    __slots__ = ()

    def to_obj(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_obj(cls: type[T], obj: Any) -> T:
        raise NotImplementedError

    def to_json(self) -> bytes:
        return dumps_fastjson(self.to_obj())

    @classmethod
    def from_json(cls: type[T], data: bytes | bytearray | memoryview | str) -> T:
        return cls.from_obj(loads_fastjson(data))


def _objs(items: Iterable[Any], what: str, reader: Callable[[Any], T]) -> list[T]:
    return [reader(_as_obj(v, what)) for v in items]


# =========================================================================== topics / register
@dataclass(slots=True)
class TopicConfig(_Body):
    """``TopicConfig``: a broker's view of one topic (spec 2.13, 2.14)."""

    topic_name: str
    read_queue_nums: int = DEFAULT_QUEUE_NUMS
    write_queue_nums: int = DEFAULT_QUEUE_NUMS
    perm: int = _PERM_RW
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] | None = None     # 5.x; None = not sent (4.9.8)

    def to_obj(self) -> dict[str, Any]:
        return {"attributes": self.attributes, "order": self.order, "perm": self.perm,
                "readQueueNums": self.read_queue_nums,
                "topicFilterType": self.topic_filter_type, "topicName": self.topic_name,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}

    @classmethod
    def from_obj(cls, obj: Any) -> TopicConfig:
        o = _as_obj(obj, "TopicConfig")
        tft = _str(o, "topicFilterType", "SINGLE_TAG")
        if tft not in TOPIC_FILTER_TYPES:
            raise ProtocolError(f"unknown topicFilterType {tft!r:.40}")
        return cls(_req_str(o, "topicName"), _int(o, "readQueueNums", DEFAULT_QUEUE_NUMS),
                   _int(o, "writeQueueNums", DEFAULT_QUEUE_NUMS), _int(o, "perm", _PERM_RW),
                   tft, _int(o, "topicSysFlag", 0),  # type: ignore[arg-type]
                   _bool(o, "order", False),
                   _str_map(o, "attributes") if o.get("attributes") is not None else None)

    def encode(self) -> str:
        """``TopicConfig.encode()``: ``name read write perm filterType`` (+ 5.x attributes).

        The compressed register body carries only these fields: topicSysFlag and
        order do not survive it (as in RocketMQ).
        """
        text = (f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} "
                f"{self.perm} {self.topic_filter_type}")
        if self.attributes is not None:
            text += " " + dumps_fastjson(self.attributes).decode()
        return text

    @classmethod
    def decode(cls, text: str) -> TopicConfig:
        """``TopicConfig.decode``: 5 space-separated fields, an optional 6th (5.x attributes)."""
        parts = text.split(" ")
        while parts and parts[-1] == "":   # Java's split drops trailing empty strings
            parts.pop()
        if len(parts) < 5:
            raise ProtocolError(f"topic config text has {len(parts)} fields, not 5: {text[:80]!r}")
        name, read, write, perm, tft = parts[:5]
        if not name:
            raise ProtocolError(f"topic config text without a topic name: {text[:80]!r}")
        if tft not in TOPIC_FILTER_TYPES:
            raise ProtocolError(f"unknown topicFilterType {tft!r:.40}")
        attributes = None
        if len(parts) >= 6:
            # 5.x: JSON attributes (split would cut a value holding a blank; RocketMQ
            # ignores what does not parse, and so do we)
            try:
                attrs = loads_fastjson(" ".join(parts[5:]))
                if isinstance(attrs, dict) and all(isinstance(v, str) for v in attrs.values()):
                    attributes = attrs
            except ProtocolError:
                pass
        return cls(name, _integer(read, "readQueueNums", _INT_MIN, _INT_MAX),
                   _integer(write, "writeQueueNums", _INT_MIN, _INT_MAX),
                   _integer(perm, "perm", _INT_MIN, _INT_MAX), tft, attributes=attributes)


@dataclass(frozen=True, slots=True)
class DataVersion(_Body):
    """``DataVersion``: (timestamp ms, counter); 5.x adds stateVersion.

    Equality is field equality, as Java's ``equals``: the NameServer re-reads a
    broker's topics only when this changes.
    """

    timestamp: int = 0
    counter: int = 0
    state_version: int | None = None    # 5.x; None = not sent (4.9.8)

    def to_obj(self) -> dict[str, Any]:
        return {"counter": self.counter, "stateVersion": self.state_version,
                "timestamp": self.timestamp}

    @classmethod
    def from_obj(cls, obj: Any) -> DataVersion:
        o = _as_obj(obj, "DataVersion")
        sv = o.get("stateVersion")
        return cls(_long(o, "timestamp", 0), _long(o, "counter", 0),
                   None if sv is None else _long(o, "stateVersion", 0))

    def next_version(self, now_ms: int) -> DataVersion:
        return DataVersion(now_ms, self.counter + 1, self.state_version)


@dataclass(slots=True)
class TopicConfigSerializeWrapper(_Body):
    """``TopicConfigSerializeWrapper``: a broker's topic table and its version."""

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)

    def to_obj(self) -> dict[str, Any]:
        return {"dataVersion": self.data_version.to_obj(),
                "topicConfigTable": {k: v.to_obj() for k, v in self.topic_config_table.items()}}

    @classmethod
    def from_obj(cls, obj: Any) -> TopicConfigSerializeWrapper:
        o = _as_obj(obj, "TopicConfigSerializeWrapper")
        table = {}
        for name, tc in _map(o, "topicConfigTable").items():
            if tc is None:
                continue
            table[name] = TopicConfig.from_obj(_as_obj(tc, f"topicConfigTable[{name!r}]"))
        dv = o.get("dataVersion")
        return cls(table, DataVersion() if dv is None else DataVersion.from_obj(dv))


class _Inflated:
    """Reader over the inflated compressed register body; errors are ProtocolError."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def int32(self, what: str) -> int:
        if self.pos + 4 > len(self.buf):
            raise ProtocolError(f"compressed register body ends inside {what}")
        (v,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def chunk(self, what: str) -> bytes:
        n = self.int32(what + " length")
        if n < 0 or self.pos + n > len(self.buf):
            raise ProtocolError(f"compressed register body: {what} length {n} "
                                f"exceeds the {len(self.buf) - self.pos} bytes left")
        data = self.buf[self.pos:self.pos + n]
        self.pos += n
        return data


def _utf8(b: bytes, what: str) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"{what} is not UTF-8") from None


@dataclass(slots=True)
class RegisterBrokerBody(_Body):
    """``RegisterBrokerBody`` (spec 2.14): plain JSON or the compressed form."""

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = field(
        default_factory=TopicConfigSerializeWrapper)
    filter_server_list: list[str] = field(default_factory=list)

    def to_obj(self) -> dict[str, Any]:
        return {"filterServerList": list(self.filter_server_list),
                "topicConfigSerializeWrapper": self.topic_config_serialize_wrapper.to_obj()}

    @classmethod
    def from_obj(cls, obj: Any) -> RegisterBrokerBody:
        o = _as_obj(obj, "RegisterBrokerBody")
        w = o.get("topicConfigSerializeWrapper")
        return cls(TopicConfigSerializeWrapper() if w is None
                   else TopicConfigSerializeWrapper.from_obj(w),
                   _str_list(o, "filterServerList"))

    def encode(self, compress: bool) -> bytes:
        """Body bytes for REGISTER_BROKER with header ``compressed=compress``."""
        if not compress:
            return self.to_json()
        w = self.topic_config_serialize_wrapper
        parts: list[bytes] = []
        dv = w.data_version.to_json()
        parts += [_I32.pack(len(dv)), dv, _I32.pack(len(w.topic_config_table))]
        for tc in w.topic_config_table.values():
            line = tc.encode().encode("utf-8")
            parts += [_I32.pack(len(line)), line]
        fs = dumps_fastjson(list(self.filter_server_list))
        parts += [_I32.pack(len(fs)), fs]
        # Deflater(BEST_COMPRESSION) inside a DeflaterOutputStream: a zlib stream.
        return zlib.compress(b"".join(parts), 9)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, compressed: bool) -> RegisterBrokerBody:
        if not compressed:
            return cls.from_json(data)
        inflater = zlib.decompressobj()
        try:
            raw = inflater.decompress(bytes(data), _MAX_INFLATED)
        except zlib.error as e:
            raise ProtocolError(f"compressed register body does not inflate: {e}") from None
        if inflater.unconsumed_tail:
            raise ProtocolError(f"compressed register body inflates past {_MAX_INFLATED} bytes")
        r = _Inflated(raw)
        dv = DataVersion.from_json(r.chunk("data version"))
        count = r.int32("topic count")
        if count < 0 or count > (len(raw) - r.pos) // 4:
            raise ProtocolError(f"compressed register body: impossible topic count {count}")
        table: dict[str, TopicConfig] = {}
        for _ in range(count):
            tc = TopicConfig.decode(_utf8(r.chunk("topic config"), "topic config text"))
            table[tc.topic_name] = tc
        fs_obj = loads_fastjson(r.chunk("filter server list"))
        if fs_obj is None:
            fs_obj = []
        if not isinstance(fs_obj, list) or not all(isinstance(s, str) for s in fs_obj):
            raise ProtocolError("compressed register body: filter server list is not strings")
        # 5.x brokers append static-topic mapping entries here; 4.x ignores them too.
        return cls(TopicConfigSerializeWrapper(table, dv), fs_obj)


# =========================================================================== routes
@dataclass(slots=True)
class QueueData(_Body):
    """``QueueData``: one broker group's queues for a topic."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_obj(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "perm": self.perm,
                "readQueueNums": self.read_queue_nums, "topicSysFlag": self.topic_sys_flag,
                "writeQueueNums": self.write_queue_nums}

    @classmethod
    def from_obj(cls, obj: Any) -> QueueData:
        o = _as_obj(obj, "QueueData")
        # 4.x before 4.9 spelt it "topicSynFlag"
        flag = o.get("topicSysFlag", o.get("topicSynFlag"))
        return cls(_req_str(o, "brokerName"), _int(o, "readQueueNums", 0),
                   _int(o, "writeQueueNums", 0), _int(o, "perm", 0),
                   0 if flag is None else _integer(flag, "field topicSysFlag",
                                                   _INT_MIN, _INT_MAX))

    def copy(self) -> QueueData:
        return QueueData(self.broker_name, self.read_queue_nums, self.write_queue_nums,
                         self.perm, self.topic_sys_flag)


@dataclass(slots=True)
class BrokerData(_Body):
    """``BrokerData``: a broker group (name) and its members' addresses by broker id."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)
    enable_acting_master: bool | None = None    # 5.x
    zone_name: str | None = None                # 5.x

    def to_obj(self) -> dict[str, Any]:
        return {"brokerAddrs": dict(self.broker_addrs), "brokerName": self.broker_name,
                "cluster": self.cluster, "enableActingMaster": self.enable_acting_master,
                "zoneName": self.zone_name}

    def to_json(self, standard: bool = False) -> bytes:  # type: ignore[override]
        return dumps_fastjson(self.to_obj(), standard)

    @classmethod
    def from_obj(cls, obj: Any) -> BrokerData:
        o = _as_obj(obj, "BrokerData")
        addrs: dict[int, str] = {}
        for k, v in _map(o, "brokerAddrs").items():
            bid = _integer(k, "brokerAddrs key", _LONG_MIN, _LONG_MAX)
            if v is None:
                continue
            if not isinstance(v, str):
                raise ProtocolError(f"brokerAddrs[{bid}] is {_type_name(v)}, not a string")
            addrs[bid] = v
        return cls(_str(o, "cluster", "") or "", _req_str(o, "brokerName"), addrs,
                   _opt_bool(o, "enableActingMaster"), _str(o, "zoneName"))

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def copy(self) -> BrokerData:
        return BrokerData(self.cluster, self.broker_name, dict(self.broker_addrs),
                          self.enable_acting_master, self.zone_name)


@dataclass(slots=True)
class TopicRouteData(_Body):
    """``TopicRouteData`` (spec 2.15): the GET_ROUTEINFO_BY_TOPIC answer."""

    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None

    def to_obj(self) -> dict[str, Any]:
        return {"brokerDatas": [b.to_obj() for b in self.broker_datas],
                "filterServerTable": {k: list(v) for k, v in self.filter_server_table.items()},
                "orderTopicConf": self.order_topic_conf,
                "queueDatas": [q.to_obj() for q in self.queue_datas]}

    def to_json(self, standard: bool = False) -> bytes:  # type: ignore[override]
        """Legacy (``{0:"addr"}``) unless ``standard``: what a client of version
        >= V4_9_4 or one sending ``acceptStandardJsonOnly=true`` gets."""
        return dumps_fastjson(self.to_obj(), standard)

    @classmethod
    def from_obj(cls, obj: Any) -> TopicRouteData:
        o = _as_obj(obj, "TopicRouteData")
        fst: dict[str, list[str]] = {}
        for addr, servers in _map(o, "filterServerTable").items():
            if servers is None:
                continue
            if not isinstance(servers, list) or not all(isinstance(s, str) for s in servers):
                raise ProtocolError(f"filterServerTable[{addr!r}] is not a list of strings")
            fst[addr] = servers
        return cls(_objs(_list(o, "queueDatas"), "queueDatas entry", QueueData.from_obj),
                   _objs(_list(o, "brokerDatas"), "brokerDatas entry", BrokerData.from_obj),
                   fst, _str(o, "orderTopicConf"))


@dataclass(slots=True)
class ClusterInfo(_Body):
    """``ClusterInfo`` (spec 2.16). Always written in the legacy style, as 4.9.8 does."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = field(default_factory=dict)

    def to_obj(self) -> dict[str, Any]:
        return {"brokerAddrTable": {k: v.to_obj() for k, v in self.broker_addr_table.items()},
                "clusterAddrTable": {k: sorted(v) for k, v in self.cluster_addr_table.items()}}

    @classmethod
    def from_obj(cls, obj: Any) -> ClusterInfo:
        o = _as_obj(obj, "ClusterInfo")
        bat = {}
        for name, bd in _map(o, "brokerAddrTable").items():
            if bd is not None:
                bat[name] = BrokerData.from_obj(bd)
        cat = {}
        for name, members in _map(o, "clusterAddrTable").items():
            if members is None:
                continue
            if not isinstance(members, list) or not all(isinstance(s, str) for s in members):
                raise ProtocolError(f"clusterAddrTable[{name!r}] is not a list of strings")
            cat[name] = members
        return cls(bat, cat)


@dataclass(slots=True)
class TopicList(_Body):
    """``TopicList``: ``{"brokerAddr":..., "topicList":[...]}`` (brokerAddr only for
    the system topic list)."""

    topic_list: list[str] = field(default_factory=list)
    broker_addr: str | None = None

    def to_obj(self) -> dict[str, Any]:
        return {"brokerAddr": self.broker_addr, "topicList": list(self.topic_list)}

    @classmethod
    def from_obj(cls, obj: Any) -> TopicList:
        o = _as_obj(obj, "TopicList")
        return cls(_str_list(o, "topicList"), _str(o, "brokerAddr"))


@dataclass(slots=True)
class KVTable(_Body):
    """``KVTable``: ``{"table":{key: value}}`` (one NameServer KV namespace)."""

    table: dict[str, str] = field(default_factory=dict)

    def to_obj(self) -> dict[str, Any]:
        return {"table": dict(self.table)}

    @classmethod
    def from_obj(cls, obj: Any) -> KVTable:
        return cls(_str_map(_as_obj(obj, "KVTable"), "table"))


# =========================================================================== heartbeat (2.7)
@dataclass(slots=True)
class ProducerData(_Body):
    group_name: str

    def to_obj(self) -> dict[str, Any]:
        return {"groupName": self.group_name}

    @classmethod
    def from_obj(cls, obj: Any) -> ProducerData:
        return cls(_req_str(_as_obj(obj, "ProducerData"), "groupName"))


def _java_trim(s: str) -> str:
    """``String.trim()``: strips every character <= U+0020, nothing else."""
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


@dataclass(slots=True)
class SubscriptionData(_Body):
    """``SubscriptionData``; ``filterClassSource`` is never serialized and not kept."""

    topic: str
    sub_string: str
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    expression_type: str = EXPRESSION_TYPE_TAG
    class_filter_mode: bool = False

    @classmethod
    def build(cls, topic: str, expression: str | None, expression_type: str | None = None,
              sub_version: int = 0) -> SubscriptionData:
        """``FilterAPI.build``: parse a TAG expression, or keep an SQL92 one verbatim.

        TAG: null, empty or ``*`` subscribe to everything; otherwise split on
        ``||``, trim (Java trim), drop empties; each tag's ``String.hashCode()``
        goes to codeSet. ``sub_version`` is the caller's clock (Java uses
        ``System.currentTimeMillis()``).
        """
        if expression_type is None or expression_type == EXPRESSION_TYPE_TAG:
            if not expression or expression == SUB_ALL:
                return cls(topic, SUB_ALL, [], [], sub_version)
            tags: list[str] = []
            for part in expression.split("||"):
                tag = _java_trim(part)
                if tag and tag not in tags:   # HashSet semantics
                    tags.append(tag)
            return cls(topic, expression, tags, [java_hash(t) for t in tags], sub_version)
        if not expression:
            raise ValueError(f"Expression can't be null! {expression_type}")
        return cls(topic, expression, [], [], sub_version, expression_type)

    def to_obj(self) -> dict[str, Any]:
        return {"classFilterMode": self.class_filter_mode, "codeSet": list(self.code_set),
                "expressionType": self.expression_type, "subString": self.sub_string,
                "subVersion": self.sub_version, "tagsSet": list(self.tags_set),
                "topic": self.topic}

    @classmethod
    def from_obj(cls, obj: Any) -> SubscriptionData:
        o = _as_obj(obj, "SubscriptionData")
        codes = [_integer(c, "codeSet entry", _INT_MIN, _INT_MAX) for c in _list(o, "codeSet")]
        return cls(_req_str(o, "topic"), _str(o, "subString", "") or "",
                   _str_list(o, "tagsSet"), codes, _long(o, "subVersion", 0),
                   _str(o, "expressionType", EXPRESSION_TYPE_TAG) or EXPRESSION_TYPE_TAG,
                   _bool(o, "classFilterMode", False))


# Java enum constants in ordinal order. The C++ clients send ordinals ("1"), the Java
# and Node clients names; the broker works with names.
CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = ("CONSUME_FROM_LAST_OFFSET",
                      "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                      "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET",
                      "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP")


def _enum_name(value: str, names: tuple[str, ...]) -> str:
    if value.isdigit() and int(value) < len(names):
        return names[int(value)]
    return value


@dataclass(slots=True)
class ConsumerData(_Body):
    group_name: str
    consume_type: str               # CONSUME_ACTIVELY / CONSUME_PASSIVELY / CONSUME_POP
    message_model: str              # CLUSTERING / BROADCASTING
    consume_from_where: str
    subscription_data_set: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False

    def to_obj(self) -> dict[str, Any]:
        return {"consumeFromWhere": self.consume_from_where,
                "consumeType": self.consume_type, "groupName": self.group_name,
                "messageModel": self.message_model,
                "subscriptionDataSet": [s.to_obj() for s in self.subscription_data_set],
                "unitMode": self.unit_mode}

    @classmethod
    def from_obj(cls, obj: Any) -> ConsumerData:
        o = _as_obj(obj, "ConsumerData")
        return cls(_req_str(o, "groupName"),
                   _enum_name(_str(o, "consumeType", "") or "", CONSUME_TYPES),
                   _enum_name(_str(o, "messageModel", "") or "", MESSAGE_MODELS),
                   _enum_name(_str(o, "consumeFromWhere", "") or "", CONSUME_FROM_WHERE),
                   _objs(_list(o, "subscriptionDataSet"), "subscriptionDataSet entry",
                         SubscriptionData.from_obj),
                   _bool(o, "unitMode", False))


@dataclass(slots=True)
class HeartbeatData(_Body):
    """``HeartbeatData`` (HEART_BEAT body). The two 5.x fields are sent only when set."""

    client_id: str
    producer_data_set: list[ProducerData] = field(default_factory=list)
    consumer_data_set: list[ConsumerData] = field(default_factory=list)
    heartbeat_fingerprint: int | None = None    # 5.x
    without_sub: bool | None = None             # 5.x

    def to_obj(self) -> dict[str, Any]:
        return {"clientID": self.client_id,
                "consumerDataSet": [c.to_obj() for c in self.consumer_data_set],
                "heartbeatFingerprint": self.heartbeat_fingerprint,
                "producerDataSet": [p.to_obj() for p in self.producer_data_set],
                "withoutSub": self.without_sub}

    @classmethod
    def from_obj(cls, obj: Any) -> HeartbeatData:
        o = _as_obj(obj, "HeartbeatData")
        return cls(_str(o, "clientID", "") or "",
                   _objs(_list(o, "producerDataSet"), "producerDataSet entry",
                         ProducerData.from_obj),
                   _objs(_list(o, "consumerDataSet"), "consumerDataSet entry",
                         ConsumerData.from_obj),
                   _opt_int(o, "heartbeatFingerprint"), _opt_bool(o, "withoutSub"))


@dataclass(slots=True)
class ConsumerIdList(_Body):
    """GET_CONSUMER_LIST_BY_GROUP answer (spec 2.8)."""

    consumer_id_list: list[str] = field(default_factory=list)

    def to_obj(self) -> dict[str, Any]:
        return {"consumerIdList": list(self.consumer_id_list)}

    @classmethod
    def from_obj(cls, obj: Any) -> ConsumerIdList:
        return cls(_str_list(_as_obj(obj, "ConsumerIdList"), "consumerIdList"))


# =========================================================================== locks (2.10)
@dataclass(frozen=True, order=True, slots=True)
class MessageQueue(_Body):
    """``MessageQueue``; ordering is Java's compareTo (topic, brokerName, queueId)."""

    topic: str
    broker_name: str
    queue_id: int

    def to_obj(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_obj(cls, obj: Any) -> MessageQueue:
        o = _as_obj(obj, "MessageQueue")
        return cls(_req_str(o, "topic"), _req_str(o, "brokerName"), _int(o, "queueId", 0))


def _mq_set(o: Mapping[str, Any], key: str) -> set[MessageQueue]:
    return set(_objs(_list(o, key), f"{key} entry", MessageQueue.from_obj))


@dataclass(slots=True)
class LockBatchRequestBody(_Body):
    consumer_group: str
    client_id: str
    mq_set: set[MessageQueue] = field(default_factory=set)
    only_this_broker: bool = False

    def to_obj(self) -> dict[str, Any]:
        return {"clientId": self.client_id, "consumerGroup": self.consumer_group,
                "mqSet": [mq.to_obj() for mq in sorted(self.mq_set)],
                "onlyThisBroker": self.only_this_broker}

    @classmethod
    def from_obj(cls, obj: Any) -> LockBatchRequestBody:
        o = _as_obj(obj, "LockBatchRequestBody")
        return cls(_str(o, "consumerGroup", "") or "", _str(o, "clientId", "") or "",
                   _mq_set(o, "mqSet"), _bool(o, "onlyThisBroker", False))


@dataclass(slots=True)
class UnlockBatchRequestBody(_Body):
    consumer_group: str
    client_id: str
    mq_set: set[MessageQueue] = field(default_factory=set)
    only_this_broker: bool = False

    def to_obj(self) -> dict[str, Any]:
        return {"clientId": self.client_id, "consumerGroup": self.consumer_group,
                "mqSet": [mq.to_obj() for mq in sorted(self.mq_set)],
                "onlyThisBroker": self.only_this_broker}

    @classmethod
    def from_obj(cls, obj: Any) -> UnlockBatchRequestBody:
        o = _as_obj(obj, "UnlockBatchRequestBody")
        return cls(_str(o, "consumerGroup", "") or "", _str(o, "clientId", "") or "",
                   _mq_set(o, "mqSet"), _bool(o, "onlyThisBroker", False))


@dataclass(slots=True)
class LockBatchResponseBody(_Body):
    lock_ok_mq_set: set[MessageQueue] = field(default_factory=set)

    def to_obj(self) -> dict[str, Any]:
        return {"lockOKMQSet": [mq.to_obj() for mq in sorted(self.lock_ok_mq_set)]}

    @classmethod
    def from_obj(cls, obj: Any) -> LockBatchResponseBody:
        return cls(_mq_set(_as_obj(obj, "LockBatchResponseBody"), "lockOKMQSet"))
