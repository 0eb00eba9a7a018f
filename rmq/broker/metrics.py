"""The broker's Prometheus metrics on /metrics (RocketMQ 5.x names and labels).

Served only when ``metricsPromExporterPort`` is set; every series carries cluster,
node_type ("broker") and node_id (the brokerName, as RocketMQ: a master and its slave
are told apart by Prometheus's ``instance`` label). Every family is declared on every
scrape, so its ``# TYPE`` line is there before the first sample.

Where the figures come from (see ``rmq.remoting.metrics`` for the threading):

* per message / per request, bumped on the event loop as plain ints: BrokerStats
  (messages and bytes in per topic, out per topic and group, pulled offsets), the
  message size, rpc latency (the remoting dispatcher's observer), flush latency and
  group-commit batch size (the flush services' observers);
* at scrape time, in one snapshot taken on the loop: consumer lag, lag latency and
  in-flight messages for every group with committed offsets (masters only: a slave's
  offsets are copies of its master's), connections, flush / dispatch behind, the
  message reserve time, topic and group counts, role, HA state, protocol errors;
* at scrape time in the HTTP thread: the store file system's used bytes (statvfs).

HA (beyond RocketMQ): the role services' ``ha_service`` (None when this broker is not a
master) gives ``slave_ack_offsets()`` and ``in_sync_replicas()``; ``epoch()`` the epoch
(0 with static roles).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from prometheus_client import CollectorRegistry

from ha.service import HAService
from rmq.broker.client_manager import ConsumerManager, ProducerManager
from rmq.broker.config import BrokerConfig
from rmq.broker.offsets import TOPIC_GROUP_SEPARATOR, ConsumerOffsetManager
from rmq.broker.stats import BrokerStats
from rmq.broker.subscriptions import SubscriptionGroupManager
from rmq.broker.topics import TopicConfigManager
from rmq.common.clock import now_ms
from rmq.protocol.codes import LanguageCode, MQVersion
from rmq.remoting.metrics import (
    RPC_LATENCY_BUCKETS_MS,
    Families,
    HistogramSnapshot,
    LoopHistogram,
    LoopSnapshot,
    MetricsHttpServer,
    NodeLabels,
    RpcLatencyRecorder,
)
from rmq.remoting.server import RemotingServer
from rmq.store.config import BrokerRole, MessageStoreConfig
from rmq.store.message_store import MessageStore

log = logging.getLogger("rmq.broker.metrics")

# RocketMQ 5.x BrokerMetricsManager: 1 KiB, 4 KiB, 512 KiB, 1 MiB, 2 MiB, 4 MiB.
MESSAGE_SIZE_BUCKETS = (1024.0, 4096.0, 524288.0, 1048576.0, 2097152.0, 4194304.0)
FLUSH_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
GROUP_COMMIT_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0)

# rocketmq_broker_role values: RocketMQ's BrokerRole order.
ROLE_VALUE = {BrokerRole.ASYNC_MASTER: 0, BrokerRole.SYNC_MASTER: 1, BrokerRole.SLAVE: 2}
# ConsumeType -> RocketMQ 5.x consume_mode label (ConsumeType.getTypeCN, lower case)
CONSUME_MODE = {"CONSUME_PASSIVELY": "push", "CONSUME_ACTIVELY": "pull", "CONSUME_POP": "pop"}


@dataclass(frozen=True, slots=True)
class BrokerSnapshot:
    """Plain values copied on the event loop; read by the HTTP thread."""

    messages_in: list[tuple[str, int, int]]  # topic, messages, bytes
    messages_out: list[tuple[str, str, int, int]]  # topic, group, messages, bytes
    message_size: HistogramSnapshot
    rpc_latency: dict[tuple, HistogramSnapshot]
    flush_latency: HistogramSnapshot
    group_commit: HistogramSnapshot
    lag: list[tuple[str, str, int, int, int]]  # topic, group, lag, latency ms, in flight
    producers: dict[tuple[str, str], int]  # (language, version)
    consumers: dict[tuple[str, str, str, str], int]  # (group, language, version, mode)
    flush_behind: int
    dispatch_behind: int
    reserve_time_ms: int | None
    topics: int
    groups: int
    role: int
    ha_slave_lag: dict[str, int] | None
    in_sync_replicas: int | None
    epoch: int | None
    protocol_errors: int
    auth_failures: dict[str, int]
    figures: dict[str, int]  # POP and timer figures by name (_FIGURE_FAMILIES)


class ReplicationView(Protocol):
    """The role services as metrics read them (rmq/broker/roles.py)."""

    @property
    def ha_service(self) -> HAService | None: ...

    def epoch(self) -> tuple[int, int]: ...


def _client_labels(language: int, version: int) -> tuple[str, str]:
    return LanguageCode.name_of(language).lower(), MQVersion.name_of(version).lower()


# Every family a broker exports, (kind, name, help, labels): declared on each scrape in
# this order, the samples added to them after.
_FAMILIES: Final[tuple[tuple[str, str, str, tuple[str, ...]], ...]] = (
    ("counter", "rocketmq_messages_in_total", "Messages stored by sends.", ("topic",)),
    ("counter", "rocketmq_throughput_in_total", "Bytes stored by sends (records).", ("topic",)),
    ("counter", "rocketmq_messages_out_total", "Messages handed out by pulls.", ("topic", "consumer_group")),
    ("counter", "rocketmq_throughput_out_total", "Bytes handed out by pulls.", ("topic", "consumer_group")),
    ("histogram", "rocketmq_message_size", "Stored message size in bytes.", ()),
    ("histogram", "rocketmq_rpc_latency", "Request handling time in milliseconds.", ("request_code", "response_code")),
    ("gauge", "rocketmq_consumer_lag_messages", "Messages not yet consumed (committed).", ("topic", "consumer_group")),
    (
        "gauge",
        "rocketmq_consumer_lag_latency",
        "Age in milliseconds of the oldest message not yet consumed.",
        ("topic", "consumer_group"),
    ),
    ("gauge", "rocketmq_consumer_inflight_messages", "Messages pulled but not committed.", ("topic", "consumer_group")),
    ("gauge", "rocketmq_producer_connections", "Producer connections.", ("language", "version")),
    (
        "gauge",
        "rocketmq_consumer_connections",
        "Consumer connections.",
        ("consumer_group", "language", "version", "consume_mode"),
    ),
    ("gauge", "rocketmq_storage_size", "Used bytes of the store's file system.", ()),
    ("gauge", "rocketmq_storage_flush_behind_bytes", "CommitLog bytes written, not flushed.", ()),
    ("gauge", "rocketmq_storage_dispatch_behind_bytes", "CommitLog bytes not yet dispatched to consume queues.", ()),
    (
        "gauge",
        "rocketmq_storage_message_reserve_time",
        "Age in milliseconds of the oldest message in the CommitLog.",
        (),
    ),
    ("gauge", "rocketmq_topic_number", "Topics.", ()),
    ("gauge", "rocketmq_consumer_group_number", "Subscription groups.", ()),
    ("gauge", "rocketmq_ha_slave_lag_bytes", "CommitLog bytes a slave is behind (master).", ("slave",)),
    ("gauge", "rocketmq_ha_in_sync_replicas", "Slaves in sync with this master.", ()),
    ("gauge", "rocketmq_broker_role", "0 ASYNC_MASTER, 1 SYNC_MASTER, 2 SLAVE.", ()),
    ("gauge", "rocketmq_ha_epoch", "The broker's replication epoch.", ()),
    ("histogram", "rocketmq_flush_latency_seconds", "CommitLog flush (fdatasync) time.", ()),
    ("histogram", "rocketmq_group_commit_batch_size", "Puts answered per group-commit round.", ()),
    ("counter", "rocketmq_protocol_errors_total", "Connections closed for malformed frames.", ()),
    ("counter", "rocketmq_auth_failures_total", "Requests refused by the ACL.", ("reason",)),
    ("gauge", "rocketmq_pop_revive_backlog", "Popped messages neither acked nor revived yet (master).", ()),
    (
        "counter",
        "rocketmq_pop_retry_messages_total",
        "POP messages put back as retry copies after their invisible time.",
        (),
    ),
    ("counter", "rocketmq_pop_dlq_messages_total", "POP messages moved to the group's DLQ after max attempts.", ()),
    ("counter", "rocketmq_pop_checkpoints_total", "POP check points written to the revive log.", ()),
    ("counter", "rocketmq_pop_acks_total", "POP acks written to the revive log.", ()),
    ("gauge", "rocketmq_timing_messages", "Timer messages stored and not yet delivered (master).", ()),
    ("counter", "rocketmq_timer_dequeue_total", "Timer messages delivered to their topics.", ()),
    (
        "gauge",
        "rocketmq_timer_dequeue_latency",
        "Milliseconds the oldest due timer message is past its delivery time.",
        (),
    ),
)

# POP figures (rmq/broker/pop/assembly.py PopComponents.figures) and timer figures
# (rmq/broker/timer.py TimerMessageService.figures) -> family
_FIGURE_FAMILIES: Final = (
    ("backlog", "rocketmq_pop_revive_backlog"),
    ("retries", "rocketmq_pop_retry_messages_total"),
    ("dlq", "rocketmq_pop_dlq_messages_total"),
    ("checkpoints", "rocketmq_pop_checkpoints_total"),
    ("acks", "rocketmq_pop_acks_total"),
    ("timer_pending", "rocketmq_timing_messages"),
    ("timer_delivered", "rocketmq_timer_dequeue_total"),
    ("timer_latency_ms", "rocketmq_timer_dequeue_latency"),
)


@dataclass(eq=False)
class BrokerMetrics:
    """One broker's registry, collectors and exporter. ``start()`` on the loop after
    the store started; ``await stop()`` at shutdown."""

    broker_config: BrokerConfig
    store_config: MessageStoreConfig
    store: MessageStore
    server: RemotingServer
    stats: BrokerStats
    topics: TopicConfigManager
    subscriptions: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    consumers: ConsumerManager
    producers: ProducerManager
    replication: ReplicationView
    # aclEnable: refusals per reason (rmq.remoting.acl_guard.AclGuard); None: ACL off
    auth_failures: Callable[[], dict[str, int]] | None = None
    # POP: revive backlog and counters (rmq/broker/pop/assembly.py); None: none
    pop_figures: Callable[[], dict[str, int]] | None = None
    # timer messages: pending, delivered, dequeue latency (rmq/broker/timer.py); None: none
    timer_figures: Callable[[], dict[str, int]] | None = None

    def __post_init__(self) -> None:
        bc = self.broker_config
        self.node = NodeLabels(cluster=bc.brokerClusterName, node_type="broker", node_id=bc.brokerName)
        self.registry = CollectorRegistry(auto_describe=False)
        self.rpc = RpcLatencyRecorder()
        self.message_size = LoopHistogram(MESSAGE_SIZE_BUCKETS)
        self.flush_latency = LoopHistogram(FLUSH_LATENCY_BUCKETS)
        self.group_commit = LoopHistogram(GROUP_COMMIT_BUCKETS)
        self.exporter = MetricsHttpServer(self.registry, f"broker {bc.brokerName}")
        self._snapshot: LoopSnapshot[BrokerSnapshot] | None = None
        self.registry.register(self)  # describe() below: registering collects nothing

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> bool:
        """Install the observers and serve /metrics; False (logged) if the port is taken."""
        bc = self.broker_config
        self._snapshot = LoopSnapshot(asyncio.get_running_loop(), self._take, what=f"broker {bc.brokerName} metrics")
        self.server.set_rpc_observer(self.rpc)
        self.stats.message_size_observer = self.message_size.observe
        fs = self.store.flush_service
        if fs is not None:
            fs.flush_observer = self.flush_latency.observe
            if hasattr(fs, "batch_observer"):
                fs.batch_observer = self.group_commit.observe
        return self.exporter.start(bc.metricsPromExporterHost or "0.0.0.0", bc.metricsPromExporterPort)

    async def stop(self) -> None:
        self.server.set_rpc_observer(None)
        self.stats.message_size_observer = None
        fs = self.store.flush_service
        if fs is not None:
            fs.flush_observer = None
            if hasattr(fs, "batch_observer"):
                fs.batch_observer = None
        await asyncio.to_thread(self.exporter.stop)

    # ------------------------------------------------------------------ collector protocol
    def describe(self) -> list[Any]:
        return list(self._families(None, None))

    def collect(self) -> list[Any]:
        snap = self._snapshot.get() if self._snapshot is not None else None
        return list(self._families(snap, self._storage_used()))

    # ------------------------------------------------------------------ on the loop
    def _take(self) -> BrokerSnapshot:
        st = self.stats
        store = self.store
        role = self.store_config.brokerRole
        reserve: int | None = None
        lag: list[tuple[str, str, int, int, int]] = []
        ha_lag: dict[str, int] | None = None
        in_sync: int | None = None
        cl = store.commitlog
        flush_behind = cl.mfq.remain_to_flush() + cl.uncommitted_bytes
        dispatch_behind = store.dispatch_behind_bytes
        earliest = cl.pick_store_timestamp(cl.min_offset, 0)
        if earliest > 0:
            reserve = max(0, now_ms() - earliest)
        if role != BrokerRole.SLAVE:
            lag = self._lag(store, st.pull_offsets)
        ha = self.replication.ha_service
        if ha is not None:
            top = store.max_phy_offset
            ha_lag = {slave: max(0, top - ack) for slave, ack in ha.slave_ack_offsets().items()}
            in_sync = int(ha.in_sync_replicas())
        producers: dict[tuple[str, str], int] = {}
        for chans in self.producers.table.values():
            for c in chans.values():
                k = _client_labels(c.language, c.version)
                producers[k] = producers.get(k, 0) + 1
        consumers: dict[tuple[str, str, str, str], int] = {}
        for group, info in self.consumers.table.items():
            mode = CONSUME_MODE.get(info.consume_type, str(info.consume_type).lower())
            for c in info.channels.values():
                ck = (group, *_client_labels(c.language, c.version), mode)
                consumers[ck] = consumers.get(ck, 0) + 1
        # the failover side's (epoch, start); static roles have no epochs: 0
        epoch = self.replication.epoch()[0]
        return BrokerSnapshot(
            messages_in=[(t, c[0], c[1]) for t, c in st.put_by_topic.items()],
            messages_out=[(t, g, c[0], c[1]) for (g, t), c in st.get_by_group_topic.items()],
            message_size=self.message_size.snapshot(),
            rpc_latency=self.rpc.snapshot(),
            flush_latency=self.flush_latency.snapshot(),
            group_commit=self.group_commit.snapshot(),
            lag=lag,
            producers=producers,
            consumers=consumers,
            flush_behind=flush_behind,
            dispatch_behind=dispatch_behind,
            reserve_time_ms=reserve,
            topics=len(self.topics.table),
            groups=len(self.subscriptions.table),
            role=ROLE_VALUE.get(role, -1),
            ha_slave_lag=ha_lag,
            in_sync_replicas=in_sync,
            epoch=int(epoch),
            protocol_errors=self.server.stats.protocol_errors,
            auth_failures=self.auth_failures() if self.auth_failures is not None else {},
            figures={k: v for fn in (self.pop_figures, self.timer_figures) if fn is not None for k, v in fn().items()},
        )

    def _lag(
        self, store: MessageStore, pull_offsets: dict[tuple[str, str, int], int]
    ) -> list[tuple[str, str, int, int, int]]:
        """ConsumerLagCalculator: per topic and group with committed offsets, the
        messages behind the queues' ends, the age of the oldest of them, and the
        messages pulled but not committed."""
        now = now_ms()
        rows = []
        for key, queues in self.offsets.offset_table.items():
            topic, sep, group = key.partition(TOPIC_GROUP_SEPARATOR)
            if not sep:
                continue
            behind = inflight = 0
            earliest = 0
            for qid, committed in queues.items():
                top = store.get_max_offset_in_queue(topic, qid)
                if committed < 0:
                    committed = top
                if top > committed:
                    behind += top - committed
                    ts = store.get_message_store_timestamp(topic, qid, committed)
                    if ts > 0 and (earliest == 0 or ts < earliest):
                        earliest = ts
                pulled = pull_offsets.get((group, topic, qid))
                if pulled is not None and pulled > committed:
                    inflight += pulled - committed
            rows.append((topic, group, behind, now - earliest if earliest else 0, inflight))
        return rows

    # ------------------------------------------------------------------ in the HTTP thread
    def _storage_used(self) -> int | None:
        """Used bytes of the store's file system (RocketMQ: total - free space)."""
        try:
            sv = os.statvfs(self.store_config.storePathRootDir)
        except OSError:
            return None
        return (sv.f_blocks - sv.f_bfree) * sv.f_frsize

    def _families(self, s: BrokerSnapshot | None, storage_used: int | None) -> Families:
        f = Families(self.node)
        declare = {"counter": f.counter, "gauge": f.gauge, "histogram": f.histogram}
        for kind, name, doc, labels in _FAMILIES:
            declare[kind](name, doc, labels)
        if storage_used is not None:
            f.sample("rocketmq_storage_size", storage_used)
        if s is None:
            return f
        for topic, n, size in s.messages_in:
            f.sample("rocketmq_messages_in_total", n, [topic])
            f.sample("rocketmq_throughput_in_total", size, [topic])
        for topic, group, n, size in s.messages_out:
            f.sample("rocketmq_messages_out_total", n, [topic, group])
            f.sample("rocketmq_throughput_out_total", size, [topic, group])
        f.histogram_sample("rocketmq_message_size", MESSAGE_SIZE_BUCKETS, s.message_size)
        for key, h in s.rpc_latency.items():
            f.histogram_sample("rocketmq_rpc_latency", RPC_LATENCY_BUCKETS_MS, h, RpcLatencyRecorder.label_values(key))
        for topic, group, behind, latency, inflight in s.lag:
            f.sample("rocketmq_consumer_lag_messages", behind, [topic, group])
            f.sample("rocketmq_consumer_lag_latency", latency, [topic, group])
            f.sample("rocketmq_consumer_inflight_messages", inflight, [topic, group])
        for plabels, n in s.producers.items():
            f.sample("rocketmq_producer_connections", n, plabels)
        for clabels, n in s.consumers.items():
            f.sample("rocketmq_consumer_connections", n, clabels)
        f.sample("rocketmq_storage_flush_behind_bytes", s.flush_behind)
        f.sample("rocketmq_storage_dispatch_behind_bytes", s.dispatch_behind)
        if s.reserve_time_ms is not None:
            f.sample("rocketmq_storage_message_reserve_time", s.reserve_time_ms)
        f.sample("rocketmq_topic_number", s.topics)
        f.sample("rocketmq_consumer_group_number", s.groups)
        if s.ha_slave_lag is not None:
            for slave, behind in s.ha_slave_lag.items():
                f.sample("rocketmq_ha_slave_lag_bytes", behind, [slave])
        if s.in_sync_replicas is not None:
            f.sample("rocketmq_ha_in_sync_replicas", s.in_sync_replicas)
        f.sample("rocketmq_broker_role", s.role)
        if s.epoch is not None:
            f.sample("rocketmq_ha_epoch", s.epoch)
        f.histogram_sample("rocketmq_flush_latency_seconds", FLUSH_LATENCY_BUCKETS, s.flush_latency)
        f.histogram_sample("rocketmq_group_commit_batch_size", GROUP_COMMIT_BUCKETS, s.group_commit)
        f.sample("rocketmq_protocol_errors_total", s.protocol_errors)
        for reason, n in s.auth_failures.items():
            f.sample("rocketmq_auth_failures_total", n, [reason])
        for figure, name in _FIGURE_FAMILIES:
            if figure in s.figures:
                f.sample(name, s.figures[figure])
        return f
