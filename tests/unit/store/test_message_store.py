"""MessageStore: put path, rolling, reads, statuses, illegal input, recovery."""

from __future__ import annotations

import logging
import os
import struct
import time
from pathlib import Path

import pytest

from rmq.protocol.message import (
    BLANK_MAGIC_CODE,
    SCHEDULE_TOPIC,
    BatchItem,
    MessageExtBatch,
    MessageExtBrokerInner,
    SysFlag,
    decode_record,
    decode_records,
    java_hash,
)
from rmq.store.config import FlushDiskType
from rmq.store.errors import StoreLockedError
from rmq.store.message_filter import TagsMessageFilter
from rmq.store.message_store import MessageStore
from rmq.store.results import GetMessageStatus, PutMessageStatus

from .conftest import msg, small_config

FILE = 16 * 1024


def walk_commitlog(root: Path) -> tuple[list[tuple[int, int]], list[int]]:
    """(offset, size) of every record and the offsets of BLANK markers, file by file."""
    records: list[tuple[int, int]] = []
    blanks: list[int] = []
    for name in sorted(os.listdir(root / "commitlog")):
        data = (root / "commitlog" / name).read_bytes()
        base = int(name)
        pos = 0
        while pos + 8 <= len(data):
            size, magic = struct.unpack_from(">ii", data, pos)
            if magic == BLANK_MAGIC_CODE:
                assert pos + size == len(data), "BLANK must pad exactly to the end of the file"
                blanks.append(base + pos)
                break
            if size == 0:
                break
            records.append((base + pos, size))
            assert pos + size <= len(data), "a record spans two files"
            pos += size
    return records, blanks


async def test_roll_across_many_small_files(open_store, tmp_path):
    root = tmp_path / "store"
    sent = []
    async with open_store() as st:
        for i in range(400):
            body = os.urandom(50 + (i * 37) % 900)
            r = await st.put(msg(body=body, queue_id=i % 3, KEYS=f"k{i}"))
            assert r.status is PutMessageStatus.PUT_OK
            sent.append((r.wrote_offset, r.wrote_bytes, body))
        await st.reput.wait_caught_up()
        files = st.commitlog.mfq.mapped_files
        assert len(files) >= 10
    records, blanks = walk_commitlog(root)
    assert [(o, s) for o, s, _ in sent] == records
    # every file but the last ends with a BLANK, at a position where the next record
    # (size + 8) did not fit
    assert len(blanks) == len(os.listdir(root / "commitlog")) - 1
    for b in blanks:
        nxt = next(s for o, s, _ in sent if o >= b)
        remaining = FILE - b % FILE
        assert nxt + 8 > remaining
    for off, size, body in sent:
        assert off // FILE == (off + size - 1) // FILE
        data = (root / "commitlog" / f"{off - off % FILE:020d}").read_bytes()[off % FILE : off % FILE + size]
        m = decode_record(data, check_crc=True)
        assert m.body == body and m.commit_log_offset == off


async def test_put_result_fields_and_msg_id(open_store):
    async with open_store() as st:
        r1 = await st.put(msg(queue_id=2))
        r2 = await st.put(msg(queue_id=2))
        assert (r1.queue_offset, r2.queue_offset) == (0, 1)
        assert r2.wrote_offset == r1.wrote_offset + r1.wrote_bytes
        assert r1.msg_id == "7F0000010000" + "2A9F" + f"{r1.wrote_offset:016X}"
        assert r1.store_timestamp <= int(time.time() * 1000)


async def test_batch_is_consecutive_and_atomic(open_store):
    async with open_store() as st:
        await st.put(msg(queue_id=1))
        items = [BatchItem(7, f"b{i}".encode(), f"UNIQ_KEY\x01U{i}\x02") for i in range(10)]
        r = await st.put_batch(MessageExtBatch(topic="TopicA", queue_id=1, items=items, properties={"CLUSTER": "c1"}))
        assert r.status is PutMessageStatus.PUT_OK and r.msg_num == 10 and r.queue_offset == 1
        ids = r.msg_id.split(",")
        assert len(ids) == 10
        await st.reput.wait_caught_up()
        g = st.get_messages("g", "TopicA", 1, 1, 32)
        msgs = decode_records(g.body())
        assert [m.body for m in msgs] == [f"b{i}".encode() for i in range(10)]
        assert [m.queue_offset for m in msgs] == list(range(1, 11))
        assert all(m.properties["CLUSTER"] == "c1" and m.flag == 7 for m in msgs)
        assert [m.msg_id for m in msgs] == ids


async def test_batch_rejects_delay_and_transactions(open_store):
    async with open_store() as st:
        items = [BatchItem(0, b"x", "")]
        r = await st.put_batch(MessageExtBatch(topic="TopicA", items=items, properties={"DELAY": "2"}))
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
        r = await st.put_batch(MessageExtBatch(topic="TopicA", items=items, sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE))
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
        assert st.max_phy_offset == 0


@pytest.mark.parametrize(
    "topic,props,body,why",
    [
        ("x" * 128, {}, b"b", "longer"),
        ("bad topic", {}, b"b", "characters"),
        ("Topic/A", {}, b"b", "characters"),
        ("TopicA", {"k": "v" * 40000}, b"b", "properties"),
        ("TopicA", {}, b"b" * (64 * 1024), "maxMessageSize"),
    ],
)
async def test_illegal_messages_write_nothing(open_store, topic, props, body, why):
    async with open_store(maxMessageSize=32 * 1024, mappedFileSizeCommitLog=1 << 20) as st:
        m = MessageExtBrokerInner(topic=topic, body=body, properties=props)
        r = await st.put(m)
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
        assert why in r.remark
        assert st.max_phy_offset == 0


async def test_put_refused_when_not_running_or_slave(tmp_path):
    st = MessageStore(small_config(tmp_path / "s"))
    st.load()
    r = await st.put(msg())  # loaded, not started
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    await st.start()
    st.config.brokerRole = st.config.brokerRole.__class__("SLAVE")
    assert (await st.put(msg())).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    await st.shutdown()


async def test_get_messages_statuses(open_store):
    async with open_store() as st:
        g = st.get_messages("g", "Nope", 0, 0, 32)
        assert g.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        for i in range(5):
            await st.put(msg(queue_id=0, TAGS="a" if i % 2 else "b"))
        await st.reput.wait_caught_up()
        g = st.get_messages("g", "TopicA", 0, 0, 32)
        assert (g.status, g.next_begin_offset, g.min_offset, g.max_offset) == (GetMessageStatus.FOUND, 5, 0, 5)
        assert g.message_count == 5 and g.queue_offsets == [0, 1, 2, 3, 4]
        assert st.get_messages("g", "TopicA", 0, 5, 32).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        over = st.get_messages("g", "TopicA", 0, 9, 32)
        assert over.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and over.next_begin_offset == 0
        # max messages per pull
        g = st.get_messages("g", "TopicA", 0, 1, 2)
        assert g.message_count == 2 and g.next_begin_offset == 3
        # tag filter: only "a" (odd i); scanned units still advance the offset
        g = st.get_messages("g", "TopicA", 0, 0, 32, TagsMessageFilter.from_expression("a"))
        assert [m.properties["TAGS"] for m in decode_records(g.body())] == ["a", "a"]
        assert g.next_begin_offset == 5
        g = st.get_messages("g", "TopicA", 0, 0, 32, TagsMessageFilter.from_expression("zzz"))
        assert g.status is GetMessageStatus.NO_MATCHED_MESSAGE and g.next_begin_offset == 5


async def test_transfer_limits_in_memory(open_store):
    async with open_store(maxTransferCountOnMessageInMemory=3) as st:
        for _ in range(6):
            await st.put(msg())
        await st.reput.wait_caught_up()
        g = st.get_messages("g", "TopicA", 0, 0, 32)
        assert g.message_count == 3 and g.next_begin_offset == 3


async def test_transactions_prepared_and_rollback_not_dispatched(open_store):
    async with open_store() as st:
        a = await st.put(MessageExtBrokerInner("TopicT", b"prep", sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE))
        b = await st.put(MessageExtBrokerInner("TopicT", b"normal"))
        c = await st.put(MessageExtBrokerInner("TopicT", b"rollback", sys_flag=SysFlag.TRANSACTION_ROLLBACK_TYPE))
        d = await st.put(MessageExtBrokerInner("TopicT", b"commit", sys_flag=SysFlag.TRANSACTION_COMMIT_TYPE))
        assert [x.queue_offset for x in (a, b, c, d)] == [0, 0, 0, 1]
        await st.reput.wait_caught_up()
        g = st.get_messages("g", "TopicT", 0, 0, 32)
        assert [m.body for m in decode_records(g.body())] == [b"normal", b"commit"]


async def test_delay_rewrites_to_schedule_topic(open_store):
    async with open_store() as st:
        r = await st.put(msg(topic="TopicD", queue_id=3, DELAY="2", TAGS="t"))
        assert r.status is PutMessageStatus.PUT_OK
        clamped = await st.put(msg(topic="TopicD", queue_id=1, DELAY="99"))
        await st.reput.wait_caught_up()
        assert st.get_consume_queue("TopicD", 3) is None
        cq = st.get_consume_queue(SCHEDULE_TOPIC, 1)
        off, size, tag = cq.read_unit(0)
        m = decode_record(st.select_one_message_by_offset(off))
        assert (m.topic, m.queue_id) == (SCHEDULE_TOPIC, 1)
        assert m.properties["REAL_TOPIC"] == "TopicD" and m.properties["REAL_QID"] == "3"
        assert tag == m.store_timestamp + 2000  # level 2 = 2s in this config
        # level above the maximum is clamped to the last level (3 -> queue 2)
        off2, _, tag2 = st.get_consume_queue(SCHEDULE_TOPIC, 2).read_unit(0)
        m2 = decode_record(st.select_one_message_by_offset(off2))
        assert m2.properties["DELAY"] == "3" and tag2 == m2.store_timestamp + 3000
        assert off2 == clamped.wrote_offset


async def test_tag_code_in_consume_queue(open_store):
    async with open_store() as st:
        await st.put(msg(TAGS="TagA"))
        await st.put(msg(TAGS="日本"))
        await st.put(msg())
        await st.reput.wait_caught_up()
        cq = st.get_consume_queue("TopicA", 0)
        assert [cq.read_unit(i)[2] for i in range(3)] == [java_hash("TagA"), java_hash("日本"), 0]


async def test_query_by_key_and_uniq_key(open_store):
    async with open_store() as st:
        for i in range(30):
            await st.put(msg(KEYS=f"order-{i} shared", UNIQ_KEY=f"U{i}"))
        await st.reput.wait_caught_up()
        now = int(time.time() * 1000)
        q = st.query_message("TopicA", "order-7", 32, 0, now + 1000)
        assert [m.properties["UNIQ_KEY"] for m in decode_records(q.body())] == ["U7"]
        q = st.query_message("TopicA", "U9", 32, 0, now + 1000)
        assert [m.properties["KEYS"] for m in decode_records(q.body())] == ["order-9 shared"]
        q = st.query_message("TopicA", "shared", 32, 0, now + 1000)
        assert len(q.buffers) == 30
        assert st.query_message("OtherTopic", "order-7", 32, 0, now + 1000).buffers == []


async def test_offset_by_time(open_store):
    async with open_store() as st:
        times = []
        for _i in range(6):
            r = await st.put(msg())
            times.append(r.store_timestamp)
            time.sleep(0.003)
        await st.reput.wait_caught_up()
        get = st.get_offset_in_queue_by_time
        assert get("TopicA", 0, times[3]) == 3
        assert get("TopicA", 0, 0) == 0
        assert get("TopicA", 0, times[-1] + 10_000) == 5
        assert get("TopicA", 0, times[2] + 1, "LOWER") == 3
        assert get("TopicA", 0, times[2] + 1, "UPPER") == 2
        assert get("TopicA", 0, times[-1] + 1, "LOWER") == 6
        assert get("Nope", 0, 0) == 0
        assert st.get_earliest_message_time("TopicA", 0) == times[0]


async def test_arriving_listener_called_per_queue(tmp_path):
    seen = []
    st = MessageStore(small_config(tmp_path / "s"), arriving_listener=lambda t, q, o: seen.append((t, q, o)))
    st.load()
    await st.start()
    try:
        await st.put(msg(queue_id=0))
        await st.put(msg(queue_id=1))
        await st.reput.wait_caught_up()
        assert ("TopicA", 0, 1) in seen and ("TopicA", 1, 1) in seen
    finally:
        await st.shutdown()


async def test_second_store_on_same_dir_is_refused(open_store, tmp_path):
    async with open_store() as st:
        other = MessageStore(small_config(tmp_path / "store"))
        with pytest.raises(StoreLockedError, match="in use by another broker"):
            other.load()
        assert (await st.put(msg())).status is PutMessageStatus.PUT_OK


async def test_clean_shutdown_removes_abort_and_unused_preallocated_file(open_store, tmp_path):
    root = tmp_path / "store"
    async with open_store() as st:
        assert (root / "abort").exists()
        await st.put(msg(body=b"x" * 100))
    assert not (root / "abort").exists()
    # only the file holding data remains; the preallocated next one is gone
    assert sorted(os.listdir(root / "commitlog")) == ["0" * 20]


@pytest.mark.parametrize("mode", [FlushDiskType.SYNC_FLUSH, FlushDiskType.ASYNC_FLUSH])
async def test_restart_keeps_everything(open_store, tmp_path, mode):
    async with open_store(flushDiskType=mode) as st:
        for i in range(100):
            await st.put(msg(queue_id=i % 4, body=f"m{i}".encode(), KEYS=f"k{i}"))
    async with open_store(flushDiskType=mode) as st:
        assert [st.get_max_offset_in_queue("TopicA", q) for q in range(4)] == [25] * 4
        r = await st.put(msg(queue_id=2))
        assert r.queue_offset == 25
        await st.reput.wait_caught_up()
        bodies = [m.body for m in decode_records(st.get_messages("g", "TopicA", 1, 0, 32).body())]
        assert bodies == [f"m{i}".encode() for i in range(1, 100, 4)]
        assert st.query_message("TopicA", "k42", 32, 0, 2**62).buffers


async def test_flipped_byte_in_last_record_is_truncated(open_store, tmp_path, caplog):
    root = tmp_path / "store"
    async with open_store() as st:
        rs = [await st.put(msg(queue_id=0, body=bytes([i]) * 200, KEYS=f"k{i}")) for i in range(10)]
        await st.reput.wait_caught_up()
    last = rs[-1]
    path = root / "commitlog" / f"{last.wrote_offset - last.wrote_offset % FILE:020d}"
    data = bytearray(path.read_bytes())
    body_pos = last.wrote_offset % FILE + 88 + 50
    data[body_pos] ^= 0xFF
    path.write_bytes(bytes(data))
    caplog.set_level(logging.INFO, logger="rmq.store")
    async with open_store() as st:
        assert st.max_phy_offset == last.wrote_offset
        assert st.get_max_offset_in_queue("TopicA", 0) == 9
        assert any(
            "invalid record at offset %d" % last.wrote_offset in r.getMessage() and "CRC" in r.getMessage()
            for r in caplog.records
        )
        # the slot is reused by the next put, and nothing of the old record remains
        r = await st.put(msg(queue_id=0, body=b"new"))
        assert (r.wrote_offset, r.queue_offset) == (last.wrote_offset, 9)
        await st.reput.wait_caught_up()
        assert [m.body for m in decode_records(st.get_messages("g", "TopicA", 0, 8, 32).body())] == [
            bytes([8]) * 200,
            b"new",
        ]
        assert st.query_message("TopicA", "k9", 32, 0, 2**62).buffers == []


async def test_torn_tail_is_truncated_abnormal_recovery(open_store, tmp_path):
    """A record whose tail never arrived (size written, body missing) is dropped."""
    root = tmp_path / "store"
    async with open_store() as st:
        rs = [await st.put(msg(body=b"z" * 300)) for _ in range(5)]
    last = rs[-1]
    path = root / "commitlog" / f"{last.wrote_offset - last.wrote_offset % FILE:020d}"
    data = bytearray(path.read_bytes())
    p = last.wrote_offset % FILE
    data[p + 100 : p + last.wrote_bytes] = bytes(last.wrote_bytes - 100)
    path.write_bytes(bytes(data))
    (root / "abort").touch()
    async with open_store() as st:
        assert st.max_phy_offset == last.wrote_offset
        assert st.get_max_offset_in_queue("TopicA", 0) == 4


async def test_consume_queue_starting_at_nonzero_offset_is_blank_filled(open_store, tmp_path):
    async with open_store() as st:
        cq = st.find_consume_queue("TopicZ", 0)
        cq.put_message_position_info(1000, 100, 5, 70)  # 70 = first unit of the 2nd file (64 units/file) + 6
        f = cq.mfq.mapped_files[0]
        assert f.file_from_offset == 64 * 20
        assert cq.get_min_offset_in_queue() == 70 and cq.get_max_offset_in_queue() == 71
        blank = struct.pack(">qiq", 0, 0x7FFFFFFF, 0)
        assert f.mm[0 : 6 * 20] == blank * 6
        assert struct.unpack_from(">qiq", f.mm, 6 * 20) == (1000, 100, 5)
        # idempotent re-dispatch
        cq.put_message_position_info(1000, 100, 5, 70)
        assert cq.get_max_offset_in_queue() == 71
