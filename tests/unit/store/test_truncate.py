"""MessageStore.truncate_to: after it the store is the store that never received the
dropped records (a returning old master's divergent tail), byte for byte.

Two stores receive the same messages at the same (fake) store times; one gets a
suffix more and is truncated back. CommitLog files, ConsumeQueue files, index file
contents, max offsets and the queue-offset table must then be identical, and so must
they after both receive the same further messages.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rmq.protocol.message import MessageExtBrokerInner, properties_to_string, record_length
from rmq.store.config import BrokerRole
from rmq.store.errors import StoreError
from rmq.store.message_store import MessageStore

from .conftest import small_config

FILE = 16 * 1024  # CommitLog file size (small_config)
N = 420  # 2 keys each: 840 index entries, two 512-entry index files


class FakeClock:
    """Store time of every put, the same in both stores."""

    def __init__(self) -> None:
        self.now_ms = 1_700_000_000_000

    def time_ns(self) -> int:
        return self.now_ms * 1_000_000


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr("rmq.store.message_store.now_ms", lambda: c.now_ms)
    return c


def message(i: int) -> MessageExtBrokerInner:
    # sizes vary so records land at every position of the 16 KiB files
    body = (b"m%05d-" % i) * (5 + (i * 37) % 90)
    topic = ("TopicA", "TopicB", "TopicC")[i % 3]
    return MessageExtBrokerInner(
        topic=topic,
        body=body,
        queue_id=i % 4,
        born_timestamp=1000 + i,
        properties={"KEYS": f"k{i} g{i % 7}", "TAGS": f"t{i % 5}"},
    )


async def put_range(st: MessageStore, clock: FakeClock, lo: int, hi: int) -> list[int]:
    """Put messages lo..hi-1; returns the end offset of each."""
    ends = []
    for i in range(lo, hi):
        clock.now_ms = 1_700_000_000_000 + i * 250
        r = await st.put(message(i))
        assert r.status.stored, r
        ends.append(r.wrote_offset + r.wrote_bytes)
    assert await st.reput.wait_caught_up(timeout=10)
    return ends


def snapshot(st: MessageStore) -> dict:
    """Everything truncation must restore, read from the open store."""
    cl = st.commitlog
    out: dict = {
        "max": cl.max_offset,
        "min": cl.min_offset,
        "commitlog": [
            (mf.file_name, mf.wrote_position, mf.committed_position, bytes(mf.mm)) for mf in cl.mfq.mapped_files
        ],
        "table": dict(cl.topic_queue_table),
        "cq": {},
        "index": [],
    }
    for topic, qs in st.consume_queue_table.items():
        for qid, cq in qs.items():
            out["cq"][(topic, qid)] = (
                cq.get_min_offset_in_queue(),
                cq.get_max_offset_in_queue(),
                cq.max_physic_offset,
                [(mf.file_name, mf.wrote_position, bytes(mf.mm)) for mf in cq.mfq.mapped_files],
            )
    if st.index_service is not None:
        for f in st.index_service.index_files:
            out["index"].append(
                (
                    f.index_count,
                    f.hash_slot_count,
                    f.begin_phy_offset,
                    f.end_phy_offset,
                    f.begin_timestamp,
                    f.end_timestamp,
                    bytes(f.mapped_file.mm),
                )
            )
    return out


def assert_same(a: dict, b: dict) -> None:
    assert a["max"] == b["max"] and a["min"] == b["min"]
    assert [x[:3] for x in a["commitlog"]] == [x[:3] for x in b["commitlog"]]
    for x, y in zip(a["commitlog"], b["commitlog"], strict=False):
        assert x[3] == y[3], f"CommitLog file {x[0]} differs"
    assert a["table"] == b["table"]
    assert a["cq"].keys() == b["cq"].keys()
    for k in a["cq"]:
        assert a["cq"][k] == b["cq"][k], f"ConsumeQueue {k} differs"
    assert [x[:6] for x in a["index"]] == [x[:6] for x in b["index"]]
    for i, (x, y) in enumerate(zip(a["index"], b["index"], strict=False)):
        assert x[6] == y[6], f"index file #{i} differs"


async def started_pair(tmp_path) -> tuple[MessageStore, MessageStore]:
    """Two started stores, a (the one truncated) and b (the prefix it must equal)."""
    a, b = open_store(tmp_path / "a"), open_store(tmp_path / "b")
    await a.start()
    await b.start()
    return a, b


async def stores_agree(a: MessageStore, b: MessageStore) -> None:
    assert_same(snapshot(a), snapshot(b))
    await reads_agree(a, b)


async def reads_agree(a: MessageStore, b: MessageStore) -> None:
    for topic in ("TopicA", "TopicB", "TopicC"):
        for qid in range(4):
            ra = a.get_messages("g", topic, qid, 0, 1000)
            rb = b.get_messages("g", topic, qid, 0, 1000)
            assert (ra.status, ra.next_begin_offset, ra.max_offset) == (rb.status, rb.next_begin_offset, rb.max_offset)
            assert [bytes(x) for x in ra.buffers] == [bytes(x) for x in rb.buffers]
    for key in ("g3", "k5", f"k{N - 1}"):
        qa = a.query_message("TopicA", key, 64, 0, 2**62)
        qb = b.query_message("TopicA", key, 64, 0, 2**62)
        assert sorted(map(bytes, qa.buffers)) == sorted(map(bytes, qb.buffers))


def open_store(root: Path, **kw) -> MessageStore:
    kw.setdefault("mappedFileSizeConsumeQueue", 20 * 16)  # 35 units a queue: 3 files
    st = MessageStore(small_config(root, **kw))
    st.load()
    return st


async def test_reference_run_crosses_files(tmp_path, clock):
    """The workload really spans CommitLog, ConsumeQueue and index files."""
    st = open_store(tmp_path / "s")
    await st.start()
    try:
        await put_range(st, clock, 0, N)
        assert len(st.commitlog.mfq.mapped_files) >= 6
        assert len(st.index_service.index_files) == 2
        assert any(len(cq.mfq.mapped_files) >= 2 for qs in st.consume_queue_table.values() for cq in qs.values())
    finally:
        await st.shutdown()


def _cut_points(ends: list[int]) -> dict[str, int]:
    """Message counts P to keep: mid file, the last record of a file (cut at its
    BLANK), the first record of a file (cut at a file start), inside the second index
    file, at a record whose two keys straddle the index files, nothing, everything."""
    # message i starts a file when the previous one's end is in an earlier file
    # position-wise: its own start (end - size) is a multiple of FILE
    sizes = [len_record(i) for i in range(len(ends))]
    first_of_file = next(i for i in range(1, len(ends)) if (ends[i] - sizes[i]) % FILE == 0)
    return {
        "mid": 37,
        "blank": first_of_file,
        "file_start": first_of_file,
        "index2": 300,
        "index_edge": 256,
        "index_straddle": 255,
        "all": 0,
        "none": N,
    }


def len_record(i: int) -> int:
    m = message(i)
    return record_length(0, len(m.body), len(m.topic), len(properties_to_string(m.properties).encode()))


@pytest.mark.parametrize(
    "where", ["mid", "blank", "file_start", "index2", "index_edge", "index_straddle", "all", "none"]
)
async def test_truncate_equals_prefix_store(tmp_path, clock, where):
    a, b = await started_pair(tmp_path)
    try:
        ends = await put_range(a, clock, 0, N)
        p = _cut_points(ends)[where]
        offset = ends[p - 1] if p else 0
        if where == "file_start":
            # the previous file ends with a BLANK: its end is also a boundary
            offset = (offset // FILE + 1) * FILE
            assert offset < ends[p]
        await put_range(b, clock, 0, p)
        a.config.brokerRole = BrokerRole.SLAVE
        dropped = await a.truncate_to(offset)
        assert dropped == ends[-1] - offset
        if where != "file_start":
            await stores_agree(a, b)
        # (file_start: a keeps the BLANK b has not written yet; b writes it with the
        # next put, then they agree again)
        # both go on with the same new messages
        a.config.brokerRole = BrokerRole.ASYNC_MASTER
        await put_range(a, clock, p, p + 60)
        await put_range(b, clock, p, p + 60)
        await stores_agree(a, b)
    finally:
        await a.shutdown()
        await b.shutdown()


async def test_stopped_store_then_restart_and_crash(tmp_path, clock):
    """Truncating a loaded, not started store (no dispatch running); the result
    survives a clean restart and a crash, as the prefix store does the same ones."""
    a, b = await started_pair(tmp_path)
    ends = await put_range(a, clock, 0, N)
    await put_range(b, clock, 0, 200)
    await a.shutdown()
    a = open_store(tmp_path / "a")
    try:
        assert await a.truncate_to(ends[199]) == ends[-1] - ends[199]
        await a.start()
        assert_same(snapshot(a), snapshot(b))
        for st in (a, b):
            await st.shutdown()
        a, b = open_store(tmp_path / "a"), open_store(tmp_path / "b")
        for st in (a, b):
            await st.start()
        assert_same(snapshot(a), snapshot(b))
        for st in (a, b):
            st.close_after_crash_test()
        a, b = open_store(tmp_path / "a"), open_store(tmp_path / "b")
        for st in (a, b):
            assert not st.last_exit_ok
            await st.start()
        await stores_agree(a, b)
    finally:
        await a.shutdown()
        await b.shutdown()


async def test_refuses_what_is_not_a_record_start(tmp_path, clock):
    a = open_store(tmp_path / "a")
    await a.start()
    try:
        ends = await put_range(a, clock, 0, 50)
        a.config.brokerRole = BrokerRole.SLAVE
        before = snapshot(a)
        for bad, why in [
            (ends[10] + 1, "no record starts there"),
            (ends[10] + 28, "no record starts there"),
            (ends[-1] + 1, "past the end"),
            (ends[10] - 4, "no record starts there"),
        ]:
            with pytest.raises(StoreError, match=f"offset {bad}: .*{why}"):
                await a.truncate_to(bad)
        assert_same(snapshot(a), before)
        # a record that says it lives elsewhere (copied bytes) is not a boundary either
        cl = a.commitlog
        mf = cl.mfq.mapped_files[0]
        rec = ends[3]
        size = ends[4] - ends[3]
        fake_at = ends[5]
        assert (fake_at // FILE) == (rec // FILE)
        err = cl.record_boundary_error(fake_at)
        assert err is None  # a real record starts there
        saved = bytes(mf.mm[fake_at - mf.file_from_offset : fake_at - mf.file_from_offset + size])
        mf.mm[fake_at - mf.file_from_offset : fake_at - mf.file_from_offset + size] = bytes(
            mf.mm[rec - mf.file_from_offset : rec - mf.file_from_offset + size]
        )
        try:
            assert "says it is at offset" in cl.record_boundary_error(fake_at)
        finally:
            mf.mm[fake_at - mf.file_from_offset : fake_at - mf.file_from_offset + size] = saved
        # a writable store is refused, whatever the offset
        a.config.brokerRole = BrokerRole.SYNC_MASTER
        with pytest.raises(StoreError, match="make it a SLAVE first"):
            await a.truncate_to(ends[10])
        assert_same(snapshot(a), before)
    finally:
        await a.shutdown()


async def test_refuses_offsets_before_the_first_file(tmp_path, clock):
    a = open_store(tmp_path / "a")
    await a.start()
    ends = await put_range(a, clock, 0, 120)
    await a.shutdown()
    os.unlink(tmp_path / "a" / "commitlog" / f"{0:020d}")  # as if expired
    a = open_store(tmp_path / "a")
    try:
        with pytest.raises(StoreError, match="before the first CommitLog file"):
            await a.truncate_to(ends[2])
        await a.truncate_to(FILE)  # the first file left: everything goes, the
        assert a.commitlog.max_offset == FILE  # log keeps its place
        assert a.consume_queue_table == {}
        await a.start()
        r = await a.put(message(0))
        assert r.wrote_offset == FILE
    finally:
        await a.shutdown()


async def test_slave_tail_cut_mid_record(tmp_path, clock):
    """A slave's CommitLog may end inside a record (replication blocks do not end on
    record boundaries); the end of the last complete record is where dispatch stopped,
    and truncating there drops the partial bytes."""
    m = open_store(tmp_path / "m")
    await m.start()
    ends = await put_range(m, clock, 0, 30)
    cl_m = m.commitlog
    data = bytes(cl_m.mfq.mapped_files[0].mm[: ends[20] + 17])
    s = open_store(tmp_path / "s", brokerRole="SLAVE")
    await s.start()
    try:
        assert s.commitlog.append_data(0, data)
        assert s.commitlog.max_offset == ends[20] + 17
        assert "cut short" in s.commitlog.record_boundary_error(ends[20])
        assert await s.truncate_to(ends[20]) == 17
        assert await s.drop_incomplete_tail() == 0
        # a tail shorter than a record header: only dispatch knows where records end
        assert s.commitlog.append_data(ends[20], bytes(cl_m.mfq.mapped_files[0].mm[ends[20] : ends[20] + 5]))
        assert s.commitlog.record_boundary_error(ends[20]) is not None
        assert await s.drop_incomplete_tail() == 5
        assert s.commitlog.max_offset == ends[20]
        # units for the 21 complete records only (i % 3 == 0 goes to TopicA, queue i % 4)
        assert sum(s.get_max_offset_in_queue("TopicA", q) for q in range(4)) == 7
        # the rest arrives and continues cleanly
        rest = bytes(cl_m.mfq.mapped_files[0].mm[ends[20] : ends[29]])
        assert s.commitlog.append_data(ends[20], rest)
        assert await s.reput.wait_caught_up(timeout=10)
        assert bytes(s.commitlog.mfq.mapped_files[0].mm[: ends[29]]) == bytes(cl_m.mfq.mapped_files[0].mm[: ends[29]])
        for qid in range(4):
            assert s.get_max_offset_in_queue("TopicA", qid) == m.get_max_offset_in_queue("TopicA", qid)
    finally:
        await s.shutdown()
        await m.shutdown()
