"""Abnormal recovery re-dispatches only what the ConsumeQueues and the index do not
already hold, when the page cache outlived the broker (the `abort` file names this
boot); the RocketMQ way (from the checkpoint's CommitLog file) otherwise. Torn tails
are cut either way; a put cut short in the index is undone; the index is checkpointed
by the thorough ConsumeQueue flush."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.index import INDEX_HEADER_SIZE, IndexFile, IndexService, index_key_hashes
from rmq.store.message_store import MessageStore
from rmq.store.recovery import page_cache_outlived, write_abort_marker
from rmq.store.results import PutMessageStatus

from .conftest import msg, small_config

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/sys/kernel/random/boot_id"), reason="needs a boot id")


async def _crashed_store(root: Path, dispatched: int, undispatched: int) -> tuple[int, int]:
    """A store left as a SIGKILL leaves it: `dispatched` messages in the queues and
    the index, then `undispatched` more only in the CommitLog. Returns (the offset
    dispatch reached, the CommitLog end)."""
    st = MessageStore(small_config(root))
    st.load()
    await st.start()
    for i in range(dispatched):
        r = await st.put(msg(body=b"m%d" % i, queue_id=i % 2, KEYS=f"k{i}", UNIQ_KEY=f"U{i:08d}"))
        assert r.status == PutMessageStatus.PUT_OK
    assert await st.reput.wait_caught_up(timeout=10)
    reached = st.commitlog.max_offset
    st.set_dispatch_limit(reached)
    for i in range(dispatched, dispatched + undispatched):
        r = await st.put(msg(body=b"m%d" % i, queue_id=i % 2, KEYS=f"k{i}", UNIQ_KEY=f"U{i:08d}"))
        assert r.status == PutMessageStatus.PUT_OK
    st.commit_now()
    end = st.commitlog.max_offset
    st.close_after_crash_test()  # `abort` stays, as after a kill
    return reached, end


@contextlib.asynccontextmanager
async def _reopened(root: Path) -> AsyncIterator[MessageStore]:
    """The store at root loaded (recovered), always shut down afterwards."""
    st = MessageStore(small_config(root))
    st.load()
    try:
        yield st
    finally:
        await st.shutdown()


async def _check_all_there(st: MessageStore, n: int) -> None:
    total = sum(st.find_consume_queue("TopicA", q).get_max_offset_in_queue() for q in (0, 1))
    assert total == n
    for i in (0, n // 2, n - 1):
        r = st.reader.query_message("TopicA", f"k{i}", 32, 0, 2**62)
        assert len(r.buffers) == 1, (i, r)  # found, and indexed once


async def test_kill_recovery_redispatches_only_what_dispatch_had_not_reached(tmp_path):
    root = tmp_path / "store"
    reached, end = await _crashed_store(root, dispatched=60, undispatched=25)
    assert page_cache_outlived(str(root / "abort"))
    async with _reopened(root) as st:
        assert st.page_cache_intact
        assert st.recovery.redispatched == 25
        assert st.commitlog.recovery_records == 25  # nothing before `reached` is read again
        assert st.commitlog.max_offset == end
        await st.start()
        await _check_all_there(st, 85)


async def test_abort_file_of_another_boot_recovers_from_the_checkpoint(tmp_path):
    root = tmp_path / "store"
    await _crashed_store(root, dispatched=60, undispatched=25)
    (root / "abort").write_bytes(b"00000000-0000-0000-0000-000000000000\n")  # a reboot since
    async with _reopened(root) as st:
        assert not st.page_cache_intact
        # the checkpoint was never flushed (min time 0): from the first CommitLog file
        assert st.recovery.redispatched == 85
        await st.start()
        await _check_all_there(st, 85)


async def test_empty_abort_file_is_not_trusted(tmp_path):
    path = tmp_path / "abort"
    path.write_bytes(b"")  # RocketMQ's (or an older rmq's) abort file
    assert not page_cache_outlived(str(path))
    write_abort_marker(str(path))
    assert page_cache_outlived(str(path))


async def test_torn_tail_after_kill_is_truncated_with_a_log_line(tmp_path, caplog):
    root = tmp_path / "store"
    reached, end = await _crashed_store(root, dispatched=40, undispatched=3)
    # a record whose write was cut: its head (TOTALSIZE, magic) and part of the rest
    cfg = small_config(root)
    size = cfg.mappedFileSizeCommitLog
    name = root / "commitlog" / f"{end // size * size:020d}"
    with open(name, "r+b") as f:
        f.seek(end % size)
        f.write(struct.pack(">ii", 200, -626843481) + b"\x01" * 30)
    caplog.set_level(logging.INFO, logger="rmq.store")
    st = MessageStore(cfg)
    st.load()
    try:
        assert st.page_cache_intact
        assert st.commitlog.max_offset == end
        assert st.recovery.redispatched == 3
        assert any(
            f"invalid record at offset {end}" in r.getMessage() and "truncating" in r.getMessage()
            for r in caplog.records
        ), [r.getMessage() for r in caplog.records]
        with open(name, "rb") as f:
            f.seek(end % size)
            assert f.read(38) == bytes(38)  # zeroed
        await st.start()
        await _check_all_there(st, 43)
    finally:
        await st.shutdown()


async def test_queues_pointing_past_the_commitlog_fall_back_to_the_checkpoint_way(tmp_path, caplog):
    """If the record that should end where the queues stop is not there (a CommitLog
    cut behind the broker's back), the shortcut is not taken."""
    root = tmp_path / "store"
    reached, end = await _crashed_store(root, dispatched=30, undispatched=0)
    cfg = small_config(root)
    size = cfg.mappedFileSizeCommitLog
    name = root / "commitlog" / f"{(end - 1) // size * size:020d}"
    with open(name, "r+b") as f:  # zero the last record: the queues point past the end
        f.seek((end - 1) % size - 200)
        f.write(bytes(201))
    caplog.set_level(logging.INFO, logger="rmq.store")
    st = MessageStore(cfg)
    st.load()
    try:
        assert any("recovering the RocketMQ way instead" in r.getMessage() for r in caplog.records)
        assert st.commitlog.max_offset < end
        await st.start()
    finally:
        await st.shutdown()


def test_repair_cut_put_sets_slots_back(tmp_path):
    path = str(tmp_path / "20260101000000000")
    f = IndexFile.create(path, 64, 400, 0, 0)
    try:
        keys = [f"T#k{i}" for i in range(100)]
        h = index_key_hashes(keys)
        phys = np.arange(100, dtype=np.int64) * 100
        tss = np.full(100, 1_700_000_000_000, dtype=np.int64)
        assert f.put_hashes(h[:60], phys[:60], tss[:60]) == 60
        before = bytes(f.mapped_file.mm[INDEX_HEADER_SIZE : INDEX_HEADER_SIZE + 64 * 4])
        header = (f.index_count, f.end_phy_offset, f.end_timestamp, f.hash_slot_count)
        # the next put is cut after its slots and entries, before the header
        f.put_hashes(h[60:], phys[60:], tss[60:])
        f.index_count, f.end_phy_offset, f.end_timestamp, f.hash_slot_count = header
        assert f.repair_cut_put() > 0
        assert bytes(f.mapped_file.mm[INDEX_HEADER_SIZE : INDEX_HEADER_SIZE + 64 * 4]) == before
        for i in range(60):
            assert i * 100 in f.select_phy_offsets(keys[i], 32, 0, 2**62)
        assert f.repair_cut_put() == 0
    finally:
        f.close()


async def test_thorough_cq_flush_checkpoints_the_index_being_written(tmp_path):
    root = tmp_path / "store"
    st = MessageStore(small_config(root, maxIndexNum=100000, maxHashSlotNum=1000))
    st.load()
    await st.start()
    try:
        for i in range(20):
            await st.put(msg(body=b"x", KEYS=f"k{i}"))
        assert await st.reput.wait_caught_up(timeout=10)
        assert st.flush_cq_service is not None and st.index_service is not None
        await st.flush_cq_service.flush_once(0)  # a thorough round
        live = st.index_service.index_files[-1]
        assert not live.is_write_full()
        assert st.checkpoint is not None and st.checkpoint.index_msg_timestamp == live.end_timestamp - 1 > 0
        await st.flush_cq_service.flush_once(0)  # the next one writes it to the file
        ck = StoreCheckpoint(str(root / "checkpoint"))
        try:
            assert ck.index_msg_timestamp == live.end_timestamp - 1
        finally:
            ck.close()
    finally:
        await st.shutdown()


@pytest.mark.parametrize("interrupted", [False, True], ids=["whole", "killed-after-the-cut"])
async def test_after_a_power_loss_the_index_keeps_what_its_checkpoint_proves_synced(tmp_path, caplog, interrupted):
    """Another boot: the index file being written is not deleted (RocketMQ would, and
    rebuild it from its first record) but cut back to the entries indexMsgTimestamp
    covers; re-dispatch indexes the rest, each record once. Also when a first recovery
    was killed right after the cut (the next one sees no file to cut back)."""
    root = tmp_path / "store"
    cfg = small_config(root, maxIndexNum=100000, maxHashSlotNum=1000)
    st = MessageStore(cfg)
    st.load()
    await st.start()
    for i in range(30):
        await st.put(msg(body=b"m%d" % i, queue_id=i % 2, KEYS=f"k{i}", UNIQ_KEY=f"U{i:08d}"))
    await asyncio.sleep(2.1)  # entries keep whole seconds: these are a second older than the checkpoint
    for i in range(30, 40):
        await st.put(msg(body=b"m%d" % i, queue_id=i % 2, KEYS=f"k{i}", UNIQ_KEY=f"U{i:08d}"))
    assert await st.reput.wait_caught_up(timeout=10)
    assert st.flush_cq_service is not None and st.checkpoint is not None
    await st.flush_cq_service.flush_once(0)  # syncs the index file being written
    await st.flush_cq_service.flush_once(0)  # and writes its indexMsgTimestamp
    synced = st.checkpoint.index_msg_timestamp
    assert synced > 0
    for i in range(40, 55):
        await st.put(msg(body=b"m%d" % i, queue_id=i % 2, KEYS=f"k{i}", UNIQ_KEY=f"U{i:08d}"))
    assert await st.reput.wait_caught_up(timeout=10)
    st.close_after_crash_test()
    (root / "abort").write_bytes(b"00000000-0000-0000-0000-000000000000\n")  # a reboot since
    caplog.set_level(logging.INFO, logger="rmq.store")
    if interrupted:  # a recovery that got as far as cutting the index back
        part = MessageStore(cfg)
        part.commitlog.load()
        ck = StoreCheckpoint(str(root / "checkpoint"))
        idx = IndexService(cfg, ck)
        idx.load(False, False, part._record_end)
        idx.shutdown()
        ck.close()
        part.commitlog.shutdown()
    st = MessageStore(cfg)
    st.load()
    try:
        assert not st.page_cache_intact
        msgs = [r.getMessage() for r in caplog.records]
        assert not any("deleting index file" in m for m in msgs), msgs
        kept = [m for m in msgs if "keeps the" in m]
        assert len(kept) == 1, msgs
        n_kept = int(re.search(r"keeps the (\d+) entries", kept[0]).group(1))
        assert 60 <= n_kept <= 80  # the first 30 records' two keys each at least; never the last 15
        await st.start()
        assert st.index_service is not None
        assert sum(f.entry_count for f in st.index_service.index_files) == 2 * 55  # each key once
        for i in (0, 29, 30, 39, 40, 54):
            r = st.reader.query_message("TopicA", f"k{i}", 32, 0, 2**62)
            assert len(r.buffers) == 1, (i, r)
            r = st.reader.query_message("TopicA", f"U{i:08d}", 32, 0, 2**62)
            assert len(r.buffers) == 1, (i, r)
    finally:
        await st.shutdown()
