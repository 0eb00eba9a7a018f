"""What GET_CONSUME_STATS (208) answers: per queue broker offset, consumer offset and the
store time of the last consumed message, plus the group's consume TPS (4.9.8's
AdminBrokerProcessor.getConsumeStats and BrokerStatsManager.tpsGroupGetNums)."""

from __future__ import annotations

from collections.abc import Callable

from rmq.broker.seams import ConsumerOffsets, ConsumerRegistry, StoreReader, TopicConfigs
from rmq.protocol.bodies import ConsumeStats, MessageQueue, OffsetWrapper


def build_consume_stats(
    store: StoreReader,
    topics: TopicConfigs,
    offsets: ConsumerOffsets,
    consumers: ConsumerRegistry,
    broker_name: str,
    group: str,
    topic: str | None,
    group_get_tps: Callable[[str, str], float],
) -> ConsumeStats:
    """The group's offsets on this broker for topic, or for every topic it has offsets
    for, and its consume TPS (``group_get_tps(group, topic)``: tpsGroupGetNums); topics whose config is gone, or that an online group does not subscribe to,
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
        out.consume_tps += group_get_tps(group, t)
    return out
