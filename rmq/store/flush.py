"""Flush services (spec 6): GroupCommitService, FlushRealTimeService, FlushConsumeQueueService.

The event loop never waits on disk: each service commits the CommitLog's write buffer
(one pwrite into the page cache, on the loop), decides on the loop what to sync (a
FlushPlan), runs the fdatasync calls in its own thread, and applies the result on the
loop. No thread or coroutine blocks per message: under SYNC_FLUSH every put that waits
joins the open round, and the whole round is answered by one fdatasync.

(RocketMQ's CommitRealTimeService has no counterpart here: the CommitLog commits its
write buffer itself, at the end of every loop iteration that appended; see commitlog.py.)
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import TYPE_CHECKING, Callable, Iterable

from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.mapped_file import FlushPlan, MappedFileQueue
from rmq.store.results import PutMessageStatus

if TYPE_CHECKING:
    from rmq.store.config import MessageStoreConfig
    from rmq.store.consume_queue import ConsumeQueue
    from rmq.store.index import IndexService

log = logging.getLogger("rmq.store.flush")

RETRY_TIMES_OVER = 10


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class FlushStats:
    """Counters the benchmark and metrics read; plain ints, cheap to bump."""

    def __init__(self) -> None:
        self.fsyncs = 0
        self.rounds = 0
        self.waiters = 0          # puts answered by group-commit rounds
        self.fsync_seconds = 0.0
        self.last_batch = 0
        self.timeouts = 0


FlushObserver = Callable[[float], None]
"""Seconds one flush plan (the fdatasync calls of a round) took; optional, for metrics."""
BatchObserver = Callable[[int], None]
"""Puts answered by one group-commit round; optional, for metrics."""


async def _run_plan(mfq: MappedFileQueue, plan: FlushPlan,
                    executor: concurrent.futures.Executor, stats: FlushStats,
                    observer: FlushObserver | None = None) -> bool:
    loop = asyncio.get_running_loop()
    t0 = time.perf_counter()
    try:
        await loop.run_in_executor(executor, plan.run)
    except OSError as e:
        log.error("fdatasync of %s failed: %s", [mf.file_name for mf, _ in plan.files], e)
        mfq.abandon_flush(plan)
        return False
    except BaseException:
        mfq.abandon_flush(plan)
        raise
    took = time.perf_counter() - t0
    stats.fsync_seconds += took
    stats.fsyncs += len(plan.files)
    if observer is not None:
        observer(took)
    mfq.apply_flush(plan)
    return True


def _no_commit() -> None:
    return None


def _commit_quietly(commit: Callable[[], None]) -> None:
    """Commit the CommitLog's write buffer before planning a flush. A failure was
    logged by the commit; the flush then covers what is committed, and a put beyond
    it is answered FLUSH_DISK_TIMEOUT."""
    try:
        commit()
    except OSError:
        pass


class GroupCommitService:
    """SYNC_FLUSH. A put that must wait gets the current round's future; the service
    swaps the round out, commits the write buffer, fdatasyncs once, and completes the
    round for every put in it.

    A round starts when the service task runs after the first put of the round woke
    it, i.e. once the loop iteration's puts are appended: with W writers in flight all
    W share one fdatasync, and dispatch of the round runs while it syncs. Overlapping
    rounds (capped at W/2, so that one group's fdatasync runs while the other group
    puts) was measured and does not pay on the reference machine: twice the
    fdatasyncs, each slower, more loop CPU per put, and the flush thread gets the GIL
    back only between groups (bench/store_bench.py SYNC_FLUSH, 256 writers: 15-20 %
    fewer puts/s than one round per iteration).
    """

    def __init__(self, mfq: MappedFileQueue, checkpoint: StoreCheckpoint,
                 config: "MessageStoreConfig", commit: Callable[[], None] = _no_commit) -> None:
        self.mfq = mfq
        self._commit = commit
        self.checkpoint = checkpoint
        self.config = config
        self.stats = FlushStats()
        self.flush_observer: FlushObserver | None = None
        self.batch_observer: BatchObserver | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="rmq-groupcommit")
        self._round: asyncio.Future[PutMessageStatus] | None = None
        self._round_target = 0
        self._round_count = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="GroupCommitService")

    def submit(self, next_offset: int) -> "asyncio.Future[PutMessageStatus] | None":
        """Future completed when [.., next_offset) is on disk; None if it already is."""
        if self.mfq.flushed_where >= next_offset:
            return None
        fut = self._round
        if fut is None:
            fut = self._round = self._loop.create_future()  # type: ignore[union-attr]
            self._round_count = 0
            self._round_target = next_offset
            self._loop.call_later(self.config.syncFlushTimeout / 1000,  # type: ignore[union-attr]
                                  self._expire, fut)
            self._wake.set()  # type: ignore[union-attr]
        elif next_offset > self._round_target:
            self._round_target = next_offset
        self._round_count += 1
        return fut

    def wakeup(self) -> None:
        """A put that does not wait still gets flushed soon (RocketMQ wakes the service)."""
        if self._wake is not None:
            self._wake.set()

    def _expire(self, fut: "asyncio.Future[PutMessageStatus]") -> None:
        # FlushDiskWatcher: the producer gets an answer even if the disk hangs.
        if not fut.done():
            self.stats.timeouts += 1
            log.warning("group commit round not flushed within syncFlushTimeout=%d ms",
                        self.config.syncFlushTimeout)
            fut.set_result(PutMessageStatus.FLUSH_DISK_TIMEOUT)

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._commit_round()
            if self._stopped and self._round is None:
                return

    async def _commit_round(self) -> None:
        fut, target, n = self._round, self._round_target, self._round_count
        self._round = None
        _commit_quietly(self._commit)
        plan = self.mfq.flush_plan(0)
        ok = True
        if plan is not None:
            ok = await _run_plan(self.mfq, plan, self._executor, self.stats,
                                 self.flush_observer)
            if ok and plan.store_timestamp > 0:
                self.checkpoint.physic_msg_timestamp = plan.store_timestamp
        if fut is not None:
            self.stats.rounds += 1
            self.stats.waiters += n
            self.stats.last_batch = n
            if self.batch_observer is not None:
                self.batch_observer(n)
            if not fut.done():
                fut.set_result(PutMessageStatus.PUT_OK if ok and self.mfq.flushed_where >= target
                               else PutMessageStatus.FLUSH_DISK_TIMEOUT)

    async def shutdown(self) -> None:
        self._stopped = True
        if self._wake is not None:
            self._wake.set()
        if self._task is not None:
            await self._task
        # whatever arrived last: one more round, then everything
        await self._commit_round()
        self._executor.shutdown(wait=True)


class FlushRealTimeService:
    """ASYNC_FLUSH: every flushIntervalCommitLog ms flush at least flushCommitLogLeastPages
    dirty pages; everything every flushCommitLogThoroughInterval ms."""

    def __init__(self, mfq: MappedFileQueue, checkpoint: StoreCheckpoint,
                 config: "MessageStoreConfig", commit: Callable[[], None] = _no_commit) -> None:
        self.mfq = mfq
        self._commit = commit
        self.checkpoint = checkpoint
        self.config = config
        self.stats = FlushStats()
        self.flush_observer: FlushObserver | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="rmq-flush")
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_thorough = 0

    def start(self) -> None:
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="FlushRealTimeService")

    def submit(self, next_offset: int) -> None:
        return None

    def wakeup(self) -> None:
        # flushCommitLogTimed (default true): the service sleeps its interval regardless.
        pass

    async def flush_once(self, least_pages: int) -> bool:
        _commit_quietly(self._commit)
        plan = self.mfq.flush_plan(least_pages)
        if plan is None:
            return True
        ok = await _run_plan(self.mfq, plan, self._executor, self.stats, self.flush_observer)
        if ok and plan.store_timestamp > 0:
            self.checkpoint.physic_msg_timestamp = plan.store_timestamp
        return ok

    async def _run(self) -> None:
        assert self._stop is not None
        while not self._stop.is_set():
            least = self.config.flushCommitLogLeastPages
            now = _now_ms()
            if now >= self._last_thorough + self.config.flushCommitLogThoroughInterval:
                self._last_thorough = now
                least = 0
            try:
                await asyncio.wait_for(self._stop.wait(),
                                       self.config.flushIntervalCommitLog / 1000)
            except asyncio.TimeoutError:
                pass
            t0 = time.perf_counter()
            await self.flush_once(least)
            past = time.perf_counter() - t0
            if past > 0.5:
                log.info("flushing the CommitLog took %.0f ms", past * 1000)

    async def shutdown(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._task is not None:
            await self._task
        for _ in range(RETRY_TIMES_OVER):
            if await self.flush_once(0) and self.mfq.remain_to_flush() <= 0:
                break
        self._executor.shutdown(wait=True)


class FlushConsumeQueueService:
    """Flushes dirty ConsumeQueue files (and completed index files) every
    flushIntervalConsumeQueue ms; thoroughly, with the checkpoint, every
    flushConsumeQueueThoroughInterval ms."""

    def __init__(self, consume_queues: Callable[[], Iterable["ConsumeQueue"]],
                 index: "IndexService | None", checkpoint: StoreCheckpoint,
                 config: "MessageStoreConfig") -> None:
        self._consume_queues = consume_queues
        self.index = index
        self.checkpoint = checkpoint
        self.config = config
        self.stats = FlushStats()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="rmq-flush-cq")
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_thorough = _now_ms()

    def start(self) -> None:
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="FlushConsumeQueueService")

    async def flush_once(self, least_pages: int) -> None:
        thorough = least_pages == 0
        logics_ts = self.checkpoint.logics_msg_timestamp
        plans = []
        for cq in list(self._consume_queues()):
            plan = cq.mfq.flush_plan(least_pages)
            if plan is not None:
                plans.append((cq.mfq, plan))
        index_files = self.index.take_full_unflushed() if self.index is not None else []
        if not plans and not index_files and not thorough:
            return
        if thorough:
            # Persist only what is already durable: the logics timestamp captured
            # before these CQ files are synced, the physic one set by the CommitLog flush.
            saved = self.checkpoint.logics_msg_timestamp
            self.checkpoint.logics_msg_timestamp = logics_ts
            self.checkpoint.write()
            self.checkpoint.logics_msg_timestamp = saved

        def work() -> None:
            for _, plan in plans:
                plan.run()
            for f in index_files:
                f.sync()
            if thorough:
                self.checkpoint.sync()

        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, work)
        except OSError as e:
            log.error("flushing consume queues failed: %s", e)
            for mfq, plan in plans:
                mfq.abandon_flush(plan)
            if self.index is not None:
                self.index.on_flush_failed(index_files)
            return
        for mfq, plan in plans:
            mfq.apply_flush(plan)
        self.stats.fsyncs += sum(len(p.files) for _, p in plans) + len(index_files)
        if self.index is not None and index_files:
            self.index.on_flushed(index_files)

    async def _run(self) -> None:
        assert self._stop is not None
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(),
                                       self.config.flushIntervalConsumeQueue / 1000)
            except asyncio.TimeoutError:
                pass
            least = self.config.flushConsumeQueueLeastPages
            now = _now_ms()
            if now >= self._last_thorough + self.config.flushConsumeQueueThoroughInterval:
                self._last_thorough = now
                least = 0
            try:
                await self.flush_once(least)
            except Exception:
                log.exception("FlushConsumeQueueService round failed")

    async def shutdown(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._task is not None:
            await self._task
        await self.flush_once(0)
        self._executor.shutdown(wait=True)
