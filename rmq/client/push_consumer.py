"""PushConsumer (Java ``DefaultMQPushConsumer``): concurrent or orderly listener.

    def listener(msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext) -> ConsumeResult:
        ...
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("my-group", "127.0.0.1:9876", listener=listener)
    consumer.subscribe("T", "tagA || tagB")
    await consumer.start()

An orderly listener (``register_message_listener_orderly`` or ``orderly=True``) gets
each queue's messages in order, one batch at a time, under the queue's broker lock:
see ``rmq.client.consume_orderly``.

How it works, as RocketMQ does it:

* Rebalance (every 20 s and on NOTIFY_CONSUMER_IDS_CHANGED) assigns queues to the
  group's consumers (AVG by default); each assigned queue gets a pull loop.
* A pull loop long-polls its queue (broker holds the request up to 15 s; socket timeout
  30 s), asks for ``pull_batch_size`` (32) messages, and stops asking while the queue
  holds more than ``pull_threshold_for_queue`` (1000) messages or
  ``pull_threshold_size_for_queue`` MiB, or spans more than
  ``consume_concurrently_max_span`` offsets (``pull_threshold_for_topic`` /
  ``pull_threshold_size_for_topic``, -1 = off: a limit shared out over the queues held
  sets those two at each rebalance). Every pull piggy-backs the queue's consumed
  offset (COMMIT_OFFSET flag). Pulled batches are cached undecoded and decoded when
  consumed (process_queue.py says why).
* Messages go to the listener ``consume_message_batch_max_size`` (1) at a time, on a
  pool of ``consume_thread_max`` (20) threads (a coroutine listener runs on the loop,
  at most ``consume_thread_max`` at once). The committable offset is the smallest
  offset still being consumed.
* Offsets go to the broker every 5 s, when a queue moves to another consumer and on
  shutdown.
* RECONSUME_LATER (or an exception, or None): the message is handed back to the broker
  with CONSUMER_SEND_MSG_BACK (retry topic ``%RETRY%<group>``, subscribed
  automatically in CLUSTERING mode; header ``maxReconsumeTimes`` = this consumer's
  ``max_reconsume_times``, -1 = 16; past it the broker dead-letters the message into
  ``%DLQ%<group>``). If that request fails, the message is sent to the retry topic
  through the client's inner producer (RECONSUME_TIME / MAX_RECONSUME_TIMES
  properties, as Java); if that fails too it is delivered again locally after
  ``local_retry_delay_ms`` and its offset is not committed until it succeeds. The
  listener sees a retried message under its original topic (RETRY_TOPIC), with
  ``reconsume_times`` counting the deliveries before and ORIGIN_MESSAGE_ID set.
* ``consume_timeout_ms`` (15 min): a message whose listener call has run that long is
  handed back to the broker (delay level 3) and no longer holds the queue's offset.
* BROADCASTING: every consumer of the group gets every message; offsets are kept per
  client in a local file (``LocalFileOffsetStore``, ``<dir>/<clientId>/<group>/
  offsets.json``, ``local_offset_store_dir``), written every 5 s and on shutdown.
  Failed messages are not retried.
* RESET_CONSUMER_CLIENT_OFFSET (``rmq admin resetOffsetByTime``): the queues named are
  dropped with what was pulled for them, in-flight consumption is let finish (bounded),
  and pulling continues from the new offsets; no restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta
from typing import Any

from rmq.client.config import ClientConfig
from rmq.client.consume_concurrently import (
    ConsumeConcurrentlyContext,
    ConsumeMessageConcurrentlyService,
    ConsumeResult,
    MessageListener,
)
from rmq.client.consume_orderly import (
    ConsumeMessageOrderlyService,
    ConsumeOrderlyContext,
    ConsumeOrderlyResult,
    MessageListenerOrderly,
)
from rmq.client.consumer_base import (
    CREATE_JUST,
    RUNNING,
    SHUTDOWN_ALREADY,
    ConsumeFromWhere,
    ConsumerBase,
    ConsumerRebalanceImpl,
    MessageModel,
    compute_pull_from_where_push,
    parse_consume_timestamp,
)
from rmq.client.errors import MQBrokerError, MQClientError
from rmq.client.instance import InnerProducerFactory
from rmq.client.message import Message, PullStatus
from rmq.client.offset_store import LocalFileOffsetStore, OffsetStore, ReadOffsetType
from rmq.client.process_queue import ProcessQueue
from rmq.client.producer import new_inner_producer
from rmq.client.rebalance import AVG, AllocateStrategy, PullRequest
from rmq.client.running_info import consume_message_directly, consumer_running_info
from rmq.common.clock import now_ms
from rmq.common.mixall import is_retry_topic, retry_topic
from rmq.protocol.bodies import MessageQueue, SubscriptionData
from rmq.protocol.codes import PullSysFlag, ResponseCode
from rmq.protocol.message import MessageConst, MessageExt
from rmq.protocol.running_info import ConsumeMessageDirectlyResult, ConsumerRunningInfo

__all__ = [
    "PushConsumer",
    "ConsumeResult",
    "ConsumeConcurrentlyContext",
    "ConsumeFromWhere",
    "MessageModel",
    "MessageListener",
    "ConsumeMessageConcurrentlyService",
    "ConsumeOrderlyResult",
    "ConsumeOrderlyContext",
    "MessageListenerOrderly",
    "RebalancePushImpl",
    "parse_consume_timestamp",
    "compute_pull_from_where_push",
]

log = logging.getLogger("rmq.client.consumer")

BROKER_SUSPEND_MAX_TIME_MILLIS = 15000
CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND = 30000
PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION = 3000
PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL = 50
PULL_TIME_DELAY_MILLS_WHEN_SUSPEND = 1000


class RebalancePushImpl(ConsumerRebalanceImpl):
    consume_type = "CONSUME_PASSIVELY"
    consumer: PushConsumer

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        c = self.consumer
        store = c.offset_store
        assert store is not None
        service = c.consume_service
        if (
            c.orderly
            and c.message_model is MessageModel.CLUSTERING
            and isinstance(service, ConsumeMessageOrderlyService)
        ):
            # Give the queue away only after the batch in flight ended and its offset is
            # written: the next owner locks it after our unlock and starts from there.
            lock = service.mq_lock(mq)
            try:
                async with asyncio.timeout(1.0):
                    await lock.acquire()
            except TimeoutError:
                pq.try_unlock_times += 1
                log.warning(
                    "[WRONG]mq is consuming, so can not unlock it, %s. maybe hanged for a while, %d",
                    mq,
                    pq.try_unlock_times,
                )
                return False
            try:
                await store.persist(mq)
                store.remove_offset(mq)
                await self.unlock(mq, oneway=False)
            finally:
                lock.release()
            return True
        await store.persist(mq)
        store.remove_offset(mq)
        return True

    def dispatch_pull_requests(self, requests: list[PullRequest]) -> None:
        for r in requests:
            self.consumer.execute_pull_request_immediately(r)

    async def message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
        """RebalancePushImpl.messageQueueChanged: a per-topic cache limit (-1 = none) is
        shared out over the queues held now, as the per-queue thresholds."""
        c = self.consumer
        held = len(self.process_queue_table)
        if held:
            if c.pull_threshold_for_topic != -1:
                c.pull_threshold_for_queue = max(1, c.pull_threshold_for_topic // held)
            if c.pull_threshold_size_for_topic != -1:
                c.pull_threshold_size_for_queue = max(1, c.pull_threshold_size_for_topic // held)


class PushConsumer(ConsumerBase):
    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        listener: MessageListener | None = None,
        config: ClientConfig | None = None,
        message_model: MessageModel | str = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere | str = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: str | int | datetime | None = None,
        allocate_strategy: AllocateStrategy = AVG,
        consume_thread_max: int = 20,
        consume_message_batch_max_size: int = 1,
        pull_batch_size: int = 32,
        pull_interval: int = 0,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        pull_threshold_for_topic: int = -1,
        pull_threshold_size_for_topic: int = -1,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = -1,
        post_subscription_when_pull: bool = False,
        send_back_to_broker: bool = True,
        local_retry_delay_ms: int = 5000,
        await_termination_ms: int = 5000,
        offset_store: OffsetStore | None = None,
        orderly: bool = False,
        suspend_current_queue_time_millis: int = 1000,
        consume_timeout_ms: int = 15 * 60 * 1000,
        **config_kwargs: Any,
    ) -> None:
        super().__init__(
            group,
            namesrv_addr,
            config,
            config_kwargs,
            message_model,
            consume_from_where,
            consume_timestamp,
            allocate_strategy,
            offset_store,
        )
        self.listener: MessageListener | MessageListenerOrderly | None = listener
        if self.consume_timestamp is None:
            self.consume_timestamp = (datetime.now() - timedelta(minutes=30)).strftime("%Y%m%d%H%M%S")
        self.consume_thread_max = consume_thread_max
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_batch_size = pull_batch_size
        self.pull_interval = pull_interval
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self._retry_topic_of: tuple[str, str] | None = None  # (group, its retry topic)
        # messages / MiB per topic, shared out over the queues held at each rebalance
        self.pull_threshold_for_topic = pull_threshold_for_topic
        self.pull_threshold_size_for_topic = pull_threshold_size_for_topic
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.max_reconsume_times = max_reconsume_times
        self.post_subscription_when_pull = post_subscription_when_pull
        self.send_back_to_broker = send_back_to_broker
        self.local_retry_delay_ms = local_retry_delay_ms
        self.await_termination_ms = await_termination_ms
        self.orderly = orderly
        self.suspend_current_queue_time_millis = suspend_current_queue_time_millis
        self.consume_timeout_ms = consume_timeout_ms
        self.consume_service: ConsumeMessageConcurrentlyService | ConsumeMessageOrderlyService | None = None
        self._paused = False
        self._flow_control_times = 0
        self._last_forced_heartbeat = 0.0

    def _new_rebalance(self) -> RebalancePushImpl:
        return RebalancePushImpl(self)

    def _inner_producer_factory(self) -> InnerProducerFactory:
        return new_inner_producer

    # ------------------------------------------------------------------ configuration
    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Subscribe to ``topic`` with a TAG expression (``*`` or ``a || b``)."""
        self._subscriptions[topic] = expression or "*"
        if self._state == RUNNING:
            self._subscribe_now(topic, expression)

    def register_message_listener(self, listener: MessageListener) -> None:
        """A concurrent listener (``msgs, ConsumeConcurrentlyContext -> ConsumeResult``)."""
        self.listener = listener
        self.orderly = False

    register_message_listener_concurrently = register_message_listener

    def register_message_listener_orderly(self, listener: MessageListenerOrderly) -> None:
        """An orderly listener (``msgs, ConsumeOrderlyContext -> ConsumeOrderlyResult``)."""
        self.listener = listener
        self.orderly = True

    def suspend(self) -> None:
        """Pause pulling (``resume`` to continue)."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    def effective_max_reconsume_times(self) -> int:
        """-1 means 16 for a concurrent listener and unbounded for an orderly one."""
        if self.max_reconsume_times == -1:
            return 2**31 - 1 if self.orderly else 16
        return self.max_reconsume_times

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._state == RUNNING:
            return
        if self._state != CREATE_JUST:
            raise MQClientError(f"The PushConsumer service state not OK, maybe started once, {self._state}")
        if self.listener is None:
            raise MQClientError("messageListener is null")
        if not self._subscriptions:
            raise MQClientError("no subscription: call subscribe(topic, expression) first")
        now = now_ms()
        for topic, expr in self._subscriptions.items():
            self.rebalance.subscription_inner[topic] = SubscriptionData.build(topic, expr, None, now)
        if self.message_model is MessageModel.CLUSTERING:
            rt = retry_topic(self.group)
            self.rebalance.subscription_inner[rt] = SubscriptionData.build(rt, "*", None, now)
        self.rebalance.message_model = self.message_model.value
        inst = self._create_instance()
        self.rebalance.is_order = self.orderly
        service: ConsumeMessageConcurrentlyService | ConsumeMessageOrderlyService
        if self.orderly:
            service = ConsumeMessageOrderlyService(self, self.listener)  # type: ignore[arg-type]  # orderly=True: an orderly listener
        else:
            service = ConsumeMessageConcurrentlyService(self, self.listener)  # type: ignore[arg-type]  # orderly=False: a concurrent listener
        self.consume_service = service
        service.start()
        try:
            await self._start_instance(inst)
        except BaseException:
            await service.shutdown(0)
            raise
        await self._announce_subscriptions(inst)
        log.info("push consumer %s started (client %s)", self.group, inst.client_id)

    async def shutdown(self) -> None:
        """Stop pulling, let in-flight consumption finish (``await_termination_ms``),
        commit offsets, unregister from the brokers."""
        if self._state != RUNNING:
            return
        self._state = SHUTDOWN_ALREADY
        await self._end_side_tasks("pull tasks")
        assert self.consume_service is not None
        await self.consume_service.shutdown(self.await_termination_ms)
        await self.persist_consumer_offset(oneway=False)
        if self.orderly and self.message_model is MessageModel.CLUSTERING:
            # after the offsets are written: whoever locks these queues next starts there
            await self.rebalance.unlock_all(oneway=False)
        await self._shutdown_instance()
        log.info("push consumer %s shut down", self.group)

    # ------------------------------------------------------------------ MQConsumerInner
    async def persist_consumer_offset(self, oneway: bool = True) -> None:
        await self._persist(list(self.rebalance.process_queue_table), oneway)

    async def consumer_running_info(self) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO (rmq.client.running_info)."""
        return await consumer_running_info(self)

    async def consume_message_directly(self, msg: MessageExt, broker_name: str) -> ConsumeMessageDirectlyResult:
        """CONSUME_MESSAGE_DIRECTLY: ``msg`` to the listener once, outside the pull flow."""
        if self.consume_service is None:
            raise MQClientError(f"The PushConsumer {self.group} is not started")
        return await consume_message_directly(self.consume_service, msg, broker_name)

    # ------------------------------------------------------------------ sending back
    async def send_back_through_producer(self, msg: MessageExt, reconsume_times: int, max_reconsume_times: int) -> None:
        """DefaultMQPushConsumerImpl.sendMessageBack's fallback (and the orderly service's
        way back): the failed message goes to ``%RETRY%<group>`` through the instance's
        producer with RECONSUME_TIME / MAX_RECONSUME_TIMES (the broker dead-letters it
        past the maximum)."""
        inst = self.instance
        assert inst is not None
        props = dict(msg.properties)
        for k in (
            MessageConst.TRANSACTION_PREPARED,
            MessageConst.MIN_OFFSET,
            MessageConst.MAX_OFFSET,
            MessageConst.CONSUME_START_TIMESTAMP,
        ):
            props.pop(k, None)
        if not props.get(MessageConst.ORIGIN_MESSAGE_ID):
            props[MessageConst.ORIGIN_MESSAGE_ID] = msg.msg_id
        props[MessageConst.RETRY_TOPIC] = msg.topic
        props[MessageConst.RECONSUME_TIME] = str(reconsume_times)
        props[MessageConst.MAX_RECONSUME_TIMES] = str(max_reconsume_times)
        new = Message(
            retry_topic(self.group), msg.body, properties=props, flag=msg.flag, delay_time_level=3 + msg.reconsume_times
        )
        producer = await inst.default_producer()
        await producer.send(new)

    def _retry_topic(self) -> str:
        """``%RETRY%<group>``, made once per group rather than per consume request."""
        cached = self._retry_topic_of
        if cached is None or cached[0] != self.group:
            cached = self._retry_topic_of = (self.group, retry_topic(self.group))
        return cached[1]

    def reset_retry_topic(self, msgs: list[MessageExt]) -> None:
        """Messages from ``%RETRY%<group>`` are shown under their original topic."""
        rt = self._retry_topic()
        for m in msgs:
            real = m.properties.get(MessageConst.RETRY_TOPIC)
            if real is not None and m.topic == rt:
                m.topic = real

    # ------------------------------------------------------------------ pulling
    def execute_pull_request_immediately(self, req: PullRequest) -> None:
        self._tasks.spawn(self._pull_loop(req), f"pull {req.message_queue}")

    async def _pull_loop(self, req: PullRequest) -> None:
        try:
            delay = 0
            while self._state == RUNNING and not req.process_queue.dropped:
                if delay:
                    await asyncio.sleep(delay / 1000)
                    delay = 0
                    continue
                delay = await self._pull_once(req)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pull loop of %s crashed", req.message_queue)

    async def _pull_once(self, req: PullRequest) -> int:
        """One step of DefaultMQPushConsumerImpl.pullMessage; returns the delay (ms)
        before the next step."""
        pq = req.process_queue
        mq = req.message_queue
        pq.last_pull_timestamp = now_ms()
        if self._paused:
            return PULL_TIME_DELAY_MILLS_WHEN_SUSPEND
        if (
            pq.msg_count > self.pull_threshold_for_queue
            or pq.msg_size_mib > self.pull_threshold_size_for_queue
            or (not self.orderly and pq.max_span() > self.consume_concurrently_max_span)
        ):
            self._flow_control_times += 1
            if self._flow_control_times % 1000 == 0:
                log.warning(
                    "the cached messages of %s exceed the threshold (%d msgs, %.1f MiB, span %d), flow control",
                    mq,
                    pq.msg_count,
                    pq.msg_size_mib,
                    pq.max_span(),
                )
            return PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
        sd = self.rebalance.subscription_inner.get(mq.topic)
        if sd is None:
            log.warning("find the consumer's subscription failed, %s", mq)
            return PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION
        store = self.offset_store
        assert store is not None and self.pull_api is not None
        if self.orderly and self.message_model is MessageModel.CLUSTERING:
            if not pq.locked:
                log.info("pull message later because not locked in broker, %s", mq)
                return PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION
            if not req.previously_locked:
                # first pull under the lock: start where the previous owner committed
                try:
                    offset = await self.rebalance.compute_pull_from_where(mq)
                except Exception as e:
                    log.warning("compute the pull offset of %s failed: %s", mq, e)
                    return PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION
                if offset < 0:
                    return PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION
                if pq.dropped or self._state != RUNNING:
                    return 0
                if offset < req.next_offset:
                    log.info(
                        "[NOTIFYME]the first time to pull message, but pull request "
                        "offset larger than broker consume offset, %s",
                        mq,
                    )
                log.info(
                    "the first time to pull message, so fix offset from broker. pull request: %s %d -> %d",
                    mq,
                    req.next_offset,
                    offset,
                )
                req.previously_locked = True
                req.next_offset = offset
        commit_offset = 0
        commit_enable = False
        if self.message_model is MessageModel.CLUSTERING:
            commit_offset = await store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY)
            commit_enable = commit_offset > 0
            commit_offset = max(commit_offset, 0)
        sub_expression = None
        if self.post_subscription_when_pull and not sd.class_filter_mode:
            sub_expression = sd.sub_string
        sys_flag = PullSysFlag.build(commit_enable, True, sub_expression is not None)
        begin = time.monotonic()
        try:
            result = await self.pull_api.pull_kernel_impl(
                mq,
                sub_expression,
                sd.expression_type,
                sd.sub_version,
                req.next_offset,
                self.pull_batch_size,
                sys_flag,
                commit_offset,
                BROKER_SUSPEND_MAX_TIME_MILLIS,
                CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND,
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if not is_retry_topic(mq.topic):
                log.warning("execute the pull request of %s failed: %s", mq, e)
            if isinstance(e, MQBrokerError) and e.code in (
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                ResponseCode.SUBSCRIPTION_NOT_LATEST,
            ):
                # The broker lost (restart) or has an old copy of our subscription: tell
                # it again now rather than at the next 30 s heartbeat.
                self._heartbeat_soon()
            return PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION
        if pq.dropped or self._state != RUNNING:
            return 0
        # undecoded: the messages are decoded when consumed (process_queue.py says why)
        batch = self.pull_api.pulled_batch(mq, result, sd)
        status = result.status
        if status is PullStatus.FOUND:
            req.next_offset = result.next_begin_offset
            if batch is not None:
                assert self.instance is not None
                rt_ms = (time.monotonic() - begin) * 1000
                self.instance.consumer_stats.inc_pull(self.group, mq.topic, rt_ms, len(batch))
                dispatch = pq.put_batch(batch, result.max_offset)
                service = self.consume_service
                assert service is not None
                if isinstance(service, ConsumeMessageOrderlyService):
                    service.submit_consume_request(None, pq, mq, dispatch)
                else:
                    service.submit_consume_request(batch, pq, mq)
                return self.pull_interval
            self._correct_tags_offset(req)
            return 0
        if status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
            req.next_offset = result.next_begin_offset
            self._correct_tags_offset(req)
            return 0
        # OFFSET_ILLEGAL: the broker corrected us. Persist the corrected offset, drop
        # the queue; rebalance re-creates it from that offset.
        log.warning(
            "the pull request offset illegal, %s offset %d, next %d", mq, req.next_offset, result.next_begin_offset
        )
        req.next_offset = result.next_begin_offset
        pq.dropped = True
        if isinstance(self.consume_service, ConsumeMessageOrderlyService):
            async with self.consume_service.mq_lock(mq):  # the batch in flight first
                pass
        store.update_offset(mq, req.next_offset, False)
        await store.persist(mq)
        await self.rebalance.remove_process_queue(mq)
        assert self.instance is not None
        self.instance.rebalance_immediately()
        return 0

    def _heartbeat_soon(self) -> None:
        now = time.monotonic()
        if now - self._last_forced_heartbeat < 1.0 or self.instance is None:
            return
        self._last_forced_heartbeat = now
        self._tasks.spawn(self.instance.send_heartbeat_to_all_brokers(), "heartbeat-soon")

    def _correct_tags_offset(self, req: PullRequest) -> None:
        """Nothing in flight: the consumed offset may move to the next pull offset."""
        if req.process_queue.msg_count == 0:
            assert self.offset_store is not None
            self.offset_store.update_offset(req.message_queue, req.next_offset, True)

    # ------------------------------------------------------------------ offset reset
    async def reset_offset(
        self, topic: str, offset_table: dict[MessageQueue, int], wait_inflight_ms: int = 10000
    ) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: continue the named queues of ``topic`` from the
        given offsets, without a restart (MQClientInstance.resetOffset).

        What was pulled for those queues is dropped; consumption already running is let
        finish (up to ``wait_inflight_ms``, Java sleeps 10 s) and its result ignored;
        then each queue gets a fresh process queue and pull loop at its new offset (an
        orderly consumer keeps the queue's lock)."""
        if self._state != RUNNING:
            return
        store = self.offset_store
        assert store is not None
        async with self.rebalance._lock:
            affected = [
                (mq, pq)
                for mq, pq in self.rebalance.process_queue_table.items()
                if mq.topic == topic and mq in offset_table
            ]
            for _, pq in affected:
                pq.dropped = True
                pq.clear()
            deadline = time.monotonic() + wait_inflight_ms / 1000
            service = self.consume_service
            for mq, pq in affected:
                left = max(deadline - time.monotonic(), 0.0)
                if isinstance(service, ConsumeMessageOrderlyService):
                    lock = service.mq_lock(mq)
                    try:
                        async with asyncio.timeout(left):
                            await lock.acquire()
                        lock.release()
                    except TimeoutError:
                        log.warning("[reset-offset] %s still consuming after %d ms", mq, wait_inflight_ms)
                elif isinstance(service, ConsumeMessageConcurrentlyService):
                    if not await service.wait_idle(pq, left):
                        log.warning("[reset-offset] %s still consuming after %d ms", mq, wait_inflight_ms)
            if self._state != RUNNING:
                return
            requests = []
            for mq, pq in affected:
                if self.rebalance.process_queue_table.get(mq) is not pq:
                    continue
                offset = offset_table[mq]
                store.update_offset(mq, offset, False)
                fresh = ProcessQueue()
                fresh.locked = pq.locked
                fresh.last_lock_timestamp = pq.last_lock_timestamp
                self.rebalance.process_queue_table[mq] = fresh
                requests.append(PullRequest(self.group, mq, fresh, offset, previously_locked=True))
                log.info("[reset-offset] %s %s continues at offset %d", self.group, mq, offset)
            for r in requests:
                self.execute_pull_request_immediately(r)
        if requests and isinstance(store, LocalFileOffsetStore):
            await store.persist_all(set(self.rebalance.process_queue_table))
