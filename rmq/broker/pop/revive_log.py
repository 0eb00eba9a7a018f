"""The revive log: ck and ack records in ``rmq_sys_REVIVE_LOG_<cluster>`` (8 queues), put
through the normal store path so flushing and HA replication cover them.

``append`` answers True only once the store says the record is stored as the flush
policy defines it (after the flush / replica wait; ASYNC_FLUSH: written to the page cache):
a pop commits its consumer offset past the messages only after that. As RocketMQ 5's
``addCkJustOffset``, a record that is in the CommitLog but missed its flush or replica
deadline (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE: a SYNC_MASTER
whose slave is gone, e.g. the survivor of a failover) counts as stored; anything the store
refused does not.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Protocol

from rmq.broker.master_lease import WriteFence
from rmq.broker.seams import PutAnswer
from rmq.common.clock import now_ms
from rmq.protocol.bodies import TopicConfig
from rmq.protocol.message import MessageConst, MessageExtBrokerInner
from rmq.protocol.pop import (
    ACK_TAG,
    BATCH_ACK_TAG,
    CK_TAG,
    REVIVE_QUEUE_NUM,
    AckMsg,
    PopCheckPoint,
    ack_unique_id,
    ck_unique_id,
)
from rmq.store.results import PutMessageResult, PutMessageStatus

__all__ = ["ReviveLog", "RecordPut", "TopicCreator"]

log = logging.getLogger("rmq.broker.pop")

PERM_READ_WRITE = 6


class RecordPut(Protocol):
    """The store's put, as the revive log and the revive service use it."""

    @property
    def store_host(self) -> bytes: ...

    def put_nowait(self, msg: MessageExtBrokerInner) -> PutAnswer: ...

    def commit_waiter(self, result: PutMessageResult) -> Awaitable[PutMessageStatus] | None: ...


class TopicCreator(Protocol):
    def create_topic_in_send_message_back_method(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int
    ) -> TopicConfig: ...


async def put_durably(store: RecordPut, msg: MessageExtBrokerInner) -> PutMessageStatus:
    """Put and wait for the flush / replica wait the message asks for (ASYNC_FLUSH: for the
    write to the page cache, which a killed process cannot lose); the final status."""
    result, waiter = store.put_nowait(msg)
    if result.status is not PutMessageStatus.PUT_OK:
        return result.status
    if waiter is None:
        waiter = store.commit_waiter(result)
        if waiter is None:
            return result.status
    status: PutMessageStatus = await waiter
    return status


class ReviveLog:
    def __init__(self, topic: str, store: RecordPut, topics: TopicCreator, fence: WriteFence) -> None:
        self.topic = topic
        self.store = store
        self.topics = topics
        self.fence = fence

    def ensure_topic(self) -> None:
        self.topics.create_topic_in_send_message_back_method(self.topic, REVIVE_QUEUE_NUM, PERM_READ_WRITE, 0)

    def _record(self, revive_qid: int, tag: str, uniq: str, body: bytes) -> MessageExtBrokerInner:
        host = self.store.store_host
        return MessageExtBrokerInner(
            topic=self.topic,
            body=body,
            queue_id=revive_qid,
            properties={MessageConst.TAGS: tag, MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq},
            born_timestamp=now_ms(),
            born_host=host,
            store_host=host,
        )

    def append_ck(self, ck: PopCheckPoint, revive_qid: int) -> Awaitable[bool]:
        return self._append(self._record(revive_qid, CK_TAG, ck_unique_id(ck), ck.encode()))

    def append_ack(self, ack: AckMsg, revive_qid: int) -> Awaitable[bool]:
        tag = BATCH_ACK_TAG if ack.is_batch else ACK_TAG
        return self._append(self._record(revive_qid, tag, ack_unique_id(ack), ack.encode()))

    async def _append(self, msg: MessageExtBrokerInner) -> bool:
        refusal = self.fence.refusal()
        if refusal is not None:
            log.warning("revive log record not written: %s", refusal)
            return False
        self.ensure_topic()
        status = await put_durably(self.store, msg)
        if not status.stored:
            log.error(
                "revive log record (%s, queue %d) not stored: %s",
                msg.properties.get("TAGS"),
                msg.queue_id,
                status.value,
            )
            return False
        return True
