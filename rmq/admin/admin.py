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
from dataclasses import dataclass
from typing import Any, Awaitable, Sequence, TypeVar

from rmq.admin.base import AdminError
from rmq.client.api import MQClientAPI
from rmq.client.errors import MQBrokerError
from rmq.protocol.codes import MQVersion, RequestCode, ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.route import (MASTER_ID, BrokerData, ClusterInfo, MessageQueue, TopicConfig,
                                TopicRouteData, loads_fastjson, loads_object_keyed_map)
from rmq.remoting.client import RemotingClient
from rmq.remoting.errors import RemotingError

__all__ = ["MQAdmin", "TopicOffset", "DEFAULT_NAMESRV", "DEFAULT_TIMEOUT_MS",
           "NAMESPACE_ORDER_TOPIC_CONFIG", "RETRY_GROUP_TOPIC_PREFIX", "DLQ_GROUP_TOPIC_PREFIX"]

DEFAULT_NAMESRV = "127.0.0.1:9876"
DEFAULT_TIMEOUT_MS = 5000                  # DefaultMQAdminExt.timeoutMillis
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"   # NamesrvUtil
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"       # MixAll
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

T = TypeVar("T")


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
            return cls(int(obj.get("minOffset") or 0), int(obj.get("maxOffset") or 0),
                       int(obj.get("lastUpdateTimestamp") or 0))
        except (TypeError, ValueError) as e:
            raise ProtocolError(f"bad TopicOffset: {e}") from None


class MQAdmin:
    """Admin requests over one remoting client; use ``async with``."""

    def __init__(self, namesrv_addrs: Sequence[str], timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        self.namesrv_addrs = [a for a in namesrv_addrs if a]
        self.timeout_ms = timeout_ms
        self.remoting = RemotingClient(version=MQVersion.V4_9_8, name="rmq-admin",
                                       connect_timeout=min(3.0, timeout_ms / 1000))
        self.api = MQClientAPI(self.remoting, self.namesrv_addrs)
        self._cluster_info: ClusterInfo | None = None

    async def close(self) -> None:
        await self.remoting.close()

    async def __aenter__(self) -> MQAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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

    async def call(self, addr: str | None, code: int, ext_fields: dict[str, str] | None = None,
                   body: bytes | None = None, *ok: int) -> RemotingCommand:
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
            self._cluster_info = await self.namesrv(
                self.api.get_broker_cluster_info(self.timeout_ms))
        return self._cluster_info

    async def examine_topic_route_info(self, topic: str) -> TopicRouteData:
        route = await self.namesrv(self.api.get_topic_route_info(topic, self.timeout_ms))
        if route is None:
            raise AdminError(f"No topic route info in name server for the topic: {topic}")
        return route

    async def fetch_all_topic_list(self) -> list[str]:
        return await self.namesrv(self.api.get_all_topic_list(self.timeout_ms))

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        resp = await self.call(None, RequestCode.GET_KV_CONFIG,
                               {"namespace": namespace, "key": key}, None,
                               ResponseCode.QUERY_NOT_FOUND)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return (resp.ext_fields or {}).get("value")

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        """PUT_KV_CONFIG to every NameServer (MQClientAPIImpl.putKVConfigValue)."""
        fields = {"namespace": namespace, "key": key, "value": value}
        for addr in self.namesrv_addrs:
            try:
                resp = await self.api.raw(addr, RequestCode.PUT_KV_CONFIG, dict(fields),
                                          None, self.timeout_ms)
            except RemotingError as e:
                raise AdminError(f"NameServer {addr} unreachable: {e}") from None
            if resp.code != ResponseCode.SUCCESS:
                raise MQBrokerError(resp.code, resp.remark, addr)

    async def create_or_update_order_conf(self, topic: str, order_conf: str,
                                          is_cluster: bool) -> str:
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
            raise AdminError(f"cluster {cluster} not found on NameServer {self.namesrv_desc} "
                             f"(known: {', '.join(sorted(ci.cluster_addr_table)) or 'none'})")
        return [ci.broker_addr_table[n] for n in sorted(set(names))
                if n in ci.broker_addr_table]

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
        return [bd.broker_addrs[i] for bd in await self._cluster_brokers(cluster)
                for i in sorted(bd.broker_addrs)]

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

    async def create_and_update_topic_config(self, addr: str, tc: TopicConfig) -> None:
        """UPDATE_AND_CREATE_TOPIC (17) on one broker."""
        await self.api.create_topic(addr, tc, timeout_ms=self.timeout_ms)

    async def get_topic_stats_info(self, addr: str,
                                   topic: str) -> list[tuple[MessageQueue, TopicOffset]]:
        """GET_TOPIC_STATS_INFO (202): ``TopicStatsTable`` of one broker."""
        resp = await self.call(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
        return [(MessageQueue.from_obj(k), TopicOffset.from_obj(v))
                for k, v in loads_object_keyed_map(resp.body or b"{}", "offsetTable")]

    async def examine_topic_stats(self, topic: str) -> list[tuple[MessageQueue, TopicOffset]]:
        """Every broker group's stats for ``topic`` (its master, else any member), sorted
        by MessageQueue. A topic the NameServer does not route raises ``AdminError``."""
        route = await self.examine_topic_route_info(topic)
        addrs = [_select_broker_addr(bd) for bd in route.broker_datas]
        results = await asyncio.gather(*(self.get_topic_stats_info(a, topic)
                                         for a in addrs if a))
        table = sorted((e for r in results for e in r), key=lambda e: e[0])
        if not table:
            raise AdminError(f"Not found the topic stats info: {topic}")
        return table

    async def query_topic_consume_by_who(self, topic: str,
                                         route: TopicRouteData | None = None) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO (300) on one broker of the topic's route."""
        if route is None:
            route = await self.examine_topic_route_info(topic)
        for bd in route.broker_datas:
            addr = _select_broker_addr(bd)
            if addr:
                resp = await self.call(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO,
                                       {"topic": topic})
                obj = loads_fastjson(resp.body or b"{}")
                groups = obj.get("groupList") if isinstance(obj, dict) else None
                return sorted(str(g) for g in groups or [])
        return []


def _select_broker_addr(bd: BrokerData) -> str | None:
    """BrokerData.selectBrokerAddr: the master, else the lowest-id member."""
    if MASTER_ID in bd.broker_addrs:
        return bd.broker_addrs[MASTER_ID]
    return bd.broker_addrs[min(bd.broker_addrs)] if bd.broker_addrs else None
