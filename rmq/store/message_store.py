"""MessageStore: the one facade the broker and HA use (RocketMQ's DefaultMessageStore)."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
from collections.abc import Awaitable, Callable, Iterable

from rmq.common.clock import now_ms
from rmq.common.delegate import Delegate
from rmq.common.mixall import SCHEDULE_TOPIC, VALID_NAME
from rmq.protocol.message import MessageConst, MessageExtBatch, MessageExtBrokerInner, SysFlag, pack_host
from rmq.protocol.record import DispatchRequest
from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.cleanup import StoreCleaner, destroy_files
from rmq.store.commit_round import CommitRound
from rmq.store.commitlog import CommitLog
from rmq.store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from rmq.store.consume_queue import ConsumeQueue, UnitsWriteError
from rmq.store.dispatch import ReputMessageService
from rmq.store.errors import StoreLockedError
from rmq.store.flush import FlushConsumeQueueService, FlushGate, FlushRealTimeService, GroupCommitService
from rmq.store.index import IndexService
from rmq.store.mapped_file import AllocateMappedFileService
from rmq.store.read_path import MessageReader
from rmq.store.recovery import StoreRecovery, page_cache_outlived, write_abort_marker
from rmq.store.replica import ReplicaAppender
from rmq.store.results import PutMessageResult, PutMessageStatus, RunningFlags

log = logging.getLogger("rmq.store")

_PUT_OK = PutMessageStatus.PUT_OK
_WRITE_BLOCKING = RunningFlags._WRITE_BLOCKING
_CQ_UNIT = 20

ArrivingListener = Callable[[str, int, int], None]
"""(topic, queue_id, max logical offset after the arrival) -> None."""

# A put may also have to wait for replication; HA installs this hook.
ReplicaWaiter = Callable[[PutMessageResult, bool], "asyncio.Future[PutMessageStatus] | None"]
# ... and a SYNC_MASTER may refuse a put before it is stored (minInSyncReplicas): HA's
# answer, or None to go on. Asked only while a replica waiter is installed and the put
# waits (WAIT != false).
ReplicaGate = Callable[[], "PutMessageResult | None"]


class MessageStore:
    """CommitLog + ConsumeQueues + IndexFile + flush + dispatch, with recovery.

    Lifecycle: `load()` (blocking: lock, map files, recover) then `await start()`;
    `await shutdown()` finishes dispatch, flushes everything and removes `abort`.
    """

    def __init__(
        self,
        config: MessageStoreConfig,
        store_host: tuple[str, int] = ("127.0.0.1", 10911),
        arriving_listener: ArrivingListener | None = None,
    ) -> None:
        config.validate()
        self.config = config
        self.store_host = pack_host(*store_host)
        self.delay_levels_ms = config.delay_levels_ms
        self.running_flags = RunningFlags()
        self.allocator = AllocateMappedFileService()
        self.commitlog = CommitLog(
            config.commitlog_dir,
            config.mappedFileSizeCommitLog,
            config.maxMessageSize,
            self.delay_levels_ms,
            self.allocator,
        )
        self.consume_queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        self.checkpoint: StoreCheckpoint | None = None
        self.index_service: IndexService | None = None
        self.arriving_listener = arriving_listener
        self.replica_waiter: ReplicaWaiter | None = None
        self.replica_gate: ReplicaGate | None = None
        # Called after every commit (new readable CommitLog bytes): HA wakes its writers.
        self._commit_listeners: list[Callable[[], None]] = []
        self.reput = ReputMessageService(self.commitlog, self.delay_levels_ms, self.dispatch_batch)
        self.flush_service: GroupCommitService | FlushRealTimeService | None = None
        self._group_commit: GroupCommitService | None = None  # SYNC_FLUSH
        self.flush_cq_service: FlushConsumeQueueService | None = None
        self.shutdown_flag = True
        self.last_exit_ok = True
        # abnormal exit under this kernel boot: nothing written was lost (load())
        self.page_cache_intact = False
        self._lock_fd: int | None = None
        self._valid_topics: set[str] = set()
        self._loaded = False
        # NOT_WRITEABLE was set because a file could not be created or written for lack
        # of space: the cleaner lifts it once the disk has room again.
        self._no_space = False
        # fsync-gate: tripped by the first failed CommitLog flush, for good
        self.flush_gate = FlushGate(self._on_flush_error)
        # retries zeroing what a failed commit may have written (see _on_commit_error)
        self._repair_handle: asyncio.TimerHandle | None = None
        self.cleaner = StoreCleaner(self)
        # the jobs beside the put path, each usable on its own
        self.reader = MessageReader(config, self.commitlog, self.consume_queue_table)
        self.replica = ReplicaAppender(self.commitlog, self.reput)
        self.recovery = StoreRecovery(self)

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> None:
        """Take the store lock, map every file and recover (spec 4.6). Blocking."""
        cfg = self.config
        os.makedirs(cfg.storePathRootDir, exist_ok=True)
        self._acquire_lock()
        try:
            self.last_exit_ok = not os.path.exists(cfg.abort_path)
            self.page_cache_intact = not self.last_exit_ok and page_cache_outlived(cfg.abort_path)
            log.info(
                "loading store %s (last exit %s)",
                cfg.storePathRootDir,
                "clean"
                if self.last_exit_ok
                else "ABNORMAL: abort file present"
                + (", same boot: the page cache outlived the broker" if self.page_cache_intact else ""),
            )
            self.commitlog.load()
            self._load_consume_queues()
            self.checkpoint = StoreCheckpoint(cfg.checkpoint_path)
            if cfg.messageIndexEnable:
                self.index_service = IndexService(cfg, self.checkpoint)
                self.index_service.load(self.last_exit_ok, self.page_cache_intact, self._record_end)
                self.reader.index_service = self.index_service
            self.recovery.recover()
        except BaseException:
            self._release_lock()
            raise
        self._loaded = True

    def _record_end(self, offset: int) -> int:
        """Where the CommitLog record at offset ends (-1 if none is there): at load."""
        size = self.commitlog.get_record_size_at(offset)
        return offset + size if size > 0 else -1

    def _acquire_lock(self) -> None:
        path = self.config.lock_path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            # flock catches a second open in this process; lockf (fcntl) is what a
            # Java broker takes (FileChannel.tryLock), so neither can share a store.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError:
            os.close(fd)
            raise StoreLockedError(
                f"store {self.config.storePathRootDir} is in use by another broker "
                f"(lock file {path} is held); stop it or use another storePathRootDir"
            ) from None
        os.pwrite(fd, b"lock", 0)
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            try:
                fcntl.lockf(self._lock_fd, fcntl.LOCK_UN, 1, 0)
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            finally:
                os.close(self._lock_fd)
                self._lock_fd = None

    def _load_consume_queues(self) -> None:
        root = self.config.consume_queue_dir
        if not os.path.isdir(root):
            return
        for topic in sorted(os.listdir(root)):
            tdir = os.path.join(root, topic)
            if not os.path.isdir(tdir):
                continue
            for qname in sorted(os.listdir(tdir)):
                if not qname.lstrip("-").isdigit():
                    continue
                cq = ConsumeQueue(topic, int(qname), root, self.config.consume_queue_file_size)
                cq.load()
                self.consume_queue_table.setdefault(topic, {})[cq.queue_id] = cq

    async def start(self) -> None:
        """Start flushing and dispatching; returns once dispatch has caught up."""
        if not self._loaded:
            self.load()
        cfg = self.config
        assert self.checkpoint is not None
        reput_from = self.commitlog.min_offset
        for cq in self.iter_consume_queues():
            if cq.max_physic_offset > reput_from:
                reput_from = cq.max_physic_offset
        self.reput.reput_from_offset = reput_from
        log.info("dispatch starts at CommitLog offset %d (CommitLog end %d)", reput_from, self.commitlog.max_offset)
        write_abort_marker(cfg.abort_path)
        cl = self.commitlog
        cl.on_commit = self._on_commit
        cl.on_commit_error = self._on_commit_error
        cl.start(asyncio.get_running_loop())
        self.start_flush_services()
        self.reput.start()
        await self.reput.wait_caught_up()
        self.cleaner.start()
        self.shutdown_flag = False

    @property
    def loaded(self) -> bool:
        return self._loaded

    def start_flush_services(self) -> None:
        cfg = self.config
        assert self.checkpoint is not None
        cl = self.commitlog
        if cfg.flushDiskType == FlushDiskType.SYNC_FLUSH:
            self.flush_service = self._group_commit = GroupCommitService(
                cl.mfq, self.checkpoint, cfg, cl.commit, self.flush_gate
            )
        else:
            self.flush_service = FlushRealTimeService(cl.mfq, self.checkpoint, cfg, cl.commit, self.flush_gate)
        self.flush_service.start()
        self.flush_cq_service = FlushConsumeQueueService(
            self.iter_consume_queues, self.index_service, self.checkpoint, cfg
        )
        self.flush_cq_service.start()

    async def shutdown(self) -> None:
        """Stop taking puts, finish dispatch, flush everything, remove `abort`."""
        if self._lock_fd is None:
            return
        self.shutdown_flag = True
        await self.cleaner.stop()
        if self._repair_handle is not None:
            self._repair_handle.cancel()
            self._repair_handle = None
        self.reput.limit = None  # (a restart dispatches everything anyway)
        try:
            try:
                self.commitlog.stop()
            except OSError:
                pass  # logged; the abort file stays (not writeable)
            await self.reput.stop()
            if self.flush_service is not None:
                await self.flush_service.stop()
            if self.flush_cq_service is not None:
                await self.flush_cq_service.stop()
            assert self.checkpoint is not None
            if self.index_service is not None:
                await asyncio.get_running_loop().run_in_executor(None, self.index_service.flush_all_blocking)
            self.checkpoint.physic_msg_timestamp = max(
                self.checkpoint.physic_msg_timestamp, self.commitlog.mfq.store_timestamp
            )
            self.checkpoint.flush()
            # (a slave's CommitLog may end in an incomplete record: recovery drops it)
            clean = self.running_flags.is_writeable() and self.reput.is_caught_up()
            self._close_files()
            if clean:
                try:
                    os.unlink(self.config.abort_path)
                except FileNotFoundError:
                    pass
            else:
                log.warning(
                    "store shut down with dispatch %d bytes behind or not writeable; "
                    "keeping the abort file so the next start recovers",
                    self.reput.behind,
                )
        finally:
            self._release_lock()

    def _close_files(self) -> None:
        self.allocator.shutdown()
        self.commitlog.shutdown()
        for cq in self.iter_consume_queues():
            cq.shutdown()
        if self.index_service is not None:
            self.index_service.shutdown()
        if self.checkpoint is not None:
            self.checkpoint.close()

    def close_after_crash_test(self) -> None:
        """Release files and the lock without flushing (tests that simulate a crash;
        like a killed process, what is still in the write buffer is lost)."""
        self.commitlog.drop_uncommitted()
        self._close_files()
        self._release_lock()

    def _on_commit(self) -> None:
        gc = self._group_commit
        if gc is not None:
            gc.seal()
        self.reput.wakeup()
        for fn in self._commit_listeners:
            fn()

    def add_commit_listener(self, fn: Callable[[], None]) -> None:
        """fn() after every commit that made CommitLog bytes readable (loop thread)."""
        if fn not in self._commit_listeners:
            self._commit_listeners.append(fn)

    def remove_commit_listener(self, fn: Callable[[], None]) -> None:
        if fn in self._commit_listeners:
            self._commit_listeners.remove(fn)

    # ------------------------------------------------------------------ role changes (failover)
    def switch_to_slave(self) -> None:
        """Stop taking writes now (a master told to step down): puts are refused from
        here on; what was appended is committed so HA and readers see it whole. A
        dispatch limit stays: what the in-sync slaves never acked is not shown until
        the new master's history says whether it stays."""
        self.config.brokerRole = BrokerRole.SLAVE
        self.commit_now()

    def set_role(self, role: BrokerRole) -> None:
        """Take role now (a master role: puts are accepted from here on)."""
        if role == BrokerRole.SLAVE:
            self.switch_to_slave()
        else:
            self.config.brokerRole = role

    def set_dispatch_limit(self, offset: int | None) -> None:
        """Dispatch (what consumers see) stops at offset; None: at the CommitLog end.
        A master in controller mode sets it to what its in-sync slaves acked."""
        self.reput.set_limit(offset)

    async def stop_flush_services(self) -> None:
        if self.flush_service is not None:
            await self.flush_service.stop()
        if self.flush_cq_service is not None:
            await self.flush_cq_service.stop()

    def _on_commit_error(self, e: OSError) -> None:
        """A CommitLog commit failed and rolled its records back: refuse writes until
        repair() has zeroed what the write may have reached (retried here, then on
        the next put) -- the probe that the disk takes writes again."""
        if not self.running_flags.is_set(RunningFlags.NOT_WRITEABLE):
            log.error("writing the CommitLog failed (%s); refusing writes until a write succeeds again", e)
            self._no_space = e.errno in (errno.ENOSPC, errno.EDQUOT)
        self.running_flags.set(RunningFlags.NOT_WRITEABLE)
        gc = self._group_commit
        if gc is not None:
            gc.fail_open(PutMessageStatus.UNKNOWN_ERROR)
        self._schedule_repair(0.1)

    def _schedule_repair(self, delay: float) -> None:
        if self._repair_handle is None and not self.shutdown_flag:
            self._repair_handle = asyncio.get_running_loop().call_later(delay, self._try_repair, delay)

    def _try_repair(self, delay: float) -> None:
        self._repair_handle = None
        try:
            self.commitlog.repair()
        except OSError as e:
            log.debug("the CommitLog still refuses writes: %s", e)
            self._schedule_repair(min(delay * 2, 2.0))
            return
        self._writes_work_again()

    def _writes_work_again(self) -> None:
        if self.flush_gate.tripped or not self.running_flags.is_set(RunningFlags.NOT_WRITEABLE):
            return
        self._no_space = False
        self.running_flags.clear(RunningFlags.NOT_WRITEABLE)
        log.warning("the CommitLog takes writes again; accepting puts")

    def _on_flush_error(self, e: OSError) -> None:
        log.error(
            "fdatasync of the CommitLog failed (%s): what it covered may be lost, and "
            "no later flush can prove otherwise; refusing writes until the broker is "
            "restarted",
            e,
        )
        self.running_flags.set(RunningFlags.NOT_WRITEABLE)

    def space_returned(self) -> None:
        """The cleaner measured room on the CommitLog's disk: writes refused because a
        file could not be created or committed for lack of space resume, once what a
        failed commit may have written is zeroed."""
        if self._no_space and self.running_flags.is_set(RunningFlags.NOT_WRITEABLE) and not self.commitlog.damaged:
            log.warning(
                "the CommitLog's disk has room again (%.1f%% used)",
                self.cleaner.commitlog_service.commitlog_ratio * 100,
            )
            self._writes_work_again()

    def not_writeable_reason(self) -> str:
        """Why puts are refused, for the send response's remark."""
        flags = self.running_flags
        if self.shutdown_flag:
            return "message store has been shut down"
        if self.config.brokerRole == BrokerRole.SLAVE:
            return "message store is slave mode, so putMessage is forbidden"
        if flags.is_set(RunningFlags.DISK_FULL):
            c = self.cleaner.commitlog_service
            return (
                f"the disk is full: the CommitLog's disk is {c.commitlog_ratio * 100:.1f}% "
                f"used, above diskSpaceWarningLevelRatio {self.config.diskSpaceWarningLevelRatio}%"
            )
        if self.flush_gate.tripped:
            return f"store not writeable: flushing the CommitLog failed ({self.flush_gate.error}); restart the broker"
        if flags.is_set(RunningFlags.NOT_WRITEABLE) and self._no_space:
            return "the disk is full: no space left for the CommitLog"
        if flags.is_set(RunningFlags.WRITE_LOGICS_QUEUE_ERROR):
            return "store not writeable: writing a consume queue failed"
        if flags.is_set(RunningFlags.WRITE_INDEX_FILE_ERROR):
            return "store not writeable: writing an index file failed"
        return "store not writeable"

    # ------------------------------------------------------------------ put path
    def _check_store_status(self) -> PutMessageStatus | None:
        if self.shutdown_flag:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        if self.config.brokerRole == BrokerRole.SLAVE:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        if not self.running_flags.is_writeable():
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        return None

    def _check_topic(self, topic: str) -> str | None:
        if topic in self._valid_topics:
            return None
        if len(topic) > self.config.maxTopicLength or len(topic.encode("utf-8")) > 127:
            return f"topic {topic[:40]!r}... is longer than {self.config.maxTopicLength} characters"
        if not VALID_NAME.match(topic):
            return f"topic {topic!r} has characters outside [%|a-zA-Z0-9_-]"
        if len(self._valid_topics) > 100_000:
            self._valid_topics.clear()
        self._valid_topics.add(topic)
        return None

    def put_nowait(self, msg: MessageExtBrokerInner) -> tuple[PutMessageResult, Awaitable[PutMessageStatus] | None]:
        """Append now; the awaitable (if any) completes when flush/replication allow an answer.

        Without an awaitable (ASYNC_FLUSH, or WAIT=false, and no replica wait) the
        record is appended to the CommitLog's write buffer, not yet to the file: it is
        committed (pwrite into the page cache, where a SIGKILL of the process cannot
        lose it) by a callback that put_nowait has scheduled, if it was not scheduled
        already, with ``loop.call_soon`` -- at the end of this loop iteration. Rules for
        a caller that answers a producer PUT_OK from this result:

        * Anything the caller schedules with ``loop.call_soon`` (or ``call_later``, or a
          future's done callback) *after* put_nowait returned runs after that commit:
          the loop runs ready callbacks in FIFO order.
        * Output written to a socket synchronously, or by a callback scheduled *before*
          put_nowait was called (e.g. a per-connection write flush already pending from
          an earlier response of the same iteration), may leave the process before the
          commit. Call ``commit_now()`` first (it costs nothing when nothing is pending
          and takes everything appended so far in one pwrite), or wait on
          ``commit_waiter(result)``.

        With an awaitable, it completes after the commit (SYNC_FLUSH: after the
        fdatasync that covers the record; a replica wait: after the slave has it).
        Reads (pulls, lookups by offset, HA) see the record once it is committed.
        """
        if (
            self.shutdown_flag
            or self.running_flags.flags & _WRITE_BLOCKING
            or self.config.brokerRole == BrokerRole.SLAVE
        ):
            refused = self._refused()
            if refused is not None:
                return refused, None
        if msg.topic not in self._valid_topics:
            bad = self._check_topic(msg.topic)
            if bad is not None:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=bad), None
        if self.replica_gate is not None:
            refused = self._replica_refusal(msg.wait_store_msg_ok)
            if refused is not None:
                return refused, None
        if not msg.store_host:
            msg.store_host = self.store_host
        result = self.commitlog.put_message(msg, now_ms())
        if result.status is not _PUT_OK:
            if result.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED:
                self.running_flags.set(RunningFlags.NOT_WRITEABLE)
                self._no_space = True
                log.error("CommitLog file creation failed (%s); refusing writes until space returns", result.remark)
            return result, None
        if self.replica_waiter is None:
            gc = self._group_commit
            if gc is None:
                # ASYNC_FLUSH: answered once the commit wrote the record to the file
                return result, self.commitlog.pending_commit()
            if msg.properties.get(MessageConst.WAIT_STORE_MSG_OK) != "false":
                return result, gc.submit(result.wrote_offset + result.wrote_bytes)
        return result, self._waiter(result, msg.wait_store_msg_ok)

    def _refused(self) -> PutMessageResult | None:
        status = self._check_store_status()
        if status is None:
            return None
        return PutMessageResult(status, remark=self.not_writeable_reason())

    def _replica_refusal(self, wait: bool) -> PutMessageResult | None:
        """HA's refusal before the append (too few replicas in sync), if it has one."""
        gate = self.replica_gate
        if gate is None or self.replica_waiter is None or not wait:
            return None
        return gate()

    def put_batch_nowait(self, batch: MessageExtBatch) -> tuple[PutMessageResult, Awaitable[PutMessageStatus] | None]:
        refused = self._refused()
        if refused is not None:
            return refused, None
        bad = self._check_topic(batch.topic)
        if bad is not None:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=bad), None
        wait = batch.properties.get(MessageConst.WAIT_STORE_MSG_OK, "true") != "false"
        refused = self._replica_refusal(wait)
        if refused is not None:
            return refused, None
        if not batch.store_host:
            batch.store_host = self.store_host
        result = self.commitlog.put_messages(batch, now_ms())
        if result.status is not PutMessageStatus.PUT_OK:
            if result.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED:
                self.running_flags.set(RunningFlags.NOT_WRITEABLE)
                self._no_space = True
            return result, None
        return result, self._waiter(result, wait)

    def _waiter(self, result: PutMessageResult, wait: bool) -> Awaitable[PutMessageStatus] | None:
        """Flush (SYNC_FLUSH and wait: the group-commit round, which a failed commit
        answers UNKNOWN_ERROR) or else the commit; and replication when HA asks for it."""
        gc = self._group_commit
        stored: asyncio.Future[PutMessageStatus] | CommitRound | None
        if gc is not None and wait:
            stored = gc.submit(result.end_offset)
        else:
            if gc is not None:
                gc.wakeup()
            stored = self.commitlog.commit_waiter(result.end_offset)
        replica_fut = self.replica_waiter(result, wait) if self.replica_waiter is not None else None
        if replica_fut is None:
            return stored
        if stored is None:
            return replica_fut
        return _combine(stored, replica_fut)

    def commit_now(self) -> None:
        """Commit every appended record to the CommitLog file now (one pwrite; nothing
        when nothing is pending)."""
        if self.commitlog.uncommitted_bytes:
            try:
                self.commitlog.commit()
            except OSError:
                pass  # logged; the records rolled back, their waiters answered an error

    def commit_waiter(self, result: PutMessageResult) -> CommitRound | None:
        """A round completed when the put of result is committed (None if it is).
        Shared by all puts of a loop iteration; its result is PUT_OK, or UNKNOWN_ERROR
        if writing the CommitLog failed (the records are rolled back then)."""
        if not result.status.stored:
            return None
        return self.commitlog.commit_waiter(result.end_offset)

    async def _await_put(
        self, result: PutMessageResult, waiter: Awaitable[PutMessageStatus] | None
    ) -> PutMessageResult:
        if waiter is None:
            # ASYNC_FLUSH: answered once the record is at least in the page cache
            waiter = self.commit_waiter(result)
            if waiter is None:
                return result
        status = await waiter
        if status is not PutMessageStatus.PUT_OK:
            result.status = status
        return result

    async def put(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """put_nowait and wait: returns once the record is committed to the file
        (ASYNC_FLUSH), fdatasync'ed (SYNC_FLUSH) and replicated as configured."""
        result, waiter = self.put_nowait(msg)
        return await self._await_put(result, waiter)

    async def put_batch(self, batch: MessageExtBatch) -> PutMessageResult:
        result, waiter = self.put_batch_nowait(batch)
        return await self._await_put(result, waiter)

    # ------------------------------------------------------------------ replication

    def set_dispatch_throttle(self, seconds: float) -> None:
        """Dispatch pauses this long between its batches (0: it only yields): a slave
        catching up lets the CommitLog copy go first."""
        self.reput.set_throttle(seconds)

    # ------------------------------------------------------------------ dispatch
    def dispatch_batch(self, reqs: list[DispatchRequest]) -> int:
        """Build CQ units and index entries; returns how many requests were handled.

        Units are grouped per ConsumeQueue (a queue's units of one batch are one run:
        one pwrite), then the index is built for the batch."""
        table = self.consume_queue_table
        groups: dict[ConsumeQueue, list[DispatchRequest]] = {}
        last = None
        topic = None
        qs: dict[int, ConsumeQueue] | None = None
        for req in reqs:
            tran = req.sys_flag & 0xC
            if tran == 0 or tran == SysFlag.TRANSACTION_COMMIT_TYPE:
                if req.topic != topic:
                    topic = req.topic
                    qs = table.get(topic)
                cq = qs.get(req.queue_id) if qs is not None else None
                if cq is None:
                    cq = self.find_consume_queue(req.topic, req.queue_id)
                    qs = table[topic]
                g = groups.get(cq)
                if g is None:
                    groups[cq] = [req]
                else:
                    g.append(req)
                last = req
        done = len(reqs)
        arrived: list[tuple[ConsumeQueue, int]] = []
        for cq, g in groups.items():
            try:
                cq.put_units(g)
            except UnitsWriteError as e:
                self.running_flags.set(RunningFlags.WRITE_LOGICS_QUEUE_ERROR)
                bad = g[e.done]
                log.error(
                    "writing consume queue for %s-%d failed at CommitLog offset %d: %s",
                    cq.topic,
                    cq.queue_id,
                    bad.commit_log_offset,
                    e,
                )
                # retry from the first request not written (others are idempotent)
                done = min(done, next(i for i, r in enumerate(reqs) if r is bad))
                g = g[: e.done]
                if not g:
                    continue
            arrived.append((cq, g[-1].consume_queue_offset + 1))
        if done < len(reqs):
            last = None
            for r in reqs[:done]:
                if r.sys_flag & 0xC in (0, SysFlag.TRANSACTION_COMMIT_TYPE):
                    last = r
        if self.index_service is not None and done:
            try:
                self.index_service.build_index_batch(reqs[:done] if done < len(reqs) else reqs)
            except OSError as e:
                self.running_flags.set(RunningFlags.WRITE_INDEX_FILE_ERROR)
                log.error("building the index failed: %s", e)
                done = 0
        if last is not None and self.checkpoint is not None:
            self.checkpoint.logics_msg_timestamp = last.store_timestamp
            if self.config.brokerRole == BrokerRole.SLAVE:
                self.checkpoint.physic_msg_timestamp = last.store_timestamp
        listener = self.arriving_listener
        if listener is not None:
            for cq, max_offset in arrived:
                listener(cq.topic, cq.queue_id, max_offset)
        return done

    # ------------------------------------------------------------------ consume queues
    def iter_consume_queues(self) -> Iterable[ConsumeQueue]:
        for qs in self.consume_queue_table.values():
            yield from qs.values()

    async def delete_topics(self, topics: Iterable[str]) -> int:
        """Drop the consume queues of topics (and their queue offsets: a topic created
        again starts at 0), as deleteTopic does; the CommitLog keeps the records until
        retention. Files are deleted off the event loop. Returns queues dropped."""
        topics = list(topics)
        queues = [cq for topic in topics for cq in self.consume_queue_table.get(topic, {}).values()]
        for cq in queues:
            log.info("deleteTopics: %s-%d consume queue destroyed", cq.topic, cq.queue_id)
        self._valid_topics.difference_update(topics)
        await self._drop_consume_queues(queues)
        for topic in topics:  # a topic without queues left
            self.consume_queue_table.pop(topic, None)
        root = self.config.consume_queue_dir
        await asyncio.get_running_loop().run_in_executor(
            None, _remove_empty_dirs, [os.path.join(root, t) for t in topics]
        )
        return len(queues)

    async def _drop_consume_queues(self, queues: list[ConsumeQueue]) -> None:
        """Forget the queues (and their queue offsets: a queue made again starts at 0);
        their files are deleted off the event loop."""
        files = []
        for cq in queues:
            qs = self.consume_queue_table[cq.topic]
            del qs[cq.queue_id]
            if not qs:
                del self.consume_queue_table[cq.topic]
            files += cq.mfq.detach_first(len(cq.mfq.mapped_files))
            self.commitlog.topic_queue_table.pop((cq.topic, cq.queue_id), None)
        await destroy_files(files)

    async def clean_unused_topics(self, keep: Iterable[str]) -> int:
        """CLEAN_UNUSED_TOPIC (cleanUnusedTopic): the consume queues of every topic not in
        keep (the broker's topic configs) go, the schedule topic's excepted. Returns queues."""
        wanted = set(keep)
        unused = [t for t in self.consume_queue_table if t not in wanted and t != SCHEDULE_TOPIC]
        for topic in unused:
            log.info("cleanUnusedTopic: %s has no topic config; its consume queues go", topic)
        return await self.delete_topics(unused)

    async def clean_expired_consume_queues(self) -> int:
        """CLEAN_EXPIRED_CONSUMEQUEUE (cleanExpiredConsumerQueue): a queue whose last unit
        points below the CommitLog's first offset holds nothing readable; it goes (the
        schedule topic's excepted). Returns queues dropped."""
        min_phy = self.commitlog.min_offset
        doomed: list[tuple[ConsumeQueue, int]] = []
        for topic, qs in self.consume_queue_table.items():
            if topic == SCHEDULE_TOPIC:
                continue
            for cq in qs.values():
                last = cq.get_last_offset()
                if last == -1:
                    log.warning("cleanExpiredConsumerQueue: %s-%d is empty; maybe just created", topic, cq.queue_id)
                elif last < min_phy:
                    doomed.append((cq, last))
        for cq, last in doomed:
            log.info(
                "cleanExpiredConsumerQueue: %s-%d ends at %d, below the CommitLog's min %d: destroyed",
                cq.topic,
                cq.queue_id,
                last,
                min_phy,
            )
        await self._drop_consume_queues([cq for cq, _ in doomed])
        return len(doomed)

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        qs = self.consume_queue_table.get(topic)
        if qs is None:
            qs = self.consume_queue_table[topic] = {}
        cq = qs.get(queue_id)
        if cq is None:
            cq = qs[queue_id] = ConsumeQueue(
                topic, queue_id, self.config.consume_queue_dir, self.config.consume_queue_file_size
            )
        return cq

    get_consume_queue = Delegate("reader", MessageReader.get_consume_queue)

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        for cq in self.iter_consume_queues():
            cq.truncate_dirty_logic_files(phy_offset)

    def destroy_logics(self) -> None:
        for cq in list(self.iter_consume_queues()):
            cq.destroy()
        self.consume_queue_table.clear()

    # ------------------------------------------------------------------ reads (read_path.py)
    get_messages = Delegate("reader", MessageReader.get_messages)
    get_max_offset_in_queue = Delegate("reader", MessageReader.get_max_offset_in_queue)
    get_min_offset_in_queue = Delegate("reader", MessageReader.get_min_offset_in_queue)
    check_in_disk_by_consume_offset = Delegate("reader", MessageReader.check_in_disk_by_consume_offset)
    select_one_message_by_offset = Delegate("reader", MessageReader.select_one_message_by_offset)
    look_message_by_offset = Delegate("reader", MessageReader.look_message_by_offset)
    get_commit_log_offset_in_queue = Delegate("reader", MessageReader.get_commit_log_offset_in_queue)
    get_offset_in_queue_by_time = Delegate("reader", MessageReader.get_offset_in_queue_by_time)
    get_message_store_timestamp = Delegate("reader", MessageReader.get_message_store_timestamp)
    get_earliest_message_time = Delegate("reader", MessageReader.get_earliest_message_time)
    query_message = Delegate("reader", MessageReader.query_message)
    get_commitlog_data = Delegate("reader", MessageReader.get_commitlog_data)

    # ------------------------------------------------------------------ replica append (replica.py)
    @property
    def commitlog_empty(self) -> bool:
        return self.replica.commitlog_empty

    replica_file_ready = Delegate("replica", ReplicaAppender.replica_file_ready)
    create_replica_file = Delegate("replica", ReplicaAppender.create_replica_file)
    append_replicated = Delegate("replica", ReplicaAppender.append_replicated)

    # ------------------------------------------------------------------ recovery (recovery.py)
    truncate_to = Delegate("recovery", StoreRecovery.truncate_to)
    drop_incomplete_tail = Delegate("recovery", StoreRecovery.drop_incomplete_tail)
    prepare_to_lead = Delegate("recovery", StoreRecovery.prepare_to_lead)

    # ------------------------------------------------------------------ offsets

    @property
    def max_phy_offset(self) -> int:
        return self.commitlog.max_offset

    @property
    def min_phy_offset(self) -> int:
        return self.commitlog.min_offset

    @property
    def dispatched_offset(self) -> int:
        """CommitLog offset dispatch has reached (ConsumeQueues cover what is before)."""
        return self.reput.reput_from_offset

    @property
    def dispatch_behind_bytes(self) -> int:
        return self.reput.behind


def _remove_empty_dirs(topic_dirs: list[str]) -> None:
    for d in topic_dirs:
        if not os.path.isdir(d):
            continue
        for q in os.listdir(d):
            try:
                os.rmdir(os.path.join(d, q))
            except OSError:
                pass
        try:
            os.rmdir(d)
        except OSError:
            pass


async def _combine(
    flush_fut: Awaitable[PutMessageStatus], replica_fut: Awaitable[PutMessageStatus]
) -> PutMessageStatus:
    flush_status = await flush_fut
    if not flush_status.stored:
        # not written (rolled back): a slave's ack of the same offsets later is
        # for other records
        return flush_status
    replica_status = await replica_fut
    if replica_status is not PutMessageStatus.PUT_OK:
        return replica_status
    if flush_status is not PutMessageStatus.PUT_OK:
        return PutMessageStatus.FLUSH_DISK_TIMEOUT
    return PutMessageStatus.PUT_OK
