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
  ``consume_concurrently_max_span`` offsets. Every pull piggy-backs the queue's consumed
  offset (COMMIT_OFFSET flag).
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
import enum
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Awaitable, Callable, Union

from rmq.client._util import cancel_and_wait, sleep_unless
from rmq.client.config import ClientConfig
from rmq.client.consume_service import ConsumeServiceBase
from rmq.client.consume_orderly import (ConsumeMessageOrderlyService, ConsumeOrderlyContext,
                                        ConsumeOrderlyResult, MessageListenerOrderly)
from rmq.client.errors import MQBrokerError, MQClientError
from rmq.client.instance import MQClientInstance, get_or_create_instance
from rmq.client.message import Message, RETRY_GROUP_TOPIC_PREFIX, PullStatus, retry_topic
from rmq.client.offset_store import (LocalFileOffsetStore, OffsetStore, ReadOffsetType,
                                     RemoteBrokerOffsetStore)
from rmq.client.process_queue import ProcessQueue
from rmq.client.pull_api import PullAPIWrapper
from rmq.client.rebalance import (AVG, BROADCASTING, CLUSTERING, AllocateStrategy, PullRequest,
                                  RebalanceImpl)
from rmq.protocol.codes import PullSysFlag, ResponseCode
from rmq.protocol.message import MessageConst, MessageExt
from rmq.protocol.bodies import ConsumerData, MessageQueue, SubscriptionData

__all__ = ["PushConsumer", "ConsumeResult", "ConsumeConcurrentlyContext", "ConsumeFromWhere",
           "MessageModel", "MessageListener", "ConsumeMessageConcurrentlyService",
           "ConsumeOrderlyResult", "ConsumeOrderlyContext", "MessageListenerOrderly"]

log = logging.getLogger("rmq.client.consumer")

BROKER_SUSPEND_MAX_TIME_MILLIS = 15000
CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND = 30000
PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION = 3000
PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL = 50
PULL_TIME_DELAY_MILLS_WHEN_SUSPEND = 1000


class ConsumeResult(enum.Enum):
    """ConsumeConcurrentlyStatus."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    CONSUME_SUCCESS = "CONSUME_SUCCESS"     # alias of SUCCESS (Java's name)


class ConsumeFromWhere(str, enum.Enum):
    """Where a group with no committed offset starts (the deprecated values act as LAST)."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = \
        "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"


class MessageModel(str, enum.Enum):
    CLUSTERING = CLUSTERING
    BROADCASTING = BROADCASTING


@dataclass
class ConsumeConcurrentlyContext:
    """Handed to the listener. ``ack_index``: messages after it count as failed;
    ``delay_level_when_next_consume``: 0 = broker decides, -1 = straight to the DLQ."""

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = 2 ** 31 - 1


MessageListener = Callable[[list[MessageExt], ConsumeConcurrentlyContext],
                           Union[ConsumeResult, None, Awaitable[Union[ConsumeResult, None]]]]


def _now_ms() -> int:
    return int(time.time() * 1000)


def parse_consume_timestamp(value: str | int | datetime | None) -> int:
    """``yyyyMMddHHmmss`` (local time, as UtilAll.parseDate), ms since the epoch, or a
    datetime; None = half an hour ago (Java's default consumeTimestamp)."""
    if value is None:
        return int((time.time() - 1800) * 1000)
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, int):
        return value
    try:
        return int(datetime.strptime(value, "%Y%m%d%H%M%S").timestamp() * 1000)
    except ValueError:
        raise MQClientError(f"consumeTimestamp {value!r} is not yyyyMMddHHmmss") from None


def compute_pull_from_where_push(consume_from_where: ConsumeFromWhere) -> str:
    if consume_from_where in (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                              ConsumeFromWhere.CONSUME_FROM_TIMESTAMP):
        return consume_from_where.value
    return ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET.value


# =========================================================================== rebalance
class RebalancePushImpl(RebalanceImpl):
    consume_type = "CONSUME_PASSIVELY"

    def __init__(self, consumer: PushConsumer) -> None:
        super().__init__(consumer.group, consumer.message_model.value, consumer.allocate_strategy,
                         None)
        self.consumer = consumer

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        c = self.consumer
        store = c.offset_store
        assert store is not None and self.instance is not None
        last = await store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
        if last >= 0:
            return last
        if last != -1:
            return -1          # could not tell: try again at the next rebalance
        where = compute_pull_from_where_push(c.consume_from_where)
        if where == ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET.value:
            return 0
        if mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return 0 if where == ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET.value \
                else await c.max_offset(mq)
        if where == ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET.value:
            return await c.max_offset(mq)
        return await c.search_offset(mq, parse_consume_timestamp(c.consume_timestamp))

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        c = self.consumer
        store = c.offset_store
        assert store is not None
        service = c.consume_service
        if c.orderly and c.message_model is MessageModel.CLUSTERING \
                and isinstance(service, ConsumeMessageOrderlyService):
            # Give the queue away only after the batch in flight ended and its offset is
            # written: the next owner locks it after our unlock and starts from there.
            lock = service.mq_lock(mq)
            try:
                async with asyncio.timeout(1.0):
                    await lock.acquire()
            except TimeoutError:
                pq.try_unlock_times += 1
                log.warning("[WRONG]mq is consuming, so can not unlock it, %s. maybe hanged "
                            "for a while, %d", mq, pq.try_unlock_times)
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

    def remove_dirty_offset(self, mq: MessageQueue) -> None:
        assert self.consumer.offset_store is not None
        self.consumer.offset_store.remove_offset(mq)

    def dispatch_pull_requests(self, requests: list[PullRequest]) -> None:
        for r in requests:
            self.consumer.execute_pull_request_immediately(r)


# =========================================================================== consume service
class ConsumeMessageConcurrentlyService(ConsumeServiceBase):
    """Runs the listener and settles offsets (Java ``ConsumeMessageConcurrentlyService``)."""

    def __init__(self, consumer: PushConsumer, listener: MessageListener) -> None:
        super().__init__(consumer, listener)
        self.tasks_by_pq: dict[ProcessQueue, set[asyncio.Task]] = {}
        self._send_back_warned = False

    def start(self) -> None:
        self._start_executor()
        if self.consumer.consume_timeout_ms > 0:
            self._spawn(self._clean_expired_periodically())

    async def shutdown(self, await_terminate_ms: int) -> None:
        self._stop.set()
        if self.tasks and await_terminate_ms > 0:
            await asyncio.wait(list(self.tasks), timeout=await_terminate_ms / 1000)
        await self._end_tasks()

    def _spawn(self, coro: Awaitable[None], pq: ProcessQueue | None = None) -> asyncio.Task:
        t = super()._spawn(coro)
        if pq is not None:
            group = self.tasks_by_pq.setdefault(pq, set())
            group.add(t)

            def done(task: asyncio.Task, pq: ProcessQueue = pq) -> None:
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

    def submit_consume_request(self, msgs: list[MessageExt], pq: ProcessQueue,
                               mq: MessageQueue) -> None:
        n = max(1, self.consumer.consume_message_batch_max_size)
        for i in range(0, len(msgs), n):
            self._spawn(self._consume(msgs[i:i + n], pq, mq), pq)

    def submit_consume_request_later(self, msgs: list[MessageExt], pq: ProcessQueue,
                                     mq: MessageQueue) -> None:
        async def later() -> None:
            await asyncio.sleep(self.consumer.local_retry_delay_ms / 1000)
            self.submit_consume_request(msgs, pq, mq)
        self._spawn(later())

    async def _consume(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        if pq.dropped:
            log.info("the message queue not be able to consume, because it's dropped. "
                     "group=%s %s", self.consumer.group, mq)
            return
        ctx = ConsumeConcurrentlyContext(mq)
        self.consumer.reset_retry_topic(msgs)
        start = str(_now_ms())
        for m in msgs:
            m.properties[MessageConst.CONSUME_START_TIMESTAMP] = start
        status: Any = None
        try:
            status = await self._call_listener(msgs, ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("consumeMessage exception, group=%s %s", self.consumer.group, mq)
        if not isinstance(status, ConsumeResult):
            if status is not None:
                log.warning("listener returned %r, not a ConsumeResult; treated as "
                            "RECONSUME_LATER", status)
            else:
                log.warning("consumeMessage return null (or raised), group=%s msgs=%s",
                            self.consumer.group, [m.msg_id for m in msgs])
            status = ConsumeResult.RECONSUME_LATER
        if pq.dropped:
            log.warning("processQueue is dropped without process consume result. %s", mq)
            return
        await self.process_consume_result(status, ctx, msgs, pq, mq)

    async def process_consume_result(self, status: ConsumeResult, ctx: ConsumeConcurrentlyContext,
                                     msgs: list[MessageExt], pq: ProcessQueue,
                                     mq: MessageQueue) -> None:
        if not msgs:
            return
        ack_index = ctx.ack_index
        if status is ConsumeResult.SUCCESS:
            ack_index = min(ack_index, len(msgs) - 1)
        else:
            ack_index = -1
        done = msgs
        if self.consumer.message_model is MessageModel.BROADCASTING:
            for m in msgs[ack_index + 1:]:
                log.warning("BROADCASTING, the message consume failed, drop it, %s", m.msg_id)
        else:
            failed = []
            for m in msgs[ack_index + 1:]:
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

    async def send_message_back(self, msg: MessageExt, ctx: ConsumeConcurrentlyContext,
                                mq: MessageQueue) -> bool:
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
                addr, msg, c.group, ctx.delay_level_when_next_consume, 5000,
                c.effective_max_reconsume_times())
            return True
        except asyncio.CancelledError:
            raise
        except Exception as e:
            level = logging.DEBUG if self._send_back_warned else logging.WARNING
            self._send_back_warned = True
            log.log(level, "sendMessageBack of %s to %s failed (%s); sending it to %s "
                    "through the client's producer", msg.msg_id, addr, e, retry_topic(c.group))
        try:
            await c.send_back_through_producer(msg)
            return True
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.log(logging.DEBUG if self._send_back_warned else logging.WARNING,
                    "sending %s back to %s failed too (%s); it will be consumed again "
                    "locally", msg.msg_id, retry_topic(c.group), e)
            return False

    # ------------------------------------------------------------------ consume timeout
    async def _clean_expired_periodically(self) -> None:
        period = min(self.consumer.consume_timeout_ms, 60000) / 1000
        while not await sleep_unless(self._stop, period):
            try:
                for mq, pq in list(self.consumer.rebalance.process_queue_table.items()):
                    if not pq.dropped:
                        await self.clean_expired_msg(mq, pq)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cleanExpiredMsg of %s failed", self.consumer.group)

    async def clean_expired_msg(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """ProcessQueue.cleanExpiredMsg: the oldest messages whose consumption started more
        than ``consume_timeout_ms`` ago go back to the broker (delay level 3) and stop
        holding the queue's offset (at most 16 per round)."""
        c = self.consumer
        if c.message_model is not MessageModel.CLUSTERING:
            return
        now = _now_ms()
        for _ in range(16):
            first = pq.min_offset
            if first is None:
                return
            msg = pq.message_at(first)
            start = msg.properties.get(MessageConst.CONSUME_START_TIMESTAMP) if msg else None
            if msg is None or not start or now - int(start) <= c.consume_timeout_ms:
                return
            ctx = ConsumeConcurrentlyContext(mq, delay_level_when_next_consume=3)
            log.info("send expire msg back. topic=%s, msgId=%s, queueId=%d, queueOffset=%d",
                     msg.topic, msg.msg_id, msg.queue_id, msg.queue_offset)
            if not await self.send_message_back(msg, ctx, mq):
                return
            offset = pq.remove_messages([msg])
            if offset >= 0 and not pq.dropped:
                assert c.offset_store is not None
                c.offset_store.update_offset(mq, offset, True)


# =========================================================================== consumer
_CREATE_JUST, _RUNNING, _SHUTDOWN = "CREATE_JUST", "RUNNING", "SHUTDOWN_ALREADY"


class PushConsumer:
    def __init__(self, group: str, namesrv_addr: str | None = None, *,
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
                 **config_kwargs: Any) -> None:
        if not group:
            raise MQClientError("consumerGroup is blank")
        self.group = group
        self.config = config.copy() if config is not None else ClientConfig(**config_kwargs)
        if config is not None and config_kwargs:
            for k, v in config_kwargs.items():
                setattr(self.config, k, v)
        if namesrv_addr is not None:
            self.config.namesrv_addr = namesrv_addr
        self.listener = listener
        self.message_model = MessageModel(message_model)
        self.consume_from_where = ConsumeFromWhere(consume_from_where)
        self.consume_timestamp = consume_timestamp
        if self.consume_timestamp is None:
            self.consume_timestamp = (datetime.now() - timedelta(minutes=30)).strftime("%Y%m%d%H%M%S")
        self.allocate_strategy = allocate_strategy
        self.consume_thread_max = consume_thread_max
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_batch_size = pull_batch_size
        self.pull_interval = pull_interval
        self.pull_threshold_for_queue = pull_threshold_for_queue
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
        self._subscriptions: dict[str, str] = {}
        self.instance: MQClientInstance | None = None
        self.offset_store: OffsetStore | None = offset_store
        self.rebalance = RebalancePushImpl(self)
        self.pull_api: PullAPIWrapper | None = None
        self.consume_service: ConsumeMessageConcurrentlyService | ConsumeMessageOrderlyService | None = None
        self._pull_tasks: set[asyncio.Task] = set()
        self._state = _CREATE_JUST
        self._paused = False
        self._flow_control_times = 0
        self._last_forced_heartbeat = 0.0

    # ------------------------------------------------------------------ configuration
    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Subscribe to ``topic`` with a TAG expression (``*`` or ``a || b``)."""
        self._subscriptions[topic] = expression or "*"
        if self._state == _RUNNING:
            sd = SubscriptionData.build(topic, expression, None, _now_ms())
            self.rebalance.subscription_inner[topic] = sd
            t = asyncio.ensure_future(self._after_subscription_change(topic))
            self._pull_tasks.add(t)
            t.add_done_callback(self._pull_tasks.discard)

    async def _after_subscription_change(self, topic: str) -> None:
        assert self.instance is not None
        await self.instance.update_topic_route_info_from_name_server(topic)
        await self.instance.send_heartbeat_to_all_brokers()
        self.instance.rebalance_immediately()

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        self.rebalance.subscription_inner.pop(topic, None)

    def register_message_listener(self, listener: MessageListener) -> None:
        """A concurrent listener (``msgs, ConsumeConcurrentlyContext -> ConsumeResult``)."""
        self.listener = listener
        self.orderly = False

    register_message_listener_concurrently = register_message_listener

    def register_message_listener_orderly(self, listener: MessageListenerOrderly) -> None:
        """An orderly listener (``msgs, ConsumeOrderlyContext -> ConsumeOrderlyResult``)."""
        self.listener = listener        # type: ignore[assignment]
        self.orderly = True

    def suspend(self) -> None:
        """Pause pulling (``resume`` to continue)."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    def effective_max_reconsume_times(self) -> int:
        """-1 means 16 for a concurrent listener and unbounded for an orderly one."""
        if self.max_reconsume_times == -1:
            return 2 ** 31 - 1 if self.orderly else 16
        return self.max_reconsume_times

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._state == _RUNNING:
            return
        if self._state != _CREATE_JUST:
            raise MQClientError(f"The PushConsumer service state not OK, maybe started once, "
                                f"{self._state}")
        if self.listener is None:
            raise MQClientError("messageListener is null")
        if not self._subscriptions:
            raise MQClientError("no subscription: call subscribe(topic, expression) first")
        now = _now_ms()
        for topic, expr in self._subscriptions.items():
            self.rebalance.subscription_inner[topic] = SubscriptionData.build(topic, expr, None, now)
        if self.message_model is MessageModel.CLUSTERING:
            rt = retry_topic(self.group)
            self.rebalance.subscription_inner[rt] = SubscriptionData.build(rt, "*", None, now)
            self.config.change_instance_name_to_pid()
        inst = get_or_create_instance(self.config)
        self.rebalance.instance = inst
        self.rebalance.message_model = self.message_model.value
        self.pull_api = PullAPIWrapper(inst, self.group, self.config.unit_mode)
        if self.offset_store is None:
            if self.message_model is MessageModel.BROADCASTING:
                self.offset_store = LocalFileOffsetStore(inst.client_id, self.group,
                                                         self.config.local_offset_store_dir)
            else:
                self.offset_store = RemoteBrokerOffsetStore(inst, self.group)
        self.offset_store.load()
        if not inst.register_consumer(self.group, self):
            raise MQClientError(f"The consumer group[{self.group}] has been created before, "
                                "specify another name please.")
        self.rebalance.is_order = self.orderly
        if self.orderly:
            self.consume_service = ConsumeMessageOrderlyService(self, self.listener)  # type: ignore[arg-type]
        else:
            self.consume_service = ConsumeMessageConcurrentlyService(self, self.listener)
        self.consume_service.start()
        self.instance = inst
        try:
            await inst.start()
        except BaseException:
            inst.consumer_table.pop(self.group, None)
            await self.consume_service.shutdown(0)
            raise
        self._state = _RUNNING
        for topic in list(self.rebalance.subscription_inner):
            await inst.update_topic_route_info_from_name_server(topic)
        await inst.send_heartbeat_to_all_brokers()
        inst.rebalance_immediately()
        log.info("push consumer %s started (client %s)", self.group, inst.client_id)

    async def shutdown(self) -> None:
        """Stop pulling, let in-flight consumption finish (``await_termination_ms``),
        commit offsets, unregister from the brokers."""
        if self._state != _RUNNING:
            return
        self._state = _SHUTDOWN
        await cancel_and_wait(list(self._pull_tasks), 5.0, f"{self.group} pull tasks")
        assert self.consume_service is not None and self.instance is not None
        await self.consume_service.shutdown(self.await_termination_ms)
        await self.persist_consumer_offset(oneway=False)
        if self.orderly and self.message_model is MessageModel.CLUSTERING:
            # after the offsets are written: whoever locks these queues next starts there
            await self.rebalance.unlock_all(oneway=False)
        inst = self.instance
        await inst.unregister_consumer(self.group)
        await inst.shutdown()
        self.rebalance.destroy()
        log.info("push consumer %s shut down", self.group)

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # ------------------------------------------------------------------ ConsumerInner
    @property
    def group_name(self) -> str:
        return self.group

    def subscriptions(self) -> list[SubscriptionData]:
        return list(self.rebalance.subscription_inner.values())

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(self.group, "CONSUME_PASSIVELY", self.message_model.value,
                            self.consume_from_where.value, self.subscriptions(),
                            self.config.unit_mode)

    def is_subscribe_topic_need_update(self, topic: str) -> bool:
        return (topic in self.rebalance.subscription_inner
                and topic not in self.rebalance.topic_subscribe_info_table)

    def update_topic_subscribe_info(self, topic: str, mqs: set[MessageQueue]) -> None:
        if topic in self.rebalance.subscription_inner:
            self.rebalance.topic_subscribe_info_table[topic] = mqs

    async def do_rebalance(self) -> None:
        if self._state == _RUNNING:
            await self.rebalance.do_rebalance()

    async def persist_consumer_offset(self, oneway: bool = True) -> None:
        store = self.offset_store
        if store is None:
            return
        mqs = set(self.rebalance.process_queue_table)
        if oneway or isinstance(store, LocalFileOffsetStore):
            await store.persist_all(mqs)
        else:
            for mq in mqs:
                await store.persist(mq)

    # ------------------------------------------------------------------ admin helpers
    async def max_offset(self, mq: MessageQueue) -> int:
        addr = await self._master_addr(mq)
        return await self.instance.api.get_max_offset(addr, mq.topic, mq.queue_id)  # type: ignore[union-attr]

    async def min_offset(self, mq: MessageQueue) -> int:
        addr = await self._master_addr(mq)
        return await self.instance.api.get_min_offset(addr, mq.topic, mq.queue_id)  # type: ignore[union-attr]

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        addr = await self._master_addr(mq)
        return await self.instance.api.search_offset(addr, mq.topic, mq.queue_id,  # type: ignore[union-attr]
                                                     timestamp_ms)

    async def _master_addr(self, mq: MessageQueue) -> str:
        inst = self.instance
        assert inst is not None
        addr = inst.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            await inst.update_topic_route_info_from_name_server(mq.topic)
            addr = inst.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist")
        return addr

    async def send_back_through_producer(self, msg: MessageExt) -> None:
        """DefaultMQPushConsumerImpl.sendMessageBack's fallback: the failed message goes
        to ``%RETRY%<group>`` through the instance's producer, RECONSUME_TIME = its
        deliveries so far + 1 (the broker dead-letters it past MAX_RECONSUME_TIMES)."""
        inst = self.instance
        assert inst is not None
        props = dict(msg.properties)
        for k in (MessageConst.TRANSACTION_PREPARED, MessageConst.MIN_OFFSET,
                  MessageConst.MAX_OFFSET, MessageConst.CONSUME_START_TIMESTAMP):
            props.pop(k, None)
        if not props.get(MessageConst.ORIGIN_MESSAGE_ID):
            props[MessageConst.ORIGIN_MESSAGE_ID] = msg.msg_id
        props[MessageConst.RETRY_TOPIC] = msg.topic
        props[MessageConst.RECONSUME_TIME] = str(msg.reconsume_times + 1)
        props[MessageConst.MAX_RECONSUME_TIMES] = str(self.effective_max_reconsume_times())
        new = Message(retry_topic(self.group), msg.body, properties=props, flag=msg.flag,
                      delay_time_level=3 + msg.reconsume_times)
        producer = await inst.default_producer()
        await producer.send(new)

    def reset_retry_topic(self, msgs: list[MessageExt]) -> None:
        """Messages from ``%RETRY%<group>`` are shown under their original topic."""
        rt = retry_topic(self.group)
        for m in msgs:
            real = m.properties.get(MessageConst.RETRY_TOPIC)
            if real is not None and m.topic == rt:
                m.topic = real

    # ------------------------------------------------------------------ pulling
    def execute_pull_request_immediately(self, req: PullRequest) -> None:
        t = asyncio.ensure_future(self._pull_loop(req))
        self._pull_tasks.add(t)
        t.add_done_callback(self._pull_tasks.discard)

    async def _pull_loop(self, req: PullRequest) -> None:
        try:
            delay = 0
            while self._state == _RUNNING and not req.process_queue.dropped:
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
        pq.last_pull_timestamp = _now_ms()
        if self._paused:
            return PULL_TIME_DELAY_MILLS_WHEN_SUSPEND
        if pq.msg_count > self.pull_threshold_for_queue \
                or pq.msg_size_mib > self.pull_threshold_size_for_queue \
                or (not self.orderly and pq.max_span() > self.consume_concurrently_max_span):
            self._flow_control_times += 1
            if self._flow_control_times % 1000 == 0:
                log.warning("the cached messages of %s exceed the threshold (%d msgs, "
                            "%.1f MiB, span %d), flow control", mq, pq.msg_count,
                            pq.msg_size_mib, pq.max_span())
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
                if pq.dropped or self._state != _RUNNING:
                    return 0
                if offset < req.next_offset:
                    log.info("[NOTIFYME]the first time to pull message, but pull request "
                             "offset larger than broker consume offset, %s", mq)
                log.info("the first time to pull message, so fix offset from broker. pull "
                         "request: %s %d -> %d", mq, req.next_offset, offset)
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
        try:
            result = await self.pull_api.pull_kernel_impl(
                mq, sub_expression, sd.expression_type, sd.sub_version, req.next_offset,
                self.pull_batch_size, sys_flag, commit_offset, BROKER_SUSPEND_MAX_TIME_MILLIS,
                CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if not mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                log.warning("execute the pull request of %s failed: %s", mq, e)
            if isinstance(e, MQBrokerError) and e.code in (ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                                           ResponseCode.SUBSCRIPTION_NOT_LATEST):
                # The broker lost (restart) or has an old copy of our subscription: tell
                # it again now rather than at the next 30 s heartbeat.
                self._heartbeat_soon()
            return PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION
        if pq.dropped or self._state != _RUNNING:
            return 0
        result = self.pull_api.process_pull_result(mq, result, sd)
        status = result.status
        if status is PullStatus.FOUND:
            req.next_offset = result.next_begin_offset
            if result.msg_found_list:
                dispatch = pq.put_messages(result.msg_found_list)
                service = self.consume_service
                assert service is not None
                if isinstance(service, ConsumeMessageOrderlyService):
                    service.submit_consume_request(result.msg_found_list, pq, mq, dispatch)
                else:
                    service.submit_consume_request(result.msg_found_list, pq, mq)
                return self.pull_interval
            self._correct_tags_offset(req)
            return 0
        if status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
            req.next_offset = result.next_begin_offset
            self._correct_tags_offset(req)
            return 0
        # OFFSET_ILLEGAL: the broker corrected us. Persist the corrected offset, drop
        # the queue; rebalance re-creates it from that offset.
        log.warning("the pull request offset illegal, %s offset %d, next %d", mq,
                    req.next_offset, result.next_begin_offset)
        req.next_offset = result.next_begin_offset
        pq.dropped = True
        if isinstance(self.consume_service, ConsumeMessageOrderlyService):
            async with self.consume_service.mq_lock(mq):      # the batch in flight first
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
        t = asyncio.ensure_future(self.instance.send_heartbeat_to_all_brokers())
        self._pull_tasks.add(t)
        t.add_done_callback(self._pull_tasks.discard)

    def _correct_tags_offset(self, req: PullRequest) -> None:
        """Nothing in flight: the consumed offset may move to the next pull offset."""
        if req.process_queue.msg_count == 0:
            assert self.offset_store is not None
            self.offset_store.update_offset(req.message_queue, req.next_offset, True)

    # ------------------------------------------------------------------ offset reset
    async def reset_offset(self, topic: str, offset_table: dict[MessageQueue, int],
                           wait_inflight_ms: int = 10000) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: continue the named queues of ``topic`` from the
        given offsets, without a restart (MQClientInstance.resetOffset).

        What was pulled for those queues is dropped; consumption already running is let
        finish (up to ``wait_inflight_ms``, Java sleeps 10 s) and its result ignored;
        then each queue gets a fresh process queue and pull loop at its new offset (an
        orderly consumer keeps the queue's lock)."""
        if self._state != _RUNNING:
            return
        store = self.offset_store
        assert store is not None
        async with self.rebalance._lock:
            affected = [(mq, pq) for mq, pq in self.rebalance.process_queue_table.items()
                        if mq.topic == topic and mq in offset_table]
            for mq, pq in affected:
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
                        log.warning("[reset-offset] %s still consuming after %d ms", mq,
                                    wait_inflight_ms)
                elif isinstance(service, ConsumeMessageConcurrentlyService):
                    if not await service.wait_idle(pq, left):
                        log.warning("[reset-offset] %s still consuming after %d ms", mq,
                                    wait_inflight_ms)
            if self._state != _RUNNING:
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
                requests.append(PullRequest(self.group, mq, fresh, offset,
                                            previously_locked=True))
                log.info("[reset-offset] %s %s continues at offset %d", self.group, mq, offset)
            for r in requests:
                self.execute_pull_request_immediately(r)
        if requests and isinstance(store, LocalFileOffsetStore):
            await store.persist_all(set(self.rebalance.process_queue_table))
