"""ConsumeQueue: one logical queue as 20-byte units pointing into the CommitLog (spec 4.1)."""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from rmq.store.cq_codec import BLANK_UNIT, BLANK_UNIT_SIZE, CQ_STORE_UNIT_SIZE, CQ_UNIT, CQ_UNIT_DTYPE
from rmq.store.mapped_file import FlushPlan, MappedFile, MappedFileQueue, TruncatePlan, destroy_now

if TYPE_CHECKING:
    from rmq.protocol.record import DispatchRequest

log = logging.getLogger("rmq.store.consumequeue")

_UNIT = CQ_UNIT


_ZERO_UNIT = bytes(CQ_STORE_UNIT_SIZE)
# Units written by one pwrite at most (put_units). A write of many units puts the first
# unit's offset and size in last (write_size_last), so a torn one reads as ending before
# its first unit; its later units may be there, behind a unit that reads all-zero when
# its tag code is 0: truncation zeroes at least this far.
MAX_UNITS_PER_WRITE = 4096


def _dirty_units_end(mf: MappedFile, pos: int) -> int:
    """How far stale units can reach past pos: written back to back, they end at the
    first all-zero unit, or a torn write of up to MAX_UNITS_PER_WRITE units."""
    mm = mf.mm
    end = mf.file_size
    start = pos
    while pos + CQ_STORE_UNIT_SIZE <= end and mm[pos : pos + CQ_STORE_UNIT_SIZE] != _ZERO_UNIT:
        pos += CQ_STORE_UNIT_SIZE
    return max(pos, min(end, start + MAX_UNITS_PER_WRITE * CQ_STORE_UNIT_SIZE))


# units a recovery looks at in one numpy step
_RECOVER_CHUNK = 1 << 16


def _valid_units(mm: mmap.mmap, size: int) -> tuple[int, int]:
    """Recovery's look at one file: (bytes of valid units from its start -- a unit is
    valid when its offset is >= 0 and its size > 0 --, end offset+size of the last valid
    unit that is not a BLANK_UNIT's, -1 if none), in numpy chunks."""
    pos = 0
    ext = -1
    step = _RECOVER_CHUNK * CQ_STORE_UNIT_SIZE
    while pos < size:
        n = min(step, size - pos) // CQ_STORE_UNIT_SIZE
        if n == 0:
            break
        units = np.frombuffer(mm, dtype=CQ_UNIT_DTYPE, count=n, offset=pos)
        try:
            off = units["phy_offset"].astype(np.int64)
            sz = units["size"].astype(np.int64)
        finally:
            del units
        bad = (off < 0) | (sz <= 0)
        k = int(np.argmax(bad)) if bool(bad.any()) else n
        real = np.flatnonzero(sz[:k] != BLANK_UNIT_SIZE)
        if real.size:
            last = int(real[-1])
            ext = int(off[last]) + int(sz[last])
        pos += k * CQ_STORE_UNIT_SIZE
        if k < n:
            break
    return pos, ext


class UnitsWriteError(OSError):
    """Writing units failed after `done` requests of the batch were written."""

    def __init__(self, done: int, cause: OSError) -> None:
        super().__init__(cause.errno, str(cause))
        self.done = done


class ConsumeQueue:
    """Units are (commit-log offset int64, size int32, tag code int64), big-endian."""

    def __init__(self, topic: str, queue_id: int, root_dir: str, mapped_file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.store_path = os.path.join(root_dir, topic, str(queue_id))
        self.mapped_file_size = mapped_file_size
        # CQ files are created lazily (the first unit creates the first file) and sparse,
        # as RocketMQ's are: a topic with 1024 queues must not reserve 6 GB up front.
        # Sparse files are written with pwrite (see MappedFile.sparse).
        self.mfq = MappedFileQueue(self.store_path, mapped_file_size, preallocate=False)
        self.max_physic_offset = -1  # end (offset + size) of the last unit written
        self.min_logic_offset = 0  # bytes
        self._units_done = 0  # progress of put_units (for UnitsWriteError)

    # --- load / recover ---
    def load(self) -> None:
        self.mfq.load()

    def recover(self) -> None:
        """Find the last valid unit, starting at the third-last file (spec 4.1.2)."""
        files = self.mfq.mapped_files
        if not files:
            return
        index = max(len(files) - 3, 0)
        size = self.mapped_file_size
        mf = files[index]
        process_offset = mf.file_from_offset
        file_offset = 0
        max_ext = -1
        while True:
            pos, ext = _valid_units(mf.mm, size)
            file_offset = pos
            if ext >= 0:
                max_ext = ext
            if pos == size:
                index += 1
                if index >= len(files):
                    break
                mf = files[index]
                process_offset = mf.file_from_offset
                file_offset = 0
                continue
            break
        process_offset += file_offset
        self.mfq.flushed_where = process_offset
        self.mfq.committed_where = process_offset
        self.mfq.truncate_dirty_files(process_offset, _dirty_units_end)
        self.max_physic_offset = max_ext

    # --- write path (dispatch) ---
    def put_message_position_info(self, offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """Append one unit at logical offset cq_offset; idempotent for re-dispatch."""
        if offset + size <= self.max_physic_offset:
            return True  # built before (re-dispatch after recovery)
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        mfq = self.mfq
        first_create = not mfq.mapped_files
        mf = mfq.get_last_mapped_file_for_write(expect)
        if first_create and cq_offset != 0 and mf.wrote_position == 0:
            self.min_logic_offset = expect
            mfq.flushed_where = mfq.committed_where = expect
            self._fill_pre_blank(mf, expect)
            log.info(
                "consume queue %s-%d starts at logical offset %d; back-filled blanks",
                self.topic,
                self.queue_id,
                cq_offset,
            )
        if cq_offset != 0:
            current = mf.file_from_offset + mf.wrote_position
            if expect < current:
                log.warning(
                    "build consume queue repeatedly: topic=%s queue=%d expect=%d current=%d",
                    self.topic,
                    self.queue_id,
                    expect,
                    current,
                )
                return True
            if expect != current:
                log.error(
                    "[BUG] logic queue order maybe wrong: topic=%s queue=%d expect=%d current=%d diff=%d",
                    self.topic,
                    self.queue_id,
                    expect,
                    current,
                    expect - current,
                )
        mf.append(_UNIT.pack(offset, size, tags_code), 12)
        self.max_physic_offset = offset + size
        return True

    def put_units(self, reqs: Sequence[DispatchRequest]) -> int:
        """put_message_position_info for each request of this queue, in order, with one
        pwrite per run of consecutive units in one file (dispatch hands a queue's units
        over in runs: one per dispatch batch). A failed write raises UnitsWriteError
        saying how many requests were done; a retry from there is safe (units already
        written are skipped as built before)."""
        n = len(reqs)
        try:
            self._put_units(reqs, n)
        except OSError as e:
            raise UnitsWriteError(self._units_done, e) from e
        return n

    def _put_units(self, reqs: Sequence[DispatchRequest], n: int) -> None:
        i = self._units_done = 0
        pack = _UNIT.pack
        mfq = self.mfq
        while i < n:
            self._units_done = i
            req = reqs[i]
            off = req.commit_log_offset
            size = req.msg_size
            cq_offset = req.consume_queue_offset
            if off + size <= self.max_physic_offset:
                i += 1
                continue  # built before (re-dispatch after recovery)
            if cq_offset != 0 and mfq.mapped_files:
                last = mfq.mapped_files[-1]
                if not last.is_full() and cq_offset * CQ_STORE_UNIT_SIZE != last.file_from_offset + last.wrote_position:
                    # not the next unit: the one-by-one path logs and decides
                    self.put_message_position_info(off, size, req.tags_code, cq_offset)
                    i += 1
                    continue
            if not mfq.mapped_files or mfq.mapped_files[-1].is_full():
                # a new file (and, for a new queue, its blank head): one by one too
                self.put_message_position_info(off, size, req.tags_code, cq_offset)
                i += 1
                continue
            mf = mfq.mapped_files[-1]
            room = min((mf.file_size - mf.wrote_position) // CQ_STORE_UNIT_SIZE, MAX_UNITS_PER_WRITE)
            units = [pack(off, size, req.tags_code)]
            max_phy = off + size
            # the next unit lands right after: it joins the run if that is where it
            # belongs and it is not one built before (else the one-by-one path decides)
            nxt = (mf.file_from_offset + mf.wrote_position) // CQ_STORE_UNIT_SIZE + 1
            j = i + 1
            while j < n and j - i < room:
                r = reqs[j]
                o = r.commit_log_offset
                if r.consume_queue_offset != nxt or o + r.msg_size <= max_phy:
                    break
                units.append(pack(o, r.msg_size, r.tags_code))
                max_phy = o + r.msg_size
                nxt += 1
                j += 1
            mf.append(b"".join(units) if j - i > 1 else units[0], 12)
            self.max_physic_offset = max_phy
            i = j
        return

    def _fill_pre_blank(self, mf: MappedFile, until_where: int) -> None:
        n = (until_where % self.mapped_file_size) // CQ_STORE_UNIT_SIZE
        if n:
            mf.append(BLANK_UNIT * n, 12)

    # --- read path ---
    def get_min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def get_max_offset_in_queue(self) -> int:
        return self.mfq.get_max_offset() // CQ_STORE_UNIT_SIZE

    def get_index_buffer(self, start_index: int) -> tuple[MappedFile, int, int] | None:
        """(file, first byte, end byte) of the readable units from start_index within one file."""
        offset = start_index * CQ_STORE_UNIT_SIZE
        if offset < self.min_logic_offset:
            return None
        mf = self.mfq.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        end = mf.wrote_position
        if pos >= end:
            return None
        return mf, pos, end

    def read_unit(self, index: int) -> tuple[int, int, int] | None:
        got = self.get_index_buffer(index)
        if got is None:
            return None
        mf, pos, _ = got
        return _UNIT.unpack_from(mf.mm, pos)

    def iter_units(self, start_index: int) -> Iterator[tuple[int, int, int, int]]:
        """(logical offset, phy offset, size, tag code) from start_index to the end."""
        idx = max(start_index, self.get_min_offset_in_queue())
        while True:
            got = self.get_index_buffer(idx)
            if got is None:
                return
            mf, pos, end = got
            mm = mf.mm
            while pos < end:
                off, sz, tag = _UNIT.unpack_from(mm, pos)
                yield idx, off, sz, tag
                idx += 1
                pos += CQ_STORE_UNIT_SIZE

    def roll_next_file(self, index: int) -> int:
        """The first logical offset of the file after the one holding index."""
        per_file = self.mapped_file_size // CQ_STORE_UNIT_SIZE
        return index + per_file - index % per_file

    def get_last_offset(self) -> int:
        """Commit-log offset just past the last unit's message (-1 when empty)."""
        return self.max_physic_offset

    # --- maintenance ---
    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop every unit whose message starts at or beyond phy_offset."""
        mfq = self.mfq
        while mfq.mapped_files:
            mf = mfq.mapped_files[-1]
            mm = mf.mm
            first_off = _UNIT.unpack_from(mm, 0)[0]
            if first_off >= phy_offset:
                mfq.delete_last_mapped_file()
                continue
            pos = CQ_STORE_UNIT_SIZE
            while pos < self.mapped_file_size:
                off, sz, _ = _UNIT.unpack_from(mm, pos)
                if off < 0 or sz <= 0 or off >= phy_offset:
                    break
                pos += CQ_STORE_UNIT_SIZE
            # truncate_dirty_files zeroes the dropped tail, so a later recovery scan
            # cannot take stale units for valid ones.
            mfq.truncate_dirty_files(mf.file_from_offset + pos, _dirty_units_end)
            break
        self.max_physic_offset = -1
        if mfq.mapped_files:
            self._recompute_max_physic_offset()
        else:
            self.min_logic_offset = 0
            mfq.flushed_where = mfq.committed_where = 0

    def first_unit_at_or_beyond(self, phy_offset: int) -> int:
        """Byte position (queue address space) of the first unit whose message starts
        at or beyond phy_offset; the queue's end if there is none. Units are in
        CommitLog order (back-filled blanks point at 0), so each file is a binary
        search, and only the files at the end are looked at."""
        files = self.mfq.mapped_files
        cut = files[-1].file_from_offset + files[-1].wrote_position if files else 0
        for mf in reversed(files):
            mm = mf.mm
            n = mf.wrote_position // CQ_STORE_UNIT_SIZE
            if n and _UNIT.unpack_from(mm, 0)[0] < phy_offset:
                lo, hi = 1, n
                while lo < hi:
                    mid = (lo + hi) // 2
                    if _UNIT.unpack_from(mm, mid * CQ_STORE_UNIT_SIZE)[0] >= phy_offset:
                        hi = mid
                    else:
                        lo = mid + 1
                return mf.file_from_offset + lo * CQ_STORE_UNIT_SIZE
            cut = mf.file_from_offset
        return cut

    def truncate_plan(self, phy_offset: int) -> tuple[TruncatePlan, bool]:
        """Drop every unit whose message starts at or beyond phy_offset, bookkeeping
        only (the plan does the I/O). Returns (plan, emptied): emptied means no unit a
        consumer could read is left, the whole queue goes (files and directory) and
        the caller forgets it."""
        cut = self.first_unit_at_or_beyond(phy_offset)
        if cut <= self.min_logic_offset:
            self.max_physic_offset = -1
            self.min_logic_offset = 0
            plan = self.mfq.detach_all()
            plan.dirs.append(os.path.dirname(self.store_path))  # the topic's, if now empty
            return plan, True
        plan = self.mfq.detach_from(cut)
        self.max_physic_offset = -1
        self._recompute_max_physic_offset()
        return plan, False

    def _recompute_max_physic_offset(self) -> None:
        mf = self.mfq.mapped_files[-1]
        if mf.wrote_position >= CQ_STORE_UNIT_SIZE:
            off, sz, _ = _UNIT.unpack_from(mf.mm, mf.wrote_position - CQ_STORE_UNIT_SIZE)
            if sz != 0x7FFFFFFF:
                self.max_physic_offset = off + sz

    def correct_min_offset(self, phy_min_offset: int) -> None:
        """min logical offset := first unit whose message is still in the CommitLog (4.1.3)."""
        files = self.mfq.mapped_files
        if not files:
            return
        for mf in files:
            mm = mf.mm
            n = mf.wrote_position // CQ_STORE_UNIT_SIZE
            # binary search for the first unit with phy >= phy_min_offset (blanks have phy 0)
            lo, hi = 0, n
            while lo < hi:
                mid = (lo + hi) // 2
                off, sz, _ = _UNIT.unpack_from(mm, mid * CQ_STORE_UNIT_SIZE)
                if off >= phy_min_offset and sz != 0x7FFFFFFF:
                    hi = mid
                else:
                    lo = mid + 1
            if lo < n:
                new_min = mf.file_from_offset + lo * CQ_STORE_UNIT_SIZE
                if new_min != self.min_logic_offset:
                    log.info(
                        "consume queue %s-%d: min logical offset %d -> %d",
                        self.topic,
                        self.queue_id,
                        self.min_logic_offset // CQ_STORE_UNIT_SIZE,
                        new_min // CQ_STORE_UNIT_SIZE,
                    )
                self.min_logic_offset = new_min
                return
        # Every unit points below the CommitLog minimum: the queue is logically empty.
        self.min_logic_offset = self.mfq.get_max_offset()

    def delete_expired_file(self, min_commit_log_offset: int) -> int:
        """Delete leading files whose last unit points below the CommitLog minimum."""
        return destroy_now(self.detach_expired_files(min_commit_log_offset))

    def detach_expired_files(self, min_commit_log_offset: int) -> list[MappedFile]:
        """Take leading files (never the last) whose last unit points below the CommitLog
        minimum out of the queue, and correct the min offset (always: a queue whose one
        file is all below the minimum must still read as starting past it). The caller
        deletes the returned files, off the event loop (cleanup.destroy_files)."""
        n = 0
        files = self.mfq.mapped_files
        for mf in files[:-1]:
            last = mf.wrote_position - CQ_STORE_UNIT_SIZE
            if last < 0:
                break
            off, sz, _ = _UNIT.unpack_from(mf.mm, last)
            if off + sz <= min_commit_log_offset and sz != 0x7FFFFFFF:
                n += 1
            else:
                break
        doomed = self.mfq.detach_first(n)
        self.correct_min_offset(min_commit_log_offset)
        return doomed

    def get_offset_in_queue_by_time(
        self, timestamp: int, store_time_of: Callable[[int, int], int], boundary: str | None = None
    ) -> int:
        """Logical offset for a store timestamp (spec 4.1.4).

        boundary None: 4.x nearest neighbour (ties to the left, clamped to the queue);
        "LOWER": smallest offset with store time >= timestamp (max offset if none);
        "UPPER": largest offset with store time <= timestamp.
        """
        lo = self.get_min_offset_in_queue()
        hi = self.get_max_offset_in_queue() - 1
        if hi < lo:
            return 0 if hi < 0 else lo

        def time_at(i: int) -> int:
            u = self.read_unit(i)
            if u is None:
                return -1
            return store_time_of(u[0], u[1])

        # first offset with time >= timestamp
        a, b = lo, hi + 1
        while a < b:
            mid = (a + b) // 2
            t = time_at(mid)
            if t < 0:
                # the message is gone (CommitLog file deleted): treat as too old
                a = mid + 1
            elif t < timestamp:
                a = mid + 1
            else:
                b = mid
        first_ge = a
        if boundary is not None and boundary.upper() == "UPPER":
            if first_ge <= hi and time_at(first_ge) == timestamp:
                # move to the last offset with exactly this time
                c, d = first_ge, hi + 1
                while c < d:
                    mid = (c + d) // 2
                    if time_at(mid) <= timestamp:
                        c = mid + 1
                    else:
                        d = mid
                return c - 1
            return max(first_ge - 1, lo)
        if boundary is not None and boundary.upper() == "LOWER":
            return first_ge if first_ge <= hi else hi + 1
        # 4.x: exact match wins; else the nearer neighbour, ties to the left
        if first_ge > hi:
            return hi
        t_right = time_at(first_ge)
        if t_right == timestamp or first_ge == lo:
            return first_ge
        t_left = time_at(first_ge - 1)
        return first_ge - 1 if timestamp - t_left <= t_right - timestamp else first_ge

    # --- flush / lifetime ---
    def flush_plan(self, least_pages: int) -> FlushPlan | None:
        return self.mfq.flush_plan(least_pages)

    def shutdown(self) -> None:
        self.mfq.shutdown(delete_unused_tail=False)

    def destroy(self) -> None:
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        self.mfq.destroy()
        try:
            os.rmdir(os.path.dirname(self.store_path))
        except OSError:
            pass
