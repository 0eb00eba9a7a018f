"""A failed CommitLog write or flush is never answered PUT_OK (issue 11, item 5).

Faults are injected: ``os.pwrite`` fails (EIO, ENOSPC) for the CommitLog's files only,
after writing part of what it was given, as a write that dies between pages does; and
``FlushPlan.run`` (the fdatasync of a flush) raises EIO.
"""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest

from rmq.protocol.message import decode_record
from rmq.store import mapped_file
from rmq.store.config import FlushDiskType
from rmq.store.message_store import MessageStore
from rmq.store.results import PutMessageStatus, RunningFlags
from tests.unit.waiting import wait_until

from .conftest import msg, small_config

OK = PutMessageStatus.PUT_OK


class DiskFault:
    """os.pwrite fails with `err` on CommitLog files while `on` is set, after writing
    the first half of its data."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, st: MessageStore, err: int) -> None:
        self.real = os.pwrite
        self.st = st
        self.err = err
        self.on = False
        self.failed = 0
        monkeypatch.setattr(os, "pwrite", self._pwrite)

    def _commitlog_fds(self) -> set[int]:
        return {mf.fd for mf in self.st.commitlog.mfq.mapped_files}

    def _pwrite(self, fd: int, data, pos: int) -> int:
        if self.on and fd in self._commitlog_fds():
            self.failed += 1
            half = len(data) // 2
            if half:
                self.real(fd, memoryview(data)[:half], pos)
            raise OSError(self.err, os.strerror(self.err))
        return self.real(fd, data, pos)


def _bytes_at(st: MessageStore, offset: int, n: int) -> bytes:
    mf = st.commitlog.mfq.find_mapped_file_by_offset(offset)
    pos = offset - mf.file_from_offset
    return bytes(mf.mm[pos : pos + n])


async def _answered(st: MessageStore, waiters) -> list[PutMessageStatus]:
    out = []
    for r, w in waiters:
        out.append(r.status if w is None else await w)
    return out


@pytest.mark.parametrize("mode", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
@pytest.mark.parametrize("err", [errno.EIO, errno.ENOSPC])
async def test_a_failed_commit_is_answered_an_error_and_rolled_back(tmp_path, monkeypatch, mode, err):
    root = tmp_path / "s"
    answered: dict[str, tuple[int, int]] = {}  # body -> (offset, size) of PUT_OK answers
    st = MessageStore(small_config(root, flushDiskType=mode))
    st.load()
    await st.start()
    try:
        fault = DiskFault(monkeypatch, st, err)
        for i in range(5):  # committed before the fault
            r = await st.put(msg(body=b"ok%d" % i, queue_id=i % 2))
            assert r.status is OK
            answered[f"ok{i}"] = (r.wrote_offset, r.wrote_bytes)
        end = st.max_phy_offset
        qoffs = dict(st.commitlog.topic_queue_table)

        fault.on = True
        puts = [st.put_nowait(msg(body=b"lost%d" % i * 30, queue_id=i % 2)) for i in range(6)]
        assert all(r.status is OK for r, _ in puts)
        n = sum(r.wrote_bytes for r, _ in puts)
        statuses = await _answered(st, puts)
        assert statuses == [PutMessageStatus.UNKNOWN_ERROR] * 6, statuses
        assert fault.failed
        # nothing moved: the CommitLog end, the queue offsets, the write buffer
        assert st.max_phy_offset == end == st.commitlog.wrote_offset
        assert st.commitlog.topic_queue_table == qoffs
        assert st.commitlog.uncommitted_bytes == 0
        assert all(r.commit_log_offset < end for r in st.commitlog.dispatch_ready)
        # refused while the disk fails, with a reason
        r, w = st.put_nowait(msg(body=b"refused"))
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and w is None
        assert st.running_flags.is_set(RunningFlags.NOT_WRITEABLE)
        await asyncio.sleep(0.3)
        assert not st.running_flags.is_writeable()  # the repair probe fails too

        fault.on = False  # the fault clears: the store takes writes again
        await wait_until(lambda: st.running_flags.is_writeable())
        # the half-written bytes of the failed commit are gone
        assert _bytes_at(st, end, n) == bytes(n)
        r = await st.put(msg(body=b"after", queue_id=0))
        assert r.status is OK
        assert r.wrote_offset == end and r.queue_offset == qoffs[("TopicA", 0)], (
            "a failed write left a gap in the CommitLog or in a queue"
        )
        answered["after"] = (r.wrote_offset, r.wrote_bytes)
        await st.reput.wait_caught_up()
        assert st.get_max_offset_in_queue("TopicA", 0) == qoffs[("TopicA", 0)] + 1
    finally:
        await st.shutdown()
    await _restart_finds_only(root, answered, mode)


async def _restart_finds_only(root: Path, answered: dict[str, tuple[int, int]], mode: FlushDiskType) -> None:
    st = MessageStore(small_config(root, flushDiskType=mode))
    st.load()
    await st.start()
    try:
        found = {}
        for q in (0, 1):
            got = st.get_messages("g", "TopicA", q, 0, 100)
            for data in got.buffers:
                m = decode_record(bytes(data), check_crc=True)
                found[m.body.decode()] = (m.commit_log_offset, len(data))
        assert found == answered
        assert st.max_phy_offset == max(o + s for o, s in answered.values())
    finally:
        await st.shutdown()


async def test_a_commit_failing_at_a_roll_fails_only_its_own_records(tmp_path, monkeypatch):
    """Records committed before the failure (the same loop iteration, other commits)
    are answered PUT_OK; the rest an error; no queue offset is lost."""
    root = tmp_path / "s"
    st = MessageStore(small_config(root, flushDiskType=FlushDiskType.SYNC_FLUSH))
    st.load()
    await st.start()
    answered = {}
    try:
        fault = DiskFault(monkeypatch, st, errno.EIO)
        puts = []
        for i in range(40):  # 40 x ~500 bytes: crosses a 16 KiB file end
            if i == 35:
                fault.on = True
            puts.append(st.put_nowait(msg(body=b"m%02d" % i * 150)))
        statuses = await _answered(st, puts)
        fault.on = False
        good = [i for i, s in enumerate(statuses) if s is OK]
        assert good == list(range(len(good))) and 0 < len(good) <= 35
        assert all(
            s is PutMessageStatus.UNKNOWN_ERROR or s is PutMessageStatus.SERVICE_NOT_AVAILABLE
            for s in statuses[len(good) :]
        )
        for i in good:
            r = puts[i][0]
            answered[(b"m%02d" % i * 150).decode()] = (r.wrote_offset, r.wrote_bytes)
        await wait_until(lambda: st.running_flags.is_writeable())
        r = await st.put(msg(body=b"next"))
        assert r.status is OK and r.queue_offset == len(good)
        answered["next"] = (r.wrote_offset, r.wrote_bytes)
    finally:
        await st.shutdown()
    await _restart_finds_only(root, answered, FlushDiskType.SYNC_FLUSH)


@pytest.mark.parametrize("mode", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
async def test_a_failed_fsync_is_never_success_later(tmp_path, monkeypatch, mode):
    """fsync-gate: the waiters of a failed flush get an error; a later flush that would
    succeed does not count; the store refuses writes until it is restarted."""
    root = tmp_path / "s"
    st = MessageStore(small_config(root, flushDiskType=mode, flushIntervalCommitLog=20, flushCommitLogLeastPages=0))
    st.load()
    await st.start()
    real_run = mapped_file.FlushPlan.run
    failures = []

    def failing_run(plan):
        failures.append(plan.flushed_where)
        raise OSError(errno.EIO, "Input/output error")

    try:
        r = await st.put(msg(body=b"before"))
        assert r.status is OK
        await wait_until(lambda: st.commitlog.flushed_where >= r.end_offset)
        monkeypatch.setattr(mapped_file.FlushPlan, "run", failing_run)
        r = await st.put(msg(body=b"during"))
        if mode is FlushDiskType.SYNC_FLUSH:
            assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        await wait_until(lambda: bool(failures))
        flushed = st.commitlog.flushed_where
        monkeypatch.setattr(mapped_file.FlushPlan, "run", real_run)  # the disk "recovers"
        await wait_until(lambda: not st.running_flags.is_writeable())
        r, w = st.put_nowait(msg(body=b"after"))
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and w is None
        assert "flushing the CommitLog failed" in st.not_writeable_reason()
        await asyncio.sleep(0.2)  # flush rounds come and go: none counts
        assert st.commitlog.flushed_where == flushed
        assert not st.running_flags.is_writeable()
        if mode is FlushDiskType.SYNC_FLUSH:
            fut = st.flush_service.submit(st.max_phy_offset + 1)
            st.flush_service.wakeup()
            assert await fut is PutMessageStatus.FLUSH_DISK_TIMEOUT
    finally:
        await st.shutdown()
    assert os.path.exists(st.config.abort_path), "a clean exit after a failed fsync"
    st2 = MessageStore(small_config(root, flushDiskType=mode))  # restarted: writes again
    st2.load()
    await st2.start()
    try:
        assert (await st2.put(msg(body=b"restarted"))).status is OK
    finally:
        await st2.shutdown()


async def test_async_flush_put_ok_waits_for_the_commit(open_store):
    """The store-level guarantee the transport's before_write hook used to give: an
    ASYNC_FLUSH put's waiter completes only once its record is in the file."""
    async with open_store() as st:
        seen = []
        for i in range(30):
            r, w = st.put_nowait(msg(body=bytes([i]) * 50))
            assert w is not None
            w.add_done_callback(
                lambda f, r=r: seen.append((f.result(), st.select_one_message_by_offset(r.wrote_offset) is not None))
            )
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert seen == [(OK, True)] * 30
