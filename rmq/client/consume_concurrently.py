"""Concurrent consumption for ``PushConsumer`` (Java ``ConsumeMessageConcurrentlyService``).

    def listener(msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext) -> ConsumeResult:
        ...
        return ConsumeResult.SUCCESS

Messages go to the listener ``consume_message_batch_max_size`` (1) at a time, on a pool
of ``consume_thread_max`` (20) threads (a coroutine listener runs on the loop, at most
``consume_thread_max`` at once). The committable offset is the smallest offset still
being consumed. RECONSUME_LATER (or an exception, or None) hands the message back to
the broker (CONSUMER_SEND_MSG_BACK, else through the client's inner producer, else it
is consumed again locally after ``local_retry_delay_ms``); in BROADCASTING mode a
failed message is dropped. ``consume_timeout_ms``: a message whose listener call has
run that long goes back to the broker (delay level 3).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from rmq.client.consume_service import ConsumeServiceBase, PushConsumerView
from rmq.client.consumer_base import MessageModel
from rmq.client.process_queue import ProcessQueue
from rmq.common.clock import now_ms
from rmq.common.mixall import retry_topic
from rmq.protocol.bodies import MessageQueue
from rmq.protocol.message import MessageConst, MessageExt
from rmq.runtime.service import PeriodicService

__all__ = ["ConsumeResult", "ConsumeConcurrentlyContext", "MessageListener", "ConsumeMessageConcurrentlyService"]

log = logging.getLogger("rmq.client.consumer")


class ConsumeResult(enum.Enum):
    """ConsumeConcurrentlyStatus."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    CONSUME_SUCCESS = "CONSUME_SUCCESS"  # alias of SUCCESS (Java's name)


@dataclass
class ConsumeConcurrentlyContext:
    """Handed to the listener. ``ack_index``: messages after it count as failed;
    ``delay_level_when_next_consume``: 0 = broker decides, -1 = straight to the DLQ."""

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = 2**31 - 1


MessageListener = Callable[
    [list[MessageExt], ConsumeConcurrentlyContext], ConsumeResult | None | Awaitable[ConsumeResult | None]
]


class ConsumeMessageConcurrentlyService(ConsumeServiceBase):
    """Runs the listener and settles offsets (Java ``ConsumeMessageConcurrentlyService``)."""

    def __init__(self, consumer: PushConsumerView, listener: MessageListener) -> None:
        super().__init__(consumer, listener)
        self.tasks_by_pq: dict[ProcessQueue, set[asyncio.Task[Any]]] = {}
        self._send_back_warned = False
        period = min(consumer.consume_timeout_ms, 60000)
        # ProcessQueue.cleanExpiredMsg, every consume_timeout (at most 1 min)
        self._clean_expired = PeriodicService(
            f"{consumer.group} clean-expired", period / 1000, self._clean_expired_all, log
        )

    def start(self) -> None:
        self._start_executor()
        if self.consumer.consume_timeout_ms > 0:
            self._clean_expired.start()

    async def shutdown(self, await_terminate_ms: int) -> None:
        self.stopped = True
        self._stop.set()
        await self._clean_expired.stop(cancel=True)
        tasks = list(self.tasks)
        if tasks and await_terminate_ms > 0:
            await asyncio.wait(tasks, timeout=await_terminate_ms / 1000)
        await self._end_tasks()

    def _spawn_for(self, coro: Coroutine[Any, Any, None], name: str, pq: ProcessQueue) -> asyncio.Task[Any]:
        """A task that works on ``pq`` (``wait_idle`` waits for these)."""
        t = self._spawn(coro, name)
        group = self.tasks_by_pq.setdefault(pq, set())
        group.add(t)

        def done(task: asyncio.Task[Any], pq: ProcessQueue = pq) -> None:
            g = self.tasks_by_pq.get(pq)
            if g is not None:
                g.discard(task)
                if not g:
                    del self.tasks_by_pq[pq]

        t.add_done_callback(done)
        return t

    async def wait_idle(self, pq: ProcessQueue, timeout: float) -> bool:
        """Wait (bounded) for the consume tasks of ``pq`` to end; True when they did."""
        tasks = list(self.tasks_by_pq.get(pq, ()))
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        return not pending

    def submit_consume_request(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        n = max(1, self.consumer.consume_message_batch_max_size)
        for i in range(0, len(msgs), n):
            self._spawn_for(self._consume(msgs[i : i + n], pq, mq), f"consume {mq}", pq)

    def submit_consume_request_later(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        async def later() -> None:
            await asyncio.sleep(self.consumer.local_retry_delay_ms / 1000)
            self.submit_consume_request(msgs, pq, mq)

        self._spawn(later(), f"consume later {mq}")

    async def _consume(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        if pq.dropped:
            log.info(
                "the message queue not be able to consume, because it's dropped. group=%s %s", self.consumer.group, mq
            )
            return
        ctx = ConsumeConcurrentlyContext(mq)
        self.consumer.reset_retry_topic(msgs)
        start = str(now_ms())
        for m in msgs:
            m.properties[MessageConst.CONSUME_START_TIMESTAMP] = start
        status = await self._listen(msgs, ctx, mq)
        if not isinstance(status, ConsumeResult):
            if status is not None:
                log.warning("listener returned %r, not a ConsumeResult; treated as RECONSUME_LATER", status)
            else:
                log.warning(
                    "consumeMessage return null (or raised), group=%s msgs=%s",
                    self.consumer.group,
                    [m.msg_id for m in msgs],
                )
            status = ConsumeResult.RECONSUME_LATER
        if pq.dropped:
            log.warning("processQueue is dropped without process consume result. %s", mq)
            return
        await self.process_consume_result(status, ctx, msgs, pq, mq)

    async def process_consume_result(
        self,
        status: ConsumeResult,
        ctx: ConsumeConcurrentlyContext,
        msgs: list[MessageExt],
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> None:
        if not msgs:
            return
        ack_index = ctx.ack_index
        if status is ConsumeResult.SUCCESS:
            ack_index = min(ack_index, len(msgs) - 1)
        else:
            ack_index = -1
        self._count_consume(mq.topic, None, ok=ack_index + 1, failed=len(msgs) - ack_index - 1)
        done = msgs
        if self.consumer.message_model is MessageModel.BROADCASTING:
            for m in msgs[ack_index + 1 :]:
                log.warning("BROADCASTING, the message consume failed, drop it, %s", m.msg_id)
        else:
            failed = []
            for m in msgs[ack_index + 1 :]:
                if not await self.send_message_back(m, ctx, mq):
                    m.reconsume_times += 1
                    failed.append(m)
            if failed:
                ids = {id(m) for m in failed}
                done = [m for m in msgs if id(m) not in ids]
                self.submit_consume_request_later(failed, pq, mq)
        offset = pq.remove_messages(done)
        if offset >= 0 and not pq.dropped:
            assert self.consumer.offset_store is not None
            self.consumer.offset_store.update_offset(mq, offset, True)

    async def send_message_back(self, msg: MessageExt, ctx: ConsumeConcurrentlyContext, mq: MessageQueue) -> bool:
        """Hand a failed message back to the broker; False = redeliver it locally.

        This is the seam for retry / DLQ: with CONSUMER_SEND_MSG_BACK the broker puts
        the message in ``%RETRY%<group>`` with a growing delay (or in the DLQ after
        ``max_reconsume_times``).
        """
        c = self.consumer
        if not c.send_back_to_broker:
            return False
        inst = c.instance
        assert inst is not None
        addr = inst.find_broker_address_in_publish(mq.broker_name) or msg.store_host_str
        try:
            await inst.api.consumer_send_message_back(
                addr, msg, c.group, ctx.delay_level_when_next_consume, 5000, c.effective_max_reconsume_times()
            )
            return True
        except asyncio.CancelledError:
            raise
        except Exception as e:
            level = logging.DEBUG if self._send_back_warned else logging.WARNING
            self._send_back_warned = True
            log.log(
                level,
                "sendMessageBack of %s to %s failed (%s); sending it to %s through the client's producer",
                msg.msg_id,
                addr,
                e,
                retry_topic(c.group),
            )
        try:
            await c.send_back_through_producer(msg, msg.reconsume_times + 1, c.effective_max_reconsume_times())
            return True
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.log(
                logging.DEBUG if self._send_back_warned else logging.WARNING,
                "sending %s back to %s failed too (%s); it will be consumed again locally",
                msg.msg_id,
                retry_topic(c.group),
                e,
            )
            return False

    # ------------------------------------------------------------------ consume timeout
    async def _clean_expired_all(self) -> None:
        for mq, pq in list(self.consumer.rebalance.process_queue_table.items()):
            if not pq.dropped:
                await self.clean_expired_msg(mq, pq)

    async def clean_expired_msg(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """ProcessQueue.cleanExpiredMsg: the oldest messages whose consumption started more
        than ``consume_timeout_ms`` ago go back to the broker (delay level 3) and stop
        holding the queue's offset (at most 16 per round)."""
        c = self.consumer
        if c.message_model is not MessageModel.CLUSTERING:
            return
        now = now_ms()
        for _ in range(16):
            first = pq.min_offset
            if first is None:
                return
            msg = pq.message_at(first)
            start = msg.properties.get(MessageConst.CONSUME_START_TIMESTAMP) if msg else None
            if msg is None or not start or now - int(start) <= c.consume_timeout_ms:
                return
            ctx = ConsumeConcurrentlyContext(mq, delay_level_when_next_consume=3)
            log.info(
                "send expire msg back. topic=%s, msgId=%s, queueId=%d, queueOffset=%d",
                msg.topic,
                msg.msg_id,
                msg.queue_id,
                msg.queue_offset,
            )
            if not await self.send_message_back(msg, ctx, mq):
                return
            offset = pq.remove_messages([msg])
            if offset >= 0 and not pq.dropped:
                assert c.offset_store is not None
                c.offset_store.update_offset(mq, offset, True)
