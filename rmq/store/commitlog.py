"""CommitLog: the one append-only log every message goes through (spec 3, 4.6).

The put path runs on the event-loop thread without awaiting, which makes it the
"put lock" of RocketMQ: nothing else can interleave between assigning a queue offset
and appending the record.

Write buffer (RocketMQ's TransientStorePool + CommitRealTimeService, spec 6.4): records
are encoded into an in-memory buffer and *committed* to the file with pwrite, one call
for everything appended since the last commit. A commit runs

* at the end of the loop iteration that appended (a `loop.call_soon` scheduled by the
  first append after a commit),
* before every flush plan (the flush services call `commit()`), before a roll to the
  next file, before the buffer would overflow, and on shutdown/truncation.

Readers (dispatch, pulls, HA, recovery) see committed bytes only: `max_offset` and every
read check against a file's committed position (RocketMQ's getReadPosition with a
write buffer). Bytes are the same as writing each record in place; a commit writes the
first record's TOTALSIZE last (`write_size_last`), so a process killed in the middle of
a commit leaves nothing recovery would accept.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import struct
from collections.abc import Callable, Sequence
from typing import Any
from zlib import crc32

from rmq.protocol.message import (
    BLANK_MAGIC_CODE,
    BLANK_RECORD,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PROPERTIES_MAX,
    RECORD_FIXED_LENGTH,
    RECORD_HEAD_STRUCTS,
    SCHEDULE_TOPIC,
    MessageConst,
    MessageExtBatch,
    MessageExtBrokerInner,
    SysFlag,
    encode_record,
    host_sysflag,
    properties_to_string,
    record_format,
    record_length,
    store_timestamp_position,
)
from rmq.protocol.record import (
    DispatchRequest,
    check_message_and_return_size,
    diagnose_record,
    dispatch_properties,
    property_value,
    tags_code_of,
)
from rmq.store.commit_round import CommitRound
from rmq.store.errors import StoreError
from rmq.store.mapped_file import (
    AllocateMappedFileService,
    MappedFile,
    MappedFileQueue,
    TruncatePlan,
    pwrite_all,
    write_size_last,
)
from rmq.store.results import PutMessageResult, PutMessageStatus

log = logging.getLogger("rmq.store.commitlog")

# records a recovery scan hands to its dispatcher at once
RECOVERY_BATCH = 1024

_I = struct.Struct(">i")
_H = struct.Struct(">h")
_Q = struct.Struct(">q")
_HEAD_STRUCTS = RECORD_HEAD_STRUCTS
_BLANK = BLANK_RECORD
_PUT_OK = PutMessageStatus.PUT_OK
# PHYSICALOFFSET: TOTALSIZE 4, MAGIC 4, BODYCRC 4, QUEUEID 4, FLAG 4, QUEUEOFFSET 8
_PHYS_AT = 28
_PHYS_END = _PHYS_AT + 8
_DELAY = MessageConst.DELAY_TIME_LEVEL
_ZEROS = bytes(1 << 20)


class _NoSpace(Exception):
    """A record cannot be placed: the next file could not be created, or it is too big."""

    def __init__(self, status: PutMessageStatus, remark: str) -> None:
        super().__init__(remark)
        self.status = status
        self.remark = remark


class _RecordInParts:
    """pack_into with a whole-record Struct's arguments, for a shape without a cached
    Struct: the head (TOTALSIZE .. BODY LENGTH) with its Struct, then the rest."""

    __slots__ = ("head",)

    def __init__(self, head: struct.Struct) -> None:
        self.head = head

    def pack_into(self, buf: bytearray, w: int, *fields: Any) -> None:
        head = self.head
        head.pack_into(buf, w, *fields[:-5])
        body, tlen, topic_b, plen, props_b = fields[-5:]
        p = w + head.size
        buf[p : p + len(body)] = body
        p += len(body)
        buf[p] = tlen
        buf[p + 1 : p + 1 + tlen] = topic_b
        p += 1 + tlen
        _H.pack_into(buf, p, plen)
        buf[p + 2 : p + 2 + plen] = props_b


class CommitLog:
    # Smallest write buffer. It must also hold the largest record (+ a BLANK), and it
    # bounds one commit, i.e. how far a torn commit can reach (see _dirty_end).
    WRITE_BUFFER_MIN = 1 << 20
    # Ready DispatchRequests kept for dispatch at most (more: it parses instead).
    DISPATCH_READY_MAX = 1 << 17

    def __init__(
        self,
        store_path: str,
        file_size: int,
        max_message_size: int,
        delay_levels_ms: Sequence[int],
        allocator: AllocateMappedFileService | None = None,
    ) -> None:
        self.mfq = MappedFileQueue(store_path, file_size, allocator)
        self.file_size = file_size
        self.max_message_size = max_message_size
        self.delay_levels_ms = list(delay_levels_ms)
        # RocketMQ keys this "topic-queueId"; a tuple is the same key without formatting.
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        # Write buffer: bytes appended to _wfile after its committed position. _wfile
        # is None or the last file (anything that adds or drops files resets it).
        self._wcap = max(self.WRITE_BUFFER_MIN, max_message_size + 8)
        self._wbuf = bytearray(self._wcap)
        self._wview = memoryview(self._wbuf)
        self._wlen = 0
        self._wfile: MappedFile | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._commit_scheduled = False
        self._commit_fut: CommitRound | None = None
        # (file, position, length) a failed commit may have written into: zeroed by
        # repair() before the next append
        self._damaged: tuple[MappedFile, int, int] | None = None
        self.on_commit: Callable[[], None] | None = None
        self.on_commit_error: Callable[[OSError], None] | None = None
        self.commits = 0
        # The DispatchRequest of every record appended here, in offset order: the put
        # path knows every field, so dispatch need not parse the record back (it does
        # for what is not here: replicated data, records before a restart).
        self.dispatch_ready: collections.deque[DispatchRequest] = collections.deque()
        self._tag_cache: dict[str, int] = {}
        self._topics: dict[str, bytes] = {}
        self._structs: dict[tuple[int, int, int, int, int], struct.Struct] = {}
        # records the last recovery scan checked (tests, the recovery log line)
        self.recovery_records = 0
        # where recover_abnormally started its scan
        self.recovery_start = 0

    # --- load / offsets ---
    def load(self) -> None:
        self.mfq.load()

    @property
    def min_offset(self) -> int:
        mf = self.mfq.get_first_mapped_file()
        return mf.file_from_offset if mf is not None else 0

    @property
    def max_offset(self) -> int:
        """Readable end: everything committed (appended bytes still in the write
        buffer are not readable yet)."""
        return self.mfq.get_max_offset()

    @property
    def wrote_offset(self) -> int:
        """End of everything appended, committed or not."""
        return self.mfq.get_max_wrote_offset()

    # --- write buffer / commit ---
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """From now on commits are deferred to the end of the loop iteration.
        Without a loop (load, recovery, tests) every append is committed at once."""
        self._loop = loop

    def stop(self) -> None:
        """Commit what is buffered and go back to committing at once."""
        self._loop = None
        self._commit_scheduled = False
        self.commit()

    def drop_uncommitted(self) -> None:
        """Forget the write buffer, as a killed process would (crash tests)."""
        mf = self._wfile
        if mf is not None:
            mf.wrote_position = mf.committed_position
        self._wlen = 0
        self.dispatch_ready.clear()

    @property
    def uncommitted_bytes(self) -> int:
        return self._wlen

    def _appended(self) -> None:
        """After an append: make sure a commit follows."""
        if not self._commit_scheduled:
            loop = self._loop
            if loop is None:
                self.commit()
                return
            self._commit_scheduled = True
            loop.call_soon(self._commit_soon)

    def _commit_soon(self) -> None:
        self._commit_scheduled = False
        try:
            self.commit()
        except OSError:
            pass  # logged, the records rolled back and their waiters answered by commit()

    def commit(self) -> None:
        """pwrite everything appended since the last commit (loop thread).

        A failed pwrite leaves nothing behind that a reader, a later commit or a restart
        could take for a record: the records of the failed commit are rolled back (write
        buffer, positions, queue offsets, ready dispatch requests), their commit waiter
        is answered UNKNOWN_ERROR, and the bytes the write may have reached are zeroed
        by ``repair`` before anything is appended again. Raises the OSError."""
        n = self._wlen
        if n:
            mf = self._wfile
            assert mf is not None
            pos = mf.committed_position
            try:
                write_size_last(mf.fd, self._wview[:n], pos, 4)
            except OSError as e:
                self._roll_back(mf, pos, n, e)
                raise
            mf.committed_position = pos + n
            if mf.wrote_position >= mf.file_size:
                # The file ends with BLANK; the padding after it is zeros already
                # (preallocated). Readers, HA above all, see the whole file, as after
                # RocketMQ's commit of the blank's padding.
                mf.committed_position = mf.file_size
            self._wlen = 0
            self.commits += 1
        fut = self._commit_fut
        if fut is not None:
            self._commit_fut = None
            fut.set_result(PutMessageStatus.PUT_OK)
        if n and self.on_commit is not None:
            self.on_commit()

    def _roll_back(self, mf: MappedFile, pos: int, n: int, e: OSError) -> None:
        """Forget the n buffered bytes a failed commit could not write at pos of mf."""
        log.error(
            "committing %d bytes to CommitLog file %s at %d failed: %s; those records are rolled back and refused",
            n,
            mf.file_name,
            pos,
            e,
        )
        restore: dict[tuple[str, int], int] = {}
        at = 0
        levels = self.delay_levels_ms
        while at < n:
            size, req = check_message_and_return_size(self._wview[:n], at, False, levels)
            if req is None:
                break  # the BLANK that ends a file: takes no queue offset
            if req.sys_flag & 0xC in (0, SysFlag.TRANSACTION_COMMIT_TYPE):
                restore.setdefault((req.topic, req.queue_id), req.consume_queue_offset)
            at += size
        self.topic_queue_table.update(restore)
        end = mf.file_from_offset + pos
        ready = self.dispatch_ready
        while ready and ready[-1].commit_log_offset >= end:
            ready.pop()
        mf.wrote_position = pos
        self._wlen = 0
        self._wfile = None  # the next put goes through _file_for, which repairs first
        self._damaged = (mf, pos, n)
        fut = self._commit_fut
        if fut is not None:
            self._commit_fut = None
            fut.set_result(PutMessageStatus.UNKNOWN_ERROR)
        if self.on_commit_error is not None:
            self.on_commit_error(e)

    @property
    def damaged(self) -> bool:
        """A failed commit may have left bytes in the file that repair has not zeroed."""
        return self._damaged is not None

    def repair(self) -> None:
        """Zero the range a failed commit may have reached (a real write: it is also the
        probe that the file takes writes again). Raises OSError while it does not."""
        d = self._damaged
        if d is None:
            return
        mf, pos, n = d
        pwrite_all(mf.fd, memoryview(_ZEROS)[:n] if n <= len(_ZEROS) else bytes(n), pos)
        self._damaged = None
        log.warning("CommitLog file %s takes writes again (%d bytes at %d zeroed)", mf.file_name, n, pos)

    def pending_commit(self) -> CommitRound | None:
        """The round the next commit completes (PUT_OK, or UNKNOWN_ERROR when its write
        fails and its records are rolled back); None when nothing waits in the buffer.
        One round per commit, shared by every put it takes; its callbacks run inside
        the commit (see CommitRound)."""
        fut = self._commit_fut
        if fut is None:
            if self._wlen == 0:
                return None
            if self._loop is None:
                self.commit()
                return None
            fut = self._commit_fut = CommitRound()
        return fut

    def commit_waiter(self, end_offset: int) -> CommitRound | None:
        """pending_commit() if [.., end_offset) is not readable yet, else None."""
        if self.max_offset >= end_offset:
            return None
        return self.pending_commit()

    @property
    def flushed_where(self) -> int:
        return self.mfq.flushed_where

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    # --- put path ---
    def _file_for(self, size: int) -> MappedFile:
        """The file the next `size` bytes go to, with room in the write buffer;
        writes BLANK and rolls when they do not fit."""
        if self._damaged is not None:
            self.repair()  # OSError: the put is refused (UNKNOWN_ERROR)
        mfq = self.mfq
        files = mfq.mapped_files
        mf = files[-1] if files else None
        try:
            if mf is None or mf.is_full():
                mf = mfq.get_last_mapped_file_for_write(0)
            if size + 8 > mf.remaining():
                self._bind(mf)
                self._append_blank(mf)
                # the old file is complete: its bytes go in before the next file's
                self.commit()
                mf = mfq.get_last_mapped_file_for_write(0)
        except OSError as e:
            log.error("cannot create the next CommitLog file after offset %d: %s", self.wrote_offset, e)
            raise _NoSpace(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, f"create mapped file failed: {e}") from None
        if size + 8 > mf.remaining():
            raise _NoSpace(
                PutMessageStatus.MESSAGE_ILLEGAL,
                f"a {size}-byte record does not fit a {self.file_size}-byte CommitLog file",
            )
        self._bind(mf)
        if self._wlen + size > self._wcap:
            self.commit()
        return mf

    def _file_or_failure(self, size: int) -> MappedFile | PutMessageResult:
        """_file_for, with its failures as the put's result."""
        try:
            return self._file_for(size)
        except _NoSpace as e:
            return PutMessageResult(e.status, remark=e.remark)
        except OSError as e:
            return PutMessageResult(PutMessageStatus.UNKNOWN_ERROR, remark=f"commit failed: {e}")

    def _bind(self, mf: MappedFile) -> None:
        """Point the write buffer at mf (it holds bytes of one file only)."""
        if mf is not self._wfile:
            self.commit()  # normally a no-op: a roll commits the old file first
            self._wfile = mf

    def _append_blank(self, mf: MappedFile) -> None:
        pos = mf.wrote_position
        remaining = mf.file_size - pos
        _BLANK.pack_into(self._wbuf, self._wlen, remaining, BLANK_MAGIC_CODE)
        self._wlen += 8
        mf.wrote_position = mf.file_size
        self._appended()

    def _append_record(self, mf: MappedFile, rec: bytes) -> None:
        n = len(rec)
        w = self._wlen
        self._wbuf[w : w + n] = rec
        self._wlen = w + n
        mf.wrote_position += n
        self._appended()

    def _topic_bytes(self, topic: str) -> bytes | None:
        """UTF-8 of a topic (cached), or None if a version-1 record cannot hold it."""
        b = self._topics.get(topic)
        if b is None:
            b = topic.encode("utf-8")
            if len(b) > 127:
                return None
            if len(self._topics) >= 4096:
                self._topics.clear()
            self._topics[topic] = b
        return b

    def _record_struct(
        self, bh: int, sh: int, body_len: int, topic_len: int, props_len: int
    ) -> struct.Struct | _RecordInParts:
        """One Struct packing a whole record (head, body, topic, properties), cached per
        shape; once the cache is full, a packer of the same call that packs in parts."""
        key = (bh, sh, body_len, topic_len, props_len)
        st = self._structs.get(key)
        if st is not None:
            return st
        if len(self._structs) < 1024:
            st = self._structs[key] = struct.Struct(record_format(bh, sh, body_len, topic_len, props_len))
            return st
        return _RecordInParts(_HEAD_STRUCTS[bh, sh])

    def put_message(self, msg: MessageExtBrokerInner, now_ms: int) -> PutMessageResult:
        """Append one message (no waiting: flush/replication are the caller's)."""
        tran = msg.sys_flag & 0xC
        if _DELAY in msg.properties and (tran == 0 or tran == SysFlag.TRANSACTION_COMMIT_TYPE):
            level = msg.delay_time_level
            if level > 0:
                self._rewrite_to_schedule(msg, level)
        topic = msg.topic
        topic_b = self._topics.get(topic)
        if topic_b is None:
            topic_b = self._topic_bytes(topic)
        if topic_b is None:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark="topic is longer than 127 bytes")
        props_s = msg.properties_string
        if props_s is None:
            props_s = msg.properties_string = properties_to_string(msg.properties)
        props_b = props_s.encode("utf-8")
        plen = len(props_b)
        if plen > PROPERTIES_MAX:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL, remark=f"properties are {plen} bytes; at most {PROPERTIES_MAX}"
            )
        born = msg.born_host
        store = msg.store_host
        bh = len(born)
        sh = len(store)
        sys_flag = msg.sys_flag & ~0x30
        if bh != 8:
            if bh != 20:
                return PutMessageResult(
                    PutMessageStatus.MESSAGE_ILLEGAL, remark=f"born host must be 8 or 20 bytes, not {bh}"
                )
            sys_flag |= SysFlag.BORNHOST_V6
        if sh != 8:
            if sh != 20:
                return PutMessageResult(
                    PutMessageStatus.MESSAGE_ILLEGAL, remark=f"store host must be 8 or 20 bytes, not {sh}"
                )
            sys_flag |= SysFlag.STOREHOSTADDRESS_V6
        body = msg.body
        blen = len(body)
        tlen = len(topic_b)
        total = RECORD_FIXED_LENGTH + bh + sh + blen + tlen + plen
        if total > self.max_message_size:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                remark=f"message of {total} bytes exceeds maxMessageSize {self.max_message_size}",
            )
        # fast path: room in the current file and in the write buffer (_wfile is None
        # or the last file)
        mf = self._wfile
        w = self._wlen
        if mf is None or mf.wrote_position + total + 8 > mf.file_size or w + total > self._wcap:
            got = self._file_or_failure(total)
            if isinstance(got, PutMessageResult):
                return got
            mf = got
            w = self._wlen
        queue_id = msg.queue_id
        key = (topic, queue_id)
        table = self.topic_queue_table
        # prepared/rollback transaction messages get queue offset 0 and take none
        takes_offset = tran == 0 or tran == SysFlag.TRANSACTION_COMMIT_TYPE
        rec_qoff = table.get(key, 0) if takes_offset else 0
        phys = mf.file_from_offset + mf.wrote_position
        st: struct.Struct | _RecordInParts | None = self._structs.get((bh, sh, blen, tlen, plen))
        if st is None:
            st = self._record_struct(bh, sh, blen, tlen, plen)
        st.pack_into(
            self._wbuf,
            w,
            total,
            MESSAGE_MAGIC_CODE,
            crc32(body) & 0x7FFFFFFF,
            queue_id,
            msg.flag,
            rec_qoff,
            phys,
            sys_flag,
            msg.born_timestamp,
            born,
            now_ms,
            store,
            msg.reconsume_times,
            msg.prepared_transaction_offset,
            blen,
            body,
            tlen,
            topic_b,
            plen,
            props_b,
        )
        # (pack_into raised nothing: the record is there; now take its queue offset)
        if takes_offset:
            table[key] = rec_qoff + 1
        self._wlen = w + total
        mf.wrote_position += total
        if not self._commit_scheduled:
            self._appended()
        mf.store_timestamp = now_ms
        self.mfq.store_timestamp = now_ms
        # what dispatch would parse back from the record (check_message_and_return_size)
        tags, keys, uniq = dispatch_properties(props_s)
        if tags is not None:
            tags_code = self._tag_cache.get(tags)
            if tags_code is None or topic == SCHEDULE_TOPIC:
                tags_code = self._tags_code(topic, tags, props_s, now_ms)
        elif topic == SCHEDULE_TOPIC:
            tags_code = self._tags_code(topic, tags, props_s, now_ms)
        else:
            tags_code = 0
        ready = self.dispatch_ready
        if len(ready) >= self.DISPATCH_READY_MAX:
            ready.clear()  # dispatch is not running or far behind: it parses instead
        ready.append(
            DispatchRequest(
                topic,
                queue_id,
                phys,
                total,
                tags_code,
                now_ms,
                rec_qoff,
                keys,
                uniq,
                sys_flag,
                msg.prepared_transaction_offset,
            )
        )
        return PutMessageResult(_PUT_OK, phys, total, rec_qoff, now_ms, 1, store)

    def _tags_code(self, topic: str, tags: str | None, props_s: str, now_ms: int) -> int:
        return tags_code_of(
            topic,
            tags,
            property_value(props_s, "DELAY") if topic == SCHEDULE_TOPIC else None,
            now_ms,
            self.delay_levels_ms,
            self._tag_cache,
        )

    def _ready(self, req: DispatchRequest) -> None:
        """Hand dispatch the request of a record just appended (it would parse the same
        from the file: check_message_and_return_size)."""
        ready = self.dispatch_ready
        if len(ready) >= self.DISPATCH_READY_MAX:
            # dispatch is not running or far behind: it parses the records instead
            ready.clear()
        ready.append(req)

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
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark="batch messages cannot be transactional")
        delay = batch.properties.get(MessageConst.DELAY_TIME_LEVEL)
        if delay and delay.strip() not in ("", "0"):
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark="batch messages cannot be delayed")
        if not batch.items:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark="empty batch")
        topic_b = batch.topic.encode("utf-8")
        born, store = batch.born_host, batch.store_host
        sys_flag = (batch.sys_flag & ~0x30) | host_sysflag(born, store)
        batch_props = properties_to_string(batch.properties) if batch.properties else ""
        parts: list[tuple[int, bytes, str, bytes, int]] = []
        total_all = 0
        for item in batch.items:
            props_s = item.properties
            if batch_props:
                if props_s and not props_s.endswith("\x02"):
                    props_s += "\x02"
                props_s += batch_props
            props_b = props_s.encode("utf-8")
            if len(props_b) > PROPERTIES_MAX:
                return PutMessageResult(
                    PutMessageStatus.MESSAGE_ILLEGAL,
                    remark=f"properties are {len(props_b)} bytes; at most {PROPERTIES_MAX}",
                )
            size = record_length(sys_flag, len(item.body), len(topic_b), len(props_b))
            if size > self.max_message_size:
                return PutMessageResult(
                    PutMessageStatus.MESSAGE_ILLEGAL, remark=f"message of {size} bytes exceeds maxMessageSize"
                )
            total_all += size
            parts.append((item.flag, item.body, props_s, props_b, size))
        if total_all > self.max_message_size:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                remark=f"batch of {total_all} bytes exceeds maxMessageSize {self.max_message_size}",
            )
        mf = self._file_or_failure(total_all)
        if isinstance(mf, PutMessageResult):
            return mf
        key = (batch.topic, batch.queue_id)
        qoff0 = self.topic_queue_table.get(key, 0)
        phys0 = mf.file_from_offset + mf.wrote_position
        recs: list[bytes] = []
        offsets: list[int] = []
        phys = phys0
        for i, (flag, body, _, props_b, size) in enumerate(parts):
            recs.append(
                encode_record(
                    topic=topic_b,
                    body=body,
                    properties=props_b,
                    queue_id=batch.queue_id,
                    flag=flag,
                    queue_offset=qoff0 + i,
                    physical_offset=phys,
                    sys_flag=sys_flag,
                    born_timestamp=batch.born_timestamp,
                    born_host=born,
                    store_timestamp=now_ms,
                    store_host=store,
                )
            )
            offsets.append(phys)
            phys += size
        # one append: a batch is never split between two commits
        self._append_record(mf, b"".join(recs))
        mf.store_timestamp = now_ms
        self.mfq.store_timestamp = now_ms
        self.topic_queue_table[key] = qoff0 + len(parts)
        topic = batch.topic
        levels = self.delay_levels_ms
        cache = self._tag_cache
        for i, (_, _, props_s, _, size) in enumerate(parts):
            self._ready(
                DispatchRequest(
                    topic,
                    batch.queue_id,
                    offsets[i],
                    size,
                    tags_code_of(
                        topic,
                        property_value(props_s, "TAGS"),
                        property_value(props_s, "DELAY") if topic == SCHEDULE_TOPIC else None,
                        now_ms,
                        levels,
                        cache,
                    ),
                    now_ms,
                    qoff0 + i,
                    property_value(props_s, "KEYS"),
                    property_value(props_s, "UNIQ_KEY"),
                    sys_flag,
                    0,
                )
            )
        return PutMessageResult(PutMessageStatus.PUT_OK, phys0, total_all, qoff0, now_ms, len(parts), store, offsets)

    # --- replication (slave side) ---
    def replica_file(self, offset: int) -> MappedFile | None:
        """The file replicated bytes at offset go into, or None when it does not exist
        yet (create it with make_replica_file off the loop, then add_replica_file).
        offset must be the CommitLog end, or anything when the CommitLog is empty."""
        files = self.mfq.mapped_files
        if not files:
            return None
        last = files[-1]
        if last.is_full():
            return None
        return last

    def make_replica_file(self, offset: int) -> MappedFile:
        """Blocking (a worker thread): the file that holds offset, not yet in the queue."""
        return self.mfq.make_file(offset - offset % self.file_size)

    def add_replica_file(self, mf: MappedFile, offset: int) -> None:
        """Put a file made by make_replica_file into the queue (loop thread); in an empty
        CommitLog its positions start at offset (a slave that starts mid-stream)."""
        mfq = self.mfq
        if not mfq.mapped_files:
            pos = offset - mf.file_from_offset
            mf.set_positions(pos)
            mfq.reset_to(offset)
        mfq.add_file(mf)
        self._wfile = None

    def append_replica(self, offset: int, blocks: Sequence[memoryview | bytes]) -> int:
        """Write contiguous replicated blocks at exactly offset, the end of replica_file().

        Straight into the file with one pwritev per 512 blocks (no write buffer: a
        master's blocks need not end on a record boundary, and dispatch parses them).
        Returns the new CommitLog end. Raises StoreError when the bytes do not continue
        the file or overflow it, OSError when the write fails."""
        self.commit()
        mf = self.replica_file(offset)
        if mf is None:
            raise StoreError(f"no CommitLog file for replicated offset {offset}")
        pos = offset - mf.file_from_offset
        n = sum(len(b) for b in blocks)
        if pos != mf.wrote_position or pos != mf.committed_position or pos + n > mf.file_size:
            raise StoreError(
                f"replicated block [{offset}, {offset + n}) does not continue "
                f"{mf.file_name} at {mf.file_from_offset + mf.wrote_position}"
            )
        fd = mf.fd
        done = 0
        for i in range(0, len(blocks), 512):
            part = blocks[i : i + 512]
            want = sum(len(b) for b in part)
            k = os.pwritev(fd, part, pos + done)
            if k != want:
                # short write (signal, nearly full disk): finish it block by block
                joined = b"".join(bytes(b) for b in part)
                pwrite_all(fd, memoryview(joined)[k:], pos + done + k)
            done += want
        mf.wrote_position = mf.committed_position = pos + n
        if n and self.on_commit is not None:
            self.on_commit()
        return mf.file_from_offset + pos + n

    def append_data(self, start_offset: int, data: bytes) -> bool:
        """Blocking convenience for tools and tests: append_replica, creating the file
        in this thread when needed. False when the bytes do not continue the CommitLog."""
        if self.mfq.mapped_files and start_offset != self.max_offset:
            log.error("replicated data at %d does not continue the CommitLog end %d", start_offset, self.max_offset)
            return False
        try:
            if self.replica_file(start_offset) is None:
                self.add_replica_file(self.make_replica_file(start_offset), start_offset)
            self.append_replica(start_offset, [data])
        except (OSError, StoreError) as e:
            log.error("appending replicated bytes at %d failed: %s", start_offset, e)
            return False
        return True

    # --- reads ---
    def get_message(self, offset: int, size: int) -> bytes | None:
        """The size bytes at offset, if they are all written and still on disk."""
        mf = self.mfq.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos < 0 or pos + size > mf.committed_position:
            return None
        return mf.mm[pos : pos + size]

    def get_data(self, offset: int, max_size: int | None = None) -> tuple[MappedFile, int, int] | None:
        """(file, start, end) of readable bytes from offset within its file."""
        mf = self.mfq.find_mapped_file_by_offset(offset, return_first_on_not_found=(offset == 0))
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        end = mf.committed_position
        if pos < 0 or pos >= end:
            return None
        if max_size is not None and end - pos > max_size:
            end = pos + max_size
        return mf, pos, end

    def _committed(self, offset: int, length: int) -> tuple[MappedFile, int] | None:
        """The file holding offset and the position in it, if the length bytes from
        there are all committed (None if the file is gone or they are not)."""
        mf = self.mfq.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + length > mf.committed_position:
            return None
        return mf, pos

    def get_record_size_at(self, offset: int) -> int:
        at = self._committed(offset, 8)
        if at is None:
            return -1
        mf, pos = at
        size: int
        size, magic = struct.unpack_from(">ii", mf.mm, pos)
        if magic != MESSAGE_MAGIC_CODE:
            return -1
        return size

    def pick_store_timestamp(self, offset: int, size: int) -> int:
        """Store time of the record at offset (-1 if it is gone)."""
        at = self._committed(offset, 48)
        if at is None:
            return -1
        mf, pos = at
        sys_flag = _I.unpack_from(mf.mm, pos + 36)[0]
        ts: int = _Q.unpack_from(mf.mm, pos + store_timestamp_position(sys_flag))[0]
        return ts

    # --- recovery ---
    def recover_normally(self, check_crc: bool) -> int:
        """Scan the last three files; returns the offset where valid data ends (spec 4.6)."""
        files = self.mfq.mapped_files
        if not files:
            self.mfq.flushed_where = self.mfq.committed_where = 0
            return 0
        index = max(len(files) - 3, 0)
        return self._scan_and_truncate(index, check_crc, None)

    def recover_abnormally(
        self,
        check_crc: bool,
        min_timestamp: int,
        dispatch: Callable[[list[DispatchRequest]], object],
        not_after: int | None = None,
    ) -> int:
        """Start at the newest file that is provably older than the checkpoint (and
        holds not_after or an earlier offset, if given) and re-dispatch every valid
        record from there (dispatch is idempotent). recovery_start says where that was."""
        files = self.mfq.mapped_files
        if not files:
            self.mfq.flushed_where = self.mfq.committed_where = 0
            return 0
        index = 0
        for i in range(len(files) - 1, -1, -1):
            if self._file_matched_recover(files[i], min_timestamp):
                index = i
                break
        if not_after is not None:
            index = min(index, max((not_after - files[0].file_from_offset) // self.file_size, 0))
        self.recovery_start = files[index].file_from_offset
        log.info(
            "abnormal recovery re-dispatches from CommitLog file %s (checkpoint min time %d)",
            files[index].file_name,
            min_timestamp,
        )
        return self._scan_and_truncate(index, check_crc, dispatch)

    def recover_from(
        self, offset: int, anchor: int, check_crc: bool, dispatch: Callable[[list[DispatchRequest]], object]
    ) -> int | None:
        """Recovery when every byte before offset is known to be in the files as it
        was written (a clean shutdown flushed it; after a kill, not a power loss, the
        page cache kept it): only [offset, end) is checked and re-dispatched.

        offset is where dispatch had got to: the end of the record at anchor, or the
        start of the CommitLog (anchor -1). Returns the recovered end, or None when
        the record at anchor is not a valid one ending at offset (another anchor, a
        damaged or foreign file): the caller then recovers the RocketMQ way."""
        files = self.mfq.mapped_files
        if not files:
            self.mfq.flushed_where = self.mfq.committed_where = 0
            return 0
        first = files[0].file_from_offset
        if anchor == -1:
            if offset != first:
                return None
        else:
            mf = self.mfq.find_mapped_file_by_offset(anchor) if anchor >= first else None
            if mf is None:
                return None
            size, req = check_message_and_return_size(
                mf.mm, anchor - mf.file_from_offset, check_crc, self.delay_levels_ms
            )
            if req is None or req.commit_log_offset != anchor or anchor + size != offset:
                return None
        index = (offset - first) // self.file_size
        if index >= len(files):
            return None
        mf = files[index]
        log.info(
            "recovery checks the CommitLog from offset %d (file %s), where dispatch had got to", offset, mf.file_name
        )
        return self._scan_and_truncate(index, check_crc, dispatch, offset - mf.file_from_offset)

    @staticmethod
    def _file_matched_recover(mf: MappedFile, min_timestamp: int) -> bool:
        mm = mf.mm
        if _I.unpack_from(mm, 4)[0] != MESSAGE_MAGIC_CODE:
            return False
        sys_flag = _I.unpack_from(mm, 36)[0]
        ts: int = _Q.unpack_from(mm, store_timestamp_position(sys_flag))[0]
        return ts != 0 and ts <= min_timestamp

    def _scan_and_truncate(
        self, index: int, check_crc: bool, dispatch: Callable[[list[DispatchRequest]], object] | None, pos: int = 0
    ) -> int:
        """Check records from pos of file index on; the first invalid one ends the
        log (everything after it is truncated). dispatch gets the valid records in
        batches of up to RECOVERY_BATCH, in order."""
        files = self.mfq.mapped_files
        mf = files[index]
        levels = self.delay_levels_ms
        batch: list[DispatchRequest] = []
        scanned = 0
        tags: dict[str, int] = {}
        while True:
            mm = mf.mm
            while True:
                size, req = check_message_and_return_size(mm, pos, check_crc, levels, tags)
                if req is None:
                    break
                scanned += 1
                pos += size
                if dispatch is not None:
                    batch.append(req)
                    if len(batch) >= RECOVERY_BATCH:
                        dispatch(batch)
                        batch = []
            if size == 0:  # BLANK: next file
                index += 1
                if index >= len(files):
                    log.info("recovery reached the end of the last CommitLog file %s", mf.file_name)
                    pos = mf.file_size
                    break
                mf = files[index]
                pos = 0
                continue
            reason = diagnose_record(mm, pos, check_crc)
            end = mf.file_from_offset + pos
            if reason.startswith("end of data"):
                log.info("CommitLog recovered up to offset %d (file %s)", end, mf.file_name)
            else:
                log.warning(
                    "CommitLog: invalid record at offset %d (file %s): %s; truncating everything from there",
                    end,
                    mf.file_name,
                    reason,
                )
            break
        if batch and dispatch is not None:
            dispatch(batch)
        self.recovery_records = scanned
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
        # A torn commit is at most one write buffer (its first TOTALSIZE is 0, so the
        # walk above stops right at its start); a torn direct append at most one record.
        return min(size_limit, pos + max(self._wcap, self.max_message_size) + 8)

    def truncate(self, offset: int) -> None:
        """Drop everything at and after offset (HA divergence, tests)."""
        self.commit()
        self.dispatch_ready.clear()
        self.mfq.truncate_dirty_files(offset, self._dirty_end)
        self._wfile = None

    def record_boundary_error(self, offset: int, dispatched_to: int = -1) -> str | None:
        """Why offset is not where a record starts (None if it is): the check before
        truncating at it (RocketMQ's isOffsetAligned, stricter).

        A boundary is the end of the log, a file start (records never span files), a
        BLANK that pads exactly to the end of its file, or a record that passes the
        recovery check (CRC included) and whose own PHYSICALOFFSET field names offset.
        A record cut short (a slave's tail ends mid-record) counts when its header is
        all there and names offset. dispatched_to is where dispatch stopped: it parsed
        every record before it, so it is the end of one.
        """
        end = self.max_offset
        if offset > end:
            return f"it is past the end of the CommitLog ({end})"
        if offset == end or offset == dispatched_to:
            return None
        if offset < self.min_offset:
            return (
                f"it is before the first CommitLog file ({self.min_offset}): those "
                "records were deleted, so the history before them cannot be checked"
            )
        mf = self.mfq.find_mapped_file_by_offset(offset)
        if mf is None:
            return f"no CommitLog file holds it (files start at {self.min_offset})"
        pos = offset - mf.file_from_offset
        if pos == 0:
            return None
        avail = mf.committed_position - pos
        mm = mf.mm
        if avail < 8:
            return f"only {avail} bytes of a record header are there"
        size, magic = struct.unpack_from(">ii", mm, pos)
        if magic == BLANK_MAGIC_CODE:
            if pos + size == mf.file_size:
                return None
            return f"a BLANK record of {size} bytes that does not end its file"
        if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2) or size <= 0:
            return f"no record starts there (size {size}, magic {magic & 0xFFFFFFFF:#010x})"
        if avail < size:
            if avail < _PHYS_END:
                return f"a record cut short after {avail} bytes, before its offset field"
            phys = _Q.unpack_from(mm, pos + _PHYS_AT)[0]
            if phys != offset:
                return f"the bytes there name offset {phys}"
            return None
        rec_size, req = check_message_and_return_size(mm, pos, True, self.delay_levels_ms)
        if req is None:
            return f"the record there is invalid: {diagnose_record(mm, pos, True)}"
        if req.commit_log_offset != offset:
            return f"the record there says it is at offset {req.commit_log_offset}"
        return None

    def truncate_plan(self, offset: int) -> TruncatePlan:
        """Drop everything at and after offset, bookkeeping only (see TruncatePlan);
        the caller checked record_boundary_error and runs the plan. Commits the write
        buffer first (OSError if that fails)."""
        self.commit()
        self.dispatch_ready.clear()
        self._wfile = None
        old_end = self.max_offset
        plan = self.mfq.detach_from(offset)
        log.warning(
            "CommitLog truncated at offset %d: %d bytes dropped (end was %d), %d file(s) deleted",
            offset,
            old_end - offset,
            old_end,
            len(plan.doomed),
        )
        return plan

    # --- lifetime ---
    def shutdown(self) -> None:
        self.commit()
        self.mfq.shutdown()
