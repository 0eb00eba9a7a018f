"""CommitLog write buffer, batched ConsumeQueue writes and pipelined group commit.

* Records reach the file at the end of the loop iteration (or before a flush, a roll,
  an overflow); reads see committed bytes only; `await put` returns after the commit.
* A commit or a ConsumeQueue write torn by a kill (a pwrite stops between pages) leaves
  nothing recovery accepts, and nothing stale that a later recovery could pick up.
* ConsumeQueue.put_units writes the same bytes as put_message_position_info one by one.
* SYNC_FLUSH answers PUT_OK only once the fdatasync covering the record has returned.
"""

from __future__ import annotations

import asyncio
import os
import struct
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq.protocol.message import MessageExtBrokerInner, decode_record
from rmq.protocol.record import DispatchRequest
from rmq.store import mapped_file
from rmq.store.commitlog import CommitLog
from rmq.store.config import FlushDiskType
from rmq.store.consume_queue import ConsumeQueue
from rmq.store.message_store import MessageStore
from rmq.store.results import PutMessageStatus

from .conftest import msg, small_config

LEVELS = [1000, 2000, 3000]


# ---------------------------------------------------------------- visibility and order
async def test_reads_see_committed_records_only(open_store):
    async with open_store() as st:
        end0 = st.max_phy_offset
        r, waiter = st.put_nowait(msg(body=b"x" * 100))
        # ASYNC_FLUSH: answered through the commit (shared by the iteration's puts)
        assert r.status is PutMessageStatus.PUT_OK and waiter is st.commit_waiter(r)
        assert waiter is not None and not waiter.done()
        # appended, not yet in the file: not readable, not dispatched
        assert st.max_phy_offset == end0
        assert st.select_one_message_by_offset(r.wrote_offset) is None
        await asyncio.sleep(0)  # the loop iteration ends: the commit callback ran
        assert st.max_phy_offset == r.end_offset
        assert decode_record(st.select_one_message_by_offset(r.wrote_offset)).body == b"x" * 100
        r2, _ = st.put_nowait(msg(body=b"y"))
        st.commit_now()
        assert st.max_phy_offset == r2.end_offset
        st.commit_now()  # nothing pending: a no-op
        await st.reput.wait_caught_up()
        assert st.get_max_offset_in_queue("TopicA", 0) == 2


async def test_callbacks_scheduled_after_put_nowait_run_after_the_commit(open_store):
    async with open_store() as st:
        loop = asyncio.get_running_loop()
        seen = []
        for i in range(20):
            r, _ = st.put_nowait(msg(body=bytes([i]) * 10))
            loop.call_soon(lambda r=r: seen.append(st.max_phy_offset >= r.end_offset))
        fut = loop.create_future()
        r, _ = st.put_nowait(msg())
        st.commit_waiter(r).add_done_callback(lambda f: fut.set_result(st.max_phy_offset))
        assert await fut >= r.end_offset
        await asyncio.sleep(0)
        assert seen == [True] * 20


def test_call_soon_order_holds_on_uvloop(tmp_path):
    """The broker runs on uvloop: the same FIFO order of ready callbacks there."""
    uvloop = pytest.importorskip("uvloop")

    async def main() -> list[bool]:
        st = MessageStore(small_config(tmp_path / "s"))
        st.load()
        await st.start()
        loop = asyncio.get_running_loop()
        seen: list[bool] = []
        try:
            for _ in range(3):  # three iterations, 50 puts each
                for i in range(50):
                    r, _ = st.put_nowait(msg(body=bytes([i]) * 10))
                    loop.call_soon(lambda r=r: seen.append(st.max_phy_offset >= r.end_offset))
                await asyncio.sleep(0)
            await asyncio.sleep(0)
        finally:
            await st.shutdown()
        return seen

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(main()) == [True] * 150


@pytest.mark.parametrize("mode", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
async def test_await_put_returns_after_the_commit(open_store, mode):
    async with open_store(flushDiskType=mode) as st:
        for _i in range(50):
            r = await st.put(msg(body=os.urandom(300)))
            assert r.status is PutMessageStatus.PUT_OK
            assert st.max_phy_offset >= r.end_offset
            if mode is FlushDiskType.SYNC_FLUSH:
                assert st.commitlog.flushed_where >= r.end_offset


async def test_write_buffer_overflow_commits_first(open_store):
    async with open_store(mappedFileSizeCommitLog=8 << 20) as st:
        cl = st.commitlog
        cap = cl._wcap
        sent = []
        for i in range(cap // 1000 + 50):  # more than one buffer within one iteration
            r, _ = st.put_nowait(msg(body=bytes([i % 251]) * 900))
            sent.append(r)
            assert cl.uncommitted_bytes <= cap
        assert cl.commits >= 1 and st.max_phy_offset > 0
        await asyncio.sleep(0)
        for r in sent[::97]:
            assert (
                decode_record(st.select_one_message_by_offset(r.wrote_offset), check_crc=True).commit_log_offset
                == r.wrote_offset
            )


async def test_dispatch_parses_when_ready_requests_are_missing(open_store):
    """Ready requests dropped (dispatch far behind): dispatch parses the records."""
    async with open_store() as st:
        rs = [st.put_nowait(msg(queue_id=i % 2, TAGS=f"t{i}", KEYS=f"k{i}"))[0] for i in range(60)]
        st.commit_now()
        ready = st.commitlog.dispatch_ready
        assert len(ready) == 60
        del ready[10]  # one gone: parse it, then use the rest again
        for _ in range(20):
            ready.pop()  # the tail gone
        await st.reput.wait_caught_up()
        assert [st.get_max_offset_in_queue("TopicA", q) for q in (0, 1)] == [30, 30]
        units = [st.get_consume_queue("TopicA", i % 2).read_unit(i // 2) for i in range(60)]
        assert [u[0] for u in units] == [r.wrote_offset for r in rs]
        assert st.query_message("TopicA", "k59", 32, 0, 2**62).buffers


def test_a_record_that_does_not_encode_takes_no_queue_offset(tmp_path):
    cl = CommitLog(str(tmp_path / "c"), 64 * 1024, 16 * 1024, LEVELS)
    bad = _m(b"x")
    bad.flag = 1 << 40  # FLAG is an int32
    with pytest.raises(struct.error):
        cl.put_message(bad, 1)
    r = cl.put_message(_m(b"y"), 2)
    assert (r.status, r.queue_offset, r.wrote_offset) == (PutMessageStatus.PUT_OK, 0, 0)
    assert [q.commit_log_offset for q in cl.dispatch_ready] == [0]
    cl.shutdown()


def test_a_shape_past_the_struct_cache_is_packed_the_same(tmp_path):
    """Once 1024 record shapes have a Struct, a new shape is packed head first, then
    body, topic and properties: the same bytes."""
    v6 = b"\x00" * 15 + b"\x01" + b"\x00\x00\x2a\x9f"
    msgs = [(_m(b"x" * n), born) for n in (0, 1, 700) for born in (HOST, v6)]
    for m, born in msgs:
        m.born_host = born
        m.put_property("KEYS", "k1 k2")
    files = []
    for name, full in (("cached", False), ("parts", True)):
        cl = CommitLog(str(tmp_path / name), 64 * 1024, 16 * 1024, LEVELS)
        if full:
            cl._structs.update({(i, 0, 0, 0, 0): struct.Struct(">i") for i in range(1024)})
        rs = [cl.put_message(m, 1000 + i) for i, (m, _) in enumerate(msgs)]
        assert all(r.status is PutMessageStatus.PUT_OK for r in rs)
        assert len(cl._structs) == (1024 if full else len(msgs))
        cl.commit()
        cl.shutdown()
        with open(tmp_path / name / f"{0:020d}", "rb") as f:
            files.append(f.read(rs[-1].end_offset))
    assert files[0] == files[1]
    assert [decode_record(files[1], r.wrote_offset).body for r in rs] == [m.body for m, _ in msgs]


# ---------------------------------------------------------------- torn writes
class Killed(BaseException):
    """The process 'died' in the middle of a pwrite."""


def _tear_pwrites(monkeypatch, keep_bytes: int, calls_before: int = 0):
    """Make the (calls_before+1)-th pwrite_all write only its first keep_bytes bytes
    and then 'kill' the process, as SIGKILL between two pages of one pwrite does."""
    real = mapped_file.pwrite_all
    state = {"n": 0}

    def torn(fd, data, pos):
        state["n"] += 1
        if state["n"] <= calls_before:
            return real(fd, data, pos)
        real(fd, memoryview(data)[:keep_bytes], pos)
        raise Killed()

    monkeypatch.setattr(mapped_file, "pwrite_all", torn)
    return real


class _NoLoop:
    """Defers commits (as the event loop would) without running them."""

    def call_soon(self, *a):
        pass

    def call_later(self, *a):
        pass


def _m(body: bytes) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(topic="TopicA", body=body, store_host=HOST)


HOST = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"


@pytest.mark.parametrize("keep", [0, 100, 3000, 5000, 10_000])
def test_torn_commit_leaves_no_record_and_no_stale_bytes(tmp_path, monkeypatch, keep):
    path = str(tmp_path / "commitlog")
    cl = CommitLog(path, 64 * 1024, 16 * 1024, LEVELS)
    good = [cl.put_message(_m(bytes([i]) * 700), 1000 + i) for i in range(5)]
    end = good[-1].end_offset
    assert end == 5 * good[0].wrote_bytes
    cl._loop = _NoLoop()  # the next puts stay in the buffer...
    cl._commit_scheduled = True
    torn = [cl.put_message(_m(bytes([50 + i]) * 900), 2000 + i) for i in range(12)]
    assert all(r.status is PutMessageStatus.PUT_OK for r in torn)
    assert cl.uncommitted_bytes == sum(r.wrote_bytes for r in torn)
    real = _tear_pwrites(monkeypatch, keep)
    with pytest.raises(Killed):  # ...and the commit is cut after `keep` bytes
        cl.commit()
    monkeypatch.setattr(mapped_file, "pwrite_all", real)
    on_disk = open(os.path.join(path, f"{0:020d}"), "rb").read()
    # the first record's TOTALSIZE is still 0: recovery stops there
    assert on_disk[end : end + 4] == b"\0\0\0\0"

    cl2 = CommitLog(path, 64 * 1024, 16 * 1024, LEVELS)
    cl2.load()
    assert cl2.recover_normally(True) == end
    mf = cl2.mfq.mapped_files[-1]
    assert bytes(mf.mm[end:]) == bytes(mf.file_size - end), "torn bytes left behind"
    # new records over the torn region, a smaller amount; then a crash-free recovery
    r = cl2.put_message(_m(b"n" * 10), 3000)
    assert r.wrote_offset == end
    cl2.shutdown()
    cl3 = CommitLog(path, 64 * 1024, 16 * 1024, LEVELS)
    cl3.load()
    assert cl3.recover_normally(True) == r.end_offset
    cl3.shutdown()


def _req(off: int, size: int, tag: int, qoff: int) -> DispatchRequest:
    return DispatchRequest("T", 0, off, size, tag, 0, qoff, None, None, 0)


@pytest.mark.parametrize("keep", [0, 8, 20, 100, 4096 - 12 - 20])
def test_torn_consume_queue_write_is_not_recovered(tmp_path, monkeypatch, keep):
    root = str(tmp_path / "cq")
    cq = ConsumeQueue("T", 0, root, 20 * 1000)
    cq.put_units([_req(100 * i, 100, 0, i) for i in range(10)])
    # a run of 300 units, torn; tag 0 makes the first unit read all-zero
    real = _tear_pwrites(monkeypatch, keep)
    with pytest.raises(Killed):
        cq.put_units([_req(100 * i, 100, 0, i) for i in range(10, 310)])
    monkeypatch.setattr(mapped_file, "pwrite_all", real)
    cq.shutdown()

    cq2 = ConsumeQueue("T", 0, root, 20 * 1000)
    cq2.load()
    cq2.recover()
    assert cq2.get_max_offset_in_queue() == 10
    mf = cq2.mfq.mapped_files[-1]
    assert bytes(mf.mm[200:]) == bytes(mf.file_size - 200), "stale units left behind"
    cq2.put_units([_req(5000, 7, 3, 10)])
    cq2.shutdown()
    cq3 = ConsumeQueue("T", 0, root, 20 * 1000)
    cq3.load()
    cq3.recover()
    assert cq3.get_max_offset_in_queue() == 11 and cq3.max_physic_offset == 5007
    cq3.shutdown()


# ---------------------------------------------------------------- batched CQ writes
@st.composite
def unit_streams(draw) -> tuple[int, list[DispatchRequest], list[int]]:
    """A queue's requests as dispatch would see them: consecutive mostly, with
    re-dispatched (old) ones, repeats, gaps, and a first offset that may be non-zero."""
    start = draw(st.sampled_from([0, 0, 3, 7, 13]))
    reqs: list[DispatchRequest] = []
    q = start
    phy = 1000
    for _ in range(draw(st.integers(1, 60))):
        kind = draw(st.sampled_from(["next"] * 8 + ["old", "repeat", "gap"]))
        if kind == "old" and reqs:
            reqs.append(draw(st.sampled_from(reqs)))
            continue
        if kind == "repeat":
            q -= 1 if q > start else 0
        elif kind == "gap":
            q += draw(st.integers(1, 3))
        size = draw(st.integers(1, 500))
        reqs.append(_req(phy, size, draw(st.integers(-5, 5)), q))
        phy += size
        q += 1
    cuts = sorted(draw(st.lists(st.integers(0, len(reqs)), max_size=5)))
    return start, reqs, cuts


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(unit_streams())
def test_put_units_writes_what_one_by_one_writes(stream):
    start, reqs, cuts = stream
    with tempfile.TemporaryDirectory() as d:
        size = 20 * 7  # tiny files: runs cross file ends
        a = ConsumeQueue("T", 0, os.path.join(d, "a"), size)
        b = ConsumeQueue("T", 0, os.path.join(d, "b"), size)
        bounds = [0, *cuts, len(reqs)]
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            assert a.put_units(reqs[lo:hi]) == hi - lo
        for r in reqs:
            b.put_message_position_info(r.commit_log_offset, r.msg_size, r.tags_code, r.consume_queue_offset)
        assert (a.max_physic_offset, a.min_logic_offset, a.get_max_offset_in_queue()) == (
            b.max_physic_offset,
            b.min_logic_offset,
            b.get_max_offset_in_queue(),
        )
        fa, fb = a.mfq.mapped_files, b.mfq.mapped_files
        assert [f.file_name for f in fa] == [f.file_name for f in fb]
        for x, y in zip(fa, fb, strict=False):
            assert (x.wrote_position, x.committed_position) == (y.wrote_position, y.committed_position)
            assert bytes(x.mm) == bytes(y.mm)
        a.shutdown()
        b.shutdown()


# ---------------------------------------------------------------- group commit
async def test_sync_flush_answers_after_the_covering_fdatasync(tmp_path):
    """200 writers, 15 puts each: every round takes all of them (one fdatasync per loop
    iteration's puts), and no put is answered before the fdatasync that made its
    record durable has returned."""
    st = MessageStore(
        small_config(tmp_path / "s", flushDiskType=FlushDiskType.SYNC_FLUSH, mappedFileSizeCommitLog=1 << 20)
    )
    st.load()
    await st.start()
    gc = st.flush_service
    synced_end: list[int] = []
    real_run = mapped_file.FlushPlan.run

    def run(plan):
        real_run(plan)
        synced_end.append(plan.flushed_where)  # what this fdatasync made durable

    mapped_file.FlushPlan.run = run
    try:
        bad = []

        async def writer(w: int) -> None:
            for i in range(15):
                r = await st.put(msg(body=bytes([w]) * 200, queue_id=w % 4))
                assert r.status is PutMessageStatus.PUT_OK
                if not synced_end or max(synced_end) < r.end_offset:
                    bad.append((w, i))

        await asyncio.gather(*(writer(w) for w in range(200)))
        assert not bad
        assert (gc.stats.waiters, gc.stats.rounds) == (3000, 15)
    finally:
        mapped_file.FlushPlan.run = real_run
        await st.shutdown()


# ---------------------------------------------------------------- write_size_last
@pytest.mark.parametrize(
    ("pos", "n", "writes"),
    [
        (0, 20, [(0, 20)]),  # one unit inside a page: one pwrite
        (4096 - 20, 20, [(4096 - 20, 20)]),  # ends exactly at the page's end
        (4096 - 19, 20, [(4096 - 19 + 12, 8), (4096 - 19, 12)]),  # crosses: head last
        (100, 5000, [(112, 4988), (100, 12)]),
        (4096 - 8, 8, [(4096 - 8, 8)]),  # no longer than the head
    ],
)
def test_write_size_last_splits_only_writes_that_cross_a_page(tmp_path, monkeypatch, pos, n, writes):
    calls: list[tuple[int, int]] = []
    real = mapped_file.pwrite_all

    def record(fd, data, at):
        calls.append((at, len(data)))
        real(fd, data, at)

    monkeypatch.setattr(mapped_file, "pwrite_all", record)
    data = bytes(range(256)) * (n // 256 + 1)
    data = data[:n]
    path = tmp_path / "f"
    path.write_bytes(bytes(16384))
    fd = os.open(path, os.O_RDWR)
    try:
        mapped_file.write_size_last(fd, data, pos, 12)
    finally:
        os.close(fd)
    assert calls == writes
    assert path.read_bytes()[pos : pos + n] == data
