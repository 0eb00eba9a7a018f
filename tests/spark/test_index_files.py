"""Index rebuild without Spark: files cut into per-segment chunks and built one file at a
time hold the bytes the store's IndexService writes when it dispatches the same records
(only the file names differ: the broker names a file by when it created it)."""

from __future__ import annotations

import os
import random

import numpy as np

from rmq.protocol.record import check_message_and_return_size
from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.config import MessageStoreConfig
from rmq.store.index import IndexFile, IndexService
from spark.commitlog_files import check_files, list_local
from spark.index_files import KeyChunk, build_file, file_names, plan, route
from spark.scan import ScanOptions
from tests.spark.commitlog_gen import CommitLogWriter
from tests.spark.reference import rebuild_in_process
from tests.spark.test_scan import LEVELS, varied_messages

SLOTS, NUM = 97, 60


def store_index(store, root) -> list[bytes]:
    """The IndexService's files for every record, dispatched in random batch sizes."""
    cfg = MessageStoreConfig(storePathRootDir=str(root), maxHashSlotNum=SLOTS, maxIndexNum=NUM)
    svc = IndexService(cfg, StoreCheckpoint(cfg.checkpoint_path))
    files, _, _ = check_files(list_local(str(store)), "x", None)
    reqs = []
    for f in files:
        data = open(f.path, "rb").read()
        pos = 0
        while pos + 8 <= len(data):
            size, req = check_message_and_return_size(data, pos, False, LEVELS)
            if size <= 0:
                break
            reqs.append(req)
            pos += size
    rng = random.Random(5)
    i = 0
    while i < len(reqs):
        n = rng.randrange(1, 40)
        svc.build_index_batch(reqs[i : i + n])
        i += n
    out = [bytes(f.mapped_file.mm) for f in svc.index_files]
    svc.shutdown()
    svc.checkpoint.close()
    return out


def test_rebuilt_index_files_equal_the_store_index_service(tmp_path):
    w = CommitLogWriter(str(tmp_path / "store" / "commitlog"), 8192)
    varied_messages(w, random.Random(11), 250)
    w.close()
    want = store_index(tmp_path / "store", tmp_path / "broker")
    assert len(want) >= 4

    got_keys, chain = rebuild_in_process(str(tmp_path / "store"), ScanOptions(LEVELS, None, True), 700)
    # the job's plan over segments of the chain: cut the keys at random segment sizes
    rng = random.Random(3)
    segs, i = [], 0
    keys = got_keys.keys
    while i < len(keys):
        n = rng.randrange(0, 30)
        segs.append(keys[i : i + n])
        i += n
    p = plan(list(range(len(segs))), {k: len(s) for k, s in enumerate(segs)}, NUM)
    by_file: dict[int, list[KeyChunk]] = {}
    for seg, ks in enumerate(segs):
        if not ks:
            continue
        h, phy, ts = (np.array(c, dtype=np.int64) for c in zip(*ks, strict=True))
        for f, chunk in route(p.starts[seg], h, phy, ts, p.per_file):
            by_file.setdefault(f, []).append(chunk)
    built = []
    for f in sorted(by_file):
        chunks = by_file[f][::-1]  # any order
        b = build_file(str(tmp_path / f"idx{f}"), f, chunks, SLOTS, NUM)
        if b is not None:
            built.append(b)
    assert len(built) == len(want) == p.files
    for b, w_bytes in zip(built, want, strict=True):
        assert open(b.path, "rb").read() == w_bytes, f"index file {b.file_no}"

    # and the store's reader finds records by key in them
    files = [IndexFile.load(b.path, SLOTS, NUM) for b in built]
    try:
        for x in w.written[::17]:
            if x.sys_flag & 0xC == 0xC:
                continue
            found = [
                o for f in files for o in f.select_phy_offsets(f"{x.topic}#{x.properties['UNIQ_KEY']}", 64, 0, 2**62)
            ]
            assert x.phys in found
    finally:
        for f in files:
            f.close()


def test_file_names_are_increasing_local_times():
    names = file_names([1_700_000_000_123, 1_700_000_000_123, 1_600_000_000_000])
    assert names == sorted(names) and len(set(names)) == 3
    assert all(len(n) == 17 and n.isdigit() for n in names)


def test_route_sends_each_file_its_seed():
    h = np.arange(10, dtype=np.int64)
    out = list(route(5, h, h + 100, h + 1000, 4))
    # keys 5..14 over files of 4: [5,6,7] -> 1, [8..11] -> 2, [12..14] -> 3
    runs = [(f, c.start, c.hashes.tolist()) for f, c in out if c.start >= 0]
    seeds = [(f, c.hashes.tolist()) for f, c in out if c.start < 0]
    assert runs == [(1, 5, [0, 1, 2]), (2, 8, [3, 4, 5, 6]), (3, 12, [7, 8, 9])]
    assert seeds == [(2, [2]), (3, [6])]
    assert not os.path.exists("idx")
