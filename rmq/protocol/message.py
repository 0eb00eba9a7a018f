"""Messages as RocketMQ 4.x writes them: CommitLog records, properties, ids, batches.

Spec sections 3.1-3.7. Everything here is pure: bytes in, objects out.
"""

from __future__ import annotations

import ipaddress
import os
import struct
import time
import zlib
from array import array
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from operator import methodcaller, mul
from typing import NamedTuple

from rmq.protocol.errors import ProtocolError

# --- magic codes (spec 3.1) -------------------------------------------------
MESSAGE_MAGIC_CODE = -626843481  # DA A3 20 A7
MESSAGE_MAGIC_CODE_V2 = -626843477  # DA A3 20 AB (5.x, 2-byte topic length)
BLANK_MAGIC_CODE = -875286124  # CB D4 31 94
END_FILE_MIN_BLANK_LENGTH = 8


class SysFlag:
    """MessageSysFlag bits (spec 3.3)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    BORNHOST_V6 = 0x10
    STOREHOSTADDRESS_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_LZ4 = 0x100
    COMPRESSION_ZSTD = 0x200
    COMPRESSION_ZLIB = 0x300

    @staticmethod
    def transaction_value(flag: int) -> int:
        return flag & 0xC

    @staticmethod
    def reset_transaction_value(flag: int, tran_type: int) -> int:
        return (flag & ~0xC) | tran_type


class MessageConst:
    """Well-known property names (spec 3.4)."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT_STORE_MSG_OK = "WAIT"
    DELAY_TIME_LEVEL = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QUEUE_ID = "REAL_QID"
    TRANSACTION_PREPARED = "TRAN_MSG"
    PRODUCER_GROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    BUYER_ID = "BUYER_ID"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    TRANSFER_FLAG = "TRANSFER_FLAG"
    CORRECTION_FLAG = "CORRECTION_FLAG"
    MQ2_FLAG = "MQ2_FLAG"
    RECONSUME_TIME = "RECONSUME_TIME"
    MSG_REGION = "MSG_REGION"
    TRACE_SWITCH = "TRACE_ON"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
    TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    INSTANCE_ID = "INSTANCE_ID"
    CORRELATION_ID = "CORRELATION_ID"
    REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
    MESSAGE_TTL = "TTL"
    ARRIVE_TIME = "ARRIVE_TIME"
    PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
    CLUSTER = "CLUSTER"
    MESSAGE_TYPE = "MSG_TYPE"
    SHARDING_KEY = "__SHARDINGKEY"
    # RocketMQ 5 timer messages (rmq/broker/timer.py)
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    TIMER_DELAY_MS = "TIMER_DELAY_MS"
    TIMER_OUT_MS = "TIMER_OUT_MS"
    TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
    TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"

    KEY_SEPARATOR = " "


NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

# --- Java String.hashCode ----------------------------------------------------
# Powers of 31 modulo 2**32, lowest first. map() stops at the shorter input, so
# one long table serves every key length up to its size.
_POW31 = tuple(pow(31, k, 1 << 32) for k in range(4096))
_LITTLE_ENDIAN = struct.pack("=H", 1) == b"\x01\x00"


def java_hash(s: str) -> int:
    """Java ``String.hashCode()``: over UTF-16 code units, as a signed int32."""
    units: bytes | memoryview
    if s.isascii():
        units = s.encode("ascii")[::-1]
    else:
        raw = s.encode("utf-16-le" if _LITTLE_ENDIAN else "utf-16-be")
        units = memoryview(raw).cast("H")[::-1]
    if len(units) > len(_POW31):
        h = 0
        for c in units[::-1]:
            h = (31 * h + c) & 0xFFFFFFFF
    else:
        h = sum(map(mul, units, _POW31)) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def tags_string_to_tags_code(tags: str | None) -> int:
    """Tag code stored in a ConsumeQueue unit (0 when there is no tag)."""
    if not tags:
        return 0
    return java_hash(tags)


# --- properties (spec 3.4) ---------------------------------------------------
def properties_to_string(props: Mapping[str, str | None]) -> str:
    """name\\x01value\\x02 for every non-null value, trailing separator included."""
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items() if v is not None)


def string_to_properties(s: str | None) -> dict[str, str]:
    """Parse as MessageDecoder.string2messageProperties does.

    A segment counts only with a non-empty name and a non-empty value; the value
    is everything after the first \\x01 of its segment; the last one wins.
    """
    out: dict[str, str] = {}
    if not s:
        return out
    for seg in s.split("\x02"):
        sep = seg.find("\x01")
        if 0 < sep < len(seg) - 1:
            out[seg[:sep]] = seg[sep + 1 :]
    return out


def decode_properties(raw: bytes | memoryview) -> dict[str, str]:
    try:
        return string_to_properties(bytes(raw).decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ProtocolError(f"properties are not UTF-8: {e}") from None


# --- hosts -------------------------------------------------------------------
def pack_host(ip: str, port: int) -> bytes:
    """Socket address as RocketMQ stores it: 4 or 16 address bytes + int32 port."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise ProtocolError(f"not an IP address: {ip!r}") from None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.packed + struct.pack(">i", port)


def unpack_host(raw: bytes | memoryview) -> tuple[str, int]:
    raw = bytes(raw)
    if len(raw) == 8:
        return str(ipaddress.IPv4Address(raw[:4])), int.from_bytes(raw[4:], "big", signed=True)
    if len(raw) == 20:
        return str(ipaddress.IPv6Address(raw[:16])), int.from_bytes(raw[16:], "big", signed=True)
    raise ProtocolError(f"host must be 8 or 20 bytes, got {len(raw)}")


def host_sysflag(born_host: bytes, store_host: bytes) -> int:
    """The v6 bits a record with these packed hosts must carry."""
    f = 0
    if len(born_host) == 20:
        f |= SysFlag.BORNHOST_V6
    if len(store_host) == 20:
        f |= SysFlag.STOREHOSTADDRESS_V6
    return f


# --- message ids (spec 3.5, 3.6) ----------------------------------------------
def create_message_id(store_host: bytes, physical_offset: int) -> str:
    """Offset msgId: store host bytes + port + commit-log offset, uppercase hex."""
    return (store_host + physical_offset.to_bytes(8, "big", signed=True)).hex().upper()


def decode_message_id(msg_id: str) -> tuple[str, int, int]:
    """(ip, port, physical offset) of an offset msgId; 32 hex chars IPv4 else IPv6."""
    if len(msg_id) not in (32, 56):
        raise ProtocolError(f"offset msgId must have 32 or 56 hex digits, got {len(msg_id)}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ProtocolError(f"offset msgId is not hex: {msg_id!r}") from None
    if len(raw) * 2 != len(msg_id):
        # bytes.fromhex skips ASCII whitespace; a msgId has none.
        raise ProtocolError(f"offset msgId is not hex: {msg_id!r}")
    ip, port = unpack_host(raw[:-8])
    return ip, port, int.from_bytes(raw[-8:], "big", signed=True)


class UniqueIdGenerator:
    """MessageClientIDSetter: the client-side UNIQ_KEY.

    hex(ip + pid:int16 + seed:int32) + hex(ms since start of month:int32 + counter:int16).
    The seed stands in for Java's class-loader hash.
    """

    def __init__(self, ip: bytes = b"\x7f\x00\x00\x01", pid: int | None = None, seed: int | None = None) -> None:
        if len(ip) not in (4, 16):
            raise ValueError("ip must be 4 or 16 bytes")
        pid = os.getpid() if pid is None else pid
        seed = int.from_bytes(os.urandom(4), "big", signed=True) if seed is None else seed
        self._prefix = (ip + struct.pack(">hi", _to_short(pid), seed)).hex().upper()
        self._counter = 0
        self._start = 0
        self._next_start = 0

    def _set_start(self, now_ms: int) -> None:
        lt = time.localtime(now_ms / 1000)
        start = time.mktime((lt.tm_year, lt.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        ny, nm = (lt.tm_year + 1, 1) if lt.tm_mon == 12 else (lt.tm_year, lt.tm_mon + 1)
        self._start = int(start * 1000)
        self._next_start = int(time.mktime((ny, nm, 1, 0, 0, 0, 0, 0, -1)) * 1000)

    def next_id(self, now_ms: int | None = None) -> str:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        if now >= self._next_start or now < self._start:
            self._set_start(now)
        diff = now - self._start
        counter = self._counter
        self._counter = (counter + 1) & 0xFFFF
        # Java writes (int) diff: a month is longer than 2**31 ms, so keep all 32 bits.
        return self._prefix + struct.pack(">IH", diff & 0xFFFFFFFF, counter).hex().upper()


def _to_short(v: int) -> int:
    v &= 0xFFFF
    return v - 0x10000 if v & 0x8000 else v


# --- CommitLog record (spec 3.2) ------------------------------------------------
_HEAD_STRUCTS = {(b, s): struct.Struct(f">iiiiiqqiq{b}sq{s}siqi") for b in (8, 20) for s in (8, 20)}
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_BLANK = struct.Struct(">ii")
# The layout for writers that pack records themselves (the CommitLog's put path).
RECORD_HEAD_STRUCTS = _HEAD_STRUCTS
"""TOTALSIZE .. BODY LENGTH, by (born host, store host) length (8 IPv4, 20 IPv6)."""
BLANK_RECORD = _BLANK
"""TOTALSIZE, MAGIC of the BLANK that pads a CommitLog file to its end."""
PROPERTIES_MAX = 32767
"""The properties field's length is a signed short."""


def record_format(born_len: int, store_len: int, body_len: int, topic_len: int, props_len: int) -> str:
    """struct format of one whole record of that shape (head, body, topic, properties)."""
    return f">iiiiiqqiq{born_len}sq{store_len}siqi{body_len}sB{topic_len}sh{props_len}s"


RECORD_FIXED_LENGTH = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 4 + 8 + 4 + 1 + 2
"""A record's length without body, topic, properties and the two hosts (75): TOTALSIZE ..
BODY LENGTH less the hosts, plus the topic and properties length fields. Each host adds
8 (IPv4) or 20 (IPv6); message version 2 adds 1 (a 2-byte topic length)."""

# Positions valid for any record (before the born host).
POS_TOTALSIZE = 0
POS_MAGIC = 4
POS_BODYCRC = 8
POS_QUEUEID = 12
POS_FLAG = 16
POS_QUEUEOFFSET = 20
POS_PHYSICALOFFSET = 28
POS_SYSFLAG = 36
POS_BORNTIMESTAMP = 40
POS_BORNHOST = 48


def record_length(sys_flag: int, body_len: int, topic_len: int, props_len: int, v2: bool = False) -> int:
    """calMsgLength: the TOTALSIZE a record with these parts must have."""
    bh = 20 if sys_flag & SysFlag.BORNHOST_V6 else 8
    sh = 20 if sys_flag & SysFlag.STOREHOSTADDRESS_V6 else 8
    return RECORD_FIXED_LENGTH + bh + sh + body_len + topic_len + props_len + (1 if v2 else 0)


def store_timestamp_position(sys_flag: int) -> int:
    return POS_BORNHOST + (20 if sys_flag & SysFlag.BORNHOST_V6 else 8)


def body_crc(body: bytes | memoryview) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def encode_record(
    *,
    topic: bytes,
    body: bytes,
    properties: bytes,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    crc: int | None = None,
) -> bytes:
    """One message version 1 record; sys_flag must already carry the v6 host bits."""
    if len(topic) > 127:
        raise ProtocolError(f"topic is {len(topic)} bytes; version 1 records allow 127")
    if len(properties) > 32767:
        raise ProtocolError(f"properties are {len(properties)} bytes; at most 32767")
    total = RECORD_FIXED_LENGTH + len(born_host) + len(store_host) + len(body) + len(topic) + len(properties)
    head = _HEAD_STRUCTS[len(born_host), len(store_host)].pack(
        total,
        MESSAGE_MAGIC_CODE,
        body_crc(body) if crc is None else crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        len(body),
    )
    return b"".join((head, body, bytes((len(topic),)), topic, _SHORT.pack(len(properties)), properties))


def encode_blank(max_blank: int) -> bytes:
    """The 8-byte END_OF_FILE marker: remaining size + BLANK magic."""
    return _BLANK.pack(max_blank, BLANK_MAGIC_CODE)


@dataclass(slots=True, eq=False)
class MessageExt:
    """A decoded CommitLog record (what a consumer or the store sees)."""

    store_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]

    @property
    def msg_id(self) -> str:
        """Offset msgId, recomputed from store host and physical offset."""
        return create_message_id(self.store_host, self.commit_log_offset)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(MessageConst.KEYS)

    @property
    def born_host_str(self) -> str:
        ip, port = unpack_host(self.born_host)
        return f"{ip}:{port}"

    @property
    def store_host_str(self) -> str:
        ip, port = unpack_host(self.store_host)
        return f"{ip}:{port}"


class RecordHead(NamedTuple):
    """The fixed fields of a record, read without touching body or properties."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int
    body_len: int


def read_record_head(buf: bytes | memoryview | bytearray, pos: int = 0) -> RecordHead:
    """Parse the fixed part of the record at pos (magic must be a message magic)."""
    try:
        magic = _INT.unpack_from(buf, pos + 4)[0]
        if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
            raise ProtocolError(f"bad magic code 0x{magic & 0xFFFFFFFF:08X} at {pos}")
        sys_flag = _INT.unpack_from(buf, pos + POS_SYSFLAG)[0]
        st = _HEAD_STRUCTS[
            20 if sys_flag & SysFlag.BORNHOST_V6 else 8, 20 if sys_flag & SysFlag.STOREHOSTADDRESS_V6 else 8
        ]
        return RecordHead._make(st.unpack_from(buf, pos))
    except struct.error:
        raise ProtocolError(f"truncated record at {pos}") from None


def decode_record(
    buf: bytes | memoryview | bytearray, pos: int = 0, *, check_crc: bool = False, decompress: bool = False
) -> MessageExt:
    """Decode the record at pos; ProtocolError on anything malformed.

    With decompress, a COMPRESSED (zlib) body is inflated, as RocketMQ's client does.
    """
    head = read_record_head(buf, pos)
    total = head.total_size
    v2 = head.magic == MESSAGE_MAGIC_CODE_V2
    if total <= 0 or pos + total > len(buf):
        raise ProtocolError(f"record at {pos} declares {total} bytes, {len(buf) - pos} available")
    body_len = head.body_len
    body_start = pos + _HEAD_STRUCTS[len(head.born_host), len(head.store_host)].size
    try:
        if body_len < 0 or body_start + body_len > pos + total:
            raise ProtocolError(f"record at {pos}: body length {body_len} exceeds the record")
        body = bytes(buf[body_start : body_start + body_len])
        p = body_start + body_len
        if v2:
            topic_len = struct.unpack_from(">h", buf, p)[0]
            p += 2
        else:
            topic_len = buf[p]
            p += 1
        if topic_len < 0 or (not v2 and topic_len > 127):
            # v1 reads a signed byte, v2 a signed short: never negative.
            raise ProtocolError(f"record at {pos}: bad topic length {topic_len}")
        topic_raw = bytes(buf[p : p + topic_len])
        p += topic_len
        props_len = _SHORT.unpack_from(buf, p)[0]
        p += 2
        if props_len < 0:
            raise ProtocolError(f"record at {pos}: negative properties length {props_len}")
        props_raw = bytes(buf[p : p + props_len])
        p += props_len
    except (struct.error, IndexError):
        raise ProtocolError(f"truncated record at {pos}") from None
    if p - pos != total:
        raise ProtocolError(f"record at {pos}: TOTALSIZE {total} but fields add up to {p - pos}")
    if check_crc and body_crc(body) != head.body_crc:
        raise ProtocolError(f"record at {pos}: body CRC mismatch")
    try:
        topic = topic_raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"record at {pos}: topic is not UTF-8") from None
    if decompress and head.sys_flag & SysFlag.COMPRESSED:
        try:
            body = zlib.decompress(body)
        except zlib.error as e:
            raise ProtocolError(f"record at {pos}: compressed body does not inflate: {e}") from None
    return MessageExt(
        total,
        head.magic,
        head.body_crc,
        head.queue_id,
        head.flag,
        head.queue_offset,
        head.physical_offset,
        head.sys_flag,
        head.born_timestamp,
        head.born_host,
        head.store_timestamp,
        head.store_host,
        head.reconsume_times,
        head.prepared_transaction_offset,
        body,
        topic,
        decode_properties(props_raw),
    )


def decode_records(buf: bytes | memoryview | bytearray, *, decompress: bool = True) -> list[MessageExt]:
    """Split a PULL/QUERY response body (records back to back) into messages.

    Like MessageDecoder.decodes, a record that fails to decode ends the batch.
    """
    out: list[MessageExt] = []
    pos = 0
    n = len(buf)
    while pos + 8 <= n:
        try:
            m = decode_record(buf, pos, decompress=decompress)
        except ProtocolError:
            break
        out.append(m)
        pos += m.store_size
    return out


_HEAD_V1_IPV4 = _HEAD_STRUCTS[8, 8]
_NOT_PLAIN = SysFlag.BORNHOST_V6 | SysFlag.STOREHOSTADDRESS_V6 | SysFlag.COMPRESSED
_SPLIT_NAME = methodcaller("split", "\x01", 1)


def _plain_properties(s: str) -> dict[str, str]:
    """``string_to_properties`` with the split done in C for the usual string (every
    segment a non-empty name, \x01, a non-empty value); any other shape goes to it."""
    parts = s.split("\x02")
    if parts[-1] == "":
        parts.pop()
    try:
        out = dict(map(_SPLIT_NAME, parts))  # ValueError: a segment without \x01
    except ValueError:
        return string_to_properties(s)
    if "" in out or "" in out.values():
        return string_to_properties(s)  # empty names / values are skipped there
    return out


def decode_records_batch(buf: bytes | memoryview | bytearray, *, decompress: bool = True) -> list[MessageExt]:
    """``decode_records``' result (the same messages, the same end at a bad record), in
    one pass that costs less per message: the usual record (magic v1, IPv4 hosts, not
    compressed) is read with one struct call and its properties split in C; any other
    record, or one that fails a check, goes through ``decode_record``, which decides."""
    data = bytes(buf)
    n = len(data)
    out: list[MessageExt] = []
    append = out.append
    unpack = _HEAD_V1_IPV4.unpack_from
    head_size = _HEAD_V1_IPV4.size
    topics: dict[bytes, str] = {}
    pos = 0
    while pos + 8 <= n:
        if pos + head_size <= n:
            head = unpack(data, pos)
            total, sys_flag, body_len = head[0], head[7], head[14]
            end = pos + total
            body_start = pos + head_size
            p = body_start + body_len
            if (
                head[1] == MESSAGE_MAGIC_CODE
                and not sys_flag & _NOT_PLAIN
                and 0 < total
                and end <= n
                and body_len >= 0
                and p < end
            ):
                q = p + 1 + data[p]  # end of the topic (v1: a one-byte length, at most 127)
                if data[p] <= 127 and q + 2 <= end and data[q] < 0x80 and q + 2 + (data[q] << 8 | data[q + 1]) == end:
                    try:
                        raw = data[p + 1 : q]
                        topic = topics.get(raw)
                        if topic is None:
                            topic = topics[raw] = raw.decode("utf-8")
                        props = _plain_properties(data[q + 2 : end].decode("utf-8"))
                    except UnicodeDecodeError:
                        pass  # decode_record says which and ends the batch
                    else:
                        # the 14 fixed fields (TOTALSIZE .. PREPARED TRANSACTION OFFSET) are
                        # MessageExt's first 14, in order
                        append(MessageExt(*head[:14], data[body_start:p], topic, props))  # type: ignore[call-arg]
                        pos = end
                        continue
        try:
            m = decode_record(data, pos, decompress=decompress)
        except ProtocolError:
            break
        append(m)
        pos += m.store_size
    return out


# TOTALSIZE, MAGIC, QUEUE OFFSET, SYSFLAG, BODY LENGTH of a record with IPv4 hosts
_SCAN_HEAD = struct.Struct(">ii12xq8xi44xi")
_TAGS_KEY = MessageConst.TAGS.encode() + b"\x01"


def scan_records(buf: bytes, tags: Collection[bytes] | None = None) -> tuple[array[int], array[int], bool] | None:
    """The queue offsets and body lengths of the records of a PULL body, read from the
    record heads without decoding them (a consumer's flow control needs count and bytes;
    the messages are decoded when consumed). With ``tags``, records whose TAGS property
    (bytes) is not one of them are left out, and the third item says some were.

    None when a record is not the usual kind ``decode_records_batch`` reads in one step
    (magic v1, IPv4 hosts, not compressed) or does not check out: the caller decodes the
    body instead, which decides where a bad record ends the batch."""
    n = len(buf)
    offsets = array("q")
    sizes = array("q")
    add_offset, add_size = offsets.append, sizes.append
    unpack = _SCAN_HEAD.unpack_from
    head_size = _SCAN_HEAD.size
    key, key_len = _TAGS_KEY, len(_TAGS_KEY)
    gappy = False
    pos = 0
    while pos + 8 <= n:
        if pos + head_size > n:
            return None
        total, magic, queue_offset, sys_flag, body_len = unpack(buf, pos)
        end = pos + total
        p = pos + head_size + body_len
        if magic != MESSAGE_MAGIC_CODE or sys_flag & _NOT_PLAIN or total <= 0 or end > n or body_len < 0 or p >= end:
            return None
        q = p + 1 + buf[p]
        if buf[p] > 127 or q + 2 > end or buf[q] >= 0x80 or q + 2 + (buf[q] << 8 | buf[q + 1]) != end:
            return None
        if tags is not None:
            # the TAGS value: after "TAGS\x01" at the start of the properties or of a pair
            i = q + 2
            while True:
                i = buf.find(key, i, end)
                if i < 0 or i == q + 2 or buf[i - 1] == 2:
                    break
                i += 1
            tag = None
            if i >= 0:
                j = buf.find(b"\x02", i + key_len, end)
                tag = buf[i + key_len : j if j >= 0 else end]
            if tag not in tags:
                gappy = True
                pos = end
                continue
        add_offset(queue_offset)
        add_size(body_len)
        pos = end
    return offsets, sizes, gappy


# --- messages handed to the store ----------------------------------------------
@dataclass(slots=True, eq=False)
class MessageExtBrokerInner:
    """A message as the broker hands it to the store (before stamping)."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    # Cached encoded form of properties; None means "encode from the dict".
    properties_string: str | None = None
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    # Empty: the store stamps its own address.
    store_host: bytes = b""
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    def properties_bytes(self) -> bytes:
        s = self.properties_string
        if s is None:
            s = self.properties_string = properties_to_string(self.properties)
        return s.encode("utf-8")

    def put_property(self, name: str, value: str) -> None:
        self.properties[name] = value
        self.properties_string = None

    def remove_property(self, name: str) -> None:
        if self.properties.pop(name, None) is not None:
            self.properties_string = None

    @property
    def delay_time_level(self) -> int:
        v = self.properties.get(MessageConst.DELAY_TIME_LEVEL)
        if not v:
            return 0
        try:
            return int(v)
        except ValueError:
            return 0

    @property
    def wait_store_msg_ok(self) -> bool:
        # A missing WAIT property reads as true (spec 2.4).
        return self.properties.get(MessageConst.WAIT_STORE_MSG_OK, "true") != "false"


class BatchItem(NamedTuple):
    flag: int
    body: bytes
    properties: str


@dataclass(slots=True, eq=False)
class MessageExtBatch:
    """A SEND_BATCH_MESSAGE: one topic/queue, many inner messages."""

    topic: str
    items: list[BatchItem]
    queue_id: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    store_host: bytes = b""
    # Batch-level properties appended to every inner message's properties.
    properties: dict[str, str] = field(default_factory=dict)


# --- batch body codec (SEND_BATCH_MESSAGE, spec 2.4) ----------------------------
_BATCH_HEAD = struct.Struct(">iiiii")


def encode_batch(items: Iterable[BatchItem | tuple[int, bytes, str]]) -> bytes:
    """MessageDecoder.encodeMessages: per message size|0|0|flag|bodylen|body|proplen|props."""
    parts: list[bytes] = []
    for flag, body, props in items:
        p = props.encode("utf-8")
        if len(p) > 32767:
            raise ProtocolError(f"batch message properties are {len(p)} bytes; at most 32767")
        size = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(p)
        parts.append(_BATCH_HEAD.pack(size, 0, 0, flag, len(body)))
        parts.append(body)
        parts.append(_SHORT.pack(len(p)))
        parts.append(p)
    return b"".join(parts)


def decode_batch(buf: bytes | memoryview) -> list[BatchItem]:
    out: list[BatchItem] = []
    pos = 0
    n = len(buf)
    try:
        while pos < n:
            size, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(buf, pos)
            if size < 22 or pos + size > n:
                raise ProtocolError(f"batch message at {pos} declares {size} bytes, {n - pos} available")
            b0 = pos + 20
            if body_len < 0 or b0 + body_len + 2 > pos + size:
                raise ProtocolError(f"batch message at {pos}: body length {body_len} exceeds it")
            body = bytes(buf[b0 : b0 + body_len])
            plen = _SHORT.unpack_from(buf, b0 + body_len)[0]
            p0 = b0 + body_len + 2
            if plen < 0 or p0 + plen != pos + size:
                raise ProtocolError(f"batch message at {pos}: size {size} does not match its fields")
            props = bytes(buf[p0 : p0 + plen]).decode("utf-8")
            out.append(BatchItem(flag, body, props))
            pos += size
    except struct.error:
        raise ProtocolError(f"truncated batch message at {pos}") from None
    except UnicodeDecodeError:
        raise ProtocolError(f"batch message at {pos}: properties are not UTF-8") from None
    return out
