"""One queue's units -> ConsumeQueue files as the broker would have written them, and the
unit-by-unit comparison with an existing consumequeue/ directory (`--verify`).

The broker writes a queue's units in dispatch order (CommitLog order) with
ConsumeQueue.put_message_position_info's rules; `layout_queue` applies the same rules
to the units in the same order, so gaps, duplicates and a first offset other than 0 come
out as the broker's files do (tests/spark/test_cq_files.py feeds both the same units).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from rmq.store.cq_codec import BLANK_UNIT_SIZE, CQ_STORE_UNIT_SIZE, CQ_UNIT_DTYPE

_UNIT = CQ_STORE_UNIT_SIZE


@dataclass
class QueueLayout:
    """The queue's units from `start` (a file boundary, in bytes): `blanks` back-fill
    units, then the real ones."""

    start: int
    units: np.ndarray  # CQ_UNIT_DTYPE (big-endian, as on disk)
    blanks: int
    anomalies: int = 0  # units the broker's rules skip or place off their offset

    @property
    def end(self) -> int:
        return self.start + self.units.shape[0] * _UNIT

    @property
    def min_offset(self) -> int:
        """Logical offset of the first real unit."""
        return self.start // _UNIT + self.blanks

    @property
    def max_offset(self) -> int:
        """The next logical offset (ConsumeQueue.get_max_offset_in_queue)."""
        return self.end // _UNIT


def layout_queue(rows: np.ndarray, file_size: int) -> QueueLayout:
    """rows: spark.scan.UNIT_ROW records of one queue, in CommitLog order."""
    n = rows.shape[0]
    qoff = rows["qoff"]
    if n and (n == 1 or bool(np.all(np.diff(qoff) == 1))) and qoff[0] >= 0:
        # The normal case: consecutive offsets, nothing to skip (records never overlap,
        # so no unit is "built before").
        expect = int(qoff[0]) * _UNIT
        start = expect - expect % file_size
        blanks = (expect - start) // _UNIT if expect else 0
        units = np.empty(blanks + n, dtype=CQ_UNIT_DTYPE)
        units["phy_offset"][:blanks] = 0
        units["size"][:blanks] = BLANK_UNIT_SIZE
        units["tags_code"][:blanks] = 0
        units["phy_offset"][blanks:] = rows["phy"]
        units["size"][blanks:] = rows["size"]
        units["tags_code"][blanks:] = rows["tags"]
        return QueueLayout(start, units, blanks)
    return _layout_slow(rows, file_size)


def _layout_slow(rows: np.ndarray, file_size: int) -> QueueLayout:
    """put_message_position_info, unit by unit (rmq/store/consume_queue.py)."""
    out: list[tuple[int, int, int]] = []
    max_phy = -1
    start = cur = -1
    blanks = anomalies = 0
    for qoff, phy, size, tags in zip(
        rows["qoff"].tolist(), rows["phy"].tolist(), rows["size"].tolist(), rows["tags"].tolist(), strict=True
    ):
        if phy + size <= max_phy:
            anomalies += 1
            continue  # built before
        expect = qoff * _UNIT
        if start < 0:
            # the queue's first file: where its first unit belongs
            start = cur = expect - expect % file_size
            if qoff != 0:
                blanks = (expect % file_size) // _UNIT
                out.extend([(0, BLANK_UNIT_SIZE, 0)] * blanks)
                cur += blanks * _UNIT
        if qoff != 0:
            if expect < cur:
                anomalies += 1
                continue  # "build consume queue repeatedly"
            if expect != cur:
                anomalies += 1  # the broker logs a [BUG] and writes it here
        out.append((phy, size, tags))
        cur += _UNIT
        max_phy = phy + size
    units = np.array(out, dtype=CQ_UNIT_DTYPE) if out else np.empty(0, CQ_UNIT_DTYPE)
    return QueueLayout(max(start, 0), units, blanks, anomalies)


def file_name(offset: int) -> str:
    """20-digit zero-padded start offset, as the broker names its files."""
    return f"{offset:020d}"


def queue_dir(root: str, topic: str, queue_id: int) -> str:
    return os.path.join(root, topic, str(queue_id))


def write_queue(root: str, topic: str, queue_id: int, layout: QueueLayout, file_size: int) -> int:
    """Write the queue's files under root (a consumequeue/ directory); returns how many.

    Every file has the full configured size, as the broker requires on load; the part
    after the last unit is a hole (zeros).
    """
    d = queue_dir(root, topic, queue_id)
    os.makedirs(d, exist_ok=True)
    data = layout.units.tobytes()
    n = 0
    pos = layout.start
    i = 0
    while i < len(data):
        chunk = data[i : i + file_size]
        fd = os.open(os.path.join(d, file_name(pos)), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            written = 0
            while written < len(chunk):
                written += os.write(fd, chunk[written:])
            os.ftruncate(fd, file_size)
        finally:
            os.close(fd)
        n += 1
        i += file_size
        pos += file_size
    return n


# ----------------------------------------------------------------------------- verify
@dataclass
class QueueDiff:
    """How an existing queue differs from the rebuilt one."""

    topic: str
    queue_id: int
    count: int  # units that differ
    first_offset: int  # logical offset of the first one
    existing: tuple[int, int, int] | None  # (phy, size, tags) there, None: no file
    rebuilt: tuple[int, int, int] | None  # None: the rebuild has no unit there
    file: str  # the existing file holding it ("" if none)
    file_pos: int  # byte position of the unit in that file

    def describe(self) -> str:
        def unit(u: tuple[int, int, int] | None, none: str) -> str:
            return none if u is None else f"(phy={u[0]} size={u[1]} tags={u[2]})"

        where = f"{self.file} byte {self.file_pos}" if self.file else "no file"
        return (
            f"{self.topic} queue {self.queue_id}: {self.count} unit(s) differ; first at "
            f"offset {self.first_offset} ({where}): existing "
            f"{unit(self.existing, 'missing')}, rebuilt {unit(self.rebuilt, 'none')}"
        )


def read_existing(d: str, file_size: int) -> dict[int, np.ndarray]:
    """The queue's files in d by start offset, as units (a short file reads as zeros
    after its end; bytes past the configured size are ignored)."""
    out: dict[int, np.ndarray] = {}
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return out
    for name in names:
        if len(name) != 20 or not name.isdigit():
            continue
        buf = np.zeros(file_size, dtype=np.uint8)
        with open(os.path.join(d, name), "rb") as f:
            got = f.readinto(buf.data)
        del got
        out[int(name)] = buf.view(CQ_UNIT_DTYPE)
    return out


def verify_queue(
    existing_root: str, topic: str, queue_id: int, layout: QueueLayout | None, file_size: int, commitlog_min: int
) -> QueueDiff | None:
    """Compare the rebuilt layout (None: the rebuild has no units for this queue) with
    existing_root/<topic>/<queue_id>/, unit by unit.

    A rebuilt unit must be in the existing files; past the rebuilt end they must hold
    zeros (file length and zero padding are not differences). Where the rebuild has
    back-fill blanks, or nothing before its first file, the existing files may hold
    anything except a unit for a message the rebuild read (at or after commitlog_min):
    the broker's older units there point at CommitLog files that were deleted.
    """
    existing = read_existing(queue_dir(existing_root, topic, queue_id), file_size)
    per_file = file_size // _UNIT
    if layout is None:
        start = end = 1 << 62
        blank_end = start
        units = np.empty(0, CQ_UNIT_DTYPE)
    else:
        start, end, units = layout.start, layout.end, layout.units
        blank_end = start + layout.blanks * _UNIT
    rebuilt_files = set(range(start, end, file_size)) if layout is not None else set()
    count = 0
    first: QueueDiff | None = None
    for fs in sorted(set(existing) | rebuilt_files):
        e = existing.get(fs)
        present = e is not None
        if e is None:
            e = np.zeros(per_file, dtype=CQ_UNIT_DTYPE)
        vpos = fs + np.arange(per_file, dtype=np.int64) * _UNIT
        r = np.zeros(per_file, dtype=CQ_UNIT_DTYPE)
        lo = max(start, fs)
        hi = min(end, fs + file_size)
        if lo < hi:
            r[(lo - fs) // _UNIT : (hi - fs) // _UNIT] = units[(lo - start) // _UNIT : (hi - start) // _UNIT]
        real = (vpos >= blank_end) & (vpos < end)
        e_size = e["size"].astype(np.int64)
        live = (e_size > 0) & (e_size != BLANK_UNIT_SIZE) & (e["phy_offset"].astype(np.int64) >= commitlog_min)
        same = e == r
        diff = np.where(real, ~same | (not present), np.where(vpos >= end, e != np.zeros(1, CQ_UNIT_DTYPE), live))
        k = int(np.count_nonzero(diff))
        if not k:
            continue
        count += k
        if first is None:
            i = int(np.flatnonzero(diff)[0])
            first = QueueDiff(
                topic,
                queue_id,
                0,
                int(vpos[i]) // _UNIT,
                _unit(e[i]) if present else None,
                _unit(r[i]) if start <= vpos[i] < end else None,
                file_name(fs) if present else "",
                i * _UNIT,
            )
    if first is not None:
        first.count = count
    return first


def _unit(u: np.void) -> tuple[int, int, int]:
    return int(u["phy_offset"]), int(u["size"]), int(u["tags_code"])


def existing_queues(existing_root: str) -> list[tuple[str, int]]:
    """(topic, queue id) of every queue directory under existing_root."""
    out: list[tuple[str, int]] = []
    try:
        topics = os.listdir(existing_root)
    except FileNotFoundError:
        return out
    for t in topics:
        td = os.path.join(existing_root, t)
        if not os.path.isdir(td):
            continue
        for q in os.listdir(td):
            try:
                qid = int(q)
            except ValueError:
                continue
            if os.path.isdir(os.path.join(td, q)):
                out.append((t, qid))
    return out
