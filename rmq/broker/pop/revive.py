"""PopReviveService: re-delivers what a POP consumer did not ack in time.

Master only (rmq/broker/roles.py turns it on and off). Each revive queue of
``rmq_sys_REVIVE_LOG_<cluster>`` is read in order from its progress, the consumer offset
of ``CID_RMQ_SYS_REVIVE_GROUP`` (copied to slaves with the other offsets, so a promoted
slave revives from the replicated log). A ck is kept in memory until it is fully acked or
due (popTime + invisibleTime); acks read after it set its bits. A due ck's un-acked
messages are put again as retry copies into ``%RETRY%<group>_<topic>`` queue 0 (body,
flag, sysflag and properties kept, UNIQ_KEY too; reconsume times + 1; 1ST_POP_TIME on the
first retry), or into ``%DLQ%<group>`` once a message was delivered retryMaxTimes + 1
times. A copy counts once the store says it is stored (as a ck does: revive_log.py); a
refused put keeps the ck for a later round (5 s later). Progress is committed only up to the oldest ck still pending, so after a
restart (or failover) the log is read again from there and nothing un-acked is lost; a ck
revived but not yet behind the committed progress may be revived twice (a duplicate,
never a loss).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from rmq.broker.pop.revive_log import PERM_READ_WRITE, RecordPut, TopicCreator, put_durably
from rmq.broker.reput import reput_message
from rmq.broker.seams import ConsumerOffsets, StoreReader
from rmq.broker.subscriptions import SubscriptionGroupConfig
from rmq.common.clock import now_ms
from rmq.common.mixall import DLQ_NUMS_PER_GROUP, RETRY_GROUP_TOPIC_PREFIX, dlq_topic
from rmq.protocol.errors import ProtocolError
from rmq.protocol.message import MessageConst, MessageExt, decode_record, decode_records
from rmq.protocol.pop import (
    ACK_TAG,
    BATCH_ACK_TAG,
    CK_TAG,
    PROPERTY_DLQ_ORIGIN_MESSAGE_ID,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_FIRST_POP_TIME,
    REVIVE_GROUP,
    REVIVE_QUEUE_NUM,
    AckMsg,
    PopCheckPoint,
    pop_retry_topic,
)
from rmq.runtime.service import ServiceLoop
from rmq.store.results import GetMessageStatus, PutMessageStatus

__all__ = ["PopReviveService", "ReviveStore"]

log = logging.getLogger("rmq.broker.pop.revive")

READ_BATCH = 32
RETRY_AFTER_FAILURE = 5.0  # s before the next round after the store refused a copy
READ_BATCHES_PER_ROUND = 64  # a long log is read over several rounds (the loop stays responsive)
REVIVE_INTERVAL = 0.2  # s between rounds (RocketMQ: reviveInterval 1 s; the wheel adds its own delay)
DEFAULT_RETRY_MAX_TIMES = 16


class ReviveStore(StoreReader, RecordPut, Protocol):
    """Reads of the revive log and the popped messages, and puts of their copies."""


class GroupConfigs(Protocol):
    def find(self, group: str) -> SubscriptionGroupConfig | None: ...


@dataclass(eq=False)
class _Pending:
    ck: PopCheckPoint
    log_offset: int  # the ck's offset in its revive queue
    done: set[int] = field(default_factory=set)  # indexes revived already (a partly failed round)


@dataclass(eq=False)
class _ReviveQueue:
    queue_id: int
    read_offset: int
    pending: dict[tuple[str, str, int, int, int, str], _Pending] = field(default_factory=dict)


def original_topic(ck_topic: str, group: str) -> str:
    """The topic a POP retry topic stands for (itself for a normal topic)."""
    for sep in ("_", "+"):
        prefix = f"{RETRY_GROUP_TOPIC_PREFIX}{group}{sep}"
        if ck_topic.startswith(prefix):
            return ck_topic[len(prefix) :]
    return ck_topic


class PopReviveService(ServiceLoop):
    def __init__(
        self,
        topic: str,
        store: ReviveStore,
        topics: TopicCreator,
        offsets: ConsumerOffsets,
        groups: GroupConfigs,
        interval: float = REVIVE_INTERVAL,
    ) -> None:
        super().__init__("pop-revive", log)
        self.topic = topic
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.groups = groups
        self._interval = interval
        self._next_wait = interval
        self._queues: list[_ReviveQueue] = []
        # counters (metrics); a copy's dispatch wakes the pops parked on its retry topic
        self.retried = 0  # retry copies put
        self.dead_lettered = 0  # moved to a DLQ

    def interval(self) -> float:
        wait, self._next_wait = self._next_wait, self._interval
        return wait

    def backlog(self) -> int:
        """Un-acked messages of the cks waiting for their invisible time."""
        return sum(
            sum(1 for i in range(p.ck.num) if not (p.ck.bit_map >> i & 1) and i not in p.done)
            for q in self._queues
            for p in q.pending.values()
        )

    async def on_start(self) -> None:
        # from the committed progress: what a previous run (or the old master) left
        self._queues = []
        for qid in range(REVIVE_QUEUE_NUM):
            off = self.offsets.query_offset(REVIVE_GROUP, self.topic, qid)
            if off < 0:
                off = max(self.store.get_min_offset_in_queue(self.topic, qid), 0)
            self._queues.append(_ReviveQueue(qid, off))
        log.info("revive service started on %s", self.topic)

    async def run_once(self) -> None:
        for q in self._queues:
            if self.stopped:
                return
            self._read(q)
            if not await self._revive_due(q):
                self._next_wait = RETRY_AFTER_FAILURE
            self._commit_progress(q)

    # ------------------------------------------------------------------ reading the log
    def _read(self, q: _ReviveQueue) -> None:
        for _ in range(READ_BATCHES_PER_ROUND):
            got = self.store.get_messages(REVIVE_GROUP, self.topic, q.queue_id, q.read_offset, READ_BATCH, None)
            if not got.buffers:
                if got.status in (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY):
                    log.warning(
                        "revive queue %d: offset %d outside the log; moved to %d",
                        q.queue_id,
                        q.read_offset,
                        got.next_begin_offset,
                    )
                    q.read_offset = got.next_begin_offset
                return
            for msg in decode_records(got.body(), decompress=False):
                self._apply(q, msg)
            if got.next_begin_offset <= q.read_offset:
                return
            q.read_offset = got.next_begin_offset

    def _apply(self, q: _ReviveQueue, msg: MessageExt) -> None:
        tag = msg.tags
        try:
            if tag == CK_TAG:
                ck = PopCheckPoint.decode(msg.body)
                q.pending.setdefault(ck.key(), _Pending(ck, msg.queue_offset))
            elif tag in (ACK_TAG, BATCH_ACK_TAG):
                ack = AckMsg.decode(msg.body)
                p = q.pending.get(ack.ck_key())
                if p is None:
                    return  # its ck is revived already (or was never read): nothing to do
                for ao in ack.ack_offsets:
                    i = p.ck.index_of_ack(ao)
                    if i >= 0:
                        p.ck.bit_map |= 1 << i
        except ProtocolError as e:
            log.error("revive queue %d offset %d: bad %s record skipped: %s", q.queue_id, msg.queue_offset, tag, e)

    # ------------------------------------------------------------------ reviving
    async def _revive_due(self, q: _ReviveQueue) -> bool:
        """Revive what is due; False when the store refused a copy (the ck waits)."""
        now = now_ms()
        for key, p in list(q.pending.items()):
            ck = p.ck
            if all(ck.bit_map >> i & 1 for i in range(ck.num)):
                del q.pending[key]
                continue
            if ck.revive_time > now:
                continue
            if not await self._revive(p):
                return False
            del q.pending[key]
        return True

    async def _revive(self, p: _Pending) -> bool:
        ck = p.ck
        cfg = self.groups.find(ck.group)
        max_times = cfg.retryMaxTimes if cfg is not None else DEFAULT_RETRY_MAX_TIMES
        for i, offset in enumerate(ck.offsets()):
            if ck.bit_map >> i & 1 or i in p.done:
                continue
            got = self.store.get_messages(REVIVE_GROUP, ck.topic, ck.queue_id, offset, 1, None)
            if not got.buffers:
                log.warning(
                    "revive: %s-%d offset %d is gone (%s); not revived", ck.topic, ck.queue_id, offset, got.status.value
                )
                p.done.add(i)
                continue
            msg = decode_record(got.buffers[0])
            if msg.queue_offset != offset:
                log.warning(
                    "revive: %s-%d offset %d reads as %d; not revived", ck.topic, ck.queue_id, offset, msg.queue_offset
                )
                p.done.add(i)
                continue
            to_dlq = msg.reconsume_times >= max_times
            status = await self._put_copy(ck, msg, to_dlq)
            if not status.stored:
                log.error("revive: putting %s-%d offset %d failed: %s", ck.topic, ck.queue_id, offset, status.value)
                return False
            p.done.add(i)
            if to_dlq:
                self.dead_lettered += 1
            else:
                self.retried += 1
        return True

    async def _put_copy(self, ck: PopCheckPoint, msg: MessageExt, to_dlq: bool) -> PutMessageStatus:
        props = dict(msg.properties)
        origin = original_topic(ck.topic, ck.group)
        if to_dlq:
            topic = dlq_topic(ck.group)
            self.topics.create_topic_in_send_message_back_method(topic, DLQ_NUMS_PER_GROUP, PERM_READ_WRITE, 0)
            props[PROPERTY_DLQ_ORIGIN_TOPIC] = origin
            props[PROPERTY_DLQ_ORIGIN_MESSAGE_ID] = msg.uniq_key or msg.msg_id
            log.info(
                "message %s of group %s delivered %d times; to %s", msg.msg_id, ck.group, msg.reconsume_times + 1, topic
            )
        else:
            topic = ck.topic if ck.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else pop_retry_topic(ck.topic, ck.group)
            self.topics.create_topic_in_send_message_back_method(topic, 1, PERM_READ_WRITE, 0)
            if msg.reconsume_times == 0 or PROPERTY_FIRST_POP_TIME not in props:
                props[PROPERTY_FIRST_POP_TIME] = str(ck.pop_time)
        inner = reput_message(
            msg, topic, 0, props, store_host=self.store.store_host, reconsume_times=msg.reconsume_times + 1
        )
        inner.properties.pop(MessageConst.WAIT_STORE_MSG_OK, None)  # a copy waits for the flush
        return await put_durably(self.store, inner)

    # ------------------------------------------------------------------ progress
    def _commit_progress(self, q: _ReviveQueue) -> None:
        progress = min((p.log_offset for p in q.pending.values()), default=q.read_offset)
        if progress != self.offsets.query_offset(REVIVE_GROUP, self.topic, q.queue_id):
            self.offsets.commit_offset("PopReviveService", REVIVE_GROUP, self.topic, q.queue_id, progress)
