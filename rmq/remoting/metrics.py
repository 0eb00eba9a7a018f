"""Prometheus exposition shared by the broker and the NameServer.

Threads: prometheus_client's HTTP server answers scrapes in its own threads, so a
scrape never queues behind the event loop's work and never blocks it. The state the
gauges describe (topic tables, offsets, connections, the store) lives on the event loop
and is mutated there without locks. A collector therefore never walks that state from
the HTTP thread: ``LoopSnapshot`` hands a snapshot function to the loop
(``call_soon_threadsafe``) and waits for its result. The function runs between two
loop callbacks, so it sees consistent state, copies plain values (ints, strings,
tuples) and returns; building the metric families and the text encoding stay in the
HTTP thread. The put path pays nothing for this.

Per-message and per-request figures are plain ints and lists bumped on the loop
(``LoopHistogram``, counters in BrokerStats); the snapshot copies them too. A
prometheus_client ``Counter.labels().inc()`` or ``Histogram.observe()`` per message
would take a lock and a label lookup each time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from rmq.protocol.codes import RequestCode, ResponseCode

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

__all__ = [
    "LabelledHistograms",
    "LoopHistogram",
    "LoopSnapshot",
    "MetricsHttpServer",
    "NodeLabels",
    "RPC_LATENCY_BUCKETS_MS",
    "RpcLatencyRecorder",
    "Families",
]

log = logging.getLogger("rmq.metrics")

T = TypeVar("T")
F = TypeVar("F", CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily)

# RocketMQ 5.x RemotingMetricsManager: rpc latency in milliseconds.
RPC_LATENCY_BUCKETS_MS = (1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)

HistogramSnapshot = tuple[tuple[int, ...], float]
"""Per-bucket counts (the last one is +Inf, not cumulative) and the sum."""


class LoopHistogram:
    """Fixed buckets counted with plain ints: one bisect and two additions per value.

    Not thread-safe by design: observed and snapshotted on the event loop only."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound falls in that bound's bucket (le).
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def snapshot(self) -> HistogramSnapshot:
        return tuple(self.counts), self.sum


class LabelledHistograms:
    """LoopHistograms by a tuple of label values."""

    __slots__ = ("bounds", "by_labels")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.by_labels: dict[tuple, LoopHistogram] = {}

    def observe(self, labels: tuple, value: float) -> None:
        h = self.by_labels.get(labels)
        if h is None:
            h = self.by_labels[labels] = LoopHistogram(self.bounds)
        h.counts[bisect_left(h.bounds, value)] += 1
        h.sum += value

    def snapshot(self) -> dict[tuple, HistogramSnapshot]:
        return {k: h.snapshot() for k, h in self.by_labels.items()}


class RpcLatencyRecorder:
    """The remoting dispatcher's observer: latency by (request code, response code).

    Codes stay ints on the hot path; names are looked up at scrape time."""

    def __init__(self) -> None:
        self.histograms = LabelledHistograms(RPC_LATENCY_BUCKETS_MS)

    def __call__(self, request_code: int, response_code: int, seconds: float) -> None:
        self.histograms.observe((request_code, response_code), seconds * 1000.0)

    def snapshot(self) -> dict[tuple, HistogramSnapshot]:
        return self.histograms.snapshot()

    @staticmethod
    def label_values(key: tuple) -> tuple[str, str]:
        """RocketMQ 5.x label values: the codes' lower-case names."""
        rq, rs = key
        return RequestCode.name_of(rq).lower(), ResponseCode.name_of(rs).lower()


class LoopSnapshot(Generic[T]):
    """Run ``take()`` on the event loop and return its result to another thread."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, take: Callable[[], T], timeout: float = 5.0, what: str = "metrics"
    ) -> None:
        self._loop = loop
        self._take = take
        self._timeout = timeout
        self._what = what

    def get(self) -> T | None:
        """The snapshot, or None when the loop is gone or does not answer in time."""
        loop = self._loop
        if loop.is_closed():
            return None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            return self._take()
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(self._take())
            except BaseException as e:  # handed to the scraping thread, logged there
                fut.set_exception(e)

        try:
            loop.call_soon_threadsafe(run)
        except RuntimeError:  # closed meanwhile
            return None
        try:
            return fut.result(self._timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            log.warning(
                "%s: the event loop did not answer a scrape within %.0f s; serving families without samples",
                self._what,
                self._timeout,
            )
            return None
        except Exception:
            log.exception("%s: taking the snapshot failed", self._what)
            return None


class NodeLabels:
    """The labels every series of a process carries (RocketMQ 5.x: cluster, node_type,
    node_id), in order."""

    def __init__(self, **labels: str) -> None:
        self.names = tuple(labels)
        self.values = tuple(labels.values())


class Families:
    """Builds metric families whose series all carry the node labels.

    ``add(name, value, **labels)`` wants the family's label names in the order the
    family was declared with."""

    def __init__(self, node: NodeLabels) -> None:
        self.node = node
        self.families: dict[str, CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily] = {}

    def _declare(self, cls: type[F], name: str, doc: str, labels: Sequence[str]) -> F:
        fam = cls(name, doc, labels=[*self.node.names, *labels])
        self.families[name] = fam
        return fam

    def counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> CounterMetricFamily:
        return self._declare(CounterMetricFamily, name, doc, labels)

    # No ``unit=``: prometheus_client would append it to the name, and the names are
    # RocketMQ's as they are (the unit is in the help text).
    def gauge(self, name: str, doc: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
        return self._declare(GaugeMetricFamily, name, doc, labels)

    def histogram(self, name: str, doc: str, labels: Sequence[str] = ()) -> HistogramMetricFamily:
        return self._declare(HistogramMetricFamily, name, doc, labels)

    def sample(self, name: str, value: float, labels: Sequence[str] = ()) -> None:
        fam = self.families[name]
        assert not isinstance(fam, HistogramMetricFamily), name
        fam.add_metric([*self.node.values, *labels], value)

    def histogram_sample(
        self, name: str, bounds: Sequence[float], snap: HistogramSnapshot, labels: Sequence[str] = ()
    ) -> None:
        counts, total = snap
        buckets = []
        acc = 0
        for bound, n in zip(bounds, counts, strict=False):  # counts has the +Inf one more
            acc += n
            buckets.append((floatToGoString(bound), acc))
        buckets.append(("+Inf", acc + counts[-1]))
        fam = self.families[name]
        assert isinstance(fam, HistogramMetricFamily), name
        fam.add_metric([*self.node.values, *labels], buckets, total)

    def __iter__(self) -> Iterator[Metric]:
        return iter(self.families.values())


class MetricsHttpServer:
    """prometheus_client's HTTP exporter for one registry (its own threads).

    A port that cannot be bound is logged as a warning and the process runs on
    without /metrics: metrics must never keep a broker or NameServer down."""

    def __init__(self, registry: CollectorRegistry, what: str) -> None:
        self.registry = registry
        self.what = what
        self.host = ""
        self.port = 0
        self._httpd: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def serving(self) -> bool:
        return self._httpd is not None

    def start(self, host: str, port: int) -> bool:
        try:
            httpd, self._thread = start_http_server(port, host, registry=self.registry)
        except OSError as e:
            log.warning(
                "%s: Prometheus exporter not started, cannot listen on %s:%d (%s); running without /metrics",
                self.what,
                host,
                port,
                e.strerror or e,
            )
            return False
        self._httpd = httpd
        self.host = host
        self.port = httpd.server_address[1]
        log.info("%s: Prometheus metrics on http://%s:%d/metrics", self.what, host, self.port)
        return True

    def stop(self) -> None:
        """Blocking (serve_forever polls every 0.5 s): call it from a thread."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(2)
