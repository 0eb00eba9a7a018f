"""What GET_CONSUME_STATS (208) answers: per queue broker offset, consumer offset and the
store time of the last consumed message, plus the group's consume TPS (4.9.8's
AdminBrokerProcessor.getConsumeStats and BrokerStatsManager.tpsGroupGetNums)."""

from __future__ import annotations

import collections
import time

from rmq.broker.seams import ConsumerOffsets, ConsumerRegistry, StoreReader, TopicConfigs
from rmq.broker.stats import BrokerStats
from rmq.protocol.bodies import ConsumeStats, MessageQueue, OffsetWrapper


class GroupGetTps:
    """Messages per second each (group, topic) pulled over the last minute, from
    snapshots of BrokerStats' counters taken every `step` seconds (RocketMQ's
    StatsItem minute average)."""

    def __init__(self, stats: BrokerStats, window_s: float = 60.0, step_s: float = 10.0) -> None:
        self.stats = stats
        self.window_s = window_s
        self.step_s = step_s
        self._samples: collections.deque[tuple[float, dict[tuple[str, str], int]]] = collections.deque()

    def tick(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self._samples and now - self._samples[-1][0] < self.step_s:
            return
        self._samples.append((now, {k: c[0] for k, c in self.stats.get_by_group_topic.items()}))
        while len(self._samples) > 1 and now - self._samples[0][0] > self.window_s:
            self._samples.popleft()

    def tps(self, group: str, topic: str, now: float | None = None) -> float:
        if not self._samples:
            return 0.0
        now = time.monotonic() if now is None else now
        t0, counts = self._samples[0]
        if now - t0 < 1.0:
            return 0.0
        now_count = self.stats.get_by_group_topic.get((group, topic), (0, 0))[0]
        got = now_count - counts.get((group, topic), 0)
        return max(got, 0) / (now - t0)


def build_consume_stats(
    store: StoreReader,
    topics: TopicConfigs,
    offsets: ConsumerOffsets,
    consumers: ConsumerRegistry,
    broker_name: str,
    group: str,
    topic: str | None,
    tps: GroupGetTps,
) -> ConsumeStats:
    """The group's offsets on this broker for topic, or for every topic it has offsets
    for; topics whose config is gone, or that an online group does not subscribe to,
    are left out (as 4.9.8 does)."""
    names = [topic] if topic else sorted(offsets.topics_of_group(group))
    online = consumers.get_group(group)
    out = ConsumeStats()
    for t in names:
        tc = topics.select(t)
        if tc is None:
            continue
        if online is not None and online.subscriptions and online.find_subscription(t) is None:
            continue
        for qid in range(tc.read_queue_nums):
            broker_offset = max(store.get_max_offset_in_queue(t, qid), 0)
            consumer_offset = max(offsets.query_offset(group, t, qid), 0)
            last = 0
            if consumer_offset > 0:
                ts = store.get_message_store_timestamp(t, qid, consumer_offset - 1)
                last = ts if ts > 0 else 0
            out.offset_table.append(
                (MessageQueue(t, broker_name, qid), OffsetWrapper(broker_offset, consumer_offset, last))
            )
        out.consume_tps += tps.tps(group, t)
    return out
