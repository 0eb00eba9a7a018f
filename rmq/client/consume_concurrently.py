"""Concurrent consumption for ``PushConsumer`` (Java ``ConsumeMessageConcurrentlyService``).

    def listener(msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext) -> ConsumeResult:
        ...
        return ConsumeResult.SUCCESS

Messages go to the listener ``consume_message_batch_max_size`` (1) at a time, on a pool
of ``consume_thread_max`` (20) threads (a coroutine listener runs on the loop, at most
``consume_thread_max`` at once). The committable offset is the smallest offset still
being consumed.

As Java's ConsumeRequests go to a thread pool's queue, a pulled batch becomes consume
requests (slices of ``consume_message_batch_max_size`` messages) in one FIFO, taken by
``consume_thread_max`` worker coroutines (a blocking listener: each worker hands its call
to the thread pool). A task per request cost a Task, a done callback and a semaphore wait
per message, and a backlog put hundreds of thousands of live tasks in the cyclic GC's way.
The FIFO holds each pulled batch once with a cursor and a worker cuts its slice when it
takes it: a slice made at submit time would be two more GC-tracked objects per cached
message (up to ``pull_threshold_for_queue`` per queue), and every full collection walks them.
For the same reason a pulled batch arrives undecoded (``PulledBatch``) and the first worker
to take a request of it decodes it. RECONSUME_LATER (or an exception, or None) hands the message back to
the broker (CONSUMER_SEND_MSG_BACK, else through the client's inner producer, else it
is consumed again locally after ``local_retry_delay_ms``); in BROADCASTING mode a
failed message is dropped. ``consume_timeout_ms``: a message whose listener call has
run that long goes back to the broker (delay level 3).
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rmq.client.consume_service import ConsumeServiceBase, PushConsumerView
from rmq.client.consumer_base import MessageModel
from rmq.client.process_queue import ProcessQueue, PulledBatch
from rmq.common.clock import now_ms
from rmq.common.mixall import retry_topic
from rmq.protocol.bodies import MessageQueue
from rmq.protocol.message import MessageConst, MessageExt
from rmq.runtime.service import PeriodicService

__all__ = ["ConsumeResult", "ConsumeConcurrentlyContext", "MessageListener", "ConsumeMessageConcurrentlyService"]

log = logging.getLogger("rmq.client.consumer")

#: A worker whose requests never suspend (a coroutine listener that answers at once)
#: yields to the loop after this many, so pulls, heartbeats and the other workers run.
_YIELD_EVERY = 32


class _Batch:
    """A pulled batch in the FIFO; ``pos``: its first message not taken yet, ``size``: the
    messages per request (the batch size when it was submitted), ``left``: its requests not
    taken yet. ``msgs`` is None until a worker decodes ``pulled``."""

    __slots__ = ("msgs", "pulled", "pos", "size", "left", "pq", "mq")

    def __init__(
        self,
        msgs: list[MessageExt] | None,
        pulled: PulledBatch | None,
        size: int,
        left: int,
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> None:
        self.msgs = msgs
        self.pulled = pulled
        self.pos = 0
        self.size = size
        self.left = left
        self.pq = pq
        self.mq = mq


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
        self._requests: deque[_Batch] = deque()
        self._idle_workers: deque[asyncio.Future[None]] = deque()
        # requests of a process queue not finished yet (queued or running), for wait_idle
        self._pending: dict[ProcessQueue, int] = {}
        self._pending_total = 0
        self._queued = 0  # requests not taken by a worker yet
        self._workers = max(1, consumer.consume_thread_max)
        self._idle_waiters: dict[ProcessQueue | None, list[asyncio.Future[None]]] = {}  # None: all
        # per topic: listener seconds, listener calls, consumed, failed (see _count_consume)
        self._tally: dict[str, list[float]] = {}
        self._tally_since = time.monotonic()
        self._send_back_warned = False
        period = min(consumer.consume_timeout_ms, 60000)
        # ProcessQueue.cleanExpiredMsg, every consume_timeout (at most 1 min)
        self._clean_expired = PeriodicService(
            f"{consumer.group} clean-expired", period / 1000, self._clean_expired_all, log
        )

    def start(self) -> None:
        self._start_executor()
        for i in range(self._workers):
            self._spawn(self._worker(), f"consume worker {i}")
        if self.consumer.consume_timeout_ms > 0:
            self._clean_expired.start()

    async def shutdown(self, await_terminate_ms: int) -> None:
        self.stopped = True
        self._stop.set()
        await self._clean_expired.stop(cancel=True)
        if self._pending_total and await_terminate_ms > 0:
            # as the thread pool's awaitTermination: the queued requests may still run
            await self._wait_for(None, await_terminate_ms / 1000)
        await self._end_tasks()
        self._flush_tally(time.monotonic())

    # ------------------------------------------------------------------ requests
    def submit_consume_request(self, msgs: list[MessageExt] | PulledBatch, pq: ProcessQueue, mq: MessageQueue) -> None:
        """Queue ``msgs`` (decoded messages, or a pulled batch decoded when first taken) as
        requests of ``consume_message_batch_max_size`` messages."""
        if not len(msgs):
            return
        n = max(1, self.consumer.consume_message_batch_max_size)
        count = -(-len(msgs) // n)  # the requests it makes
        if isinstance(msgs, PulledBatch):
            self._requests.append(_Batch(None, msgs, n, count, pq, mq))
        else:
            self._requests.append(_Batch(msgs, None, n, count, pq, mq))
        self._pending[pq] = self._pending.get(pq, 0) + count
        self._pending_total += count
        self._queued += count
        idle = self._idle_workers
        while count and idle:
            w = idle.popleft()
            if not w.done():
                w.set_result(None)
                count -= 1

    def submit_consume_request_later(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        async def later() -> None:
            await asyncio.sleep(self.consumer.local_retry_delay_ms / 1000)
            self.submit_consume_request(msgs, pq, mq)

        self._spawn(later(), f"consume later {mq}")

    async def _worker(self) -> None:
        """ConsumeRequest.run on one of ``consume_thread_max`` workers, oldest first."""
        requests = self._requests
        loop = asyncio.get_running_loop()
        run = 0
        while True:
            if not requests:
                self._flush_tally(time.monotonic())
                w: asyncio.Future[None] = loop.create_future()
                self._idle_workers.append(w)
                await w
                run = 0
                continue
            batch = requests[0]
            pos, size, whole = batch.pos, batch.size, batch.msgs
            pq, mq = batch.pq, batch.mq
            if whole is None:
                assert batch.pulled is not None
                # decoded now, by the first worker to take it (a dropped queue's is not)
                whole = batch.msgs = [] if pq.dropped else pq.messages(batch.pulled)
                batch.pulled = None
            # Under a backlog a worker takes several requests of one batch and settles their
            # offsets together (one ProcessQueue removal and offset update instead of one
            # per request); with fewer requests queued than workers, one at a time, so
            # every worker gets one as with a thread pool.
            k = max(1, min(self._queued // self._workers, _YIELD_EVERY))
            if k >= batch.left:
                requests.popleft()
                k = batch.left
                end = len(whole)
            else:
                end = pos + k * size
                batch.pos = end
                batch.left -= k
            self._queued -= k
            # (a decoded batch can be shorter than the requests counted for it: a record
            # that did not decode, or a dropped queue; its slices are then empty)
            msgs = whole[pos:end] if pos or end < len(whole) else whole
            try:
                if msgs:
                    await self._consume_run(msgs, size, pq, mq)
            finally:
                self._requests_done(pq, k)
            run += k
            if run >= _YIELD_EVERY:
                run = 0
                await asyncio.sleep(0)

    async def _consume_run(self, msgs: list[MessageExt], size: int, pq: ProcessQueue, mq: MessageQueue) -> None:
        """The requests of ``msgs`` (``size`` messages each) one after the other; the fully
        consumed ones leave the process queue together at the end."""
        if size >= len(msgs):
            chunks = [msgs]
        else:
            chunks = [msgs[i : i + size] for i in range(0, len(msgs), size)]
        done: list[MessageExt] = []
        try:
            if not self.is_async and len(chunks) > 1:
                done = await self._consume_blocking_run(chunks, pq, mq)
            else:
                for chunk in chunks:
                    if await self._consume(chunk, pq, mq):
                        done += chunk
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("consume request of %s failed, group=%s", mq, self.consumer.group)
        if done:
            self._count_consume(mq.topic, None, ok=len(done))
            self._settle(done, pq, mq)

    async def _consume_blocking_run(
        self, chunks: list[list[MessageExt]], pq: ProcessQueue, mq: MessageQueue
    ) -> list[MessageExt]:
        """A blocking listener's calls for a run of requests in one thread-pool job: the
        hand-off to a thread and back cost more than a listener that answers at once, so
        one per run instead of one per request. The fully consumed messages are returned."""
        if self._dropped_before(pq, mq):
            return []
        ctxs = [ConsumeConcurrentlyContext(mq) for _ in chunks]
        for chunk in chunks:
            self.consumer.reset_retry_topic(chunk)
        loop = asyncio.get_running_loop()
        answers = await loop.run_in_executor(self.executor, self._listen_blocking, chunks, ctxs, pq)
        done: list[MessageExt] = []
        # requests the thread did not call (the queue was dropped) end as _consume would
        for chunk, ctx, (status, seconds) in zip(chunks, ctxs, answers, strict=False):
            self._count_consume(mq.topic, time.monotonic() - seconds)
            if inspect.isawaitable(status):
                status = await status
            if await self._finish(status, ctx, chunk, pq, mq):
                done += chunk
        return done

    def _listen_blocking(
        self, chunks: list[list[MessageExt]], ctxs: list[ConsumeConcurrentlyContext], pq: ProcessQueue
    ) -> list[tuple[object, float]]:
        """On a pool thread: the listener for each request in turn, with its start stamp;
        (answer or None when it raised, seconds) per request called."""
        out: list[tuple[object, float]] = []
        for chunk, ctx in zip(chunks, ctxs, strict=True):
            if pq.dropped:
                break
            start = str(now_ms())
            for m in chunk:
                m.properties[MessageConst.CONSUME_START_TIMESTAMP] = start
            status: object = None
            begin = time.monotonic()
            try:
                status = self.listener(chunk, ctx)
            except Exception:
                log.exception("consumeMessage exception, group=%s %s", self.consumer.group, ctx.message_queue)
            out.append((status, time.monotonic() - begin))
        return out

    def _requests_done(self, pq: ProcessQueue, k: int) -> None:
        left = self._pending[pq] - k
        self._pending_total -= k
        if left:
            self._pending[pq] = left
        else:
            del self._pending[pq]
            self._wake(pq)
        if not self._pending_total:
            self._wake(None)

    def _wake(self, key: ProcessQueue | None) -> None:
        for f in self._idle_waiters.pop(key, ()):
            if not f.done():
                f.set_result(None)

    async def _wait_for(self, key: ProcessQueue | None, timeout: float) -> bool:
        """Wait (bounded) until ``key``'s requests (None: all) are finished."""
        if (self._pending_total if key is None else self._pending.get(key, 0)) == 0:
            return True
        f: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._idle_waiters.setdefault(key, []).append(f)
        try:
            await asyncio.wait_for(f, timeout)
            return True
        except TimeoutError:
            return False

    async def wait_idle(self, pq: ProcessQueue, timeout: float) -> bool:
        """Wait (bounded) for the consume requests of ``pq`` to end; True when they did."""
        return await self._wait_for(pq, timeout)

    def _count_consume(self, topic: str, begin: float | None, ok: int = 0, failed: int = 0) -> None:
        """The base's figures, summed per topic and handed to the stats manager once a
        second and whenever a worker runs out of requests: two stats calls per message
        were a sixth of the consume path's time."""
        t = self._tally.get(topic)
        if t is None:
            t = self._tally[topic] = [0.0, 0, 0, 0]
        t[2] += ok
        t[3] += failed
        if begin is not None:
            now = time.monotonic()
            t[0] += now - begin
            t[1] += 1
            if now - self._tally_since >= 1.0:
                self._flush_tally(now)

    def _flush_tally(self, now: float) -> None:
        self._tally_since = now
        if not self._tally:
            return
        tally, self._tally = self._tally, {}
        inst = self.consumer.instance
        if inst is None:
            return
        stats, group = inst.consumer_stats, self.consumer.group
        for topic, (seconds, calls, ok, failed) in tally.items():
            if calls:
                stats.inc_consume_rt(group, topic, seconds * 1000, int(calls))
            if ok or failed:
                stats.inc_consume_result(group, topic, int(ok), int(failed))

    async def _call_listener(self, msgs: list[MessageExt], ctx: object) -> object:
        if self.is_async:
            return await self.listener(msgs, ctx)  # the workers bound the concurrency
        return await super()._call_listener(msgs, ctx)

    async def _consume(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> bool:
        """ConsumeRequest.run for one request; True when every message was consumed (the
        caller settles them), else the outcome is settled here."""
        if self._dropped_before(pq, mq):
            return False
        ctx = ConsumeConcurrentlyContext(mq)
        self.consumer.reset_retry_topic(msgs)
        start = str(now_ms())
        for m in msgs:
            m.properties[MessageConst.CONSUME_START_TIMESTAMP] = start
        status = await self._listen(msgs, ctx, mq)
        return await self._finish(status, ctx, msgs, pq, mq)

    def _dropped_before(self, pq: ProcessQueue, mq: MessageQueue) -> bool:
        if pq.dropped:
            log.info(
                "the message queue not be able to consume, because it's dropped. group=%s %s", self.consumer.group, mq
            )
        return pq.dropped

    async def _finish(
        self,
        status: object,
        ctx: ConsumeConcurrentlyContext,
        msgs: list[MessageExt],
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> bool:
        """The listener's answer for one request: True when all of it was consumed (the
        caller settles it), else the failed messages go back here."""
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
            return False
        if status is ConsumeResult.SUCCESS and ctx.ack_index >= len(msgs) - 1:
            return True  # all consumed, the usual case: nothing goes back
        await self.process_consume_result(status, ctx, msgs, pq, mq)
        return False

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
        self._settle(done, pq, mq)

    def _settle(self, done: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """``done`` leave the process queue; the offset moves to the smallest still in it."""
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
