"""Retention: CleanCommitLogService, CleanConsumeQueueService and the disk watermarks.

Every cleanResourceInterval ms (RocketMQ's cleanFilesPeriodically) the store

1. measures how full the CommitLog's filesystem (and the consume queues') is. Above
   diskSpaceWarningLevelRatio the store marks itself DISK_FULL and refuses writes;
   at or below diskSpaceCleanForciblyRatio the mark is cleared (RocketMQ's hysteresis).
   RocketMQ 4.9.8 reads these two from the system properties
   ``rocketmq.broker.diskSpaceWarningLevelRatio`` / ``...CleanForciblyRatio``; here they
   are MessageStoreConfig keys (5.x names, same defaults 90 / 85).
2. deletes CommitLog files, oldest first, never the last one, at most deleteFileBatchMax
   per run, each only if it was last modified more than fileReservedTime hours ago
   (decimals accepted: our extension), and only a contiguous prefix. A run deletes when
   the hour is one of deleteWhen ("04", "04;16"), or at once when the disk is above
   diskMaxUsedSpaceRatio; above diskSpaceCleanForciblyRatio (with cleanFileForciblyEnable)
   files go whether expired or not.
3. then, if the CommitLog minimum moved, drops ConsumeQueue files whose last unit points
   below it, corrects every queue's min offset, and drops index files that end below it.

Bookkeeping (which files leave which list) happens on the event loop; unlink and munmap
run in a worker thread.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from rmq.runtime.service import ServiceLoop
from rmq.store.commitlog import CommitLog
from rmq.store.config import ConfigError, MessageStoreConfig, parse_delete_when
from rmq.store.consume_queue import ConsumeQueue
from rmq.store.index import IndexService
from rmq.store.mapped_file import MappedFile
from rmq.store.results import RunningFlags

log = logging.getLogger("rmq.store.cleanup")


class CleanableStore(Protocol):
    """What the cleaners use of the MessageStore (the facade builds them: no import back)."""

    config: MessageStoreConfig
    running_flags: RunningFlags
    commitlog: CommitLog
    index_service: IndexService | None

    def space_returned(self) -> None: ...

    def iter_consume_queues(self) -> Iterable[ConsumeQueue]: ...


NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def disk_partition_used_ratio(path: str) -> float:
    """Used fraction (0..1) of the filesystem holding path, or -1 when it cannot be
    measured (UtilAll.getDiskPartitionSpaceUsedPercent: total vs free blocks, the root
    reserve counted as free). Blocking (statvfs)."""
    p = path
    while p and not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    try:
        st = os.statvfs(p or ".")
    except OSError:
        return -1.0
    if st.f_blocks <= 0:
        return -1.0
    return (st.f_blocks - st.f_bfree) / st.f_blocks


def is_time_to_delete(delete_when: str, hour: int | None = None) -> bool:
    """UtilAll.isItTimeToDo: the local hour is one of deleteWhen's."""
    if hour is None:
        hour = time.localtime().tm_hour
    try:
        return hour in parse_delete_when(delete_when)
    except ConfigError as e:
        log.error("%s; no time-based deletion", e)
        return False


def _mtimes(paths: Sequence[str]) -> list[float]:
    out = []
    for p in paths:
        try:
            out.append(os.path.getmtime(p))
        except OSError:
            out.append(0.0)  # gone already: as old as it gets
    return out


def _destroy_blocking(files: Sequence[MappedFile], free: Sequence[bool], interval_s: float) -> None:
    for i, (mf, unmap) in enumerate(zip(files, free, strict=True)):
        if i and interval_s > 0:
            time.sleep(interval_s)  # spread the I/O, as deleteCommitLogFilesInterval does
        if unmap:
            mf.destroy()
        else:
            mf.unlink()  # a holder's release() unmaps it


async def destroy_files(files: Sequence[MappedFile], interval_ms: int = 0) -> None:
    """Delete files already taken out of their queues: detached here (loop thread),
    unlinked and unmapped in a worker thread."""
    if not files:
        return
    free = [mf.detach() for mf in files]
    await asyncio.get_running_loop().run_in_executor(None, _destroy_blocking, list(files), free, interval_ms / 1000)


def _human_ms(ms: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms))


class CleanCommitLogService:
    """Expired (or, under disk pressure, any old) CommitLog files, and the disk marks."""

    def __init__(self, store: CleanableStore, disk_ratio: Callable[[str], float] = disk_partition_used_ratio) -> None:
        self.store = store
        self.disk_ratio = disk_ratio
        self.clean_immediately = False
        self.commitlog_ratio = -1.0
        self.logics_ratio = -1.0
        self.manual_delete_times = 0
        self.deleted_files = 0

    def execute_delete_files_manually(self) -> None:
        """TRIGGER_DELETE_FILES: the next 20 runs delete expired files whatever the hour."""
        self.manual_delete_times = 20
        log.info("executeDeleteFilesManually was invoked")

    async def measure(self) -> bool:
        """Measure the disks, set or clear DISK_FULL / LOGIC_DISK_FULL; True when space
        alone is a reason to delete (isSpaceToDelete)."""
        store = self.store
        cfg = store.config
        loop = asyncio.get_running_loop()
        cl_ratio, lg_ratio = await loop.run_in_executor(
            None, lambda: (self.disk_ratio(cfg.commitlog_dir), self.disk_ratio(cfg.consume_queue_dir))
        )
        self.commitlog_ratio, self.logics_ratio = cl_ratio, lg_ratio
        max_used = cfg.diskMaxUsedSpaceRatio / 100.0
        self.clean_immediately = False
        flags = store.running_flags
        space_full = False
        for ratio, bit, what in (
            (cl_ratio, RunningFlags.DISK_FULL, "physic"),
            (lg_ratio, RunningFlags.LOGIC_DISK_FULL, "logics"),
        ):
            if ratio > cfg.diskSpaceWarningLevelRatio / 100.0:
                if not flags.is_set(bit):
                    log.error(
                        "%s disk maybe full soon: %.1f%% used (diskSpaceWarningLevelRatio %d%%), so mark disk full%s",
                        what,
                        ratio * 100,
                        cfg.diskSpaceWarningLevelRatio,
                        "; writes are refused" if bit == RunningFlags.DISK_FULL else "",
                    )
                flags.set(bit)
                self.clean_immediately = True
            elif ratio > cfg.diskSpaceCleanForciblyRatio / 100.0:
                self.clean_immediately = True
            elif flags.is_set(bit):
                flags.clear(bit)
                log.info(
                    "%s disk space OK: %.1f%% used, so mark disk ok%s",
                    what,
                    ratio * 100,
                    "; writes are accepted again" if bit == RunningFlags.DISK_FULL else "",
                )
            if ratio < 0 or ratio > max_used:
                if ratio < 0:
                    log.warning(
                        "cannot measure the %s disk of %s; reclaiming space",
                        what,
                        cfg.commitlog_dir if bit == RunningFlags.DISK_FULL else cfg.consume_queue_dir,
                    )
                space_full = True
        if 0 <= cl_ratio <= cfg.diskSpaceWarningLevelRatio / 100.0:
            store.space_returned()
        return space_full

    async def run(self) -> int:
        """One run; returns how many CommitLog files it deleted."""
        cfg = self.store.config
        time_up = is_time_to_delete(cfg.deleteWhen)
        space_full = await self.measure()
        manual = self.manual_delete_times > 0
        if not (time_up or space_full or manual):
            return 0
        if manual:
            self.manual_delete_times -= 1
        clean_at_once = cfg.cleanFileForciblyEnable and self.clean_immediately
        used = self.commitlog_ratio * 100
        reason = (
            f"forced: disk {used:.1f}% used > diskSpaceCleanForciblyRatio {cfg.diskSpaceCleanForciblyRatio}%"
            if clean_at_once
            else f"disk {used:.1f}% used > diskMaxUsedSpaceRatio {cfg.diskMaxUsedSpaceRatio}%"
            if space_full
            else f"deleteWhen {cfg.deleteWhen}"
            if time_up
            else "manual"
        )
        n = await self._delete_expired(cfg.fileReservedTime * 3600.0, clean_at_once, reason)
        self.deleted_files += n
        return n

    async def _delete_expired(self, reserved_s: float, clean_at_once: bool, reason: str) -> int:
        store = self.store
        cfg = store.config
        mfq = store.commitlog.mfq
        candidates = mfq.mapped_files[:-1][: max(cfg.deleteFileBatchMax, 0)]
        if not candidates:
            return 0
        loop = asyncio.get_running_loop()
        mtimes = await loop.run_in_executor(None, _mtimes, [mf.path for mf in candidates])
        now = time.time()
        n = 0
        for mt in mtimes:
            if not (clean_at_once or now >= mt + reserved_s):
                break  # never a hole in the middle of the log
            n += 1
        # The queue may have changed while the files were stat'ed: only an unchanged head
        # goes, and never the last file.
        files = mfq.mapped_files
        k = 0
        while k < n and k < len(files) - 1 and files[k] is candidates[k]:
            k += 1
        if k == 0:
            return 0
        doomed = mfq.detach_first(k)
        log.info(
            "deleting %d CommitLog file(s) (%s; fileReservedTime %s h; at most %d a run)",
            k,
            reason,
            cfg.fileReservedTime,
            cfg.deleteFileBatchMax,
        )
        for mf, mt in zip(doomed, mtimes, strict=False):  # (mtimes may be longer)
            log.info(
                "deleted CommitLog file %s: offsets [%d, %d), last modified %s (%.1f s ago)",
                mf.file_name,
                mf.file_from_offset,
                mf.file_from_offset + mf.file_size,
                _human_ms(mt),
                now - mt,
            )
        await destroy_files(doomed, cfg.deleteCommitLogFilesInterval)
        log.info("CommitLog min offset is now %d", store.commitlog.min_offset)
        return k


class CleanConsumeQueueService:
    """ConsumeQueue and index files wholly below the CommitLog minimum."""

    def __init__(self, store: CleanableStore) -> None:
        self.store = store
        self.last_physical_min_offset = 0

    async def run(self) -> int:
        """One run; returns how many ConsumeQueue and index files it deleted."""
        store = self.store
        min_offset = store.commitlog.min_offset
        if min_offset <= self.last_physical_min_offset:
            return 0
        self.last_physical_min_offset = min_offset
        doomed: list[MappedFile] = []
        for cq in list(store.iter_consume_queues()):
            files = cq.detach_expired_files(min_offset)
            for mf in files:
                log.info(
                    "deleting consume queue file %s-%d/%s: its last unit points below "
                    "CommitLog min %d (queue min offset now %d)",
                    cq.topic,
                    cq.queue_id,
                    mf.file_name,
                    min_offset,
                    cq.get_min_offset_in_queue(),
                )
            doomed += files
        if store.index_service is not None:
            doomed += [f.mapped_file for f in store.index_service.detach_expired_files(min_offset)]
        await destroy_files(doomed, 0)
        return len(doomed)


class StoreCleaner(ServiceLoop):
    """The periodic loop running both services (cleanFilesPeriodically)."""

    def __init__(self, store: CleanableStore, disk_ratio: Callable[[str], float] = disk_partition_used_ratio) -> None:
        super().__init__("CleanFilesPeriodically", log)
        self.store = store
        self.commitlog_service = CleanCommitLogService(store, disk_ratio)
        self.consume_queue_service = CleanConsumeQueueService(store)
        self._run_lock: asyncio.Lock | None = None

    async def clean_once(self) -> int:
        """Both services once (tests, TRIGGER_DELETE_FILES); files deleted in all."""
        if self._run_lock is None:
            self._run_lock = asyncio.Lock()
        async with self._run_lock:
            n = await self.commitlog_service.run()
            return n + await self.consume_queue_service.run()

    def interval(self) -> float:
        # read every time: updateBrokerConfig may change it
        return max(self.store.config.cleanResourceInterval, 10) / 1000

    async def on_start(self) -> None:
        await self.commitlog_service.measure()  # runtime info and the disk mark at once

    async def run_once(self) -> None:
        try:
            await self.clean_once()
        except OSError as e:
            if e.errno not in NO_SPACE_ERRNOS:
                raise  # logged with its traceback by the loop
            log.error("cleaning files failed: %s", e)

    async def stop(self, cancel: bool = True) -> None:
        """Interrupts a run (file deletion is not worth waiting for at shutdown)."""
        await super().stop(cancel)
