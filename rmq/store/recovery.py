"""Recovery and truncation (RocketMQ's recoverNormally / recoverAbnormally and 5.x's
truncateFiles): what the store does at load to agree with its CommitLog, and what a
failover does to cut it back to the history of the new master."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable
from typing import Protocol

from rmq.protocol.record import DispatchRequest
from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.commitlog import CommitLog
from rmq.store.config import BrokerRole, MessageStoreConfig
from rmq.store.consume_queue import ConsumeQueue
from rmq.store.dispatch import ReputMessageService
from rmq.store.errors import StoreError
from rmq.store.index import IndexService
from rmq.store.mapped_file import TruncatePlan
from rmq.store.results import RunningFlags

__all__ = ["RecoverableStore", "StoreRecovery", "page_cache_outlived", "write_abort_marker"]

log = logging.getLogger("rmq.store")

_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def _boot_id() -> bytes | None:
    try:
        with open(_BOOT_ID_PATH, "rb") as f:
            b = f.read().strip()
    except OSError:
        return None
    return b or None


def write_abort_marker(path: str) -> None:
    """Create the `abort` file (RocketMQ only tests that it exists) holding the
    kernel's boot id, durably: an abnormal restart under the same boot id knows the
    page cache outlived the broker (it was killed; the machine did not go down)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        boot = _boot_id()
        if boot is not None:
            os.write(fd, boot + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def page_cache_outlived(path: str) -> bool:
    """True when the `abort` file at path names the running kernel's boot: everything
    the dead broker wrote (mapped or pwritten) is in the files as it wrote it, flushed
    or not. False when it names another boot, nothing (an older broker, a Java one)
    or cannot be read: then only what was flushed can be trusted."""
    boot = _boot_id()
    if boot is None:
        return False
    try:
        with open(path, "rb") as f:
            return f.read(256).strip() == boot
    except OSError:
        return False


class RecoverableStore(Protocol):
    """What recovery and truncation use of the store (MessageStore is one)."""

    config: MessageStoreConfig
    commitlog: CommitLog
    consume_queue_table: dict[str, dict[int, ConsumeQueue]]
    checkpoint: StoreCheckpoint | None
    index_service: IndexService | None
    reput: ReputMessageService
    running_flags: RunningFlags
    last_exit_ok: bool
    page_cache_intact: bool
    shutdown_flag: bool

    @property
    def loaded(self) -> bool: ...

    def iter_consume_queues(self) -> Iterable[ConsumeQueue]: ...

    def dispatch_batch(self, reqs: list[DispatchRequest]) -> int: ...

    def truncate_dirty_logic_files(self, phy_offset: int) -> None: ...

    def destroy_logics(self) -> None: ...

    def start_flush_services(self) -> None: ...

    async def stop_flush_services(self) -> None: ...


class StoreRecovery:
    """Recovery at load, truncation at failover, for one store."""

    def __init__(self, store: RecoverableStore) -> None:
        self._st = store
        # records the last recovery handed to dispatch (tests, the log line)
        self.redispatched = 0

    def recover(self) -> None:
        """Make the ConsumeQueues and the index agree with the CommitLog (spec 4.6).

        After a clean shutdown, or an abnormal exit that left the page cache alive
        (page_cache_outlived), the queues and index files hold everything the broker
        dispatched, so the CommitLog is checked and re-dispatched only from where both
        of them stop (CommitLog.recover_from); otherwise, or if the CommitLog does not
        agree, the RocketMQ way: the last three files after a clean shutdown, from the
        checkpoint's file on after a crash. The phases are timed in the closing log
        line."""
        t0 = time.perf_counter()
        max_phy_cq = -1
        for cq in self._st.iter_consume_queues():
            cq.recover()
            max_phy_cq = max(max_phy_cq, cq.max_physic_offset)
        t_cq = time.perf_counter()
        cfg = self._st.config
        cl = self._st.commitlog
        self.redispatched = 0
        if not cl.mfq.mapped_files:
            if max_phy_cq >= 0:
                log.warning("the CommitLog has no files; deleting the consume queues")
            self._st.destroy_logics()
            return
        found: int | None = None
        if self._st.last_exit_ok or self._st.page_cache_intact:
            # Everything the queues and the index hold was written (and, after a clean
            # shutdown, flushed) before the broker went: check only what follows.
            start, anchor = self._dispatched_position()
            found = cl.recover_from(start, anchor, cfg.checkCRCOnRecover, self._dispatch_recovery)
            if found is None:
                log.warning(
                    "CommitLog offset %d, where the consume queues and the index stop, is not the end of "
                    "a valid record; recovering the RocketMQ way instead",
                    start,
                )
        if found is not None:
            process = found
        elif self._st.last_exit_ok:
            process = cl.recover_normally(cfg.checkCRCOnRecover)
        else:
            assert self._st.checkpoint is not None
            if cfg.messageIndexEnable and cfg.messageIndexSafe:
                min_ts = self._st.checkpoint.min_timestamp_index()
            else:
                min_ts = self._st.checkpoint.min_timestamp()
            # Re-dispatch from where the index needs it too (where load() cut it back,
            # or where its last file stops: a recovery killed after that cut left no
            # other trace): it is then complete, and nothing is rebuilt afterwards.
            idx = self._st.index_service
            rebuild_from = idx.rebuild_from_phy_offset if idx is not None else None
            not_after = rebuild_from
            if idx is not None and idx.index_files:
                end = idx.index_files[-1].end_phy_offset
                not_after = end if not_after is None else min(not_after, end)
            process = cl.recover_abnormally(cfg.checkCRCOnRecover, min_ts, self._dispatch_recovery, not_after)
            if idx is not None and rebuild_from is not None and cl.recovery_start <= rebuild_from:
                idx.rebuild_from_phy_offset = None
        t_cl = time.perf_counter()
        if max_phy_cq > process:
            log.warning("consume queues reach %d, beyond the CommitLog end %d; truncating them", max_phy_cq, process)
            self._st.truncate_dirty_logic_files(process)
        self._truncate_index_beyond(process)
        t_idx = time.perf_counter()
        self.recover_topic_queue_table()
        log.info(
            "store recovered (%s) in %.0f ms: consume queues %.0f ms, CommitLog scan %.0f ms "
            "(%d records checked, %d re-dispatched), index %.0f ms; CommitLog ends at %d",
            "normal" if self._st.last_exit_ok else "abnormal",
            (time.perf_counter() - t0) * 1000,
            (t_cq - t0) * 1000,
            (t_cl - t_cq) * 1000,
            cl.recovery_records,
            self.redispatched,
            (t_idx - t_cl) * 1000,
            process,
        )

    def _dispatched_position(self) -> tuple[int, int]:
        """Where the dead broker's dispatch stood, as its files show it: the end of
        the newest record any ConsumeQueue holds (dispatch runs in CommitLog order),
        or of the newest indexed record if the index is behind. Returns (that
        offset, the offset of the record it ends; -1 for the start of the CommitLog)."""
        cl = self._st.commitlog
        start, anchor = cl.min_offset, -1
        for cq in self._st.iter_consume_queues():
            if cq.max_physic_offset > start:
                n = cq.get_max_offset_in_queue()
                unit = cq.read_unit(n - 1) if n > cq.get_min_offset_in_queue() else None
                # (a unit not ending at max_physic_offset leaves anchor -1: no shortcut)
                ok = unit is not None and unit[0] + unit[1] == cq.max_physic_offset
                start, anchor = cq.max_physic_offset, unit[0] if unit is not None and ok else -2
        idx = self._st.index_service
        if idx is not None and self._st.config.messageIndexEnable:
            files = idx.index_files
            last = files[-1] if files else None
            if last is None or (last.entry_count == 0 and last.end_timestamp == 0):
                return cl.min_offset, -1
            phy = last.end_phy_offset
            if last.is_write_full():
                # full, the next file not yet made: that record's later keys may be
                # missing (the index skips only offsets below endPhyOffset)
                if phy < start:
                    start, anchor = phy, -3
            else:
                size = cl.get_record_size_at(phy)
                if size > 0 and phy + size < start:
                    start, anchor = phy + size, phy
                elif size <= 0 and phy < start:
                    start, anchor = phy, -3
        return start, anchor

    def _dispatch_recovery(self, reqs: list[DispatchRequest]) -> None:
        self.redispatched += len(reqs)
        self._st.dispatch_batch(reqs)

    def _truncate_index_beyond(self, offset: int) -> None:
        """Drop index files that reach past offset and rebuild the index from the
        earliest dropped entry (index files deleted as too new at an abnormal load
        count too: re-dispatch from the checkpoint may start after their entries)."""
        if self._st.index_service is None:
            return
        candidates = [self._st.index_service.truncate_beyond(offset), self._st.index_service.rebuild_from_phy_offset]
        present = [c for c in candidates if c is not None]
        if not present:
            return
        rebuild_from = min(present)
        # Files the abnormal re-dispatch built since load() hold entries past
        # rebuild_from; kept, they make the rebuild skip everything below their end.
        again = self._st.index_service.truncate_beyond(rebuild_from)
        if again is not None:
            rebuild_from = min(rebuild_from, again)
        self._st.index_service.rebuild_from_phy_offset = None
        log.info("rebuilding the index from CommitLog offset %d to %d", rebuild_from, offset)
        self._st.reput.replay(
            max(rebuild_from, self._st.commitlog.min_offset), offset, self._st.index_service.build_index_only
        )

    def recover_topic_queue_table(self) -> None:
        table: dict[tuple[str, int], int] = {}
        min_phy = self._st.commitlog.min_offset
        for cq in self._st.iter_consume_queues():
            table[(cq.topic, cq.queue_id)] = cq.get_max_offset_in_queue()
            cq.correct_min_offset(min_phy)
        self._st.commitlog.topic_queue_table = table

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
        if not self._st.loaded:
            raise StoreError("truncate_to needs a loaded store (call load() first)")
        running = not self._st.shutdown_flag
        if running and self._st.config.brokerRole != BrokerRole.SLAVE:
            raise StoreError(
                f"truncate_to refuses to cut a writable store "
                f"({self._st.config.brokerRole.value}): make it a SLAVE first"
            )
        cl = self._st.commitlog
        try:
            cl.commit()
        except OSError as e:
            raise StoreError(f"cannot commit the CommitLog before truncating: {e}") from e
        dispatched_to = -1
        if running:
            # dispatch every complete record (a slave's tail may end mid-record:
            # wait_caught_up would wait for the rest); it is idle afterwards
            await self._st.reput.dispatch_all()
            dispatched_to = self._st.reput.reput_from_offset
        end = cl.max_offset
        problem = cl.record_boundary_error(offset, dispatched_to)
        if problem is not None:
            raise StoreError(f"cannot truncate the CommitLog at offset {offset}: {problem}")
        if offset == end:
            return 0
        log.warning("truncating the store at CommitLog offset %d (end %d, %d bytes)", offset, end, end - offset)
        if running:
            await self._st.stop_flush_services()
        try:
            plan = self._truncate_bookkeeping(offset)
            checkpoint = self._st.checkpoint
            assert checkpoint is not None

            def disk_work() -> None:
                plan.run()
                checkpoint.sync()

            try:
                await asyncio.to_thread(disk_work)
            except OSError as e:
                self._st.running_flags.set(RunningFlags.NOT_WRITEABLE)
                raise StoreError(f"truncating the store files at {offset} failed: {e}; the store refuses writes") from e
            finally:
                plan.finish()
        finally:
            if running:
                self._st.start_flush_services()
        log.warning("store truncated at CommitLog offset %d: %d bytes dropped", offset, end - offset)
        return end - offset

    async def drop_incomplete_tail(self) -> int:
        """Cut a started SLAVE's CommitLog back to the end of its last complete record
        (replicated blocks need not end on one): what a slave must do before it takes
        writes as master (RocketMQ's truncateInvalidMsg). Returns the bytes dropped;
        0 for a store not started (recovery at load already dropped such a tail)."""
        if self._st.shutdown_flag:
            return 0
        await self._st.reput.dispatch_all()
        return await self.truncate_to(self._st.reput.reput_from_offset)

    async def prepare_to_lead(self) -> int:
        """A SLAVE about to take writes (its HA client stopped): cut an incomplete
        replicated tail, dispatch every record, rebuild the queue-offset table from the
        ConsumeQueues (a slave's dispatch does not keep it). Returns the CommitLog bytes
        dropped. Nothing may append meanwhile; set_role then opens the store."""
        if self._st.config.brokerRole != BrokerRole.SLAVE:
            raise StoreError("prepare_to_lead needs a SLAVE store (switch_to_slave first)")
        self._st.reput.limit = None  # all of this log is the group's now
        dropped = await self.drop_incomplete_tail()
        await self._st.reput.dispatch_all()
        self.recover_topic_queue_table()
        return dropped

    def _truncate_bookkeeping(self, offset: int) -> TruncatePlan:
        """Everything of truncate_to that is not file I/O, in one synchronous step."""
        plan = self._st.commitlog.truncate_plan(offset)
        for topic, qs in list(self._st.consume_queue_table.items()):
            for qid, cq in list(qs.items()):
                p, emptied = cq.truncate_plan(offset)
                plan.add(p)
                if emptied:
                    del qs[qid]
            if not qs:
                del self._st.consume_queue_table[topic]
        cl = self._st.commitlog
        if self._st.index_service is not None:
            plan.add(self._st.index_service.truncate_plan(offset, lambda phy: cl.pick_store_timestamp(phy, 0)))
        self.recover_topic_queue_table()
        if self._st.reput.reput_from_offset > offset:
            self._st.reput.reset_offset(offset)
        ts = self._last_dispatched_store_timestamp()
        ck = self._st.checkpoint
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
        for cq in self._st.iter_consume_queues():
            n = cq.get_max_offset_in_queue()
            if n > cq.get_min_offset_in_queue():
                u = cq.read_unit(n - 1)
                if u is not None and u[0] > best_off and u[1] != 0x7FFFFFFF:
                    best_off, best_size = u[0], u[1]
        if best_off < 0:
            return 0
        return max(self._st.commitlog.pick_store_timestamp(best_off, best_size), 0)
