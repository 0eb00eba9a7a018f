"""On-disk format, checked by an independent reader (spec 3.1-3.7, 4.0, 4.1.1, 4.3, 4.4, 7.1, 7.3).

The reader below is written from /work/shared/reference/rocketmq-4x-spec.md alone: every field is
read with ``struct`` at the offsets of the spec's tables, CRCs, lengths, tag codes and index hashes
are recomputed here. Nothing from ``rmq.protocol`` / ``rmq.store`` is used to READ or VALIDATE;
the code under test is only used to WRITE the stores that the reader then walks.

The same reader must accept the store written by the real RocketMQ 4.9.8 broker with zero
findings; that keeps the reader itself honest.

Every violation is collected as a "finding" naming the file, the offset, what was expected,
what was found and the spec section, so one run reports all of them.
"""

from __future__ import annotations

import asyncio
import ipaddress
import mmap
import os
import random
import re
import shutil
import struct
import time
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

# --- writing only: the code under test is used to produce the stores ---------------------------
from rmq.protocol.message import BatchItem, MessageExtBatch, MessageExtBrokerInner, pack_host
from rmq.store.config import FlushDiskType, MessageStoreConfig
from rmq.store.message_store import MessageStore

# =================================================================================================
# Independent reader: constants and helpers from the spec only
# =================================================================================================

MAGIC_V1 = -626843481  # DA A3 20 A7 (spec 3.1)
MAGIC_V2 = -626843477  # DA A3 20 AB (5.x only; a 4.x store must not contain it)
MAGIC_BLANK = -875286124  # CB D4 31 94 (spec 3.1 / 3.7)
assert struct.pack(">i", MAGIC_V1) == bytes.fromhex("DAA320A7")
assert struct.pack(">i", MAGIC_BLANK) == bytes.fromhex("CBD43194")

SF_BORNHOST_V6 = 0x10  # spec 3.3
SF_STOREHOST_V6 = 0x20
TRAN_MASK = 0xC
TRAN_NOT, TRAN_PREPARED, TRAN_COMMIT, TRAN_ROLLBACK = 0x0, 0x4, 0x8, 0xC

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # spec 7.1
INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

I32 = struct.Struct(">i")
I16 = struct.Struct(">h")
I64 = struct.Struct(">q")
CQ_UNIT = struct.Struct(">qiq")  # spec 4.1.1: phy offset, size, tag code
IDX_HEADER = struct.Struct(">qqqqii")  # spec 4.3: begin ts, end ts, begin phy, end phy, slots, count
IDX_ENTRY = struct.Struct(">iqii")  # spec 4.3: keyHash, phy offset, timeDiff, prevIndex


def delay_levels_ms(text: str) -> list[int]:
    """messageDelayLevel (spec 7.1): 1-based levels with units s, m, h, d."""
    unit = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    return [int(tok[:-1]) * unit[tok[-1]] for tok in text.split()]


def java_string_hash(s: str) -> int:
    """Java String.hashCode over UTF-16 code units, as a signed int32 (spec preamble)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def index_key_hash(key: str) -> int:
    """abs(hashCode) with Integer.MIN_VALUE -> 0 (spec 4.3, IndexFile entry keyHash)."""
    h = java_string_hash(key)
    if h == INT_MIN:
        return 0
    return abs(h)


def parse_properties(s: str) -> dict[str, str]:
    """Spec 3.4: split on \\x02; accept name\\x01value with both non-empty; last wins."""
    out: dict[str, str] = {}
    for seg in s.split("\x02"):
        if len(seg) < 3:
            continue
        i = seg.find("\x01")
        if i <= 0 or i == len(seg) - 1:
            continue
        out[seg[:i]] = seg[i + 1 :]
    return out


def spec_properties_string(props: dict[str, str]) -> str:
    """Spec 3.4 writer side (used only to size the near-limit records we send)."""
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items())


def spec_record_length(sysflag: int, body_len: int, topic_len: int, props_len: int) -> int:
    """calMsgLength, spec 3.2: 4+4+4+4+4+8+8+4+8+BH+8+SH+4+8 + 4+body + 1+topic + 2+props."""
    bh = 20 if sysflag & SF_BORNHOST_V6 else 8
    sh = 20 if sysflag & SF_STOREHOST_V6 else 8
    return 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + bh + 8 + sh + 4 + 8 + 4 + body_len + 1 + topic_len + 2 + props_len


assert spec_record_length(0, 32, len("FooBar"), 29) == 158  # the spec's worked example (3.2)
assert spec_record_length(0, 0, 0, 0) == 91


def all_zero(buf) -> bool:
    if len(buf) == 0:
        return True
    return not np.frombuffer(buf, dtype=np.uint8).any()


def first_nonzero(buf) -> int:
    arr = np.frombuffer(buf, dtype=np.uint8)
    nz = np.flatnonzero(arr)
    return int(nz[0]) if len(nz) else -1


def nonzero_at(buf, start: int, end: int | None = None) -> int | None:
    """Where in ``buf`` the first non-zero byte of ``buf[start:end]`` is; None if all are zero."""
    i = first_nonzero(buf[start:end])
    return None if i < 0 else start + i


# =================================================================================================
# Reader data model
# =================================================================================================


@dataclass(frozen=True)
class Layout:
    """What the reader needs to know about a store's configuration."""

    commitlog_file_size: int
    cq_file_size_configured: int
    hash_slot_num: int
    index_num: int
    delay_levels: str = DEFAULT_DELAY_LEVELS

    @property
    def cq_file_size(self) -> int:
        # spec 4.1.1: rounded up to a multiple of 20
        return -(-self.cq_file_size_configured // 20) * 20

    @property
    def index_file_size(self) -> int:
        return 40 + self.hash_slot_num * 4 + self.index_num * 20


@dataclass
class Record:
    file: str
    pos: int
    file_start: int
    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sysflag: int
    born_ts: int
    born_host: bytes
    store_ts: int
    store_host: bytes
    reconsume_times: int
    prepared_tx_offset: int
    body: bytes
    topic: str
    props_raw: str
    props: dict[str, str]

    @property
    def phys(self) -> int:
        return self.file_start + self.pos

    @property
    def tran(self) -> int:
        return self.sysflag & TRAN_MASK

    @property
    def dispatchable(self) -> bool:
        # spec 4.1.1 / 7.3: only NOT and COMMIT go to consume queues
        return self.tran in (TRAN_NOT, TRAN_COMMIT)

    def where(self) -> str:
        return f"{self.file} pos {self.pos} (phy {self.phys})"


@dataclass
class Report:
    findings: list[str] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    by_phys: dict[int, Record] = field(default_factory=dict)
    commitlog_files: list[str] = field(default_factory=list)
    blank_count: int = 0
    rolls: list[tuple[str, int, int]] = field(default_factory=list)  # (file, BLANK size, next record #)
    cq_units: int = 0
    cq_files: int = 0
    index_files: list[str] = field(default_factory=list)
    index_entries: int = 0
    index_ends: list[int] = field(default_factory=list)
    checkpoint: tuple[int, int, int] = (0, 0, 0)
    notes: list[str] = field(default_factory=list)  # spec-conformant oddities worth knowing

    def add(self, msg: str) -> None:
        self.findings.append(msg)


# =================================================================================================
# CommitLog (spec 3.1-3.4, 3.7, 4.0)
# =================================================================================================


class BadRecord(Exception):
    pass


def parse_record(buf, pos: int, file_size: int, name: str, file_start: int) -> Record:
    """Parse one message record at pos with the offsets of spec 3.2; raise BadRecord on damage."""
    if pos + 8 > file_size:
        raise BadRecord(f"{name} pos {pos}: fewer than 8 bytes left for TOTALSIZE+MAGICCODE")
    total, magic = struct.unpack_from(">ii", buf, pos)
    if magic != MAGIC_V1:
        raise BadRecord(
            f"{name} pos {pos}: MAGICCODE {magic:#010x} is not the v1 message magic "
            f"DA A3 20 A7 (spec 3.1; a 4.x store only writes v1)"
        )
    if total < 91 or pos + total > file_size:
        raise BadRecord(
            f"{name} pos {pos}: TOTALSIZE {total} is < 91 or crosses the file end "
            f"{file_size} (spec 3.2, 3.7: a record is never split)"
        )
    end = pos + total
    rec = memoryview(buf)[pos:end]

    def need(off: int, n: int, what: str) -> None:
        if off + n > total:
            raise BadRecord(
                f"{name} pos {pos}: {what} at record offset {off}+{n} runs past TOTALSIZE {total} (spec 3.2)"
            )

    def utf8(off: int, n: int, field_is: str) -> str:
        """The n bytes at ``off`` as text; ``field_is``: "TOPIC is" (for the error, spec 3.2)."""
        need(off, n, field_is.split()[0])
        try:
            return bytes(rec[off : off + n]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadRecord(f"{name} pos {pos}: {field_is} not UTF-8: {e}") from None

    (crc, qid, flag) = struct.unpack_from(">iii", rec, 8)
    (qoff, phys) = struct.unpack_from(">qq", rec, 20)
    (sysflag,) = I32.unpack_from(rec, 36)
    (born_ts,) = I64.unpack_from(rec, 40)
    o = 48
    bh = 20 if sysflag & SF_BORNHOST_V6 else 8
    need(o, bh, "BORNHOST")
    born_host = bytes(rec[o : o + bh])
    o += bh
    need(o, 8, "STORETIMESTAMP")
    (store_ts,) = I64.unpack_from(rec, o)
    o += 8
    sh = 20 if sysflag & SF_STOREHOST_V6 else 8
    need(o, sh, "STOREHOSTADDRESS")
    store_host = bytes(rec[o : o + sh])
    o += sh
    need(o, 4 + 8 + 4, "RECONSUMETIMES/PREPARED OFFSET/BODY LENGTH")
    (reconsume,) = I32.unpack_from(rec, o)
    o += 4
    (prep,) = I64.unpack_from(rec, o)
    o += 8
    (body_len,) = I32.unpack_from(rec, o)
    o += 4
    if body_len < 0:
        raise BadRecord(f"{name} pos {pos}: BODY LENGTH {body_len} < 0 (spec 3.2)")
    need(o, body_len, "BODY")
    body = bytes(rec[o : o + body_len])
    o += body_len
    need(o, 1, "TOPIC LENGTH")
    topic_len = struct.unpack_from(">b", rec, o)[0]  # v1: one signed byte (spec 3.2)
    o += 1
    if topic_len <= 0:
        raise BadRecord(f"{name} pos {pos}: TOPIC LENGTH {topic_len} not in 1..127 (spec 3.2)")
    topic = utf8(o, topic_len, "TOPIC is")
    o += topic_len
    need(o, 2, "PROPERTIES LENGTH")
    (props_len,) = I16.unpack_from(rec, o)
    o += 2
    if props_len < 0:
        raise BadRecord(f"{name} pos {pos}: PROPERTIES LENGTH {props_len} < 0 (spec 3.2)")
    props_raw = utf8(o, props_len, "PROPERTIES are")
    o += props_len
    calc = spec_record_length(sysflag, body_len, len(topic.encode("utf-8")), props_len)
    if o != total or calc != total:
        raise BadRecord(
            f"{name} pos {pos}: TOTALSIZE {total} != field sum {o} / calMsgLength {calc} "
            f"(spec 3.2, 4.6 '[BUG]read total count not equals msg total size')"
        )
    return Record(
        file=name,
        pos=pos,
        file_start=file_start,
        total_size=total,
        magic=magic,
        body_crc=crc,
        queue_id=qid,
        flag=flag,
        queue_offset=qoff,
        physical_offset=phys,
        sysflag=sysflag,
        born_ts=born_ts,
        born_host=born_host,
        store_ts=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_tx_offset=prep,
        body=body,
        topic=topic,
        props_raw=props_raw,
        props=parse_properties(props_raw),
    )


def read_commitlog(root: Path, layout: Layout, rep: Report, now_ms: int) -> None:
    cdir = root / "commitlog"
    size = layout.commitlog_file_size
    if not cdir.is_dir():
        rep.add("commitlog/ directory missing (spec 4.0)")
        return
    names = sorted(os.listdir(cdir))
    rep.commitlog_files = names
    if not names:
        rep.add("commitlog/ has no files")
        return
    starts: list[int] = []
    for n in names:
        if not re.fullmatch(r"\d{20}", n):
            rep.add(f"commitlog/{n}: name is not a 20-digit zero-padded offset (spec 4.0)")
            return
        starts.append(int(n))
    for i, (n, s) in enumerate(zip(names, starts, strict=False)):
        if s % size:
            rep.add(f"commitlog/{n}: start offset {s} is not a multiple of the file size {size} (spec 4.0)")
        if i and s != starts[i - 1] + size:
            rep.add(
                f"commitlog/{n}: start offset {s} does not follow {names[i - 1]} "
                f"(expected {starts[i - 1] + size}; spec 4.0 contiguous files)"
            )
    # per-file walk
    prev_blank: tuple[str, int] | None = None  # (file, blank size) of the previous file's BLANK
    for fi, (name, start) in enumerate(zip(names, starts, strict=False)):
        path = cdir / name
        flen = path.stat().st_size
        if flen != size:
            rep.add(
                f"commitlog/{name}: length {flen} != configured mappedFileSizeCommitLog {size} "
                f"(spec 4.0: all files of a queue have exactly the configured size)"
            )
            continue
        last = fi == len(names) - 1
        with open(path, "rb") as fh:
            buf = fh.read()
        pos = 0
        first_in_file = True
        while True:
            if pos == size:
                if not last:
                    rep.add(
                        f"commitlog/{name}: data reaches the file end without a BLANK record "
                        f"(spec 3.7: a record needs msgLen + 8 <= remaining)"
                    )
                break
            if pos + 8 > size:
                rep.add(
                    f"commitlog/{name} pos {pos}: only {size - pos} bytes left after the last record; "
                    f"spec 3.7 always leaves >= 8 bytes for the BLANK (msgLen + 8 > remaining rolls)"
                )
                break
            total, magic = struct.unpack_from(">ii", buf, pos)
            if magic == MAGIC_BLANK:
                rep.blank_count += 1
                if total != size - pos:
                    rep.add(
                        f"commitlog/{name} pos {pos}: BLANK size {total} != remaining {size - pos} "
                        f"(spec 3.7: int32 maxBlank = remaining size, reaching exactly the file end)"
                    )
                if last:
                    rep.add(
                        f"commitlog/{name} pos {pos}: the LAST file ends in a BLANK but no next file "
                        f"exists (spec 3.7: the message is re-appended at offset 0 of a new file)"
                    )
                off = nonzero_at(buf, pos + 8)
                if off is not None:
                    rep.add(
                        f"commitlog/{name}: non-zero byte at {off} inside the BLANK region after pos "
                        f"{pos} (spec 3.7: rest of blank region left as-is, zeros in a fresh file)"
                    )
                if first_in_file and fi > 0:
                    rep.add(f"commitlog/{name}: file starts with a BLANK (an empty file; spec 3.7)")
                prev_blank = (name, size - pos)
                break
            if total == 0 and magic == 0:
                # end of written data
                if not last:
                    rep.add(
                        f"commitlog/{name} pos {pos}: data ends without a BLANK record in a file that "
                        f"is not the last (spec 3.7: every roll is marked by BLANK)"
                    )
                off = nonzero_at(buf, pos)
                if off is not None:
                    rep.add(
                        f"commitlog/{name}: non-zero byte at pos {off} after the last record ending at "
                        f"{pos} (expected zeros after the last record)"
                    )
                break
            try:
                rec = parse_record(buf, pos, size, f"commitlog/{name}", start)
            except BadRecord as e:
                rep.add(str(e))
                break
            if first_in_file and prev_blank is not None:
                rep.rolls.append((prev_blank[0], prev_blank[1], len(rep.records)))
            first_in_file = False
            check_record(rec, rep, now_ms)
            rep.records.append(rec)
            rep.by_phys[rec.phys] = rec
            pos += total


def check_record(rec: Record, rep: Report, now_ms: int) -> None:
    w = rec.where()
    crc = zlib.crc32(rec.body) & 0x7FFFFFFF
    if crc != rec.body_crc:
        rep.add(f"{w}: BODYCRC {rec.body_crc} != CRC32(body) & 0x7FFFFFFF = {crc} (spec 3.2 field 3)")
    if rec.physical_offset != rec.phys:
        rep.add(f"{w}: PHYSICALOFFSET {rec.physical_offset} != its position {rec.phys} (spec 3.2 field 7)")
    if rec.sysflag & ~0x7FF:
        rep.add(f"{w}: SYSFLAG {rec.sysflag:#x} has bits outside the spec 3.3 table")
    if not TOPIC_RE.match(rec.topic) or len(rec.topic) > 127:
        rep.add(f"{w}: topic {rec.topic!r} is not a valid topic name")
    if rec.tran in (TRAN_PREPARED, TRAN_ROLLBACK) and rec.queue_offset != 0:
        rep.add(
            f"{w}: {'PREPARED' if rec.tran == TRAN_PREPARED else 'ROLLBACK'} record "
            f"(sysflag {rec.sysflag:#x}) has QUEUEOFFSET {rec.queue_offset}, expected 0 (spec 3.2 field 6, 3.8)"
        )
    if rec.queue_offset < 0 or rec.queue_id < 0:
        rep.add(f"{w}: negative QUEUEID {rec.queue_id} / QUEUEOFFSET {rec.queue_offset}")
    if not (0 < rec.store_ts <= now_ms):
        rep.add(f"{w}: STORETIMESTAMP {rec.store_ts} not in (0, now={now_ms}] (spec 3.2 field 11)")
    if rec.props_raw and len(rec.props_raw) > 32767:
        rep.add(f"{w}: properties of {len(rec.props_raw)} chars > 32767 (spec 3.2 size limits)")
    delay = rec.props.get("DELAY")
    if (
        rec.topic != SCHEDULE_TOPIC
        and rec.dispatchable
        and delay is not None
        and delay.strip().lstrip("-").isdigit()
        and int(delay) > 0
    ):
        rep.add(
            f"{w}: topic {rec.topic!r} record (tran {rec.tran:#x}) carries DELAY={delay} but was not "
            f"rewritten to {SCHEDULE_TOPIC} (spec 3.8, 7.1)"
        )


def check_commitlog_global(rep: Report, layout: Layout) -> None:
    levels = delay_levels_ms(layout.delay_levels)
    # the message after each BLANK really did not fit (spec 3.7: msgLen + 8 > remaining)
    # A batch moves as a whole (spec 3.7); our writer tags the items of one batch with "bid".
    for bfile, blank, i in rep.rolls:
        rec = rep.records[i]
        group = rec.total_size
        bid = rec.props.get("bid")
        j = i + 1
        while (
            bid is not None
            and j < len(rep.records)
            and rep.records[j].file == rec.file
            and rep.records[j].props.get("bid") == bid
        ):
            group += rep.records[j].total_size
            j += 1
        if group + 8 <= blank:
            rep.add(
                f"commitlog/{bfile}: BLANK of {blank} bytes written although the next record(s) "
                f"({group} bytes, first at {rec.where()}) fit (spec 3.7: roll only when msgLen + 8 > remaining)"
            )
    # queue offsets consecutive from 0 per (topic, queue), in physical order (spec 3.8)
    nxt: dict[tuple[str, int], int] = defaultdict(int)
    for rec in rep.records:
        if not rec.dispatchable:
            continue
        key = (rec.topic, rec.queue_id)
        if rec.queue_offset != nxt[key]:
            rep.add(
                f"{rec.where()}: QUEUEOFFSET {rec.queue_offset} for {rec.topic}-{rec.queue_id}, expected "
                f"{nxt[key]} (consecutive from 0 per topic-queue, spec 3.8)"
            )
        nxt[key] = rec.queue_offset + 1
    # schedule topic records (spec 7.1)
    for rec in rep.records:
        if rec.topic != SCHEDULE_TOPIC:
            continue
        p = rec.props
        for need in ("REAL_TOPIC", "REAL_QID", "DELAY"):
            if need not in p:
                rep.add(f"{rec.where()}: {SCHEDULE_TOPIC} record lacks property {need} (spec 7.1)")
        lvl = p.get("DELAY")
        if lvl is not None and lvl.isdigit():
            level = min(int(lvl), len(levels))
            if level > 0 and rec.queue_id != level - 1:
                rep.add(
                    f"{rec.where()}: {SCHEDULE_TOPIC} queueId {rec.queue_id} != delay level "
                    f"{level} - 1 (spec 7.1 delayLevel2QueueId)"
                )
        if not 0 <= rec.queue_id < len(levels):
            rep.add(f"{rec.where()}: {SCHEDULE_TOPIC} queueId {rec.queue_id} outside 0..{len(levels) - 1}")


# =================================================================================================
# ConsumeQueue (spec 4.1.1)
# =================================================================================================


def expected_tag_code(rec: Record, layout: Layout) -> int:
    """Spec 3.4 / 4.1.1 / 7.1."""
    if rec.topic == SCHEDULE_TOPIC:
        levels = delay_levels_ms(layout.delay_levels)
        lvl = rec.props.get("DELAY")
        level = int(lvl) if lvl is not None and lvl.isdigit() else rec.queue_id + 1
        level = min(level, len(levels))
        delay = levels[level - 1] if level > 0 else 1000
        return rec.store_ts + delay
    tags = rec.props.get("TAGS")
    return java_string_hash(tags) if tags else 0


def read_consume_queues(root: Path, layout: Layout, rep: Report) -> None:
    cq_root = root / "consumequeue"
    fsize = layout.cq_file_size
    expected: dict[tuple[str, int], list[Record]] = defaultdict(list)
    for rec in rep.records:
        if rec.dispatchable:
            expected[(rec.topic, rec.queue_id)].append(rec)
    found: set[tuple[str, int]] = set()
    if not cq_root.is_dir():
        if expected:
            rep.add("consumequeue/ directory missing although dispatchable records exist (spec 4.0)")
        return
    for topic in sorted(os.listdir(cq_root)):
        tdir = cq_root / topic
        if not tdir.is_dir():
            rep.add(f"consumequeue/{topic}: not a directory (spec 4.0)")
            continue
        for qname in sorted(os.listdir(tdir)):
            qdir = tdir / qname
            where_q = f"consumequeue/{topic}/{qname}"
            if not re.fullmatch(r"\d+", qname) or not qdir.is_dir():
                rep.add(f"{where_q}: queue directory name is not an integer queue id (spec 4.0)")
                continue
            qid = int(qname)
            names = sorted(os.listdir(qdir))
            units: list[tuple[int, int, int, str, int, int]] = []  # (phy, size, tag, file, pos, logical)
            ended_at: str | None = None
            for i, n in enumerate(names):
                where_f = f"{where_q}/{n}"
                if not re.fullmatch(r"\d{20}", n):
                    rep.add(f"{where_f}: name is not a 20-digit offset (spec 4.0)")
                    continue
                start = int(n)
                if start % fsize:
                    rep.add(f"{where_f}: start {start} is not a multiple of the CQ file size {fsize} (spec 4.0)")
                if start != i * fsize:
                    rep.add(
                        f"{where_f}: file #{i} starts at {start}, expected {i * fsize} "
                        f"(= logical offset {i * fsize // 20} x 20; spec 4.0, 4.1.1)"
                    )
                flen = (qdir / n).stat().st_size
                if flen != fsize:
                    rep.add(
                        f"{where_f}: length {flen} != configured CQ file size {fsize} "
                        f"(mappedFileSizeConsumeQueue {layout.cq_file_size_configured} rounded up to "
                        f"20; spec 4.0, 4.1.1)"
                    )
                    continue
                rep.cq_files += 1
                data = (qdir / n).read_bytes()
                if ended_at is not None:
                    if not all_zero(data):
                        rep.add(
                            f"{where_f}: non-zero bytes at {first_nonzero(data)} in a file after the end "
                            f"of the queue at {ended_at} (spec 4.1.2: the queue ends at the first invalid unit)"
                        )
                    continue
                for pos in range(0, fsize, 20):
                    phy, sz, tag = CQ_UNIT.unpack_from(data, pos)
                    if phy >= 0 and sz > 0:  # spec 4.1.2: a unit is valid iff offset >= 0 and size > 0
                        units.append((phy, sz, tag, where_f, pos, (start + pos) // 20))
                        continue
                    ended_at = f"{where_f} pos {pos}"
                    off = nonzero_at(data, pos)
                    if off is not None:
                        rep.add(
                            f"{where_f}: non-zero bytes at {off} after the last valid unit "
                            f"(invalid unit at pos {pos}: phy {phy}, size {sz}, tag {tag}; spec 4.1.1/4.1.2)"
                        )
                    break
            found.add((topic, qid))
            exp = expected.get((topic, qid), [])
            rep.cq_units += len(units)
            if len(units) != len(exp):
                rep.add(
                    f"{where_q}: {len(units)} units but {len(exp)} dispatchable records of "
                    f"{topic}-{qid} in the CommitLog (spec 4.1.1: units = NOT/COMMIT records)"
                )
            for phy, sz, tag, where_f, pos, n in units:
                uw = f"{where_f} unit {n} (pos {pos})"
                rec = rep.by_phys.get(phy)
                if rec is None:
                    rep.add(f"{uw}: phy offset {phy} is not the start of a record in the CommitLog")
                    continue
                if rec.topic != topic or rec.queue_id != qid:
                    rep.add(f"{uw}: points at {rec.where()} of {rec.topic}-{rec.queue_id}, expected {topic}-{qid}")
                if sz != rec.total_size:
                    rep.add(f"{uw}: size {sz} != TOTALSIZE {rec.total_size} of {rec.where()} (spec 4.1.1)")
                if rec.queue_offset != n:
                    rep.add(f"{uw}: logical offset {n} but the record's QUEUEOFFSET is {rec.queue_offset}")
                if not rec.dispatchable:
                    rep.add(
                        f"{uw}: points at a {'PREPARED' if rec.tran == TRAN_PREPARED else 'ROLLBACK'} record "
                        f"{rec.where()} (spec 4.1.1: only NOT/COMMIT are dispatched)"
                    )
                want = expected_tag_code(rec, layout)
                if tag != want:
                    what = (
                        "store time + level delay"
                        if rec.topic == SCHEDULE_TOPIC
                        else f"hashCode(TAGS={rec.props.get('TAGS')!r})"
                    )
                    rep.add(f"{uw}: tag code {tag} != {want} = {what} of {rec.where()} (spec 3.4, 4.1.1, 7.1)")
    for key, recs in expected.items():
        if key not in found:
            rep.add(
                f"consumequeue/{key[0]}/{key[1]}: missing, but {len(recs)} dispatchable records of "
                f"that queue are in the CommitLog (first {recs[0].where()})"
            )


# =================================================================================================
# IndexFile (spec 4.3)
# =================================================================================================


def index_keys(rec: Record) -> list[str]:
    """Keys IndexService builds for a record (spec 4.3): topic#UNIQ_KEY and topic#each KEYS token."""
    if rec.tran == TRAN_ROLLBACK:
        return []
    out = []
    uk = rec.props.get("UNIQ_KEY")
    if uk:
        out.append(f"{rec.topic}#{uk}")
    keys = rec.props.get("KEYS")
    if keys:
        out.extend(f"{rec.topic}#{k}" for k in keys.split(" ") if k)
    return out


def read_index(
    root: Path, layout: Layout, rep: Report, now_ms: int, t_start_ms: int | None, restarts: tuple[Restart, ...] = ()
) -> None:
    idir = root / "index"
    S, N = layout.hash_slot_num, layout.index_num
    want_size = layout.index_file_size
    expected: Counter[tuple[int, int]] = Counter()
    keys_of: dict[int, list[str]] = {}
    for rec in rep.records:
        ks = index_keys(rec)
        keys_of[rec.phys] = ks
        for k in ks:
            expected[(index_key_hash(k), rec.phys)] += 1
    got: Counter[tuple[int, int]] = Counter()
    names = sorted(os.listdir(idir)) if idir.is_dir() else []
    rep.index_files = names
    if expected and not names:
        rep.add("index/: no IndexFile although records with keys exist (spec 4.3)")
    files: list[tuple[str, tuple, np.ndarray, list[tuple[int, int, int, int]]]] = []
    last_phy = -1
    prev_end_ts: int | None = None
    for name in names:
        where = f"index/{name}"
        if not re.fullmatch(r"\d{17}", name):
            rep.add(f"{where}: name is not a 17-digit yyyyMMddHHmmssSSS time (spec 4.3)")
            continue
        try:
            created = datetime.strptime(name, "%Y%m%d%H%M%S%f").timestamp() * 1000
        except ValueError:
            rep.add(f"{where}: name is not a valid yyyyMMddHHmmssSSS time (spec 4.3)")
            created = None
        if created is not None and t_start_ms is not None and not (t_start_ms - 2000 <= created <= now_ms + 2000):
            rep.add(
                f"{where}: creation time in the name ({created:.0f}) is outside the store's lifetime "
                f"[{t_start_ms}, {now_ms}] (spec 4.3: local wall-clock creation time)"
            )
        path = idir / name
        flen = path.stat().st_size
        if flen != want_size:
            rep.add(f"{where}: length {flen} != 40 + {S}*4 + {N}*20 = {want_size} (spec 4.3)")
            continue
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            hdr = IDX_HEADER.unpack_from(mm, 0)
            slots = np.frombuffer(mm[40 : 40 + 4 * S], dtype=">i4").astype(np.int64)
            begin_ts, end_ts, begin_phy, end_phy, slot_count, count = hdr
            if not 1 <= count <= N:
                rep.add(f"{where}: header indexCount {count} not in 1..{N} (spec 4.3: starts at 1)")
                continue
            e0 = 40 + 4 * S
            ebuf = mm[e0 : e0 + 20 * count]
            entries = [IDX_ENTRY.unpack_from(ebuf, 20 * i) for i in range(count)]
            tail_start = e0 + 20 * count
            tail_end = min(flen, tail_start + (1 << 20))
            off = nonzero_at(mm, tail_start, tail_end)
            if off is not None:
                rep.add(f"{where}: non-zero byte at {off} beyond entry {count - 1} (indexCount {count})")
            if not all_zero(ebuf[:20]):
                rep.add(f"{where}: entry 0 is not empty (spec 4.3: entry number 0 is never used)")
        files.append((name, hdr, slots, entries))
        nz = int(np.count_nonzero(slots))
        if slot_count != nz:
            rep.add(f"{where}: header hashSlotCount {slot_count} != {nz} non-empty slots (spec 4.3)")
        # slots -> most recent entry of that slot
        bad_slot = np.flatnonzero((slots < 0) | (slots >= count))
        for s in bad_slot[:5]:
            rep.add(f"{where}: slot {int(s)} holds {int(slots[s])}, outside 0..indexCount-1={count - 1} (spec 4.3)")
        last_of_slot: dict[int, int] = {}
        members: dict[int, list[int]] = defaultdict(list)
        for no in range(1, count):
            kh, phy, tdiff, prev = entries[no]
            ew = f"{where} entry {no}"
            if kh < 0:
                rep.add(f"{ew}: keyHash {kh} < 0 (spec 4.3: abs(hashCode))")
                continue
            slot = kh % S
            members[slot].append(no)
            last_of_slot[slot] = no
            if not 0 <= prev < no:
                rep.add(f"{ew}: prevIndex {prev} is not an earlier entry (spec 4.3 chain link)")
            elif prev > 0 and entries[prev][0] % S != slot:
                rep.add(f"{ew}: prevIndex {prev} belongs to slot {entries[prev][0] % S}, not {slot} (spec 4.3)")
            got[(kh, phy)] += 1
            rec = rep.by_phys.get(phy)
            if rec is None:
                rep.add(f"{ew}: phy offset {phy} is not the start of a record")
                continue
            if phy < last_phy:
                rep.add(
                    f"{ew}: phy offset {phy} goes backwards (previous entry at {last_phy}; index built in "
                    f"CommitLog order, spec 4.3 'messages below the file's endPhyOffset are skipped')"
                )
            last_phy = max(last_phy, phy)
            hashes = {index_key_hash(k) for k in keys_of.get(phy, [])}
            if kh not in hashes:
                rep.add(
                    f"{ew}: keyHash {kh} matches none of the keys {keys_of.get(phy)} of {rec.where()} "
                    f"(spec 4.3: topic#UNIQ_KEY and topic#<each KEYS token>, rollback skipped)"
                )
            # timeDiff (spec 4.3): (store - begin) / 1000 clamped; the first entry was computed against the
            # begin value seeded from the previous file (or 0 for the first file).
            diff = rec.store_ts - begin_ts
            want = {0 if diff < 0 else min(diff // 1000, INT_MAX)}
            if no == 1:
                want.add(0)
                if prev_end_ts is not None:
                    d1 = rec.store_ts - prev_end_ts
                    want.add(0 if d1 < 0 else min(d1 // 1000, INT_MAX))
            if tdiff not in want:
                rep.add(
                    f"{ew}: timeDiff {tdiff} s, expected {sorted(want)} = (store time {rec.store_ts} - "
                    f"header beginTimestamp {begin_ts}) / 1000 (spec 4.3)"
                )
        for s, no in last_of_slot.items():
            if int(slots[s]) != no:
                rep.add(f"{where}: slot {s} holds {int(slots[s])}, expected the most recent entry {no} (spec 4.3)")
        for s in np.flatnonzero(slots):
            s = int(s)
            if s not in last_of_slot and 0 < slots[s] < count:
                rep.add(f"{where}: slot {s} holds {int(slots[s])} but no entry hashes to it (spec 4.3)")
        # chain walk from every slot reaches exactly that slot's entries, newest first
        for s, mem in members.items():
            walk = []
            cur = int(slots[s])
            seen = set()
            while 0 < cur < count and cur not in seen:
                seen.add(cur)
                walk.append(cur)
                cur = entries[cur][3]
            if walk != sorted(mem, reverse=True):
                missing = sorted(set(mem) - set(walk))
                rep.add(
                    f"{where}: walking slot {s} from {int(slots[s])} visits {walk[:8]}..., entries {missing[:8]} "
                    f"of that slot are unreachable (spec 4.3 hash chains)"
                )
        if count > 1:
            first, lastno = entries[1], entries[count - 1]
            r1, rl = rep.by_phys.get(first[1]), rep.by_phys.get(lastno[1])
            if begin_phy != first[1]:
                rep.add(f"{where}: header beginPhyOffset {begin_phy} != first entry's phy {first[1]} (spec 4.3)")
            if end_phy != lastno[1]:
                rep.add(f"{where}: header endPhyOffset {end_phy} != last entry's phy {lastno[1]} (spec 4.3)")
            if r1 is not None and begin_ts != r1.store_ts:
                rep.add(
                    f"{where}: header beginTimestamp {begin_ts} != store time {r1.store_ts} of the first "
                    f"entry's record (spec 4.3)"
                )
            if rl is not None and end_ts != rl.store_ts:
                rep.add(
                    f"{where}: header endTimestamp {end_ts} != store time {rl.store_ts} of the last "
                    f"entry's record (spec 4.3)"
                )
        if name != names[-1] and count != N:
            rep.add(
                f"{where}: indexCount {count} but a newer IndexFile exists; a new file is only created "
                f"when this one is full (indexCount >= indexNum {N}; spec 4.3)"
            )
        rep.index_entries += count - 1
        rep.index_ends.append(end_ts)
        prev_end_ts = end_ts
    # every expected key is in some file, reachable by walking the chain from its slot (spec 4.3 lookup)
    missing = expected - got
    extra = got - expected
    for (kh, phy), n in list(missing.items())[:20]:
        rec = rep.by_phys[phy]
        ks = [k for k in keys_of[phy] if index_key_hash(k) == kh]
        rep.add(
            f"index: no entry for key {ks} -> phy {phy} ({rec.where()}, tran {rec.tran:#x}) "
            f"[{n} missing] (spec 4.3: IndexService builds topic#UNIQ_KEY and topic#KEYS tokens)"
        )
    if len(missing) > 20:
        rep.add(f"index: ... {len(missing) - 20} more missing (key, phy) pairs, {sum(missing.values())} entries in all")
    # Spec 4.3 + 4.5: a restart re-dispatches the CommitLog tail beyond the largest offset any CQ
    # references (PREPARED/ROLLBACK records are in no CQ), and the IndexService skips only messages
    # *below* its endPhyOffset - so the one message sitting AT that offset is indexed once more.
    # After a crash (4.3) the same holds for the newest IndexFile that survives. RocketMQ 4.9.8
    # does exactly this; one extra copy per key of at most one such message per restart (plus the
    # crash survivor's boundary message) is therefore not a finding. Anything else is.
    tolerated_by_restart: list[set[int]] = []
    for rs in restarts:
        phys_in_window = {phy for (_kh, phy) in extra if rs.tail_from <= phy < rs.tail_to}
        tolerated = set(phys_in_window) if len(phys_in_window) <= 1 else set()
        if len(phys_in_window) > 1:
            rep.add(
                f"index: after the {rs.kind} restart, messages at {sorted(phys_in_window)} are all indexed "
                f"twice; re-dispatch from {rs.tail_from} can re-index only the one at the IndexFile's "
                f"endPhyOffset (spec 4.3 'messages below the file's endPhyOffset are skipped', 4.5)"
            )
        if rs.survivor_end is not None:
            tolerated.add(rs.survivor_end)
        tolerated_by_restart.append(tolerated)
    for key in list(extra):
        n_ok = sum(key[1] in t for t in tolerated_by_restart)
        if n_ok:
            extra[key] -= min(n_ok, extra[key])
            rep.notes.append(
                f"index: key hash {key[0]} of the message at phy {key[1]} indexed again by the "
                f"re-dispatch after a restart (spec 4.3/4.5 boundary message; RocketMQ does the same)"
            )
    extra = +extra
    for (kh, phy), n in list(extra.items())[:20]:
        rec = rep.by_phys.get(phy)
        rep.add(
            f"index: {n} unexpected entr(y/ies) keyHash {kh} -> phy {phy} "
            f"({rec.where() if rec else '?'}, tran {rec.tran if rec else -1:#x}, keys "
            f"{keys_of.get(phy)}) (spec 4.3: duplicate or for a rollback record)"
        )
    if len(extra) > 20:
        rep.add(f"index: ... {len(extra) - 20} more unexpected (key, phy) pairs")
    # lookup for every key, the way selectPhyOffset walks
    for rec in rep.records:
        for k in keys_of[rec.phys]:
            if not _lookup(files, S, k, rec.phys, rec.store_ts):
                rep.add(
                    f"index: lookup of {k!r} (slot {index_key_hash(k) % S}) does not reach phy {rec.phys} "
                    f"({rec.where()}) by walking the hash chain (spec 4.3 selectPhyOffset)"
                )


def _lookup(files, S: int, key: str, phy: int, store_ts: int) -> bool:
    kh = index_key_hash(key)
    slot = kh % S
    for _name, hdr, slots, entries in files:
        begin_ts, _end_ts, begin_phy, end_phy, _sc, count = hdr
        cur = int(slots[slot])
        if cur <= 0 or cur >= count or count <= 1:
            continue
        seen = set()
        while 0 < cur < count and cur not in seen:
            seen.add(cur)
            e_kh, e_phy, tdiff, prev = entries[cur]
            if tdiff < 0:
                break
            t = begin_ts + tdiff * 1000
            if e_kh == kh and e_phy == phy and t <= store_ts + 1000 and t >= begin_ts:
                return True
            cur = prev
    return False


# =================================================================================================
# Checkpoint (spec 4.4)
# =================================================================================================


def read_checkpoint(root: Path, rep: Report, now_ms: int, strict: bool) -> None:
    path = root / "checkpoint"
    if not path.exists():
        rep.add("checkpoint file missing (spec 4.0, 4.4)")
        return
    data = path.read_bytes()
    if len(data) != 4096:
        rep.add(f"checkpoint: length {len(data)} != 4096 (spec 4.4)")
        if len(data) < 24:
            return
    physic, logics, index = struct.unpack_from(">qqq", data, 0)
    rep.checkpoint = (physic, logics, index)
    if not rep.records:
        return
    first = min(r.store_ts for r in rep.records)
    disp = [r.store_ts for r in rep.records if r.dispatchable]

    def plausible(name: str, v: int, allow_zero: bool) -> bool:
        if v == 0 and allow_zero:
            return False
        if not first <= v <= now_ms:
            rep.add(f"checkpoint: {name} {v} not in [first store time {first}, now {now_ms}] (spec 4.4)")
            return False
        return True

    # 4.4: "Flushed on shutdown" - after a clean shutdown physic/logics are recorded.
    p_ok = plausible("physicMsgTimestamp", physic, allow_zero=not strict)
    l_ok = plausible("logicsMsgTimestamp", logics, allow_zero=not strict)
    if l_ok and disp and logics > max(disp):
        rep.add(f"checkpoint: logicsMsgTimestamp {logics} > newest dispatched store time {max(disp)} (spec 4.1.1)")
    if p_ok and l_ok and physic < logics - 3000:
        rep.add(
            f"checkpoint: physicMsgTimestamp {physic} < logicsMsgTimestamp {logics} - 3 s "
            f"(the CommitLog is flushed no later than what is dispatched from it; spec 4.4)"
        )
    if index != 0:
        if plausible("indexMsgTimestamp", index, allow_zero=True) and index not in rep.index_ends:
            rep.add(
                f"checkpoint: indexMsgTimestamp {index} is not the endTimestamp of any IndexFile "
                f"{sorted(set(rep.index_ends))[-5:]} (spec 4.3, 4.4)"
            )
    elif strict and len(rep.index_ends) > 1:
        rep.add(
            f"checkpoint: indexMsgTimestamp is 0 although {len(rep.index_ends) - 1} IndexFile(s) are full "
            f"and flushed (spec 4.3: a full file's endTimestamp is written to the checkpoint)"
        )


def validate_store(
    root: Path, layout: Layout, *, strict: bool, t_start_ms: int | None = None, restarts: tuple[Restart, ...] = ()
) -> Report:
    """Run the whole independent reader over a store directory; returns every finding."""
    now_ms = time.time_ns() // 1_000_000
    rep = Report()
    read_commitlog(root, layout, rep, now_ms)
    check_commitlog_global(rep, layout)
    read_consume_queues(root, layout, rep)
    read_index(root, layout, rep, now_ms, t_start_ms, restarts)
    read_checkpoint(root, rep, now_ms, strict)
    return rep


def fail_with(rep: Report, what: str) -> None:
    if rep.findings:
        shown = "\n  ".join(rep.findings[:80])
        more = f"\n  ... and {len(rep.findings) - 80} more" if len(rep.findings) > 80 else ""
        pytest.fail(f"{what}: {len(rep.findings)} finding(s):\n  {shown}{more}", pytrace=False)


# =================================================================================================
# The reader against the real RocketMQ 4.9.8 store
# =================================================================================================

REAL_LAYOUT = Layout(
    commitlog_file_size=1024 * 1024, cq_file_size_configured=300000 * 20, hash_slot_num=5_000_000, index_num=20_000_000
)


def test_reader_accepts_real_rocketmq_store(rocketmq_store_pristine: Path) -> None:
    rep = validate_store(rocketmq_store_pristine, REAL_LAYOUT, strict=False)
    fail_with(rep, "independent reader vs the real RocketMQ 4.9.8 store")
    # the reader actually saw everything the fixture README promises
    assert len(rep.records) == 2000
    assert len(rep.commitlog_files) == 3 and rep.blank_count == 2
    assert rep.cq_units == 2000 and rep.cq_files == 4
    assert len({r.queue_id for r in rep.records}) == 4
    assert rep.index_entries == 3 * 2000  # UNIQ_KEY + two KEYS tokens each
    assert any(r.sysflag & 0x1 for r in rep.records)  # compressed bodies are CRC'd as stored
    assert {r.props.get("TAGS") for r in rep.records} == {"Tag0", "Tag1", "Tag2"}


# =================================================================================================
# Writing stores with the code under test (the only use of rmq.* in this file)
# =================================================================================================

TOPICS = [
    "TopicA",
    "TopicB",
    "Topic_C",
    "topic-d",
    "T|pipe",
    "%RETRY%grpE",
    "%DLQ%grpF",
    "UPPER_G",
    "h0123456789",
    "Mixed-Case_Topic_I",
    "J",
    "Topic-K_127_" + "x" * 115,
]  # the longest topic v1 allows
QUEUES = {t: (8 if i % 3 == 0 else 4) for i, t in enumerate(TOPICS)}
TAGS = ["TagA", "TagB", "标签", "Tag😀", "ä||ö", "TagA||TagB", "x"]
# near-limit records: seq -> bytes left in the file after them (8 = exactly the BLANK)
BIG_SEQS = {50: 8, 51: 9, 300: 8, 700: 20}
V6_HOSTS = [("::1", 5555), ("2001:db8::1", 40000), ("fe80::abcd:1", 1)]


@dataclass
class Written:
    """What the writer sent (keyed by our "mid" property) and the store's own answers."""

    topic: str
    queue_id: int
    body: bytes
    flag: int
    sysflag: int
    born_ts: int
    born_host: bytes
    store_host: bytes
    reconsume_times: int
    prepared_tx_offset: int
    props: dict[str, str]
    batch: bool = False


def _uniq(rng: random.Random) -> str:
    return "".join(rng.choice("0123456789ABCDEF") for _ in range(32))


def _body(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.08:
        return b""
    if kind < 0.3:
        return ("тело сообщения 🚀 " * rng.randint(1, 40)).encode("utf-8")
    return rng.randbytes(rng.choice([1, 7, 100, 333, 800, 1500, 2500]))


def spec_host(ip: str, port: int) -> bytes:
    """Spec 3.2 BORNHOST/STOREHOSTADDRESS: 4 (IPv4) or 16 (IPv6) address bytes + int32 port."""
    return ipaddress.ip_address(ip).packed + struct.pack(">i", port)


def _hosts(rng: random.Random) -> tuple[bytes, bytes]:
    if rng.random() < 0.25:
        born_addr = rng.choice(V6_HOSTS)
    else:
        born_addr = (f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}", rng.randint(1, 65535))
    store_addr = ("fe80::1", 10911) if rng.random() < 0.2 else ("127.0.0.1", 10911)
    born, store = pack_host(*born_addr), pack_host(*store_addr)
    # what we hand the store must already be the spec's layout; records are compared against it
    assert born == spec_host(*born_addr) and store == spec_host(*store_addr)
    return born, store


def _host_flags(born: bytes, store: bytes) -> int:
    """Spec 3.3: the sysflag bits of IPv6 born / store hosts (20-byte host fields)."""
    return (SF_BORNHOST_V6 if len(born) == 20 else 0) | (SF_STOREHOST_V6 if len(store) == 20 else 0)


def _props(rng: random.Random, mid: str) -> dict[str, str]:
    p = {"mid": mid}
    if rng.random() < 0.85:
        p["UNIQ_KEY"] = _uniq(rng)
    if rng.random() < 0.8:
        toks = [f"k{mid}", f"ключ{mid}", f"🔑{mid}", f"键-{rng.randint(0, 99)}"]
        p["KEYS"] = " ".join(toks[: rng.randint(1, 4)])
    if rng.random() < 0.85:
        p["TAGS"] = rng.choice(TAGS)
    if rng.random() < 0.5:
        p["uprop"] = rng.choice(["värde", "值", "😀 emoji", "plain", "a=b,c"])
    return p


def _odd_properties(rng: random.Random, props: dict[str, str]) -> str:
    """A raw properties string (batch items carry one as sent) exercising spec 3.4 parsing:
    no trailing separator, junk/empty segments, duplicate keys (last wins), \x01 inside a value,
    KEYS with repeated and doubled-space tokens."""
    raw = spec_properties_string(props)
    r = rng.random()
    if r < 0.15:
        raw = raw[:-1]  # missing final \x02 (as 4.9.8 stores it)
    elif r < 0.3:
        raw += "junk\x02k\x01\x02\x01v\x02\x02"  # ignored segments
    elif r < 0.45:
        raw += f"TAGS\x01{rng.choice(TAGS)}-last\x02"  # duplicate TAGS: last wins
    elif r < 0.55:
        raw += "odd\x01v\x01w\x02"  # value containing \x01
    elif r < 0.65:
        raw += f"KEYS\x01dup{props['mid']} dup{props['mid']}  sp{props['mid']}\x02"
    return raw


@dataclass
class WrittenStore:
    root: Path
    layout: Layout
    msgs: dict[str, Written]
    t_start_ms: int
    t_end_ms: int
    restarts: tuple[Restart, ...] = ()


@dataclass(frozen=True)
class Restart:
    """Where a reopen re-dispatches (read from the files as the store left them; see read_index)."""

    kind: str
    tail_from: int  # largest phy offset + size referenced by any CQ unit (spec 4.5)
    tail_to: int  # end of the last record in the CommitLog
    survivor_end: int | None  # crash only: endPhyOffset of the newest surviving IndexFile (4.3)


def restart_point(root: Path, layout: Layout, kind: str) -> Restart:
    cq_end = 0
    cq_root = root / "consumequeue"
    for qdir in cq_root.glob("*/*") if cq_root.is_dir() else []:
        for f in sorted(qdir.iterdir()):
            data = f.read_bytes()
            for pos in range(0, len(data) - 19, 20):
                phy, size, _tag = CQ_UNIT.unpack_from(data, pos)
                if phy < 0 or size <= 0:
                    break
                cq_end = max(cq_end, phy + size)
    rep = Report()
    read_commitlog(root, layout, rep, 2**62)
    cl_end = max((r.phys + r.total_size for r in rep.records), default=0)
    return Restart(kind, cq_end, cl_end, surviving_index_end(root, layout) if kind == "crash" else None)


def surviving_index_end(root: Path, layout: Layout) -> int | None:
    """Spec 4.3: on an abnormal restart the IndexFiles whose endTimestamp > checkpoint
    indexMsgTimestamp are deleted; the newest survivor's endPhyOffset is where re-dispatch
    re-indexes (only messages *below* it are skipped). Read with the spec layouts only."""
    ckpt = (root / "checkpoint").read_bytes()
    index_ts = I64.unpack_from(ckpt, 16)[0]
    best = None
    idir = root / "index"
    for name in sorted(os.listdir(idir)) if idir.is_dir() else []:
        with open(idir / name, "rb") as fh:
            _b, end_ts, _bp, end_phy, _sc, count = IDX_HEADER.unpack(fh.read(40))
        if count > 1 and end_ts <= index_ts:
            best = end_phy if best is None else max(best, end_phy)
    return best


async def write_store(
    root: Path,
    layout: Layout,
    flush: FlushDiskType | None,
    seed: int,
    min_files: int = 32,
    restarts: tuple[str, ...] = (),
) -> WrittenStore:
    """Write a store; `restarts` ("clean" / "crash") reopen it along the way, so the files also
    carry what recovery and the continued appends made of them."""
    rng = random.Random(seed)
    kw = {} if flush is None else {"flushDiskType": flush}
    cfg = MessageStoreConfig(
        storePathRootDir=str(root),
        mappedFileSizeCommitLog=layout.commitlog_file_size,
        mappedFileSizeConsumeQueue=layout.cq_file_size_configured,
        maxHashSlotNum=layout.hash_slot_num,
        maxIndexNum=layout.index_num,
        messageDelayLevel=layout.delay_levels,
        **kw,
    )
    n_levels = len(delay_levels_ms(layout.delay_levels))
    size = layout.commitlog_file_size
    t_start = time.time_ns() // 1_000_000
    st = MessageStore(cfg, store_host=("127.0.0.1", 10911))
    st.load()
    await st.start()
    msgs: dict[str, Written] = {}
    volume = 0
    seq = 0
    pending: list = []

    async def drain() -> None:
        results = await asyncio.gather(*pending)
        pending.clear()
        for r in results:
            assert r.status.name == "PUT_OK", f"put failed: {r.status} {getattr(r, 'remark', '')}"

    done_restarts: list[Restart] = []
    todo = list(restarts)
    step = min_files * size / (len(todo) + 1)
    try:
        while volume < min_files * size:
            if todo and volume >= step * (len(restarts) - len(todo) + 1):
                await drain()
                assert await st.reput.wait_caught_up(timeout=10)
                kind = todo.pop(0)
                if kind == "clean":
                    await st.shutdown()
                else:
                    st.close_after_crash_test()  # as if killed: `abort` stays, recovery is abnormal
                done_restarts.append(restart_point(root, layout, kind))
                st = MessageStore(cfg, store_host=("127.0.0.1", 10911))
                st.load()
                await st.start()
            seq += 1
            mid = str(seq)
            roll = rng.random()
            born, store = _hosts(rng)
            topic = rng.choice(TOPICS)
            qid = rng.randrange(QUEUES[topic])
            born_ts = time.time_ns() // 1_000_000 - rng.randint(0, 5000)
            # what the message (or batch) of this step is put with, whatever its kind
            where = {"topic": topic, "queue_id": qid, "born_timestamp": born_ts, "born_host": born, "store_host": store}
            if seq in BIG_SEQS:
                # near-limit records: exactly size - 8 (leaves exactly the 8-byte BLANK) or size - 9
                props = {"mid": mid, "UNIQ_KEY": _uniq(rng), "KEYS": f"big{mid} größe{mid}", "TAGS": "Большой"}
                pstr = spec_properties_string(props)
                sf = _host_flags(born, store)
                slack = BIG_SEQS[seq]
                blen = size - slack - spec_record_length(sf, 0, len(topic), len(pstr.encode("utf-8")))
                body = rng.randbytes(blen)
                w = Written(topic, qid, body, 0, sf, born_ts, born, store, 0, 0, props)
                msg = MessageExtBrokerInner(body=body, properties=dict(props), properties_string=pstr, **where)
                pending.append(st.put(msg))
                msgs[mid] = w
                volume += size
                continue
            if roll < 0.12:
                # a batch (spec 3.7: moves to the next file as a whole)
                n = rng.randint(2, 9)
                items = []
                for j in range(n):
                    imid = f"{mid}.{j}"
                    props = {"mid": imid, "bid": mid, **_props(rng, imid)}
                    raw = _odd_properties(rng, props)
                    props = parse_properties(raw)  # what a spec 3.4 reader makes of the raw string
                    body = _body(rng)
                    flag = rng.randint(INT_MIN, INT_MAX)
                    items.append(BatchItem(flag, body, raw))
                    sf = _host_flags(born, store)
                    msgs[imid] = Written(topic, qid, body, flag, sf, born_ts, born, store, 0, 0, props, batch=True)
                    volume += spec_record_length(sf, len(body), len(topic), len(items[-1].properties.encode()))
                pending.append(st.put_batch(MessageExtBatch(items=items, **where)))
                continue
            props = _props(rng, mid)
            body = _body(rng)
            flag = rng.randint(INT_MIN, INT_MAX)
            sysflag = 0
            if rng.random() < 0.1:
                body = zlib.compress(body or b"x", 5)
                sysflag |= 0x1  # COMPRESSED: the CRC covers the stored (compressed) bytes
            if rng.random() < 0.05:
                sysflag |= 0x2  # MULTI_TAGS
            tran = rng.choices([TRAN_NOT, TRAN_PREPARED, TRAN_COMMIT, TRAN_ROLLBACK], [70, 10, 10, 10])[0]
            sysflag |= tran
            if tran == TRAN_PREPARED:
                props.update({"TRAN_MSG": "true", "PGROUP": "pg"})
            if rng.random() < 0.12:
                props["DELAY"] = str(rng.choice([1, 2, n_levels, n_levels + 4]))
            elif rng.random() < 0.02:
                props["DELAY"] = "0"  # level 0: an ordinary message (spec 7.1: n > 0)
            reconsume = rng.randint(0, 16)
            prep_off = rng.randint(0, 2**40) if tran in (TRAN_COMMIT, TRAN_ROLLBACK) else 0
            msg = MessageExtBrokerInner(
                body=body,
                flag=flag,
                properties=dict(props),
                sys_flag=sysflag,
                reconsume_times=reconsume,
                prepared_transaction_offset=prep_off,
                **where,
            )
            sf = sysflag | _host_flags(born, store)
            exp_topic, exp_qid, exp_props = topic, qid, dict(props)
            if int(props.get("DELAY", "0")) > 0 and tran in (TRAN_NOT, TRAN_COMMIT):
                level = min(int(props["DELAY"]), n_levels)  # spec 7.1: clamped to the max level
                exp_topic, exp_qid = SCHEDULE_TOPIC, level - 1
                exp_props.update({"REAL_TOPIC": topic, "REAL_QID": str(qid)})
            msgs[mid] = Written(
                exp_topic, exp_qid, body, flag, sf, born_ts, born, store, reconsume, prep_off, exp_props
            )
            volume += spec_record_length(
                sf, len(body), len(exp_topic), 40 + len(spec_properties_string(exp_props).encode())
            )
            pending.append(st.put(msg))
            if len(pending) >= 64:
                await drain()
        await drain()
        assert await st.reput.wait_caught_up(timeout=10)
    finally:
        await st.shutdown()
    return WrittenStore(root, layout, msgs, t_start, time.time_ns() // 1_000_000, tuple(done_restarts))


def check_against_written(rep: Report, ws: WrittenStore) -> None:
    """Every message we sent is stored exactly once with the fields we sent (spec 3.2, 3.8, 7.1)."""
    seen: dict[str, Record] = {}
    for rec in rep.records:
        mid = rec.props.get("mid")
        if mid is None or mid not in ws.msgs:
            rep.add(f"{rec.where()}: record we never wrote (mid={mid!r}, topic {rec.topic})")
            continue
        if mid in seen:
            rep.add(f"{rec.where()}: message mid={mid} stored twice (also {seen[mid].where()})")
            continue
        seen[mid] = rec
        w = ws.msgs[mid]
        where = f"{rec.where()} mid={mid}"
        checks = [
            ("topic", rec.topic, w.topic),
            ("QUEUEID", rec.queue_id, w.queue_id),
            ("BODY", rec.body, w.body),
            ("FLAG", rec.flag, w.flag),
            ("SYSFLAG", rec.sysflag, w.sysflag),
            ("BORNTIMESTAMP", rec.born_ts, w.born_ts),
            ("BORNHOST", rec.born_host, w.born_host),
            ("STOREHOSTADDRESS", rec.store_host, w.store_host),
            ("RECONSUMETIMES", rec.reconsume_times, w.reconsume_times),
            ("PREPARED TRANSACTION OFFSET", rec.prepared_tx_offset, w.prepared_tx_offset),
        ]
        for name, got, want in checks:
            if got != want:
                g = got if not isinstance(got, bytes) or len(got) < 40 else f"<{len(got)} bytes>"
                x = want if not isinstance(want, bytes) or len(want) < 40 else f"<{len(want)} bytes>"
                rep.add(f"{where}: {name} {g!r} != written {x!r} (spec 3.2 / 3.8)")
        want_props = dict(w.props)
        got_props = dict(rec.props)
        if rec.topic == SCHEDULE_TOPIC and "DELAY" in got_props:
            # spec 7.1 clamps the level; accept the property as sent or as clamped
            n_levels = len(delay_levels_ms(ws.layout.delay_levels))
            if got_props["DELAY"] == str(min(int(want_props["DELAY"]), n_levels)):
                got_props["DELAY"] = want_props["DELAY"]
        if got_props != want_props:
            diff = {
                k: (got_props.get(k), want_props.get(k))
                for k in set(got_props) | set(want_props)
                if got_props.get(k) != want_props.get(k)
            }
            rep.add(f"{where}: properties differ from what was written (stored, written): {diff} (spec 3.4)")
        if not rec.store_ts or not ws.t_start_ms - 1000 <= rec.store_ts <= ws.t_end_ms + 1000:
            rep.add(
                f"{where}: STORETIMESTAMP {rec.store_ts} outside the write window "
                f"[{ws.t_start_ms}, {ws.t_end_ms}] (spec 3.8: set at append time)"
            )
    for mid in ws.msgs.keys() - seen.keys():
        w = ws.msgs[mid]
        rep.add(
            f"message mid={mid} ({w.topic}-{w.queue_id}, sysflag {w.sysflag:#x}) was written but is not in "
            f"the CommitLog"
        )


# =================================================================================================
# The tests
# =================================================================================================

# SYNC_FLUSH, tiny files: many BLANK rolls and CQ files, several index files
_TINY = Layout(
    commitlog_file_size=32 * 1024,
    cq_file_size_configured=20 * 50,
    hash_slot_num=64,
    index_num=200,
    delay_levels="1s 5s 10s",
)
STORES = {
    "sync-32KiB": (_TINY, FlushDiskType.SYNC_FLUSH, 1, ()),
    # ASYNC_FLUSH default, sizes that are not powers of two, a CQ size that must round up to 20,
    # very few slots (long chains), the default 18 delay levels
    "async-default-odd": (
        Layout(commitlog_file_size=40_000, cq_file_size_configured=20 * 37 + 7, hash_slot_num=7, index_num=150),
        None,
        2,
        (),
    ),
    # the first layout again, reopened twice: once cleanly, once after a simulated crash
    "sync-32KiB-restarted": (_TINY, FlushDiskType.SYNC_FLUSH, 3, ("clean", "crash")),
}


@pytest.mark.parametrize("name", list(STORES))
async def test_store_validates_with_independent_reader(tmp_path: Path, name: str) -> None:
    layout, flush, seed, restarts = STORES[name]
    ws = await write_store(tmp_path / "store", layout, flush, seed, restarts=restarts)
    rep = validate_store(ws.root, layout, strict=True, t_start_ms=ws.t_start_ms, restarts=ws.restarts)
    check_against_written(rep, ws)
    for note in rep.notes:
        print("note:", note)
    fail_with(rep, f"store {name!r} read back by the independent reader")
    # ... and the store really exercises what it should
    recs = rep.records
    assert len(rep.commitlog_files) >= 30, f"only {len(rep.commitlog_files)} CommitLog files"
    assert rep.blank_count >= 29
    assert len({r.topic for r in recs if r.topic in TOPICS}) >= 10
    assert any(r.topic == SCHEDULE_TOPIC for r in recs)
    assert {r.tran for r in recs} == {TRAN_NOT, TRAN_PREPARED, TRAN_COMMIT, TRAN_ROLLBACK}
    assert any(r.sysflag & SF_BORNHOST_V6 for r in recs) and any(r.sysflag & SF_STOREHOST_V6 for r in recs)
    assert any(not r.body for r in recs) and any(r.props.get("bid") for r in recs)
    assert any(r.total_size == layout.commitlog_file_size - 8 for r in recs)
    assert len(rep.index_files) >= 2 and rep.cq_files > 50


# =================================================================================================
# The reader itself: known Java values, and it must notice damage
# =================================================================================================


def test_reader_helpers_match_java() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == INT_MIN
    assert index_key_hash("polygenelubricants") == 0  # abs(MIN_VALUE) -> 0 (spec 4.3)
    assert java_string_hash("😀") == 31 * 0xD83D + 0xDE00  # two UTF-16 units, not one code point
    assert java_string_hash("标签") == 31 * 0x6807 + 0x7B7E
    assert parse_properties("a\x01b\x02c\x01d") == {"a": "b", "c": "d"}  # no trailing separator
    assert parse_properties("k\x01\x02\x01v\x02aaa\x02\x02x\x011\x02x\x012\x02") == {"x": "2"}
    assert delay_levels_ms(DEFAULT_DELAY_LEVELS)[-1] == 7_200_000 and len(delay_levels_ms(DEFAULT_DELAY_LEVELS)) == 18


def _poke(path: Path, off: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(off)
        fh.write(data)


async def test_reader_detects_damage(tmp_path: Path) -> None:
    layout = Layout(
        commitlog_file_size=16 * 1024,
        cq_file_size_configured=20 * 30,
        hash_slot_num=16,
        index_num=400,
        delay_levels="1s 5s 10s",
    )
    ws = await write_store(tmp_path / "clean", layout, FlushDiskType.SYNC_FLUSH, seed=7, min_files=5)
    base = validate_store(ws.root, layout, strict=True, t_start_ms=ws.t_start_ms)
    check_against_written(base, ws)
    fail_with(base, "clean store for the damage test")
    recs = base.records
    cl = lambda r: Path("commitlog") / r.file.split("/")[-1]  # noqa: E731
    normal = next(
        r
        for r in recs
        if r.tran == TRAN_NOT and r.body and r.topic != SCHEDULE_TOPIC and r.props.get("TAGS") and r.props.get("KEYS")
    )
    prepared = next(r for r in recs if r.tran == TRAN_PREPARED)
    sched = next(r for r in recs if r.topic == SCHEDULE_TOPIC)
    last = recs[-1]
    per_queue = Counter((r.topic, r.queue_id) for r in recs if r.dispatchable)
    head = next(r for r in recs if r.dispatchable and r.queue_offset == 0 and per_queue[(r.topic, r.queue_id)] >= 3)
    blank_file = Path("commitlog") / base.commitlog_files[0]
    blank_pos = max(r.pos + r.total_size for r in recs if r.file.endswith(base.commitlog_files[0]))

    def cq_path(r: Record) -> tuple[Path, int]:
        n = r.queue_offset * 20
        fs = layout.cq_file_size
        return Path("consumequeue") / r.topic / str(r.queue_id) / f"{n - n % fs:020d}", n % fs

    idx = Path("index") / base.index_files[0]
    e1 = 40 + 16 * 4 + 20  # entry 1
    now = time.time_ns() // 1_000_000
    damages = {
        "BODYCRC": (
            cl(normal),
            normal.pos + 84 + 20 * bool(normal.sysflag & 0x10) + 12 * bool(normal.sysflag & 0x20) + 4 + 0,
            bytes([normal.body[0] ^ 0xFF]),
        ),
        "PHYSICALOFFSET": (cl(normal), normal.pos + 28, I64.pack(normal.phys + 1)),
        "QUEUEOFFSET 7, expected 0": (cl(prepared), prepared.pos + 20, I64.pack(7)),
        "BLANK size": (blank_file, blank_pos, I32.pack(layout.commitlog_file_size - blank_pos - 1)),
        "TOTALSIZE": (cl(normal), normal.pos, I32.pack(normal.total_size + 1)),
        "non-zero byte": (cl(last), layout.commitlog_file_size - 1, b"\x01"),
        "MAGICCODE": (cl(normal), normal.pos + 4, I32.pack(MAGIC_V2)),
        "tag code": (cq_path(normal)[0], cq_path(normal)[1] + 12, I64.pack(java_string_hash("other"))),
        "store time + level delay": (cq_path(sched)[0], cq_path(sched)[1] + 12, I64.pack(sched.store_ts + 999)),
        "size": (cq_path(normal)[0], cq_path(normal)[1] + 8, I32.pack(normal.total_size - 1)),
        "is not the start of a record": (cq_path(normal)[0], cq_path(normal)[1], I64.pack(normal.phys + 4)),
        "after the last valid unit": (cq_path(head)[0], cq_path(head)[1], bytes(20)),
        "consecutive from 0": (cl(normal), normal.pos + 20, I64.pack(normal.queue_offset + 1)),
        "timeDiff": (idx, e1 + 20 * 3 + 12, I32.pack(99)),
        "is not an earlier entry": (idx, e1 + 20 * 5 + 16, I32.pack(6)),
        "matches none": (idx, e1 + 20 * 2, I32.pack(12345)),
        "hashSlotCount": (idx, 32, I32.pack(1)),
        "most recent entry": (idx, 40, I32.pack(0)),
        "physicMsgTimestamp": (Path("checkpoint"), 0, I64.pack(now + 3_600_000)),
    }
    missed = []
    for i, (expect, (rel, off, data)) in enumerate(damages.items()):
        root = tmp_path / f"d{i}"
        shutil.copytree(ws.root, root)
        _poke(root / rel, off, data)
        rep = validate_store(root, layout, strict=True, t_start_ms=ws.t_start_ms)
        if not any(expect in f for f in rep.findings):
            missed.append(f"{expect!r} ({rel} @ {off}): got {rep.findings[:3]}")
    # structural damage: a truncated CQ file, a lost CQ unit
    root = tmp_path / "trunc"
    shutil.copytree(ws.root, root)
    p, _ = cq_path(normal)
    os.truncate(root / p, layout.cq_file_size - 20)
    rep = validate_store(root, layout, strict=True, t_start_ms=ws.t_start_ms)
    if not any("length" in f and "configured CQ file size" in f for f in rep.findings):
        missed.append(f"truncated CQ file: {rep.findings[:3]}")
    assert not missed, "the independent reader missed damage:\n  " + "\n  ".join(missed)
