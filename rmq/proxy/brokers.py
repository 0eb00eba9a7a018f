"""The proxy's side towards NameServers and brokers: remoting as a client, nothing else.

* routes: GET_ROUTEINFO_BY_TOPIC, cached a few seconds (memory only); an unknown topic gets
  the route of ``TBW102`` the way a 4.x producer does, and is created by the broker at the
  first send (``defaultTopic=TBW102``) where the broker allows auto-creation;
* sends (SEND_MESSAGE_V2 to the master of the chosen queue) and END_TRANSACTION;
* transaction check-backs: the proxy heartbeats as a producer of every group (= topic) its
  5.x producers publish to, so a broker's CHECK_TRANSACTION_STATE for such a half message comes
  to one of the proxies on that connection; ``on_check`` hands it on to a Telemetry stream.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from ssl import SSLContext

from rmq.client.api import MQClientAPI
from rmq.client.errors import MQBrokerError, MQClientError
from rmq.client.message import SendResult
from rmq.client.routes import RoundRobinIndex
from rmq.common.mixall import AUTO_CREATE_TOPIC_KEY_TOPIC
from rmq.common.net import local_ip
from rmq.protocol.bodies import MASTER_ID, HeartbeatData, ProducerData, QueueData, TopicRouteData, loads_fastjson
from rmq.protocol.codes import LanguageCode, PermName, RequestCode, ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    SendMessageRequestHeader,
)
from rmq.protocol.message import MessageExt, decode_record, properties_to_string
from rmq.proxy.config import ProxyConfig
from rmq.proxy.convert import SendPlan
from rmq.remoting.client import RemotingClient, RequestHook
from rmq.remoting.connection import Connection

__all__ = ["BrokerAccess", "Route", "CheckHandler"]

log = logging.getLogger("rmq.proxy.brokers")

ROUTE_TTL = 5.0
GROUP_CONFIG_TTL = 30.0
#: a producer group no 5.x producer has named for this long is no longer heartbeated
PRODUCER_GROUP_TTL = 120.0

#: (broker address, half message, header) -> None
CheckHandler = Callable[[str, MessageExt, CheckTransactionStateRequestHeader], None]


@dataclass
class Route:
    topic: str
    data: TopicRouteData
    #: False when ``data`` is TBW102's: the topic does not exist yet
    exists: bool
    fetched: float
    rr: RoundRobinIndex = field(default_factory=RoundRobinIndex)

    def master_addr(self, broker_name: str) -> str | None:
        for bd in self.data.broker_datas:
            if bd.broker_name == broker_name:
                return bd.broker_addrs.get(MASTER_ID)
        return None

    def writable_queues(self) -> list[tuple[str, int]]:
        """(brokerName, queueId) of every writable queue of a broker group with a master."""
        out: list[tuple[str, int]] = []
        for qd in sorted(self.data.queue_datas, key=lambda q: q.broker_name):
            if PermName.is_writeable(qd.perm) and self.master_addr(qd.broker_name):
                out.extend((qd.broker_name, i) for i in range(qd.write_queue_nums))
        return out


class BrokerAccess:
    def __init__(
        self, cfg: ProxyConfig, request_hook: RequestHook | None = None, ssl: SSLContext | None = None
    ) -> None:
        self.cfg = cfg
        self.client_id = f"{local_ip()}@rmq-proxy-{os.getpid()}"
        self.remoting = RemotingClient(
            language=LanguageCode.PYTHON, request_hook=request_hook, name=f"proxy-{self.client_id}", ssl=ssl
        )
        self.remoting.register_processor(RequestCode.CHECK_TRANSACTION_STATE, self._on_check_transaction_state)
        self.api = MQClientAPI(self.remoting, cfg.namesrv_list())
        self._routes: dict[str, Route] = {}
        self._producer_groups: dict[str, float] = {}
        self._group_configs: dict[str, tuple[float, dict[str, object] | None]] = {}
        self._topic_types: dict[str, tuple[float, str | None]] = {}
        self.on_check: CheckHandler | None = None

    async def close(self) -> None:
        await self.remoting.close()

    # ------------------------------------------------------------------ routes
    async def route(self, topic: str, *, refresh: bool = False) -> Route | None:
        """The topic's route, or TBW102's (``exists=False``) for a topic not created yet; None
        when neither is known to the NameServers."""
        now = time.monotonic()
        r = self._routes.get(topic)
        if r is not None and not refresh and now - r.fetched < ROUTE_TTL:
            return r
        data = await self.api.get_topic_route_info(topic, self.cfg.sendMessageTimeoutMillis)
        exists = data is not None
        if data is None:
            default = await self.api.get_topic_route_info(
                AUTO_CREATE_TOPIC_KEY_TOPIC, self.cfg.sendMessageTimeoutMillis
            )
            if default is None:
                self._routes.pop(topic, None)
                return None
            n = self.cfg.defaultTopicQueueNums
            data = TopicRouteData(
                [
                    QueueData(q.broker_name, min(n, q.read_queue_nums), min(n, q.write_queue_nums), q.perm)
                    for q in default.queue_datas
                ],
                default.broker_datas,
            )
        new = Route(topic, data, exists, now)
        if r is not None:
            new.rr = r.rr
        self._routes[topic] = new
        return new

    def broker_name_of(self, addr: str) -> str | None:
        """The broker group whose master is at ``addr`` (from the cached routes)."""
        for r in self._routes.values():
            for bd in r.data.broker_datas:
                if addr in bd.broker_addrs.values():
                    return bd.broker_name
        return None

    # ------------------------------------------------------------------ topic message type
    async def topic_message_type(self, route: Route) -> str | None:
        """The topic's ``message.type`` attribute (NORMAL, FIFO, DELAY, TRANSACTION, MIXED) from a
        master: GET_TOPIC_CONFIG (351, RocketMQ 5), else the 4.x GET_ALL_TOPIC_CONFIG (21). None:
        no attribute (or no broker says); cached a little while."""
        now = time.monotonic()
        cached = self._topic_types.get(route.topic)
        if cached is not None and now - cached[0] < GROUP_CONFIG_TTL:
            return cached[1]
        found: str | None = None
        timeout = self.cfg.sendMessageTimeoutMillis
        for addr in sorted({a for bd in route.data.broker_datas if (a := bd.broker_addrs.get(MASTER_ID))}):
            try:
                resp = await self.api.raw(addr, RequestCode.GET_TOPIC_CONFIG, {"topic": route.topic}, None, timeout)
                attrs: object = None
                if resp.code == ResponseCode.SUCCESS and resp.body:
                    obj = loads_fastjson(resp.body)
                    attrs = (obj.get("topicConfig") or obj).get("attributes") if isinstance(obj, dict) else None
                elif resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                    tc = (await self.api.get_all_topic_config(addr, timeout)).topic_config_table.get(route.topic)
                    attrs = tc.attributes if tc is not None else None
                if isinstance(attrs, dict):
                    value = attrs.get("message.type") or attrs.get("+message.type")
                    found = str(value).upper() if value else None
            except (MQClientError, MQBrokerError, ProtocolError, OSError, AttributeError) as e:
                log.debug("topic %s: no config from %s: %s", route.topic, addr, e)
            if found is not None:
                break
        self._topic_types[route.topic] = (now, found)
        return found

    # ------------------------------------------------------------------ subscription groups
    async def group_config(self, group: str, topic: str | None) -> dict[str, object] | None:
        """The subscription group's config (SubscriptionGroupConfig JSON: ``retryMaxTimes``,
        ``consumeMessageOrderly``, ...) from the master of a broker serving ``topic``:
        GET_SUBSCRIPTIONGROUP_CONFIG (352, RocketMQ 5), else the 4.x GET_ALL_SUBSCRIPTIONGROUP_CONFIG
        (201). None when no broker knows the group (yet); cached a little while."""
        now = time.monotonic()
        cached = self._group_configs.get(group)
        if cached is not None and now - cached[0] < GROUP_CONFIG_TTL:
            return cached[1]
        found: dict[str, object] | None = None
        route = await self.route(topic) if topic else None
        addrs = sorted({a for bd in route.data.broker_datas if (a := bd.broker_addrs.get(MASTER_ID))}) if route else []
        timeout = self.cfg.sendMessageTimeoutMillis
        for addr in addrs:
            try:
                resp = await self.api.raw(
                    addr, RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group}, None, timeout
                )
                if resp.code == ResponseCode.SUCCESS and resp.body:
                    obj = loads_fastjson(resp.body)
                    found = obj if isinstance(obj, dict) else None
                elif resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                    resp = await self.api.raw(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, None, None, timeout)
                    if resp.code == ResponseCode.SUCCESS and resp.body:
                        table = loads_fastjson(resp.body).get("subscriptionGroupTable") or {}
                        cfg = table.get(group) if isinstance(table, dict) else None
                        found = cfg if isinstance(cfg, dict) else None
            except (MQClientError, MQBrokerError, ProtocolError, OSError, AttributeError) as e:
                log.debug("subscription group %s: no config from %s: %s", group, addr, e)
            if found is not None:
                break
        self._group_configs[group] = (now, found)
        return found

    # ------------------------------------------------------------------ send
    async def send(self, plan: SendPlan, broker_name: str, queue_id: int, addr: str) -> SendResult:
        header = SendMessageRequestHeader(
            plan.topic,
            plan.topic,
            AUTO_CREATE_TOPIC_KEY_TOPIC,
            self.cfg.defaultTopicQueueNums,
            queue_id,
            plan.sys_flag,
            plan.born_timestamp,
            0,
            properties_to_string(plan.properties),
            0,
            False,
            False,
            None,
            broker_name,
        )
        return await self.api.send_message(
            addr, broker_name, header, plan.body, uniq_id=plan.message_id, timeout_ms=self.cfg.sendMessageTimeoutMillis
        )

    async def end_transaction(self, addr: str, header: EndTransactionRequestHeader) -> None:
        await self.api.end_transaction_oneway(addr, header)

    # ------------------------------------------------------------------ producer groups
    async def register_producer_groups(self, groups: list[str]) -> None:
        """Heartbeat at once as a producer of ``groups`` (topics) to their brokers, and keep
        doing so (``heartbeat``) while 5.x producers name them."""
        now = time.monotonic()
        new = [g for g in groups if g not in self._producer_groups]
        for g in groups:
            self._producer_groups[g] = now
        if new:
            await self.heartbeat(only=new)

    async def heartbeat(self, only: list[str] | None = None) -> None:
        now = time.monotonic()
        for g, seen in list(self._producer_groups.items()):
            if now - seen > PRODUCER_GROUP_TTL:
                del self._producer_groups[g]
        groups = only if only is not None else list(self._producer_groups)
        if not groups:
            return
        addrs: set[str] = set()
        for g in groups:
            try:
                r = await self.route(g)
            except (MQClientError, MQBrokerError, OSError) as e:
                log.debug("no route for producer group %s: %s", g, e)
                continue
            if r is not None:
                addrs.update(a for bd in r.data.broker_datas if (a := bd.broker_addrs.get(MASTER_ID)))
        hb = HeartbeatData(self.client_id, [ProducerData(g) for g in sorted(self._producer_groups)])
        for addr in sorted(addrs):
            try:
                await self.api.send_heartbeat(addr, hb, self.cfg.sendMessageTimeoutMillis)
            except Exception as e:
                log.warning("heartbeat of proxy %s to broker %s failed: %s", self.client_id, addr, e)

    # ------------------------------------------------------------------ check-back
    def _on_check_transaction_state(self, conn: Connection, cmd: RemotingCommand) -> None:
        try:
            header = CheckTransactionStateRequestHeader.from_ext_fields(cmd.ext_fields)
            msg = decode_record(cmd.body or b"", decompress=False)
        except ProtocolError as e:
            log.warning("CHECK_TRANSACTION_STATE from %s: bad request (%s)", conn.remote_address, e)
            return None
        if self.on_check is not None:
            self.on_check(self.remoting.address_of(conn), msg, header)
        return None
