"""BrokerStats: counters the status line, GET_BROKER_RUNTIME_INFO and metrics read.

Per message only integer additions; rates are derived from snapshots by readers.
"""

from __future__ import annotations

from collections.abc import Callable

from rmq.broker.store_stats import PutTimeStats
from rmq.common.clock import now_ms
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
        # topic -> [messages, bytes] stored by sends
        self.put_by_topic: dict[str, list[int]] = {}
        # (group, topic) -> [messages, bytes] handed out by pulls
        self.get_by_group_topic: dict[tuple[str, str], list[int]] = {}
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
                c = self.put_by_topic[topic] = [0, 0]
            c[0] += n
            c[1] += wrote
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

    def on_get(self, group: str, topic: str, result: GetMessageResult, queue_id: int = -1) -> None:
        n = len(result.buffers)
        size = result.buffer_total_size
        self.get_msgs += n
        self.get_bytes += size
        key = (group, topic)
        c = self.get_by_group_topic.get(key)
        if c is None:
            c = self.get_by_group_topic[key] = [0, 0]
        c[0] += n
        c[1] += size
        if queue_id >= 0:
            self.pull_offsets[(group, topic, queue_id)] = result.next_begin_offset
