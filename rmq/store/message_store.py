"""MessageStore: the one facade the broker and HA use (RocketMQ's DefaultMessageStore)."""
from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterable

from rmq.common.clock import now_ms
from rmq.protocol.errors import ProtocolError
from rmq.protocol.message import (
    MessageConst,
    MessageExt,
    MessageExtBatch,
    MessageExtBrokerInner,
    SysFlag,
    decode_record,
    pack_host,
)
from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.cleanup import StoreCleaner, destroy_files
from rmq.store.commitlog import CommitLog
from rmq.store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from rmq.store.consume_queue import CQ_UNIT, ConsumeQueue, UnitsWriteError
from rmq.store.dispatch import ReputMessageService
from rmq.store.dispatch_request import DispatchRequest
from rmq.store.errors import StoreError, StoreLockedError
from rmq.store.flush import (
    FlushConsumeQueueService,
    FlushGate,
    FlushRealTimeService,
    GroupCommitService,
)
from rmq.store.index import IndexService
from rmq.store.mapped_file import AllocateMappedFileService, TruncatePlan
from rmq.store.message_filter import MessageFilter
from rmq.store.results import (
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
    RunningFlags,
)

log = logging.getLogger("rmq.store")

TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_PUT_OK = PutMessageStatus.PUT_OK
_WRITE_BLOCKING = RunningFlags._WRITE_BLOCKING
_CQ_UNIT = 20

ArrivingListener = Callable[[str, int, int], None]
"""(topic, queue_id, max logical offset after the arrival) -> None."""

# A put may also have to wait for replication; HA installs this hook.
ReplicaWaiter = Callable[[PutMessageResult, bool], "asyncio.Future[PutMessageStatus] | None"]


def _total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


class MessageStore:
    """CommitLog + ConsumeQueues + IndexFile + flush + dispatch, with recovery.

    Lifecycle: `load()` (blocking: lock, map files, recover) then `await start()`;
    `await shutdown()` finishes dispatch, flushes everything and removes `abort`.
    """

    def __init__(self, config: MessageStoreConfig, store_host: tuple[str, int] = ("127.0.0.1", 10911),
                 arriving_listener: ArrivingListener | None = None) -> None:
        config.validate()
        self.config = config
        self.store_host = pack_host(*store_host)
        self.delay_levels_ms = config.delay_levels_ms
        self.running_flags = RunningFlags()
        self.allocator = AllocateMappedFileService()
        self.commitlog = CommitLog(config.commitlog_dir, config.mappedFileSizeCommitLog,
                                   config.maxMessageSize, self.delay_levels_ms, self.allocator)
        self.consume_queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        self.checkpoint: StoreCheckpoint | None = None
        self.index_service: IndexService | None = None
        self.arriving_listener = arriving_listener
        self.replica_waiter: ReplicaWaiter | None = None
        # Called after every commit (new readable CommitLog bytes): HA wakes its writers.
        self._commit_listeners: list[Callable[[], None]] = []
        self.reput = ReputMessageService(self.commitlog, self.delay_levels_ms, self.dispatch_batch)
        self.flush_service: GroupCommitService | FlushRealTimeService | None = None
        self._group_commit: GroupCommitService | None = None   # SYNC_FLUSH
        self.flush_cq_service: FlushConsumeQueueService | None = None
        self.shutdown_flag = True
        self.last_exit_ok = True
        self._lock_fd: int | None = None
        self._valid_topics: set[str] = set()
        self._memory_budget = _total_physical_memory() * config.accessMessageInMemoryMaxRatio // 100
        self._loaded = False
        # NOT_WRITEABLE was set because a file could not be created or written for lack
        # of space: the cleaner lifts it once the disk has room again.
        self._no_space = False
        # fsync-gate: tripped by the first failed CommitLog flush, for good
        self.flush_gate = FlushGate(self._on_flush_error)
        # retries zeroing what a failed commit may have written (see _on_commit_error)
        self._repair_handle: asyncio.TimerHandle | None = None
        self.cleaner = StoreCleaner(self)

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> None:
        """Take the store lock, map every file and recover (spec 4.6). Blocking."""
        cfg = self.config
        os.makedirs(cfg.storePathRootDir, exist_ok=True)
        self._acquire_lock()
        try:
            self.last_exit_ok = not os.path.exists(cfg.abort_path)
            log.info("loading store %s (last exit %s)", cfg.storePathRootDir,
                     "clean" if self.last_exit_ok else "ABNORMAL: abort file present")
            self.commitlog.load()
            self._load_consume_queues()
            self.checkpoint = StoreCheckpoint(cfg.checkpoint_path)
            if cfg.messageIndexEnable:
                self.index_service = IndexService(cfg, self.checkpoint)
                self.index_service.load(self.last_exit_ok)
            self._recover()
        except BaseException:
            self._release_lock()
            raise
        self._loaded = True

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
                f"(lock file {path} is held); stop it or use another storePathRootDir") from None
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

    def _recover(self) -> None:
        max_phy_cq = -1
        for cq in self._iter_consume_queues():
            cq.recover()
            max_phy_cq = max(max_phy_cq, cq.max_physic_offset)
        cfg = self.config
        if not self.commitlog.mfq.mapped_files:
            if max_phy_cq >= 0:
                log.warning("the CommitLog has no files; deleting the consume queues")
            self._destroy_logics()
            return
        if self.last_exit_ok:
            process = self.commitlog.recover_normally(cfg.checkCRCOnRecover)
        else:
            assert self.checkpoint is not None
            if cfg.messageIndexEnable and cfg.messageIndexSafe:
                min_ts = self.checkpoint.min_timestamp_index()
            else:
                min_ts = self.checkpoint.min_timestamp()
            process = self.commitlog.recover_abnormally(
                cfg.checkCRCOnRecover, min_ts, lambda req: self._dispatch_recovery(req))
        if max_phy_cq > process:
            log.warning("consume queues reach %d, beyond the CommitLog end %d; truncating them",
                        max_phy_cq, process)
            self.truncate_dirty_logic_files(process)
        self._truncate_index_beyond(process)
        self._recover_topic_queue_table()

    def _dispatch_recovery(self, req: DispatchRequest) -> None:
        self.dispatch_batch([req])

    def _truncate_index_beyond(self, offset: int) -> None:
        """Drop index files that reach past offset and rebuild the index from the
        earliest dropped entry (index files deleted as too new at an abnormal load
        count too: re-dispatch from the checkpoint may start after their entries)."""
        if self.index_service is None:
            return
        candidates = [self.index_service.truncate_beyond(offset),
                      self.index_service.rebuild_from_phy_offset]
        present = [c for c in candidates if c is not None]
        if not present:
            return
        rebuild_from = min(present)
        # Files the abnormal re-dispatch built since load() hold entries past
        # rebuild_from; kept, they make the rebuild skip everything below their end.
        again = self.index_service.truncate_beyond(rebuild_from)
        if again is not None:
            rebuild_from = min(rebuild_from, again)
        self.index_service.rebuild_from_phy_offset = None
        log.info("rebuilding the index from CommitLog offset %d to %d", rebuild_from, offset)
        self.reput.replay(max(rebuild_from, self.commitlog.min_offset), offset,
                          self.index_service.build_index_only)

    def _recover_topic_queue_table(self) -> None:
        table: dict[tuple[str, int], int] = {}
        min_phy = self.commitlog.min_offset
        for cq in self._iter_consume_queues():
            table[(cq.topic, cq.queue_id)] = cq.get_max_offset_in_queue()
            cq.correct_min_offset(min_phy)
        self.commitlog.topic_queue_table = table

    async def start(self) -> None:
        """Start flushing and dispatching; returns once dispatch has caught up."""
        if not self._loaded:
            self.load()
        cfg = self.config
        assert self.checkpoint is not None
        reput_from = self.commitlog.min_offset
        for cq in self._iter_consume_queues():
            if cq.max_physic_offset > reput_from:
                reput_from = cq.max_physic_offset
        self.reput.reput_from_offset = reput_from
        log.info("dispatch starts at CommitLog offset %d (CommitLog end %d)",
                 reput_from, self.commitlog.max_offset)
        with open(cfg.abort_path, "wb"):
            pass
        cl = self.commitlog
        cl.on_commit = self._on_commit
        cl.on_commit_error = self._on_commit_error
        cl.start(asyncio.get_running_loop())
        self._start_flush_services()
        self.reput.start()
        await self.reput.wait_caught_up()
        self.cleaner.start()
        self.shutdown_flag = False

    def _start_flush_services(self) -> None:
        cfg = self.config
        assert self.checkpoint is not None
        cl = self.commitlog
        if cfg.flushDiskType == FlushDiskType.SYNC_FLUSH:
            self.flush_service = self._group_commit = GroupCommitService(
                cl.mfq, self.checkpoint, cfg, cl.commit, self.flush_gate)
        else:
            self.flush_service = FlushRealTimeService(cl.mfq, self.checkpoint, cfg, cl.commit,
                                                      self.flush_gate)
        self.flush_service.start()
        self.flush_cq_service = FlushConsumeQueueService(
            self._iter_consume_queues, self.index_service, self.checkpoint, cfg)
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
        self.reput.limit = None      # (a restart dispatches everything anyway)
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
                await asyncio.get_running_loop().run_in_executor(
                    None, self.index_service.flush_all_blocking)
            self.checkpoint.physic_msg_timestamp = max(self.checkpoint.physic_msg_timestamp,
                                                       self.commitlog.mfq.store_timestamp)
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
                log.warning("store shut down with dispatch %d bytes behind or not writeable; "
                            "keeping the abort file so the next start recovers",
                            self.reput.behind)
        finally:
            self._release_lock()

    def _close_files(self) -> None:
        self.allocator.shutdown()
        self.commitlog.shutdown()
        for cq in self._iter_consume_queues():
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

    # ------------------------------------------------------------------ truncation (HA)
    async def truncate_to(self, offset: int) -> int:
        """Make the store what it would be had nothing at or after CommitLog offset
        been written (a returning old master drops what the new master does not have;
        RocketMQ 5's truncateFiles). Returns the number of CommitLog bytes dropped.

        offset must start a record (CommitLog.record_boundary_error; StoreError says
        what is there otherwise, and nothing changes). Then: the CommitLog files past
        it go and the one holding it is cut; every ConsumeQueue loses the units of the
        dropped records (a queue left with none goes entirely); the index forgets their
        entries in place (no rebuild: IndexService.truncate_plan); the queue-offset
        table is rebuilt from the queues; dispatch resumes from offset; the
        checkpoint's timestamps fall back to the newest record left, so an abnormal
        restart recovers from a point the truncated files support.

        A started store must be a SLAVE, and HA must not append until this returns:
        nothing may write meanwhile. Dispatch is run to the last complete record (it
        then has nothing to do); the flush services are stopped (after flushing what
        they had) and started again, so no flush in flight can record a position past
        the cut.
        The file work (zeroing dropped tails, fdatasync, unlink) runs in a worker
        thread; readers on the loop see the shortened store at once, in one step.
        """
        if not self._loaded:
            raise StoreError("truncate_to needs a loaded store (call load() first)")
        running = not self.shutdown_flag
        if running and self.config.brokerRole != BrokerRole.SLAVE:
            raise StoreError(f"truncate_to refuses to cut a writable store "
                             f"({self.config.brokerRole.value}): make it a SLAVE first")
        cl = self.commitlog
        try:
            cl.commit()
        except OSError as e:
            raise StoreError(f"cannot commit the CommitLog before truncating: {e}") from e
        dispatched_to = -1
        if running:
            # dispatch every complete record (a slave's tail may end mid-record:
            # wait_caught_up would wait for the rest); it is idle afterwards
            await self.reput.dispatch_all()
            dispatched_to = self.reput.reput_from_offset
        end = cl.max_offset
        problem = cl.record_boundary_error(offset, dispatched_to)
        if problem is not None:
            raise StoreError(f"cannot truncate the CommitLog at offset {offset}: {problem}")
        if offset == end:
            return 0
        log.warning("truncating the store at CommitLog offset %d (end %d, %d bytes)",
                    offset, end, end - offset)
        if running:
            await self._stop_flush_services()
        try:
            plan = self._truncate_bookkeeping(offset)
            checkpoint = self.checkpoint
            assert checkpoint is not None

            def disk_work() -> None:
                plan.run()
                checkpoint.sync()

            try:
                await asyncio.to_thread(disk_work)
            except OSError as e:
                self.running_flags.set(RunningFlags.NOT_WRITEABLE)
                raise StoreError(f"truncating the store files at {offset} failed: {e}; "
                                 "the store refuses writes") from e
            finally:
                plan.finish()
        finally:
            if running:
                self._start_flush_services()
        log.warning("store truncated at CommitLog offset %d: %d bytes dropped", offset,
                    end - offset)
        return end - offset

    async def drop_incomplete_tail(self) -> int:
        """Cut a started SLAVE's CommitLog back to the end of its last complete record
        (replicated blocks need not end on one): what a slave must do before it takes
        writes as master (RocketMQ's truncateInvalidMsg). Returns the bytes dropped;
        0 for a store not started (recovery at load already dropped such a tail)."""
        if self.shutdown_flag:
            return 0
        await self.reput.dispatch_all()
        return await self.truncate_to(self.reput.reput_from_offset)

    # ------------------------------------------------------------------ role changes (failover)
    def switch_to_slave(self) -> None:
        """Stop taking writes now (a master told to step down): puts are refused from
        here on; what was appended is committed so HA and readers see it whole. A
        dispatch limit stays: what the in-sync slaves never acked is not shown until
        the new master's history says whether it stays."""
        self.config.brokerRole = BrokerRole.SLAVE
        self.commit_now()

    async def prepare_to_lead(self) -> int:
        """A SLAVE about to take writes (its HA client stopped): cut an incomplete
        replicated tail, dispatch every record, rebuild the queue-offset table from the
        ConsumeQueues (a slave's dispatch does not keep it). Returns the CommitLog bytes
        dropped. Nothing may append meanwhile; set_role then opens the store."""
        if self.config.brokerRole != BrokerRole.SLAVE:
            raise StoreError("prepare_to_lead needs a SLAVE store (switch_to_slave first)")
        self.reput.limit = None      # all of this log is the group's now
        dropped = await self.drop_incomplete_tail()
        await self.reput.dispatch_all()
        self._recover_topic_queue_table()
        return dropped

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

    async def _stop_flush_services(self) -> None:
        if self.flush_service is not None:
            await self.flush_service.stop()
        if self.flush_cq_service is not None:
            await self.flush_cq_service.stop()

    def _truncate_bookkeeping(self, offset: int) -> TruncatePlan:
        """Everything of truncate_to that is not file I/O, in one synchronous step."""
        plan = self.commitlog.truncate_plan(offset)
        for topic, qs in list(self.consume_queue_table.items()):
            for qid, cq in list(qs.items()):
                p, emptied = cq.truncate_plan(offset)
                plan.add(p)
                if emptied:
                    del qs[qid]
            if not qs:
                del self.consume_queue_table[topic]
        cl = self.commitlog
        if self.index_service is not None:
            plan.add(self.index_service.truncate_plan(
                offset, lambda phy: cl.pick_store_timestamp(phy, 0)))
        self._recover_topic_queue_table()
        if self.reput.reput_from_offset > offset:
            self.reput.reset_offset(offset)
        ts = self._last_dispatched_store_timestamp()
        ck = self.checkpoint
        assert ck is not None
        ck.physic_msg_timestamp = min(ck.physic_msg_timestamp, ts)
        ck.logics_msg_timestamp = min(ck.logics_msg_timestamp, ts)
        ck.master_flushed_offset = min(ck.master_flushed_offset, offset)
        ck.confirm_phy_offset = min(ck.confirm_phy_offset, offset)
        ck.write()
        cl.mfq.store_timestamp = min(cl.mfq.store_timestamp, ts)
        return plan

    def _last_dispatched_store_timestamp(self) -> int:
        """Store time of the newest record any ConsumeQueue points at (0 if none)."""
        best_off, best_size = -1, 0
        for cq in self._iter_consume_queues():
            n = cq.get_max_offset_in_queue()
            if n > cq.get_min_offset_in_queue():
                u = cq.read_unit(n - 1)
                if u is not None and u[0] > best_off and u[1] != 0x7FFFFFFF:
                    best_off, best_size = u[0], u[1]
        if best_off < 0:
            return 0
        return max(self.commitlog.pick_store_timestamp(best_off, best_size), 0)

    def _on_commit_error(self, e: OSError) -> None:
        """A CommitLog commit failed and rolled its records back: refuse writes until
        repair() has zeroed what the write may have reached (retried here, then on
        the next put) -- the probe that the disk takes writes again."""
        if not self.running_flags.is_set(RunningFlags.NOT_WRITEABLE):
            log.error("writing the CommitLog failed (%s); refusing writes until a write "
                      "succeeds again", e)
            self._no_space = e.errno in (errno.ENOSPC, errno.EDQUOT)
        self.running_flags.set(RunningFlags.NOT_WRITEABLE)
        gc = self._group_commit
        if gc is not None:
            gc.fail_open(PutMessageStatus.UNKNOWN_ERROR)
        self._schedule_repair(0.1)

    def _schedule_repair(self, delay: float) -> None:
        if self._repair_handle is None and not self.shutdown_flag:
            self._repair_handle = asyncio.get_running_loop().call_later(delay, self._try_repair,
                                                                        delay)

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
        log.error("fdatasync of the CommitLog failed (%s): what it covered may be lost, and "
                  "no later flush can prove otherwise; refusing writes until the broker is "
                  "restarted", e)
        self.running_flags.set(RunningFlags.NOT_WRITEABLE)

    def space_returned(self) -> None:
        """The cleaner measured room on the CommitLog's disk: writes refused because a
        file could not be created or committed for lack of space resume, once what a
        failed commit may have written is zeroed."""
        if (self._no_space and self.running_flags.is_set(RunningFlags.NOT_WRITEABLE)
                and not self.commitlog.damaged):
            log.warning("the CommitLog's disk has room again (%.1f%% used)",
                        self.cleaner.commitlog_service.commitlog_ratio * 100)
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
            return (f"the disk is full: the CommitLog's disk is {c.commitlog_ratio * 100:.1f}% "
                    f"used, above diskSpaceWarningLevelRatio {self.config.diskSpaceWarningLevelRatio}%")
        if self.flush_gate.tripped:
            return (f"store not writeable: flushing the CommitLog failed ({self.flush_gate.error}); "
                    "restart the broker")
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
        if not TOPIC_PATTERN.match(topic):
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
        if (self.shutdown_flag or self.running_flags.flags & _WRITE_BLOCKING
                or self.config.brokerRole == BrokerRole.SLAVE):
            refused = self._refused()
            if refused is not None:
                return refused, None
        if msg.topic not in self._valid_topics:
            bad = self._check_topic(msg.topic)
            if bad is not None:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=bad), None
        ps = msg.properties_string
        if ps is not None and len(ps) > 32767:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark="properties longer than 32767 characters"), None
        if not msg.store_host:
            msg.store_host = self.store_host
        result = self.commitlog.put_message(msg, now_ms())
        if result.status is not _PUT_OK:
            if result.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED:
                self.running_flags.set(RunningFlags.NOT_WRITEABLE)
                self._no_space = True
                log.error("CommitLog file creation failed (%s); refusing writes until space returns",
                          result.remark)
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

    def put_batch_nowait(self, batch: MessageExtBatch) -> tuple[PutMessageResult, Awaitable[PutMessageStatus] | None]:
        refused = self._refused()
        if refused is not None:
            return refused, None
        bad = self._check_topic(batch.topic)
        if bad is not None:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=bad), None
        if not batch.store_host:
            batch.store_host = self.store_host
        result = self.commitlog.put_messages(batch, now_ms())
        if result.status is not PutMessageStatus.PUT_OK:
            if result.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED:
                self.running_flags.set(RunningFlags.NOT_WRITEABLE)
                self._no_space = True
            return result, None
        wait = batch.properties.get(MessageConst.WAIT_STORE_MSG_OK, "true") != "false"
        return result, self._waiter(result, wait)

    def _waiter(self, result: PutMessageResult, wait: bool) -> Awaitable[PutMessageStatus] | None:
        """Flush (SYNC_FLUSH and wait: the group-commit round, which a failed commit
        answers UNKNOWN_ERROR) or else the commit; and replication when HA asks for it."""
        gc = self._group_commit
        stored: asyncio.Future[PutMessageStatus] | None
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

    def commit_waiter(self, result: PutMessageResult) -> "asyncio.Future[PutMessageStatus] | None":
        """A future completed when the put of result is committed (None if it is).
        Shared by all puts of a loop iteration; its result is PUT_OK, or UNKNOWN_ERROR
        if writing the CommitLog failed (the records are rolled back then)."""
        if not result.status.stored:
            return None
        return self.commitlog.commit_waiter(result.end_offset)

    async def _await_put(self, result: PutMessageResult,
                         waiter: Awaitable[PutMessageStatus] | None) -> PutMessageResult:
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
    def get_commitlog_data(self, offset: int, max_bytes: int) -> bytes | None:
        """Committed CommitLog bytes from offset, at most max_bytes, never past the end
        of offset's file (RocketMQ's getCommitLogData for the HA writer). None when
        nothing is readable there (no data yet, or the file was deleted)."""
        got = self.commitlog.get_data(offset, max_bytes)
        if got is None:
            return None
        mf, pos, end = got
        if mf.file_from_offset + pos != offset:
            return None     # offset is not in the returned file (deleted / not written)
        return mf.mm[pos:end]

    @property
    def commitlog_empty(self) -> bool:
        """No CommitLog file at all (a new slave takes any first offset its master sends)."""
        return not self.commitlog.mfq.mapped_files

    def set_dispatch_throttle(self, seconds: float) -> None:
        """Dispatch pauses this long between its batches (0: it only yields): a slave
        catching up lets the CommitLog copy go first."""
        self.reput.set_throttle(seconds)

    def replica_file_ready(self, offset: int) -> bool:
        """False when replicated bytes at offset need a new CommitLog file first."""
        return self.commitlog.replica_file(offset) is not None

    async def create_replica_file(self, offset: int) -> None:
        """Create the CommitLog file for replicated offset in a worker thread."""
        cl = self.commitlog
        mf = await asyncio.get_running_loop().run_in_executor(None, cl.make_replica_file, offset)
        if cl.replica_file(offset) is not None:    # someone else made it meanwhile
            mf.close()
            return
        cl.add_replica_file(mf, offset)
        if self.reput.reput_from_offset < cl.min_offset:
            # a slave that starts mid-stream: nothing to dispatch below its first file
            self.reput.reput_from_offset = cl.min_offset

    def append_replicated(self, offset: int, blocks: list[memoryview]) -> int:
        """Append a master's contiguous bytes at offset (one file); returns the new end.
        Dispatch is woken and builds ConsumeQueues and the index from them."""
        return self.commitlog.append_replica(offset, blocks)

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
                log.error("writing consume queue for %s-%d failed at CommitLog offset %d: %s",
                          cq.topic, cq.queue_id, bad.commit_log_offset, e)
                # retry from the first request not written (others are idempotent)
                done = min(done, next(i for i, r in enumerate(reqs) if r is bad))
                g = g[:e.done]
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
    def _iter_consume_queues(self) -> Iterable[ConsumeQueue]:
        for qs in self.consume_queue_table.values():
            yield from qs.values()

    def iter_consume_queues(self) -> Iterable[ConsumeQueue]:
        return self._iter_consume_queues()

    async def delete_topics(self, topics: Iterable[str]) -> int:
        """Drop the consume queues of topics (and their queue offsets: a topic created
        again starts at 0), as deleteTopic does; the CommitLog keeps the records until
        retention. Files are deleted off the event loop. Returns queues dropped."""
        topics = list(topics)
        doomed = []
        n = 0
        for topic in topics:
            qs = self.consume_queue_table.pop(topic, None)
            if not qs:
                continue
            for cq in qs.values():
                doomed += cq.mfq.detach_first(len(cq.mfq.mapped_files))
                self.commitlog.topic_queue_table.pop((topic, cq.queue_id), None)
                log.info("deleteTopics: %s-%d consume queue destroyed", topic, cq.queue_id)
                n += 1
        self._valid_topics.difference_update(topics)
        await destroy_files(doomed)
        root = self.config.consume_queue_dir
        await asyncio.get_running_loop().run_in_executor(
            None, _remove_empty_dirs, [os.path.join(root, t) for t in topics])
        return n

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        qs = self.consume_queue_table.get(topic)
        if qs is None:
            qs = self.consume_queue_table[topic] = {}
        cq = qs.get(queue_id)
        if cq is None:
            cq = qs[queue_id] = ConsumeQueue(topic, queue_id, self.config.consume_queue_dir,
                                             self.config.consume_queue_file_size)
        return cq

    def get_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        qs = self.consume_queue_table.get(topic)
        return qs.get(queue_id) if qs is not None else None

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        for cq in self._iter_consume_queues():
            cq.truncate_dirty_logic_files(phy_offset)

    def _destroy_logics(self) -> None:
        for cq in list(self._iter_consume_queues()):
            cq.destroy()
        self.consume_queue_table.clear()

    # ------------------------------------------------------------------ reads
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        return cq.get_max_offset_in_queue() if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        return cq.get_min_offset_in_queue() if cq is not None else -1

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

    def _next_offset_correction(self, old: int, new: int) -> int:
        if self.config.brokerRole != BrokerRole.SLAVE or self.config.offsetCheckInSlave:
            return new
        return old

    def _is_the_batch_full(self, size_py: int, max_msg_nums: int, buffer_total: int,
                           message_total: int, in_disk: bool) -> bool:
        if buffer_total == 0 or message_total == 0:
            return False
        if max_msg_nums <= message_total:
            return True
        cfg = self.config
        if in_disk:
            return (buffer_total + size_py > cfg.maxTransferBytesOnMessageInDisk
                    or message_total > cfg.maxTransferCountOnMessageInDisk - 1)
        return (buffer_total + size_py > cfg.maxTransferBytesOnMessageInMemory
                or message_total > cfg.maxTransferCountOnMessageInMemory - 1)

    def get_messages(self, group: str, topic: str, queue_id: int, offset: int,
                     max_msg_nums: int, message_filter: MessageFilter | None = None) -> GetMessageResult:
        """Records of one queue from offset, exactly as stored (spec 2.5 statuses)."""
        max_offset_py = self.commitlog.max_offset
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
                                    self._next_offset_correction(offset, 0))
        min_offset = cq.get_min_offset_in_queue()
        max_offset = cq.get_max_offset_in_queue()
        result = GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, offset, min_offset, max_offset)
        if max_offset == 0:
            result.next_begin_offset = self._next_offset_correction(offset, 0)
        elif offset < min_offset:
            result.status = GetMessageStatus.OFFSET_TOO_SMALL
            result.next_begin_offset = self._next_offset_correction(offset, min_offset)
        elif offset == max_offset:
            result.status = GetMessageStatus.OFFSET_OVERFLOW_ONE
            result.next_begin_offset = self._next_offset_correction(offset, offset)
        elif offset > max_offset:
            result.status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
            result.next_begin_offset = self._next_offset_correction(
                offset, min_offset if min_offset == 0 else max_offset)
        else:
            got = cq.get_index_buffer(offset)
            if got is None:
                result.status = GetMessageStatus.OFFSET_FOUND_NULL
                result.next_begin_offset = self._next_offset_correction(
                    offset, cq.roll_next_file(offset))
                return result
            self._collect(result, cq, got, offset, max_msg_nums, message_filter, max_offset_py)
        return result

    def _collect(self, result: GetMessageResult, cq: ConsumeQueue, got, offset: int,
                 max_msg_nums: int, message_filter: MessageFilter | None, max_offset_py: int) -> None:
        mf, pos, end = got
        mm = mf.mm
        unit = CQ_UNIT
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        next_phy_file_start = -1
        max_phy_pulling = 0
        max_filter = max(16000, max_msg_nums * 20)
        budget = self._memory_budget
        commitlog = self.commitlog
        buffers = result.buffers
        qoffs = result.queue_offsets
        total = 0
        i = 0
        span = min(end - pos, max_filter)
        while i < span:
            off_py, size_py, tags_code = unit.unpack_from(mm, pos + i)
            max_phy_pulling = off_py
            i += _CQ_UNIT
            if next_phy_file_start >= 0 and off_py < next_phy_file_start:
                continue
            in_disk = (max_offset_py - off_py) > budget
            if self._is_the_batch_full(size_py, max_msg_nums, total, len(buffers), in_disk):
                i -= _CQ_UNIT
                break
            if message_filter is not None and not message_filter.is_matched_by_consume_queue(tags_code):
                if total == 0:
                    status = GetMessageStatus.NO_MATCHED_MESSAGE
                continue
            data = commitlog.get_message(off_py, size_py)
            if data is None:
                if total == 0:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                next_phy_file_start = commitlog.roll_next_file(off_py)
                continue
            if message_filter is not None and not message_filter.is_matched_by_commit_log(data):
                if total == 0:
                    status = GetMessageStatus.NO_MATCHED_MESSAGE
                continue
            buffers.append(data)
            qoffs.append(offset + (i - _CQ_UNIT) // _CQ_UNIT)
            total += size_py
            status = GetMessageStatus.FOUND
            next_phy_file_start = -1
        result.status = status
        result.buffer_total_size = total
        result.next_begin_offset = offset + i // _CQ_UNIT
        result.max_phy_offset_pulling = max_phy_pulling
        result.suggest_pulling_from_slave = (max_offset_py - max_phy_pulling) > budget

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, consume_offset: int) -> bool:
        """True when the message at consume_offset is far enough behind the CommitLog end
        to have left memory (accessMessageInMemoryMaxRatio); False if there is none."""
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return False
        u = cq.read_unit(consume_offset)
        if u is None:
            return False
        return (self.commitlog.max_offset - u[0]) > self._memory_budget

    def select_one_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> bytes | None:
        if size is None:
            size = self.commitlog.get_record_size_at(commit_log_offset)
            if size <= 0:
                return None
        return self.commitlog.get_message(commit_log_offset, size)

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        data = self.select_one_message_by_offset(commit_log_offset)
        if data is None:
            return None
        try:
            return decode_record(data)
        except ProtocolError:
            return None

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return 0
        u = cq.read_unit(cq_offset)
        return u[0] if u is not None else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int,
                                    boundary: str | None = None) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(timestamp, self.commitlog.pick_store_timestamp, boundary)

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return -1
        u = cq.read_unit(cq_offset)
        if u is None:
            return -1
        return self.commitlog.pick_store_timestamp(u[0], u[1])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, cq.get_min_offset_in_queue())

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryMessageResult:
        """Messages whose KEYS contain key or whose UNIQ_KEY is key, via the index."""
        result = QueryMessageResult()
        if self.index_service is None:
            return result
        last_query_time = end
        for _ in range(3):
            q = self.index_service.query_offset(topic, key, max_num, begin, last_query_time)
            result.index_last_update_timestamp = q.index_last_update_timestamp
            result.index_last_update_phyoffset = q.index_last_update_phyoffset
            for m, off in enumerate(sorted(q.phy_offsets)):
                data = self.select_one_message_by_offset(off)
                if data is None:
                    continue
                try:
                    msg = decode_record(data)
                except ProtocolError:
                    continue
                if m == 0:
                    last_query_time = msg.store_timestamp
                # The index returns hash collisions; keep exact matches only.
                if msg.topic != topic:
                    continue
                keys = (msg.properties.get(MessageConst.KEYS) or "").split(MessageConst.KEY_SEPARATOR)
                if key in keys or msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == key:
                    result.buffers.append(data)
            if result.buffers or last_query_time < begin:
                break
        return result


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


async def _combine(flush_fut: Awaitable[PutMessageStatus],
                   replica_fut: Awaitable[PutMessageStatus]) -> PutMessageStatus:
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
