"""The store's read path: pulls (get_messages), lookups by offset and key, queue offsets
and times (RocketMQ's DefaultMessageStore read methods). Reads see committed bytes only."""

from __future__ import annotations

import os

from rmq.protocol.errors import ProtocolError
from rmq.protocol.message import MessageConst, MessageExt, decode_record
from rmq.store.commitlog import CommitLog
from rmq.store.config import BrokerRole, MessageStoreConfig
from rmq.store.consume_queue import ConsumeQueue
from rmq.store.cq_codec import CQ_STORE_UNIT_SIZE, CQ_UNIT
from rmq.store.index import IndexService
from rmq.store.mapped_file import MappedFile
from rmq.store.message_filter import MessageFilter
from rmq.store.results import GetMessageResult, GetMessageStatus, QueryMessageResult

__all__ = ["MessageReader"]

_CQ_UNIT = CQ_STORE_UNIT_SIZE


def _total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


class MessageReader:
    """Reads over the CommitLog and the ConsumeQueues of one store."""

    def __init__(
        self, config: MessageStoreConfig, commitlog: CommitLog, consume_queue_table: dict[str, dict[int, ConsumeQueue]]
    ) -> None:
        self.config = config
        self.commitlog = commitlog
        self.consume_queue_table = consume_queue_table
        self.index_service: IndexService | None = None  # set by the store's load()
        # pulls beyond this far behind the CommitLog end read from disk (slave hint)
        self._memory_budget = _total_physical_memory() * config.accessMessageInMemoryMaxRatio // 100

    def get_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        qs = self.consume_queue_table.get(topic)
        return qs.get(queue_id) if qs is not None else None

    def get_commitlog_data(self, offset: int, max_bytes: int) -> bytes | None:
        """Committed CommitLog bytes from offset, at most max_bytes, never past the end
        of offset's file (RocketMQ's getCommitLogData for the HA writer). None when
        nothing is readable there (no data yet, or the file was deleted)."""
        got = self.commitlog.get_data(offset, max_bytes)
        if got is None:
            return None
        mf, pos, end = got
        if mf.file_from_offset + pos != offset:
            return None  # offset is not in the returned file (deleted / not written)
        return mf.mm[pos:end]

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        return cq.get_max_offset_in_queue() if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        return cq.get_min_offset_in_queue() if cq is not None else -1

    def _next_offset_correction(self, old: int, new: int) -> int:
        if self.config.brokerRole != BrokerRole.SLAVE or self.config.offsetCheckInSlave:
            return new
        return old

    def _is_the_batch_full(
        self, size_py: int, max_msg_nums: int, buffer_total: int, message_total: int, in_disk: bool
    ) -> bool:
        if buffer_total == 0 or message_total == 0:
            return False
        if max_msg_nums <= message_total:
            return True
        cfg = self.config
        if in_disk:
            return (
                buffer_total + size_py > cfg.maxTransferBytesOnMessageInDisk
                or message_total > cfg.maxTransferCountOnMessageInDisk - 1
            )
        return (
            buffer_total + size_py > cfg.maxTransferBytesOnMessageInMemory
            or message_total > cfg.maxTransferCountOnMessageInMemory - 1
        )

    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult:
        """Records of one queue from offset, exactly as stored (spec 2.5 statuses)."""
        max_offset_py = self.commitlog.max_offset
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, self._next_offset_correction(offset, 0))
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
                offset, min_offset if min_offset == 0 else max_offset
            )
        else:
            got = cq.get_index_buffer(offset)
            if got is None:
                result.status = GetMessageStatus.OFFSET_FOUND_NULL
                result.next_begin_offset = self._next_offset_correction(offset, cq.roll_next_file(offset))
                return result
            self._collect(result, cq, got, offset, max_msg_nums, message_filter, max_offset_py)
        return result

    def _collect(
        self,
        result: GetMessageResult,
        cq: ConsumeQueue,
        got: tuple[MappedFile, int, int],
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None,
        max_offset_py: int,
    ) -> None:
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

    def get_offset_in_queue_by_time(
        self, topic: str, queue_id: int, timestamp: int, boundary: str | None = None
    ) -> int:
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
