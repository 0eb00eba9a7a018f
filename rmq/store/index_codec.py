"""IndexFile layout and key hashing, pure (spec 4.3): no files, no mappings.

The store's IndexFile (rmq/store/index.py) and the Spark rebuild
(spark/rebuild_consume_queue.py) both write entries through `put_hashes`, so an index
built either way has the same bytes.
"""

from __future__ import annotations

import datetime as _dt
import mmap
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from rmq.protocol.message import java_hash

if TYPE_CHECKING:
    from typing_extensions import Buffer

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_SIZE = 20
INVALID_INDEX = 0
INT_MAX = 0x7FFFFFFF
FILE_NAME_LENGTH = 17  # yyyyMMddHHmmssSSS

# beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount, indexCount
INDEX_HEADER = struct.Struct(">qqqqii")
# keyHash, phyOffset, timeDiff (seconds), prevIndex
INDEX_ENTRY = struct.Struct(">iqii")
SLOT = struct.Struct(">i")
ENTRY_DTYPE = np.dtype([("key_hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")])
assert ENTRY_DTYPE.itemsize == INDEX_SIZE


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: abs(hashCode), with Integer.MIN_VALUE -> 0."""
    h = java_hash(key)
    if h < 0:
        h = -h
        # Java's Math.abs(Integer.MIN_VALUE) stays negative and RocketMQ maps it to 0.
        if h > INT_MAX:
            h = 0
    return h


def _pow31_table(n: int) -> np.ndarray:
    """31**k mod 2**32 for k in 0..n-1 (uint32 products wrap, which is the modulus)."""
    t = np.full(n, 31, dtype=np.uint32)
    t[0] = 1
    return np.cumprod(t, dtype=np.uint32)


_POW31 = _pow31_table(1024)
_POW31.flags.writeable = False


def index_key_hashes(keys: Sequence[str]) -> np.ndarray:
    """index_key_hash of every key, computed in one pass over all their characters.

    String.hashCode is sum(c[i] * 31**(len-1-i)) mod 2**32 over UTF-16 code units, so
    each character gets its weight from a table and one segmented sum per key finishes
    the job. Returns int64 values in [0, 2**31).
    """
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    joined = "".join(keys)
    if joined.isascii():
        units = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
        lens = np.fromiter(map(len, keys), dtype=np.int64, count=n)
    else:
        units = np.frombuffer(joined.encode("utf-16-le"), dtype="<u2")
        # Characters outside the BMP are two code units, as in Java.
        lens = np.fromiter((len(k.encode("utf-16-le")) >> 1 for k in keys), dtype=np.int64, count=n)
    total = units.shape[0]
    ends = np.cumsum(lens)
    starts = ends - lens
    max_len = int(lens.max())
    table = _POW31 if max_len <= _POW31.shape[0] else _pow31_table(max_len)
    exponent = np.repeat(ends - 1, lens) - np.arange(total, dtype=np.int64)
    # A zero sentinel keeps every start index valid for reduceat, even that of an
    # empty last key; reduceat yields the start element for an empty segment, so
    # empty keys are zeroed afterwards.
    weighted = np.empty(total + 1, dtype=np.uint32)
    np.multiply(units, table[exponent], out=weighted[:total], dtype=np.uint32)
    weighted[total] = 0
    sums = np.add.reduceat(weighted, starts, dtype=np.uint32)
    if lens.min() == 0:
        sums[lens == 0] = 0
    signed = sums.view(np.int32).astype(np.int64)
    h = np.abs(signed)
    h[h > INT_MAX] = 0
    return h


def time_diff(store_timestamp: int, begin_timestamp: int) -> int:
    """Seconds since the file's begin timestamp, clamped as IndexFile.putKey does."""
    if begin_timestamp <= 0:
        return 0
    d = (store_timestamp - begin_timestamp) // 1000
    # Java truncates toward zero, Python floors; both land at or below 0 for a negative
    # difference and that clamps to 0, so the results agree.
    if d > INT_MAX:
        return INT_MAX
    if d < 0:
        return 0
    return d


@dataclass
class IndexHeader:
    """The 40-byte header's fields (IndexFile keeps the same attribute names)."""

    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1


class HeaderFields(Protocol):
    """An IndexHeader, or an IndexFile (which keeps the same attribute names)."""

    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int


def write_header(f: HeaderFields, buf: Buffer) -> None:
    """Pack f's header fields (an IndexHeader or an IndexFile) at the start of buf."""
    INDEX_HEADER.pack_into(
        buf,
        0,
        f.begin_timestamp,
        f.end_timestamp,
        f.begin_phy_offset,
        f.end_phy_offset,
        f.hash_slot_count,
        f.index_count,
    )


def put_hashes(
    f: HeaderFields,
    mm: mmap.mmap | bytearray,
    hash_slot_num: int,
    index_num: int,
    key_hashes: np.ndarray,
    phy_offsets: np.ndarray,
    store_timestamps: np.ndarray,
) -> int:
    """Append entries for a run of keys to the index file in mm (writable buffer of the
    whole file), in order, as IndexFile.put_hash would one by one, and update f's header
    fields (not the header bytes: see write_header).

    Writes as many as fit and returns how many that was. Arrays are int64.
    """
    n = f.index_count
    m = min(int(key_hashes.shape[0]), index_num - n)
    if m <= 0:
        return 0
    kh = key_hashes[:m]
    phy = phy_offsets[:m]
    ts = store_timestamps[:m]
    entry_no = np.arange(n, n + m, dtype=np.int64)
    slots = kh % hash_slot_num
    # Views into the mapping live only inside this call: an exported buffer would
    # stop MappedFile.close() from unmapping.
    table = np.frombuffer(mm, dtype=">i4", count=hash_slot_num, offset=INDEX_HEADER_SIZE)
    try:
        prev = table[slots].astype(np.int64)
        prev[(prev <= INVALID_INDEX) | (prev > entry_no)] = INVALID_INDEX
        if m > 1:
            # Keys of one slot within the run chain to each other in run order:
            # a stable sort groups them, each links to its predecessor in the group,
            # and only the group's last entry number lands in the slot.
            order = np.argsort(slots, kind="stable")
            sorted_slots = slots[order]
            sorted_entry = entry_no[order]
            sorted_prev = prev[order]
            same = sorted_slots[1:] == sorted_slots[:-1]
            tail = sorted_prev[1:]
            tail[same] = sorted_entry[:-1][same]
            prev[order] = sorted_prev
            last = np.empty(m, dtype=bool)
            np.logical_not(same, out=last[:-1])
            last[-1] = True
            table[sorted_slots[last]] = sorted_entry[last]
        else:
            table[slots] = entry_no
    finally:
        del table

    td = np.empty(m, dtype=np.int64)
    begin = f.begin_timestamp
    first = 0
    if n <= 1:
        td[0] = time_diff(int(ts[0]), begin)
        begin = f.begin_timestamp = int(ts[0])
        f.begin_phy_offset = int(phy[0])
        first = 1
    if first < m:
        if begin <= 0:
            td[first:] = 0
        else:
            np.clip((ts[first:] - begin) // 1000, 0, INT_MAX, out=td[first:])

    base = (INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE) + n * INDEX_SIZE
    out = np.frombuffer(mm, dtype=ENTRY_DTYPE, count=m, offset=base)
    try:
        out["key_hash"] = kh
        out["phy_offset"] = phy
        out["time_diff"] = td
        out["prev_index"] = prev
    finally:
        del out

    f.hash_slot_count += int(np.count_nonzero(prev == INVALID_INDEX))
    f.index_count = n + m
    f.end_phy_offset = int(phy[m - 1])
    f.end_timestamp = int(ts[m - 1])
    return m


def format_file_name(t: _dt.datetime) -> str:
    """yyyyMMddHHmmssSSS (local time), the name of an index file created at t."""
    return t.strftime("%Y%m%d%H%M%S") + f"{t.microsecond // 1000:03d}"
