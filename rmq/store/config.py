"""MessageStoreConfig: RocketMQ's key names and defaults (spec 6.5).

broker.conf text is read by rmq.common.properties (``parse_properties_text``,
``apply_properties``), re-exported here with its error as ``ConfigError``.

Attribute names keep RocketMQ's camelCase spelling on purpose: they are the keys users
write in broker.conf, and a RocketMQ engineer greps for them.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field

from rmq.common.properties import PropertiesError
from rmq.common.properties import apply_properties as apply_properties
from rmq.common.properties import parse_properties_text as parse_properties_text


class BrokerRole(str, enum.Enum):  # noqa: UP042  (StrEnum would change str() of a member)
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class FlushDiskType(str, enum.Enum):  # noqa: UP042  (StrEnum would change str() of a member)
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_DELAY_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


ConfigError = PropertiesError
"""A configuration value that cannot be accepted; the message names the key."""


def parse_delay_levels(spec: str) -> list[int]:
    """messageDelayLevel ("1s 5s 10m 2h 1d") -> delay in ms per level (level 1 first)."""
    out: list[int] = []
    for tok in spec.split():
        unit = tok[-1:]
        if unit not in _DELAY_UNITS:
            raise ConfigError(f"messageDelayLevel: {tok!r} must end in one of s, m, h, d")
        try:
            n = int(tok[:-1])
        except ValueError:
            raise ConfigError(f"messageDelayLevel: {tok!r} is not <number><unit>") from None
        if n < 0:
            raise ConfigError(f"messageDelayLevel: {tok!r} is negative")
        out.append(n * _DELAY_UNITS[unit])
    if not out:
        raise ConfigError("messageDelayLevel: no levels given")
    return out


def parse_delete_when(spec: str) -> list[int]:
    """deleteWhen ("04", "04;16") -> hours of the day; ConfigError names the key."""
    hours = []
    for part in spec.split(";"):
        p = part.strip()
        if not p:
            continue
        try:
            h = int(p)
        except ValueError:
            raise ConfigError(
                f"deleteWhen: {part!r} is not an hour of the day (00-23); several are separated by ';' as in 04;16"
            ) from None
        if not 0 <= h <= 23:
            raise ConfigError(f"deleteWhen: {h} is not an hour of the day (00-23)")
        hours.append(h)
    return hours


@dataclass
class MessageStoreConfig:
    storePathRootDir: str = field(default_factory=lambda: os.path.join(os.path.expanduser("~"), "store"))
    storePathCommitLog: str = ""  # "" = <storePathRootDir>/commitlog
    mappedFileSizeCommitLog: int = 1024 * 1024 * 1024
    mappedFileSizeConsumeQueue: int = 300000 * 20
    flushIntervalCommitLog: int = 500
    # commitIntervalCommitLog, commitCommitLogLeastPages, commitCommitLogThoroughInterval:
    # accepted, unused -- the write buffer is committed at the end of every loop
    # iteration that appended (and before every flush), not on a timer.
    commitIntervalCommitLog: int = 200
    useReentrantLockWhenPutMessage: bool = True
    flushCommitLogTimed: bool = True
    flushIntervalConsumeQueue: int = 1000
    cleanResourceInterval: int = 10000
    deleteCommitLogFilesInterval: int = 100
    deleteConsumeQueueFilesInterval: int = 100
    destroyMapedFileIntervalForcibly: int = 120000
    redeleteHangedFileInterval: int = 120000
    deleteWhen: str = "04"
    diskMaxUsedSpaceRatio: int = 75
    # Hours; decimals are our extension so tests can expire files in seconds.
    fileReservedTime: float = 72
    putMsgIndexHightWater: int = 600000
    maxMessageSize: int = 1024 * 1024 * 4
    checkCRCOnRecover: bool = True
    flushCommitLogLeastPages: int = 4
    commitCommitLogLeastPages: int = 4
    flushLeastPagesWhenWarmMapedFile: int = 4096
    flushConsumeQueueLeastPages: int = 2
    flushCommitLogThoroughInterval: int = 10000
    commitCommitLogThoroughInterval: int = 200
    flushConsumeQueueThoroughInterval: int = 60000
    maxTransferBytesOnMessageInMemory: int = 256 * 1024
    maxTransferCountOnMessageInMemory: int = 32
    maxTransferBytesOnMessageInDisk: int = 64 * 1024
    maxTransferCountOnMessageInDisk: int = 8
    accessMessageInMemoryMaxRatio: int = 40
    messageIndexEnable: bool = True
    maxHashSlotNum: int = 5000000
    maxIndexNum: int = 5000000 * 4
    maxMsgsNumBatch: int = 64
    messageIndexSafe: bool = False
    haListenPort: int = 10912
    haSendHeartbeatInterval: int = 5000
    haHousekeepingInterval: int = 20000
    haTransferBatchSize: int = 32 * 1024
    haMasterAddress: str = ""
    haSlaveFallbehindMax: int = 256 * 1024 * 1024
    # Ours: an empty slave copies from the master's first file (RocketMQ: the last file).
    haFullSync: bool = True
    brokerRole: BrokerRole = BrokerRole.ASYNC_MASTER
    flushDiskType: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    syncFlushTimeout: int = 5000
    slaveTimeout: int = 3000
    # In-sync replica rules (RocketMQ 5's names; a SYNC_MASTER's puts only, see ha/service.py).
    # inSyncReplicas: copies a put must be on before it is answered, this master counted.
    # 0 = not set: 2 (this master + one slave's ack), rmq's SYNC_MASTER as it has always
    # been (RocketMQ 4's rule; RocketMQ 5's own default, 1, answers without any slave). Set
    # explicitly it behaves as in RocketMQ 5: 1 = no wait for a slave, n = acks of n-1
    # different slaves. Fewer slaves in sync than that: stored, SLAVE_NOT_AVAILABLE.
    inSyncReplicas: int = 0
    # minInSyncReplicas: with fewer replicas in sync than this (this master counted) a put
    # is refused before it is stored (IN_SYNC_REPLICAS_NOT_ENOUGH, answered SYSTEM_ERROR
    # "in-sync replicas not enough"). RocketMQ checks it in controller mode only; rmq on
    # every SYNC_MASTER.
    minInSyncReplicas: int = 1
    # allAckInSyncStateSet: controller mode: a put waits for every member of the in-sync
    # set (inSyncReplicas ignored); only this master in it: answered at once. Ignored by a
    # static SYNC_MASTER (as in RocketMQ).
    allAckInSyncStateSet: bool = False
    # enableAutoInSyncReplicas: wait for max(min(inSyncReplicas, replicas in sync now),
    # minInSyncReplicas) copies: a SYNC_MASTER whose slaves are gone answers SEND_OK
    # with the message on this master only (if minInSyncReplicas allows it).
    enableAutoInSyncReplicas: bool = False
    messageDelayLevel: str = DEFAULT_DELAY_LEVELS
    flushDelayOffsetInterval: int = 10000
    cleanFileForciblyEnable: bool = True
    warmMapedFileEnable: bool = False
    offsetCheckInSlave: bool = False
    duplicationEnable: bool = False
    diskFallRecorded: bool = True
    osPageCacheBusyTimeOutMills: int = 1000
    defaultQueryMaxNum: int = 32
    # Documentation only: the CommitLog always appends into a write buffer and commits
    # it with pwrite (RocketMQ's TransientStorePool + CommitRealTimeService idea, in
    # both flush modes; see rmq/store/commitlog.py), so these keys change nothing.
    transientStorePoolEnable: bool = False
    transientStorePoolSize: int = 5
    fastFailIfNoBufferInStorePool: bool = False
    diskSpaceWarningLevelRatio: int = 90
    diskSpaceCleanForciblyRatio: int = 85
    deleteFileBatchMax: int = 10
    maxTopicLength: int = 127

    # --- derived paths (RocketMQ's StorePathConfigHelper) ---
    @property
    def commitlog_dir(self) -> str:
        return self.storePathCommitLog or os.path.join(self.storePathRootDir, "commitlog")

    @property
    def consume_queue_dir(self) -> str:
        return os.path.join(self.storePathRootDir, "consumequeue")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.storePathRootDir, "index")

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.storePathRootDir, "checkpoint")

    @property
    def abort_path(self) -> str:
        return os.path.join(self.storePathRootDir, "abort")

    @property
    def lock_path(self) -> str:
        return os.path.join(self.storePathRootDir, "lock")

    @property
    def config_dir(self) -> str:
        return os.path.join(self.storePathRootDir, "config")

    @property
    def delay_levels_ms(self) -> list[int]:
        return parse_delay_levels(self.messageDelayLevel)

    @property
    def consume_queue_file_size(self) -> int:
        # RocketMQ rounds the CQ file size up to whole 20-byte units.
        return -(-self.mappedFileSizeConsumeQueue // 20) * 20

    def validate(self) -> None:
        if self.mappedFileSizeCommitLog < 4096:
            raise ConfigError("mappedFileSizeCommitLog must be at least 4096 bytes")
        if self.mappedFileSizeConsumeQueue < 20:
            raise ConfigError("mappedFileSizeConsumeQueue must hold at least one 20-byte unit")
        if self.maxHashSlotNum < 1 or self.maxIndexNum < 2:
            raise ConfigError("maxHashSlotNum must be >= 1 and maxIndexNum >= 2")
        if self.maxMessageSize < 1:
            raise ConfigError("maxMessageSize must be positive")
        parse_delay_levels(self.messageDelayLevel)
        parse_delete_when(self.deleteWhen)
        if self.fileReservedTime < 0:
            raise ConfigError("fileReservedTime: hours must not be negative")
        for key in ("diskMaxUsedSpaceRatio", "diskSpaceWarningLevelRatio", "diskSpaceCleanForciblyRatio"):
            if not 1 <= getattr(self, key) <= 100:
                raise ConfigError(f"{key}: a percentage of the disk, 1 to 100")
        if self.deleteFileBatchMax < 1:
            raise ConfigError("deleteFileBatchMax: must be >= 1")
        if self.cleanResourceInterval < 1:
            raise ConfigError("cleanResourceInterval: must be >= 1 ms")
        if self.inSyncReplicas < 0:
            raise ConfigError(
                f"inSyncReplicas: {self.inSyncReplicas}; copies a SYNC_MASTER's put must be on, "
                "this master counted: >= 1 (0 or unset: 2, this master and one slave)"
            )
        if self.minInSyncReplicas < 1:
            raise ConfigError(f"minInSyncReplicas: {self.minInSyncReplicas}; must be >= 1 (this master counts)")
        if self.minInSyncReplicas > self.effective_in_sync_replicas and not self.allAckInSyncStateSet:
            raise ConfigError(
                f"minInSyncReplicas: {self.minInSyncReplicas} is more than inSyncReplicas "
                f"{self.effective_in_sync_replicas} (the copies a put waits for); raise "
                "inSyncReplicas too, or set allAckInSyncStateSet=true"
            )

    @property
    def effective_in_sync_replicas(self) -> int:
        """inSyncReplicas as a SYNC_MASTER applies it: 0 (unset) is 2."""
        return self.inSyncReplicas or 2
