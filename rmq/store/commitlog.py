"""CommitLog: the one append-only log every message goes through (spec 3, 4.6).

The put path runs on the event-loop thread without awaiting, which makes it the
"put lock" of RocketMQ: nothing else can interleave between assigning a queue offset
and appending the record.
"""
from __future__ import annotations

import logging
import struct
from typing import Callable, Sequence

from rmq.protocol.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    SCHEDULE_TOPIC,
    MessageConst,
    MessageExtBatch,
    MessageExtBrokerInner,
    SysFlag,
    body_crc,
    encode_record,
    host_sysflag,
    properties_to_string,
    record_length,
    store_timestamp_position,
)
from rmq.store.dispatch_request import (
    DispatchRequest,
    check_message_and_return_size,
    diagnose_record,
)
from rmq.store.mapped_file import AllocateMappedFileService, MappedFile, MappedFileQueue
from rmq.store.results import PutMessageResult, PutMessageStatus

log = logging.getLogger("rmq.store.commitlog")

_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_BLANK_MAGIC = _I.pack(BLANK_MAGIC_CODE)
_PREPARED_OR_ROLLBACK = (SysFlag.TRANSACTION_PREPARED_TYPE, SysFlag.TRANSACTION_ROLLBACK_TYPE)


class _NoSpace(Exception):
    """A record cannot be placed: the next file could not be created, or it is too big."""

    def __init__(self, status: PutMessageStatus, remark: str) -> None:
        super().__init__(remark)
        self.status = status
        self.remark = remark


class CommitLog:
    def __init__(self, store_path: str, file_size: int, max_message_size: int,
                 delay_levels_ms: Sequence[int],
                 allocator: AllocateMappedFileService | None = None) -> None:
        self.mfq = MappedFileQueue(store_path, file_size, allocator)
        self.file_size = file_size
        self.max_message_size = max_message_size
        self.delay_levels_ms = list(delay_levels_ms)
        # RocketMQ keys this "topic-queueId"; a tuple is the same key without formatting.
        self.topic_queue_table: dict[tuple[str, int], int] = {}

    # --- load / offsets ---
    def load(self) -> None:
        self.mfq.load()

    @property
    def min_offset(self) -> int:
        mf = self.mfq.get_first_mapped_file()
        return mf.file_from_offset if mf is not None else 0

    @property
    def max_offset(self) -> int:
        return self.mfq.get_max_offset()

    @property
    def flushed_where(self) -> int:
        return self.mfq.flushed_where

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    # --- put path ---
    def _file_for(self, size: int) -> MappedFile:
        """The file the next `size` bytes go to; writes BLANK and rolls when they do not fit."""
        mfq = self.mfq
        files = mfq.mapped_files
        mf = files[-1] if files else None
        try:
            if mf is None or mf.is_full():
                mf = mfq.get_last_mapped_file_for_write(0)
            if size + 8 > mf.remaining():
                self._write_blank(mf)
                mf = mfq.get_last_mapped_file_for_write(0)
        except OSError as e:
            log.error("cannot create the next CommitLog file after offset %d: %s",
                      self.max_offset, e)
            raise _NoSpace(PutMessageStatus.CREATE_MAPPED_FILE_FAILED,
                           f"create mapped file failed: {e}") from None
        if size + 8 > mf.remaining():
            raise _NoSpace(PutMessageStatus.MESSAGE_ILLEGAL,
                           f"a {size}-byte record does not fit a {self.file_size}-byte CommitLog file")
        return mf

    @staticmethod
    def _write_blank(mf: MappedFile) -> None:
        pos = mf.wrote_position
        remaining = mf.file_size - pos
        # magic first, size last: a reader never sees a size without its magic
        mf.mm[pos + 4:pos + 8] = _BLANK_MAGIC
        mf.mm[pos:pos + 4] = _I.pack(remaining)
        mf.wrote_position = mf.file_size

    @staticmethod
    def _append_record(mf: MappedFile, rec: bytes) -> None:
        # TOTALSIZE last: a process killed mid-copy leaves 0 there (files are zeroed
        # beyond the write position), so recovery stops before a torn record instead
        # of trusting a record whose tail never arrived.
        pos = mf.wrote_position
        end = pos + len(rec)
        mv = memoryview(rec)
        mm = mf.mm
        mm[pos + 4:end] = mv[4:]
        mm[pos:pos + 4] = mv[:4]
        mf.wrote_position = end

    def put_message(self, msg: MessageExtBrokerInner, now_ms: int) -> PutMessageResult:
        """Append one message (no waiting: flush/replication are the caller's)."""
        tran = msg.sys_flag & 0xC
        if tran == 0 or tran == SysFlag.TRANSACTION_COMMIT_TYPE:
            level = msg.delay_time_level
            if level > 0:
                self._rewrite_to_schedule(msg, level)
        topic = msg.topic
        topic_b = topic.encode("utf-8")
        props_b = msg.properties_bytes()
        if len(props_b) > 32767:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark=f"properties are {len(props_b)} bytes; at most 32767")
        born, store = msg.born_host, msg.store_host
        sys_flag = (msg.sys_flag & ~0x30) | host_sysflag(born, store)
        body = msg.body
        total = record_length(sys_flag, len(body), len(topic_b), len(props_b))
        if total > self.max_message_size:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark=f"message of {total} bytes exceeds maxMessageSize "
                                           f"{self.max_message_size}")
        try:
            mf = self._file_for(total)
        except _NoSpace as e:
            return PutMessageResult(e.status, remark=e.remark)
        key = (topic, msg.queue_id)
        table = self.topic_queue_table
        qoff = table.get(key, 0)
        rec_qoff = 0 if tran in _PREPARED_OR_ROLLBACK else qoff
        phys = mf.file_from_offset + mf.wrote_position
        rec = encode_record(
            topic=topic_b, body=body, properties=props_b, queue_id=msg.queue_id,
            flag=msg.flag, queue_offset=rec_qoff, physical_offset=phys, sys_flag=sys_flag,
            born_timestamp=msg.born_timestamp, born_host=born, store_timestamp=now_ms,
            store_host=store, reconsume_times=msg.reconsume_times,
            prepared_transaction_offset=msg.prepared_transaction_offset,
            crc=body_crc(body))
        self._append_record(mf, rec)
        mf.store_timestamp = now_ms
        self.mfq.store_timestamp = now_ms
        if tran not in _PREPARED_OR_ROLLBACK:
            table[key] = qoff + 1
        return PutMessageResult(PutMessageStatus.PUT_OK, phys, total, rec_qoff, now_ms, 1, store)

    def _rewrite_to_schedule(self, msg: MessageExtBrokerInner, level: int) -> None:
        max_level = len(self.delay_levels_ms)
        if level > max_level:
            level = max_level
            msg.put_property(MessageConst.DELAY_TIME_LEVEL, str(level))
        msg.put_property(MessageConst.REAL_TOPIC, msg.topic)
        msg.put_property(MessageConst.REAL_QUEUE_ID, str(msg.queue_id))
        msg.topic = SCHEDULE_TOPIC
        msg.queue_id = level - 1

    def put_messages(self, batch: MessageExtBatch, now_ms: int) -> PutMessageResult:
        """Append a batch as consecutive records of one queue, all in one file."""
        if batch.sys_flag & 0xC:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark="batch messages cannot be transactional")
        delay = batch.properties.get(MessageConst.DELAY_TIME_LEVEL)
        if delay and delay.strip() not in ("", "0"):
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark="batch messages cannot be delayed")
        if not batch.items:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark="empty batch")
        topic_b = batch.topic.encode("utf-8")
        born, store = batch.born_host, batch.store_host
        sys_flag = (batch.sys_flag & ~0x30) | host_sysflag(born, store)
        batch_props = properties_to_string(batch.properties).encode("utf-8") if batch.properties else b""
        parts: list[tuple[int, bytes, bytes, int]] = []
        total_all = 0
        for item in batch.items:
            props_b = item.properties.encode("utf-8")
            if batch_props:
                if props_b and not props_b.endswith(b"\x02"):
                    props_b += b"\x02"
                props_b += batch_props
            if len(props_b) > 32767:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                        remark=f"properties are {len(props_b)} bytes; at most 32767")
            size = record_length(sys_flag, len(item.body), len(topic_b), len(props_b))
            if size > self.max_message_size:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                        remark=f"message of {size} bytes exceeds maxMessageSize")
            total_all += size
            parts.append((item.flag, item.body, props_b, size))
        if total_all > self.max_message_size:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark=f"batch of {total_all} bytes exceeds maxMessageSize "
                                           f"{self.max_message_size}")
        try:
            mf = self._file_for(total_all)
        except _NoSpace as e:
            return PutMessageResult(e.status, remark=e.remark)
        key = (batch.topic, batch.queue_id)
        qoff0 = self.topic_queue_table.get(key, 0)
        phys0 = mf.file_from_offset + mf.wrote_position
        recs: list[bytes] = []
        offsets: list[int] = []
        phys = phys0
        for i, (flag, body, props_b, size) in enumerate(parts):
            recs.append(encode_record(
                topic=topic_b, body=body, properties=props_b, queue_id=batch.queue_id,
                flag=flag, queue_offset=qoff0 + i, physical_offset=phys, sys_flag=sys_flag,
                born_timestamp=batch.born_timestamp, born_host=born, store_timestamp=now_ms,
                store_host=store))
            offsets.append(phys)
            phys += size
        # one append: the first record's TOTALSIZE lands last, so the batch is all or nothing
        self._append_record(mf, b"".join(recs))
        mf.store_timestamp = now_ms
        self.mfq.store_timestamp = now_ms
        self.topic_queue_table[key] = qoff0 + len(parts)
        return PutMessageResult(PutMessageStatus.PUT_OK, phys0, total_all, qoff0, now_ms,
                                len(parts), store, offsets)

    # --- replication (slave side) ---
    def append_data(self, start_offset: int, data: bytes) -> bool:
        """Write replicated bytes at exactly start_offset (must be the current end)."""
        if start_offset != self.max_offset and self.mfq.mapped_files:
            log.error("replicated data at %d does not continue the CommitLog end %d",
                      start_offset, self.max_offset)
            return False
        try:
            mf = self.mfq.get_last_mapped_file_for_write(start_offset)
        except OSError as e:
            log.error("cannot create CommitLog file for replicated offset %d: %s", start_offset, e)
            return False
        pos = start_offset - mf.file_from_offset
        if pos != mf.wrote_position or pos + len(data) > mf.file_size:
            log.error("replicated block [%d, %d) does not fit file %s at %d",
                      start_offset, start_offset + len(data), mf.file_name, mf.wrote_position)
            return False
        mf.append(data)
        return True

    # --- reads ---
    def get_message(self, offset: int, size: int) -> bytes | None:
        """The size bytes at offset, if they are all written and still on disk."""
        mf = self.mfq.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos < 0 or pos + size > mf.wrote_position:
            return None
        return mf.mm[pos:pos + size]

    def get_data(self, offset: int, max_size: int | None = None) -> tuple[MappedFile, int, int] | None:
        """(file, start, end) of readable bytes from offset within its file."""
        mf = self.mfq.find_mapped_file_by_offset(offset, return_first_on_not_found=(offset == 0))
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        end = mf.wrote_position
        if pos < 0 or pos >= end:
            return None
        if max_size is not None and end - pos > max_size:
            end = pos + max_size
        return mf, pos, end

    def get_record_size_at(self, offset: int) -> int:
        mf = self.mfq.find_mapped_file_by_offset(offset)
        if mf is None:
            return -1
        pos = offset - mf.file_from_offset
        if pos + 8 > mf.wrote_position:
            return -1
        size, magic = struct.unpack_from(">ii", mf.mm, pos)
        if magic != MESSAGE_MAGIC_CODE:
            return -1
        return size

    def pick_store_timestamp(self, offset: int, size: int) -> int:
        """Store time of the record at offset (-1 if it is gone)."""
        mf = self.mfq.find_mapped_file_by_offset(offset)
        if mf is None:
            return -1
        pos = offset - mf.file_from_offset
        if pos + 48 > mf.wrote_position:
            return -1
        sys_flag = _I.unpack_from(mf.mm, pos + 36)[0]
        return _Q.unpack_from(mf.mm, pos + store_timestamp_position(sys_flag))[0]

    # --- recovery ---
    def recover_normally(self, check_crc: bool) -> int:
        """Scan the last three files; returns the offset where valid data ends (spec 4.6)."""
        files = self.mfq.mapped_files
        if not files:
            self.mfq.flushed_where = self.mfq.committed_where = 0
            return 0
        index = max(len(files) - 3, 0)
        return self._scan_and_truncate(index, check_crc, None)

    def recover_abnormally(self, check_crc: bool, min_timestamp: int,
                           dispatch: Callable[[DispatchRequest], None]) -> int:
        """Start at the newest file that is provably older than the checkpoint and
        re-dispatch every valid record from there (dispatch is idempotent)."""
        files = self.mfq.mapped_files
        if not files:
            self.mfq.flushed_where = self.mfq.committed_where = 0
            return 0
        index = 0
        for i in range(len(files) - 1, -1, -1):
            if self._file_matched_recover(files[i], min_timestamp):
                index = i
                break
        log.info("abnormal recovery re-dispatches from CommitLog file %s (checkpoint min time %d)",
                 files[index].file_name, min_timestamp)
        return self._scan_and_truncate(index, check_crc, dispatch)

    @staticmethod
    def _file_matched_recover(mf: MappedFile, min_timestamp: int) -> bool:
        mm = mf.mm
        if _I.unpack_from(mm, 4)[0] != MESSAGE_MAGIC_CODE:
            return False
        sys_flag = _I.unpack_from(mm, 36)[0]
        ts = _Q.unpack_from(mm, store_timestamp_position(sys_flag))[0]
        return ts != 0 and ts <= min_timestamp

    def _scan_and_truncate(self, index: int, check_crc: bool,
                           dispatch: Callable[[DispatchRequest], None] | None) -> int:
        files = self.mfq.mapped_files
        mf = files[index]
        pos = 0
        levels = self.delay_levels_ms
        while True:
            size, req = check_message_and_return_size(mf.mm, pos, check_crc, levels)
            if size > 0 and req is not None:
                if dispatch is not None:
                    dispatch(req)
                pos += size
                continue
            if size == 0:  # BLANK: next file
                index += 1
                if index >= len(files):
                    log.info("recovery reached the end of the last CommitLog file %s", mf.file_name)
                    pos = mf.file_size
                    break
                mf = files[index]
                pos = 0
                continue
            reason = diagnose_record(mf.mm, pos, check_crc)
            end = mf.file_from_offset + pos
            if reason.startswith("end of data"):
                log.info("CommitLog recovered up to offset %d (file %s)", end, mf.file_name)
            else:
                log.warning("CommitLog: invalid record at offset %d (file %s): %s; "
                            "truncating everything from there", end, mf.file_name, reason)
            break
        process_offset = mf.file_from_offset + pos
        self.mfq.flushed_where = process_offset
        self.mfq.committed_where = process_offset
        self.mfq.truncate_dirty_files(process_offset, self._dirty_end)
        return process_offset

    def _dirty_end(self, mf: MappedFile, pos: int) -> int:
        """How far stale bytes can reach past pos: the chain of records that still look
        valid, plus room for one torn record whose TOTALSIZE was never written."""
        mm = mf.mm
        size_limit = mf.file_size
        while pos + 8 <= size_limit:
            size, magic = struct.unpack_from(">ii", mm, pos)
            if magic == BLANK_MAGIC_CODE:
                return size_limit
            if magic != MESSAGE_MAGIC_CODE or size <= 0 or pos + size > size_limit:
                break
            pos += size
        return min(size_limit, pos + self.max_message_size + 8)

    def truncate(self, offset: int) -> None:
        """Drop everything at and after offset (HA divergence, tests)."""
        self.mfq.truncate_dirty_files(offset, self._dirty_end)

    # --- lifetime ---
    def shutdown(self) -> None:
        self.mfq.shutdown()
