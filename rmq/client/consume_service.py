"""What the concurrent and the orderly consume services share: running the listener
(a coroutine function on the loop, anything else on a thread pool) and owning tasks.

The services see their push consumer through ``PushConsumerView``, so they need not
import it (the consumer imports them)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from rmq.client._util import BoundedTaskSet, is_async_callable
from rmq.client.consumer_base import MessageModel
from rmq.client.instance import MQClientInstance
from rmq.client.offset_store import OffsetStore
from rmq.client.rebalance import RebalanceImpl
from rmq.protocol.bodies import MessageQueue
from rmq.protocol.message import MessageExt

__all__ = ["ConsumeServiceBase", "PushConsumerView"]

log = logging.getLogger("rmq.client.consumer")


class PushConsumerView(Protocol):
    """What a consume service uses of its PushConsumer."""

    group: str
    instance: MQClientInstance | None
    offset_store: OffsetStore | None
    rebalance: RebalanceImpl
    message_model: MessageModel
    consume_thread_max: int
    consume_message_batch_max_size: int
    max_reconsume_times: int
    send_back_to_broker: bool
    local_retry_delay_ms: int
    consume_timeout_ms: int
    suspend_current_queue_time_millis: int

    def reset_retry_topic(self, msgs: list[MessageExt]) -> None: ...
    def effective_max_reconsume_times(self) -> int: ...
    async def send_back_through_producer(
        self, msg: MessageExt, reconsume_times: int, max_reconsume_times: int
    ) -> None: ...


class ConsumeServiceBase:
    def __init__(self, consumer: PushConsumerView, listener: Callable[..., Any]) -> None:
        self.consumer = consumer
        self.listener = listener
        self.is_async = is_async_callable(listener)
        self.executor: ThreadPoolExecutor | None = None
        # an async listener runs on the loop: this bounds how many run at once, as the
        # thread pool bounds a blocking one (the orderly service's tasks; the concurrent
        # service's fixed set of workers is its own bound)
        self.semaphore = asyncio.Semaphore(consumer.consume_thread_max)
        self.tasks = BoundedTaskSet(log)
        self.stopped = False
        self._stop = asyncio.Event()  # set with ``stopped``: ends the waits at once

    def _start_executor(self) -> None:
        if not self.is_async:
            self.executor = ThreadPoolExecutor(
                self.consumer.consume_thread_max, thread_name_prefix=f"consume-{self.consumer.group}"
            )

    async def _end_tasks(self) -> None:
        await self.tasks.close_within(5.0, f"{self.consumer.group} consume tasks")
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[Any]:
        return self.tasks.spawn(coro, f"{self.consumer.group} {name}")

    def _count_consume(self, topic: str, begin: float | None, ok: int = 0, failed: int = 0) -> None:
        """ConsumerStatsManager: the listener's time since ``begin`` (monotonic) and / or a
        batch's outcome, under the queue's topic (GET_CONSUMER_RUNNING_INFO's rates)."""
        inst = self.consumer.instance
        if inst is None:
            return
        if begin is not None:
            inst.consumer_stats.inc_consume_rt(self.consumer.group, topic, (time.monotonic() - begin) * 1000)
        if ok or failed:
            inst.consumer_stats.inc_consume_result(self.consumer.group, topic, ok, failed)

    async def _listen(self, msgs: list[MessageExt], ctx: object, mq: MessageQueue) -> Any:
        """The listener's answer for one batch of ``mq``, or None when it raised (logged, as
        ConsumeRequest.run does: the caller treats it as a failed batch); its time is counted
        under the queue's topic either way."""
        status: Any = None
        begin = time.monotonic()
        try:
            status = await self._call_listener(msgs, ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("consumeMessage exception, group=%s %s", self.consumer.group, mq)
        self._count_consume(mq.topic, begin)
        return status

    async def _call_listener(self, msgs: list[MessageExt], ctx: object) -> Any:
        if self.is_async:
            async with self.semaphore:
                return await self.listener(msgs, ctx)
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self.executor, self.listener, msgs, ctx)
        if inspect.isawaitable(result):
            result = await result
        return result
