"""One task's work: a byte range of one CommitLog file -> ConsumeQueue units (+ index keys).

Runs on executors; pure apart from mapping the file (`scan_local_split`). The range
[lo, hi) owns every record that *starts* in it, so a record crossing hi belongs to
this range and the next range starts at its first record boundary, which it finds and
proves itself (`find_first_boundary`): magic code at +4, PHYSICALOFFSET at +28 equal to
the record's own absolute offset, a TOTALSIZE that fits, fields that add up, and the
body CRC. The driver then checks the chain (each range's first boundary is where the
previous range's last record ends: spark/chain.py), so no boundary is taken on faith.

Records are classified exactly as the broker's own dispatch does
(rmq.protocol.record.check_message_and_return_size), plus one check the broker
does not make: PHYSICALOFFSET must equal the record's position. The common case is
vectorised: one tight loop walks TOTALSIZE from record to record, numpy reads every
fixed field of every record at once and checks that the fields add up, and a short
per-record loop reads only topic and properties (bodies are never decoded). Anything
unusual (message version 2, negative lengths, undecodable text, a field past the
record) goes through check_message_and_return_size itself, so the vector path can only
be faster, never different (tests/spark/test_scan.py fuzzes the two against each other).
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rmq.protocol.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    POS_BORNHOST,
    POS_PHYSICALOFFSET,
    POS_SYSFLAG,
    RECORD_FIXED_LENGTH,
    SCHEDULE_TOPIC,
    SysFlag,
)
from rmq.protocol.record import (
    check_message_and_return_size,
    diagnose_record,
    dispatch_properties,
    property_value,
    tags_code_of,
)
from rmq.store.index_codec import index_key_hashes

# A CommitLog range: an mmap of a local file, or the bytes a Hadoop read returned.
RecordBuffer = bytes | mmap.mmap

_II = struct.Struct(">ii")
_Q = struct.Struct(">q")
_MAGIC_V1 = struct.pack(">i", MESSAGE_MAGIC_CODE)
_MAGIC_V2 = struct.pack(">i", MESSAGE_MAGIC_CODE_V2)
_MAGIC_BLANK = struct.pack(">i", BLANK_MAGIC_CODE)
_TRAN_MASK = SysFlag.TRANSACTION_ROLLBACK_TYPE  # both transaction bits (getTransactionValue)
_MADV_POPULATE_READ = 22  # Linux >= 5.14; older kernels say EINVAL
_ROLLBACK = SysFlag.TRANSACTION_ROLLBACK_TYPE
_COMMIT = SysFlag.TRANSACTION_COMMIT_TYPE

# One ConsumeQueue unit plus its queue offset, native byte order for sorting.
UNIT_ROW = np.dtype([("qoff", "<i8"), ("phy", "<i8"), ("size", "<i4"), ("tags", "<i8")])


@dataclass(frozen=True)
class ScanOptions:
    """What every task needs to know besides its range."""

    delay_levels_ms: tuple[int, ...]
    topics: frozenset[str] | None = None  # None: every topic
    index: bool = False  # also collect index keys


@dataclass(frozen=True)
class Split:
    """A byte range [lo, hi) of one CommitLog file (file positions, not absolute)."""

    split_id: int
    file_idx: int
    path: str
    file_base: int  # absolute CommitLog offset of the file's first byte (its name)
    file_len: int  # bytes in the file (the last file may be shorter)
    file_size: int  # mappedFileSizeCommitLog: a BLANK says "file_size - pos left"
    lo: int
    hi: int
    crc: bool  # check every record's body CRC (RocketMQ: checkCRCOnRecover)
    recovery: bool  # a record whose fields do not add up ends the data (else skipped)


@dataclass
class Stop:
    """Why a walk ended before its range did."""

    kind: str  # "blank" (end of file), "end" (no more data), "invalid", "spill"
    pos: int  # file position
    reason: str = ""


@dataclass
class ScanResult:
    """What a task found. The payload (queues, index arrays) stays on the executors;
    the driver collects `summary()` only."""

    seg_id: int
    file_idx: int
    lo: int
    hi: int
    first: int | None = None  # first proven record boundary in [lo, hi)
    next: int | None = None  # position after the last record owned (no stop)
    stop: Stop | None = None
    records: int = 0  # valid records (dispatched or not)
    units: int = 0  # ConsumeQueue units
    keys: int = 0  # index keys
    skipped: list[tuple[int, int, str]] = field(default_factory=list)
    queues: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)
    index: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # hash, phy, store ts
    queue_units: dict[tuple[str, int], int] = field(default_factory=dict)  # summary only

    def summary(self) -> ScanResult:
        """The same result without its payload (queue sizes stay, as queue_units)."""
        return ScanResult(
            self.seg_id,
            self.file_idx,
            self.lo,
            self.hi,
            self.first,
            self.next,
            self.stop,
            self.records,
            self.units,
            self.keys,
            self.skipped,
            {},
            None,
            {k: len(v) for k, v in self.queues.items()},
        )


# ----------------------------------------------------------------------------- boundary
def _proves_record(
    buf: RecordBuffer, off: int, p: int, end: int, split: Split, levels: Sequence[int], at_file_end: bool
) -> bool:
    """Is there a record at file position p? (magic was found at p + 4)"""
    rel = p - off
    if p + POS_PHYSICALOFFSET + 8 > end:
        return False
    total = _II.unpack_from(buf, rel)[0]
    if total <= 0 or _Q.unpack_from(buf, rel + POS_PHYSICALOFFSET)[0] != split.file_base + p:
        return False
    if p + total > end:
        # Only a buffer that stops before the file does (a Hadoop split) can cut a
        # record; the driver proves this one through the chain.
        return not at_file_end
    size, req = check_message_and_return_size(buf, rel, True, levels)
    return req is not None and size == total


def find_first_boundary(
    buf: RecordBuffer, off: int, split: Split, levels: Sequence[int], at_file_end: bool
) -> int | None:
    """The first position in [lo, hi) where a record (or the BLANK) provably starts."""
    end = off + len(buf)
    lo, hi = split.lo, split.hi
    # the magic of a record starting at p < hi occupies [p + 4, p + 8)
    stop_at = min(hi + 7, end)
    best: int | None = None

    def record(p: int) -> bool:
        return _proves_record(buf, off, p, end, split, levels, at_file_end)

    def blank(p: int) -> bool:
        # A BLANK's size field is what was left of the file when it was written.
        return _II.unpack_from(buf, p - off)[0] == split.file_size - p

    for magic, proves in ((_MAGIC_V1, record), (_MAGIC_V2, record), (_MAGIC_BLANK, blank)):
        s = lo + 4
        while True:
            limit = stop_at if best is None else min(stop_at, best + 7)
            j = buf.find(magic, s - off, limit - off) if s < limit else -1
            if j < 0:
                break
            p = j + off - 4
            if proves(p):
                best = p
                break
            s = p + 5
    return best


# ----------------------------------------------------------------------------- walk
def _walk(buf: RecordBuffer, off: int, pos: int, hi: int, at_file_end: bool) -> tuple[list[int], int, Stop | None]:
    """Follow TOTALSIZE from pos while records start before hi.

    Returns (positions of records with a message magic, position reached, stop). Only
    magic, TOTALSIZE > 0 and "fits in the file" are checked here; the rest comes later.
    A stop may lie at or after hi (found by the peek at the next record).
    """
    end = off + len(buf)
    unpack = _II.unpack_from
    out: list[int] = []
    append = out.append
    v1, v2, blank = MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, BLANK_MAGIC_CODE
    while pos < hi:
        if pos + 8 > end:
            if at_file_end:
                return out, pos, Stop("end", pos, f"{end - pos} bytes left in the file")
            return out, pos, Stop("spill", pos)
        total, magic = unpack(buf, pos - off)
        if magic != v1 and magic != v2:
            if magic == blank:
                return out, pos, Stop("blank", pos)
            if total == 0 and magic == 0:
                return out, pos, Stop("end", pos, "zeros follow")
            return out, pos, Stop("invalid", pos, f"bad magic code 0x{magic & 0xFFFFFFFF:08X}")
        if total <= 0:
            return out, pos, Stop("invalid", pos, f"TOTALSIZE {total}")
        if pos + total > end:
            if at_file_end:
                return (
                    out,
                    pos,
                    Stop("invalid", pos, f"record declares {total} bytes, {end - pos} left in the file (torn write)"),
                )
            return out, pos, Stop("spill", pos)
        append(pos)
        pos += total
    if pos + 8 <= end:
        # A peek at what follows, for the next range's sake: it cannot prove that data
        # ends here (zeros), so the driver would scan it again to find out.
        total, magic = unpack(buf, pos - off)
        if magic == blank:
            return out, pos, Stop("blank", pos)
        if magic != v1 and magic != v2:
            if total == 0 and magic == 0:
                return out, pos, Stop("end", pos, "zeros follow")
            return out, pos, Stop("invalid", pos, f"bad magic code 0x{magic & 0xFFFFFFFF:08X}")
        if total <= 0:
            return out, pos, Stop("invalid", pos, f"TOTALSIZE {total}")
    return out, pos, None


def _gather(a: np.ndarray, rel: np.ndarray, width: int, dtype: str) -> np.ndarray:
    """The big-endian integer of `width` bytes at each position (clipped to the buffer:
    a read that would leave it is caught by the record checks that follow)."""
    idx = rel[:, None] + np.arange(width, dtype=np.int64)
    np.minimum(idx, a.shape[0] - 1, out=idx)
    return a[idx].view(dtype).reshape(rel.shape[0])


# ----------------------------------------------------------------------------- scan
def scan_buffer(
    buf: RecordBuffer,
    off: int,
    split: Split,
    opts: ScanOptions,
    *,
    at_file_end: bool,
    seg_id: int | None = None,
    forced_start: int | None = None,
) -> ScanResult:
    """Scan split over buf, which holds file positions [off, off + len(buf)).

    at_file_end: buf reaches the end of the file (a record crossing it is torn);
    otherwise a record crossing it is reported as a "spill" for the driver to read.
    forced_start: start the walk here instead of finding the first boundary (the
    driver knows it from the previous range).
    """
    levels = opts.delay_levels_ms
    res = ScanResult(split.split_id if seg_id is None else seg_id, split.file_idx, split.lo, split.hi)
    first: int | None
    if forced_start is not None:
        first = forced_start
    elif split.lo == 0:
        first = 0  # a file starts with a record (or the BLANK, or no data)
    else:
        first = find_first_boundary(buf, off, split, levels, at_file_end)
    res.first = first
    if first is None:
        return res
    positions, reached, stop = _walk(buf, off, first, split.hi, at_file_end)
    if positions:
        _cut, stop2 = _classify(buf, off, split, opts, positions, res)
        if stop2 is not None:
            stop = stop2
    if stop is None:
        res.next = reached
    res.stop = stop
    return res


def _classify(
    buf: RecordBuffer, off: int, split: Split, opts: ScanOptions, positions: list[int], res: ScanResult
) -> tuple[int, Stop | None]:
    """Check every walked record, fill res with units (and index keys); returns how
    many records were taken and the stop at the first one that ends the data."""
    n = len(positions)
    a = np.frombuffer(buf, dtype=np.uint8)
    mv = memoryview(buf)
    try:
        pos = np.array(positions, dtype=np.int64)
        rel = pos - off
        total = _gather(a, rel, 4, ">i4").astype(np.int64)
        magic = _gather(a, rel + 4, 4, ">i4")
        crc = _gather(a, rel + 8, 4, ">i4")
        qid = _gather(a, rel + 12, 4, ">i4")
        qoff = _gather(a, rel + 20, 8, ">i8")
        phys = _gather(a, rel + POS_PHYSICALOFFSET, 8, ">i8")
        sysflag = _gather(a, rel + POS_SYSFLAG, 4, ">i4")
        bh = np.where(sysflag & SysFlag.BORNHOST_V6, 20, 8)
        sh = np.where(sysflag & SysFlag.STOREHOSTADDRESS_V6, 20, 8)
        ts_rel = rel + POS_BORNHOST + bh
        store_ts = _gather(a, ts_rel, 8, ">i8")
        bl_rel = ts_rel + 8 + sh + 4 + 8
        body_len = _gather(a, bl_rel, 4, ">i4").astype(np.int64)
        tl_rel = bl_rel + 4 + body_len
        rec_end = rel + total
        tl_ok = (body_len >= 0) & (tl_rel < rec_end)
        topic_len = a[np.where(tl_ok, tl_rel, rel)].astype(np.int64)
        pl_rel = tl_rel + 1 + topic_len
        pl_ok = tl_ok & (pl_rel + 2 <= rec_end)
        props_len = _gather(a, np.where(pl_ok, pl_rel, rel), 2, ">i2").astype(np.int64)
        common = (
            pl_ok
            & (magic == MESSAGE_MAGIC_CODE)
            & (props_len >= 0)
            & (phys == split.file_base + pos)
            & (RECORD_FIXED_LENGTH + bh + sh + body_len + topic_len + props_len == total)
        )
        # Python lists index faster than numpy arrays in the loop below.
        common_l = common.tolist()
        body_start = (bl_rel + 4).tolist()
        body_len_l = body_len.tolist()
        crc_l = crc.tolist()
        t_start = (tl_rel + 1).tolist()
        t_len = topic_len.tolist()
        p_start = (pl_rel + 2).tolist()
        p_len = props_len.tolist()
        ts_l = store_ts.tolist()
        tran_l = (sysflag & _TRAN_MASK).tolist()
        qid_l = qid.tolist()
        qoff_l = qoff.tolist()
        total_l = total.tolist()

        levels = opts.delay_levels_ms
        want = opts.topics
        index = opts.index
        check_crc = split.crc
        crc32 = zlib.crc32
        topics: list[str] = []
        topic_ids: dict[str, int] = {}
        topic_of: dict[bytes, int] = {}  # topic bytes -> id (-1: not UTF-8)
        tag_cache: dict[str, int] = {}
        # Per record: topic id, tag code, index keys (Python lists: cheaper per element
        # than numpy in a loop); `take` False: skipped ("fields do not add up").
        tid_l = [0] * n
        tags_l = [0] * n
        keyc_l = [0] * n
        take = np.ones(n, dtype=bool)
        key_strs: list[str] = []
        stop: Stop | None = None
        cut = n
        for i in range(n):
            keys = uniq = None
            if common_l[i]:
                if check_crc:
                    b0 = body_start[i]
                    if crc32(mv[b0 : b0 + body_len_l[i]]) & 0x7FFFFFFF != crc_l[i]:
                        stop = Stop("invalid", positions[i], "body CRC mismatch")
                        cut = i
                        break
                t0 = t_start[i]
                tb = buf[t0 : t0 + t_len[i]]
                tid = topic_of.get(tb)
                if tid is None:
                    tid = topic_of[tb] = _topic_id(tb, topics, topic_ids)
                pl = p_len[i]
                props = ""
                if tid >= 0 and pl > 0:
                    p0 = p_start[i]
                    try:
                        props = buf[p0 : p0 + pl].decode("utf-8")
                    except UnicodeDecodeError:
                        tid = -1
                if tid < 0:
                    # check_message_and_return_size says what an undecodable one is
                    stop = Stop("invalid", positions[i], diagnose_record(buf, positions[i] - off, check_crc))
                    cut = i
                    break
                if props:
                    topic = topics[tid]
                    if index:
                        tags, keys, uniq = dispatch_properties(props)
                    else:
                        tags = _tags(props)
                    if topic == SCHEDULE_TOPIC:
                        tags_l[i] = tags_code_of(
                            topic, tags, property_value(props, "DELAY"), ts_l[i], levels, tag_cache
                        )
                    elif tags:
                        code = tag_cache.get(tags)
                        tags_l[i] = (
                            code if code is not None else tags_code_of(topic, tags, None, ts_l[i], levels, tag_cache)
                        )
            else:
                size, req = check_message_and_return_size(buf, positions[i] - off, check_crc, levels, tag_cache)
                if req is None or size != total_l[i]:
                    if size > 0 and req is None and not split.recovery:
                        # The broker's dispatch logs "[BUG]" and skips it; recovery
                        # (the last files) would cut the CommitLog here instead.
                        res.skipped.append((positions[i], size, "fields do not add up to TOTALSIZE"))
                        take[i] = False
                        continue
                    stop = Stop("invalid", positions[i], diagnose_record(buf, positions[i] - off, check_crc))
                    cut = i
                    break
                if req.commit_log_offset != split.file_base + positions[i]:
                    stop = Stop(
                        "invalid",
                        positions[i],
                        f"PHYSICALOFFSET {req.commit_log_offset} is not the "
                        f"record's offset {split.file_base + positions[i]}",
                    )
                    cut = i
                    break
                tid = topic_ids.get(req.topic)
                if tid is None:
                    tid = topic_ids[req.topic] = len(topics)
                    topics.append(req.topic)
                tags_l[i] = req.tags_code
                keys, uniq = req.keys, req.uniq_key
                qid_l[i], qoff_l[i], ts_l[i] = req.queue_id, req.consume_queue_offset, req.store_timestamp
                tran_l[i] = req.sys_flag & _TRAN_MASK
            tid_l[i] = tid
            if index and tran_l[i] != _ROLLBACK and (want is None or topics[tid] in want):
                before = len(key_strs)
                prefix = topics[tid] + "#"
                if uniq is not None:
                    key_strs.append(prefix + uniq)
                if keys:
                    for k in keys.split(" "):
                        if k:
                            key_strs.append(prefix + k)
                keyc_l[i] = len(key_strs) - before
        taken = take[:cut]
        res.records = int(np.count_nonzero(taken))
        if cut:
            _emit_units(
                res,
                topics,
                np.array(tid_l[:cut], np.int64),
                taken,
                np.array(qid_l[:cut], np.int64),
                np.array(qoff_l[:cut], np.int64),
                split.file_base + pos[:cut],
                total[:cut],
                np.array(tags_l[:cut], np.int64),
                np.array(tran_l[:cut], np.int64),
                want,
            )
        if index:
            counts = np.array(keyc_l[:cut], np.int64)
            ts_arr = np.array(ts_l[:cut], dtype=np.int64)
            res.keys = len(key_strs)
            res.index = (
                index_key_hashes(key_strs),
                np.repeat(split.file_base + pos[:cut], counts),
                np.repeat(ts_arr, counts),
            )
        return cut, stop
    finally:
        mv.release()
        del a


def _topic_id(raw: bytes, topics: list[str], topic_ids: dict[str, int]) -> int:
    """The id of a topic (its bytes as stored), -1 if they are not UTF-8."""
    try:
        topic = raw.decode("utf-8")
    except UnicodeDecodeError:
        return -1
    tid = topic_ids.get(topic)
    if tid is None:
        tid = topic_ids[topic] = len(topics)
        topics.append(topic)
    return tid


def _tags(props: str) -> str | None:
    """property_value(props, "TAGS"), with its usual case first: the last TAGS starts
    a segment and has a value."""
    i = props.rfind("TAGS\x01")
    if i < 0:
        return None
    j = props.find("\x02", i + 5)
    if j < 0:
        j = len(props)
    if j > i + 5 and (i == 0 or props[i - 1] == "\x02"):
        return props[i + 5 : j]
    return property_value(props, "TAGS", i)


def _emit_units(
    res: ScanResult,
    topics: list[str],
    topic_id: np.ndarray,
    taken: np.ndarray,
    qid: np.ndarray,
    qoff: np.ndarray,
    phy: np.ndarray,
    size: np.ndarray,
    tags: np.ndarray,
    tran: np.ndarray,
    want: frozenset[str] | None,
) -> None:
    """Group the dispatched records (NOT or COMMIT transaction type) by queue."""
    mask = taken & ((tran == 0) | (tran == _COMMIT))
    if want is not None:
        wanted = np.array([t in want for t in topics], dtype=bool)
        mask &= wanted[topic_id]
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return
    key = (topic_id[idx].astype(np.int64) << 32) | (qid[idx] & 0xFFFFFFFF)
    order = np.argsort(key, kind="stable")
    idx = idx[order]
    key = key[order]
    rows = np.empty(idx.size, dtype=UNIT_ROW)
    rows["qoff"] = qoff[idx]
    rows["phy"] = phy[idx]
    rows["size"] = size[idx]
    rows["tags"] = tags[idx]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    ends = np.r_[starts[1:], idx.size]
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        k = int(key[s])
        q = k & 0xFFFFFFFF
        if q >= 0x80000000:
            q -= 0x100000000
        res.queues[(topics[k >> 32], q)] = rows[s:e].copy()
    res.units = int(idx.size)


# ----------------------------------------------------------------------------- local files
def scan_local_split(
    split: Split, opts: ScanOptions, seg_id: int | None = None, forced_start: int | None = None
) -> ScanResult:
    """Scan a split of a file on a local (or shared POSIX) path through a read-only mmap."""
    if split.file_len == 0:
        return ScanResult(
            split.split_id if seg_id is None else seg_id,
            split.file_idx,
            split.lo,
            split.hi,
            first=0,
            stop=Stop("end", 0, "empty file"),
        )
    with open(split.path, "rb") as f:
        mm = mmap.mmap(f.fileno(), split.file_len, access=mmap.ACCESS_READ)
    try:
        start = split.lo - split.lo % mmap.PAGESIZE
        end = min(split.hi + (1 << 20), split.file_len)
        try:
            # map the range's pages now, in one call, rather than fault them one by one
            mm.madvise(_MADV_POPULATE_READ, start, end - start)
        except (OSError, AttributeError):
            pass
        return scan_buffer(mm, 0, split, opts, at_file_end=True, seg_id=seg_id, forced_start=forced_start)
    finally:
        mm.close()
