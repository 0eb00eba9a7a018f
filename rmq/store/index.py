"""IndexFile and IndexService: the message-key hash index (spec 4.3).

One IndexFile is a fixed-size mapped file: a 40-byte header, `hashSlotNum` int32 slots
and `indexNum` 20-byte entries. A slot holds the number of the newest entry whose key
hashes to it; each entry links to the previous entry of the same slot, so a lookup walks
one chain newest -> oldest. Entry 0 is never used, which is why `indexCount` starts at 1.

Threading: everything here belongs to the event-loop thread, except the fdatasync of a
full file, which the caller runs in a worker between `take_full_unflushed()` and
`on_flushed()`; the mapping stays alive through `MappedFile.hold()/release()`.

Hot path: `IndexService.build_index_batch` hashes every key of a dispatch batch at once
with numpy and writes the batch's entries and slots with array operations; the bytes are
the same as putting the keys one by one (tests/unit/store/test_index.py proves it).
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rmq.protocol.message import SysFlag
from rmq.protocol.record import DispatchRequest
from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.config import MessageStoreConfig
from rmq.store.errors import StoreError
from rmq.store.index_codec import (  # noqa: F401  (re-exported: tests, bench)
    ENTRY_DTYPE,
    FILE_NAME_LENGTH,
    HASH_SLOT_SIZE,
    INDEX_HEADER_SIZE,
    INDEX_SIZE,
    INT_MAX,
    INVALID_INDEX,
    index_file_size,
    index_key_hash,
    index_key_hashes,
    put_hashes,
)
from rmq.store.index_codec import INDEX_ENTRY as _ENTRY
from rmq.store.index_codec import INDEX_HEADER as _HEADER
from rmq.store.index_codec import SLOT as _SLOT
from rmq.store.index_codec import format_file_name as _format_file_name
from rmq.store.index_codec import time_diff as _time_diff
from rmq.store.mapped_file import MappedFile, TruncatePlan, destroy_now

log = logging.getLogger("rmq.store.index")

_Q = struct.Struct(">q")

_ROLLBACK = SysFlag.TRANSACTION_ROLLBACK_TYPE


class IndexFile:
    """One index file: header + hash slots + chained 20-byte entries (spec 4.3)."""

    def __init__(self, mapped_file: MappedFile, hash_slot_num: int, index_num: int) -> None:
        self.mapped_file = mapped_file
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self._mm = mapped_file.mm
        self._entries_base = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        self.begin_timestamp = 0
        self.end_timestamp = 0
        self.begin_phy_offset = 0
        self.end_phy_offset = 0
        self.hash_slot_count = 0
        self.index_count = 1
        self.destroyed = False

    # --- opening ---
    @classmethod
    def create(
        cls, path: str, hash_slot_num: int, index_num: int, end_phy_offset: int = 0, end_timestamp: int = 0
    ) -> IndexFile:
        """A new, empty file, seeded with the previous file's end offset/timestamp."""
        mf = MappedFile.create(path, index_file_size(hash_slot_num, index_num))
        f = cls(mf, hash_slot_num, index_num)
        # RocketMQ seeds only positive values; a zero seed leaves the field at 0.
        if end_phy_offset > 0:
            f.begin_phy_offset = f.end_phy_offset = end_phy_offset
        if end_timestamp > 0:
            f.begin_timestamp = f.end_timestamp = end_timestamp
        f._write_header()
        return f

    @classmethod
    def load(cls, path: str, hash_slot_num: int, index_num: int) -> IndexFile:
        """Map an existing file and read its header. StoreError if the size is wrong."""
        expected = index_file_size(hash_slot_num, index_num)
        actual = os.path.getsize(path)
        if actual != expected:
            raise StoreError(
                f"index file {path}: length {actual} differs from {expected} = 40 + "
                f"maxHashSlotNum({hash_slot_num})*4 + maxIndexNum({index_num})*20; "
                "check maxHashSlotNum/maxIndexNum in the config"
            )
        mf = MappedFile.open_existing(path, expected)
        f = cls(mf, hash_slot_num, index_num)
        (f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset, f.hash_slot_count, f.index_count) = (
            _HEADER.unpack_from(f._mm, 0)
        )
        if f.index_count <= 0:
            # A file RocketMQ created but never wrote to has 0 here (IndexHeader.load).
            f.index_count = 1
        return f

    # --- identity ---
    @property
    def path(self) -> str:
        return self.mapped_file.path

    @property
    def file_name(self) -> str:
        return self.mapped_file.file_name

    @property
    def file_size(self) -> int:
        return self.mapped_file.file_size

    @property
    def entry_count(self) -> int:
        return self.index_count - 1

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def is_time_matched(self, begin: int, end: int) -> bool:
        """True if [begin, end] overlaps the file's time range (IndexFile.isTimeMatched)."""
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    def _write_header(self) -> None:
        _HEADER.pack_into(
            self._mm,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    # --- writing ---
    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Append an entry for key; False when the file is full."""
        if self.index_count >= self.index_num:
            return False
        self.put_hash(index_key_hash(key), phy_offset, store_timestamp)
        return True

    def put_hash(self, key_hash: int, phy_offset: int, store_timestamp: int) -> None:
        """put_key for an already computed index_key_hash (caller checked capacity)."""
        mm = self._mm
        n = self.index_count
        slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        prev = _SLOT.unpack_from(mm, slot_pos)[0]
        if prev <= INVALID_INDEX or prev > n:
            prev = INVALID_INDEX
        # timeDiff uses the begin timestamp as it is *before* this put: for the first
        # entry of a seeded file that is the previous file's end timestamp.
        td = _time_diff(store_timestamp, self.begin_timestamp)
        _ENTRY.pack_into(mm, self._entries_base + n * INDEX_SIZE, key_hash, phy_offset, td, prev)
        _SLOT.pack_into(mm, slot_pos, n)
        if n <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        if prev == INVALID_INDEX:
            self.hash_slot_count += 1
        self.index_count = n + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        self._write_header()

    def put_hashes(self, key_hashes: np.ndarray, phy_offsets: np.ndarray, store_timestamps: np.ndarray) -> int:
        """Append entries for a run of keys, in order, as put_hash would one by one.

        Writes as many as fit and returns how many that was. Arrays are int64.
        """
        m = put_hashes(self, self._mm, self.hash_slot_num, self.index_num, key_hashes, phy_offsets, store_timestamps)
        if m:
            self._write_header()
        return m

    # --- reading ---
    def select_phy_offsets(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Commit-log offsets of entries whose hash matches key's, newest first.

        Hash collisions are included; callers re-check the message's keys.
        """
        out: list[int] = []
        if max_num <= 0 or not self.mapped_file.hold():
            return out
        try:
            mm = self._mm
            key_hash = index_key_hash(key)
            n = self.index_count
            slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
            cur = _SLOT.unpack_from(mm, slot_pos)[0]
            if cur <= INVALID_INDEX or cur > n or n <= 1:
                return out
            base = self._entries_base
            begin_ts = self.begin_timestamp
            unpack = _ENTRY.unpack_from
            while len(out) < max_num:
                h, phy, td, prev = unpack(mm, base + cur * INDEX_SIZE)
                if td < 0:
                    break
                t = begin_ts + td * 1000
                if h == key_hash and begin <= t <= end:
                    out.append(phy)
                # RocketMQ stops only on prev == cur; a well-formed chain always points
                # backwards, so prev >= cur also ends a walk that would otherwise cycle
                # forever in a damaged file.
                if prev <= INVALID_INDEX or prev > n or prev >= cur or t < begin:
                    break
                cur = prev
        finally:
            self.mapped_file.release()
        return out

    def repair_cut_put(self) -> int:
        """Undo what a put cut short by a kill left behind: put_hashes writes the
        slots, then the entries, then the header, so slots may name entries at or past
        index_count (not written, or not counted). Each such slot gets back the newest
        counted entry of its slot (0 if none), the value it had before that put.
        Returns the number of slots repaired."""
        n = self.index_count
        mm = self._mm
        table = np.frombuffer(mm, dtype=">i4", count=self.hash_slot_num, offset=INDEX_HEADER_SIZE)
        try:
            bad = np.flatnonzero((table >= n) | (table < 0))
            if bad.size == 0:
                return 0
            fixed = np.zeros(bad.size, dtype=np.int64)
            if n > 1:
                kept = np.frombuffer(mm, dtype=ENTRY_DTYPE, count=n - 1, offset=self._entries_base + INDEX_SIZE)
                try:
                    slot_of = kept["key_hash"].astype(np.int64) % self.hash_slot_num
                finally:
                    del kept
                hit = np.flatnonzero(np.isin(slot_of, bad))
                if hit.size:
                    # newest entry per slot: the first of each slot in reversed order
                    rev = hit[::-1]
                    slots, first = np.unique(slot_of[rev], return_index=True)
                    fixed[np.searchsorted(bad, slots)] = rev[first] + 1
            table[bad] = fixed
        finally:
            del table
        log.warning(
            "index file %s: %d slots named entries past the %d counted (a put cut short); "
            "set back to the newest counted entry",
            self.file_name,
            bad.size,
            n - 1,
        )
        return int(bad.size)

    def keep_synced_entries(self, index_ts: int, record_end_of: Callable[[int], int]) -> int | None:
        """After a crash that may have lost unsynced pages (not a mere kill): keep the
        entries written before the sync that indexMsgTimestamp (index_ts) records
        (IndexService.on_live_synced), forget the rest. An entry is kept when its time
        (whole seconds after beginTimestamp, rounded down) is a second or more before
        index_ts and the entries up to it name non-decreasing CommitLog offsets; the
        cut never splits one record's keys. Slots naming forgotten entries go back to
        the newest kept one of their slot (repair_cut_put); the forgotten entries are
        zeroed. Returns the CommitLog offset where the kept entries' last record ends
        (re-dispatch must start at or before it), or None when nothing can be kept (the
        caller deletes the file)."""
        n = self.index_count
        if n <= 1 or self.begin_timestamp <= 0:
            return None
        mm = self._mm
        ents = np.frombuffer(mm, dtype=ENTRY_DTYPE, count=n - 1, offset=self._entries_base + INDEX_SIZE)
        try:
            phy = ents["phy_offset"].astype(np.int64)
            td = ents["time_diff"].astype(np.int64)
            prev = ents["prev_index"].astype(np.int64)
        finally:
            del ents
        ok = (td >= 0) & (self.begin_timestamp + td * 1000 + 1000 <= index_ts)
        ok[1:] &= phy[1:] >= phy[:-1]
        keep = int(np.argmin(ok)) if not bool(ok.all()) else n - 1  # entries 1..keep stay
        while 0 < keep < n - 1 and phy[keep] == phy[keep - 1]:
            keep -= 1
        if keep == 0:
            return None
        last_phy = int(phy[keep - 1])
        resume = record_end_of(last_phy)
        if resume <= last_phy:
            return None
        old_n = n
        self.index_count = keep + 1
        self.hash_slot_count = int(np.count_nonzero(prev[:keep] == INVALID_INDEX))
        self.end_phy_offset = last_phy
        self.end_timestamp = self.begin_timestamp + int(td[keep - 1]) * 1000
        self.repair_cut_put()
        a = self._entries_base + (keep + 1) * INDEX_SIZE
        b = self._entries_base + old_n * INDEX_SIZE
        mm[a:b] = bytes(b - a)
        self._write_header()
        log.warning(
            "abnormal exit: index file %s keeps the %d entries checkpoint indexMsgTimestamp %d proves synced "
            "(phy up to %d), %d dropped; re-indexing from CommitLog offset %d",
            self.file_name,
            keep,
            index_ts,
            last_phy,
            old_n - 1 - keep,
            resume,
        )
        return resume

    # --- truncation ---
    def first_entry_at_or_beyond(self, phy_offset: int) -> int:
        """Number of the first entry whose phy offset is >= phy_offset (index_count if
        none): entries are appended in CommitLog order."""
        mm = self._mm
        base = self._entries_base + 4
        lo, hi = 1, self.index_count
        while lo < hi:
            mid = (lo + hi) // 2
            if _Q.unpack_from(mm, base + mid * INDEX_SIZE)[0] >= phy_offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def truncate_entries(self, first: int, end_timestamp_of: Callable[[int], int]) -> tuple[int, int]:
        """Forget entries first..index_count-1, as if they had never been put; returns
        the byte range they occupy, for the caller to zero (off the loop).

        Undoing puts newest first would set each slot back to the removed entry's
        prevIndex; the net effect is that every slot a removed entry touched gets the
        prevIndex of the *oldest* removed entry in it, the value it had before. Each
        removed entry that found its slot empty had counted one hashSlotCount. The end
        phy offset/timestamp become the last kept entry's (the timestamp read back from
        its record by end_timestamp_of(phy), which returns -1 when it is gone; the
        entry's timeDiff, whole seconds, is the fallback). first must be >= 2: a file
        left without entries is deleted instead.
        """
        n = self.index_count
        if not 2 <= first <= n:
            raise ValueError(f"index file {self.file_name}: cannot keep {first - 1} of {n - 1} entries")
        m = n - first
        start = self._entries_base + first * INDEX_SIZE
        if m == 0:
            return start, start
        mm = self._mm
        removed = np.frombuffer(mm, dtype=ENTRY_DTYPE, count=m, offset=start)
        try:
            slots = removed["key_hash"].astype(np.int64) % self.hash_slot_num
            prev = removed["prev_index"].astype(np.int64)
        finally:
            del removed
        uniq, oldest = np.unique(slots, return_index=True)
        table = np.frombuffer(mm, dtype=">i4", count=self.hash_slot_num, offset=INDEX_HEADER_SIZE)
        try:
            table[uniq] = prev[oldest]
        finally:
            del table
        self.hash_slot_count -= int(np.count_nonzero(prev == INVALID_INDEX))
        self.index_count = first
        _h, phy, td, _p = _ENTRY.unpack_from(mm, self._entries_base + (first - 1) * INDEX_SIZE)
        self.end_phy_offset = phy
        ts = end_timestamp_of(phy)
        self.end_timestamp = ts if ts >= 0 else self.begin_timestamp + td * 1000
        self._write_header()
        return start, start + m * INDEX_SIZE

    # --- lifetime ---
    def sync(self) -> None:
        """fdatasync (blocking: worker thread, or shutdown)."""
        self.mapped_file.sync()

    def close(self) -> None:
        self.mapped_file.close()

    def destroy(self) -> None:
        self.destroyed = True
        self.mapped_file.destroy()

    def __repr__(self) -> str:
        return (
            f"IndexFile({self.file_name}, count={self.index_count}, "
            f"phy=[{self.begin_phy_offset},{self.end_phy_offset}], "
            f"ts=[{self.begin_timestamp},{self.end_timestamp}])"
        )


@dataclass(slots=True)
class QueryOffsetResult:
    phy_offsets: list[int]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


def _is_index_file_name(name: str) -> bool:
    return len(name) == FILE_NAME_LENGTH and name.isdigit()


def _parse_file_name(name: str) -> _dt.datetime | None:
    try:
        return _dt.datetime.strptime(name[:14], "%Y%m%d%H%M%S").replace(microsecond=int(name[14:17]) * 1000)
    except ValueError:
        return None


class IndexService:
    """The index files of one store: build from dispatch, query, flush, truncate, expire."""

    # Below this many keys a batch goes key by key: numpy's fixed cost per call
    # outweighs the per-key savings (bench/index_bench.py).
    BATCH_MIN_KEYS = 12
    BATCH_MAX_RECORDS = 1024

    def __init__(self, config: MessageStoreConfig, checkpoint: StoreCheckpoint) -> None:
        self.config = config
        self.checkpoint = checkpoint
        self.hash_slot_num = config.maxHashSlotNum
        self.index_num = config.maxIndexNum
        self.store_path = config.index_dir
        self._files: list[IndexFile] = []
        self._full_unflushed: list[IndexFile] = []
        self._in_flight: list[IndexFile] = []
        # Smallest beginPhyOffset of files an abnormal load() deleted: re-dispatch must
        # start at or before it for the index to be complete again. None = nothing lost.
        self.rebuild_from_phy_offset: int | None = None
        # Where the last kept record of an index file cut back at load ends: it is
        # indexed, unlike the record at that file's endPhyOffset would be taken to be.
        self._indexed_to = 0

    # --- load / shutdown ---
    @property
    def index_files(self) -> tuple[IndexFile, ...]:
        return tuple(self._files)

    def load(
        self, last_exit_ok: bool, page_cache_intact: bool = False, record_end_of: Callable[[int], int] | None = None
    ) -> None:
        """Open the index files. After an abnormal exit, files newer than the
        checkpoint's indexMsgTimestamp are deleted (RocketMQ: they may be torn) --
        unless page_cache_intact (the broker was killed, the machine stayed up): then
        every file is as the broker wrote it, and only a put cut short in the last one
        is undone (IndexFile.repair_cut_put). Otherwise, given record_end_of (where the
        CommitLog record at an offset ends, -1 if none is there), the first too-new
        file keeps the entries the checkpoint proves synced (keep_synced_entries), so
        re-dispatch rebuilds the index from there, not from the file's beginning."""
        if not os.path.isdir(self.store_path):
            return
        names = sorted(os.listdir(self.store_path))
        deleting = False
        for name in names:
            path = os.path.join(self.store_path, name)
            if not _is_index_file_name(name) or not os.path.isfile(path):
                log.warning("ignoring %s in the index directory: not a %d-digit index file", path, FILE_NAME_LENGTH)
                continue
            if os.path.getsize(path) == 0:
                # created, killed before posix_fallocate: holds nothing
                log.warning("%s: empty, its creation was cut short (crash); deleting it", path)
                os.unlink(path)
                continue
            f = IndexFile.load(path, self.hash_slot_num, self.index_num)
            # Past the first too-new file everything goes: a kept later file would make
            # re-dispatch skip the deleted range (its endPhyOffset is beyond it).
            if (
                not last_exit_ok
                and not page_cache_intact
                and (deleting or f.end_timestamp > self.checkpoint.index_msg_timestamp)
            ):
                if not deleting and record_end_of is not None:
                    deleting = True
                    resume = f.keep_synced_entries(self.checkpoint.index_msg_timestamp, record_end_of)
                    if resume is not None:
                        self.rebuild_from_phy_offset = self._indexed_to = resume
                        self._files.append(f)
                        continue
                deleting = True
                log.warning(
                    "abnormal exit: deleting index file %s (endTimestamp %d, "
                    "checkpoint indexMsgTimestamp %d, phy [%d, %d], %d entries)",
                    f.file_name,
                    f.end_timestamp,
                    self.checkpoint.index_msg_timestamp,
                    f.begin_phy_offset,
                    f.end_phy_offset,
                    f.entry_count,
                )
                if f.entry_count > 0 and (
                    self.rebuild_from_phy_offset is None or f.begin_phy_offset < self.rebuild_from_phy_offset
                ):
                    self.rebuild_from_phy_offset = f.begin_phy_offset
                f.destroy()
                continue
            log.info(
                "loaded index file %s: %d entries, phy [%d, %d], ts [%d, %d]",
                f.file_name,
                f.entry_count,
                f.begin_phy_offset,
                f.end_phy_offset,
                f.begin_timestamp,
                f.end_timestamp,
            )
            self._files.append(f)
        if not last_exit_ok and self._files:
            last = self._files[-1]
            # (after a power loss too: pages written after the last sync may be there)
            last.repair_cut_put()
            if record_end_of is not None and last.entry_count > 0 and not last.is_write_full():
                # Every key of the record at endPhyOffset is in (one put wrote them and
                # then the header): re-dispatch from before it must not index it again.
                # (A full file may have had the rest of them go to the next one.)
                self._indexed_to = max(self._indexed_to, record_end_of(last.end_phy_offset))

    def shutdown(self) -> None:
        for f in self._files:
            f.close()
        self._files = []
        self._full_unflushed = []

    def destroy(self) -> None:
        """Delete every index file (store destroy)."""
        for f in self._files:
            f.destroy()
        self._files = []
        self._full_unflushed = []

    # --- building ---
    def _new_file_name(self) -> str:
        """Local time yyyyMMddHHmmssSSS, moved forward past the last name and any file."""
        t = _dt.datetime.fromtimestamp(time.time())
        if self._files:
            # load() orders files by name, so a clock step backwards must not reorder.
            last = _parse_file_name(self._files[-1].file_name)
            if last is not None and t <= last:
                t = last + _dt.timedelta(milliseconds=1)
        name = _format_file_name(t)
        while os.path.exists(os.path.join(self.store_path, name)):
            t += _dt.timedelta(milliseconds=1)
            name = _format_file_name(t)
        return name

    def _roll(self) -> IndexFile:
        """Create the next file, seeded with the current last file's end values."""
        prev = self._files[-1] if self._files else None
        end_phy = prev.end_phy_offset if prev else 0
        end_ts = prev.end_timestamp if prev else 0
        os.makedirs(self.store_path, exist_ok=True)
        path = os.path.join(self.store_path, self._new_file_name())
        f = IndexFile.create(path, self.hash_slot_num, self.index_num, end_phy, end_ts)
        self._files.append(f)
        if prev is not None:
            log.info(
                "index file %s is full (%d entries, phy [%d, %d]); created %s",
                prev.file_name,
                prev.entry_count,
                prev.begin_phy_offset,
                prev.end_phy_offset,
                f.file_name,
            )
        else:
            log.info("created index file %s", f.file_name)
        return f

    def _put_hash(self, key_hash: int, phy_offset: int, store_timestamp: int) -> None:
        f = self._files[-1] if self._files else None
        if f is None or f.is_write_full():
            f = self._roll()
        f.put_hash(key_hash, phy_offset, store_timestamp)
        if f.is_write_full():
            self._full_unflushed.append(f)

    def _last_end_phy_offset(self) -> int:
        """Offsets below this are indexed already (re-dispatch after recovery skips them)."""
        end = self._files[-1].end_phy_offset if self._files else 0
        return end if end >= self._indexed_to else self._indexed_to

    def build_index(self, req: DispatchRequest) -> None:
        """Add the keys of one dispatched record (IndexService.buildIndex)."""
        if not self.config.messageIndexEnable:
            return
        if req.sys_flag & 0xC == _ROLLBACK:
            return
        off = req.commit_log_offset
        # Re-dispatch after recovery replays records already indexed: skip them.
        if off < self._last_end_phy_offset():
            return
        ts = req.store_timestamp
        prefix = req.topic + "#"
        if req.uniq_key is not None:
            self._put_hash(index_key_hash(prefix + req.uniq_key), off, ts)
        keys = req.keys
        if keys:
            for k in keys.split(" "):
                if k:
                    self._put_hash(index_key_hash(prefix + k), off, ts)

    def build_index_batch(self, reqs: Sequence[DispatchRequest]) -> None:
        """build_index for each record in order, with the per-key work vectorised."""
        if not self.config.messageIndexEnable:
            return
        step = self.BATCH_MAX_RECORDS
        if len(reqs) > step:
            # Past a few hundred records the numpy temporaries fall out of the CPU
            # caches and the per-key cost rises again (bench/index_bench.py).
            for i in range(0, len(reqs), step):
                self._build_index_batch(reqs[i : i + step])
        else:
            self._build_index_batch(reqs)

    def build_index_only(self, reqs: list[DispatchRequest]) -> int:
        """A reput dispatcher that builds the index alone (its rebuild at recovery)."""
        self.build_index_batch(reqs)
        return len(reqs)

    def _build_index_batch(self, reqs: Sequence[DispatchRequest]) -> None:
        keys: list[str] = []
        rec_offsets: list[int] = []
        rec_timestamps: list[int] = []
        rec_counts: list[int] = []
        end = self._last_end_phy_offset()
        append = keys.append
        for r in reqs:
            if r.sys_flag & 0xC == _ROLLBACK:
                continue
            off = r.commit_log_offset
            if off < end:
                continue
            before = len(keys)
            prefix = r.topic + "#"
            u = r.uniq_key
            if u is not None:
                append(prefix + u)
            ks = r.keys
            if ks:
                for k in ks.split(" "):
                    if k:
                        append(prefix + k)
            c = len(keys) - before
            if c:
                # Each put moves the file's endPhyOffset to this record's offset, which
                # is what the next record is compared with.
                end = off
                rec_offsets.append(off)
                rec_timestamps.append(r.store_timestamp)
                rec_counts.append(c)
        m = len(keys)
        if m == 0:
            return
        if m < self.BATCH_MIN_KEYS:
            i = 0
            for off, ts, c in zip(rec_offsets, rec_timestamps, rec_counts, strict=True):
                for k in keys[i : i + c]:
                    self._put_hash(index_key_hash(k), off, ts)
                i += c
            return
        hashes = index_key_hashes(keys)
        counts = np.array(rec_counts, dtype=np.int64)
        phys = np.repeat(np.array(rec_offsets, dtype=np.int64), counts)
        tss = np.repeat(np.array(rec_timestamps, dtype=np.int64), counts)
        i = 0
        while i < m:
            f = self._files[-1] if self._files else None
            if f is None or f.is_write_full():
                f = self._roll()
            i += f.put_hashes(hashes[i:], phys[i:], tss[i:])
            if f.is_write_full():
                self._full_unflushed.append(f)

    # --- query ---
    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryOffsetResult:
        """Offsets of messages with key in [begin, end] ms, newest file first."""
        max_num = min(max_num, self.config.maxMsgsNumBatch)
        offsets: list[int] = []
        last_ts = last_phy = 0
        files = self._files
        if files:
            last_ts = files[-1].end_timestamp
            last_phy = files[-1].end_phy_offset
            full_key = topic + "#" + key
            for f in reversed(files):
                if f.is_time_matched(begin, end):
                    offsets.extend(f.select_phy_offsets(full_key, max_num - len(offsets), begin, end))
                if f.begin_timestamp < begin or len(offsets) >= max_num:
                    break
        if len(offsets) > 1:
            # Recovery re-indexes the record at a file's endPhyOffset (RocketMQ skips only
            # offsets below it), so one message may have two entries: answer it once.
            offsets = list(dict.fromkeys(offsets))
        return QueryOffsetResult(offsets, last_ts, last_phy)

    # --- flushing ---
    def take_full_unflushed(self) -> list[IndexFile]:
        """Full files awaiting fdatasync, held for a worker thread (loop thread)."""
        taken: list[IndexFile] = []
        for f in self._full_unflushed:
            if f.mapped_file.hold():
                taken.append(f)
        self._full_unflushed = []
        self._in_flight.extend(taken)
        return taken

    def on_flushed(self, files: Sequence[IndexFile]) -> None:
        """After the worker synced files: release them and advance indexMsgTimestamp."""
        ts = self.checkpoint.index_msg_timestamp
        for f in files:
            self._drop_in_flight(f)
            if not f.destroyed and f.end_timestamp > ts:
                ts = f.end_timestamp
            f.mapped_file.release()
            log.info(
                "flushed index file %s (endTimestamp %d, endPhyOffset %d)",
                f.file_name,
                f.end_timestamp,
                f.end_phy_offset,
            )
        self.checkpoint.index_msg_timestamp = ts

    def take_live_for_sync(self) -> tuple[IndexFile, int] | None:
        """The file being written, held for a worker's fdatasync, with the end
        timestamp it has now (loop thread): everything up to it is durable once the
        sync returns, which on_live_synced records as indexMsgTimestamp. None when
        there is nothing new to sync."""
        f = self._files[-1] if self._files else None
        if f is None or f.entry_count == 0 or f.end_timestamp - 1 <= self.checkpoint.index_msg_timestamp:
            return None
        if any(g is f for g in self._in_flight) or not f.mapped_file.hold():
            return None
        self._in_flight.append(f)
        return f, f.end_timestamp

    def on_live_synced(self, f: IndexFile, end_timestamp: int, ok: bool) -> None:
        """After the worker's sync of take_live_for_sync's file (ok: it succeeded)."""
        self._drop_in_flight(f)
        f.mapped_file.release()
        # One less: a put after take_live_for_sync may carry the same millisecond, and
        # the file's header must then read as newer than the checkpoint.
        if ok and not f.destroyed and end_timestamp - 1 > self.checkpoint.index_msg_timestamp:
            self.checkpoint.index_msg_timestamp = end_timestamp - 1

    def on_flush_failed(self, files: Sequence[IndexFile]) -> None:
        """The worker's sync failed: release the files and queue them again."""
        for f in files:
            self._drop_in_flight(f)
            f.mapped_file.release()
            if not f.destroyed:
                self._full_unflushed.append(f)

    def _drop_in_flight(self, f: IndexFile) -> None:
        for i, g in enumerate(self._in_flight):
            if g is f:
                del self._in_flight[i]
                return

    def flush_all_blocking(self) -> None:
        """Sync every file now (shutdown); the checkpoint value follows, not its file."""
        ts = self.checkpoint.index_msg_timestamp
        for f in self._files:
            f.sync()
            ts = max(ts, f.end_timestamp)
        self._full_unflushed = []
        self.checkpoint.index_msg_timestamp = ts

    # --- truncation / expiry ---
    def truncate_beyond(self, phy_offset: int) -> int | None:
        """Delete every file holding an entry at or beyond phy_offset.

        Returns the smallest beginPhyOffset of the deleted files that had entries (the
        caller re-dispatches from there), or None when no entry was lost.
        """
        self._indexed_to = min(self._indexed_to, phy_offset)
        files = self._files
        cut = len(files)
        for i, f in enumerate(files):
            # Later files only hold later offsets, and an empty trailing file seeded at
            # or past phy_offset would make re-dispatch skip the rebuilt range.
            if f.end_phy_offset >= phy_offset:
                cut = i
                break
        if cut == len(files):
            return None
        rebuild_from: int | None = None
        for f in files[cut:]:
            if f.entry_count > 0 and (rebuild_from is None or f.begin_phy_offset < rebuild_from):
                rebuild_from = f.begin_phy_offset
        # A record whose keys straddle two files leaves the older file ending exactly at
        # the newer one's first offset; re-dispatch from there would index it twice.
        while rebuild_from is not None and cut > 0:
            prev = files[cut - 1]
            if prev.entry_count > 0 and prev.end_phy_offset >= rebuild_from:
                cut -= 1
                rebuild_from = min(rebuild_from, prev.begin_phy_offset)
            else:
                break
        doomed = files[cut:]
        self._files = files[:cut]
        doomed_ids = {id(f) for f in doomed}
        self._full_unflushed = [f for f in self._full_unflushed if id(f) not in doomed_ids]
        for f in doomed:
            _log_truncated_away(phy_offset, f)
            f.destroy()
        # indexMsgTimestamp may name a deleted file; rebuilt files can end at or before
        # it without being synced, so fall back to what the kept files prove durable.
        pending = {id(f) for f in self._full_unflushed} | {id(f) for f in self._in_flight}
        durable = 0
        for f in self._files:
            if f.is_write_full() and id(f) not in pending:
                durable = max(durable, f.end_timestamp)
        if durable < self.checkpoint.index_msg_timestamp:
            self.checkpoint.index_msg_timestamp = durable
        return rebuild_from

    def truncate_plan(self, phy_offset: int, end_timestamp_of: Callable[[int], int]) -> TruncatePlan:
        """Forget every entry at or beyond phy_offset, bookkeeping only: files left
        without entries are detached, the one that keeps some is cut back in place
        (IndexFile.truncate_entries); the plan zeroes the dropped entries, syncs that
        file and unlinks the others. Unlike truncate_beyond, nothing is rebuilt: the
        kept entries stay exactly as they were written.

        indexMsgTimestamp falls back to the newest full file left (a cut file is no
        longer full, and a deleted one may have set it)."""
        plan = TruncatePlan.empty()
        self._indexed_to = min(self._indexed_to, phy_offset)
        files = self._files
        while files:
            f = files[-1]
            first = f.first_entry_at_or_beyond(phy_offset)
            if first >= f.index_count:
                break
            if first <= 1:
                files.pop()
                f.destroyed = True
                plan.doomed.append(f.mapped_file)
                _log_truncated_away(phy_offset, f)
                continue
            dropped = f.index_count - first
            a, b = f.truncate_entries(first, end_timestamp_of)
            plan.zero.append((f.mapped_file, a, b))
            log.warning(
                "truncating index at phy offset %d: %s keeps %d entries, %d dropped",
                phy_offset,
                f.file_name,
                f.entry_count,
                dropped,
            )
            break
        kept = {id(f) for f in files}
        self._full_unflushed = [f for f in self._full_unflushed if id(f) in kept and f.is_write_full()]
        durable = max((f.end_timestamp for f in files if f.is_write_full()), default=0)
        if durable < self.checkpoint.index_msg_timestamp:
            self.checkpoint.index_msg_timestamp = durable
        return plan

    def delete_expired_file(self, min_phy_offset: int) -> int:
        """Delete the oldest files (never the last) whose endPhyOffset < min_phy_offset."""
        return destroy_now(self.detach_expired_files(min_phy_offset))

    def detach_expired_files(self, min_phy_offset: int) -> list[IndexFile]:
        """Take the oldest files (never the last) whose endPhyOffset < min_phy_offset out
        of the service; the caller deletes them (off the event loop in the store)."""
        files = self._files
        n = 0
        while n < len(files) - 1 and files[n].end_phy_offset < min_phy_offset:
            n += 1
        if n == 0:
            return []
        doomed = files[:n]
        self._files = files[n:]
        doomed_ids = {id(f) for f in doomed}
        self._full_unflushed = [f for f in self._full_unflushed if id(f) not in doomed_ids]
        for f in doomed:
            f.destroyed = True
            log.info(
                "deleting expired index file %s (phy [%d, %d], endPhyOffset < commit-log min %d)",
                f.file_name,
                f.begin_phy_offset,
                f.end_phy_offset,
                min_phy_offset,
            )
        return doomed


def _log_truncated_away(phy_offset: int, f: IndexFile) -> None:
    log.warning(
        "truncating index at phy offset %d: deleting %s (phy [%d, %d], %d entries)",
        phy_offset,
        f.file_name,
        f.begin_phy_offset,
        f.end_phy_offset,
        f.entry_count,
    )
