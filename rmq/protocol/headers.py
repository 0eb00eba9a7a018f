"""Typed custom headers <-> ``RemotingCommand.ext_fields`` (spec 1.3, 2.4-2.15).

Each header is a dataclass with snake_case attributes plus one declarative table
(attribute, wire name, kind, required?) given to ``@_wire``. The table is checked
against the dataclass and compiled into plain tuples once, at import; conversions
then walk those tuples, never the dataclass machinery.

Wire rules, as Java's ``makeCustomHeaderToNet``/``decodeCommandCustomHeader``:
values are strings; ints/longs in decimal; booleans ``true``/``false`` on the way
out and ``Boolean.parseBoolean`` on the way in (only "true", any case, is true);
None fields are not sent. Unknown ext keys (e.g. the C++ client's ``AccessKey``,
``Signature``, ``OnsChannel``) are ignored.

Where we are stricter than Java: Java only *logs* a missing mandatory field or an
unparsable number and leaves the field null; we raise ``HeaderFieldError`` (a
``ProtocolError`` naming the field, worded as RocketMQ's ``the custom field <topic> is
null``) so the request is answered with that error instead of acted on half-read. The
remoting dispatcher answers it for every processor (SYSTEM_ERROR, the text as remark).

The per-message paths (SEND_MESSAGE_V2 on the broker, its response on the client)
have hand-written conversions: ``SendMessageRequestHeader.from_v2_ext_fields``,
``SendMessageRequestHeader.to_v2_ext_fields`` and ``SendMessageResponseHeader``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Final, NamedTuple, TypeAlias, TypeVar

from rmq.protocol.codes import RequestCode
from rmq.protocol.errors import ProtocolError

# the header classes are added at the end of the module: every Header declared here
__all__ = [
    "STR",
    "INT",
    "LONG",
    "BOOL",
    "HeaderField",
    "Header",
    "REQUEST_HEADERS",
    "HeaderFieldError",
    "parse_int",
    "parse_long",
    "parse_bool",
    "Long",
]

# Field kinds. INT and LONG differ only in the range accepted (Java Integer/Long).
STR: Final = "str"
INT: Final = "int"
LONG: Final = "long"
BOOL: Final = "bool"
REQUIRED: Final = True
OPTIONAL: Final = False

#: Java ``long``: an ``int`` that a header field annotated ``Long`` carries (range-checked
#: as ``Long.parseLong``; a plain ``int`` field is a Java int).
Long: TypeAlias = int

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
# Integer.parseInt syntax: optional sign, decimal digits (Java accepts any Unicode
# decimal digit, as \d does). No blanks or underscores, which Python's int() allows.
_JAVA_INTEGER = re.compile(r"[+-]?\d+")


class HeaderFieldError(ProtocolError):
    """A request header field that is missing or does not parse.

    ``field`` is the wire name, ``reason`` the rest of the sentence (``is null``, ``is not
    a number: abc``); the text is RocketMQ's wording, ``the custom field <field> reason``,
    with the long name after a one-letter SEND_MESSAGE_V2 key.
    """

    def __init__(self, field: str, reason: str, alias: str = "") -> None:
        self.field = field
        self.reason = reason
        named = f"<{field}> ({alias})" if alias else f"<{field}>"
        super().__init__(f"the custom field {named} {reason}")


def _missing(field: str, alias: str = "") -> HeaderFieldError:
    return HeaderFieldError(field, "is null", alias)


def _parse_integer(label: str, raw: str, lo: int, hi: int, kind: str, alias: str) -> int:
    if len(raw) < 20 and raw.isdigit() and raw.isascii():  # the common case, no sign
        value = int(raw)
    elif _JAVA_INTEGER.fullmatch(raw):
        try:
            value = int(raw)
        except ValueError:  # more digits than Python's int() str limit
            raise HeaderFieldError(label, f"is out of range for {kind}: {raw[:40]}", alias) from None
    else:
        raise HeaderFieldError(label, f"is not a number: {raw[:60]}", alias)
    if value < lo or value > hi:
        raise HeaderFieldError(label, f"is out of range for {kind}: {raw[:40]}", alias)
    return value


def parse_int(label: str, raw: str, alias: str = "") -> int:
    """``Integer.parseInt`` of a header value; ``label`` names the field in the error."""
    return _parse_integer(label, raw, _INT_MIN, _INT_MAX, "int", alias)


def parse_long(label: str, raw: str, alias: str = "") -> int:
    """``Long.parseLong`` of a header value."""
    return _parse_integer(label, raw, _LONG_MIN, _LONG_MAX, "long", alias)


def parse_bool(label: str, raw: str, alias: str = "") -> bool:
    """``Boolean.parseBoolean``: "true" in any case is true, everything else false."""
    return raw == "true" or (len(raw) == 4 and raw.lower() == "true")


def _fmt_bool(value: object) -> str:
    return "true" if value else "false"


_Parser = Callable[[str, str], object]  # (label, raw) -> value
_Formatter = Callable[[object], str]

# None: strings pass through untouched.
_PARSERS: Mapping[str, _Parser | None] = MappingProxyType(
    {STR: None, INT: parse_int, LONG: parse_long, BOOL: parse_bool}
)
_FORMATTERS: Mapping[str, _Formatter | None] = MappingProxyType({STR: None, INT: str, LONG: str, BOOL: _fmt_bool})


class HeaderField(NamedTuple):
    """One row of a header's wire table."""

    attr: str  # snake_case attribute
    wire: str  # ext field name on the wire (camelCase, or a..n for V2)
    kind: str  # STR / INT / LONG / BOOL
    required: bool  # missing -> HeaderFieldError
    default: object  # what a missing optional field decodes to


H = TypeVar("H", bound="Header")


class Header:
    """Base of every custom header. Subclasses are ``@_wire(...)`` dataclasses."""

    __slots__ = ()

    FIELDS: ClassVar[tuple[HeaderField, ...]] = ()
    # Compiled forms of FIELDS: (wire, parser, required, default) / (attr, wire, formatter).
    _DECODE: ClassVar[tuple[tuple[str, _Parser | None, bool, object], ...]] = ()
    _ENCODE: ClassVar[tuple[tuple[str, str, _Formatter | None], ...]] = ()

    @classmethod
    def from_ext_fields(cls: type[H], ext: Mapping[str, str] | None) -> H:
        """Parse a header from ext fields; ``HeaderFieldError`` names the first bad field."""
        get = (ext if ext is not None else _NO_FIELDS).get
        args: list[object] = []
        append = args.append
        for wire, parse, required, default in cls._DECODE:
            raw = get(wire)
            if raw is None:
                if required:
                    raise _missing(wire)
                append(default)
            elif parse is None:
                append(raw)
            else:
                append(parse(wire, raw))
        return cls(*args)

    def to_ext_fields(self) -> dict[str, str]:
        """Wire form; None fields are omitted."""
        out: dict[str, str] = {}
        for attr, wire, fmt in self._ENCODE:
            value = getattr(self, attr)
            if value is not None:
                out[wire] = value if fmt is None else fmt(value)
        return out


_NO_FIELDS: Mapping[str, str] = MappingProxyType({})


# The kind a field's annotation gives (``X | None`` reads as X): Java's int and long are
# both ``int`` in Python, so a long field is annotated ``Long``.
_KIND_OF_ANNOTATION: Mapping[str, str] = MappingProxyType({"str": STR, "int": INT, "Long": LONG, "bool": BOOL})


def _camel(attr: str) -> str:
    head, *rest = attr.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _wire(*rows: tuple[str, str, str, bool], **wire_names: str) -> Callable[[type[H]], type[H]]:
    """Attach the wire table to a header dataclass, read from its fields.

    Each dataclass field is one wire field, in order: its wire name the attribute in
    camelCase unless ``wire_names`` names it (``client_id="clientID"``), its kind from the
    annotation (``str``, ``int``, ``Long``, ``bool``), required when it has no default.
    An optional field's default is what a missing field decodes to, and a non-None
    default is always sent, as Java sends its initialised fields.

    Explicit ``rows`` ``(attr, wireName, kind, required)`` are the older spelling: they
    are checked against the fields once at import instead.
    """

    def derived(cls: type[H], fields: tuple[dataclasses.Field[object], ...]) -> list[tuple[str, str, str, bool]]:
        unknown = set(wire_names) - {f.name for f in fields}
        if unknown:
            raise TypeError(f"{cls.__name__}: wire names for unknown fields {sorted(unknown)}")
        out = []
        for f in fields:
            annotation = str(f.type).removesuffix(" | None")
            kind = _KIND_OF_ANNOTATION.get(annotation)
            if kind is None:
                raise TypeError(f"{cls.__name__}.{f.name}: no wire kind for annotation {f.type!r}")
            required = f.default is dataclasses.MISSING
            out.append((f.name, wire_names.get(f.name) or _camel(f.name), kind, required))
        return out

    def apply(cls: type[H]) -> type[H]:
        # the header classes are dataclasses (@dataclass sits under @_wire), which a
        # type[H] bound to Header does not say
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        table_rows = list(rows) if rows else derived(cls, fields)
        if [f.name for f in fields] != [r[0] for r in table_rows]:
            raise TypeError(f"{cls.__name__}: wire table does not match the dataclass fields")
        table = []
        for f, (attr, wire, kind, required) in zip(fields, table_rows, strict=True):
            if kind not in _PARSERS:
                raise TypeError(f"{cls.__name__}.{attr}: unknown kind {kind!r}")
            has_default = f.default is not dataclasses.MISSING
            if required == has_default:
                raise TypeError(f"{cls.__name__}.{attr}: required fields take no default, optional fields need one")
            table.append(HeaderField(attr, wire, kind, required, f.default if has_default else None))
        cls.FIELDS = tuple(table)
        cls._DECODE = tuple((t.wire, _PARSERS[t.kind], t.required, t.default) for t in table)
        cls._ENCODE = tuple((t.attr, t.wire, _FORMATTERS[t.kind]) for t in table)
        return cls

    return apply


# --------------------------------------------------------------------------- send (2.4)
# V2 short key -> the V1 wire name it stands for (for error messages).
_V2_NAMES: Mapping[str, str] = MappingProxyType(
    {
        "a": "producerGroup",
        "b": "topic",
        "c": "defaultTopic",
        "d": "defaultTopicQueueNums",
        "e": "queueId",
        "f": "sysFlag",
        "g": "bornTimestamp",
        "h": "flag",
        "i": "properties",
        "j": "reconsumeTimes",
        "k": "unitMode",
        "l": "maxReconsumeTimes",
        "m": "batch",
        "n": "bname",
    }
)


def _v2_missing(key: str) -> HeaderFieldError:
    return _missing(key, _V2_NAMES.get(key, "?"))


# str(i) -> i for the small numbers of a send header (queue ids, flags, counts); the
# bound get of a private dict (a MappingProxyType's costs more), never mutated.
_small_int = {str(i): i for i in range(4096)}.get


def _int_field(label: str, raw: str, alias: str) -> int:
    """parse_int, with unsigned digit strings below 10 digits converted inline."""
    if len(raw) < 10 and raw.isdigit() and raw.isascii():
        return int(raw)
    return parse_int(label, raw, alias)


@_wire(broker_name="bname")
@dataclass(slots=True)
class SendMessageRequestHeader(Header):
    """SEND_MESSAGE (10) header; also what the broker works with for 310/320."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: Long
    flag: int
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: int | None = None
    broker_name: str | None = None  # 5.x ``bname``

    @classmethod
    def from_v2_ext_fields(cls, ext: Mapping[str, str] | None) -> SendMessageRequestHeader:
        """SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE ext fields straight to the V1 header.

        The broker's per-message path: no intermediate V2 object.
        """
        if ext is None:
            raise _v2_missing("a")
        try:
            a = ext["a"]
            b = ext["b"]
            c = ext["c"]
            d = ext["d"]
            e = ext["e"]
            f = ext["f"]
            g = ext["g"]
            h = ext["h"]
        except KeyError as err:
            raise _v2_missing(err.args[0]) from None
        get = ext.get
        j = get("j")
        k = get("k")
        l_ = get("l")
        m = get("m")
        # Most of these numbers are small (queue ids, flags, counts): one lookup in
        # _small_int; the rest through _int_field (this runs once per produced message).
        small = _small_int
        return cls(
            a,
            b,
            c,
            v if (v := small(d)) is not None else _int_field("d", d, "defaultTopicQueueNums"),
            v if (v := small(e)) is not None else _int_field("e", e, "queueId"),
            v if (v := small(f)) is not None else _int_field("f", f, "sysFlag"),
            int(g) if len(g) < 19 and g.isdigit() and g.isascii() else parse_long("g", g, "bornTimestamp"),
            v if (v := small(h)) is not None else _int_field("h", h, "flag"),
            get("i"),
            None if j is None else v if (v := small(j)) is not None else _int_field("j", j, "reconsumeTimes"),
            False if k is None or k == "false" else parse_bool("k", k),
            False if m is None or m == "false" else parse_bool("m", m),
            None if l_ is None else v if (v := small(l_)) is not None else _int_field("l", l_, "maxReconsumeTimes"),
            get("n"),
        )

    def to_v2_ext_fields(self) -> dict[str, str]:
        """The SEND_MESSAGE_V2 ext fields for this header (client per-message path)."""
        out = {
            "a": self.producer_group,
            "b": self.topic,
            "c": self.default_topic,
            "d": str(self.default_topic_queue_nums),
            "e": str(self.queue_id),
            "f": str(self.sys_flag),
            "g": str(self.born_timestamp),
            "h": str(self.flag),
        }
        if self.properties is not None:
            out["i"] = self.properties
        if self.reconsume_times is not None:
            out["j"] = str(self.reconsume_times)
        if self.unit_mode is not None:
            out["k"] = "true" if self.unit_mode else "false"
        if self.max_reconsume_times is not None:
            out["l"] = str(self.max_reconsume_times)
        if self.batch is not None:
            out["m"] = "true" if self.batch else "false"
        if self.broker_name is not None:
            out["n"] = self.broker_name
        return out

    def to_v2(self) -> SendMessageRequestHeaderV2:
        return SendMessageRequestHeaderV2(
            self.producer_group,
            self.topic,
            self.default_topic,
            self.default_topic_queue_nums,
            self.queue_id,
            self.sys_flag,
            self.born_timestamp,
            self.flag,
            self.properties,
            self.reconsume_times,
            self.unit_mode,
            self.max_reconsume_times,
            self.batch,
            self.broker_name,
        )


@_wire()
@dataclass(slots=True)
class SendMessageRequestHeaderV2(Header):
    """SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320): one-letter keys (spec 2.4).

    a producerGroup, b topic, c defaultTopic, d defaultTopicQueueNums, e queueId,
    f sysFlag, g bornTimestamp, h flag, i properties, j reconsumeTimes, k unitMode,
    l maxReconsumeTimes, m batch, n brokerName (5.x).
    """

    a: str
    b: str
    c: str
    d: int
    e: int
    f: int
    g: Long
    h: int
    i: str | None = None
    j: int | None = None
    k: bool | None = None
    l: int | None = None  # noqa: E741 - the wire name
    m: bool | None = None
    n: str | None = None

    @classmethod
    def from_v1(cls, v1: SendMessageRequestHeader) -> SendMessageRequestHeaderV2:
        return v1.to_v2()

    def to_v1(self) -> SendMessageRequestHeader:
        return SendMessageRequestHeader(
            self.a,
            self.b,
            self.c,
            self.d,
            self.e,
            self.f,
            self.g,
            self.h,
            self.i,
            self.j,
            bool(self.k),
            bool(self.m),
            self.l,
            self.n,
        )


@_wire()
@dataclass(slots=True)
class SendMessageResponseHeader(Header):
    """Answer to 10/310/320 (spec 2.4). ``msg_id`` is comma-separated for a batch."""

    msg_id: str
    queue_id: int
    queue_offset: Long
    transaction_id: str | None = None
    batch_uniq_id: str | None = None
    recall_handle: str | None = None  # 5.x

    # Hand-written: one of these per produced message, on both sides.
    @classmethod
    def from_ext_fields(cls, ext: Mapping[str, str] | None) -> SendMessageResponseHeader:
        if ext is None:
            raise _missing("msgId")
        try:
            msg_id = ext["msgId"]
            queue_id = ext["queueId"]
            queue_offset = ext["queueOffset"]
        except KeyError as err:
            raise _missing(err.args[0]) from None
        get = ext.get
        return cls(
            msg_id,
            parse_int("queueId", queue_id),
            parse_long("queueOffset", queue_offset),
            get("transactionId"),
            get("batchUniqId"),
            get("recallHandle"),
        )

    def to_ext_fields(self) -> dict[str, str]:
        out = {"msgId": self.msg_id, "queueId": str(self.queue_id), "queueOffset": str(self.queue_offset)}
        if self.transaction_id is not None:
            out["transactionId"] = self.transaction_id
        if self.batch_uniq_id is not None:
            out["batchUniqId"] = self.batch_uniq_id
        if self.recall_handle is not None:
            out["recallHandle"] = self.recall_handle
        return out


# --------------------------------------------------------------------------- pull (2.5)
@_wire(proxy_forward_client_id="proxyFrowardClientId")
@dataclass(slots=True)
class PullMessageRequestHeader(Header):
    """PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361). ``sys_flag``: see ``PullSysFlag``."""

    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: Long
    max_msg_nums: int
    sys_flag: int
    commit_offset: Long
    suspend_timeout_millis: Long
    sub_version: Long
    subscription: str | None = None
    expression_type: str | None = None  # "TAG" / "SQL92"
    max_msg_bytes: int | None = None
    request_source: int | None = None  # 5.x
    proxy_forward_client_id: str | None = None  # 5.x, wire name misspelt upstream


@_wire()
@dataclass(slots=True)
class PullMessageResponseHeader(Header):
    suggest_which_broker_id: Long
    next_begin_offset: Long
    min_offset: Long
    max_offset: Long
    offset_delta: Long | None = None  # 5.x
    topic_sys_flag: int | None = None  # 5.x
    group_sys_flag: int | None = None  # 5.x
    forbidden_type: int | None = None  # 5.x


# --------------------------------------------------------------------------- offsets (2.6)
@_wire()
@dataclass(slots=True)
class QueryConsumerOffsetRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int
    set_zero_if_not_found: bool | None = None  # 5.x


@_wire()
@dataclass(slots=True)
class QueryConsumerOffsetResponseHeader(Header):
    offset: Long


@_wire()
@dataclass(slots=True)
class UpdateConsumerOffsetRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: Long


@_wire()
@dataclass(slots=True)
class GetMaxOffsetRequestHeader(Header):
    topic: str
    queue_id: int
    # 5.x (Java default true). None = not sent, which a broker reads as true; 4.9.8
    # clients never send it.
    committed: bool | None = None


@_wire()
@dataclass(slots=True)
class GetMaxOffsetResponseHeader(Header):
    offset: Long


@_wire()
@dataclass(slots=True)
class GetMinOffsetRequestHeader(Header):
    topic: str
    queue_id: int


@_wire()
@dataclass(slots=True)
class GetMinOffsetResponseHeader(Header):
    offset: Long


@_wire()
@dataclass(slots=True)
class SearchOffsetRequestHeader(Header):
    topic: str
    queue_id: int
    timestamp: Long
    # 5.x: "LOWER"/"UPPER" (case-insensitive; anything else reads as LOWER). Kept raw.
    boundary_type: str | None = None


@_wire()
@dataclass(slots=True)
class SearchOffsetResponseHeader(Header):
    offset: Long


@_wire()
@dataclass(slots=True)
class QueryConsumeQueueRequestHeader(Header):
    """QUERY_CONSUME_QUEUE (321): count units of a queue from index (mqadmin queryCq)."""

    topic: str
    queue_id: int
    index: Long
    count: int
    consumer_group: str | None = None


@_wire()
@dataclass(slots=True)
class GetEarliestMsgStoretimeRequestHeader(Header):
    topic: str
    queue_id: int


@_wire()
@dataclass(slots=True)
class GetEarliestMsgStoretimeResponseHeader(Header):
    timestamp: Long


# --------------------------------------------------------------------------- retry (2.9)
@_wire()
@dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader(Header):
    """CONSUMER_SEND_MSG_BACK (36). ``offset`` is the commit-log offset of the message."""

    offset: Long
    group: str
    delay_level: int  # 0 = broker decides, -1 = straight to the DLQ
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None


# --------------------------------------------------------------------------- query (2.11)
@_wire(unique_key_query="_UNIQUE_KEY_QUERY")
@dataclass(slots=True)
class QueryMessageRequestHeader(Header):
    """QUERY_MESSAGE (12). ``unique_key_query`` is the raw ``_UNIQUE_KEY_QUERY`` ext field
    the Java client adds next to the header (query by UNIQ_KEY instead of KEYS)."""

    topic: str
    key: str
    max_num: int
    begin_timestamp: Long
    end_timestamp: Long
    unique_key_query: bool | None = None


@_wire()
@dataclass(slots=True)
class QueryMessageResponseHeader(Header):
    index_last_update_timestamp: Long
    index_last_update_phyoffset: Long


@_wire()
@dataclass(slots=True)
class ViewMessageRequestHeader(Header):
    """VIEW_MESSAGE_BY_ID (33): ``offset`` is the commit-log offset from the offset msgId."""

    offset: Long
    topic: str | None = None  # 5.x


# --------------------------------------------------------------------------- transactions (2.12)
@_wire()
@dataclass(slots=True)
class EndTransactionRequestHeader(Header):
    """END_TRANSACTION (37), oneway. ``commit_or_rollback``: 8 commit, 12 rollback, 0 unknown."""

    producer_group: str
    tran_state_table_offset: Long
    commit_log_offset: Long
    commit_or_rollback: int
    msg_id: str
    topic: str | None = None  # 5.x
    from_transaction_check: bool = False
    transaction_id: str | None = None


@_wire()
@dataclass(slots=True)
class CheckTransactionStateRequestHeader(Header):
    """CHECK_TRANSACTION_STATE (39), broker -> producer; body = the half message record."""

    tran_state_table_offset: Long
    commit_log_offset: Long
    topic: str | None = None  # 5.x
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


# --------------------------------------------------------------------------- admin (2.13)
@_wire()
@dataclass(slots=True)
class CreateTopicRequestHeader(Header):
    """UPDATE_AND_CREATE_TOPIC (17). ``perm``: see ``PermName`` (RW = 6)."""

    topic: str
    default_topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    # Java marks it @CFNotNull but never rejects its absence; a missing value means
    # SINGLE_TAG, so we accept it missing too.
    topic_filter_type: str | None = "SINGLE_TAG"
    topic_sys_flag: int | None = None
    order: bool = False
    attributes: str | None = None  # 5.x "+k=v,+k2=v2"
    force: bool | None = None  # 5.x


# --------------------------------------------------------------------------- namesrv (2.14, 2.15)
@_wire()
@dataclass(slots=True)
class RegisterBrokerRequestHeader(Header):
    """REGISTER_BROKER (103). ``body_crc32`` 0 = unchecked (else CRC32 & 0x7FFFFFFF)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: Long  # 0 = master
    heartbeat_timeout_millis: Long | None = None  # 5.x
    enable_acting_master: bool | None = None  # 5.x
    compressed: bool = False
    body_crc32: int = 0


@_wire()
@dataclass(slots=True)
class RegisterBrokerResponseHeader(Header):
    ha_server_addr: str | None = None
    master_addr: str | None = None


@_wire()
@dataclass(slots=True)
class UnRegisterBrokerRequestHeader(Header):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Long


@_wire()
@dataclass(slots=True)
class GetRouteInfoRequestHeader(Header):
    """GET_ROUTEINFO_BY_TOPIC (105). Standard JSON body iff version >= V4_9_4 or this flag."""

    topic: str
    accept_standard_json_only: bool | None = None


# --------------------------------------------------------------------------- clients (2.8 and co)
@_wire()
@dataclass(slots=True)
class GetConsumerListByGroupRequestHeader(Header):
    consumer_group: str


@_wire()
@dataclass(slots=True)
class NotifyConsumerIdsChangedRequestHeader(Header):
    consumer_group: str


@_wire(client_id="clientID")
@dataclass(slots=True)
class UnregisterClientRequestHeader(Header):
    client_id: str
    producer_group: str | None = None
    consumer_group: str | None = None


@_wire()
@dataclass(slots=True)
class ResetOffsetRequestHeader(Header):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) and RESET_CONSUMER_CLIENT_OFFSET (220).

    ``timestamp`` -1 means "the end of each queue"."""

    topic: str
    group: str
    timestamp: Long
    is_force: bool


# --------------------------------------------------------------------------- admin (mqadmin)
@_wire()
@dataclass(slots=True)
class DeleteTopicRequestHeader(Header):
    """DELETE_TOPIC_IN_BROKER (215)."""

    topic: str


@_wire()
@dataclass(slots=True)
class DeleteTopicFromNamesrvRequestHeader(Header):
    """DELETE_TOPIC_IN_NAMESRV (216); without clusterName the whole topic goes."""

    topic: str
    cluster_name: str | None = None


@_wire()
@dataclass(slots=True)
class GetConsumeStatsRequestHeader(Header):
    """GET_CONSUME_STATS (208); no topic = every topic the group has offsets for."""

    consumer_group: str
    topic: str | None = None


@_wire()
@dataclass(slots=True)
class GetConsumeStatsInBrokerHeader(Header):
    """GET_BROKER_CONSUME_STATS (317): every group's consume stats; isOrder = ordered topics only."""

    is_order: bool


@_wire()
@dataclass(slots=True)
class ViewBrokerStatsDataRequestHeader(Header):
    """VIEW_BROKER_STATS_DATA (315): one stats item of the broker's BrokerStatsManager,
    e.g. TOPIC_PUT_NUMS of a topic or GROUP_GET_NUMS of ``topic@group``."""

    stats_name: str
    stats_key: str


@_wire()
@dataclass(slots=True)
class GetConsumerConnectionListRequestHeader(Header):
    """GET_CONSUMER_CONNECTION_LIST (203)."""

    consumer_group: str


@_wire()
@dataclass(slots=True)
class GetProducerConnectionListRequestHeader(Header):
    """GET_PRODUCER_CONNECTION_LIST (204)."""

    producer_group: str


@_wire()
@dataclass(slots=True)
class DeleteSubscriptionGroupRequestHeader(Header):
    """DELETE_SUBSCRIPTIONGROUP (207): ``removeOffset`` is 4.9.x's name for also dropping
    the group's offsets, ``cleanOffset`` 5.x's."""

    group_name: str
    remove_offset: bool | None = None
    clean_offset: bool | None = None


@_wire()
@dataclass(slots=True)
class BrokerPermRequestHeader(Header):
    """WIPE_WRITE_PERM_OF_BROKER (205) / ADD_WRITE_PERM_OF_BROKER (327) to a NameServer;
    the answer carries ``wipeTopicCount`` / ``addTopicCount``."""

    broker_name: str


#: Request code -> header class its ext fields parse into.
REQUEST_HEADERS: Mapping[int, type[Header]] = MappingProxyType(
    {
        RequestCode.SEND_MESSAGE: SendMessageRequestHeader,
        RequestCode.SEND_MESSAGE_V2: SendMessageRequestHeaderV2,
        RequestCode.SEND_BATCH_MESSAGE: SendMessageRequestHeaderV2,
        RequestCode.PULL_MESSAGE: PullMessageRequestHeader,
        RequestCode.LITE_PULL_MESSAGE: PullMessageRequestHeader,
        RequestCode.QUERY_MESSAGE: QueryMessageRequestHeader,
        RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetRequestHeader,
        RequestCode.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetRequestHeader,
        RequestCode.UPDATE_AND_CREATE_TOPIC: CreateTopicRequestHeader,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetRequestHeader,
        RequestCode.GET_MAX_OFFSET: GetMaxOffsetRequestHeader,
        RequestCode.GET_MIN_OFFSET: GetMinOffsetRequestHeader,
        RequestCode.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeRequestHeader,
        RequestCode.VIEW_MESSAGE_BY_ID: ViewMessageRequestHeader,
        RequestCode.UNREGISTER_CLIENT: UnregisterClientRequestHeader,
        RequestCode.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackRequestHeader,
        RequestCode.END_TRANSACTION: EndTransactionRequestHeader,
        RequestCode.GET_CONSUMER_LIST_BY_GROUP: GetConsumerListByGroupRequestHeader,
        RequestCode.CHECK_TRANSACTION_STATE: CheckTransactionStateRequestHeader,
        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: NotifyConsumerIdsChangedRequestHeader,
        RequestCode.REGISTER_BROKER: RegisterBrokerRequestHeader,
        RequestCode.UNREGISTER_BROKER: UnRegisterBrokerRequestHeader,
        RequestCode.GET_ROUTEINFO_BY_TOPIC: GetRouteInfoRequestHeader,
        RequestCode.DELETE_TOPIC_IN_BROKER: DeleteTopicRequestHeader,
        RequestCode.DELETE_TOPIC_IN_NAMESRV: DeleteTopicFromNamesrvRequestHeader,
        RequestCode.GET_CONSUME_STATS: GetConsumeStatsRequestHeader,
        RequestCode.GET_BROKER_CONSUME_STATS: GetConsumeStatsInBrokerHeader,
        RequestCode.QUERY_CONSUME_QUEUE: QueryConsumeQueueRequestHeader,
        RequestCode.GET_CONSUMER_CONNECTION_LIST: GetConsumerConnectionListRequestHeader,
        RequestCode.GET_PRODUCER_CONNECTION_LIST: GetProducerConnectionListRequestHeader,
        RequestCode.DELETE_SUBSCRIPTIONGROUP: DeleteSubscriptionGroupRequestHeader,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER: BrokerPermRequestHeader,
        RequestCode.ADD_WRITE_PERM_OF_BROKER: BrokerPermRequestHeader,
    }
)

# Every header class declared above is exported: the declarations are the list.
__all__ += [
    name
    for name, value in list(globals().items())
    if isinstance(value, type) and issubclass(value, Header) and value is not Header and value.__module__ == __name__
]
