"""``RouteInfoManager``: the NameServer's tables, as RocketMQ 4.9.8 keeps them.

Pure state, no sockets and no clock of its own: callers pass ``now_ms`` (the server
uses a monotonic millisecond clock, so a wall-clock jump cannot expire every broker)
and an opaque, hashable ``conn_id`` naming the connection a broker registered through.

Tables (names as in Java):

* ``topic_queue_table``   topic -> brokerName -> QueueData
* ``broker_addr_table``   brokerName -> BrokerData (cluster, {brokerId: addr})
* ``cluster_addr_table``  cluster -> {brokerName}
* ``broker_live_table``   brokerAddr -> BrokerLiveInfo (last update, dataVersion,
  connection, haServerAddr)
* ``filter_server_table`` brokerAddr -> [filter server addr]

Everything runs on the one event loop, so there is no lock: each method is atomic
with respect to the others (the Java read/write lock has nothing left to protect).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from rmq.common.clock import monotonic_ms
from rmq.protocol.bodies import (
    MASTER_ID,
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from rmq.protocol.codes import PermName

__all__ = [
    "RouteInfoManager",
    "BrokerLiveInfo",
    "RegisterBrokerResult",
    "RemovedBroker",
    "BROKER_CHANNEL_EXPIRED_TIME_MS",
]

logger = logging.getLogger("rmq.nameserver.routes")

#: RouteInfoManager.BROKER_CHANNEL_EXPIRED_TIME: a broker silent this long is dropped.
BROKER_CHANNEL_EXPIRED_TIME_MS = 120_000

# TopicSysFlag bits used by the unit-topic lists.
_FLAG_UNIT = 0x1
_FLAG_UNIT_SUB = 0x2


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update_timestamp: int
    data_version: DataVersion
    conn_id: Hashable | None
    ha_server_addr: str | None


@dataclass(frozen=True, slots=True)
class RegisterBrokerResult:
    """What a registering slave learns: its master's HA address and broker address."""

    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(frozen=True, slots=True)
class RemovedBroker:
    """A broker address dropped by the expiry scan (its connection should be closed)."""

    broker_addr: str
    conn_id: Hashable | None
    last_update_timestamp: int


class RouteInfoManager:
    def __init__(self, clock: Callable[[], int] = monotonic_ms) -> None:
        self._clock = clock
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}

    # ------------------------------------------------------------------ registration
    def register_broker(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str | None,
        topic_config_wrapper: TopicConfigSerializeWrapper | None,
        filter_server_list: list[str] | None,
        conn_id: Hashable | None = None,
        now_ms: int | None = None,
    ) -> RegisterBrokerResult:
        """REGISTER_BROKER (also the 30 s heartbeat of every broker).

        Topic configs are taken only from a master (id 0), and only on its first
        registration or when its dataVersion changed. A slave gets its master's
        address and HA address back (if the master is registered and alive).
        """
        now = self._clock() if now_ms is None else now_ms
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)

        register_first = False
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            register_first = True
            broker_data = BrokerData(cluster_name, broker_name, {})
            self.broker_addr_table[broker_name] = broker_data
        addrs = broker_data.broker_addrs
        # One ip:port has one entry: a slave promoted to master (or any id change)
        # first loses its old <id, addr> pair.
        for old_id in [i for i, a in addrs.items() if a == broker_addr and i != broker_id]:
            logger.info(
                "cluster=%s broker=%s addr=%s: broker id changed %d -> %d",
                cluster_name,
                broker_name,
                broker_addr,
                old_id,
                broker_id,
            )
            del addrs[old_id]
        old_addr = addrs.get(broker_id)
        addrs[broker_id] = broker_addr
        if broker_id == MASTER_ID and old_addr != broker_addr:
            logger.info(
                "cluster=%s broker=%s master address change from %s to %s",
                cluster_name,
                broker_name,
                old_addr,
                broker_addr,
            )
        register_first = register_first or old_addr is None

        data_version = topic_config_wrapper.data_version if topic_config_wrapper is not None else DataVersion()
        if topic_config_wrapper is not None and broker_id == MASTER_ID:
            if register_first or self.is_broker_topic_config_changed(broker_addr, data_version):
                for tc in topic_config_wrapper.topic_config_table.values():
                    self._create_and_update_queue_data(broker_name, tc)

        prev = self.broker_live_table.get(broker_addr)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(now, data_version, conn_id, ha_server_addr)
        if prev is None:
            logger.info(
                "new broker registered: cluster=%s broker=%s id=%d addr=%s HAServer=%s",
                cluster_name,
                broker_name,
                broker_id,
                broker_addr,
                ha_server_addr,
            )

        if filter_server_list is not None:
            if filter_server_list:
                self.filter_server_table[broker_addr] = list(filter_server_list)
            else:
                self.filter_server_table.pop(broker_addr, None)

        if broker_id != MASTER_ID:
            master_addr = addrs.get(MASTER_ID)
            if master_addr is not None:
                master_live = self.broker_live_table.get(master_addr)
                if master_live is not None:
                    return RegisterBrokerResult(master_live.ha_server_addr, master_addr)
        return RegisterBrokerResult()

    def _create_and_update_queue_data(self, broker_name: str, tc: TopicConfig) -> None:
        qd = QueueData(broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)
        by_broker = self.topic_queue_table.get(tc.topic_name)
        if by_broker is None:
            self.topic_queue_table[tc.topic_name] = {broker_name: qd}
            logger.info("new topic registered: topic=%s broker=%s %s", tc.topic_name, broker_name, qd)
            return
        old = by_broker.get(broker_name)
        by_broker[broker_name] = qd
        if old is not None and old != qd:
            logger.info("topic changed: topic=%s broker=%s OLD: %s NEW: %s", tc.topic_name, broker_name, old, qd)

    def is_broker_topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        prev = self.query_broker_topic_config(broker_addr)
        return prev is None or prev != data_version

    def query_broker_topic_config(self, broker_addr: str) -> DataVersion | None:
        live = self.broker_live_table.get(broker_addr)
        return None if live is None else live.data_version

    def update_broker_info_update_timestamp(self, broker_addr: str, now_ms: int | None = None) -> None:
        live = self.broker_live_table.get(broker_addr)
        if live is not None:
            live.last_update_timestamp = self._clock() if now_ms is None else now_ms

    def unregister_broker(self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        """UNREGISTER_BROKER (a broker shutting down cleanly)."""
        live = self.broker_live_table.pop(broker_addr, None)
        logger.info(
            "unregisterBroker: cluster=%s broker=%s id=%d addr=%s, remove from brokerLiveTable %s",
            cluster_name,
            broker_name,
            broker_id,
            broker_addr,
            "OK" if live is not None else "Failed",
        )
        self.filter_server_table.pop(broker_addr, None)

        remove_broker_name = False
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is not None:
            addr = broker_data.broker_addrs.pop(broker_id, None)
            logger.info(
                "unregisterBroker: remove addr from brokerAddrTable %s, %s",
                "OK" if addr is not None else "Failed",
                broker_addr,
            )
            if not broker_data.broker_addrs:
                del self.broker_addr_table[broker_name]
                logger.info("unregisterBroker: remove name from brokerAddrTable OK, broker=%s", broker_name)
                remove_broker_name = True

        if remove_broker_name:
            names = self.cluster_addr_table.get(cluster_name)
            if names is not None:
                removed = broker_name in names
                names.discard(broker_name)
                logger.info(
                    "unregisterBroker: remove name from clusterAddrTable %s, cluster=%s broker=%s",
                    "OK" if removed else "Failed",
                    cluster_name,
                    broker_name,
                )
                if not names:
                    del self.cluster_addr_table[cluster_name]
                    logger.info("unregisterBroker: remove cluster from clusterAddrTable, cluster=%s", cluster_name)
            self._remove_topic_by_broker_name(broker_name, "unregistered")

    def _remove_topic_by_broker_name(self, broker_name: str, why: str) -> None:
        empty = []
        for topic, by_broker in self.topic_queue_table.items():
            old = by_broker.pop(broker_name, None)
            if old is not None:
                logger.info(
                    "remove topic from topicQueueTable (%s): topic=%s broker=%s %s", why, topic, broker_name, old
                )
            if not by_broker:
                empty.append(topic)
        for topic in empty:
            del self.topic_queue_table[topic]
            logger.info("remove topic, no broker left (%s): topic=%s", why, topic)

    # ------------------------------------------------------------------ liveness
    def scan_not_active_broker(
        self, now_ms: int, expire_ms: int = BROKER_CHANNEL_EXPIRED_TIME_MS
    ) -> list[RemovedBroker]:
        """Drop every broker whose last registration is older than ``expire_ms``.

        Returns what was dropped; the caller closes those connections (as Java
        closes the channel).
        """
        removed = []
        for addr, live in list(self.broker_live_table.items()):
            if live.last_update_timestamp + expire_ms < now_ms:
                del self.broker_live_table[addr]
                logger.warning(
                    "the broker channel expired: addr=%s, silent %d ms (limit %d ms)",
                    addr,
                    now_ms - live.last_update_timestamp,
                    expire_ms,
                )
                self._remove_broker_addr(addr, "channel expired")
                removed.append(RemovedBroker(addr, live.conn_id, live.last_update_timestamp))
        return removed

    def on_channel_destroy(self, conn_id: Hashable) -> list[str]:
        """A connection closed: drop every broker that registered through it.

        (BrokerHousekeepingService.) A broker that re-registered over a newer
        connection is not affected by its old connection closing. Returns the
        broker addresses removed.
        """
        addrs = [a for a, live in self.broker_live_table.items() if live.conn_id == conn_id]
        for addr in addrs:
            logger.info("the broker's channel destroyed, addr=%s, clean its data structure at once", addr)
            del self.broker_live_table[addr]
            self._remove_broker_addr(addr, "channel destroyed")
        return addrs

    def _remove_broker_addr(self, broker_addr: str, why: str) -> None:
        """Remove one address from the broker, cluster and topic tables."""
        self.filter_server_table.pop(broker_addr, None)
        broker_name_found: str | None = None
        cluster_found: str | None = None
        remove_broker_name = False
        for name, bd in list(self.broker_addr_table.items()):
            for bid, addr in list(bd.broker_addrs.items()):
                if addr == broker_addr:
                    broker_name_found = name
                    cluster_found = bd.cluster
                    del bd.broker_addrs[bid]
                    logger.info(
                        "remove brokerAddr[%d, %s] from brokerAddrTable (%s): cluster=%s broker=%s",
                        bid,
                        addr,
                        why,
                        bd.cluster,
                        name,
                    )
                    break
            if broker_name_found is not None:
                if not bd.broker_addrs:
                    remove_broker_name = True
                    del self.broker_addr_table[name]
                    logger.info(
                        "remove brokerName from brokerAddrTable (%s): cluster=%s broker=%s", why, bd.cluster, name
                    )
                break

        if broker_name_found is not None and remove_broker_name:
            for cluster, names in list(self.cluster_addr_table.items()):
                if broker_name_found in names:
                    names.discard(broker_name_found)
                    logger.info(
                        "remove brokerName from clusterAddrTable (%s): cluster=%s broker=%s",
                        why,
                        cluster,
                        broker_name_found,
                    )
                    if not names:
                        del self.cluster_addr_table[cluster]
                        logger.info(
                            "remove cluster from clusterAddrTable, no broker left (%s): cluster=%s", why, cluster
                        )
                    break
            self._remove_topic_by_broker_name(broker_name_found, why)
        elif broker_name_found is not None:
            logger.debug(
                "broker %s (cluster=%s) keeps other members after %s left",
                broker_name_found,
                cluster_found,
                broker_addr,
            )

    # ------------------------------------------------------------------ queries
    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        """Route of ``topic``: copies of its queue datas and broker datas; None if no
        queue data or none of its brokers is known."""
        by_broker = self.topic_queue_table.get(topic)
        if by_broker is None:
            return None
        route = TopicRouteData([qd.copy() for qd in by_broker.values()], [], {})
        for broker_name in by_broker:
            bd = self.broker_addr_table.get(broker_name)
            if bd is None:
                continue
            clone = bd.copy()
            route.broker_datas.append(clone)
            if self.filter_server_table:
                for addr in clone.broker_addrs.values():
                    servers = self.filter_server_table.get(addr)
                    if servers is not None:
                        route.filter_server_table[addr] = list(servers)
        if not route.broker_datas:
            return None
        return route

    def get_all_cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            {name: bd.copy() for name, bd in self.broker_addr_table.items()},
            {c: sorted(n) for c, n in self.cluster_addr_table.items()},
        )

    def get_all_topic_list(self) -> TopicList:
        return TopicList(list(self.topic_queue_table))

    def get_topics_by_cluster(self, cluster: str) -> TopicList:
        """Topics with a queue on any broker of ``cluster`` (empty for an unknown one)."""
        names = self.cluster_addr_table.get(cluster, set())
        topics = [t for t, by_broker in self.topic_queue_table.items() if not names.isdisjoint(by_broker)]
        return TopicList(topics)

    def get_system_topic_list(self) -> TopicList:
        """Cluster and broker names (each is a topic on its brokers), plus one broker
        address to ask for the rest."""
        topics: list[str] = []
        for cluster, names in self.cluster_addr_table.items():
            topics.append(cluster)
            topics.extend(sorted(names))
        broker_addr = None
        for bd in self.broker_addr_table.values():
            if bd.broker_addrs:
                broker_addr = next(iter(bd.broker_addrs.values()))
                break
        # A set in Java: a cluster named like one of its brokers appears once.
        return TopicList(list(dict.fromkeys(topics)), broker_addr)

    def _topics_where(self, pick: Callable[[QueueData], bool]) -> TopicList:
        # As Java: only the first queue data of each topic decides.
        return TopicList(
            [t for t, by_broker in self.topic_queue_table.items() if by_broker and pick(next(iter(by_broker.values())))]
        )

    def get_unit_topics(self) -> TopicList:
        return self._topics_where(lambda qd: bool(qd.topic_sys_flag & _FLAG_UNIT))

    def get_has_unit_sub_topic_list(self) -> TopicList:
        return self._topics_where(lambda qd: bool(qd.topic_sys_flag & _FLAG_UNIT_SUB))

    def get_has_unit_sub_ununit_topic_list(self) -> TopicList:
        return self._topics_where(
            lambda qd: not qd.topic_sys_flag & _FLAG_UNIT and bool(qd.topic_sys_flag & _FLAG_UNIT_SUB)
        )

    # ------------------------------------------------------------------ admin
    def delete_topic(self, topic: str, cluster_name: str | None = None) -> None:
        """DELETE_TOPIC_IN_NAMESRV: the whole topic, or only its queues on ``cluster_name``."""
        if not cluster_name:
            if self.topic_queue_table.pop(topic, None) is not None:
                logger.info("deleteTopic: topic=%s", topic)
            return
        by_broker = self.topic_queue_table.get(topic)
        names = self.cluster_addr_table.get(cluster_name)
        if by_broker is None or not names:
            return
        for broker_name in names:
            removed = by_broker.pop(broker_name, None)
            if removed is not None:
                logger.info(
                    "deleteTopic: remove one broker's topic, topic=%s cluster=%s broker=%s %s",
                    topic,
                    cluster_name,
                    broker_name,
                    removed,
                )
        if not by_broker:
            del self.topic_queue_table[topic]
            logger.info("deleteTopic: remove the topic all queue, topic=%s cluster=%s", topic, cluster_name)

    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        """WIPE_WRITE_PERM_OF_BROKER: clear PERM_WRITE on the broker's queues; topics touched."""
        return self._operate_perm(broker_name, lambda perm: perm & ~PermName.PERM_WRITE)

    def add_write_perm_of_broker(self, broker_name: str) -> int:
        """ADD_WRITE_PERM_OF_BROKER: set the broker's queues to read+write (as 4.9.8:
        the perm becomes exactly RW, whatever it was)."""
        return self._operate_perm(broker_name, lambda _: PermName.PERM_READ | PermName.PERM_WRITE)

    def _operate_perm(self, broker_name: str, change: Callable[[int], int]) -> int:
        count = 0
        for by_broker in self.topic_queue_table.values():
            qd = by_broker.get(broker_name)
            if qd is not None:
                qd.perm = change(qd.perm)
                count += 1
        return count

    # ------------------------------------------------------------------ inspection
    def broker_addrs(self) -> Iterable[str]:
        return list(self.broker_live_table)
