"""DispatchRequest and the pure record check that produces it (checkMessageAndReturnSize).

Pure (no files, no loop): recovery, the ReputMessageService and the Spark rebuild all
call check_message_and_return_size, so a ConsumeQueue unit comes out the same everywhere.
It lives in the protocol layer because the Spark job ships it to executors; the store
reaches it through rmq.protocol.record.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rmq.protocol.errors import ProtocolError
from rmq.protocol.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    RECORD_FIXED_LENGTH,
    SCHEDULE_TOPIC,
    SysFlag,
    decode_record,
    java_hash,
)

if TYPE_CHECKING:
    import mmap

    ReadBuffer = bytes | bytearray | memoryview | mmap.mmap


@dataclass(slots=True)
class DispatchRequest:
    """What a dispatcher needs of one record (RocketMQ's DispatchRequest)."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int = 0


_HEAD48 = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_H = struct.Struct(">h")

RECORD_BLANK = 0
RECORD_INVALID = -1


def compute_deliver_timestamp(level: int, store_timestamp: int, delay_levels_ms: Sequence[int]) -> int:
    """Delivery time of a SCHEDULE_TOPIC_XXXX unit (the tag code of its CQ unit)."""
    if 1 <= level <= len(delay_levels_ms):
        return store_timestamp + delay_levels_ms[level - 1]
    return store_timestamp + 1000


def property_value(props: str, name: str, end: int | None = None) -> str | None:
    """string_to_properties(props).get(name), without building the dict.

    name must not contain \x01 or \x02. The parse keeps, per segment (split on \x02),
    name = text before the first \x01 and value = everything after it, only when both
    are non-empty; the last such segment wins. So: the last occurrence of name+\x01
    that starts a segment and has a non-empty value. (Occurrences of name+\x01 cannot
    overlap each other: \x01 is only its last character.) With end, only occurrences
    that start before end count.
    """
    key = name + "\x01"
    klen = len(key)
    if end is None:
        end = len(props)
    while True:
        i = props.rfind(key, 0, end + klen - 1)
        if i < 0:
            return None
        if i == 0 or props[i - 1] == "\x02":
            j = props.find("\x02", i + klen)
            if j < 0:
                j = len(props)
            if j > i + klen:
                return props[i + klen : j]
        end = i


def dispatch_properties(props: str) -> tuple[str | None, str | None, str | None]:
    """(TAGS, KEYS, UNIQ_KEY), each as property_value gives it.

    The put path calls this for every message, so the common case is unrolled: the
    last occurrence of the name is the one (it starts a segment and has a value);
    otherwise property_value looks at the earlier ones.
    """
    n = len(props)
    i = props.rfind("TAGS\x01")
    tags = None
    if i >= 0:
        j = props.find("\x02", i + 5)
        if j < 0:
            j = n
        if (i == 0 or props[i - 1] == "\x02") and j > i + 5:
            tags = props[i + 5 : j]
        else:
            tags = property_value(props, "TAGS", i)
    i = props.rfind("KEYS\x01")
    keys = None
    if i >= 0:
        j = props.find("\x02", i + 5)
        if j < 0:
            j = n
        if (i == 0 or props[i - 1] == "\x02") and j > i + 5:
            keys = props[i + 5 : j]
        else:
            keys = property_value(props, "KEYS", i)
    i = props.rfind("UNIQ_KEY\x01")
    uniq = None
    if i >= 0:
        j = props.find("\x02", i + 9)
        if j < 0:
            j = n
        if (i == 0 or props[i - 1] == "\x02") and j > i + 9:
            uniq = props[i + 9 : j]
        else:
            uniq = property_value(props, "UNIQ_KEY", i)
    return tags, keys, uniq


def tags_code_of(
    topic: str,
    tags: str | None,
    delay: str | None,
    store_timestamp: int,
    delay_levels_ms: Sequence[int],
    tag_cache: dict[str, int] | None = None,
) -> int:
    """The ConsumeQueue tag code of a record (DispatchRequest.tags_code): the Java hash
    of TAGS, or for SCHEDULE_TOPIC_XXXX with a DELAY level the delivery time."""
    tags_code = 0
    if tags:
        if tag_cache is None:
            tags_code = java_hash(tags)
        else:
            cached = tag_cache.get(tags)
            if cached is not None:
                tags_code = cached
            else:
                if len(tag_cache) > 65536:
                    tag_cache.clear()
                tags_code = tag_cache[tags] = java_hash(tags)
    if topic == SCHEDULE_TOPIC and delay is not None:
        try:
            level = int(delay)
        except ValueError:
            level = 0
        if level > len(delay_levels_ms):
            level = len(delay_levels_ms)
        if level > 0:
            tags_code = compute_deliver_timestamp(level, store_timestamp, delay_levels_ms)
    return tags_code


def check_message_and_return_size(
    buf: ReadBuffer, pos: int, check_crc: bool, delay_levels_ms: Sequence[int], tag_cache: dict[str, int] | None = None
) -> tuple[int, DispatchRequest | None]:
    """Check the record at pos.

    Returns (size > 0, request) for a valid record, (0, None) for the BLANK end-of-file
    marker, (-1, None) for anything invalid (bad magic, CRC, truncated, garbage) and
    (declared size, None) when the fields do not add up to TOTALSIZE (RocketMQ's
    "[BUG]read total count not equals msg total size").
    """
    try:
        # A BLANK may sit in the last 8..47 bytes of a file: look at the magic
        # before reading the 48-byte head, or it reads as invalid.
        if _I.unpack_from(buf, pos + 4)[0] == BLANK_MAGIC_CODE:
            return RECORD_BLANK, None
        (total, magic, crc, queue_id, _flag, queue_offset, phys, sys_flag, _born) = _HEAD48.unpack_from(buf, pos)
        if magic != MESSAGE_MAGIC_CODE:
            if magic == BLANK_MAGIC_CODE:
                return RECORD_BLANK, None
            if magic != MESSAGE_MAGIC_CODE_V2:
                return RECORD_INVALID, None
        if total <= 0:
            return RECORD_INVALID, None
        p = pos + 48 + (20 if sys_flag & SysFlag.BORNHOST_V6 else 8)
        store_ts = _Q.unpack_from(buf, p)[0]
        p += 8 + (20 if sys_flag & SysFlag.STOREHOSTADDRESS_V6 else 8) + 4
        prepared = _Q.unpack_from(buf, p)[0]
        body_len = _I.unpack_from(buf, p + 8)[0]
        p += 12
        if body_len < 0 or body_len > total:
            return RECORD_INVALID, None
        if check_crc and (zlib.crc32(buf[p : p + body_len]) & 0x7FFFFFFF) != crc:
            return RECORD_INVALID, None
        p += body_len
        if magic == MESSAGE_MAGIC_CODE:
            topic_len = buf[p]
            p += 1
        else:
            topic_len = _H.unpack_from(buf, p)[0]
            p += 2
        topic = bytes(buf[p : p + topic_len]).decode("utf-8")
        p += topic_len
        props_len = _H.unpack_from(buf, p)[0]
        p += 2
        bh = 20 if sys_flag & SysFlag.BORNHOST_V6 else 8
        sh = 20 if sys_flag & SysFlag.STOREHOSTADDRESS_V6 else 8
        read_len = (
            RECORD_FIXED_LENGTH
            + bh
            + sh
            + body_len
            + topic_len
            + max(props_len, 0)
            + (1 if magic != MESSAGE_MAGIC_CODE else 0)
        )
        if read_len != total:
            return total, None
        tags_code = 0
        keys = uniq = None
        if props_len > 0:
            props = bytes(buf[p : p + props_len]).decode("utf-8")
            keys = property_value(props, "KEYS")
            uniq = property_value(props, "UNIQ_KEY")
            tags_code = tags_code_of(
                topic,
                property_value(props, "TAGS"),
                property_value(props, "DELAY") if topic == SCHEDULE_TOPIC else None,
                store_ts,
                delay_levels_ms,
                tag_cache,
            )
        return total, DispatchRequest(
            topic, queue_id, phys, total, tags_code, store_ts, queue_offset, keys, uniq, sys_flag, prepared
        )
    except (struct.error, IndexError, UnicodeDecodeError, ValueError):
        return RECORD_INVALID, None


def diagnose_record(buf: ReadBuffer, pos: int, check_crc: bool) -> str:
    """Why the record at pos is not valid (for the recovery log line; not a hot path)."""
    try:
        total, magic = struct.unpack_from(">ii", buf, pos)
    except struct.error:
        return "fewer than 8 bytes left"
    if total == 0 and magic == 0:
        return "end of data (zeros)"
    try:
        decode_record(memoryview(buf), pos, check_crc=check_crc)
    except ProtocolError as e:
        return str(e)
    return "record decodes but its check failed"
