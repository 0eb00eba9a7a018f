"""The proxy's Prometheus metrics (RocketMQ 5 naming: ``rocketmq_*``, node_type="proxy").

* ``rocketmq_proxy_rpc_total{rpc, code}``: finished RPCs by v2 status code name;
* ``rocketmq_proxy_rpc_latency``: histogram of RPC latency in milliseconds by rpc (the broker's
  ``rocketmq_rpc_latency`` buckets);
* ``rocketmq_proxy_active_streams{rpc}``: open Telemetry / ReceiveMessage streams.

Served on ``metricsPromExporterPort`` when set (``rmq.remoting.metrics.MetricsHttpServer``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rmq.remoting.metrics import RPC_LATENCY_BUCKETS_MS, MetricsHttpServer

__all__ = ["ProxyMetrics"]


class ProxyMetrics:
    def __init__(self, cluster: str, node_id: str) -> None:
        self.registry = CollectorRegistry()
        labels = {"cluster": cluster, "node_type": "proxy", "node_id": node_id}
        names = list(labels)
        self._labels = labels
        self.rpc_total = Counter(
            "rocketmq_proxy_rpc", "5.x gRPC calls by rpc and status code", [*names, "rpc", "code"],
            registry=self.registry,
        )  # fmt: skip
        self.rpc_latency = Histogram(
            "rocketmq_proxy_rpc_latency", "5.x gRPC call latency (ms)", [*names, "rpc"],
            buckets=[float(b) for b in RPC_LATENCY_BUCKETS_MS], registry=self.registry,
        )  # fmt: skip
        self.active_streams = Gauge(
            "rocketmq_proxy_active_streams", "open streaming calls", [*names, "rpc"], registry=self.registry
        )
        self.http = MetricsHttpServer(self.registry, "proxy")

    def observe(self, rpc: str, code: str, latency_ms: float) -> None:
        self.rpc_total.labels(**self._labels, rpc=rpc, code=code).inc()
        self.rpc_latency.labels(**self._labels, rpc=rpc).observe(latency_ms)

    def stream_opened(self, rpc: str) -> None:
        self.active_streams.labels(**self._labels, rpc=rpc).inc()

    def stream_closed(self, rpc: str) -> None:
        self.active_streams.labels(**self._labels, rpc=rpc).dec()
