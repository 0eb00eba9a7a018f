"""Index keys in CommitLog order -> IndexFiles, as the broker's IndexService fills them.

The broker appends every key to its last index file and starts the next one when it is
full (maxIndexNum - 1 entries: entry 0 is never used), seeding it with the previous
file's end offset and timestamp. So file k holds exactly the keys k*(N-1) .. (k+1)*(N-1)-1
of the whole CommitLog, and each file can be built on its own once every segment knows
where its keys start (`plan`). Entries are written with rmq.store.index_codec.put_hashes,
the function the store's IndexFile writes with.
"""

from __future__ import annotations

import datetime as _dt
import mmap
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from rmq.store.index_codec import IndexHeader, format_file_name, index_file_size, put_hashes, write_header


@dataclass(frozen=True)
class IndexPlan:
    per_file: int  # entries per file: maxIndexNum - 1
    starts: dict[int, int]  # segment id -> global number of its first key
    total: int  # keys in all

    @property
    def files(self) -> int:
        return -(-self.total // self.per_file)


def plan(order: Sequence[int], key_counts: dict[int, int], max_index_num: int) -> IndexPlan:
    starts: dict[int, int] = {}
    g = 0
    for seg in order:
        starts[seg] = g
        g += key_counts.get(seg, 0)
    return IndexPlan(max_index_num - 1, starts, g)


@dataclass
class KeyChunk:
    """A run of one file's keys: global number of the first, and its arrays."""

    start: int
    hashes: np.ndarray
    phy: np.ndarray
    ts: np.ndarray


def route(
    seg_start: int, hashes: np.ndarray, phy: np.ndarray, ts: np.ndarray, per_file: int
) -> Iterable[tuple[int, KeyChunk]]:
    """Cut one segment's keys at file boundaries: (file number, chunk). The last key of
    each file also goes to the next file, alone (start -1), as the seed of its header."""
    n = hashes.shape[0]
    i = 0
    while i < n:
        g = seg_start + i
        f = g // per_file
        j = min(n, (f + 1) * per_file - seg_start)
        yield f, KeyChunk(g, hashes[i:j], phy[i:j], ts[i:j])
        if (seg_start + j) % per_file == 0:
            yield f + 1, KeyChunk(-1, hashes[j - 1 : j], phy[j - 1 : j], ts[j - 1 : j])
        i = j


@dataclass
class BuiltIndexFile:
    file_no: int
    path: str
    first_timestamp: int
    entries: int


def build_file(
    path: str, file_no: int, chunks: Iterable[KeyChunk], hash_slot_num: int, index_num: int
) -> BuiltIndexFile | None:
    """Write index file number file_no at path from its chunks (any order); None (and
    no file) when there is only the seed: the previous file ended the keys."""
    seed: KeyChunk | None = None
    runs: list[KeyChunk] = []
    for c in chunks:
        if c.start < 0:
            seed = c
        else:
            runs.append(c)
    if not runs:
        return None
    runs.sort(key=lambda c: c.start)
    size = index_file_size(hash_slot_num, index_num)
    hdr = IndexHeader()
    if seed is not None:
        # IndexFile.create seeds only positive values
        if int(seed.phy[0]) > 0:
            hdr.begin_phy_offset = hdr.end_phy_offset = int(seed.phy[0])
        if int(seed.ts[0]) > 0:
            hdr.begin_timestamp = hdr.end_timestamp = int(seed.ts[0])
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)  # a hole, read as zeros, like a fresh file
        mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    try:
        entries = 0
        for c in runs:
            m = put_hashes(hdr, mm, hash_slot_num, index_num, c.hashes, c.phy, c.ts)
            if m != c.hashes.shape[0]:
                raise RuntimeError(f"index file {file_no}: {c.hashes.shape[0] - m} keys did not fit (chunks overlap?)")
            entries += m
        write_header(hdr, mm)
        mm.flush()
    finally:
        mm.close()
    return BuiltIndexFile(file_no, path, int(runs[0].ts[0]), entries)


def file_names(first_timestamps: Sequence[int]) -> list[str]:
    """yyyyMMddHHmmssSSS names from each file's first store time (local time, as the
    broker names a file by when it created it), strictly increasing."""
    out: list[str] = []
    last: _dt.datetime | None = None
    for ts in first_timestamps:
        t = _dt.datetime.fromtimestamp(ts / 1000)
        if last is not None and t <= last:
            t = last + _dt.timedelta(milliseconds=1)
        out.append(format_file_name(t))
        last = t
    return out
