"""The NameServer's Prometheus metrics on /metrics (``rmq namesrv --metrics-port N``).

Every series carries node_type ("namesrv") and node_id (host:port of the NameServer);
a NameServer serves every cluster, so ``cluster`` is a label only where a figure
belongs to one (brokers alive, failover events).

* ``rocketmq_namesrv_brokers_alive{cluster}``: registered broker addresses (masters and
  slaves) not expired, per cluster ever seen, at scrape time;
* ``rocketmq_namesrv_route_requests_total{response_code}`` and
  ``rocketmq_namesrv_registrations_total``: read from the rpc latency histograms the
  dispatcher observer keeps anyway (GET_ROUTEINFO_BY_TOPIC, REGISTER_BROKER);
* ``rocketmq_namesrv_failover_events_total{cluster, broker_name}``: bumped by
  ``record_failover`` (the failover controller's);
* ``rocketmq_auth_failures_total{reason}`` (aclEnable): requests the ACL refused, as on
  the broker;
* ``rocketmq_rpc_latency`` and ``rocketmq_protocol_errors_total`` as on the broker.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.remoting.metrics import (
    RPC_LATENCY_BUCKETS_MS,
    Families,
    HistogramSnapshot,
    LoopSnapshot,
    MetricsHttpServer,
    NodeLabels,
    RpcLatencyRecorder,
)

if TYPE_CHECKING:
    from nameserver.server import NameServer

__all__ = ["NameServerMetrics"]


@dataclass(frozen=True, slots=True)
class NameServerSnapshot:
    brokers_alive: dict[str, int]
    rpc_latency: dict[tuple, HistogramSnapshot]
    failovers: dict[tuple[str, str], int]
    protocol_errors: int
    auth_failures: dict[str, int]


class NameServerMetrics:
    """Registry, collector and exporter of one NameServer. ``start(host, port)`` on the
    loop once the NameServer is listening; ``await stop()`` before it stops."""

    def __init__(self, server: NameServer, node_id: str) -> None:
        self.server = server
        self.node = NodeLabels(node_type="namesrv", node_id=node_id)
        self.registry = CollectorRegistry(auto_describe=False)
        self.rpc = RpcLatencyRecorder()
        self.failovers: dict[tuple[str, str], int] = {}
        self._clusters_seen: set[str] = set()
        self.exporter = MetricsHttpServer(self.registry, f"NameServer {node_id}")
        self._snapshot: LoopSnapshot[NameServerSnapshot] | None = None
        self.registry.register(self)

    def record_failover(self, cluster: str, broker_name: str) -> None:
        """One failover of a broker group (call on the event loop)."""
        key = (cluster, broker_name)
        self.failovers[key] = self.failovers.get(key, 0) + 1

    def start(self, host: str, port: int) -> bool:
        self._snapshot = LoopSnapshot(asyncio.get_running_loop(), self._take, what="NameServer metrics")
        self.server.remoting.set_rpc_observer(self.rpc)
        return self.exporter.start(host, port)

    async def stop(self) -> None:
        self.server.remoting.set_rpc_observer(None)
        await asyncio.to_thread(self.exporter.stop)

    # ------------------------------------------------------------------ collector protocol
    def describe(self) -> list:
        return list(self._families(None))

    def collect(self) -> list:
        return list(self._families(self._snapshot.get() if self._snapshot else None))

    def _take(self) -> NameServerSnapshot:
        routes = self.server.routes
        live = routes.broker_live_table
        # A cluster whose last broker left reads 0 rather than vanishing, so that an
        # alert on "fewer than N brokers alive" still fires.
        self._clusters_seen.update(routes.cluster_addr_table)
        alive: dict[str, int] = {c: 0 for c in self._clusters_seen}
        for bd in routes.broker_addr_table.values():
            n = sum(1 for addr in bd.broker_addrs.values() if addr in live)
            alive[bd.cluster] = alive.get(bd.cluster, 0) + n
        guard = self.server.acl_guard
        return NameServerSnapshot(
            alive,
            self.rpc.snapshot(),
            dict(self.failovers),
            self.server.remoting.stats.protocol_errors,
            guard.failure_counts() if guard is not None else {},
        )

    def _families(self, s: NameServerSnapshot | None) -> Families:
        f = Families(self.node)
        f.gauge("rocketmq_namesrv_brokers_alive", "Live broker addresses per cluster.", ["cluster"])
        f.counter("rocketmq_namesrv_route_requests_total", "GET_ROUTEINFO_BY_TOPIC requests.", ["response_code"])
        f.counter("rocketmq_namesrv_registrations_total", "REGISTER_BROKER requests (registrations and heartbeats).")
        f.counter("rocketmq_namesrv_failover_events_total", "Masters replaced by failover.", ["cluster", "broker_name"])
        f.histogram("rocketmq_rpc_latency", "Request handling time in milliseconds.", ["request_code", "response_code"])
        f.counter("rocketmq_protocol_errors_total", "Connections closed for malformed frames.")
        f.counter("rocketmq_auth_failures_total", "Requests refused by the ACL.", ["reason"])
        if s is None:
            return f
        for cluster, n in s.brokers_alive.items():
            f.sample("rocketmq_namesrv_brokers_alive", n, [cluster])
        registrations = 0
        for key, h in s.rpc_latency.items():
            f.histogram_sample("rocketmq_rpc_latency", RPC_LATENCY_BUCKETS_MS, h, RpcLatencyRecorder.label_values(key))
            request_code, response_code = key
            if request_code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
                f.sample(
                    "rocketmq_namesrv_route_requests_total", sum(h[0]), [ResponseCode.name_of(response_code).lower()]
                )
            elif request_code == RequestCode.REGISTER_BROKER:
                registrations += sum(h[0])
        f.sample("rocketmq_namesrv_registrations_total", registrations)
        for (cluster, broker), n in s.failovers.items():
            f.sample("rocketmq_namesrv_failover_events_total", n, [cluster, broker])
        f.sample("rocketmq_protocol_errors_total", s.protocol_errors)
        for reason, n in s.auth_failures.items():
            f.sample("rocketmq_auth_failures_total", n, [reason])
        return f
