"""BrokerStats: counters the status line, GET_BROKER_RUNTIME_INFO, metrics and
VIEW_BROKER_STATS_DATA (315) read.

Per message only integer additions; rates are derived from snapshots by readers.
``BrokerStatsManager`` is RocketMQ 4.9.8's BrokerStatsManager / StatsItemSet over these
counters: a background loop snapshots them every 10 s, 10 min and hour, and a stats item's
minute / hour / day figures (sum, tps, avgpt) are read from those snapshots.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import NamedTuple

from rmq.broker.store_stats import PutTimeStats
from rmq.common.clock import now_ms
from rmq.runtime.service import ServiceLoop
from rmq.store.results import GetMessageResult, PutMessageResult


class BrokerStats:
    def __init__(self) -> None:
        self.boot_timestamp = now_ms()
        self.put_msgs = 0
        self.put_bytes = 0
        self.put_failures = 0
        self.get_msgs = 0
        self.get_bytes = 0
        self.get_misses = 0  # pulls that found nothing
        self.get_time_max_ms = 0
        self.put_time = PutTimeStats()
        # topic -> [messages, bytes, puts] stored by sends
        self.put_by_topic: dict[str, list[int]] = {}
        # (group, topic) -> [messages, bytes, pulls that found messages] handed out by pulls
        self.get_by_group_topic: dict[tuple[str, str], list[int]] = {}
        # (group, topic, queue id) -> [store read ms summed, reads] of pulls that found messages
        self.get_latency: dict[tuple[str, str, int], list[int]] = {}
        # (original topic, group) -> messages a consumer sent back (retry / DLQ) that were stored
        self.send_backs: dict[tuple[str, str], int] = {}
        # (group, topic, queue id) -> next offset after the last pull that found
        # messages; pulled but not committed = this - the committed offset
        self.pull_offsets: dict[tuple[str, str, int], int] = {}
        # set by the metrics: called with the average record size of each stored put
        self.message_size_observer: Callable[[float], None] | None = None

    def on_put(self, result: PutMessageResult, request, topic: str = "") -> None:
        if result.status.stored:
            n = result.msg_num
            wrote = result.wrote_bytes
            self.put_msgs += n
            self.put_bytes += wrote
            c = self.put_by_topic.get(topic)
            if c is None:
                c = self.put_by_topic[topic] = [0, 0, 0]
            c[0] += n
            c[1] += wrote
            c[2] += 1
            if self.message_size_observer is not None:
                self.message_size_observer(wrote / n)
            # called when the store said stored: 4.9.8's "entire put time"
            self.put_time.observe(now_ms() - result.store_timestamp)
        else:
            self.put_failures += 1

    def on_get_done(self, elapsed_ms: int, found: bool) -> None:
        """Each store read of a pull (getMessageEntireTimeMax, the miss TPS)."""
        if not found:
            self.get_misses += 1
        if elapsed_ms > self.get_time_max_ms:
            self.get_time_max_ms = elapsed_ms

    def on_send_back(self, group: str, topic: str) -> None:
        """A consumer's send-back of a message of ``topic`` was stored (SNDBCK_PUT_NUMS)."""
        key = (topic, group)
        self.send_backs[key] = self.send_backs.get(key, 0) + 1

    def on_get(
        self, group: str, topic: str, result: GetMessageResult, queue_id: int = -1, latency_ms: int = -1
    ) -> None:
        """A pull (or pop) handed out messages; ``latency_ms`` its store read (GROUP_GET_LATENCY)."""
        n = len(result.buffers)
        size = result.buffer_total_size
        self.get_msgs += n
        self.get_bytes += size
        key = (group, topic)
        c = self.get_by_group_topic.get(key)
        if c is None:
            c = self.get_by_group_topic[key] = [0, 0, 0]
        c[0] += n
        c[1] += size
        c[2] += 1
        if queue_id >= 0:
            qkey = (group, topic, queue_id)
            self.pull_offsets[qkey] = result.next_begin_offset
            if latency_ms >= 0:
                lat = self.get_latency.get(qkey)
                if lat is None:
                    lat = self.get_latency[qkey] = [0, 0]
                lat[0] += latency_ms
                lat[1] += 1


# ---------------------------------------------------------------- 4.9.8's BrokerStatsManager
# the stats names of org.apache.rocketmq.common.stats.Stats that rmq keeps
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
GROUP_GET_LATENCY = "GROUP_GET_LATENCY"
SNDBCK_PUT_NUMS = "SNDBCK_PUT_NUMS"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"

# StatsItemSet's samplers (period ms, snapshots kept): every 10 s keeping 7 (one minute),
# every 10 min keeping 7 (one hour), every hour keeping 25 (one day)
MINUTE, HOUR, DAY = 0, 1, 2
WINDOWS = ((10_000, 7), (600_000, 7), (3_600_000, 25))


class CallSnapshot(NamedTuple):
    timestamp: int  # ms
    times: int
    value: int


class StatsSnapshot(NamedTuple):
    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0
    times: int = 0


def compute_stats_data(snapshots: deque[CallSnapshot]) -> StatsSnapshot:
    """StatsItem.computeStatsData: from the oldest snapshot kept to the newest."""
    if not snapshots:
        return StatsSnapshot()
    first, last = snapshots[0], snapshots[-1]
    total = last.value - first.value
    elapsed = last.timestamp - first.timestamp
    tps = total * 1000.0 / elapsed if elapsed else 0.0
    times = last.times - first.times
    return StatsSnapshot(total, tps, total / times if times > 0 else 0.0, times)


class StatsItem:
    """One key's snapshots per window (StatsItem's csListMinute / Hour / Day)."""

    __slots__ = ("windows",)

    def __init__(self) -> None:
        self.windows = tuple(deque[CallSnapshot](maxlen=kept) for _, kept in WINDOWS)

    def sample(self, window: int, now: int, times: int, value: int) -> None:
        snapshots = self.windows[window]
        if not snapshots:
            # 4.9.8 starts a list with a zero snapshot one period back: a key first seen
            # now counts everything it has so far in its first period
            snapshots.append(CallSnapshot(now - WINDOWS[window][0], 0, 0))
        snapshots.append(CallSnapshot(now, times, value))

    def minute(self) -> StatsSnapshot:
        return compute_stats_data(self.windows[MINUTE])

    def hour(self) -> StatsSnapshot:
        return compute_stats_data(self.windows[HOUR])

    def day(self) -> StatsSnapshot:
        return compute_stats_data(self.windows[DAY])


# a stats name's live items: (key, times, value) of each, read from BrokerStats' counters
Source = Callable[[], Iterator[tuple[str, int, int]]]


class BrokerStatsManager:
    """The stats items 4.9.8's BrokerStatsManager keeps, keyed as it keys them: TOPIC_PUT_*
    by topic, GROUP_GET_NUMS / SIZE and SNDBCK_PUT_NUMS by ``topic@group``,
    GROUP_GET_LATENCY by ``queueId@topic@group`` (enableDetailStat), BROKER_PUT / GET_NUMS
    by the cluster name. The counters are BrokerStats' own (an integer add per message);
    only ``sample`` (the background loop) and readers touch the snapshots.

    A key exists once its counter does (4.9.8 creates the item at the first add)."""

    def __init__(self, stats: BrokerStats, cluster_name: str, clock: Callable[[], int] = now_ms) -> None:
        self.stats = stats
        self.cluster_name = cluster_name
        self._clock = clock
        self._sources: dict[str, Source] = {
            TOPIC_PUT_NUMS: self._topic_put(0),
            TOPIC_PUT_SIZE: self._topic_put(1),
            GROUP_GET_NUMS: self._group_get(0),
            GROUP_GET_SIZE: self._group_get(1),
            GROUP_GET_LATENCY: self._group_get_latency,
            SNDBCK_PUT_NUMS: self._send_backs,
            BROKER_PUT_NUMS: self._broker(lambda: stats.put_msgs),
            BROKER_GET_NUMS: self._broker(lambda: stats.get_msgs),
        }
        self._items: dict[str, dict[str, StatsItem]] = {name: {} for name in self._sources}
        self.service = StatsSamplingService(self)

    # ---- the counters, as (key, times, value)
    def _topic_put(self, field: int) -> Source:
        def read() -> Iterator[tuple[str, int, int]]:
            for topic, c in self.stats.put_by_topic.items():
                yield topic, c[2], c[field]

        return read

    def _group_get(self, field: int) -> Source:
        def read() -> Iterator[tuple[str, int, int]]:
            for (group, topic), c in self.stats.get_by_group_topic.items():
                yield f"{topic}@{group}", c[2], c[field]

        return read

    def _group_get_latency(self) -> Iterator[tuple[str, int, int]]:
        for (group, topic, qid), c in self.stats.get_latency.items():
            yield f"{qid}@{topic}@{group}", c[1], c[0]

    def _send_backs(self) -> Iterator[tuple[str, int, int]]:
        for (topic, group), n in self.stats.send_backs.items():
            yield f"{topic}@{group}", n, n

    def _broker(self, total: Callable[[], int]) -> Source:
        def read() -> Iterator[tuple[str, int, int]]:
            n = total()
            if n:
                # incBrokerPutNums / incBrokerGetNums add to the value only: times stay 0
                yield self.cluster_name, 0, n

        return read

    # ---- sampling (StatsItemSet.samplingInSeconds / InMinutes / InHour)
    def sample(self, window: int) -> None:
        now = self._clock()
        for name, source in self._sources.items():
            items = self._items[name]
            for key, times, value in source():
                item = items.get(key)
                if item is None:
                    item = items[key] = StatsItem()
                item.sample(window, now, times, value)

    # ---- deletions (BrokerStatsManager.onTopicDeleted / onGroupDeleted): the counters go
    # too, since an item exists while its counter does
    def on_topic_deleted(self, topic: str) -> None:
        st = self.stats
        st.put_by_topic.pop(topic, None)
        self._drop(lambda key: key[1] == topic, lambda key: key[0] == topic)
        for name in (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE):
            self._items[name].pop(topic, None)
        for name in (GROUP_GET_NUMS, GROUP_GET_SIZE, SNDBCK_PUT_NUMS):
            self._drop_items(name, lambda k: k.startswith(f"{topic}@"))
        self._drop_items(GROUP_GET_LATENCY, lambda k: f"@{topic}@" in k)

    def on_group_deleted(self, group: str) -> None:
        self._drop(lambda key: key[0] == group, lambda key: key[1] == group)
        for name in (GROUP_GET_NUMS, GROUP_GET_SIZE, SNDBCK_PUT_NUMS, GROUP_GET_LATENCY):
            self._drop_items(name, lambda k: k.endswith(f"@{group}"))

    def _drop(
        self, get_key: Callable[[tuple[str, str]], bool], send_back_key: Callable[[tuple[str, str]], bool]
    ) -> None:
        """Counters keyed (group, topic[, queue]) matching ``get_key`` on their first two,
        send-backs keyed (topic, group) matching ``send_back_key``."""
        st = self.stats
        for k in [k for k in st.get_by_group_topic if get_key(k)]:
            del st.get_by_group_topic[k]
        for q in [q for q in st.get_latency if get_key((q[0], q[1]))]:
            del st.get_latency[q]
        for b in [b for b in st.send_backs if send_back_key(b)]:
            del st.send_backs[b]

    def _drop_items(self, name: str, match: Callable[[str], bool]) -> None:
        items = self._items[name]
        for k in [k for k in items if match(k)]:
            del items[k]

    # ---- reading
    def get_stats_item(self, name: str, key: str) -> StatsItem | None:
        """The item, or None when 4.9.8 has none (an unknown name, or a key never added to)."""
        items = self._items.get(name)
        if items is None:
            return None
        item = items.get(key)
        if item is None and any(k == key for k, _, _ in self._sources[name]()):
            item = items[key] = StatsItem()  # added to since the last sample
        return item

    def tps_group_get_nums(self, group: str, topic: str) -> float:
        """BrokerStatsManager.tpsGroupGetNums: the group's minute TPS on the topic."""
        item = self._items[GROUP_GET_NUMS].get(f"{topic}@{group}")
        return item.minute().tps if item is not None else 0.0


class StatsSamplingService(ServiceLoop):
    """StatsItemSet's scheduled samplers on the loop: at start, then every 10 s / 10 min /
    hour at a fixed rate (a late run does not move the next one)."""

    def __init__(self, manager: BrokerStatsManager, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__("broker-stats")
        self.manager = manager
        self._clock = clock
        self._due = [0.0] * len(WINDOWS)

    async def on_start(self) -> None:
        now = self._clock()
        for w in range(len(WINDOWS)):
            self.manager.sample(w)
            self._due[w] = now + WINDOWS[w][0] / 1000

    def interval(self) -> float:
        return max(0.0, min(self._due) - self._clock())

    async def run_once(self) -> None:
        now = self._clock()
        for w, (period_ms, _) in enumerate(WINDOWS):
            if now >= self._due[w]:
                self.manager.sample(w)
                while self._due[w] <= now:
                    self._due[w] += period_ms / 1000
