"""MQAdmin: the admin-side requests and lookups every command shares (Java DefaultMQAdminExt).

One instance per ``rmq admin`` run: one ``RemotingClient`` and the client's
``MQClientAPI`` over it, plus the admin requests MQClientAPI does not have yet
(GET_TOPIC_STATS_INFO, QUERY_TOPIC_CONSUME_BY_WHO, the NameServer's KV config) and
the ``CommandUtil`` lookups (masters of a cluster, broker name of an address).

Failures keep their types (``MQBrokerError``, ``RemotingError``, ``ProtocolError``);
``rmq.admin.main.describe_error`` turns any of them into the one error line. What the
NameServer does not know (topic, cluster, broker address) raises ``AdminError`` with
the sentence to print.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from ssl import SSLContext
from typing import Any, TypeVar

from rmq.admin.errors import AdminError
from rmq.client.acl import signing_hook
from rmq.client.api import MQClientAPI
from rmq.client.config import ClientConfig
from rmq.client.errors import MQBrokerError
from rmq.common.context import ClosingContext
from rmq.common.mixall import MASTER_ID, retry_topic
from rmq.protocol.bodies import (
    BrokerData,
    BrokerStatsData,
    ClusterInfo,
    Connection,
    ConsumerConnection,
    ConsumeStats,
    ConsumeStatsList,
    MessageQueue,
    ProducerConnection,
    ProducerTableInfo,
    QueryConsumeQueueResponseBody,
    TopicConfig,
    TopicRouteData,
    dumps_fastjson,
    loads_fastjson,
    loads_object_keyed_map,
)
from rmq.protocol.codes import MQVersion, RequestCode, ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import (
    BrokerPermRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    QueryConsumeQueueRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from rmq.protocol.message import MessageExt, decode_message_id
from rmq.protocol.running_info import (
    ConsumeMessageDirectlyResult,
    ConsumeMessageDirectlyResultRequestHeader,
    ConsumerRunningInfo,
    GetConsumerRunningInfoRequestHeader,
)
from rmq.remoting.client import RemotingClient
from rmq.remoting.errors import RemotingError

__all__ = [
    "MQAdmin",
    "TopicOffset",
    "ConsumerNotOnline",
    "DEFAULT_NAMESRV",
    "DEFAULT_TIMEOUT_MS",
    "NAMESPACE_ORDER_TOPIC_CONFIG",
    "select_broker_addr",
    "route_brokers",
]

DEFAULT_NAMESRV = "127.0.0.1:9876"
DEFAULT_TIMEOUT_MS = 5000  # DefaultMQAdminExt.timeoutMillis
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"  # NamesrvUtil

T = TypeVar("T")
_NOT_ONLINE = ResponseCode.CONSUMER_NOT_ONLINE


class ConsumerNotOnline(AdminError):
    """No consumer of the group is connected (the brokers answer CONSUMER_NOT_ONLINE)."""


@dataclass(slots=True)
class TopicOffset:
    """``TopicOffset``: one queue's offsets in GET_TOPIC_STATS_INFO's answer."""

    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0

    @classmethod
    def from_obj(cls, obj: Any) -> TopicOffset:
        if not isinstance(obj, dict):
            raise ProtocolError(f"TopicOffset is not an object: {obj!r:.60}")
        try:
            return cls(
                int(obj.get("minOffset") or 0), int(obj.get("maxOffset") or 0), int(obj.get("lastUpdateTimestamp") or 0)
            )
        except (TypeError, ValueError) as e:
            raise ProtocolError(f"bad TopicOffset: {e}") from None


class MQAdmin(ClosingContext):
    """Admin requests over one remoting client; use ``async with``."""

    def __init__(
        self,
        namesrv_addrs: Sequence[str],
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        access_key: str | None = None,
        secret_key: str | None = None,
        ssl: SSLContext | None = None,
    ) -> None:
        self.namesrv_addrs = [a for a in namesrv_addrs if a]
        self.timeout_ms = timeout_ms
        # mqadmin signs with conf/tools.yml's pair; here the caller's (flags / env)
        hook = signing_hook(access_key, secret_key)
        self.remoting = RemotingClient(
            version=MQVersion.V4_9_8,
            name="rmq-admin",
            connect_timeout=min(3.0, timeout_ms / 1000),
            request_hook=hook,
            ssl=ssl,  # --tls (rmq.client.tls)
        )
        self.api = MQClientAPI(self.remoting, self.namesrv_addrs)
        self._cluster_info: ClusterInfo | None = None
        #: what a producer the admin starts (sendMessage, the RT probes) is configured with:
        #: the same NameServers and credentials (main adds the TLS settings)
        self.client_config = ClientConfig(
            namesrv_addr=";".join(self.namesrv_addrs), access_key=access_key, secret_key=secret_key
        )

    async def close(self) -> None:
        await self.remoting.close()

    # ------------------------------------------------------------------ plumbing
    @property
    def namesrv_desc(self) -> str:
        return ";".join(self.namesrv_addrs) or "(none)"

    async def namesrv(self, aw: Awaitable[T]) -> T:
        """Await a NameServer request; a transport failure names the NameServer list."""
        try:
            return await aw
        except RemotingError as e:
            raise AdminError(f"NameServer {self.namesrv_desc} unreachable: {e}") from None

    async def call(
        self, addr: str | None, code: int, ext_fields: dict[str, str] | None = None, body: bytes | None = None, *ok: int
    ) -> RemotingCommand:
        """Any request (to a NameServer when ``addr`` is None); a failure code other than
        ``ok`` raises ``MQBrokerError``."""
        aw = self.api.raw(addr, code, ext_fields, body, self.timeout_ms)
        resp = await (self.namesrv(aw) if addr is None else aw)
        if resp.code != ResponseCode.SUCCESS and resp.code not in ok:
            raise MQBrokerError(resp.code, resp.remark, addr)
        return resp

    # ------------------------------------------------------------------ NameServer
    async def examine_broker_cluster_info(self, fresh: bool = False) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO (cached for the run unless ``fresh``)."""
        if self._cluster_info is None or fresh:
            self._cluster_info = await self.namesrv(self.api.get_broker_cluster_info(self.timeout_ms))
        return self._cluster_info

    async def examine_topic_route_info(self, topic: str) -> TopicRouteData:
        route = await self.namesrv(self.api.get_topic_route_info(topic, self.timeout_ms))
        if route is None:
            raise AdminError(f"No topic route info in name server for the topic: {topic}")
        return route

    async def fetch_all_topic_list(self) -> list[str]:
        return await self.namesrv(self.api.get_all_topic_list(self.timeout_ms))

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        resp = await self.call(
            None, RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key}, None, ResponseCode.QUERY_NOT_FOUND
        )
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return (resp.ext_fields or {}).get("value")

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        """PUT_KV_CONFIG to every NameServer (MQClientAPIImpl.putKVConfigValue)."""
        fields = {"namespace": namespace, "key": key, "value": value}
        for addr in self.namesrv_addrs:
            await self._namesrv_call(addr, RequestCode.PUT_KV_CONFIG, dict(fields))

    async def delete_kv_config(self, namespace: str, key: str) -> None:
        """DELETE_KV_CONFIG to every NameServer (MQClientAPIImpl.deleteKVConfigValue)."""
        for addr in self.namesrv_addrs:
            await self._namesrv_call(addr, RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key})

    async def create_or_update_order_conf(self, topic: str, order_conf: str, is_cluster: bool) -> str:
        """ORDER_TOPIC_CONFIG for ``topic``; a single broker's ``name:n`` entry is merged
        into what the NameServer holds (DefaultMQAdminExtImpl). Returns the value set."""
        value = order_conf
        if not is_cluster:
            merged: dict[str, str] = {}
            try:
                old = await self.get_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
            except (MQBrokerError, AdminError, RemotingError):
                old = None
            for item in (old or "").split(";"):
                if item.strip():
                    merged[item.split(":")[0]] = item
            merged[order_conf.split(":")[0]] = order_conf
            value = ";".join(merged.values())
        await self.put_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, topic, value)
        return value

    # ------------------------------------------------------------------ lookups (CommandUtil)
    async def _cluster_brokers(self, cluster: str) -> list[BrokerData]:
        ci = await self.examine_broker_cluster_info()
        names = ci.cluster_addr_table.get(cluster)
        if names is None:
            raise AdminError(
                f"cluster {cluster} not found on NameServer {self.namesrv_desc} "
                f"(known: {', '.join(sorted(ci.cluster_addr_table)) or 'none'})"
            )
        return [ci.broker_addr_table[n] for n in sorted(set(names)) if n in ci.broker_addr_table]

    async def fetch_cluster_brokers(self, cluster: str) -> list[BrokerData]:
        """The cluster's broker groups (master and slaves each), by broker name."""
        return await self._cluster_brokers(cluster)

    async def fetch_master_addr_by_cluster_name(self, cluster: str) -> list[str]:
        out = []
        for bd in await self._cluster_brokers(cluster):
            addr = bd.broker_addrs.get(MASTER_ID)
            if addr:
                out.append(addr)
        if not out:
            raise AdminError(f"cluster {cluster} has no master broker")
        return out

    async def fetch_master_and_slave_addr_by_cluster_name(self, cluster: str) -> list[str]:
        return [bd.broker_addrs[i] for bd in await self._cluster_brokers(cluster) for i in sorted(bd.broker_addrs)]

    async def fetch_broker_name_by_cluster_name(self, cluster: str) -> list[str]:
        return [bd.broker_name for bd in await self._cluster_brokers(cluster)]

    async def fetch_broker_name_by_addr(self, addr: str) -> str:
        ci = await self.examine_broker_cluster_info()
        for name, bd in sorted(ci.broker_addr_table.items()):
            if addr in bd.broker_addrs.values():
                return name
        raise AdminError(f"broker {addr} is not registered with NameServer {self.namesrv_desc}")

    # ------------------------------------------------------------------ brokers
    async def fetch_broker_runtime_stats(self, addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO (28)."""
        return await self.api.get_broker_runtime_info(addr, self.timeout_ms)

    async def broker_consume_stats(self, addr: str, is_order: bool = False) -> ConsumeStatsList:
        """GET_BROKER_CONSUME_STATS (317): every subscription group's stats per topic."""
        ext = GetConsumeStatsInBrokerHeader(is_order).to_ext_fields()
        return ConsumeStatsList.from_json((await self.call(addr, RequestCode.GET_BROKER_CONSUME_STATS, ext)).body)

    async def view_broker_stats_data(self, addr: str, stats_name: str, stats_key: str) -> BrokerStatsData:
        """VIEW_BROKER_STATS_DATA (315): one stats item of the broker (TOPIC_PUT_NUMS of a
        topic, GROUP_GET_NUMS of ``topic@group`` ...) over the last minute, hour and day."""
        ext = ViewBrokerStatsDataRequestHeader(stats_name, stats_key).to_ext_fields()
        return BrokerStatsData.from_json((await self.call(addr, RequestCode.VIEW_BROKER_STATS_DATA, ext)).body or b"{}")

    async def all_producer_info(self, addr: str) -> ProducerTableInfo:
        """GET_ALL_PRODUCER_INFO (328): the broker's online producers by group."""
        return ProducerTableInfo.from_json((await self.call(addr, RequestCode.GET_ALL_PRODUCER_INFO)).body or b"{}")

    async def query_consume_queue(
        self, addr: str, topic: str, queue_id: int, index: int, count: int, group: str | None
    ) -> tuple[QueryConsumeQueueResponseBody | None, str]:
        """QUERY_CONSUME_QUEUE (321): (the units, None when the index is outside the queue;
        the broker's remark)."""
        ext = QueryConsumeQueueRequestHeader(topic, queue_id, index, count, group).to_ext_fields()
        resp = await self.call(addr, RequestCode.QUERY_CONSUME_QUEUE, ext)
        body = QueryConsumeQueueResponseBody.from_json(resp.body) if resp.body else None
        return body, resp.remark or ""

    async def all_topic_config(self, addr: str) -> dict[str, TopicConfig]:
        """GET_ALL_TOPIC_CONFIG (21): the broker's topic table."""
        return dict((await self.api.get_all_topic_config(addr, self.timeout_ms)).topic_config_table)

    async def create_and_update_topic_config(self, addr: str, tc: TopicConfig, attributes: str | None = None) -> None:
        """UPDATE_AND_CREATE_TOPIC (17) on one broker (``attributes``: ``+k=v,-k``, RocketMQ 5)."""
        await self.api.create_topic(addr, tc, timeout_ms=self.timeout_ms, attributes=attributes)

    async def get_topic_stats_info(self, addr: str, topic: str) -> list[tuple[MessageQueue, TopicOffset]]:
        """GET_TOPIC_STATS_INFO (202): ``TopicStatsTable`` of one broker."""
        resp = await self.call(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
        return [
            (MessageQueue.from_obj(k), TopicOffset.from_obj(v))
            for k, v in loads_object_keyed_map(resp.body or b"{}", "offsetTable")
        ]

    async def examine_topic_stats(self, topic: str) -> list[tuple[MessageQueue, TopicOffset]]:
        """Every broker group's stats for ``topic`` (its master, else any member), sorted
        by MessageQueue. A topic the NameServer does not route raises ``AdminError``."""
        route = await self.examine_topic_route_info(topic)
        results = await asyncio.gather(*(self.get_topic_stats_info(a, topic) for a in route_brokers(route)))
        table = sorted((e for r in results for e in r), key=lambda e: e[0])
        if not table:
            raise AdminError(f"Not found the topic stats info: {topic}")
        return table

    async def query_topic_consume_by_who(self, topic: str, route: TopicRouteData | None = None) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO (300) on one broker of the topic's route."""
        if route is None:
            route = await self.examine_topic_route_info(topic)
        for bd in route.broker_datas:
            addr = select_broker_addr(bd)
            if addr:
                resp = await self.call(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
                obj = loads_fastjson(resp.body or b"{}")
                groups = obj.get("groupList") if isinstance(obj, dict) else None
                return sorted(str(g) for g in groups or [])
        return []

    # ------------------------------------------------------------------ topics: delete
    async def delete_topic_in_broker(self, addrs: Sequence[str], topic: str) -> None:
        """DELETE_TOPIC_IN_BROKER (215) on each broker."""
        fields = DeleteTopicRequestHeader(topic).to_ext_fields()
        for addr in addrs:
            await self.call(addr, RequestCode.DELETE_TOPIC_IN_BROKER, dict(fields))

    async def delete_topic_in_namesrv(self, topic: str, cluster: str | None = None) -> list[str]:
        """DELETE_TOPIC_IN_NAMESRV (216) on every NameServer; returns their addresses."""
        fields = DeleteTopicFromNamesrvRequestHeader(topic, cluster).to_ext_fields()
        for addr in self.namesrv_addrs:
            await self._namesrv_call(addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, dict(fields))
        return list(self.namesrv_addrs)

    async def _namesrv_call(
        self, addr: str, code: int, fields: dict[str, str], body: bytes | None = None
    ) -> RemotingCommand:
        """A request to one given NameServer (not just any of the list)."""
        try:
            resp = await self.api.raw(addr, code, fields, body, self.timeout_ms)
        except RemotingError as e:
            raise AdminError(f"NameServer {addr} unreachable: {e}") from None
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr)
        return resp

    # ------------------------------------------------------------------ NameServer: perms
    async def wipe_write_perm_of_broker(self, namesrv_addr: str, broker_name: str) -> int:
        """WIPE_WRITE_PERM_OF_BROKER (205): topics whose queue data lost PERM_WRITE."""
        resp = await self._namesrv_call(
            namesrv_addr, RequestCode.WIPE_WRITE_PERM_OF_BROKER, BrokerPermRequestHeader(broker_name).to_ext_fields()
        )
        return _int_field(resp, "wipeTopicCount", namesrv_addr)

    async def add_write_perm_of_broker(self, namesrv_addr: str, broker_name: str) -> int:
        """ADD_WRITE_PERM_OF_BROKER (327): topics whose queue data got PERM_WRITE back."""
        resp = await self._namesrv_call(
            namesrv_addr, RequestCode.ADD_WRITE_PERM_OF_BROKER, BrokerPermRequestHeader(broker_name).to_ext_fields()
        )
        return _int_field(resp, "addTopicCount", namesrv_addr)

    # ------------------------------------------------------------------ NameServer: config
    async def get_namesrv_config(self, namesrv_addr: str) -> dict[str, str]:
        """GET_NAMESRV_CONFIG (319): one NameServer's properties."""
        return _properties_body(
            await self._namesrv_call(namesrv_addr, RequestCode.GET_NAMESRV_CONFIG, {}), "NameServer"
        )

    async def update_namesrv_config(self, namesrv_addr: str, props: dict[str, str]) -> str:
        """UPDATE_NAMESRV_CONFIG (318), body = properties text; returns the remark (what
        waits for a restart)."""
        body = "".join(f"{k}={v}\n" for k, v in props.items()).encode("utf-8")
        resp = await self._namesrv_call(namesrv_addr, RequestCode.UPDATE_NAMESRV_CONFIG, {}, body)
        return resp.remark or ""

    # ------------------------------------------------------------------ consumers / producers
    async def _group_brokers(self, group: str) -> list[str]:
        """Brokers serving a consumer group: those of its retry topic's route."""
        retry = retry_topic(group)
        route = await self.namesrv(self.api.get_topic_route_info(retry, self.timeout_ms))
        if route is None:
            raise AdminError(
                f"consumer group {group} not found: the NameServer has no route "
                f"for its retry topic {retry} (no consumer of it ever connected)"
            )
        addrs = route_brokers(route)
        if not addrs:
            raise AdminError(f"consumer group {group}: no broker serves {retry}")
        return addrs

    async def examine_consume_stats(
        self, group: str, topic: str | None = None, brokers: Sequence[str] | None = None
    ) -> ConsumeStats:
        """GET_CONSUME_STATS (208) from every broker of the group (or ``brokers``), merged
        and sorted."""
        result = ConsumeStats()
        fields = GetConsumeStatsRequestHeader(group, topic).to_ext_fields()
        for addr in brokers if brokers is not None else await self._group_brokers(group):
            resp = await self.call(addr, RequestCode.GET_CONSUME_STATS, dict(fields))
            cs = ConsumeStats.from_json(resp.body or b"{}")
            result.offset_table += cs.offset_table
            result.consume_tps += cs.consume_tps
        if not result.offset_table:
            raise AdminError(
                f"consumer group {group} has no consume stats"
                + (f" for topic {topic}" if topic else "")
                + ": the offset table is empty, maybe the consumer has not "
                "consumed any message"
            )
        result.offset_table.sort(key=lambda e: e[0])
        return result

    async def examine_consumer_connection_info(self, group: str) -> ConsumerConnection:
        """GET_CONSUMER_CONNECTION_LIST (203) from the first broker of the group that
        knows it online."""
        ext = GetConsumerConnectionListRequestHeader(group).to_ext_fields()
        for addr in await self._group_brokers(group):
            resp = await self.call(addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, ext, None, _NOT_ONLINE)
            if resp.code != _NOT_ONLINE:
                return ConsumerConnection.from_json(resp.body or b"{}")
        raise ConsumerNotOnline(
            f"consumer group {group} is not online: no consumer of it is connected "
            f"(broker {addr} answered CONSUMER_NOT_ONLINE)"
        )

    async def get_consumer_running_info(self, group: str, client_id: str, jstack: bool = False) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO (307) through the group's first broker, which relays it to
        the client; three timeouts, as mqadmin (the broker waits 10 s for the client)."""
        addr = (await self._group_brokers(group))[0]
        ext = GetConsumerRunningInfoRequestHeader(group, client_id, jstack).to_ext_fields()
        resp = await self.api.raw(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, ext, None, self.timeout_ms * 3)
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            raise MQBrokerError(resp.code, resp.remark, addr)
        return ConsumerRunningInfo.from_json(resp.body)

    async def consume_message_directly(
        self, group: str, client_id: str, msg: MessageExt
    ) -> ConsumeMessageDirectlyResult:
        """CONSUME_MESSAGE_DIRECTLY (309) to the broker that stored ``msg``, which reads it
        by its offset msgId and relays it to the client's listener (three timeouts)."""
        addr = msg.store_host_str
        ext = ConsumeMessageDirectlyResultRequestHeader(group, client_id, msg.msg_id).to_ext_fields()
        resp = await self.api.raw(addr, RequestCode.CONSUME_MESSAGE_DIRECTLY, ext, None, self.timeout_ms * 3)
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            raise MQBrokerError(resp.code, resp.remark, addr)
        return ConsumeMessageDirectlyResult.from_json(resp.body)

    async def consume_offset(self, addr: str, group: str, mq: MessageQueue) -> int | None:
        """QUERY_CONSUMER_OFFSET (14); None when the group has no offset for the queue."""
        ext = {"consumerGroup": group, "topic": mq.topic, "queueId": str(mq.queue_id)}
        resp = await self.call(addr, RequestCode.QUERY_CONSUMER_OFFSET, ext, None, ResponseCode.QUERY_NOT_FOUND)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return _int_field(resp, "offset", addr)

    async def update_consume_offset(self, addr: str, group: str, mq: MessageQueue, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET (15) of one queue."""
        ext = {"consumerGroup": group, "topic": mq.topic, "queueId": str(mq.queue_id), "commitOffset": str(offset)}
        await self.call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext)

    async def examine_producer_connection_info(self, group: str, topic: str) -> ProducerConnection:
        """GET_PRODUCER_CONNECTION_LIST (204) from the brokers of topic's route, merged."""
        route = await self.examine_topic_route_info(topic)
        seen: dict[str, Connection] = {}
        ext = GetProducerConnectionListRequestHeader(group).to_ext_fields()
        for addr in route_brokers(route):
            resp = await self.call(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, ext, None, ResponseCode.SYSTEM_ERROR)
            if resp.code == ResponseCode.SYSTEM_ERROR:
                if "not exist" in (resp.remark or ""):  # the group is not on this broker
                    continue
                raise MQBrokerError(resp.code, resp.remark, addr)
            for c in ProducerConnection.from_json(resp.body or b"{}").connections:
                seen.setdefault(c.client_id + "@" + c.client_addr, c)
        if not seen:
            raise AdminError(
                f"producer group {group} is not online: no producer of it is connected to the brokers of topic {topic}"
            )
        return ProducerConnection(list(seen.values()))

    # ------------------------------------------------------------------ subscription groups
    async def create_and_update_subscription_group_config(self, addr: str, config: dict[str, object]) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200); body: SubscriptionGroupConfig JSON."""
        await self.call(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, dumps_fastjson(config))

    async def subscription_groups(self, addr: str) -> dict[str, dict[str, object]]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): group name -> config."""
        resp = await self.call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        obj = loads_fastjson(resp.body or b"{}")
        table = obj.get("subscriptionGroupTable") if isinstance(obj, dict) else None
        if not isinstance(table, dict):
            raise ProtocolError("SubscriptionGroupWrapper has no subscriptionGroupTable")
        return {str(k): v for k, v in table.items() if isinstance(v, dict)}

    async def delete_subscription_group(self, addr: str, group: str, remove_offset: bool = False) -> None:
        """DELETE_SUBSCRIPTIONGROUP (207)."""
        header = DeleteSubscriptionGroupRequestHeader(group, remove_offset or None)
        await self.call(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, header.to_ext_fields())

    # ------------------------------------------------------------------ broker config
    async def get_broker_config(self, addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG (26): the broker's properties."""
        return _properties_body(await self.call(addr, RequestCode.GET_BROKER_CONFIG), "broker")

    async def update_broker_config(self, addr: str, props: dict[str, str]) -> str:
        """UPDATE_BROKER_CONFIG (25); returns the broker's remark (what waits for a restart)."""
        body = "".join(f"{k}={v}\n" for k, v in props.items()).encode("utf-8")
        resp = await self.call(addr, RequestCode.UPDATE_BROKER_CONFIG, None, body)
        return resp.remark or ""

    # ------------------------------------------------------------------ messages
    async def view_message(self, msg_id: str) -> MessageExt:
        """VIEW_MESSAGE_BY_ID (33) at the broker and offset an offset msgId names."""
        try:
            ip, port, offset = decode_message_id(msg_id)
        except (ValueError, ProtocolError) as e:
            raise AdminError(f"{msg_id} is not an offset message id: {e}") from None
        addr = f"{ip}:{port}"
        try:
            return await self.api.view_message(addr, offset, self.timeout_ms)
        except MQBrokerError as e:
            raise AdminError(
                f"message {msg_id} not found: broker {addr} answered {ResponseCode.name_of(e.code)} ({e.remark})"
            ) from None

    async def query_message(
        self, topic: str, key: str, max_num: int, begin: int, end: int, unique_key: bool = False
    ) -> list[MessageExt]:
        """QUERY_MESSAGE (12) on every broker of topic's route (MQAdminImpl.queryMessage)."""
        route = await self.examine_topic_route_info(topic)
        found: list[MessageExt] = []
        for addr in route_brokers(route):
            try:
                r = await self.api.query_message(
                    addr, topic, key, max_num, begin, end, unique_key=unique_key, timeout_ms=self.timeout_ms
                )
            except MQBrokerError as e:
                if e.code == ResponseCode.QUERY_NOT_FOUND:
                    continue
                raise
            found += r.messages
        return found

    async def message_track_detail(self, msg: MessageExt) -> list[dict[str, str | None]]:
        """MessageTrack per group consuming msg's topic (DefaultMQAdminExtImpl): NOT_ONLINE,
        PULL, CONSUMED, CONSUMED_BUT_FILTERED, NOT_CONSUME_YET or UNKNOWN."""
        tracks: list[dict[str, str | None]] = []
        for group in await self.query_topic_consume_by_who(msg.topic):
            track: dict[str, str | None] = {"consumerGroup": group, "trackType": "UNKNOWN", "exceptionDesc": None}
            tracks.append(track)
            try:
                cc = await self.examine_consumer_connection_info(group)
            except ConsumerNotOnline as e:
                track["trackType"] = "NOT_ONLINE"
                track["exceptionDesc"] = f"CODE:{ResponseCode.CONSUMER_NOT_ONLINE} DESC:{e}"
                continue
            except Exception as e:
                track["exceptionDesc"] = str(e)
                continue
            if cc.consume_type == "CONSUME_ACTIVELY":
                track["trackType"] = "PULL"
                continue
            try:
                consumed = await self._consumed(msg, group)
            except Exception as e:
                track["exceptionDesc"] = str(e)
                continue
            if not consumed:
                track["trackType"] = "NOT_CONSUME_YET"
                continue
            track["trackType"] = "CONSUMED"
            sd = cc.subscriptions.get(msg.topic)
            if sd is not None and sd.tags_set and "*" not in sd.tags_set and msg.tags not in sd.tags_set:
                track["trackType"] = "CONSUMED_BUT_FILTERED"
        return tracks

    async def _consumed(self, msg: MessageExt, group: str) -> bool:
        stats = await self.examine_consume_stats(group, msg.topic)
        broker = await self.fetch_broker_name_by_addr(msg.store_host_str)
        for mq, ow in stats.offset_table:
            if (mq.topic, mq.broker_name, mq.queue_id) == (msg.topic, broker, msg.queue_id):
                return ow.consumer_offset > msg.queue_offset
        return False


def _properties_body(resp: RemotingCommand, who: str) -> dict[str, str]:
    """MixAll.properties2String text (key=value lines, no escapes) as a dict."""
    try:
        text = (resp.body or b"").decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError(f"{who} config body is not UTF-8: {e.reason}") from None
    pairs = (ln.partition("=") for ln in text.splitlines() if ln.strip() and ln[0] not in "#!")
    return {k.strip(): v.strip() for k, sep, v in pairs if sep}


def route_brokers(route: TopicRouteData) -> list[str]:
    """One address per broker group of the route (``select_broker_addr``), by broker name."""
    return [a for a in (select_broker_addr(bd) for bd in sorted(route.broker_datas, key=lambda b: b.broker_name)) if a]


def select_broker_addr(bd: BrokerData) -> str | None:
    """BrokerData.selectBrokerAddr: the master, else the lowest-id member."""
    if MASTER_ID in bd.broker_addrs:
        return bd.broker_addrs[MASTER_ID]
    return bd.broker_addrs[min(bd.broker_addrs)] if bd.broker_addrs else None


def _int_field(resp: RemotingCommand, name: str, addr: str) -> int:
    raw = (resp.ext_fields or {}).get(name)
    try:
        return int(raw or "0")
    except ValueError:
        raise ProtocolError(f"{addr} answered {name}={raw!r}") from None
