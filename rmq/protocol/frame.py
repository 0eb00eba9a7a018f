"""The remoting frame: ``RemotingCommand`` and its JSON / ROCKETMQ header codecs.

Spec section 1. A frame on the wire is::

    int32 length | int32 (serializeType << 24 | headerLength) | header | body

``FrameDecoder`` turns a byte stream into commands (h11 style: feed bytes, get
objects, ``ProtocolError`` on garbage); ``encode``/``encode_parts`` turn a command
back into bytes exactly as a 4.9.8 Java peer would write it. Nothing here does I/O.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import chain
from json.encoder import encode_basestring as _c_json_str  # C accelerated, ensure_ascii=False
from operator import add, itemgetter
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from rmq.common.fastjson import FASTJSON_ONLY as _FASTJSON_ONLY
from rmq.common.fastjson import quote as _json_str
from rmq.common.fastjson import type_name
from rmq.protocol.codes import LanguageCode, MQVersion, RemotingFlag, RequestCode, ResponseCode, SerializeType
from rmq.protocol.errors import ProtocolError
from rmq.protocol.message import java_hash

__all__ = [
    "MAX_FRAME_LENGTH",
    "RemotingCommand",
    "FrameDecoder",
    "encode",
    "encode_parts",
    "encode_header_only",
    "decode_frame",
]

#: Netty's max frame (``com.rocketmq.remoting.frameMaxLength``): bytes on the wire,
#: the 4-byte length field included (LengthFieldBasedFrameDecoder counts it).
MAX_FRAME_LENGTH: Final = 16777216

_BIN_FIXED_SIZE: Final = 21  # code..flag + remark len + ext len, nothing else
_MAX_HEADER_LENGTH: Final = 0xFFFFFF  # 24 bits of the header-length word

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")
_PREFIX = struct.Struct(">iI")  # total length, type<<24 | header length
_BIN_HEAD = struct.Struct(">hBhiii")  # code, language, version, opaque, flag, remark len

Buffer = bytes | bytearray | memoryview


# --------------------------------------------------------------------------- command
@dataclass(slots=True, repr=False)
class RemotingCommand:
    """One request or response (spec 1.2).

    ``ext_fields`` values are strings on the wire; ``body`` is None when the frame
    carries no body (a zero-length body decodes as None, like Java). For encoding,
    ``body`` may also be a bytearray or a byte-format memoryview (pull responses
    hand over store slices without copying).
    """

    code: int
    language: int = LanguageCode.JAVA
    version: int = MQVersion.V4_9_8
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] | None = None
    body: bytes | None = None
    serialize_type: int = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RemotingFlag.RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RemotingFlag.ONEWAY)

    def mark_response(self) -> None:
        self.flag |= RemotingFlag.RESPONSE

    def mark_oneway(self) -> None:
        self.flag |= RemotingFlag.ONEWAY

    def __repr__(self) -> str:
        # Bodies can be hundreds of KiB: logs get their size, not their bytes.
        table = ResponseCode if self.flag & RemotingFlag.RESPONSE else RequestCode
        body = "None" if self.body is None else f"<{len(self.body)} bytes>"
        return (
            f"RemotingCommand(code={self.code} {table.name_of(self.code)}, "
            f"language={LanguageCode.name_of(self.language)}, version={self.version}, "
            f"opaque={self.opaque}, flag={self.flag}, remark={self.remark!r}, "
            f"ext_fields={self.ext_fields!r}, body={body}, "
            f"serialize_type={SerializeType.name_of(self.serialize_type)})"
        )

    def create_response(
        self, code: int, remark: str | None = None, ext_fields: dict[str, str] | None = None, body: bytes | None = None
    ) -> RemotingCommand:
        """A response to this request: same opaque, RESPONSE flag, same serialize type.

        4.9.8 answers in the request's header encoding (spec 1.5), so a client that
        sends binary headers gets binary back.
        """
        return RemotingCommand(
            code,
            LanguageCode.JAVA,
            MQVersion.V4_9_8,
            self.opaque,
            RemotingFlag.RESPONSE,
            remark,
            ext_fields,
            body,
            self.serialize_type,
        )


# --------------------------------------------------------------------------- JSON text
# fastjson escapes a superset of what json's C encoder escapes (rmq.common.fastjson
# keeps the one table); the C encoder is right for every string without
# _FASTJSON_ONLY characters, and _json_str is exact for all.


# Java HashMap iteration order. Both 4.9.8 encoders walk ``extFields`` (a
# java.util.HashMap) in bucket order, so matching Java byte for byte means sorting
# by bucket. Hashing a key in Python costs ~0.6 us, so the keys every hot request
# and response carries are hashed once here; others are hashed on the fly.
_COMMON_EXT_KEYS = (
    "a",
    "b",
    "c",
    "d",
    "e",
    "f",
    "g",
    "h",
    "i",
    "j",
    "k",
    "l",
    "m",
    "n",
    "producerGroup",
    "topic",
    "defaultTopic",
    "defaultTopicQueueNums",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "unitMode",
    "batch",
    "maxReconsumeTimes",
    "bname",
    "msgId",
    "queueOffset",
    "transactionId",
    "batchUniqId",
    "recallHandle",
    "MSG_REGION",
    "TRACE_ON",
    "consumerGroup",
    "maxMsgNums",
    "commitOffset",
    "suspendTimeoutMillis",
    "subscription",
    "subVersion",
    "expressionType",
    "maxMsgBytes",
    "suggestWhichBrokerId",
    "nextBeginOffset",
    "minOffset",
    "maxOffset",
    "offset",
    "timestamp",
    "group",
    "delayLevel",
    "originMsgId",
    "originTopic",
    "key",
    "maxNum",
    "beginTimestamp",
    "endTimestamp",
    "indexLastUpdateTimestamp",
    "indexLastUpdatePhyoffset",
    "tranStateTableOffset",
    "commitLogOffset",
    "commitOrRollback",
    "fromTransactionCheck",
    "offsetMsgId",
    "brokerName",
    "brokerAddr",
    "clusterName",
    "haServerAddr",
    "brokerId",
    "compressed",
    "bodyCrc32",
    "masterAddr",
    "clientID",
    "AccessKey",
    "Signature",
    "OnsChannel",
    "_UNIQUE_KEY_QUERY",
)


def _spread(key: str) -> int:
    """HashMap.hash(key): hashCode with its high half folded into the low half."""
    h = java_hash(key) & 0xFFFFFFFF
    return h ^ (h >> 16)


_SPREAD: Mapping[str, int] = MappingProxyType({k: _spread(k) for k in _COMMON_EXT_KEYS})
# Bucket in a 16-slot table (maps of up to 12 entries: every request and response
# header we send), so the common case sorts with a C-level key function.
_BUCKET16: Mapping[str, int] = MappingProxyType({k: h & 15 for k, h in _SPREAD.items()})
# sorted(key=...) through the proxy costs a third more than through the dict itself;
# this bound lookup is the only handle on that (never mutated) copy.
_bucket16_of = dict(_BUCKET16).__getitem__
# JSON form of a known key, ready to prepend to its value: "key":
_JSON_KEY: Mapping[str, str] = MappingProxyType({k: f'"{k}":' for k in _COMMON_EXT_KEYS})
# Binary form of a known key: int16 length + UTF-8, ready to append.
_BIN_KEY: Mapping[str, bytes] = MappingProxyType({k: _I16.pack(len(k)) + k.encode() for k in _COMMON_EXT_KEYS})
_by_bucket = itemgetter(0)


def _java_map_items(ext: Mapping[str, str | None]) -> list[tuple[int, str, str]]:
    """``(bucket, key, value)`` for the non-null entries, in Java HashMap iteration order.

    Bucket = spread(hashCode) & (capacity - 1); within a bucket, insertion order
    (resizes split buckets stably, and sort() is stable). Capacity is 16, doubled
    while size > 0.75 * capacity. Tree bins (8+ keys in one bucket) are not
    modelled: they need dozens of colliding header keys.
    """
    n = len(ext)
    cap = 16
    while n > (cap * 3) >> 2:
        cap <<= 1
    mask = cap - 1
    get = _SPREAD.get
    # "or": a key whose spread hash is 0 is just recomputed, to the same value.
    keyed = [((get(k) or _spread(k)) & mask, k, v) for k, v in ext.items() if v is not None]
    keyed.sort(key=_by_bucket)
    return keyed


class _Order(NamedTuple):
    """A key set's Java order and its binary key prefixes (int16 length + UTF-8)."""

    keys: list[str]
    bin_keys: list[bytes]
    bin_keys_size: int
    # value lengths -> (pack, block size) of the extFields block (size, then per key:
    # key prefix, value length, value): a send response's few shapes in one call
    blocks: dict[tuple[int, ...], tuple[Callable[..., bytes], int]]


# Java order per insertion-ordered key tuple: every request and response of a kind
# carries the same keys in the same order, so sorting them (and looking up their
# binary forms) once per key set instead of once per frame is the common case. The
# order is a function of that tuple alone (bucket, then insertion order).
_ORDERS: dict[tuple[str, ...], _Order] = {}


def _order_of(keys: tuple[str, ...]) -> _Order | None:
    hit = _ORDERS.get(keys)
    if hit is None:
        if len(keys) > 12:
            return None
        try:
            order = sorted(keys, key=_bucket16_of)
        except KeyError:
            return None
        kps = list(map(_BIN_KEY.__getitem__, order))
        hit = _Order(order, kps, sum(map(len, kps)), {})
        if len(_ORDERS) >= 1024:
            _ORDERS.clear()
        _ORDERS[keys] = hit
    return hit


def _block_packer(order: _Order, lens: tuple[int, ...]) -> tuple[Callable[..., bytes], int]:
    fmt = ">i" + "".join(f"{len(kp)}si{n}s" for kp, n in zip(order.bin_keys, lens, strict=True))
    packer = (struct.Struct(fmt).pack, order.bin_keys_size + sum(lens) + 4 * len(lens))
    if len(order.blocks) >= 64:
        order.blocks.clear()
    order.blocks[lens] = packer
    return packer


def _fast_order(ext: Mapping[str, str], for_json: bool) -> tuple[_Order, list[str]] | None:
    """Keys (and their binary prefixes) and values in Java order when every key is a
    known one and n <= 12.

    None when the general path is needed: unknown key, bigger map, None value, or
    (``for_json``) a value fastjson escapes differently from json's C encoder.
    """
    order = _order_of(tuple(ext))
    if order is None:
        return None
    try:
        values = list(map(ext.__getitem__, order.keys))
        joined = "".join(values)  # TypeError on a None / non-str value
        # Printable ASCII (responses, most requests) cannot hold a character the
        # two encoders escape differently; only the rest needs the regex scan.
        if for_json and not (joined.isascii() and joined.isprintable()) and _FASTJSON_ONLY.search(joined) is not None:
            return None
    except TypeError:
        return None
    return order, values


# --------------------------------------------------------------------------- encode
_JSON_HEAD = '{"code":%d%s,"flag":%d,"language":"%s","opaque":%d%s,"serializeTypeCurrentRPC":"JSON","version":%d}'


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    # fastjson writes bean properties in alphabetical order, so the layout is fixed;
    # "serializeTypeCurrentRPC" is always "JSON" as this *is* the JSON encoding.
    ext = cmd.ext_fields
    if ext:
        fast = _fast_order(ext, True)
        if fast is None:
            ext_part = _exact_ext_part(ext)
        else:
            ext_part = (
                ',"extFields":{'
                + ",".join(map(add, map(_JSON_KEY.__getitem__, fast[0].keys), map(_c_json_str, fast[1])))
                + "}"
            )
    else:
        ext_part = "" if ext is None else ',"extFields":{}'
    remark = cmd.remark
    if remark is None:
        remark_part = ""
    elif type(remark) is str and _FASTJSON_ONLY.search(remark) is None:
        remark_part = ',"remark":' + _c_json_str(remark)
    else:
        remark_part = _exact_remark_part(remark)
    text = _JSON_HEAD % (
        cmd.code,
        ext_part,
        cmd.flag,
        LanguageCode.name_of(cmd.language),
        cmd.opaque,
        remark_part,
        cmd.version,
    )
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ProtocolError(f"cannot encode header as UTF-8: {e.reason}") from None


def _exact_ext_part(ext: Mapping[str, str | None]) -> str:
    """String-by-string fastjson rendering of extFields; slower, used when escapes
    differ, a key is not a common one or the map is big."""
    for k, v in ext.items():
        if type(k) is not str or (v is not None and type(v) is not str):
            raise ProtocolError(f"ext field {k!r:.60} -> {type(v).__name__} is not str -> str")
    return ',"extFields":{' + ",".join([_json_str(k) + ":" + _json_str(v) for _, k, v in _java_map_items(ext)]) + "}"


def _exact_remark_part(remark: object) -> str:
    if type(remark) is not str:
        raise ProtocolError(f"remark is a {type(remark).__name__}, not a str")
    return ',"remark":' + _json_str(remark)


def _utf8(s: str, what: str) -> bytes:
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ProtocolError(f"cannot encode {what} as UTF-8: {e.reason}") from None
    except AttributeError:
        raise ProtocolError(f"{what} is a {type(s).__name__}, not a str") from None


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    remark = cmd.remark
    remark_b = _utf8(remark, "remark") if remark else b""
    ext = cmd.ext_fields
    try:
        head = _BIN_HEAD.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, len(remark_b))
    except struct.error:
        raise ProtocolError(
            "command does not fit the ROCKETMQ header (code and version are int16, "
            f"language a byte): code={cmd.code} language={cmd.language} "
            f"version={cmd.version} opaque={cmd.opaque} flag={cmd.flag}"
        ) from None
    if not ext:
        return b"".join((head, remark_b, b"\x00\x00\x00\x00"))
    fast = _fast_order(ext, False)
    if fast is not None:
        order, values = fast
        kps = order.bin_keys
        try:
            vbs = list(map(str.encode, values))
        except UnicodeEncodeError as e:
            raise ProtocolError(f"cannot encode ext field value as UTF-8: {e.reason}") from None
        lens = tuple(map(len, vbs))
        block = order.blocks.get(lens)
        if block is None:
            block = _block_packer(order, lens)
        return b"".join((head, remark_b, block[0](block[1], *chain.from_iterable(zip(kps, lens, vbs, strict=True)))))
    parts = [head, remark_b, b""]
    append = parts.append
    pack32 = _I32.pack
    size = 0
    for _, k, v in _java_map_items(ext):
        kb = _utf8(k, "ext field key")
        if len(kb) > 0x7FFF:
            raise ProtocolError(f"ext field key of {len(kb)} bytes does not fit an int16 length")
        vb = _utf8(v, "ext field value")
        append(_I16.pack(len(kb)))
        append(kb)
        append(pack32(len(vb)))
        append(vb)
        size += 6 + len(kb) + len(vb)
    parts[2] = pack32(size)
    return b"".join(parts)


def _encode_header(cmd: RemotingCommand, serialize_type: int | None) -> tuple[int, bytes]:
    st = cmd.serialize_type if serialize_type is None else serialize_type
    if st == SerializeType.JSON:
        header = _encode_json_header(cmd)
    elif st == SerializeType.ROCKETMQ:
        header = _encode_binary_header(cmd)
    else:
        raise ProtocolError(f"unknown serialize type {st}")
    if len(header) > _MAX_HEADER_LENGTH:
        raise ProtocolError(f"header of {len(header)} bytes does not fit the 24-bit header length")
    return st, header


def _prefix(st: int, header: bytes, body_length: int) -> bytes:
    total = 4 + len(header) + body_length
    if total > 0x7FFFFFFF:
        raise ProtocolError(f"frame length {total} does not fit an int32")
    return _PREFIX.pack(total, (st << 24) | len(header)) + header


def encode_header_only(cmd: RemotingCommand, body_length: int, serialize_type: int | None = None) -> bytes:
    """Length, header word and header for a body of ``body_length`` bytes sent separately.

    ``cmd.body`` is ignored: the caller writes the body itself, e.g.
    ``transport.writelines([prefix, *store_slices])`` for a pull response.
    """
    if body_length < 0:
        raise ProtocolError(f"negative body length {body_length}")
    st, header = _encode_header(cmd, serialize_type)
    return _prefix(st, header, body_length)


def encode_parts(cmd: RemotingCommand, serialize_type: int | None = None) -> tuple[bytes, Buffer | None]:
    """``(prefix, body)``: write both (``writelines``) without concatenating a big body."""
    body: Buffer | None = cmd.body  # bytes, or a store slice (see RemotingCommand)
    st, header = _encode_header(cmd, serialize_type)
    if not body:
        return _prefix(st, header, 0), None
    size = body.nbytes if type(body) is memoryview else len(body)
    return _prefix(st, header, size), body


def encode(cmd: RemotingCommand, serialize_type: int | None = None) -> bytes:
    """The whole frame. ``serialize_type`` None means the command's own ``serialize_type``."""
    prefix, body = encode_parts(cmd, serialize_type)
    return prefix if body is None else b"".join((prefix, body))


# --------------------------------------------------------------------------- decode
def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


class _NumberText(str):
    """A JSON number with a fraction or exponent, kept as its source text."""

    __slots__ = ()


# Floats are kept as their source text: an ext field value 1.50 stays "1.50" (Java
# reads it as BigDecimal and prints it the same way), and a float where an int
# belongs fails the int check instead of being truncated. strict=False accepts raw
# control characters inside strings, as fastjson does: the .NET client writes the
# \x01/\x02 property separators unescaped.
_JSON = json.JSONDecoder(parse_float=_NumberText, parse_constant=_reject_constant, strict=False)
_JSON_WS = re.compile(r"[ \t\n\r]*")


def _java_string(value: object, what: str) -> str | None:
    """A JSON scalar as Java's String conversion prints it; None stays None."""
    if type(value) is str or value is None:
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return str(value)
    if type(value) is _NumberText:
        return str.__str__(value)
    raise ProtocolError(f"JSON header {what} is {_json_type(value)}, not a string")


def _json_type(value: object) -> str:
    """What a parsed JSON value is, with its article, for error messages."""
    return "a number" if isinstance(value, _NumberText) else type_name(value)


def _json_int(obj: dict[str, object], key: str, default: int) -> int:
    v = obj.get(key)
    if v is None:
        return default
    if type(v) is not int:
        raise ProtocolError(f"JSON header field {key} is {_json_type(v)}, not an integer")
    if not -0x80000000 <= v <= 0x7FFFFFFF:
        raise ProtocolError(f"JSON header field {key} = {v} does not fit an int32")
    return v


def _decode_json_header(raw: memoryview, body: bytes | None) -> RemotingCommand:
    try:
        text = str(raw, "utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError(f"JSON header is not valid UTF-8 at byte {e.start}: {e.reason}") from None
    try:
        # raw_decode + our own whitespace handling skips json.loads' dispatch.
        start = 0 if text[:1] == "{" else _JSON_WS.match(text).end()  # type: ignore[union-attr]
        obj, end = _JSON.raw_decode(text, start)
    except json.JSONDecodeError as e:
        raise ProtocolError(f"JSON header is not valid JSON: {e.msg} at char {e.pos}") from None
    except (ValueError, RecursionError) as e:  # int digit limit, NaN/Infinity, deep nesting
        raise ProtocolError(f"JSON header is not acceptable JSON: {type(e).__name__}: {str(e)[:80]}") from None
    if end != len(text) and (_JSON_WS.match(text, end).end() != len(text)):  # type: ignore[union-attr]
        raise ProtocolError(f"JSON header has extra data at char {end}")
    if type(obj) is not dict:
        raise ProtocolError(f"JSON header is {_json_type(obj)}, not an object")

    get = obj.get
    code = get("code")
    version = get("version")
    opaque = get("opaque")
    flag = get("flag")
    if not (
        type(code) is int
        and type(version) is int
        and type(opaque) is int
        and type(flag) is int
        and -0x80000000 <= code <= 0x7FFFFFFF
        and -0x80000000 <= version <= 0x7FFFFFFF
        and -0x80000000 <= opaque <= 0x7FFFFFFF
        and -0x80000000 <= flag <= 0x7FFFFFFF
    ):
        # Slow path: absent/null fields take Java's defaults, anything else is named.
        code = _json_int(obj, "code", 0)
        version = _json_int(obj, "version", 0)
        opaque = _json_int(obj, "opaque", 0)
        flag = _json_int(obj, "flag", 0)

    lang = get("language")
    if type(lang) is str:
        language = LanguageCode.from_name(lang)
    elif lang is None:
        language = LanguageCode.JAVA
    elif type(lang) is int:
        language = lang if LanguageCode.is_known(lang) else LanguageCode.OTHER
    else:
        raise ProtocolError(f"JSON header field language is {_json_type(lang)}, not an enum name or an integer")

    ext = get("extFields")
    if ext is not None:
        if type(ext) is not dict:
            raise ProtocolError(f"JSON header field extFields is {_json_type(ext)}, not an object")
        for v in ext.values():
            if type(v) is not str:
                # Rare: numbers/booleans/null from non-Java clients; Java's map keeps
                # them as their string form, a null is the same as an absent key.
                fixed = {}
                for k, v2 in ext.items():
                    s = _java_string(v2, f"extFields value of {k!r:.60}")
                    if s is not None:
                        fixed[k] = s
                ext = fixed
                break

    remark = get("remark")
    if remark is not None and type(remark) is not str:
        remark = _java_string(remark, "field remark")
    return RemotingCommand(code, language, version, opaque, flag, remark, ext, body, SerializeType.JSON)


class _ExtShape(NamedTuple):
    """The layout of one extFields block: its entries' key and value lengths, and the
    Struct that unpacks (klen, key, vlen, value) for every entry in one call."""

    unpack: Callable[[bytes], tuple[Any, ...]]
    klens: tuple[int, ...]
    vlens: tuple[int, ...]


# The last layout seen per block size. A producer's SEND_MESSAGE_V2 blocks repeat a
# few layouts (same keys, same value lengths but for queueId's and the offsets'
# digits), so one unpack against a remembered layout replaces a Python loop of 14
# entries. Only layouts without empty keys or values (dropped entries) are kept.
_EXT_SHAPES: dict[int, _ExtShape] = {}


def _decode_ext_block(raw: bytes) -> dict[str, str] | None:
    """The ROCKETMQ header's extFields block: (int16 klen, key, int32 vlen, value)*."""
    shape = _EXT_SHAPES.get(len(raw))
    if shape is not None:
        f = shape.unpack(raw)
        # The lengths read at the remembered positions are the remembered ones, so
        # each entry starts where the loop below would find it: the same parse.
        if f[0::4] == shape.klens and f[2::4] == shape.vlens:
            try:
                return dict(zip(map(bytes.decode, f[1::4]), map(bytes.decode, f[3::4]), strict=True))
            except UnicodeDecodeError:
                pass  # the loop raises the error naming the entry
    return _decode_ext_entries(raw)


def _decode_ext_entries(raw: bytes) -> dict[str, str] | None:
    ext: dict[str, str] = {}
    klens: list[int] = []
    vlens: list[int] = []
    q = 0
    n = len(raw)
    unpack16 = _I16.unpack_from
    unpack32 = _I32.unpack_from
    try:
        while q < n:
            if n - q < 6:
                raise ProtocolError(f"ROCKETMQ header ext entry at byte {q} of the extFields block is truncated")
            (klen,) = unpack16(raw, q)
            q += 2
            if klen < 0 or klen > n - q - 4:
                raise ProtocolError(f"ROCKETMQ header ext key length {klen} runs past the extFields block")
            key = raw[q : q + klen].decode("utf-8")
            q += klen
            (vlen,) = unpack32(raw, q)
            q += 4
            if vlen < 0 or vlen > n - q:
                raise ProtocolError(f"ROCKETMQ header ext value length {vlen} runs past the extFields block")
            value = raw[q : q + vlen].decode("utf-8")
            q += vlen
            # Java (5.x readStr) reads a zero-length string as null; a null key or
            # value is indistinguishable from an absent entry for every lookup.
            if klen and vlen:
                ext[key] = value
            klens.append(klen)
            vlens.append(vlen)
    except UnicodeDecodeError as e:
        raise ProtocolError(f"ROCKETMQ header ext field is not valid UTF-8: {e.reason}") from None
    if ext and 0 not in klens and 0 not in vlens and len(klens) <= 64:
        if len(_EXT_SHAPES) >= 256:
            _EXT_SHAPES.clear()
        fmt = ">" + "".join(f"h{k}si{v}s" for k, v in zip(klens, vlens, strict=True))
        _EXT_SHAPES[n] = _ExtShape(struct.Struct(fmt).unpack, tuple(klens), tuple(vlens))
    return ext or None


def _decode_binary_header(mv: memoryview, start: int, end: int, body: bytes | None) -> RemotingCommand:
    size = end - start
    if size < _BIN_FIXED_SIZE:
        raise ProtocolError(f"ROCKETMQ header of {size} bytes is shorter than the {_BIN_FIXED_SIZE}-byte minimum")
    code, language, version, opaque, flag, rlen = _BIN_HEAD.unpack_from(mv, start)
    p = start + 17
    if rlen < 0 or rlen > end - p - 4:
        raise ProtocolError(
            f"ROCKETMQ header remark length {rlen} runs past the header ({end - p - 4} bytes available)"
        )
    remark = None
    if rlen:  # length 0 is null in Java's decoder
        try:
            remark = str(mv[p : p + rlen], "utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"ROCKETMQ header remark is not valid UTF-8: {e.reason}") from None
        p += rlen
    (elen,) = _I32.unpack_from(mv, p)
    p += 4
    if elen < 0 or elen > end - p:
        raise ProtocolError(f"ROCKETMQ header extFields length {elen} runs past the header ({end - p} bytes available)")
    ext: dict[str, str] | None = None
    if elen:
        stop = p + elen
        ext = _decode_ext_block(bytes(mv[p:stop]))  # one copy; slicing bytes is cheaper than memoryviews
        p = stop
    if p != end:
        raise ProtocolError(f"ROCKETMQ header has {end - p} bytes after the extFields block")
    if not LanguageCode.is_known(language):
        language = LanguageCode.OTHER
    return RemotingCommand(code, language, version, opaque, flag, remark, ext, body, SerializeType.ROCKETMQ)


def _check_length(length: int, max_frame: int) -> None:
    if length < 4:
        if length < 0:
            raise ProtocolError(f"frame length {length} is negative")
        raise ProtocolError(f"frame length {length} is below the 4-byte minimum")
    raise ProtocolError(f"frame of {length + 4} bytes exceeds the {max_frame}-byte limit")


def _check_header_word(word: int, length: int) -> tuple[int, int]:
    st = word >> 24
    hlen = word & 0xFFFFFF
    if st != SerializeType.JSON and st != SerializeType.ROCKETMQ:
        raise ProtocolError(f"unknown serialize type {st}")
    if hlen > length - 4:
        raise ProtocolError(f"header length {hlen} exceeds frame length {length} - 4")
    return st, hlen


def _decode_one(mv: memoryview, pos: int, length: int) -> RemotingCommand:
    """The frame whose 4-byte length field (already read as ``length``) is at ``pos``."""
    (word,) = _U32.unpack_from(mv, pos + 4)
    st = word >> 24
    hlen = word & 0xFFFFFF
    if st > 1 or hlen > length - 4:
        _check_header_word(word, length)  # raises the precise error
    hstart = pos + 8
    hend = hstart + hlen
    end = pos + 4 + length
    body = mv[hend:end].tobytes() if end > hend else None
    if st == 0:
        return _decode_json_header(mv[hstart:hend], body)
    return _decode_binary_header(mv, hstart, hend, body)


def decode_frame(frame: Buffer, max_frame_length: int = MAX_FRAME_LENGTH) -> RemotingCommand:
    """Decode exactly one complete frame (length field included); anything else is an error."""
    with memoryview(frame) as mv:
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        n = mv.nbytes
        if n < 4:
            raise ProtocolError(f"frame of {n} bytes has no length field")
        (length,) = _I32.unpack_from(mv, 0)
        if length < 4 or length > max_frame_length - 4:
            _check_length(length, max_frame_length)
        if length + 4 != n:
            raise ProtocolError(f"frame length field says {length + 4} bytes, got {n}")
        return _decode_one(mv, 0, length)


class FrameDecoder:
    """Incremental frame decoder: ``feed(bytes) -> [RemotingCommand, ...]``.

    Keeps at most one partial frame buffered. The first ``ProtocolError`` poisons
    the decoder: every later ``feed`` raises it again (the transport closes the
    connection, as Netty does when a frame fails to decode). Frames that preceded
    the bad one inside the same ``feed`` call are dropped with the connection.
    """

    __slots__ = ("_buf", "_max_frame", "_error")

    def __init__(self, max_frame_length: int = MAX_FRAME_LENGTH) -> None:
        if max_frame_length < 8:
            raise ValueError("max_frame_length must leave room for the 8-byte frame prefix")
        self._buf = bytearray()
        self._max_frame = max_frame_length
        self._error: str | None = None

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame waiting for the rest."""
        return len(self._buf)

    @property
    def failed(self) -> bool:
        return self._error is not None

    def feed(self, data: Buffer) -> list[RemotingCommand]:
        """Every frame completed by ``data``, in order; keeps an incomplete tail."""
        if self._error is not None:
            raise ProtocolError(self._error)
        try:
            if self._buf:
                self._buf += data
                return self._parse(self._buf, False)
            # Common case: the read holds whole frames. Parse straight from it and
            # keep only an incomplete tail, instead of copying every byte into buf.
            return self._parse(data, True)
        except ProtocolError as e:
            self._error = str(e)
            # Not clear(): the traceback may still hold views into the old buffer.
            self._buf = bytearray()
            raise

    def _parse(self, src: Buffer, direct: bool) -> list[RemotingCommand]:
        out: list[RemotingCommand] = []
        pos = 0
        limit = self._max_frame - 4
        unpack = _I32.unpack_from
        with memoryview(src) as mv:
            if mv.format != "B" or mv.ndim != 1:
                mv = mv.cast("B")
            n = mv.nbytes
            while n - pos >= 4:
                (length,) = unpack(mv, pos)
                if length < 4 or length > limit:
                    _check_length(length, self._max_frame)
                if n - pos - 4 < length:
                    # Incomplete: still reject a bad header word now rather than after
                    # buffering up to 16 MiB of garbage.
                    if n - pos >= 8:
                        _check_header_word(_U32.unpack_from(mv, pos + 4)[0], length)
                    break
                out.append(_decode_one(mv, pos, length))
                pos += 4 + length
            if direct and pos < n:
                self._buf += mv[pos:]
        if not direct and pos:
            del self._buf[:pos]  # bytearray drops a prefix in O(1) (moves its start)
        return out
