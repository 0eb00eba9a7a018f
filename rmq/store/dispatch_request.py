"""DispatchRequest and the pure record check that produces it (checkMessageAndReturnSize).

Pure (no files, no loop): recovery, the ReputMessageService and the Spark rebuild all
call check_message_and_return_size, so a ConsumeQueue unit comes out the same everywhere.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Sequence

from rmq.protocol.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    SCHEDULE_TOPIC,
    SysFlag,
    decode_record,
    java_hash,
    string_to_properties,
)
from rmq.protocol.errors import ProtocolError


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


_HEAD48 = struct.Struct(">iiiiiqqiq")   # TOTALSIZE .. BORNTIMESTAMP
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_H = struct.Struct(">h")
_FIXED = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 4 + 8 + 4 + 1 + 2

RECORD_BLANK = 0
RECORD_INVALID = -1


def compute_deliver_timestamp(level: int, store_timestamp: int,
                              delay_levels_ms: Sequence[int]) -> int:
    """Delivery time of a SCHEDULE_TOPIC_XXXX unit (the tag code of its CQ unit)."""
    if 1 <= level <= len(delay_levels_ms):
        return store_timestamp + delay_levels_ms[level - 1]
    return store_timestamp + 1000


def check_message_and_return_size(
        buf, pos: int, check_crc: bool, delay_levels_ms: Sequence[int],
        tag_cache: dict[str, int] | None = None,
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
        (total, magic, crc, queue_id, _flag, queue_offset, phys, sys_flag,
         _born) = _HEAD48.unpack_from(buf, pos)
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
        if check_crc and (zlib.crc32(buf[p:p + body_len]) & 0x7FFFFFFF) != crc:
            return RECORD_INVALID, None
        p += body_len
        if magic == MESSAGE_MAGIC_CODE:
            topic_len = buf[p]
            p += 1
        else:
            topic_len = _H.unpack_from(buf, p)[0]
            p += 2
        topic = bytes(buf[p:p + topic_len]).decode("utf-8")
        p += topic_len
        props_len = _H.unpack_from(buf, p)[0]
        p += 2
        bh = 20 if sys_flag & SysFlag.BORNHOST_V6 else 8
        sh = 20 if sys_flag & SysFlag.STOREHOSTADDRESS_V6 else 8
        read_len = (_FIXED + bh + sh + body_len + topic_len + max(props_len, 0)
                    + (1 if magic != MESSAGE_MAGIC_CODE else 0))
        if read_len != total:
            return total, None
        tags_code = 0
        keys = uniq = None
        if props_len > 0:
            props = string_to_properties(bytes(buf[p:p + props_len]).decode("utf-8"))
            keys = props.get("KEYS")
            uniq = props.get("UNIQ_KEY")
            tags = props.get("TAGS")
            if tags:
                if tag_cache is None:
                    tags_code = java_hash(tags)
                else:
                    tags_code = tag_cache.get(tags)
                    if tags_code is None:
                        if len(tag_cache) > 65536:
                            tag_cache.clear()
                        tags_code = tag_cache[tags] = java_hash(tags)
            if topic == SCHEDULE_TOPIC:
                t = props.get("DELAY")
                if t is not None:
                    try:
                        level = int(t)
                    except ValueError:
                        level = 0
                    if level > len(delay_levels_ms):
                        level = len(delay_levels_ms)
                    if level > 0:
                        tags_code = compute_deliver_timestamp(level, store_ts, delay_levels_ms)
        return total, DispatchRequest(topic, queue_id, phys, total, tags_code, store_ts,
                                      queue_offset, keys, uniq, sys_flag, prepared)
    except (struct.error, IndexError, UnicodeDecodeError, ValueError):
        return RECORD_INVALID, None


def diagnose_record(buf, pos: int, check_crc: bool) -> str:
    """Why the record at pos is not valid (for the recovery log line; not a hot path)."""
    try:
        total, magic = struct.unpack_from(">ii", buf, pos)
    except struct.error:
        return "fewer than 8 bytes left"
    if total == 0 and magic == 0:
        return "end of data (zeros)"
    try:
        decode_record(buf, pos, check_crc=check_crc)
    except ProtocolError as e:
        return str(e)
    return "record decodes but its check failed"
