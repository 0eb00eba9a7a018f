"""POP, ACK and CHANGE_INVISIBLE_TIME on the store (RocketMQ 5's PopMessageProcessor,
AckMessageProcessor and ChangeInvisibleTimeProcessor without the network).

Pop, per queue (``topic@group@queueId`` try-locked: a busy queue is skipped):

1. start offset = the group's committed offset; a group with none starts where RocketMQ 5
   starts it (``initMode`` MAX: offset 0 while the queue still begins at 0 and that message
   is in memory, else the last message; MIN and retry topics: the queue's minimum) and
   that start is committed;
2. read up to the batch through the tag filter;
3. non-orderly: write the check point (ck) to the revive log and wait until the store says
   it is durable; only then commit the consumer offset past the messages (a failed ck put
   returns nothing from that queue and leaves the offset); orderly: no ck, the queue is
   blocked by its OrderInfo (order_info.py) and the offset moves only on ack.

The retry topic ``%RETRY%<group>_<topic>`` is read first one time in five, otherwise after
the topic's queues when the batch is not full (never for orderly pops); its messages are
re-encoded with the original topic and their POP_CK property, as RocketMQ 5 does.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from rmq.broker.pop.order_info import ConsumerOrderInfoManager
from rmq.broker.pop.revive_log import ReviveLog
from rmq.broker.seams import ConsumerOffsets, GetStats, StoreReader
from rmq.common.clock import now_ms
from rmq.common.mixall import RETRY_GROUP_TOPIC_PREFIX
from rmq.protocol.bodies import TopicConfig
from rmq.protocol.codes import ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.headers import HeaderFieldError
from rmq.protocol.message import decode_record, encode_record, properties_to_string
from rmq.protocol.pop import (
    INIT_MODE_MIN,
    POP_ORDER_REVIVE_QUEUE,
    PROPERTY_POP_CK,
    REVIVE_QUEUE_NUM,
    AckMsg,
    ExtraInfo,
    PopCheckPoint,
    QueueInfo,
    pop_retry_topic,
)
from rmq.store.message_filter import MessageFilter
from rmq.store.results import GetMessageResult, GetMessageStatus

__all__ = ["PopService", "PopResult", "PopRequest", "Answer"]

log = logging.getLogger("rmq.broker.pop")

POP_FROM_RETRY_PROBABILITY = 20  # percent (BrokerConfig.popFromRetryProbability)

_RESET_STATUSES = (
    GetMessageStatus.OFFSET_TOO_SMALL,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY,
    GetMessageStatus.OFFSET_FOUND_NULL,
)
_SKIP_STATUSES = (
    GetMessageStatus.NO_MATCHED_MESSAGE,
    GetMessageStatus.OFFSET_FOUND_NULL,
    GetMessageStatus.MESSAGE_WAS_REMOVING,
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
)


class TopicLookup(Protocol):
    def select(self, topic: str) -> TopicConfig | None: ...


@dataclass(slots=True)
class PopRequest:
    group: str
    topic: str
    queue_id: int  # -1: every readable queue
    max_msg_nums: int
    invisible_time: int
    init_mode: int
    order: bool
    attempt_id: str | None
    message_filter: MessageFilter
    client: str


@dataclass(slots=True)
class PopResult:
    pop_time: int
    invisible_time: int
    revive_qid: int
    buffers: list[bytes] = field(default_factory=list)
    queues: list[QueueInfo] = field(default_factory=list)
    rest_num: int = 0
    # orderly: ms until the first blocked queue's popped messages become visible again
    unblock_in_ms: int | None = None


@dataclass(slots=True)
class Answer:
    """An ack / change-invisible-time outcome: a response code, its remark, and (change)
    the new handle's popTime / invisibleTime / reviveQid."""

    code: int
    remark: str | None = None
    pop_time: int = 0
    invisible_time: int = 0
    revive_qid: int = 0


def _extra_info(text: str) -> ExtraInfo:
    try:
        return ExtraInfo.parse(text)
    except ProtocolError as e:
        raise HeaderFieldError("extraInfo", f"is malformed: {e}") from None


class PopService:
    def __init__(
        self,
        broker_name: str,
        store: StoreReader,
        topics: TopicLookup,
        offsets: ConsumerOffsets,
        revive_log: ReviveLog,
        order_info: ConsumerOrderInfoManager,
        stats: GetStats | None = None,
        rand: random.Random | None = None,
    ) -> None:
        self.stats = stats
        self.broker_name = broker_name
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.revive_log = revive_log
        self.order_info = order_info
        self._rand = rand or random.Random()
        self._locks: set[tuple[str, str, int]] = set()
        self._ck_counter = 0
        self.checkpoints = 0  # cks written
        self.acks = 0  # ack records written
        # called with (topic, queue id) when an orderly ack unblocks a queue (wakes pops)
        self.on_unblock: Callable[[str, int], None] | None = None

    # ------------------------------------------------------------------ pop
    async def pop(self, req: PopRequest, tc: TopicConfig) -> PopResult:
        pop_time = now_ms()
        if req.order:
            revive_qid = POP_ORDER_REVIVE_QUEUE
        else:
            revive_qid = self._ck_counter % REVIVE_QUEUE_NUM
            self._ck_counter += 1
        result = PopResult(pop_time, req.invisible_time, revive_qid)
        retry = pop_retry_topic(req.topic, req.group)
        retry_first = not req.order and self._rand.randrange(100) < POP_FROM_RETRY_PROBABILITY
        if retry_first:
            await self._pop_topic(req, retry, True, result)
        if req.queue_id < 0:
            n = tc.read_queue_nums
            start = self._rand.randrange(n) if n else 0
            for i in range(n):
                await self._pop_queue(req, req.topic, (start + i) % n, False, result)
        else:
            await self._pop_queue(req, req.topic, req.queue_id, False, result)
        if not retry_first and not req.order and len(result.buffers) < req.max_msg_nums:
            await self._pop_topic(req, retry, True, result)
        return result

    async def _pop_topic(self, req: PopRequest, topic: str, is_retry: bool, result: PopResult) -> None:
        tc = self.topics.select(topic)
        if tc is None:
            return
        for qid in range(tc.read_queue_nums):
            await self._pop_queue(req, topic, qid, is_retry, result)

    def pop_offset(self, group: str, topic: str, queue_id: int, init_mode: int) -> int:
        """The committed offset, or where a new group starts (committed then)."""
        offset = self.offsets.query_offset(group, topic, queue_id)
        if offset >= 0:
            return offset
        store = self.store
        if init_mode == INIT_MODE_MIN or topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            offset = store.get_min_offset_in_queue(topic, queue_id)
        elif store.get_min_offset_in_queue(topic, queue_id) <= 0 and not store.check_in_disk_by_consume_offset(
            topic, queue_id, 0
        ):
            # initPopOffsetByCheckMsgInMem: the queue still starts at 0 in memory
            offset = 0
        else:
            offset = max(store.get_max_offset_in_queue(topic, queue_id) - 1, 0)
        self.offsets.commit_offset("getPopOffset", group, topic, queue_id, offset)
        return offset

    def _rest(self, topic: str, queue_id: int, offset: int) -> int:
        return max(self.store.get_max_offset_in_queue(topic, queue_id) - offset, 0)

    async def _pop_queue(self, req: PopRequest, topic: str, queue_id: int, is_retry: bool, result: PopResult) -> None:
        group = req.group
        key = (topic, group, queue_id)
        if key in self._locks:
            if not req.order:
                result.rest_num += self._rest(topic, queue_id, self.offsets.query_offset(group, topic, queue_id))
            return
        self._locks.add(key)
        try:
            offset = self.pop_offset(group, topic, queue_id, req.init_mode)
            now = now_ms()
            if req.order and self.order_info.check_block(
                req.attempt_id, topic, group, queue_id, req.invisible_time, now
            ):
                due = self.order_info.visible_in(topic, group, queue_id, now)
                if result.unblock_in_ms is None or due < result.unblock_in_ms:
                    result.unblock_in_ms = due
                return
            want = req.max_msg_nums - len(result.buffers)
            if want <= 0:
                result.rest_num += self._rest(topic, queue_id, offset)
                return
            got = self.store.get_messages(group, topic, queue_id, offset, want, req.message_filter)
            if not got.buffers and got.status in _RESET_STATUSES:
                log.warning(
                    "pop %s@%s@%d: offset %d not in the queue; moved to %d",
                    topic,
                    group,
                    queue_id,
                    offset,
                    got.next_begin_offset,
                )
                offset = got.next_begin_offset
                self.offsets.commit_offset(req.client, group, topic, queue_id, offset)
                got = self.store.get_messages(group, topic, queue_id, offset, want, req.message_filter)
            if got.buffers:
                counts = None
                if req.order:
                    counts = self.order_info.update(
                        req.attempt_id,
                        topic,
                        group,
                        queue_id,
                        result.pop_time,
                        req.invisible_time,
                        list(got.queue_offsets),
                    )
                else:
                    ck = PopCheckPoint(
                        offset,
                        result.pop_time,
                        req.invisible_time,
                        queue_id,
                        topic,
                        group,
                        self.broker_name,
                        [qo - offset for qo in got.queue_offsets],
                    )
                    if not await self.revive_log.append_ck(ck, result.revive_qid):
                        # nothing leaves this queue: the offset stays where it was
                        result.rest_num += got.max_offset - offset
                        return
                    self.checkpoints += 1
                    self.offsets.commit_offset(req.client, group, topic, queue_id, got.next_begin_offset)
                result.queues.append(QueueInfo(topic, queue_id, offset, tuple(got.queue_offsets), counts))
                if self.stats is not None:  # messages out (TPS, metrics), as pulls count them
                    self.stats.on_get(group, topic, got, queue_id)
                if is_retry:
                    result.buffers.extend(self._as_original(req, got, offset, queue_id, result))
                else:
                    result.buffers.extend(got.buffers)
            elif got.status in _SKIP_STATUSES and got.next_begin_offset > offset:
                # nothing matched the filter: nothing delivered, the offset moves past it
                self.offsets.commit_offset(req.client, group, topic, queue_id, got.next_begin_offset)
            result.rest_num += max(got.max_offset - got.next_begin_offset, 0)
        finally:
            self._locks.discard(key)

    def _as_original(
        self, req: PopRequest, got: GetMessageResult, start: int, queue_id: int, result: PopResult
    ) -> list[bytes]:
        """Retry-topic records re-encoded with the original topic and their POP_CK."""
        out = []
        for buf in got.buffers:
            m = decode_record(buf)
            props = dict(m.properties)
            props.setdefault(
                PROPERTY_POP_CK,
                ExtraInfo.build(
                    start,
                    result.pop_time,
                    req.invisible_time,
                    result.revive_qid,
                    m.topic,
                    self.broker_name,
                    queue_id,
                    m.queue_offset,
                ).encode(),
            )
            out.append(
                encode_record(
                    topic=req.topic.encode(),
                    body=m.body,
                    properties=properties_to_string(props).encode(),
                    queue_id=m.queue_id,
                    flag=m.flag,
                    queue_offset=m.queue_offset,
                    physical_offset=m.commit_log_offset,
                    sys_flag=m.sys_flag,
                    born_timestamp=m.born_timestamp,
                    born_host=m.born_host,
                    store_timestamp=m.store_timestamp,
                    store_host=m.store_host,
                    reconsume_times=m.reconsume_times,
                    prepared_transaction_offset=m.prepared_transaction_offset,
                )
            )
        return out

    # ------------------------------------------------------------------ ack / change invisible time
    def _locate(
        self, topic: str, queue_id: int, offset: int, extra_info: str, upper_inclusive: bool
    ) -> Answer | ExtraInfo:
        """The handle of the message named, or why it names none (RocketMQ 5's checks)."""
        tc = self.topics.select(topic)
        if tc is None:
            return Answer(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if queue_id < 0 or queue_id >= tc.read_queue_nums:
            return Answer(
                ResponseCode.MESSAGE_ILLEGAL,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{tc.read_queue_nums}]",
            )
        lo = self.store.get_min_offset_in_queue(topic, queue_id)
        hi = self.store.get_max_offset_in_queue(topic, queue_id)
        if offset < lo or offset > hi or (offset == hi and not upper_inclusive):
            return Answer(
                ResponseCode.NO_MESSAGE, f"offset is illegal, key:{topic}@{queue_id}, commit:{offset}, store:{lo}~{hi}"
            )
        ei = _extra_info(extra_info)
        if not ei.is_order and not 0 <= ei.revive_qid < REVIVE_QUEUE_NUM:
            return Answer(ResponseCode.MESSAGE_ILLEGAL, f"extraInfo reviveQid {ei.revive_qid} is out of range")
        return ei

    def ack(
        self, group: str, topic: str, queue_id: int, offset: int, extra_info: str, client: str
    ) -> Answer | Awaitable[Answer]:
        ei = self._locate(topic, queue_id, offset, extra_info, upper_inclusive=True)
        if isinstance(ei, Answer):
            return ei
        if ei.is_order:
            return self._ack_orderly(group, topic, queue_id, offset, ei, client)
        ack = AckMsg([offset], ei.ck_queue_offset, group, topic, queue_id, ei.pop_time, ei.broker_name)
        return self._put_ack(ack, ei.revive_qid)

    async def _put_ack(self, ack: AckMsg, revive_qid: int) -> Answer:
        if not await self.revive_log.append_ack(ack, revive_qid):
            return Answer(ResponseCode.SYSTEM_ERROR, "the ack was not stored")
        self.acks += 1
        return Answer(ResponseCode.SUCCESS)

    def _ack_orderly(self, group: str, topic: str, queue_id: int, offset: int, ei: ExtraInfo, client: str) -> Answer:
        committed = self.offsets.query_offset(group, topic, queue_id)
        if offset < committed:
            return Answer(ResponseCode.SUCCESS)  # acked before
        nxt = self.order_info.commit_and_next(topic, group, queue_id, offset, ei.pop_time)
        if nxt == -1:
            return Answer(
                ResponseCode.MESSAGE_ILLEGAL,
                f"offset is illegal, key:{topic}@{group}@{queue_id}, old:{committed}, commit:{offset}",
            )
        if nxt > -1:
            self.offsets.commit_offset(client, group, topic, queue_id, nxt)
            if not self.order_info.check_block(None, topic, group, queue_id, ei.invisible_time, now_ms()):
                if self.on_unblock is not None:
                    self.on_unblock(topic, queue_id)
        return Answer(ResponseCode.SUCCESS)

    def change_invisible_time(
        self, group: str, topic: str, queue_id: int, offset: int, extra_info: str, invisible_time: int
    ) -> Answer | Awaitable[Answer]:
        ei = self._locate(topic, queue_id, offset, extra_info, upper_inclusive=False)
        if isinstance(ei, Answer):
            return ei
        if ei.is_order:
            committed = self.offsets.query_offset(group, topic, queue_id)
            if offset < committed:
                return Answer(ResponseCode.SUCCESS)
            next_visible = now_ms() + invisible_time
            self.order_info.update_next_visible_time(topic, group, queue_id, offset, ei.pop_time, next_visible)
            return Answer(ResponseCode.SUCCESS, None, ei.pop_time, next_visible - ei.pop_time, ei.revive_qid)
        return self._change(group, topic, queue_id, offset, ei, invisible_time)

    async def _change(
        self, group: str, topic: str, queue_id: int, offset: int, ei: ExtraInfo, invisible_time: int
    ) -> Answer:
        """A new one-message ck (popTime now), then an ack of the message in the old ck.

        The new ck's popTime is kept after the old one's: a ck is named by (topic, group,
        queue, start offset, popTime, broker), and a change in the pop's own millisecond
        would give the new ck the old one's name, so the ack of the old ck would settle
        the new one and the message would never come back."""
        now = max(now_ms(), ei.pop_time + 1)
        ck = PopCheckPoint(offset, now, invisible_time, queue_id, topic, group, ei.broker_name, [0])
        if not await self.revive_log.append_ck(ck, ei.revive_qid):
            return Answer(ResponseCode.SYSTEM_ERROR, "the new check point was not stored")
        self.checkpoints += 1
        old = AckMsg([offset], ei.ck_queue_offset, group, topic, queue_id, ei.pop_time, ei.broker_name)
        answer = await self._put_ack(old, ei.revive_qid)
        if answer.code != ResponseCode.SUCCESS:
            return answer
        return Answer(ResponseCode.SUCCESS, None, now, invisible_time, ei.revive_qid)
