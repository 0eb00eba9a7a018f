"""Orderly consumption for ``PushConsumer`` (Java ``ConsumeMessageOrderlyService``).

    def listener(msgs: list[MessageExt], ctx: ConsumeOrderlyContext) -> ConsumeOrderlyResult:
        ...
        return ConsumeOrderlyResult.SUCCESS

    c = PushConsumer("g", "127.0.0.1:9876")
    c.register_message_listener_orderly(listener)

Per queue, messages reach the listener in queue-offset order, one batch
(``consume_message_batch_max_size``, 1) at a time, and never on two consumers at once:

* In CLUSTERING mode a queue is consumed only while this client holds its lock at the
  queue's master (LOCK_BATCH_MQ, taken before the first pull, renewed every 20 s, not
  trusted after 30 s without a renewal; the broker keeps it 60 s). A queue that lost
  its lock stops after the current batch and tries to lock again.
* Within the client, one consume task per queue (``mq_lock``); a task consumes batch
  after batch and yields after 60 s (``MAX_TIME_CONSUME_CONTINUOUSLY``).
* ``SUSPEND_CURRENT_QUEUE_A_MOMENT`` (or an exception, or None): the batch is put back
  at the head of the queue and consumed again after ``suspend_current_queue_time_millis``
  (1000 ms, or the context's value; clamped to 10..30000), nothing behind it overtaking
  it; each message's ``reconsume_times`` counts the local retries. Once a message has
  been retried ``max_reconsume_times`` times (default -1 = unbounded, as Java's
  Integer.MAX_VALUE) it is sent to ``%RETRY%<group>`` through the client's inner
  producer with RECONSUME_TIME / MAX_RECONSUME_TIMES, which makes the broker put it in
  ``%DLQ%<group>``; then the queue moves on. If that send fails, it is retried locally.
* The offset committed is one past the last message of a finished batch.
* When rebalance takes a queue away, it waits for the batch in flight to end (the
  ``mq_lock``), commits, and only then unlocks the queue at the broker, so the next
  owner starts after the last consumed message.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rmq.client._util import sleep_unless
from rmq.client.consume_service import ConsumeServiceBase, PushConsumerView
from rmq.client.process_queue import REBALANCE_LOCK_INTERVAL_MS, ProcessQueue
from rmq.common.clock import now_ms
from rmq.protocol.bodies import MessageQueue
from rmq.protocol.message import MessageConst, MessageExt
from rmq.runtime.service import PeriodicService

__all__ = [
    "ConsumeOrderlyResult",
    "ConsumeOrderlyContext",
    "MessageListenerOrderly",
    "ConsumeMessageOrderlyService",
    "MAX_TIME_CONSUME_CONTINUOUSLY_MS",
]

log = logging.getLogger("rmq.client.consumer")

#: Java rocketmq.client.maxTimeConsumeContinuously.
MAX_TIME_CONSUME_CONTINUOUSLY_MS = 60000


class ConsumeOrderlyResult(enum.Enum):
    """ConsumeOrderlyStatus. COMMIT / ROLLBACK only mean something with
    ``ctx.auto_commit = False`` (with auto-commit they count as SUCCESS, as Java)."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"


@dataclass
class ConsumeOrderlyContext:
    """Handed to an orderly listener. ``suspend_current_queue_time_millis`` -1 = the
    consumer's setting."""

    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1


MessageListenerOrderly = Callable[
    [list[MessageExt], ConsumeOrderlyContext], ConsumeOrderlyResult | None | Awaitable[ConsumeOrderlyResult | None]
]


class ConsumeMessageOrderlyService(ConsumeServiceBase):
    def __init__(self, consumer: PushConsumerView, listener: MessageListenerOrderly) -> None:
        super().__init__(consumer, listener)
        self._mq_locks: dict[MessageQueue, asyncio.Lock] = {}
        # lockMQPeriodically: the held queues' locks renewed every 20 s
        self._lock_renewal = PeriodicService(
            f"{consumer.group} lock-renewal", REBALANCE_LOCK_INTERVAL_MS / 1000, self._lock_all, log, initial=1
        )

    @property
    def clustering(self) -> bool:
        return self.consumer.message_model.value == "CLUSTERING"

    def mq_lock(self, mq: MessageQueue) -> asyncio.Lock:
        """Held by the queue's consume task for as long as it consumes (MessageQueueLock)."""
        lock = self._mq_locks.get(mq)
        if lock is None:
            lock = self._mq_locks[mq] = asyncio.Lock()
        return lock

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._start_executor()
        if self.clustering:
            self._lock_renewal.start()

    async def _lock_all(self) -> None:
        await self.consumer.rebalance.lock_all()

    async def shutdown(self, await_terminate_ms: int) -> None:
        """Stop starting batches; let the ones in flight end (bounded)."""
        self.stopped = True
        self._stop.set()
        await self._lock_renewal.stop(cancel=True)
        busy = [lock for lock in self._mq_locks.values() if lock.locked()]
        if busy and await_terminate_ms > 0:
            deadline = time.monotonic() + await_terminate_ms / 1000
            while any(lock.locked() for lock in busy) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        await self._end_tasks()

    # ------------------------------------------------------------------ scheduling
    def submit_consume_request(
        self, msgs: list[MessageExt] | None, pq: ProcessQueue, mq: MessageQueue, dispatch_to_consume: bool
    ) -> None:
        if dispatch_to_consume and not self.stopped:
            self._spawn(self._consume_request(pq, mq), f"consume {mq}")

    def submit_consume_request_later(self, pq: ProcessQueue, mq: MessageQueue, suspend_ms: int) -> None:
        delay = self.consumer.suspend_current_queue_time_millis if suspend_ms == -1 else suspend_ms
        delay = min(max(delay, 10), 30000)

        async def later() -> None:
            if await sleep_unless(self._stop, delay / 1000):
                return
            self.submit_consume_request(None, pq, mq, True)

        self._spawn(later(), f"consume later {mq}")

    def try_lock_later_and_reconsume(self, mq: MessageQueue, pq: ProcessQueue, delay_ms: int) -> None:
        async def later() -> None:
            if await sleep_unless(self._stop, delay_ms / 1000):
                return
            ok = await self.lock_one_mq(mq)
            self.submit_consume_request_later(pq, mq, 10 if ok else 3000)

        self._spawn(later(), f"lock later {mq}")

    async def lock_one_mq(self, mq: MessageQueue) -> bool:
        if self.stopped:
            return False
        return await self.consumer.rebalance.lock(mq)

    # ------------------------------------------------------------------ consuming
    async def _consume_request(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        """ConsumeRequest.run: batches of one queue, in order, while the lock is good."""
        if pq.dropped:
            log.warning("run, the message queue not be able to consume, because it's dropped. %s", mq)
            return
        c = self.consumer
        async with self.mq_lock(mq):
            if not self.clustering or (pq.locked and not pq.is_lock_expired()):
                begin = time.monotonic()
                while True:
                    if pq.dropped or self.stopped:
                        break
                    if self.clustering and not pq.locked:
                        log.warning("the message queue not locked, so consume later, %s", mq)
                        self.try_lock_later_and_reconsume(mq, pq, 10)
                        break
                    if self.clustering and pq.is_lock_expired():
                        log.warning("the message queue lock expired, so consume later, %s", mq)
                        self.try_lock_later_and_reconsume(mq, pq, 10)
                        break
                    if (time.monotonic() - begin) * 1000 > MAX_TIME_CONSUME_CONTINUOUSLY_MS:
                        self.submit_consume_request_later(pq, mq, 10)
                        break
                    msgs = pq.take_messages(max(1, c.consume_message_batch_max_size))
                    if not msgs:
                        break
                    c.reset_retry_topic(msgs)
                    ctx = ConsumeOrderlyContext(mq)
                    start = str(now_ms())
                    for m in msgs:
                        m.properties[MessageConst.CONSUME_START_TIMESTAMP] = start
                    status: Any = None
                    async with pq.consume_lock:
                        if pq.dropped:
                            log.warning(
                                "consumeMessage, the message queue not be able to consume, because it's dropped. %s", mq
                            )
                            break
                        status = await self._listen(msgs, ctx, mq)
                    if not isinstance(status, ConsumeOrderlyResult):
                        if status is not None:
                            log.warning(
                                "orderly listener returned %r, not a "
                                "ConsumeOrderlyResult; treated as "
                                "SUSPEND_CURRENT_QUEUE_A_MOMENT",
                                status,
                            )
                        else:
                            log.warning(
                                "consumeMessage Orderly return not OK (null or an exception), group=%s msgs=%s",
                                c.group,
                                [m.msg_id for m in msgs],
                            )
                        status = ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
                    if not await self.process_consume_result(msgs, status, ctx, pq, mq):
                        break
            else:
                if pq.dropped:
                    return
                self.try_lock_later_and_reconsume(mq, pq, 100)
        if pq.dropped and c.rebalance.process_queue_table.get(mq) is pq and c.instance:
            # rebalance is waiting for this batch before it can give the queue away
            c.instance.rebalance_immediately()

    async def process_consume_result(
        self,
        msgs: list[MessageExt],
        status: ConsumeOrderlyResult,
        ctx: ConsumeOrderlyContext,
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> bool:
        """Settle one batch; False stops the consume task (the batch comes back later)."""
        R = ConsumeOrderlyResult
        go_on = True
        commit_offset = -1
        ok = status in (R.SUCCESS, R.COMMIT)  # ROLLBACK and SUSPEND count as failed, as Java
        self._count_consume(mq.topic, None, ok=len(msgs) if ok else 0, failed=0 if ok else len(msgs))
        if ctx.auto_commit:
            if status in (R.COMMIT, R.ROLLBACK):
                log.warning(
                    "the message queue consume result is illegal, we think you want to ack these message %s", mq
                )
                status = R.SUCCESS
            if status is R.SUCCESS:
                commit_offset = pq.commit()
            elif await self.check_reconsume_times(msgs):
                pq.make_message_to_consume_again(msgs)
                self.submit_consume_request_later(pq, mq, ctx.suspend_current_queue_time_millis)
                go_on = False
            else:
                commit_offset = pq.commit()
        else:
            if status is R.COMMIT:
                commit_offset = pq.commit()
            elif status is R.ROLLBACK:
                pq.rollback()
                self.submit_consume_request_later(pq, mq, ctx.suspend_current_queue_time_millis)
                go_on = False
            elif status is R.SUSPEND_CURRENT_QUEUE_A_MOMENT:
                if await self.check_reconsume_times(msgs):
                    pq.make_message_to_consume_again(msgs)
                    self.submit_consume_request_later(pq, mq, ctx.suspend_current_queue_time_millis)
                    go_on = False
        # Committed even when the queue was just dropped by rebalance: the queue is not
        # released before this task ends, so the offset is still ours to write. After an
        # offset reset the queue was cleared and commit() gave -1.
        if commit_offset >= 0:
            store = self.consumer.offset_store
            assert store is not None
            store.update_offset(mq, commit_offset, False)
        return go_on

    def max_reconsume_times(self) -> int:
        m = self.consumer.max_reconsume_times
        return 2**31 - 1 if m == -1 else m

    async def check_reconsume_times(self, msgs: list[MessageExt]) -> bool:
        """True: consume the batch again locally. Messages retried ``max_reconsume_times``
        times are handed to the broker (their DLQ) and no longer hold the queue."""
        suspend = False
        for m in msgs:
            if m.reconsume_times >= self.max_reconsume_times():
                if not await self.send_message_back(m):
                    suspend = True
                    m.reconsume_times += 1
            else:
                suspend = True
                m.reconsume_times += 1
        return suspend

    async def send_message_back(self, msg: MessageExt) -> bool:
        """To ``%RETRY%<group>`` through the inner producer, with RECONSUME_TIME = the
        local retries and MAX_RECONSUME_TIMES (so the broker dead-letters it)."""
        c = self.consumer
        if c.instance is None or not c.send_back_to_broker:
            return False
        try:
            await c.send_back_through_producer(msg, msg.reconsume_times, self.max_reconsume_times())
            log.info(
                "orderly message %s of %s reconsumed %d times: sent back to the broker",
                msg.msg_id,
                c.group,
                msg.reconsume_times,
            )
            return True
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.error("sendMessageBack of %s failed (%s); it is consumed again locally", msg.msg_id, e)
            return False
