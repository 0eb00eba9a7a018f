"""IndexFile / IndexService (rmq.store.index) against spec 4.3 and a real RocketMQ 4.9.8 file.

Expected bytes are read back here with ``struct`` from the spec's field tables; key hashes
come from a naive String.hashCode written in this file, not from the code under test.
"""

from __future__ import annotations

import os
import struct
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq.protocol.message import BLANK_MAGIC_CODE, MessageExt, SysFlag, decode_record
from rmq.protocol.record import DispatchRequest
from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.config import MessageStoreConfig
from rmq.store.errors import StoreError
from rmq.store.index import IndexFile, IndexService, index_key_hash, index_key_hashes

HEADER = struct.Struct(">qqqqii")  # begin ts, end ts, begin phy, end phy, slot count, index count
ENTRY = struct.Struct(">iqii")  # keyHash, phyOffset, timeDiff, prevIndex
INT_MAX = 2**31 - 1
FAR_FUTURE = 2**62

SLOTS = 100
ENTRIES = 50


# --- independent reference --------------------------------------------------------
def ref_key_hash(key: str) -> int:
    """abs(String.hashCode()) with Integer.MIN_VALUE -> 0, the slow obvious way."""
    h = 0
    for (unit,) in struct.iter_unpack(">H", key.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    if h >= 2**31:
        h -= 2**32
    h = abs(h)
    return 0 if h == 2**31 else h


def read_header(path: str | Path) -> tuple[int, int, int, int, int, int]:
    with open(path, "rb") as fh:
        return HEADER.unpack(fh.read(40))


def read_slot(path: str | Path, slot: int) -> int:
    with open(path, "rb") as fh:
        fh.seek(40 + slot * 4)
        return struct.unpack(">i", fh.read(4))[0]


def read_entry(path: str | Path, no: int, slots: int = SLOTS) -> tuple[int, int, int, int]:
    with open(path, "rb") as fh:
        fh.seek(40 + slots * 4 + no * 20)
        return ENTRY.unpack(fh.read(20))


def file_bytes(path: str | Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def req(
    off: int, ts: int, uniq: str | None = None, keys: str | None = None, topic: str = "T", sys_flag: int = 0
) -> DispatchRequest:
    return DispatchRequest(
        topic=topic,
        queue_id=0,
        commit_log_offset=off,
        msg_size=10,
        tags_code=0,
        store_timestamp=ts,
        consume_queue_offset=0,
        keys=keys,
        uniq_key=uniq,
        sys_flag=sys_flag,
    )


def make_service(root: str | Path, slots: int = SLOTS, entries: int = ENTRIES, max_batch: int = 64) -> IndexService:
    cfg = MessageStoreConfig(
        storePathRootDir=str(root), maxHashSlotNum=slots, maxIndexNum=entries, maxMsgsNumBatch=max_batch
    )
    return IndexService(cfg, StoreCheckpoint(cfg.checkpoint_path))


def close_service(svc: IndexService) -> None:
    svc.shutdown()
    svc.checkpoint.close()


def keys_with_same_slot(prefix: str, slots: int, same_hash: bool = False) -> tuple[str, str]:
    seen: dict[int, str] = {}
    i = 0
    while True:
        k = f"{prefix}{i}"
        h = ref_key_hash(k)
        s = h % slots
        if s in seen and (ref_key_hash(seen[s]) == h) == same_hash:
            return seen[s], k
        seen.setdefault(s, k)
        i += 1


@pytest.fixture
def svc(tmp_path: Path):
    s = make_service(tmp_path)
    yield s
    close_service(s)


# --- hashing ------------------------------------------------------------------------
def test_key_hash_matches_reference_and_min_value_maps_to_zero() -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE
    assert ref_key_hash("polygenelubricants") == 0
    assert index_key_hash("polygenelubricants") == 0
    for k in ["", "a", "T#key-7", "Aa", "BB", "主题#ключ", "😀#x" * 50]:
        assert index_key_hash(k) == ref_key_hash(k)
    assert index_key_hash("Aa") == index_key_hash("BB")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=60), max_size=40))
def test_vectorised_hashes_match_per_key(keys: list[str]) -> None:
    got = index_key_hashes(keys)
    assert [int(x) for x in got] == [ref_key_hash(k) for k in keys]


def test_vectorised_hashes_long_keys() -> None:
    keys = ["x" * 5000, "T#" + "y" * 1500, "z"]
    assert [int(x) for x in index_key_hashes(keys)] == [ref_key_hash(k) for k in keys]


# --- IndexFile: byte layout ------------------------------------------------------------
def test_new_file_size_and_header(tmp_path: Path) -> None:
    p = tmp_path / "20250101000000000"
    f = IndexFile.create(str(p), SLOTS, ENTRIES)
    assert os.path.getsize(p) == 40 + SLOTS * 4 + ENTRIES * 20
    assert read_header(p) == (0, 0, 0, 0, 0, 1)
    f.close()

    p2 = tmp_path / "20250101000000001"
    f2 = IndexFile.create(str(p2), SLOTS, ENTRIES, end_phy_offset=4096, end_timestamp=1_700_000_000_000)
    assert read_header(p2) == (1_700_000_000_000, 1_700_000_000_000, 4096, 4096, 0, 1)
    assert (f2.begin_phy_offset, f2.end_phy_offset) == (4096, 4096)
    assert f2.file_name == "20250101000000001"
    f2.close()


def test_put_key_layout(tmp_path: Path) -> None:
    p = tmp_path / "20250101000000000"
    f = IndexFile.create(str(p), SLOTS, ENTRIES)
    k1, k2 = "T#alpha", "T#beta"
    h1, h2 = ref_key_hash(k1), ref_key_hash(k2)
    assert h1 % SLOTS != h2 % SLOTS
    t0 = 1_700_000_000_000
    assert f.put_key(k1, 100, t0)
    assert f.put_key(k2, 200, t0 + 3_500)
    assert f.put_key(k1, 300, t0 + 10_999)

    assert read_header(p) == (t0, t0 + 10_999, 100, 300, 2, 4)
    assert read_slot(p, h1 % SLOTS) == 3
    assert read_slot(p, h2 % SLOTS) == 2
    assert read_entry(p, 0) == (0, 0, 0, 0)  # entry 0 is never used
    assert read_entry(p, 1) == (h1, 100, 0, 0)
    assert read_entry(p, 2) == (h2, 200, 3, 0)  # seconds, truncated
    assert read_entry(p, 3) == (h1, 300, 10, 1)  # chained to entry 1
    assert read_entry(p, 4) == (0, 0, 0, 0)
    # every other slot is still empty
    with open(p, "rb") as fh:
        fh.seek(40)
        slots = struct.unpack(f">{SLOTS}i", fh.read(SLOTS * 4))
    assert sum(1 for s in slots if s) == 2
    f.close()


def test_hash_slot_count_counts_only_empty_slots(tmp_path: Path) -> None:
    p = tmp_path / "20250101000000000"
    f = IndexFile.create(str(p), SLOTS, ENTRIES)
    a, b = keys_with_same_slot("T#k", SLOTS)
    assert ref_key_hash(a) != ref_key_hash(b)
    f.put_key(a, 10, 1000)
    f.put_key(b, 20, 1000)
    f.put_key(a, 30, 1000)
    hdr = read_header(p)
    assert hdr[4] == 1 and hdr[5] == 4
    slot = ref_key_hash(a) % SLOTS
    assert read_slot(p, slot) == 3
    assert read_entry(p, 2)[3] == 1 and read_entry(p, 3)[3] == 2
    f.close()


def test_min_value_key_goes_to_slot_zero(tmp_path: Path) -> None:
    p = tmp_path / "20250101000000000"
    f = IndexFile.create(str(p), SLOTS, ENTRIES)
    f.put_key("polygenelubricants", 77, 5000)
    assert read_slot(p, 0) == 1
    assert read_entry(p, 1) == (0, 77, 0, 0)
    assert f.select_phy_offsets("polygenelubricants", 10, 0, FAR_FUTURE) == [77]
    f.close()


def test_time_diff_seconds_clamped_and_seeded_begin(tmp_path: Path) -> None:
    seed = 1_700_000_000_000
    p = tmp_path / "20250101000000000"
    f = IndexFile.create(str(p), SLOTS, ENTRIES, end_phy_offset=50, end_timestamp=seed)
    # The first entry's timeDiff is against the seeded begin; then begin becomes its time.
    f.put_key("T#a", 60, seed + 5_500)
    assert read_entry(p, 1)[2] == 5
    assert read_header(p)[:4] == (seed + 5_500, seed + 5_500, 60, 60)
    f.put_key("T#b", 70, seed + 5_500 + 2_999)
    assert read_entry(p, 2)[2] == 2
    f.put_key("T#c", 80, seed)  # earlier than begin -> 0
    assert read_entry(p, 3)[2] == 0
    f.put_key("T#d", 90, seed + 5_500 + (INT_MAX + 10) * 1000)
    assert read_entry(p, 4)[2] == INT_MAX
    f.close()

    p2 = tmp_path / "20250101000000001"
    g = IndexFile.create(str(p2), SLOTS, ENTRIES)  # begin 0: timeDiff 0
    g.put_key("T#a", 1, seed + 123_456)
    assert read_entry(p2, 1)[2] == 0
    g.close()


def test_put_key_until_full(tmp_path: Path) -> None:
    f = IndexFile.create(str(tmp_path / "20250101000000000"), SLOTS, 5)
    for i in range(4):
        assert not f.is_write_full()
        assert f.put_key(f"T#{i}", i, 1000 + i)
    assert f.is_write_full() and f.index_count == 5 and f.entry_count == 4
    assert not f.put_key("T#x", 9, 2000)
    assert read_header(f.path)[5] == 5
    f.close()


# --- IndexFile: lookup -----------------------------------------------------------------
def test_select_returns_hash_collisions_and_filters_other_hashes(tmp_path: Path) -> None:
    f = IndexFile.create(str(tmp_path / "20250101000000000"), SLOTS, ENTRIES)
    # "Aa" and "BB" share String.hashCode, so "T#Aa" and "T#BB" do too.
    f.put_key("T#Aa", 10, 1000)
    f.put_key("T#BB", 20, 1000)
    a, b = keys_with_same_slot("T#s", SLOTS)  # same slot, different hash
    f.put_key(a, 30, 1000)
    f.put_key(b, 40, 1000)
    assert f.select_phy_offsets("T#Aa", 10, 0, FAR_FUTURE) == [20, 10]
    assert f.select_phy_offsets("T#BB", 10, 0, FAR_FUTURE) == [20, 10]
    assert f.select_phy_offsets(a, 10, 0, FAR_FUTURE) == [30]
    assert f.select_phy_offsets(b, 10, 0, FAR_FUTURE) == [40]
    assert f.select_phy_offsets("T#absent", 10, 0, FAR_FUTURE) == []
    f.close()


def test_select_time_range_and_max_num(tmp_path: Path) -> None:
    f = IndexFile.create(str(tmp_path / "20250101000000000"), SLOTS, ENTRIES)
    t0 = 1_700_000_000_000
    for i in range(10):
        f.put_key("T#k", 100 + i, t0 + i * 10_000)
    everything = list(range(109, 99, -1))
    assert f.select_phy_offsets("T#k", 64, 0, FAR_FUTURE) == everything
    assert f.select_phy_offsets("T#k", 3, 0, FAR_FUTURE) == [109, 108, 107]
    assert f.select_phy_offsets("T#k", 0, 0, FAR_FUTURE) == []
    assert f.select_phy_offsets("T#k", 64, t0 + 20_000, t0 + 50_000) == [105, 104, 103, 102]
    assert f.select_phy_offsets("T#k", 64, t0 + 95_000, FAR_FUTURE) == []
    assert f.is_time_matched(t0 + 20_000, t0 + 50_000)
    assert f.is_time_matched(0, FAR_FUTURE)
    assert not f.is_time_matched(t0 + 90_001, FAR_FUTURE)
    assert not f.is_time_matched(0, t0 - 1)
    f.close()


def test_load_reads_header_and_answers(tmp_path: Path) -> None:
    p = tmp_path / "20250101000000000"
    f = IndexFile.create(str(p), SLOTS, ENTRIES)
    for i in range(7):
        f.put_key(f"T#{i % 3}", 1000 * i, 1_000_000 + i)
    f.close()
    g = IndexFile.load(str(p), SLOTS, ENTRIES)
    assert (
        g.begin_timestamp,
        g.end_timestamp,
        g.begin_phy_offset,
        g.end_phy_offset,
        g.hash_slot_count,
        g.index_count,
    ) == read_header(p)
    assert g.select_phy_offsets("T#1", 10, 0, FAR_FUTURE) == [4000, 1000]
    g.close()
    with pytest.raises(StoreError, match="maxHashSlotNum"):
        IndexFile.load(str(p), SLOTS + 1, ENTRIES)


# --- IndexService ----------------------------------------------------------------------
def test_build_index_keys_rollback_and_redispatch(svc: IndexService) -> None:
    svc.build_index(req(100, 1000, uniq="U1", keys="a  b "))
    svc.build_index(req(200, 1000, uniq="U2", sys_flag=SysFlag.TRANSACTION_ROLLBACK_TYPE))
    svc.build_index(req(300, 1000, uniq="U3", sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE))
    svc.build_index(req(50, 1000, uniq="OLD"))  # below endPhyOffset: re-dispatch, skipped
    svc.build_index(req(400, 1000, keys="c"))  # no UNIQ_KEY
    f = svc.index_files[-1]
    assert f.entry_count == 5
    q = lambda k: svc.query_offset("T", k, 10, 0, FAR_FUTURE).phy_offsets  # noqa: E731
    assert q("U1") == [100] and q("a") == [100] and q("b") == [100]
    assert q("U2") == [] and q("U3") == [300] and q("OLD") == [] and q("c") == [400]
    # entries in order: U1, a, b, U3, c
    expected = ["T#U1", "T#a", "T#b", "T#U3", "T#c"]
    assert [read_entry(f.path, i + 1)[0] for i in range(5)] == [ref_key_hash(k) for k in expected]


def test_disabled_index_builds_nothing(tmp_path: Path) -> None:
    s = make_service(tmp_path)
    s.config.messageIndexEnable = False
    s.build_index(req(1, 1, uniq="U"))
    s.build_index_batch([req(2, 2, uniq="V")])
    assert s.index_files == ()
    close_service(s)


def test_non_ascii_topic_and_key(svc: IndexService) -> None:
    topic, key = "主题-Ä😀", "ключ-ü"
    svc.build_index(req(123, 1000, uniq="U", keys=key, topic=topic))
    svc.build_index_batch([req(456 + i, 2000, keys=key, topic=topic) for i in range(20)])
    res = svc.query_offset(topic, key, 64, 0, FAR_FUTURE)
    assert res.phy_offsets == list(range(475, 455, -1)) + [123]
    f = svc.index_files[0]
    assert read_entry(f.path, 2)[0] == ref_key_hash(f"{topic}#{key}")
    assert svc.query_offset("T", key, 64, 0, FAR_FUTURE).phy_offsets == []


def test_rolls_files_and_queries_newest_first(tmp_path: Path) -> None:
    s = make_service(tmp_path, entries=10)  # 9 entries per file
    t0 = 1_700_000_000_000
    for i in range(30):
        s.build_index(req(1000 + 100 * i, t0 + 1000 * i, uniq=f"U{i}", keys="K"))
    files = s.index_files
    assert len(files) == 7  # 60 keys / 9
    names = [f.file_name for f in files]
    assert names == sorted(names) and all(len(n) == 17 and n.isdigit() for n in names)
    assert all(f.is_write_full() for f in files[:-1])
    for prev, f in zip(files, files[1:], strict=False):
        assert f.begin_phy_offset >= prev.end_phy_offset
    # A record's two keys can straddle files; the new file is seeded from the full one.
    res = s.query_offset("T", "K", 64, 0, FAR_FUTURE)
    assert res.phy_offsets == [1000 + 100 * i for i in range(29, -1, -1)]
    assert (res.index_last_update_timestamp, res.index_last_update_phyoffset) == (t0 + 29_000, 1000 + 100 * 29)
    assert s.query_offset("T", "K", 5, 0, FAR_FUTURE).phy_offsets == [3900, 3800, 3700, 3600, 3500]
    s.config.maxMsgsNumBatch = 4  # max_num is capped by maxMsgsNumBatch
    assert len(s.query_offset("T", "K", 64, 0, FAR_FUTURE).phy_offsets) == 4
    s.config.maxMsgsNumBatch = 64
    # a time window inside the middle files
    res = s.query_offset("T", "K", 64, t0 + 10_000, t0 + 14_000)
    assert res.phy_offsets == [2400, 2300, 2200, 2100, 2000]
    assert s.query_offset("T", "U7", 64, 0, FAR_FUTURE).phy_offsets == [1700]
    close_service(s)


def test_name_is_unique_even_if_clock_stalls(tmp_path: Path) -> None:
    s = make_service(tmp_path, entries=2)  # one entry per file: a roll per key
    for i in range(20):
        s.build_index(req(i, 1000 + i, uniq=f"U{i}"))
    names = [f.file_name for f in s.index_files]
    assert len(names) == 20 and len(set(names)) == 20 and names == sorted(names)
    close_service(s)


def test_load_after_shutdown_keeps_everything(tmp_path: Path) -> None:
    s = make_service(tmp_path, entries=10)
    for i in range(25):
        s.build_index(req(100 * i, 5000 + i, uniq=f"U{i}", keys=f"k{i % 4}"))
    before = {f.file_name: file_bytes(f.path) for f in s.index_files}
    answers = {k: s.query_offset("T", k, 64, 0, FAR_FUTURE).phy_offsets for k in ["U3", "U24", "k0", "k3"]}
    close_service(s)

    s2 = make_service(tmp_path, entries=10)
    s2.load(last_exit_ok=True)
    assert {f.file_name: file_bytes(f.path) for f in s2.index_files} == before
    for k, v in answers.items():
        assert s2.query_offset("T", k, 64, 0, FAR_FUTURE).phy_offsets == v
    # appending continues in the last file and across rolls
    s2.build_index(req(100 * 25, 5025, uniq="U25", keys="k1"))
    assert s2.query_offset("T", "k1", 64, 0, FAR_FUTURE).phy_offsets[:2] == [2500, 2100]
    s2.build_index(req(10, 5026, uniq="STALE"))  # below the loaded endPhyOffset
    assert s2.query_offset("T", "STALE", 64, 0, FAR_FUTURE).phy_offsets == []
    close_service(s2)


def test_load_rejects_wrong_size_and_ignores_foreign_names(tmp_path: Path) -> None:
    idx = tmp_path / "index"
    idx.mkdir()
    (idx / "README").write_text("not an index file")
    s = make_service(tmp_path)
    s.load(True)
    assert s.index_files == ()
    close_service(s)
    (idx / "20250101000000000").write_bytes(b"\0" * 1000)
    s = make_service(tmp_path)
    with pytest.raises(StoreError, match="20250101000000000"):
        s.load(True)
    close_service(s)


def _fill_and_flush(s: IndexService, n: int, t0: int) -> None:
    for i in range(n):
        s.build_index(req(100 * (i + 1), t0 + 1000 * i, uniq=f"U{i}"))
    files = s.take_full_unflushed()
    for f in files:
        f.sync()
    s.on_flushed(files)


def test_abnormal_load_deletes_files_newer_than_checkpoint(tmp_path: Path) -> None:
    t0 = 1_700_000_000_000
    s = make_service(tmp_path, entries=10)
    _fill_and_flush(s, 22, t0)  # two full files (9 + 9) and 4 entries in the third
    full = s.index_files[:2]
    assert s.checkpoint.index_msg_timestamp == full[1].end_timestamp == t0 + 17_000
    third = s.index_files[2]
    assert third.begin_phy_offset == 1900
    s.checkpoint.write()
    close_service(s)

    s2 = make_service(tmp_path, entries=10)
    s2.load(last_exit_ok=True)
    assert len(s2.index_files) == 3
    close_service(s2)

    s3 = make_service(tmp_path, entries=10)
    assert s3.checkpoint.index_msg_timestamp == t0 + 17_000
    s3.load(last_exit_ok=False)
    assert [f.file_name for f in s3.index_files] == [f.file_name for f in full]
    assert not os.path.exists(third.path)
    assert s3.rebuild_from_phy_offset == 1900
    assert s3.query_offset("T", "U17", 64, 0, FAR_FUTURE).phy_offsets == [1800]
    assert s3.query_offset("T", "U18", 64, 0, FAR_FUTURE).phy_offsets == []
    # re-dispatch from there rebuilds it
    for i in range(18, 22):
        s3.build_index(req(100 * (i + 1), t0 + 1000 * i, uniq=f"U{i}"))
    assert s3.query_offset("T", "U18", 64, 0, FAR_FUTURE).phy_offsets == [1900]
    close_service(s3)


def test_flush_cycle_holds_files_and_advances_checkpoint(tmp_path: Path) -> None:
    t0 = 1_700_000_000_000
    s = make_service(tmp_path, entries=4)  # 3 entries per file
    for i in range(7):
        s.build_index(req(10 * (i + 1), t0 + 1000 * i, uniq=f"U{i}"))
    taken = s.take_full_unflushed()
    assert [f.file_name for f in taken] == [f.file_name for f in s.index_files[:2]]
    assert s.take_full_unflushed() == []
    # a failed sync puts them back
    s.on_flush_failed(taken)
    assert s.checkpoint.index_msg_timestamp == 0
    taken = s.take_full_unflushed()
    assert len(taken) == 2
    worker = threading.Thread(target=lambda: [f.sync() for f in taken])
    worker.start()
    worker.join()
    s.on_flushed(taken)
    assert s.checkpoint.index_msg_timestamp == t0 + 5000
    s.build_index(req(1000, t0 + 99_000, uniq="late"))
    s.flush_all_blocking()
    assert s.checkpoint.index_msg_timestamp == t0 + 99_000
    close_service(s)


def test_flushing_file_deleted_by_truncation_does_not_advance_checkpoint(tmp_path: Path) -> None:
    s = make_service(tmp_path, entries=4)
    for i in range(4):
        s.build_index(req(10 * (i + 1), 1000 * (i + 1), uniq=f"U{i}"))
    taken = s.take_full_unflushed()
    assert len(taken) == 1
    assert s.truncate_beyond(20) == 10
    for f in taken:
        f.sync()  # still mapped: held
    s.on_flushed(taken)
    assert s.checkpoint.index_msg_timestamp == 0
    close_service(s)


def _service_file_contents(s: IndexService) -> list[bytes]:
    return [file_bytes(f.path) for f in s.index_files]


def _assert_rebuild_matches_fresh(
    s: IndexService, records: list[DispatchRequest], rebuild_from: int | None, cut: int, fresh_root: str | Path, **make
) -> None:
    """Re-dispatch [rebuild_from, cut) into s (what truncate_beyond asked for): its files
    must equal a fresh service's built from every record before cut. Closes both."""
    if rebuild_from is not None:
        for r in records:
            if rebuild_from <= r.commit_log_offset < cut:
                s.build_index(r)
    fresh = make_service(fresh_root, **make)
    for r in records:
        if r.commit_log_offset < cut:
            fresh.build_index(r)
    assert _service_file_contents(s) == _service_file_contents(fresh)
    close_service(s)
    close_service(fresh)


def test_truncate_beyond_deletes_and_rebuild_matches_fresh(tmp_path: Path) -> None:
    t0 = 1_700_000_000_000
    records = [req(100 * i, t0 + 1000 * i, uniq=f"U{i}", keys=f"k{i % 3}") for i in range(40)]
    s = make_service(tmp_path / "a", entries=10)
    for r in records:
        s.build_index(r)
    n_files = len(s.index_files)
    assert s.truncate_beyond(10**9) is None
    assert len(s.index_files) == n_files

    cut = 2050  # the commit log is truncated here: records 0..20 survive
    rebuild_from = s.truncate_beyond(cut)
    assert rebuild_from is not None and rebuild_from <= cut
    for f in s.index_files:
        assert f.end_phy_offset < cut
    assert s.query_offset("T", "U25", 64, 0, FAR_FUTURE).phy_offsets == []
    _assert_rebuild_matches_fresh(s, records, rebuild_from, cut, tmp_path / "b", entries=10)

    # truncating before the first entry deletes everything
    s = make_service(tmp_path / "c", entries=10)
    for r in records:
        s.build_index(r)
    paths = [f.path for f in s.index_files]
    assert s.truncate_beyond(0) == 0
    assert s.index_files == () and not any(os.path.exists(p) for p in paths)
    close_service(s)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    st.integers(min_value=1, max_value=60),
    st.integers(min_value=0, max_value=6200),
    st.integers(min_value=2, max_value=7),
)
def test_truncate_then_rebuild_equals_fresh_build(n: int, cut: int, entries: int) -> None:
    # 1-3 keys per record, so records straddle files often
    records = [req(100 * i, 1000 * i, uniq=f"U{i}", keys=" ".join(f"k{j}" for j in range(i % 3))) for i in range(n)]
    with tempfile.TemporaryDirectory() as d:
        s = make_service(os.path.join(d, "a"), slots=5, entries=entries)
        for r in records:
            s.build_index(r)
        rebuild_from = s.truncate_beyond(cut)
        _assert_rebuild_matches_fresh(s, records, rebuild_from, cut, os.path.join(d, "b"), slots=5, entries=entries)


def test_delete_expired_file(tmp_path: Path) -> None:
    s = make_service(tmp_path, entries=4)  # 3 entries per file
    for i in range(12):
        s.build_index(req(100 * (i + 1), 1000 + i, uniq=f"U{i}"))
    files = s.index_files
    assert len(files) == 4
    assert [f.end_phy_offset for f in files] == [300, 600, 900, 1200]
    assert s.delete_expired_file(300) == 0
    assert s.delete_expired_file(601) == 2
    assert not os.path.exists(files[0].path) and not os.path.exists(files[1].path)
    assert [f.file_name for f in s.index_files] == [f.file_name for f in files[2:]]
    assert s.delete_expired_file(10**9) == 1  # never the last file
    assert len(s.index_files) == 1
    assert s.query_offset("T", "U11", 64, 0, FAR_FUTURE).phy_offsets == [1200]
    close_service(s)


# --- batch path == per-record path ---------------------------------------------------
_TOPICS = ["T", "TopicTest", "主题😀"]
_KEYS = ["a", "b", "key-1", "Aa", "BB", "ключ", "x" * 40]


@st.composite
def dispatch_stream(draw):
    n = draw(st.integers(min_value=0, max_value=120))
    out = []
    off = draw(st.integers(min_value=0, max_value=50))
    ts = draw(st.integers(min_value=0, max_value=2_000_000_000_000))
    for _ in range(n):
        step = draw(st.sampled_from([0, 1, 50, 300, -40]))  # equal and backward offsets too
        off = max(0, off + step)
        ts = max(0, ts + draw(st.sampled_from([0, 1, 999, 1000, 4321, -2000, 10**10])))
        uniq = draw(
            st.one_of(
                st.none(),
                st.sampled_from(["U1", "U2", "U3", ""]),
                st.text(alphabet="0123456789ABCDEF", min_size=32, max_size=32),
            )
        )
        toks = draw(st.lists(st.sampled_from(_KEYS + [""]), max_size=3))
        keys = draw(st.sampled_from([None, " ".join(toks), "  ".join(toks) + " "]))
        flag = draw(
            st.sampled_from(
                [
                    0,
                    0,
                    0,
                    SysFlag.TRANSACTION_PREPARED_TYPE,
                    SysFlag.TRANSACTION_COMMIT_TYPE,
                    SysFlag.TRANSACTION_ROLLBACK_TYPE,
                    0x2 | 0xC,
                ]
            )
        )
        out.append(req(off, ts, uniq=uniq, keys=keys, topic=draw(st.sampled_from(_TOPICS)), sys_flag=flag))
    cuts = draw(st.lists(st.integers(min_value=0, max_value=n), max_size=8))
    return out, sorted(set(cuts))


def _poke_garbage_slots(s: IndexService, values: list[int]) -> None:
    """Slot values a torn write can leave behind: negative, or beyond indexCount."""
    f = s.index_files[-1]
    with open(f.path, "r+b") as fh:
        for slot, v in enumerate(values[: f.hash_slot_num]):
            if v:
                fh.seek(40 + 4 * slot)
                fh.write(struct.pack(">i", v))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    dispatch_stream(),
    st.sampled_from([(7, 13), (3, 2), (1, 5), (50, 200)]),
    st.sampled_from([0, 12]),
    st.sampled_from([3, 1024]),
    st.lists(st.sampled_from([0, -1, 3, 6, 9, 40, 10**6]), max_size=50),
)
def test_batch_is_byte_identical_to_per_record(stream, sizes, min_keys, max_records, garbage) -> None:
    reqs, cuts = stream
    slots, entries = sizes
    with tempfile.TemporaryDirectory() as d:
        single = make_service(os.path.join(d, "single"), slots=slots, entries=entries)
        batch = make_service(os.path.join(d, "batch"), slots=slots, entries=entries)
        batch.BATCH_MIN_KEYS = min_keys
        batch.BATCH_MAX_RECORDS = max_records
        start = 0
        if garbage:
            # Both start from the same damaged slot table.
            for i, r in enumerate(reqs):
                single.build_index(r)
                batch.build_index(r)
                if single.index_files:
                    start = i + 1
                    _poke_garbage_slots(single, garbage)
                    _poke_garbage_slots(batch, garbage)
                    break
        for r in reqs[start:]:
            single.build_index(r)
        cuts = [c for c in cuts if c > start]
        bounds = [start] + cuts + [len(reqs)]
        for a, b in zip(bounds, bounds[1:], strict=False):
            batch.build_index_batch(reqs[a:b])
        assert _service_file_contents(batch) == _service_file_contents(single)
        for fs, fb in zip(single.index_files, batch.index_files, strict=False):
            assert (
                fs.begin_timestamp,
                fs.end_timestamp,
                fs.begin_phy_offset,
                fs.end_phy_offset,
                fs.hash_slot_count,
                fs.index_count,
            ) == (
                fb.begin_timestamp,
                fb.end_timestamp,
                fb.begin_phy_offset,
                fb.end_phy_offset,
                fb.hash_slot_count,
                fb.index_count,
            )
        assert len(single.take_full_unflushed()) == len(batch.take_full_unflushed())
        close_service(single)
        close_service(batch)


def test_batch_large_realistic(tmp_path: Path) -> None:
    reqs = [
        req(300 * i, 1_700_000_000_000 + i, uniq=f"{i:032X}", keys=f"order-{i} user-{i % 97}", topic="TopicTest")
        for i in range(5000)
    ]
    single = make_service(tmp_path / "s", slots=1000, entries=4000)
    batch = make_service(tmp_path / "b", slots=1000, entries=4000)
    for r in reqs:
        single.build_index(r)
    for i in range(0, len(reqs), 777):
        batch.build_index_batch(reqs[i : i + 777])
    assert len(batch.index_files) == 4
    assert _service_file_contents(batch) == _service_file_contents(single)
    expected = [300 * i for i in range(4999, -1, -1) if i % 97 == 5]  # 52 messages
    assert batch.query_offset("TopicTest", "user-5", 64, 0, FAR_FUTURE).phy_offsets == expected
    close_service(single)
    close_service(batch)


# --- the real RocketMQ 4.9.8 index file --------------------------------------------------
def stored_records(store: Path) -> list[MessageExt]:
    """Every record of a store's CommitLog, file by file up to its BLANK or write end."""
    out = []
    for name in sorted(os.listdir(store / "commitlog")):
        data = (store / "commitlog" / name).read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            size, magic = struct.unpack_from(">ii", data, pos)
            if magic == BLANK_MAGIC_CODE or size <= 0:
                break
            out.append(decode_record(data, pos))
            pos += size
    return out


def _rocketmq_requests(store: Path) -> list[DispatchRequest]:
    return [
        DispatchRequest(
            topic=m.topic,
            queue_id=m.queue_id,
            commit_log_offset=m.commit_log_offset,
            msg_size=m.store_size,
            tags_code=0,
            store_timestamp=m.store_timestamp,
            consume_queue_offset=m.queue_offset,
            keys=m.keys,
            uniq_key=m.uniq_key,
            sys_flag=m.sys_flag,
        )
        for m in stored_records(store)
    ]


@pytest.fixture(scope="module")
def rocketmq_index(rocketmq_store_pristine: Path):
    store = rocketmq_store_pristine
    (topic,) = os.listdir(store / "consumequeue")
    (name,) = os.listdir(store / "index")
    return store, topic, store / "index" / name


def test_rocketmq_index_file_lookups(rocketmq_index) -> None:
    store, topic, path = rocketmq_index
    assert topic.startswith("InteropCpp")
    reqs = _rocketmq_requests(store)
    assert len(reqs) == 2000
    assert {r.keys for r in reqs} == {f"key-{n} key2-{n}" for n in range(2000)}
    assert all(r.uniq_key for r in reqs) and len({r.uniq_key for r in reqs}) == 2000

    f = IndexFile.load(str(path), 5_000_000, 20_000_000)
    try:
        hdr = read_header(path)
        # RocketMQ indexed UNIQ_KEY + 2 KEYS tokens per message: 3 x 2000 entries
        assert hdr[5] - 1 == f.entry_count == 3 * 2000
        assert (f.begin_phy_offset, f.end_phy_offset) == (reqs[0].commit_log_offset, reqs[-1].commit_log_offset)
        assert (f.begin_timestamp, f.end_timestamp) == (reqs[0].store_timestamp, reqs[-1].store_timestamp)
        by_n = {int(r.keys.split()[0][4:]): r for r in reqs}
        assert f.select_phy_offsets(topic + "#key-7", 32, 0, FAR_FUTURE) == [by_n[7].commit_log_offset]
        assert f.select_phy_offsets(topic + "#key2-1999", 32, 0, FAR_FUTURE) == [by_n[1999].commit_log_offset]
        assert f.select_phy_offsets(topic + "#key-2000", 32, 0, FAR_FUTURE) == []
        for r in reqs:
            for k in [r.uniq_key] + r.keys.split():
                assert r.commit_log_offset in f.select_phy_offsets(f"{topic}#{k}", 32, 0, FAR_FUTURE), k
        # time window: key-7 lies outside a window that ends before it was stored
        assert f.select_phy_offsets(topic + "#key-7", 32, 0, by_n[7].store_timestamp - 2000) == []
    finally:
        f.close()


def test_rocketmq_index_via_service(rocketmq_index, tmp_path: Path) -> None:
    store, topic, path = rocketmq_index
    root = tmp_path / "store"
    root.mkdir()
    os.symlink(store / "index", root / "index")  # read-only use of the pristine file
    cfg = MessageStoreConfig(storePathRootDir=str(root))
    s = IndexService(cfg, StoreCheckpoint(cfg.checkpoint_path))
    s.load(last_exit_ok=True)
    assert [f.file_name for f in s.index_files] == [path.name]
    res = s.query_offset(topic, "key-7", 32, 0, FAR_FUTURE)
    assert len(res.phy_offsets) == 1
    assert res.index_last_update_phyoffset == s.index_files[0].end_phy_offset
    close_service(s)


def test_rebuilt_index_is_byte_identical_to_rocketmq(rocketmq_index, tmp_path: Path) -> None:
    store, topic, path = rocketmq_index
    reqs = _rocketmq_requests(store)
    theirs = np.fromfile(path, dtype=np.uint8)
    for mode in ("single", "batch"):
        root = tmp_path / mode
        s = make_service(root, slots=5_000_000, entries=20_000_000)
        if mode == "single":
            for r in reqs:
                s.build_index(r)
        else:
            s.build_index_batch(reqs)
        (f,) = s.index_files
        ours = np.fromfile(f.path, dtype=np.uint8)
        assert ours.shape == theirs.shape
        diff = np.flatnonzero(ours != theirs)
        assert diff.size == 0, f"{mode}: first differing byte at {diff[:5]}"
        s.destroy()
        s.checkpoint.close()


def test_a_record_indexed_twice_by_recovery_is_answered_once(svc: IndexService) -> None:
    # re-dispatch after recovery replays the record at endPhyOffset (as RocketMQ does)
    svc.build_index(req(100, 1_000, uniq="U1", keys="k"))
    svc.build_index(req(200, 2_000, uniq="U2", keys="k"))
    svc.build_index(req(200, 2_000, uniq="U2", keys="k"))
    assert svc.query_offset("T", "U2", 10, 0, FAR_FUTURE).phy_offsets == [200]
    assert svc.query_offset("T", "k", 10, 0, FAR_FUTURE).phy_offsets == [200, 100]
