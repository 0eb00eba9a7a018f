"""MQClientInstance: one per client id (``ip@instanceName``), shared by the producers and
consumers of a process that use that id (Java ``MQClientInstance`` + ``MQClientManager``).

It owns the connections (one ``RemotingClient``), the route table and broker address
table, and the periodic work:

* route refresh from the NameServer for every topic in use (``poll_name_server_interval``,
  30 s), which also drops brokers no route mentions any more;
* heartbeat to every broker (``heartbeat_broker_interval``, 30 s, and at once when a
  producer or consumer starts) — to masters only when no consumer is registered;
* consumer offset persistence (``persist_consumer_offset_interval``, 5 s);
* rebalance every 20 s, and at once when a broker sends NOTIFY_CONSUMER_IDS_CHANGED.

Requests brokers send to the client (``ClientRemotingProcessor``):

* NOTIFY_CONSUMER_IDS_CHANGED (40): rebalance now;
* CHECK_TRANSACTION_STATE (39): handed to the producer of the half message's group
  (PGROUP), which asks its ``TransactionListener`` and answers END_TRANSACTION;
* RESET_CONSUMER_CLIENT_OFFSET (220): handed to the group's consumer, which drops what
  it holds of those queues and continues from the new offsets;
* GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309), relayed by a broker
  from an admin: answered by ``rmq.client.consumer_calls``.

``default_producer()`` is the instance's own producer (group CLIENT_INNER_PRODUCER,
Java ``mQClientFactory.getDefaultMQProducer()``): consumers send failed messages
through it to ``%RETRY%<group>`` when CONSUMER_SEND_MSG_BACK cannot be used. The
producer is made by a factory the consumer hands to ``get_or_create_instance`` (this
module never imports the producer, which imports it).

``shutdown`` (once the last producer/consumer is gone) unregisters from the brokers and
closes the connections.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from rmq.client._util import BoundedTaskSet
from rmq.client.api import MQClientAPI
from rmq.client.config import ClientConfig
from rmq.client.consumer_calls import ConsumerCallHandler
from rmq.client.consumer_stats import ConsumerStatsManager
from rmq.client.errors import MQClientError
from rmq.client.message import Message, SendResult
from rmq.client.routes import (
    TopicPublishInfo,
    select_broker_addr,
    topic_route_changed,
    topic_route_to_publish_info,
    topic_route_to_subscribe_info,
)
from rmq.common.mixall import AUTO_CREATE_TOPIC_KEY_TOPIC, CLIENT_INNER_PRODUCER_GROUP
from rmq.protocol.bodies import (
    MASTER_ID,
    ConsumerData,
    HeartbeatData,
    MessageQueue,
    ProducerData,
    SubscriptionData,
    TopicRouteData,
    loads_object_keyed_map,
)
from rmq.protocol.codes import MQVersion, RequestCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import CheckTransactionStateRequestHeader, ResetOffsetRequestHeader
from rmq.protocol.message import MessageConst, decode_record
from rmq.remoting.client import RemotingClient
from rmq.remoting.connection import Connection
from rmq.remoting.errors import RemotingError
from rmq.runtime.service import PeriodicService, ServiceLoop

__all__ = [
    "MQClientInstance",
    "FindBrokerResult",
    "get_or_create_instance",
    "ProducerInner",
    "ConsumerInner",
    "InnerProducer",
    "InnerProducerFactory",
    "CLIENT_INNER_PRODUCER_GROUP",
]

log = logging.getLogger("rmq.client")

_T = TypeVar("_T")


class ProducerInner(Protocol):
    """What the instance needs from a producer (MQProducerInner)."""

    def publish_topics(self) -> list[str]: ...
    def is_publish_topic_need_update(self, topic: str) -> bool: ...
    def update_topic_publish_info(self, topic: str, info: TopicPublishInfo) -> None: ...


class ConsumerInner(Protocol):
    """What the instance needs from a consumer (MQConsumerInner)."""

    @property
    def group_name(self) -> str: ...

    def consumer_data(self) -> ConsumerData: ...
    def subscriptions(self) -> list[SubscriptionData]: ...
    def is_subscribe_topic_need_update(self, topic: str) -> bool: ...
    def update_topic_subscribe_info(self, topic: str, mqs: set[MessageQueue]) -> None: ...
    async def do_rebalance(self) -> None: ...
    async def persist_consumer_offset(self) -> None: ...


class InnerProducer(Protocol):
    """What the instance and its consumers need from the inner producer."""

    async def send(self, msg: Message) -> SendResult: ...
    def mark_shutdown(self) -> None: ...


#: Makes and starts an instance's inner producer (``rmq.client.producer.new_inner_producer``).
InnerProducerFactory = Callable[["MQClientInstance"], Awaitable[InnerProducer]]


@dataclass(slots=True)
class FindBrokerResult:
    broker_addr: str
    slave: bool
    broker_version: int = 0


# --------------------------------------------------------------------------- manager
_INSTANCES: dict[str, MQClientInstance] = {}


def get_or_create_instance(
    config: ClientConfig, inner_producer_factory: InnerProducerFactory | None = None
) -> MQClientInstance:
    """MQClientManager.getOrCreateMQClientInstance: one instance per client id (and loop).
    ``inner_producer_factory``: given by a consumer that may send messages back through
    the instance's producer; kept by an instance made without one."""
    client_id = config.build_mq_client_id()
    inst = _INSTANCES.get(client_id)
    loop = asyncio.get_running_loop()
    if inst is not None and (inst.closed or inst.loop is not loop):
        inst = None
    if inst is None:
        inst = MQClientInstance(config.copy(), client_id, inner_producer_factory)
        _INSTANCES[client_id] = inst
    elif inst.inner_producer_factory is None:
        inst.inner_producer_factory = inner_producer_factory
    return inst


def _put_new(table: dict[str, _T], group: str, member: _T) -> bool:
    """registerProducer / registerConsumer: False when the group is taken already."""
    if group in table:
        return False
    table[group] = member
    return True


class MQClientInstance:
    def __init__(
        self, config: ClientConfig, client_id: str, inner_producer_factory: InnerProducerFactory | None = None
    ) -> None:
        self.config = config
        self.client_id = client_id
        self.loop = asyncio.get_running_loop()
        self.remoting = RemotingClient(
            serialize_type=config.serialize_type,
            language=config.language,
            version=MQVersion.V4_9_8,
            connect_timeout=config.connect_timeout / 1000,
            request_hook=config.request_hook(),
            name=f"client-{client_id}",
            ssl=config.ssl_context(),
        )
        self.remoting.register_processor(
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._process_notify_consumer_ids_changed
        )
        self.remoting.register_processor(RequestCode.CHECK_TRANSACTION_STATE, self._process_check_transaction_state)
        self.remoting.register_processor(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._process_reset_offset)
        self.api = MQClientAPI(self.remoting, config.namesrv_addr_list())
        self.producer_table: dict[str, ProducerInner] = {}
        self.consumer_table: dict[str, ConsumerInner] = {}
        self.consumer_stats = ConsumerStatsManager()  # pull / consume rates (running info)
        calls = ConsumerCallHandler(self.consumer_table, lambda: self.api.name_server_address_list)
        self.remoting.register_processor(RequestCode.GET_CONSUMER_RUNNING_INFO, calls.get_consumer_running_info)
        self.remoting.register_processor(RequestCode.CONSUME_MESSAGE_DIRECTLY, calls.consume_message_directly)
        self.topic_route_table: dict[str, TopicRouteData] = {}
        self.broker_addr_table: dict[str, dict[int, str]] = {}
        self.broker_version_table: dict[str, dict[str, int]] = {}
        self._namesrv_lock = asyncio.Lock()
        self._heartbeat_lock = asyncio.Lock()
        self._rebalance_service = RebalanceService(self)
        self._services: list[ServiceLoop] = []
        self._side_tasks = BoundedTaskSet(log)
        self.inner_producer_factory = inner_producer_factory
        self._default_producer: InnerProducer | None = None  # group CLIENT_INNER_PRODUCER
        self._default_producer_lock = asyncio.Lock()
        self._rebalance_later: asyncio.TimerHandle | None = None
        self.started = False
        self.closed = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self.started:
            return
        if self.closed:
            raise MQClientError(f"client instance {self.client_id} is shut down")
        if not self.api.name_server_address_list:
            raise MQClientError(
                "No name server address, please set it (namesrv_addr or the NAMESRV_ADDR environment variable)"
            )
        self.started = True
        c = self.config
        cid = self.client_id
        self._services = [
            PeriodicService(
                f"{cid} route",
                c.poll_name_server_interval / 1000,
                self.update_topic_route_info_from_name_server_all,
                log,
                initial=0.01,
            ),
            PeriodicService(
                f"{cid} heartbeat",
                c.heartbeat_broker_interval / 1000,
                self.send_heartbeat_to_all_brokers,
                log,
                initial=1,
            ),
            PeriodicService(
                f"{cid} persist-offsets",
                c.persist_consumer_offset_interval / 1000,
                self.persist_all_consumer_offset,
                log,
                initial=min(10000, c.persist_consumer_offset_interval) / 1000,
            ),
            self._rebalance_service,
        ]
        for service in self._services:
            service.start()

    async def start_registered(self, table: dict[str, Any], group: str) -> None:
        """``start`` for the producer or consumer just registered in ``table`` under
        ``group``; a failed start takes the registration back."""
        try:
            await self.start()
        except BaseException:
            table.pop(group, None)
            raise

    async def shutdown(self) -> None:
        """Stop when no producer or consumer uses this instance any more."""
        users = [g for g in self.producer_table if g != CLIENT_INNER_PRODUCER_GROUP]
        if users or self.consumer_table or self.closed:
            return
        self.closed = True
        self.producer_table.pop(CLIENT_INNER_PRODUCER_GROUP, None)
        if self._default_producer is not None:
            self._default_producer.mark_shutdown()
            self._default_producer = None
        if self._rebalance_later is not None:
            self._rebalance_later.cancel()
        # cancel: a heartbeat or route request in flight is not waited for
        await asyncio.gather(*(s.stop(cancel=True) for s in self._services))
        self._services = []
        await self._side_tasks.close_within(5.0, f"{self.client_id} service tasks")
        await self.remoting.close()
        if _INSTANCES.get(self.client_id) is self:
            del _INSTANCES[self.client_id]
        log.info("client instance %s shut down", self.client_id)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """A background task of this instance (cancelled by ``shutdown``)."""
        return self._side_tasks.spawn(coro, name)

    async def default_producer(self) -> InnerProducer:
        """The instance's own producer (group CLIENT_INNER_PRODUCER), started on first use."""
        async with self._default_producer_lock:
            if self._default_producer is None:
                if self.inner_producer_factory is None:
                    raise MQClientError(f"client instance {self.client_id} has no inner producer")
                self._default_producer = await self.inner_producer_factory(self)
            return self._default_producer

    # ------------------------------------------------------------------ registration
    def register_producer(self, group: str, producer: ProducerInner) -> bool:
        return _put_new(self.producer_table, group, producer)

    async def unregister_producer(self, group: str) -> None:
        self.producer_table.pop(group, None)
        await self._unregister_client(group, None)

    def register_consumer(self, group: str, consumer: ConsumerInner) -> bool:
        return _put_new(self.consumer_table, group, consumer)

    async def unregister_consumer(self, group: str) -> None:
        self.consumer_table.pop(group, None)
        await self._unregister_client(None, group)

    async def _unregister_client(self, producer_group: str | None, consumer_group: str | None) -> None:
        """UNREGISTER_CLIENT to every known broker at once (best effort, as Java)."""

        async def one(name: str, bid: int, addr: str) -> None:
            try:
                await self.api.unregister_client(addr, self.client_id, producer_group, consumer_group, 3000)
                log.info(
                    "unregister client[producer: %s consumer: %s] from broker[%s %d %s]",
                    producer_group,
                    consumer_group,
                    name,
                    bid,
                    addr,
                )
            except Exception as e:
                log.warning("unregister client from %s failed: %s", addr, e)

        calls = [
            one(name, bid, addr)
            for name, addrs in list(self.broker_addr_table.items())
            for bid, addr in list(addrs.items())
        ]
        if calls:
            await asyncio.gather(*calls)

    # ------------------------------------------------------------------ routes
    async def update_topic_route_info_from_name_server_all(self) -> None:
        topics: set[str] = set()
        for c in list(self.consumer_table.values()):
            for sd in c.subscriptions():
                topics.add(sd.topic)
        for p in list(self.producer_table.values()):
            topics.update(p.publish_topics())
        for topic in topics:
            await self.update_topic_route_info_from_name_server(topic)
        self.clean_offline_broker()

    async def update_topic_route_info_from_name_server(
        self, topic: str, is_default: bool = False, default_topic_queue_nums: int = 4
    ) -> bool:
        """Fetch ``topic``'s route (or TBW102's, when ``is_default``) and push it to every
        producer and consumer that uses the topic; True when something changed."""
        # No timeout on the lock: its holders only wait for bounded requests (and a
        # wait_for around acquire() can swallow a cancellation on 3.11).
        await self._namesrv_lock.acquire()
        try:
            if is_default:
                route = await self.api.get_topic_route_info(
                    AUTO_CREATE_TOPIC_KEY_TOPIC, self.config.mq_client_api_timeout
                )
                if route is not None:
                    for qd in route.queue_datas:
                        n = min(default_topic_queue_nums, qd.read_queue_nums)
                        qd.read_queue_nums = n
                        qd.write_queue_nums = n
            else:
                route = await self.api.get_topic_route_info(topic, self.config.mq_client_api_timeout)
            if route is None:
                if not is_default and topic != AUTO_CREATE_TOPIC_KEY_TOPIC:
                    log.debug("no route for topic %s on the name server", topic)
                return False
            old = self.topic_route_table.get(topic)
            changed = topic_route_changed(old, route) or self._is_need_update_topic_route_info(topic)
            if changed:
                for bd in route.broker_datas:
                    self.broker_addr_table[bd.broker_name] = dict(bd.broker_addrs)
                publish = topic_route_to_publish_info(topic, route)
                for p in list(self.producer_table.values()):
                    p.update_topic_publish_info(topic, publish)
                if self.consumer_table:
                    sub = topic_route_to_subscribe_info(topic, route)
                    for c in list(self.consumer_table.values()):
                        c.update_topic_subscribe_info(topic, sub)
                self.topic_route_table[topic] = route
                log.info("topic route of %s changed: %s", topic, route.to_obj())
            return changed
        except (RemotingError, MQClientError, Exception) as e:
            if not is_default and topic != AUTO_CREATE_TOPIC_KEY_TOPIC:
                log.warning("updateTopicRouteInfoFromNameServer %s failed: %s", topic, e)
            return False
        finally:
            self._namesrv_lock.release()

    def _is_need_update_topic_route_info(self, topic: str) -> bool:
        for p in self.producer_table.values():
            if p.is_publish_topic_need_update(topic):
                return True
        for c in self.consumer_table.values():
            if c.is_subscribe_topic_need_update(topic):
                return True
        return False

    def clean_offline_broker(self) -> None:
        """Drop broker addresses that no topic route mentions any more."""
        live: dict[str, set[str]] = {}
        for route in self.topic_route_table.values():
            for bd in route.broker_datas:
                live.setdefault(bd.broker_name, set()).update(bd.broker_addrs.values())
        for name in list(self.broker_addr_table):
            addrs = self.broker_addr_table[name]
            keep = {bid: a for bid, a in addrs.items() if a in live.get(name, ())}
            if not keep:
                del self.broker_addr_table[name]
                log.info("broker %s is offline, removed from the broker address table", name)
            elif len(keep) != len(addrs):
                self.broker_addr_table[name] = keep

    # ------------------------------------------------------------------ brokers
    def find_broker_address_in_publish(self, broker_name: str) -> str | None:
        addrs = self.broker_addr_table.get(broker_name)
        return addrs.get(MASTER_ID) if addrs else None

    async def find_broker_address_in_publish_or_update(self, broker_name: str, topic: str) -> str | None:
        """The master's address, after a route update of ``topic`` when not known yet."""
        return await self._find_or_update(topic, lambda: self.find_broker_address_in_publish(broker_name))

    async def find_broker_address_in_subscribe_or_update(
        self, broker_name: str, broker_id: int, only_this_broker: bool, topic: str | None
    ) -> FindBrokerResult | None:
        """As ``find_broker_address_in_subscribe``, after a route update of ``topic``
        (when given) if the broker is not known yet."""
        return await self._find_or_update(
            topic, lambda: self.find_broker_address_in_subscribe(broker_name, broker_id, only_this_broker)
        )

    async def _find_or_update(self, topic: str | None, find: Callable[[], _T | None]) -> _T | None:
        found = find()
        if found is None and topic is not None:
            await self.update_topic_route_info_from_name_server(topic)
            found = find()
        return found

    def find_broker_address_in_subscribe(
        self, broker_name: str, broker_id: int, only_this_broker: bool
    ) -> FindBrokerResult | None:
        addrs = self.broker_addr_table.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id)
        slave = broker_id != MASTER_ID
        if addr is None and slave:
            addr = addrs.get(broker_id + 1)
        if addr is None and not only_this_broker:
            bid, addr = next(iter(addrs.items()))
            slave = bid != MASTER_ID
        if addr is None:
            return None
        return FindBrokerResult(addr, slave, self.broker_version_table.get(broker_name, {}).get(addr, 0))

    def find_broker_addr_by_topic(self, topic: str) -> str | None:
        route = self.topic_route_table.get(topic)
        if route is None or not route.broker_datas:
            return None
        bd = route.broker_datas[random.randrange(len(route.broker_datas))]
        return select_broker_addr(bd)

    async def find_consumer_id_list(self, topic: str, group: str) -> list[str] | None:
        addr = self.find_broker_addr_by_topic(topic)
        if addr is None:
            await self.update_topic_route_info_from_name_server(topic)
            addr = self.find_broker_addr_by_topic(topic)
        if addr is None:
            return None
        try:
            return await self.api.get_consumer_id_list_by_group(addr, group, self.config.mq_client_api_timeout)
        except Exception as e:
            log.warning("getConsumerIdListByGroup %s from %s failed: %s", group, addr, e)
            return None

    # ------------------------------------------------------------------ heartbeat
    def prepare_heartbeat_data(self) -> HeartbeatData:
        producers = [ProducerData(g) for g in self.producer_table if g != CLIENT_INNER_PRODUCER_GROUP]
        producers.append(ProducerData(CLIENT_INNER_PRODUCER_GROUP))
        consumers = [c.consumer_data() for c in self.consumer_table.values()]
        return HeartbeatData(self.client_id, producers, consumers)

    async def send_heartbeat_to_all_brokers(self) -> None:
        """Heartbeat every broker (masters only when no consumer is registered)."""
        async with self._heartbeat_lock:
            hb = self.prepare_heartbeat_data()
            consumer_empty = not hb.consumer_data_set
            sends = []
            for name, addrs in list(self.broker_addr_table.items()):
                for bid, addr in list(addrs.items()):
                    if consumer_empty and bid != MASTER_ID:
                        continue
                    sends.append(self._heartbeat_one(name, addr, hb))
            if sends:
                await asyncio.gather(*sends)

    async def _heartbeat_one(self, name: str, addr: str, hb: HeartbeatData) -> None:
        try:
            version = await self.api.send_heartbeat(addr, hb, self.config.mq_client_api_timeout)
            self.broker_version_table.setdefault(name, {})[addr] = version
        except Exception as e:
            log.info("send heart beat to broker[%s %s] failed: %s", name, addr, e)

    # ------------------------------------------------------------------ consumers
    async def _each_consumer(self, act: Callable[[ConsumerInner], Awaitable[None]], failed: str) -> None:
        """``act`` on every consumer in turn; one that fails is logged (``failed`` % group)."""
        for c in list(self.consumer_table.values()):
            try:
                await act(c)
            except Exception:
                log.exception(failed, c.group_name)

    async def persist_all_consumer_offset(self) -> None:
        await self._each_consumer(lambda c: c.persist_consumer_offset(), "persisting offsets of %s failed")

    def rebalance_immediately(self) -> None:
        self._rebalance_service.wakeup()

    def rebalance_later(self, delay_ms: int) -> None:
        """Another rebalance in ``delay_ms`` (a queue could not be locked yet, or is
        still being consumed before it can be given away)."""
        if self.closed:
            return
        h = self._rebalance_later
        due = self.loop.time() + delay_ms / 1000
        if h is not None and not h.cancelled() and h.when() <= due:
            return
        if h is not None:
            h.cancel()
        self._rebalance_later = self.loop.call_at(due, self._rebalance_service.wakeup)

    async def do_rebalance(self) -> None:
        await self._each_consumer(lambda c: c.do_rebalance(), "rebalance of %s failed")

    def _process_notify_consumer_ids_changed(self, conn: Connection, cmd: RemotingCommand) -> None:
        group = (cmd.ext_fields or {}).get("consumerGroup")
        log.info(
            "receive broker's notification[%s], the consumer group: %s changed, rebalance immediately",
            conn.remote_address,
            group,
        )
        self.rebalance_immediately()
        return None

    def _process_check_transaction_state(self, conn: Connection, cmd: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE (39): ClientRemotingProcessor.checkTransactionState."""
        try:
            header = CheckTransactionStateRequestHeader.from_ext_fields(cmd.ext_fields)
            msg = decode_record(cmd.body or b"", decompress=True)
        except ProtocolError as e:
            log.warning("checkTransactionState from %s: bad request (%s)", conn.remote_address, e)
            return None
        group = msg.properties.get(MessageConst.PRODUCER_GROUP)
        if not group:
            log.warning("checkTransactionState, pick producer group failed (no PGROUP in %s)", msg.msg_id)
            return None
        producer = self.producer_table.get(group)
        check = getattr(producer, "check_transaction_state", None)
        if check is None:
            log.debug("checkTransactionState, pick producer by group[%s] failed", group)
            return None
        check(self.remoting.address_of(conn), msg, header)
        return None

    def _process_reset_offset(self, conn: Connection, cmd: RemotingCommand) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (220): ClientRemotingProcessor.resetOffset."""
        try:
            header = ResetOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
            table = (
                {MessageQueue.from_obj(k): int(v) for k, v in loads_object_keyed_map(cmd.body, "offsetTable")}
                if cmd.body
                else {}
            )
        except (ProtocolError, ValueError, TypeError) as e:
            log.warning("resetOffset from %s: bad request (%s)", conn.remote_address, e)
            return None
        log.info(
            "invoke reset offset operation from broker. brokerAddr=%s, topic=%s, group=%s, timestamp=%d",
            conn.remote_address,
            header.topic,
            header.group,
            header.timestamp,
        )
        consumer = self.consumer_table.get(header.group)
        reset = getattr(consumer, "reset_offset", None)
        if reset is None:
            log.info("[reset-offset] consumer dose not exist. group=%s", header.group)
            return None
        self.spawn(reset(header.topic, table), name=f"reset-offset-{header.group}")
        return None


class RebalanceService(ServiceLoop):
    """Java's RebalanceService: every ``rebalance_interval`` (20 s) and on ``wakeup``
    (NOTIFY_CONSUMER_IDS_CHANGED, a consumer starting, a queue to retry)."""

    def __init__(self, instance: MQClientInstance) -> None:
        super().__init__(f"{instance.client_id} rebalance", log)
        self.instance = instance
        self._woken_early = False

    def interval(self) -> float:
        return self.instance.config.rebalance_interval / 1000

    def wakeup(self) -> None:
        # a wakeup before start is kept for the first wait, as the Event used to be
        self._woken_early = not self.started
        super().wakeup()

    async def on_start(self) -> None:
        if self._woken_early:
            self.wakeup()

    async def run_once(self) -> None:
        await self.instance.do_rebalance()
