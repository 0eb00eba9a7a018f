"""Flush services (spec 6): GroupCommitService, FlushRealTimeService, FlushConsumeQueueService.

The event loop never waits on disk: each service commits the CommitLog's write buffer
(one pwrite into the page cache, on the loop), decides on the loop what to sync (a
FlushPlan), runs the fdatasync calls in its own thread, and applies the result on the
loop. No thread or coroutine blocks per message: under SYNC_FLUSH every put that waits
joins the open round, and the whole round is answered by one fdatasync.

fsync-gate: once a CommitLog fdatasync failed the kernel may have dropped the dirty pages
(and cleared the error), so a later fdatasync that succeeds proves nothing about them.
The first failure trips the FlushGate: from then on no flush runs or counts, every flush
waiter is answered FLUSH_DISK_TIMEOUT, and the store refuses writes until restarted.

(RocketMQ's CommitRealTimeService has no counterpart here: the CommitLog commits its
write buffer itself, at the end of every loop iteration that appended; see commitlog.py.)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ClassVar

from rmq.common.clock import now_ms
from rmq.runtime.service import ServiceLoop
from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.mapped_file import FlushPlan, MappedFileQueue
from rmq.store.results import PutMessageStatus

if TYPE_CHECKING:
    from rmq.store.config import MessageStoreConfig
    from rmq.store.consume_queue import ConsumeQueue
    from rmq.store.index import IndexService

log = logging.getLogger("rmq.store.flush")

RETRY_TIMES_OVER = 10


class FlushStats:
    """Counters the benchmark and metrics read; plain ints, cheap to bump."""

    def __init__(self) -> None:
        self.fsyncs = 0
        self.rounds = 0
        self.waiters = 0  # puts answered by group-commit rounds
        self.fsync_seconds = 0.0
        self.last_batch = 0
        self.timeouts = 0


FlushObserver = Callable[[float], None]
"""Seconds one flush plan (the fdatasync calls of a round) took; optional, for metrics."""
BatchObserver = Callable[[int], None]
"""Puts answered by one group-commit round; optional, for metrics."""


class FlushGate:
    """The fsync-gate of one store: closed for good by the first failed CommitLog flush
    (it outlives the flush services, which a truncation restarts)."""

    def __init__(self, on_trip: Callable[[OSError], None] | None = None) -> None:
        self.error: OSError | None = None
        self.on_trip = on_trip

    @property
    def tripped(self) -> bool:
        return self.error is not None

    def trip(self, e: OSError) -> None:
        if self.error is None:
            self.error = e
            if self.on_trip is not None:
                self.on_trip(e)


async def _run_plan(
    mfq: MappedFileQueue,
    plan: FlushPlan,
    executor: concurrent.futures.Executor,
    stats: FlushStats,
    gate: FlushGate,
    observer: FlushObserver | None = None,
) -> bool:
    if gate.tripped:
        mfq.abandon_flush(plan)
        return False
    loop = asyncio.get_running_loop()
    t0 = time.perf_counter()
    try:
        await loop.run_in_executor(executor, plan.run)
    except OSError as e:
        log.error("fdatasync of %s failed: %s", [mf.file_name for mf, _ in plan.files], e)
        mfq.abandon_flush(plan)
        gate.trip(e)
        return False
    except BaseException:
        mfq.abandon_flush(plan)
        raise
    took = time.perf_counter() - t0
    stats.fsync_seconds += took
    stats.fsyncs += len(plan.files)
    if observer is not None:
        observer(took)
    if gate.tripped:  # (another flush failed meanwhile: this one proves nothing)
        mfq.abandon_flush(plan)
        return False
    mfq.apply_flush(plan)
    return True


def _no_commit() -> None:
    return None


def _commit_quietly(commit: Callable[[], None]) -> None:
    """Commit the CommitLog's write buffer before planning a flush. A failure was
    logged, rolled back and answered by the commit; the flush covers what is committed."""
    try:
        commit()
    except OSError:
        pass


class _ThoroughClock:
    """A flush service's rhythm: its least-pages setting, except every thorough_ms a
    flush of everything (least pages 0)."""

    __slots__ = ("last",)

    def __init__(self, last: int) -> None:
        self.last = last  # ms of the last flush of everything

    def least_pages(self, least: int, thorough_ms: int) -> int:
        now = now_ms()
        if now >= self.last + thorough_ms:
            self.last = now
            return 0
        return least


class _CommitLogFlusher(ServiceLoop):
    """What both CommitLog flush services hold: the queue, the commit to run before a
    plan, the checkpoint, the gate, the stats and a flush thread of their own (named by
    the subclass)."""

    SERVICE_NAME: ClassVar[str]
    THREAD_NAME: ClassVar[str]

    def __init__(
        self,
        mfq: MappedFileQueue,
        checkpoint: StoreCheckpoint,
        config: MessageStoreConfig,
        commit: Callable[[], None] = _no_commit,
        gate: FlushGate | None = None,
    ) -> None:
        super().__init__(self.SERVICE_NAME, log)
        self.mfq = mfq
        self._commit = commit
        self.checkpoint = checkpoint
        self.config = config
        self.gate = gate if gate is not None else FlushGate()
        self.stats = FlushStats()
        self.flush_observer: FlushObserver | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.THREAD_NAME)
        self._thorough = _ThoroughClock(0)
        self._init_own()

    def _init_own(self) -> None:
        """The subclass's own state (called at the end of __init__)."""


class GroupCommitService(_CommitLogFlusher):
    """SYNC_FLUSH. A put that must wait gets the open round's future; every commit of
    the CommitLog seals the open round (its records are all in the file now), a failed
    commit answers it UNKNOWN_ERROR (its records were rolled back). The service takes
    every sealed round, fdatasyncs once, and completes them all.

    A round starts when the service task runs after the first put of the round woke
    it, i.e. once the loop iteration's puts are appended: with W writers in flight all
    W share one fdatasync, and dispatch of the round runs while it syncs. Overlapping
    rounds (capped at W/2, so that one group's fdatasync runs while the other group
    puts) was measured and does not pay on the reference machine: twice the
    fdatasyncs, each slower, more loop CPU per put, and the flush thread gets the GIL
    back only between groups (bench/store_bench.py SYNC_FLUSH, 256 writers: 15-20 %
    fewer puts/s than one round per iteration).
    """

    SERVICE_NAME = "GroupCommitService"
    THREAD_NAME = "rmq-groupcommit"

    def _init_own(self) -> None:
        self.batch_observer: BatchObserver | None = None
        self._open: asyncio.Future[PutMessageStatus] | None = None
        self._open_target = 0
        self._open_count = 0
        # (future, target, puts) of rounds whose records are all committed
        self._sealed: list[tuple[asyncio.Future[PutMessageStatus], int, int]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        super().start()

    def submit(self, next_offset: int) -> asyncio.Future[PutMessageStatus] | None:
        """Future completed when [.., next_offset) is on disk; None if it already is."""
        if self.mfq.flushed_where >= next_offset:
            return None
        fut = self._open
        if fut is None:
            loop = self._loop
            assert loop is not None, "GroupCommitService not started"
            fut = self._open = loop.create_future()
            self._open_count = 0
            self._open_target = next_offset
            loop.call_later(self.config.syncFlushTimeout / 1000, self._expire, fut)
            self.wakeup()
        elif next_offset > self._open_target:
            self._open_target = next_offset
        self._open_count += 1
        return fut

    def seal(self) -> None:
        """The CommitLog committed: the open round's records are all in the file."""
        fut = self._open
        if fut is not None:
            self._open = None
            self._sealed.append((fut, self._open_target, self._open_count))

    def fail_open(self, status: PutMessageStatus) -> None:
        """A commit failed: the open round's records were rolled back."""
        fut = self._open
        if fut is not None:
            self._open = None
            if not fut.done():
                fut.set_result(status)

    def _expire(self, fut: asyncio.Future[PutMessageStatus]) -> None:
        # FlushDiskWatcher: the producer gets an answer even if the disk hangs.
        if not fut.done():
            self.stats.timeouts += 1
            log.warning("group commit round not flushed within syncFlushTimeout=%d ms", self.config.syncFlushTimeout)
            fut.set_result(PutMessageStatus.FLUSH_DISK_TIMEOUT)

    async def run_once(self) -> None:
        await self._commit_round()

    async def on_stop(self) -> None:
        # whatever arrived last: one more round, then everything
        await self._commit_round()
        self._executor.shutdown(wait=True)

    async def _commit_round(self) -> None:
        _commit_quietly(self._commit)
        if self._open is not None and self._open_target <= self.mfq.get_max_offset():
            self.seal()
        rounds, self._sealed = self._sealed, []
        plan = self.mfq.flush_plan(0)
        ok = not self.gate.tripped
        if plan is not None:
            ok = await _run_plan(self.mfq, plan, self._executor, self.stats, self.gate, self.flush_observer)
            if ok and plan.store_timestamp > 0:
                self.checkpoint.physic_msg_timestamp = plan.store_timestamp
        if rounds:
            n = sum(r[2] for r in rounds)
            self.stats.rounds += 1
            self.stats.waiters += n
            self.stats.last_batch = n
            if self.batch_observer is not None:
                self.batch_observer(n)
            flushed = self.mfq.flushed_where
            for fut, target, _ in rounds:
                if not fut.done():
                    fut.set_result(
                        PutMessageStatus.PUT_OK if ok and flushed >= target else PutMessageStatus.FLUSH_DISK_TIMEOUT
                    )


class FlushRealTimeService(_CommitLogFlusher):
    """ASYNC_FLUSH: every flushIntervalCommitLog ms flush at least flushCommitLogLeastPages
    dirty pages; everything every flushCommitLogThoroughInterval ms."""

    SERVICE_NAME = "FlushRealTimeService"
    THREAD_NAME = "rmq-flush"

    async def flush_once(self, least_pages: int) -> bool:
        _commit_quietly(self._commit)
        if self.gate.tripped:
            return False
        plan = self.mfq.flush_plan(least_pages)
        if plan is None:
            return True
        ok = await _run_plan(self.mfq, plan, self._executor, self.stats, self.gate, self.flush_observer)
        if ok and plan.store_timestamp > 0:
            self.checkpoint.physic_msg_timestamp = plan.store_timestamp
        return ok

    def interval(self) -> float:
        return self.config.flushIntervalCommitLog / 1000

    async def run_once(self) -> None:
        cfg = self.config
        least = self._thorough.least_pages(cfg.flushCommitLogLeastPages, cfg.flushCommitLogThoroughInterval)
        t0 = time.perf_counter()
        await self.flush_once(least)
        past = time.perf_counter() - t0
        if past > 0.5:
            log.info("flushing the CommitLog took %.0f ms", past * 1000)

    async def on_stop(self) -> None:
        for _ in range(RETRY_TIMES_OVER):
            if await self.flush_once(0) and self.mfq.remain_to_flush() <= 0:
                break
            if self.gate.tripped:
                break
        self._executor.shutdown(wait=True)


class FlushConsumeQueueService(ServiceLoop):
    """Flushes dirty ConsumeQueue files (and completed index files) every
    flushIntervalConsumeQueue ms; thoroughly, with the checkpoint, every
    flushConsumeQueueThoroughInterval ms."""

    def __init__(
        self,
        consume_queues: Callable[[], Iterable[ConsumeQueue]],
        index: IndexService | None,
        checkpoint: StoreCheckpoint,
        config: MessageStoreConfig,
    ) -> None:
        super().__init__("FlushConsumeQueueService", log)
        self._consume_queues = consume_queues
        self.index = index
        self.checkpoint = checkpoint
        self.config = config
        self.stats = FlushStats()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rmq-flush-cq")
        self._thorough = _ThoroughClock(now_ms())

    async def flush_once(self, least_pages: int) -> None:
        thorough = least_pages == 0
        logics_ts = self.checkpoint.logics_msg_timestamp
        plans = []
        for cq in list(self._consume_queues()):
            plan = cq.mfq.flush_plan(least_pages)
            if plan is not None:
                plans.append((cq.mfq, plan))
        index_files = self.index.take_full_unflushed() if self.index is not None else []
        # A thorough round also syncs the index file being written, so that
        # indexMsgTimestamp follows the index as it grows, not only as files fill up.
        live = self.index.take_live_for_sync() if thorough and self.index is not None else None
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
            if live is not None:
                live[0].sync()
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
                if live is not None:
                    self.index.on_live_synced(live[0], live[1], False)
            return
        for mfq, plan in plans:
            mfq.apply_flush(plan)
        self.stats.fsyncs += sum(len(p.files) for _, p in plans) + len(index_files)
        if self.index is not None and index_files:
            self.index.on_flushed(index_files)
        if self.index is not None and live is not None:
            self.index.on_live_synced(live[0], live[1], True)

    def interval(self) -> float:
        return self.config.flushIntervalConsumeQueue / 1000

    async def run_once(self) -> None:
        cfg = self.config
        await self.flush_once(
            self._thorough.least_pages(cfg.flushConsumeQueueLeastPages, cfg.flushConsumeQueueThoroughInterval)
        )

    async def on_stop(self) -> None:
        await self.flush_once(0)
        self._executor.shutdown(wait=True)
