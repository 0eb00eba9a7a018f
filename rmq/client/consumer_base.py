"""What the push and the lite pull consumer share: their enums, where a queue without a
committed offset starts (``compute_pull_from_where``), the ``MQConsumerInner`` side the
client instance calls (subscriptions, heartbeat data, route updates, rebalance, offset
persistence), the offset look-ups at a queue's master, and the steps of start and shutdown.

``ConsumerBase`` is not a consumer on its own: ``PushConsumer`` and ``LitePullConsumer``
say how a queue is consumed, when a rebalance may run and what an offset reset does.
"""

from __future__ import annotations

import enum
import logging
from datetime import datetime
from typing import Any, ClassVar

from rmq.client._util import CREATE_JUST, RUNNING, SHUTDOWN_ALREADY, BoundedTaskSet
from rmq.client.config import ClientConfig
from rmq.client.errors import MQClientError
from rmq.client.instance import InnerProducerFactory, MQClientInstance, get_or_create_instance
from rmq.client.offset_store import LocalFileOffsetStore, OffsetStore, ReadOffsetType, RemoteBrokerOffsetStore
from rmq.client.pull_api import PullAPIWrapper
from rmq.client.rebalance import BROADCASTING, CLUSTERING, AllocateStrategy, RebalanceImpl
from rmq.common.clock import now_ms
from rmq.common.context import StartedContext
from rmq.common.mixall import is_retry_topic
from rmq.protocol.bodies import ConsumerData, MessageQueue, SubscriptionData

__all__ = [
    "ConsumeFromWhere",
    "MessageModel",
    "ConsumerBase",
    "ConsumerRebalanceImpl",
    "parse_consume_timestamp",
    "compute_pull_from_where_push",
    "CREATE_JUST",
    "RUNNING",
    "SHUTDOWN_ALREADY",
]


class ConsumeFromWhere(enum.StrEnum):
    """Where a group with no committed offset starts (the deprecated values act as LAST)."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"


class MessageModel(enum.StrEnum):
    CLUSTERING = CLUSTERING
    BROADCASTING = BROADCASTING


def parse_consume_timestamp(value: str | int | datetime | None) -> int:
    """``yyyyMMddHHmmss`` (local time, as UtilAll.parseDate), ms since the epoch, or a
    datetime; None = half an hour ago (Java's default consumeTimestamp)."""
    if value is None:
        return now_ms() - 1_800_000
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, int):
        return value
    try:
        return int(datetime.strptime(value, "%Y%m%d%H%M%S").timestamp() * 1000)
    except ValueError:
        raise MQClientError(f"consumeTimestamp {value!r} is not yyyyMMddHHmmss") from None


def compute_pull_from_where_push(consume_from_where: ConsumeFromWhere) -> str:
    """The three values that still mean something (the deprecated ones act as LAST)."""
    if consume_from_where in (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, ConsumeFromWhere.CONSUME_FROM_TIMESTAMP):
        return consume_from_where.value
    return ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET.value


class ConsumerRebalanceImpl(RebalanceImpl):
    """The rebalance of one consumer: the hooks both consumers answer alike."""

    def __init__(self, consumer: ConsumerBase) -> None:
        super().__init__(consumer.group, consumer.message_model.value, consumer.allocate_strategy, None)
        self.consumer = consumer

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        return await self.consumer.compute_pull_from_where(mq)

    def remove_dirty_offset(self, mq: MessageQueue) -> None:
        assert self.consumer.offset_store is not None
        self.consumer.offset_store.remove_offset(mq)


class ConsumerBase(StartedContext):
    """The shared half of DefaultMQPushConsumerImpl and DefaultLitePullConsumerImpl."""

    #: What ``compute_pull_from_where`` reads first (push: the store; lite: memory).
    OFFSET_READ_TYPE: ClassVar[ReadOffsetType] = ReadOffsetType.READ_FROM_STORE

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None,
        config: ClientConfig | None,
        config_kwargs: dict[str, Any],
        message_model: MessageModel | str,
        consume_from_where: ConsumeFromWhere | str,
        consume_timestamp: str | int | datetime | None,
        allocate_strategy: AllocateStrategy,
        offset_store: OffsetStore | None,
    ) -> None:
        if not group:
            raise MQClientError("consumerGroup is blank")
        self.group = group
        self.config = ClientConfig.of_client(config, namesrv_addr, config_kwargs)
        self.message_model = MessageModel(message_model)
        self.consume_from_where = ConsumeFromWhere(consume_from_where)
        self.consume_timestamp = consume_timestamp
        self.allocate_strategy = allocate_strategy
        self.instance: MQClientInstance | None = None
        self.offset_store: OffsetStore | None = offset_store
        self.pull_api: PullAPIWrapper | None = None
        self.rebalance: RebalanceImpl = self._new_rebalance()
        self._subscriptions: dict[str, str] = {}  # topic -> expression, as subscribed
        self._state = CREATE_JUST
        self._tasks = BoundedTaskSet(logging.getLogger("rmq.client.consumer"))
        self.consumer_start_timestamp = now_ms()  # Java sets it when the consumer is made

    def _new_rebalance(self) -> RebalanceImpl:
        raise NotImplementedError

    def _inner_producer_factory(self) -> InnerProducerFactory | None:
        """For a consumer that sends messages back through the instance's producer."""
        return None

    # ------------------------------------------------------------------ start / shutdown
    def _create_instance(self) -> MQClientInstance:
        """The first steps of start: the shared instance, the pull wrapper, the offset
        store (loaded), the registration under the group."""
        if self.message_model is MessageModel.CLUSTERING:
            self.config.change_instance_name_to_pid()
        inst = get_or_create_instance(self.config, self._inner_producer_factory())
        self.rebalance.instance = inst
        self.pull_api = PullAPIWrapper(inst, self.group, self.config.unit_mode)
        if self.offset_store is None:
            if self.message_model is MessageModel.BROADCASTING:
                self.offset_store = LocalFileOffsetStore(inst.client_id, self.group, self.config.local_offset_store_dir)
            else:
                self.offset_store = RemoteBrokerOffsetStore(inst, self.group)
        self.offset_store.load()
        if not inst.register_consumer(self.group, self):
            raise MQClientError(
                f"The consumer group[{self.group}] has been created before, specify another name please."
            )
        return inst

    async def _start_instance(self, inst: MQClientInstance) -> None:
        self.instance = inst
        await inst.start_registered(inst.consumer_table, self.group)
        self._state = RUNNING

    async def _announce_subscriptions(self, inst: MQClientInstance) -> None:
        """Routes of every subscribed topic, a heartbeat, a rebalance now."""
        for topic in list(self.rebalance.subscription_inner):
            await inst.update_topic_route_info_from_name_server(topic)
        await inst.send_heartbeat_to_all_brokers()
        inst.rebalance_immediately()

    async def _shutdown_instance(self) -> None:
        inst = self.instance
        assert inst is not None
        await inst.unregister_consumer(self.group)
        await inst.shutdown()
        self.rebalance.destroy()

    def _subscribe_now(self, topic: str, expression: str) -> None:
        """Hand topic's subscription to the rebalance at once (and act on it if running)."""
        self.rebalance.subscription_inner[topic] = SubscriptionData.build(topic, expression, None, now_ms())
        self._subscription_changed(topic)

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        self.rebalance.subscription_inner.pop(topic, None)

    def _subscription_changed(self, topic: str) -> None:
        """A subscription made while running: its route, a heartbeat, a rebalance, soon."""
        if self._state == RUNNING:
            self._tasks.spawn(self._after_subscription_change(topic), f"subscribe-{topic}")

    async def _after_subscription_change(self, topic: str) -> None:
        assert self.instance is not None
        await self.instance.update_topic_route_info_from_name_server(topic)
        await self.instance.send_heartbeat_to_all_brokers()
        self.instance.rebalance_immediately()

    # ------------------------------------------------------------------ MQConsumerInner
    @property
    def group_name(self) -> str:
        return self.group

    def subscriptions(self) -> list[SubscriptionData]:
        return list(self.rebalance.subscription_inner.values())

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            self.group,
            self.rebalance.consume_type,
            self.message_model.value,
            self.consume_from_where.value,
            self.subscriptions(),
            self.config.unit_mode,
        )

    def is_subscribe_topic_need_update(self, topic: str) -> bool:
        return topic in self.rebalance.subscription_inner and topic not in self.rebalance.topic_subscribe_info_table

    def update_topic_subscribe_info(self, topic: str, mqs: set[MessageQueue]) -> None:
        if topic in self.rebalance.subscription_inner:
            self.rebalance.topic_subscribe_info_table[topic] = mqs

    def _rebalance_enabled(self) -> bool:
        return self._state == RUNNING

    async def do_rebalance(self) -> None:
        if self._rebalance_enabled():
            await self.rebalance.do_rebalance()

    async def persist_consumer_offset(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ offsets
    async def _persist(self, mqs: list[MessageQueue], oneway: bool) -> None:
        """Write the offsets of ``mqs``: oneway all at once, else one acknowledged write
        per queue (a local file is always written whole)."""
        store = self.offset_store
        if store is None:
            return
        if oneway or isinstance(store, LocalFileOffsetStore):
            await store.persist_all(set(mqs))
        else:
            for mq in mqs:
                await store.persist(mq)

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """RebalancePushImpl / RebalanceLitePullImpl.computePullFromWhere: the committed
        offset, else where ``consume_from_where`` says; -1 when it cannot be told now
        (the next rebalance tries again)."""
        store = self.offset_store
        assert store is not None
        last = await store.read_offset(mq, self.OFFSET_READ_TYPE)
        if last >= 0:
            return last
        if last != -1:
            return -1
        where = compute_pull_from_where_push(self.consume_from_where)
        if where == ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET.value:
            return 0
        if is_retry_topic(mq.topic):
            return 0 if where == ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET.value else await self.max_offset(mq)
        if where == ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET.value:
            return await self.max_offset(mq)
        return await self.search_offset(mq, parse_consume_timestamp(self.consume_timestamp))

    async def max_offset(self, mq: MessageQueue) -> int:
        inst, addr = await self._master_addr(mq)
        return await inst.api.get_max_offset(addr, mq.topic, mq.queue_id)

    async def min_offset(self, mq: MessageQueue) -> int:
        inst, addr = await self._master_addr(mq)
        return await inst.api.get_min_offset(addr, mq.topic, mq.queue_id)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        inst, addr = await self._master_addr(mq)
        return await inst.api.search_offset(addr, mq.topic, mq.queue_id, timestamp_ms)

    async def _master_addr(self, mq: MessageQueue) -> tuple[MQClientInstance, str]:
        inst = self.instance
        assert inst is not None
        addr = await inst.find_broker_address_in_publish_or_update(mq.broker_name, mq.topic)
        if addr is None:
            addr = await self._master_addr_fallback(inst, mq)
        if addr is None:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist")
        return inst, addr

    async def _master_addr_fallback(self, inst: MQClientInstance, mq: MessageQueue) -> str | None:
        """A last look when the route update did not name the broker."""
        return None

    async def _end_side_tasks(self, what: str) -> None:
        await self._tasks.close_within(5.0, f"{self.group} {what}")
