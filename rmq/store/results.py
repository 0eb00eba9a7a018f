"""Statuses and results the store answers with (the broker maps them to response codes)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from rmq.protocol.message import create_message_id


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    # fewer replicas in sync than minInSyncReplicas: refused, nothing stored (RocketMQ 5)
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def stored(self) -> bool:
        """The message is in the CommitLog (possibly not yet flushed or replicated)."""
        return self in _STORED


_STORED = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
    }
)


@dataclass(slots=True)
class PutMessageResult:
    status: PutMessageStatus
    wrote_offset: int = 0
    wrote_bytes: int = 0
    queue_offset: int = 0
    store_timestamp: int = 0
    msg_num: int = 1
    store_host: bytes = b""
    # Physical offsets of every record of a batch (empty for a single message).
    batch_offsets: Sequence[int] = ()
    remark: str = ""

    @property
    def msg_id(self) -> str:
        """Offset msgId(s) (spec 3.5); comma-joined for a batch. Computed on demand."""
        if not self.store_host:
            return ""
        if self.batch_offsets:
            h = self.store_host
            return ",".join(create_message_id(h, o) for o in self.batch_offsets)
        return create_message_id(self.store_host, self.wrote_offset)

    @property
    def end_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    # Records exactly as stored, in queue order; the pull body is their concatenation.
    buffers: list[bytes] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False
    max_phy_offset_pulling: int = 0

    @property
    def message_count(self) -> int:
        return len(self.buffers)

    def body(self) -> bytes:
        return b"".join(self.buffers)


@dataclass(slots=True)
class QueryMessageResult:
    buffers: list[bytes] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0

    @property
    def buffer_total_size(self) -> int:
        return sum(len(b) for b in self.buffers)

    def body(self) -> bytes:
        return b"".join(self.buffers)


class RunningFlags:
    """The store's state bits (spec 4.7); writes are refused while any write-blocking bit is set."""

    NOT_READABLE = 1
    NOT_WRITEABLE = 2
    WRITE_LOGICS_QUEUE_ERROR = 4
    WRITE_INDEX_FILE_ERROR = 8
    DISK_FULL = 16
    FENCED = 32
    LOGIC_DISK_FULL = 64

    _WRITE_BLOCKING = NOT_WRITEABLE | WRITE_LOGICS_QUEUE_ERROR | WRITE_INDEX_FILE_ERROR | DISK_FULL

    def __init__(self) -> None:
        self.flags = 0

    def is_writeable(self) -> bool:
        return not (self.flags & self._WRITE_BLOCKING)

    def is_readable(self) -> bool:
        return not (self.flags & self.NOT_READABLE)

    def set(self, bit: int) -> None:
        self.flags |= bit

    def clear(self, bit: int) -> None:
        self.flags &= ~bit

    def is_set(self, bit: int) -> bool:
        return bool(self.flags & bit)
