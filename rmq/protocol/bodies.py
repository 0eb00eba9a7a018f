"""JSON bodies of the NameServer, client and admin protocol, as fastjson 1.2.83 writes them.

Spec sections 2.7, 2.8, 2.10, 2.14, 2.15 and 2.16. Each body is a dataclass with
snake_case attributes plus one declarative table given to ``@json_body``: per field
its JSON property name, its codec and what an absent (or null) property reads as.
The table is checked against the dataclass and compiled into plain tuples once, at
import; ``to_obj``/``from_obj`` (and ``to_json``/``from_json`` over them) walk
those tuples. This is ``headers.py``'s ``@_wire`` for JSON.

Writing is fastjson's (``rmq.common.fastjson``): properties sorted, null properties
and null map values left out, the legacy style (bare integer map keys) unless
``standard`` asks for the BrowserCompatible one a client of version >= V4_9_4 gets
for route data. Reading accepts both styles; unknown properties are ignored (5.x
peers' extra fields pass) and anything malformed raises ``ProtocolError``. Like
fastjson, a String property takes a number or boolean as its text, and an int/long
property a decimal string; values out of the Java type's range are refused.

Also here: RegisterBrokerBody's compressed form (zlib over length-prefixed
DataVersion JSON, ``TopicConfig.encode()`` lines and the filter server list),
``SubscriptionData.build`` (FilterAPI tag parsing with Java hash codes) and the
admin bodies (ConsumeStats with its object-keyed map, connection lists,
SubscriptionGroupConfig's keys).
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, NamedTuple, TypeVar, cast

from rmq.common import fastjson
from rmq.common.fastjson import FastjsonError, type_name
from rmq.common.mixall import MASTER_ID
from rmq.protocol.codes import PERM_RW
from rmq.protocol.errors import ProtocolError
from rmq.protocol.message import java_hash

__all__ = [
    # the dialect, raising ProtocolError
    "loads_fastjson",
    "read_double",
    "dumps_fastjson",
    "loads_object_keyed_map",
    "dumps_object_keyed_map",
    # the table
    "Text",
    "Codec",
    "BodyField",
    "Body",
    "json_body",
    "REQUIRED",
    "STR",
    "STR_ONLY",
    "INT",
    "LONG",
    "NON_NEGATIVE_LONG",
    "BOOL",
    "LONG_KEY",
    "list_of",
    "set_of",
    "map_of",
    "body_of",
    "enum_of",
    "one_of",
    "nonempty",
    # bodies
    "TopicConfig",
    "DataVersion",
    "TopicConfigSerializeWrapper",
    "RegisterBrokerBody",
    "QueueData",
    "BrokerData",
    "TopicRouteData",
    "ClusterInfo",
    "TopicList",
    "KVTable",
    "ProducerData",
    "SubscriptionData",
    "ConsumerData",
    "HeartbeatData",
    "ConsumerIdList",
    "MessageQueue",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "UnlockBatchRequestBody",
    "OffsetWrapper",
    "ConsumeStats",
    "ConsumeStatsList",
    "BrokerStatsData",
    "BrokerStatsItem",
    "ConsumeQueueData",
    "ProducerInfo",
    "ProducerTableInfo",
    "QueryConsumeQueueResponseBody",
    "Connection",
    "ConsumerConnection",
    "ProducerConnection",
    "SUBSCRIPTION_GROUP_ACCEPTED_KEYS",
    "SUBSCRIPTION_GROUP_KEYS",
    "subscription_group_string",
    "java_double",
    "MASTER_ID",
    "SUB_ALL",
    "EXPRESSION_TYPE_TAG",
    "EXPRESSION_TYPE_SQL92",
    "TOPIC_FILTER_TYPES",
    "DEFAULT_QUEUE_NUMS",
    "CONSUME_TYPES",
    "MESSAGE_MODELS",
    "CONSUME_FROM_WHERE",
]

SUB_ALL = "*"  # SubscriptionData.SUB_ALL
EXPRESSION_TYPE_TAG = "TAG"
EXPRESSION_TYPE_SQL92 = "SQL92"
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
DEFAULT_QUEUE_NUMS = 16  # TopicConfig.defaultRead/WriteQueueNums

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1

# A compressed register body inflates to a few bytes per topic; this bound only
# stops a zip bomb from exhausting memory (the frame itself is at most 16 MiB).
_MAX_INFLATED = 256 * 1024 * 1024

_I32 = struct.Struct(">i")
_DECIMAL = re.compile(r"[+-]?[0-9]{1,20}")

Text = bytes | bytearray | memoryview | str


# =========================================================================== the dialect
#: fastjson's writer (``standard=True``: BrowserCompatible).
dumps_fastjson: Final = fastjson.dumps
dumps_object_keyed_map: Final = fastjson.dumps_object_keyed_map


def loads_fastjson(data: Text) -> Any:
    """``rmq.common.fastjson.loads`` (legacy or standard); malformed -> ``ProtocolError``."""
    try:
        return fastjson.loads(data)
    except FastjsonError as e:
        raise ProtocolError(str(e)) from None


def loads_object_keyed_map(data: Text, field: str) -> list[tuple[dict[str, Any], Any]]:
    """``rmq.common.fastjson.loads_object_keyed_map``; malformed -> ``ProtocolError``."""
    try:
        return fastjson.loads_object_keyed_map(data, field)
    except FastjsonError as e:
        raise ProtocolError(str(e)) from None


# =========================================================================== codecs
_Reader = Callable[[Any, str], Any]  # (JSON value, what) -> Python value
_Writer = Callable[[Any], Any]  # Python value -> JSON-ready value


class Codec(NamedTuple):
    """How one JSON value reads into Python and writes back.

    ``read`` is never given null at a property (null reads as absent); inside a
    container it is, and refuses it. ``read`` may answer None: the property then
    reads as absent. ``write`` None: the value is written as it is.
    """

    read: _Reader
    write: _Writer | None = None


def _read_str(v: Any, what: str) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (int, bool)):  # fastjson coerces scalars into String fields
        return json.dumps(v)
    raise ProtocolError(f"{what} is {type_name(v)}, not a string")


def _read_str_only(v: Any, what: str) -> str:
    if isinstance(v, str):
        return v
    raise ProtocolError(f"{what} is {type_name(v)}, not a string")


def _integer(v: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ProtocolError(f"{what} is {type_name(v)}, not an integer")
    n: int
    if isinstance(v, str):  # fastjson parses numeric strings into int fields
        s = v.strip()
        if _DECIMAL.fullmatch(s) is None:
            raise ProtocolError(f"{what} is not an integer: {v[:40]!r}")
        n = int(s)
    else:
        n = v
    if n < lo or n > hi:
        raise ProtocolError(f"{what} is out of range: {n}")
    return n


def _integer_codec(lo: int, hi: int) -> Codec:
    def read(v: Any, what: str) -> int:
        if type(v) is int and lo <= v <= hi:  # the common case, one call less
            return v
        return _integer(v, what, lo, hi)

    return Codec(read)


def _read_bool(v: Any, what: str) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    if isinstance(v, int):
        return v != 0
    raise ProtocolError(f"{what} is {type_name(v)}, not a boolean")


#: A String property: numbers and booleans read as their text.
STR: Final = Codec(_read_str)
#: A string inside a list or map: nothing else is accepted.
STR_ONLY: Final = Codec(_read_str_only)
#: Java int / long: JSON integers or decimal strings, within the type's range.
INT: Final = _integer_codec(_INT_MIN, _INT_MAX)
LONG: Final = _integer_codec(_LONG_MIN, _LONG_MAX)
NON_NEGATIVE_LONG: Final = _integer_codec(0, _LONG_MAX)
#: Java boolean: true/false, their strings in any case, or a number (non-zero is true).
BOOL: Final = Codec(_read_bool)
#: A Long map key (``brokerAddrs``): written bare in the legacy style.
LONG_KEY: Final = LONG


def list_of(elem: Codec, sort: bool = False) -> Codec:
    """A JSON array; ``sort`` writes the (string) elements sorted."""
    read_elem, write_elem = elem

    def read(v: Any, what: str) -> list[Any]:
        if not isinstance(v, list):
            raise ProtocolError(f"{what} is {type_name(v)}, not an array")
        entry = what + " entry"
        return [read_elem(x, entry) for x in v]

    def write(v: Any) -> list[Any]:
        items = sorted(v) if sort else v
        return list(items) if write_elem is None else [write_elem(x) for x in items]

    return Codec(read, write)


def set_of(elem: Codec) -> Codec:
    """A Java Set: read into a set, written sorted (the elements' natural order)."""
    read_list, _ = list_of(elem)
    write_elem = elem.write

    def read(v: Any, what: str) -> set[Any]:
        return set(read_list(v, what))

    def write(v: Any) -> list[Any]:
        return sorted(v) if write_elem is None else [write_elem(x) for x in sorted(v)]

    return Codec(read, write)


def map_of(value: Codec, key: Codec | None = None) -> Codec:
    """A JSON object as a Java Map; null values are dropped on reading (fastjson never
    writes them). ``key`` None: string keys; ``LONG_KEY``: integer keys."""
    read_value, write_value = value
    read_key = None if key is None else key.read

    def read(v: Any, what: str) -> dict[Any, Any]:
        if not isinstance(v, dict):
            raise ProtocolError(f"{what} is {type_name(v)}, not an object")
        out: dict[Any, Any] = {}
        for k, x in v.items():
            if read_key is not None:
                k = read_key(k, what + " key")
            if x is not None:
                out[k] = read_value(x, f"{what}[{k!r}]")
        return out

    def write(v: Any) -> dict[Any, Any]:
        return dict(v) if write_value is None else {k: write_value(x) for k, x in v.items()}

    return Codec(read, write)


def body_of(cls: type[Body]) -> Codec:
    """A nested body."""

    def read(v: Any, what: str) -> Body:
        return cls.from_obj(v, what)

    def write(v: Body) -> dict[str, Any]:
        return v.to_obj()

    return Codec(read, write)


def enum_of(names: tuple[str, ...]) -> Codec:
    """A Java enum by name. The C++ clients send ordinals ("1" or 1); they read as the
    name at that ordinal. Other values pass as they are."""

    def read(v: Any, what: str) -> str:
        s = _read_str(v, what)
        if s.isdigit() and int(s) < len(names):
            return names[int(s)]
        return s

    return Codec(read)


def one_of(values: tuple[str, ...]) -> Codec:
    """A String property that must hold one of ``values``."""

    def read(v: Any, what: str) -> str:
        s = _read_str(v, what)
        if s not in values:
            raise ProtocolError(f"unknown {what.removeprefix('field ')} {s!r:.40}")
        return s

    return Codec(read)


def nonempty(codec: Codec) -> Codec:
    """``codec``, but an empty string reads as absent."""
    read_inner = codec.read

    def read(v: Any, what: str) -> Any:
        return read_inner(v, what) or None

    return Codec(read, codec.write)


# =========================================================================== the table
class _Required:
    __slots__ = ()

    def __repr__(self) -> str:
        return "REQUIRED"


#: An absent or null property is an error (``missing field <name>``).
REQUIRED: Final = _Required()
_DATACLASS_DEFAULT: Final = object()


class BodyField(NamedTuple):
    """One row of a body's table."""

    attr: str  # snake_case attribute
    name: str  # JSON property
    aliases: tuple[str, ...]  # older spellings, read when ``name`` is absent
    codec: Codec
    missing: Any  # REQUIRED, or what an absent property reads as
    factory: Callable[[], Any] | None  # the dataclass default_factory, called instead


B = TypeVar("B", bound="Body")


class Body:
    """Base of every JSON body. Subclasses are ``@json_body(...)`` dataclasses."""

    __slots__ = ()

    FIELDS: ClassVar[tuple[BodyField, ...]] = ()
    # Compiled forms of FIELDS: (name, aliases, read, what, missing, factory) in
    # dataclass order / (name, attr, write) sorted by name (fastjson's bean order).
    _DECODE: ClassVar[tuple[tuple[str, tuple[str, ...], _Reader, str, Any, Callable[[], Any] | None], ...]] = ()
    _ENCODE: ClassVar[tuple[tuple[str, str, _Writer | None], ...]] = ()

    def to_obj(self) -> dict[str, Any]:
        """Properties in fastjson's order; None values stay (the writer drops them)."""
        out: dict[str, Any] = {}
        for name, attr, write in self._ENCODE:
            value = getattr(self, attr)
            out[name] = value if write is None or value is None else write(value)
        return out

    @classmethod
    def from_obj(cls: type[B], obj: Any, what: str | None = None) -> B:
        if not isinstance(obj, dict):
            raise ProtocolError(f"{what or cls.__name__} is {type_name(obj)}, not an object")
        get = obj.get
        args: list[Any] = []
        append = args.append
        for name, aliases, read, label, missing, factory in cls._DECODE:
            v = get(name)
            if v is None and aliases and name not in obj:
                for alias in aliases:
                    v = get(alias)
                    if v is not None:
                        break
            if v is not None:
                v = read(v, label)
                if v is not None:
                    append(v)
                    continue
            if missing is REQUIRED:
                raise ProtocolError(f"missing field {name}")
            append(missing if factory is None else factory())
        return cls(*args)

    def to_json(self, standard: bool = False) -> bytes:
        return fastjson.dumps(self.to_obj(), standard)

    @classmethod
    def from_json(cls: type[B], data: Text) -> B:
        return cls.from_obj(loads_fastjson(data))


def json_body(*rows: tuple[Any, ...]) -> Callable[[type[B]], type[B]]:
    """Attach the table ``(attr, name, codec[, missing])`` to a body dataclass.

    ``name`` may be a tuple: the first is written, the others are older spellings
    read when it is absent. ``missing`` is ``REQUIRED`` or the value an absent
    property reads as; left out, the dataclass default (or default_factory) serves.
    Checked once at import: the rows name the dataclass fields in order.
    """

    def apply(cls: type[B]) -> type[B]:
        fields = dataclasses.fields(cast(Any, cls))
        if [f.name for f in fields] != [r[0] for r in rows]:
            raise TypeError(f"{cls.__name__}: body table does not match the dataclass fields")
        table = []
        for f, row in zip(fields, rows, strict=True):
            if len(row) not in (3, 4) or not isinstance(row[2], Codec):
                raise TypeError(f"{cls.__name__}.{f.name}: bad row {row!r}")
            names = row[1] if isinstance(row[1], tuple) else (row[1],)
            missing = row[3] if len(row) == 4 else _DATACLASS_DEFAULT
            factory = None
            if missing is _DATACLASS_DEFAULT:
                if f.default is not dataclasses.MISSING:
                    missing = f.default
                elif f.default_factory is not dataclasses.MISSING:
                    missing, factory = None, f.default_factory
                else:
                    raise TypeError(
                        f"{cls.__name__}.{f.name}: no default, so the row must say what an absent property reads as"
                    )
            table.append(BodyField(f.name, names[0], names[1:], row[2], missing, factory))
        cls.FIELDS = tuple(table)
        cls._DECODE = tuple((t.name, t.aliases, t.codec.read, f"field {t.name}", t.missing, t.factory) for t in table)
        cls._ENCODE = tuple((t.name, t.attr, t.codec.write) for t in sorted(table, key=lambda t: t.name))
        return cls

    return apply


# =========================================================================== topics / register
@json_body(
    ("topic_name", "topicName", STR, REQUIRED),
    ("read_queue_nums", "readQueueNums", INT),
    ("write_queue_nums", "writeQueueNums", INT),
    ("perm", "perm", INT),
    ("topic_filter_type", "topicFilterType", one_of(TOPIC_FILTER_TYPES)),
    ("topic_sys_flag", "topicSysFlag", INT),
    ("order", "order", BOOL),
    ("attributes", "attributes", map_of(STR_ONLY)),
)
@dataclass(slots=True)
class TopicConfig(Body):
    """``TopicConfig``: a broker's view of one topic (spec 2.13, 2.14)."""

    topic_name: str
    read_queue_nums: int = DEFAULT_QUEUE_NUMS
    write_queue_nums: int = DEFAULT_QUEUE_NUMS
    perm: int = PERM_RW
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] | None = None  # 5.x; None = not sent (4.9.8)

    def encode(self) -> str:
        """``TopicConfig.encode()``: ``name read write perm filterType`` (+ 5.x attributes).

        The compressed register body carries only these fields: topicSysFlag and
        order do not survive it (as in RocketMQ).
        """
        text = f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} {self.perm} {self.topic_filter_type}"
        if self.attributes is not None:
            text += " " + fastjson.dumps(self.attributes).decode()
        return text

    @classmethod
    def decode(cls, text: str) -> TopicConfig:
        """``TopicConfig.decode``: 5 space-separated fields, an optional 6th (5.x attributes)."""
        parts = text.split(" ")
        while parts and parts[-1] == "":  # Java's split drops trailing empty strings
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
                attrs = fastjson.loads(" ".join(parts[5:]))
                if isinstance(attrs, dict) and all(isinstance(v, str) for v in attrs.values()):
                    attributes = attrs
            except FastjsonError:
                pass
        return cls(
            name,
            _integer(read, "readQueueNums", _INT_MIN, _INT_MAX),
            _integer(write, "writeQueueNums", _INT_MIN, _INT_MAX),
            _integer(perm, "perm", _INT_MIN, _INT_MAX),
            tft,
            attributes=attributes,
        )


@json_body(("timestamp", "timestamp", LONG), ("counter", "counter", LONG), ("state_version", "stateVersion", LONG))
@dataclass(frozen=True, slots=True)
class DataVersion(Body):
    """``DataVersion``: (timestamp ms, counter); 5.x adds stateVersion.

    Equality is field equality, as Java's ``equals``: the NameServer re-reads a
    broker's topics only when this changes.
    """

    timestamp: int = 0
    counter: int = 0
    state_version: int | None = None  # 5.x; None = not sent (4.9.8)

    def next_version(self, now_ms: int) -> DataVersion:
        return DataVersion(now_ms, self.counter + 1, self.state_version)


@json_body(
    ("topic_config_table", "topicConfigTable", map_of(body_of(TopicConfig))),
    ("data_version", "dataVersion", body_of(DataVersion)),
)
@dataclass(slots=True)
class TopicConfigSerializeWrapper(Body):
    """``TopicConfigSerializeWrapper``: a broker's topic table and its version."""

    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)


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
        return int(v)

    def chunk(self, what: str) -> bytes:
        n = self.int32(what + " length")
        if n < 0 or self.pos + n > len(self.buf):
            raise ProtocolError(
                f"compressed register body: {what} length {n} exceeds the {len(self.buf) - self.pos} bytes left"
            )
        data = self.buf[self.pos : self.pos + n]
        self.pos += n
        return data


def _utf8(b: bytes, what: str) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"{what} is not UTF-8") from None


@json_body(
    ("topic_config_serialize_wrapper", "topicConfigSerializeWrapper", body_of(TopicConfigSerializeWrapper)),
    ("filter_server_list", "filterServerList", list_of(STR_ONLY)),
)
@dataclass(slots=True)
class RegisterBrokerBody(Body):
    """``RegisterBrokerBody`` (spec 2.14): plain JSON or the compressed form."""

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = field(default_factory=TopicConfigSerializeWrapper)
    filter_server_list: list[str] = field(default_factory=list)

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
        fs = fastjson.dumps(list(self.filter_server_list))
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
@json_body(
    ("broker_name", "brokerName", STR, REQUIRED),
    ("read_queue_nums", "readQueueNums", INT, 0),
    ("write_queue_nums", "writeQueueNums", INT, 0),
    ("perm", "perm", INT, 0),
    ("topic_sys_flag", ("topicSysFlag", "topicSynFlag"), INT),  # 4.x before 4.9: Syn
)
@dataclass(slots=True)
class QueueData(Body):
    """``QueueData``: one broker group's queues for a topic."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def copy(self) -> QueueData:
        return QueueData(self.broker_name, self.read_queue_nums, self.write_queue_nums, self.perm, self.topic_sys_flag)


@json_body(
    ("cluster", "cluster", STR, ""),
    ("broker_name", "brokerName", STR, REQUIRED),
    ("broker_addrs", "brokerAddrs", map_of(STR_ONLY, LONG_KEY)),
    ("enable_acting_master", "enableActingMaster", BOOL),
    ("zone_name", "zoneName", STR),
)
@dataclass(slots=True)
class BrokerData(Body):
    """``BrokerData``: a broker group (name) and its members' addresses by broker id."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)
    enable_acting_master: bool | None = None  # 5.x
    zone_name: str | None = None  # 5.x

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def copy(self) -> BrokerData:
        return BrokerData(
            self.cluster, self.broker_name, dict(self.broker_addrs), self.enable_acting_master, self.zone_name
        )


@json_body(
    ("queue_datas", "queueDatas", list_of(body_of(QueueData))),
    ("broker_datas", "brokerDatas", list_of(body_of(BrokerData))),
    ("filter_server_table", "filterServerTable", map_of(list_of(STR_ONLY))),
    ("order_topic_conf", "orderTopicConf", STR),
)
@dataclass(slots=True)
class TopicRouteData(Body):
    """``TopicRouteData`` (spec 2.15): the GET_ROUTEINFO_BY_TOPIC answer. Legacy
    (``{0:"addr"}``) unless ``to_json(standard=True)``: what a client of version
    >= V4_9_4 or one sending ``acceptStandardJsonOnly=true`` gets."""

    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    order_topic_conf: str | None = None


@json_body(
    ("broker_addr_table", "brokerAddrTable", map_of(body_of(BrokerData))),
    ("cluster_addr_table", "clusterAddrTable", map_of(list_of(STR_ONLY, sort=True))),
)
@dataclass(slots=True)
class ClusterInfo(Body):
    """``ClusterInfo`` (spec 2.16). Written in the legacy style, as 4.9.8 does; a
    cluster's broker names sorted (a Java HashSet has no order to keep)."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = field(default_factory=dict)


@json_body(("topic_list", "topicList", list_of(STR_ONLY)), ("broker_addr", "brokerAddr", STR))
@dataclass(slots=True)
class TopicList(Body):
    """``TopicList``: ``{"brokerAddr":..., "topicList":[...]}`` (brokerAddr only for
    the system topic list)."""

    topic_list: list[str] = field(default_factory=list)
    broker_addr: str | None = None


@json_body(("table", "table", map_of(STR_ONLY)))
@dataclass(slots=True)
class KVTable(Body):
    """``KVTable``: ``{"table":{key: value}}`` (one NameServer KV namespace)."""

    table: dict[str, str] = field(default_factory=dict)

    def first_figure(self, key: str) -> float:
        """The first of a rate key's figures (``putTps`` = ``"12.5 11.0 9.8"``: 10 s, 1 min,
        10 min), as mqadmin reads it; 0.0 when absent or empty."""
        try:
            return float(self.table.get(key, "").split()[0])
        except (ValueError, IndexError):
            return 0.0


# =========================================================================== heartbeat (2.7)
@json_body(("group_name", "groupName", STR, REQUIRED))
@dataclass(slots=True)
class ProducerData(Body):
    group_name: str


def _java_trim(s: str) -> str:
    """``String.trim()``: strips every character <= U+0020, nothing else."""
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


@json_body(
    ("topic", "topic", STR, REQUIRED),
    ("sub_string", "subString", STR, ""),
    ("tags_set", "tagsSet", list_of(STR_ONLY)),
    ("code_set", "codeSet", list_of(INT)),
    ("sub_version", "subVersion", LONG),
    ("expression_type", "expressionType", nonempty(STR)),
    ("class_filter_mode", "classFilterMode", BOOL),
)
@dataclass(slots=True)
class SubscriptionData(Body):
    """``SubscriptionData``; ``filterClassSource`` is never serialized and not kept."""

    topic: str
    sub_string: str
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    expression_type: str = EXPRESSION_TYPE_TAG
    class_filter_mode: bool = False

    @classmethod
    def build(
        cls, topic: str, expression: str | None, expression_type: str | None = None, sub_version: int = 0
    ) -> SubscriptionData:
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
                if tag and tag not in tags:  # HashSet semantics
                    tags.append(tag)
            return cls(topic, expression, tags, [java_hash(t) for t in tags], sub_version)
        if not expression:
            raise ValueError(f"Expression can't be null! {expression_type}")
        return cls(topic, expression, [], [], sub_version, expression_type)


# Java enum constants in ordinal order. The C++ clients send ordinals ("1"), the Java
# and Node clients names; the broker works with names.
CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)


@json_body(
    ("group_name", "groupName", STR, REQUIRED),
    ("consume_type", "consumeType", enum_of(CONSUME_TYPES), ""),
    ("message_model", "messageModel", enum_of(MESSAGE_MODELS), ""),
    ("consume_from_where", "consumeFromWhere", enum_of(CONSUME_FROM_WHERE), ""),
    ("subscription_data_set", "subscriptionDataSet", list_of(body_of(SubscriptionData))),
    ("unit_mode", "unitMode", BOOL),
)
@dataclass(slots=True)
class ConsumerData(Body):
    group_name: str
    consume_type: str  # CONSUME_ACTIVELY / CONSUME_PASSIVELY / CONSUME_POP
    message_model: str  # CLUSTERING / BROADCASTING
    consume_from_where: str
    subscription_data_set: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False


@json_body(
    ("client_id", "clientID", STR, ""),
    ("producer_data_set", "producerDataSet", list_of(body_of(ProducerData))),
    ("consumer_data_set", "consumerDataSet", list_of(body_of(ConsumerData))),
    ("heartbeat_fingerprint", "heartbeatFingerprint", INT),
    ("without_sub", "withoutSub", BOOL),
)
@dataclass(slots=True)
class HeartbeatData(Body):
    """``HeartbeatData`` (HEART_BEAT body). The two 5.x fields are sent only when set."""

    client_id: str
    producer_data_set: list[ProducerData] = field(default_factory=list)
    consumer_data_set: list[ConsumerData] = field(default_factory=list)
    heartbeat_fingerprint: int | None = None  # 5.x
    without_sub: bool | None = None  # 5.x


@json_body(("consumer_id_list", "consumerIdList", list_of(STR_ONLY)))
@dataclass(slots=True)
class ConsumerIdList(Body):
    """GET_CONSUMER_LIST_BY_GROUP answer (spec 2.8)."""

    consumer_id_list: list[str] = field(default_factory=list)


# =========================================================================== locks (2.10)
@json_body(
    ("topic", "topic", STR, REQUIRED), ("broker_name", "brokerName", STR, REQUIRED), ("queue_id", "queueId", INT, 0)
)
@dataclass(frozen=True, order=True, slots=True)
class MessageQueue(Body):
    """``MessageQueue``; ordering is Java's compareTo (topic, brokerName, queueId)."""

    topic: str
    broker_name: str
    queue_id: int


@json_body(
    ("consumer_group", "consumerGroup", STR, ""),
    ("client_id", "clientId", STR, ""),
    ("mq_set", "mqSet", set_of(body_of(MessageQueue))),
    ("only_this_broker", "onlyThisBroker", BOOL),
)
@dataclass(slots=True)
class _BatchMQBody(Body):
    """LockBatchRequestBody and UnlockBatchRequestBody: the same bean twice."""

    consumer_group: str
    client_id: str
    mq_set: set[MessageQueue] = field(default_factory=set)
    only_this_broker: bool = False


@dataclass(slots=True)
class LockBatchRequestBody(_BatchMQBody):
    pass


@dataclass(slots=True)
class UnlockBatchRequestBody(_BatchMQBody):
    pass


@json_body(("lock_ok_mq_set", "lockOKMQSet", set_of(body_of(MessageQueue))))
@dataclass(slots=True)
class LockBatchResponseBody(Body):
    lock_ok_mq_set: set[MessageQueue] = field(default_factory=set)


# =========================================================================== admin
# RocketMQ's ``protocol/body`` and ``admin`` beans for the admin requests; Java
# mqadmin reads what our broker writes and the other way round.
def java_double(v: float) -> str:
    """``Double.toString`` for the values a TPS takes (``0.0``, ``12.5``)."""
    r = repr(float(v))
    return r if ("." in r or "e" in r or "n" in r) else r + ".0"


@json_body(
    ("broker_offset", "brokerOffset", LONG),
    ("consumer_offset", "consumerOffset", LONG),
    ("last_timestamp", "lastTimestamp", LONG),
)
@dataclass(slots=True)
class OffsetWrapper(Body):
    broker_offset: int = 0
    consumer_offset: int = 0
    last_timestamp: int = 0

    @property
    def diff(self) -> int:
        return self.broker_offset - self.consumer_offset


@dataclass(slots=True)
class ConsumeStats:
    """GET_CONSUME_STATS (208): ``{"consumeTps":0.0,"offsetTable":{<MessageQueue>:
    <OffsetWrapper>}}``, an object-keyed map as fastjson writes
    ``HashMap<MessageQueue, OffsetWrapper>`` (not a table body: JSON has no such map)."""

    offset_table: list[tuple[MessageQueue, OffsetWrapper]] = field(default_factory=list)
    consume_tps: float = 0.0

    def to_json(self) -> bytes:
        entries = ",".join(
            fastjson.dumps(mq.to_obj()).decode() + ":" + fastjson.dumps(ow.to_obj()).decode()
            for mq, ow in self.offset_table
        )
        return ('{"consumeTps":' + java_double(self.consume_tps) + ',"offsetTable":{' + entries + "}}").encode()

    @classmethod
    def from_json(cls, data: Text) -> ConsumeStats:
        table = [
            (MessageQueue.from_obj(k), OffsetWrapper.from_obj(v))
            for k, v in loads_object_keyed_map(data, "offsetTable")
        ]
        tps = 0.0
        text = data if isinstance(data, str) else bytes(data).decode("utf-8", "replace")
        # consumeTps is a plain property; read it without the object-keyed map in the way
        i = text.find('"consumeTps":')
        if i >= 0:
            j = i + len('"consumeTps":')
            k = j
            while k < len(text) and text[k] in "+-.0123456789eE":
                k += 1
            try:
                tps = float(text[j:k])
            except ValueError:
                raise ProtocolError(f"ConsumeStats.consumeTps is not a number: {text[j : j + 20]!r}") from None
        return cls(table, tps)

    def compute_total_diff(self) -> int:
        return sum(ow.diff for _, ow in self.offset_table)


@dataclass(slots=True)
class ConsumeStatsList:
    """GET_BROKER_CONSUME_STATS (317): ``{"brokerAddr":..,"consumeStatsList":[{group:
    [<ConsumeStats>, one per topic]}, ...],"totalDiff":n}`` (fastjson's field order)."""

    broker_addr: str = ""
    groups: list[tuple[str, list[ConsumeStats]]] = field(default_factory=list)
    total_diff: int = 0

    def to_json(self) -> bytes:
        groups = ",".join(
            "{" + fastjson.dumps(g).decode() + ":[" + b",".join(s.to_json() for s in stats).decode() + "]}"
            for g, stats in self.groups
        )
        head = '{"brokerAddr":' + fastjson.dumps(self.broker_addr).decode()
        return (head + ',"consumeStatsList":[' + groups + '],"totalDiff":' + str(self.total_diff) + "}").encode()

    @classmethod
    def from_json(cls, data: Text | None) -> ConsumeStatsList:
        """Each ConsumeStats holds an object-keyed map no JSON parser reads, so the list
        is walked by its delimiters and each ConsumeStats read on its own."""
        text = bytes(data or b"{}").decode("utf-8", "replace") if not isinstance(data, str) else data
        out = cls()
        try:
            for key, start, end in fastjson.object_members(text):
                if key == "brokerAddr":
                    out.broker_addr = str(fastjson.loads(text[start:end]))
                elif key == "totalDiff":
                    out.total_diff = LONG.read(fastjson.loads(text[start:end]), "field totalDiff")
                elif key == "consumeStatsList" and text[start:end] != "null":
                    for g_start, g_end in fastjson.array_elements(text, start):
                        one = text[g_start:g_end]
                        for group, s_start, _ in fastjson.object_members(one):
                            per_topic = [
                                ConsumeStats.from_json(one[a:b]) for a, b in fastjson.array_elements(one, s_start)
                            ]
                            out.groups.append((str(group), per_topic))
        except FastjsonError as e:
            raise ProtocolError(f"malformed ConsumeStatsList: {e}") from None
        return out


def read_double(v: Any, what: str) -> float:
    """A Java double: a JSON number, or a numeric string (fastjson parses those into
    double fields too)."""
    if not isinstance(v, bool):
        if isinstance(v, (int, float)):
            return float(v)
        if isinstance(v, str):
            try:
                return float(v)
            except ValueError:
                pass
    raise ProtocolError(f"{what} is {type_name(v)}, not a number")


@dataclass(slots=True)
class BrokerStatsItem:
    """``BrokerStatsItem``: one window of a stats item (StatsSnapshot's sum, tps, avgpt)."""

    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0

    def to_text(self) -> str:
        # fastjson's order (alphabetical); doubles as Java prints them
        return f'{{"avgpt":{java_double(self.avgpt)},"sum":{self.sum},"tps":{java_double(self.tps)}}}'

    @classmethod
    def from_obj(cls, obj: Any, what: str) -> BrokerStatsItem:
        if obj is None:
            return cls()
        if not isinstance(obj, dict):
            raise ProtocolError(f"{what} is {type_name(obj)}, not an object")
        return cls(
            LONG.read(obj.get("sum", 0), f"{what}.sum"),
            read_double(obj.get("tps", 0), f"{what}.tps"),
            read_double(obj.get("avgpt", 0), f"{what}.avgpt"),
        )


@dataclass(slots=True)
class BrokerStatsData:
    """VIEW_BROKER_STATS_DATA (315)'s answer: a stats item over the last minute, hour and day."""

    stats_minute: BrokerStatsItem = field(default_factory=BrokerStatsItem)
    stats_hour: BrokerStatsItem = field(default_factory=BrokerStatsItem)
    stats_day: BrokerStatsItem = field(default_factory=BrokerStatsItem)

    def to_json(self) -> bytes:
        return (
            f'{{"statsDay":{self.stats_day.to_text()},"statsHour":{self.stats_hour.to_text()},'
            f'"statsMinute":{self.stats_minute.to_text()}}}'
        ).encode()

    @classmethod
    def from_json(cls, data: Text) -> BrokerStatsData:
        obj = loads_fastjson(data)
        if not isinstance(obj, dict):
            raise ProtocolError(f"BrokerStatsData is {type_name(obj)}, not an object")
        return cls(
            *(BrokerStatsItem.from_obj(obj.get(name), name) for name in ("statsMinute", "statsHour", "statsDay"))
        )

    def compute_24hour_sum(self) -> int:
        """StatsAllSubCommand.compute24HourSum: the day's sum, else the hour's, else the minute's."""
        return self.stats_day.sum or self.stats_hour.sum or self.stats_minute.sum


@json_body(
    ("client_id", "clientId", STR, ""),
    ("client_addr", "clientAddr", STR, ""),
    ("language", "language", STR, ""),
    ("version", "version", INT, 0),
)
@dataclass(slots=True)
class Connection(Body):
    client_id: str
    client_addr: str
    language: str
    version: int


@json_body(
    ("connections", "connectionSet", list_of(body_of(Connection))),
    ("subscriptions", "subscriptionTable", map_of(body_of(SubscriptionData))),
    ("consume_type", "consumeType", STR),
    ("message_model", "messageModel", STR),
    ("consume_from_where", "consumeFromWhere", STR),
)
@dataclass(slots=True)
class ConsumerConnection(Body):
    """GET_CONSUMER_CONNECTION_LIST (203)."""

    connections: list[Connection] = field(default_factory=list)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None

    def compute_min_version(self) -> int:
        return min((c.version for c in self.connections), default=_INT_MAX)


@json_body(("connections", "connectionSet", list_of(body_of(Connection))))
@dataclass(slots=True)
class ProducerConnection(Body):
    """GET_PRODUCER_CONNECTION_LIST (204)."""

    connections: list[Connection] = field(default_factory=list)


@json_body(
    ("client_id", "clientId", STR, ""),
    ("remote_ip", "remoteIP", STR, ""),
    ("language", "language", STR, ""),
    ("version", "version", INT, 0),
    ("last_update_timestamp", "lastUpdateTimestamp", LONG, 0),
)
@dataclass(slots=True)
class ProducerInfo(Body):
    client_id: str
    remote_ip: str  # Java's SocketAddress.toString(): "/127.0.0.1:54321"
    language: str
    version: int
    last_update_timestamp: int


@json_body(("data", "data", map_of(list_of(body_of(ProducerInfo)))))
@dataclass(slots=True)
class ProducerTableInfo(Body):
    """GET_ALL_PRODUCER_INFO (328): every online producer, by group (mqadmin producer)."""

    data: dict[str, list[ProducerInfo]] = field(default_factory=dict)


@json_body(
    ("physic_offset", "physicOffset", LONG),
    ("physic_size", "physicSize", INT),
    ("tags_code", "tagsCode", LONG),
    ("extend_data_json", "extendDataJson", STR),
    ("bit_map", "bitMap", STR),
    ("eval", "eval", BOOL),
    ("msg", "msg", STR),
)
@dataclass(slots=True)
class ConsumeQueueData(Body):
    """One ConsumeQueue unit as QUERY_CONSUME_QUEUE (321) shows it."""

    physic_offset: int = 0
    physic_size: int = 0
    tags_code: int = 0
    extend_data_json: str | None = None
    bit_map: str | None = None
    eval: bool = False
    msg: str | None = None


@json_body(
    ("subscription_data", "subscriptionData", body_of(SubscriptionData)),
    ("filter_data", "filterData", STR),
    ("queue_data", "queueData", list_of(body_of(ConsumeQueueData))),
    ("max_queue_index", "maxQueueIndex", LONG),
    ("min_queue_index", "minQueueIndex", LONG),
)
@dataclass(slots=True)
class QueryConsumeQueueResponseBody(Body):
    """QUERY_CONSUME_QUEUE (321): units of one queue from an index (mqadmin queryCq)."""

    subscription_data: SubscriptionData | None = None
    filter_data: str | None = None
    queue_data: list[ConsumeQueueData] = field(default_factory=list)
    max_queue_index: int = 0
    min_queue_index: int = 0


#: SubscriptionGroupConfig (4.9.8) properties, in toString order, with their types
#: (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP 200 body).
SUBSCRIPTION_GROUP_KEYS: tuple[tuple[str, type], ...] = (
    ("groupName", str),
    ("consumeEnable", bool),
    ("consumeFromMinEnable", bool),
    ("consumeBroadcastEnable", bool),
    ("retryQueueNums", int),
    ("retryMaxTimes", int),
    ("brokerId", int),
    ("whichBrokerWhenConsumeSlowly", int),
    ("notifyConsumerIdsChangedEnable", bool),
)

#: What UPDATE_AND_CREATE_SUBSCRIPTIONGROUP accepts: 4.9.8's keys plus RocketMQ 5's
#: ``consumeMessageOrderly`` (orderly POP), which 4.9.8's toString does not print.
SUBSCRIPTION_GROUP_ACCEPTED_KEYS: tuple[tuple[str, type], ...] = (
    *SUBSCRIPTION_GROUP_KEYS,
    ("consumeMessageOrderly", bool),
)


def subscription_group_string(cfg: dict[str, Any]) -> str:
    """SubscriptionGroupConfig.toString() (what ``mqadmin updateSubGroup`` prints)."""

    def fmt(v: Any) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else str(v)

    return "SubscriptionGroupConfig [" + ", ".join(f"{k}={fmt(cfg.get(k))}" for k, _ in SUBSCRIPTION_GROUP_KEYS) + "]"
