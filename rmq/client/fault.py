"""Producer latency fault tolerance (spec 8.1; Java ``MQFaultStrategy`` and
``LatencyFaultToleranceImpl``), with the 4.9.8 tables.

Off by default, as in RocketMQ: queue selection is then plain round-robin, skipping
the broker that just failed on a retry. When enabled, every send charges its broker
with its latency; a latency at or above ``LATENCY_MAX[i]`` makes the broker
unavailable for ``NOT_AVAILABLE_DURATION[i]``, and a failure (isolation) is charged
as 30 s of latency, i.e. 10 minutes out.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from rmq.client.routes import RoundRobinIndex, TopicPublishInfo
from rmq.common.clock import monotonic_ms
from rmq.protocol.bodies import MessageQueue

__all__ = [
    "LATENCY_MAX",
    "NOT_AVAILABLE_DURATION",
    "ISOLATION_LATENCY",
    "FaultItem",
    "LatencyFaultTolerance",
    "MQFaultStrategy",
    "compute_not_available_duration",
]

#: 4.9.8 ``MQFaultStrategy.latencyMax`` (ms).
LATENCY_MAX: tuple[int, ...] = (50, 100, 550, 1000, 2000, 3000, 15000)
#: 4.9.8 ``MQFaultStrategy.notAvailableDuration`` (ms).
NOT_AVAILABLE_DURATION: tuple[int, ...] = (0, 0, 30000, 60000, 120000, 180000, 600000)
#: Latency charged to a broker when a send to it fails (``isolation``).
ISOLATION_LATENCY = 30000


def compute_not_available_duration(
    latency_ms: int, latency_max: tuple[int, ...] = LATENCY_MAX, durations: tuple[int, ...] = NOT_AVAILABLE_DURATION
) -> int:
    """The duration for the largest ``i`` with ``latency >= latency_max[i]``, else 0."""
    for i in range(len(latency_max) - 1, -1, -1):
        if latency_ms >= latency_max[i]:
            return durations[i]
    return 0


@dataclass
class FaultItem:
    name: str
    current_latency: int
    start_timestamp: int  # the broker is available again from this time (ms)

    def is_available(self, now_ms: int) -> bool:
        return now_ms - self.start_timestamp >= 0

    def sort_key(self, now_ms: int) -> tuple[int, int, int]:
        """FaultItem.compareTo: available first, then lower latency, then earlier start."""
        return (0 if self.is_available(now_ms) else 1, self.current_latency, self.start_timestamp)


class LatencyFaultTolerance:
    """Broker name -> FaultItem (LatencyFaultToleranceImpl). The clock is monotonic: an
    isolation window is a duration, which a wall-clock step must neither stretch nor cut short."""

    def __init__(self, clock: Callable[[], int] = monotonic_ms, rng: random.Random | None = None) -> None:
        self.clock = clock
        self.fault_item_table: dict[str, FaultItem] = {}
        self._which_item_worst = RoundRobinIndex()
        self._rng = rng or random.Random()

    def update_fault_item(self, name: str, current_latency: int, not_available_duration: int) -> None:
        start = self.clock() + not_available_duration
        item = self.fault_item_table.get(name)
        if item is None:
            self.fault_item_table[name] = FaultItem(name, current_latency, start)
        else:
            item.current_latency = current_latency
            item.start_timestamp = start

    def is_available(self, name: str) -> bool:
        item = self.fault_item_table.get(name)
        return item is None or item.is_available(self.clock())

    def remove(self, name: str) -> None:
        self.fault_item_table.pop(name, None)

    def pick_one_at_least(self) -> str | None:
        """Shuffle, sort (best first), then one of the better half in turn."""
        items = list(self.fault_item_table.values())
        if not items:
            return None
        self._rng.shuffle(items)
        now = self.clock()
        items.sort(key=lambda it: it.sort_key(now))  # stable, as Collections.sort
        half = len(items) // 2
        if half <= 0:
            return items[0].name
        return items[self._which_item_worst.get_and_increment() % half].name


class MQFaultStrategy:
    """Queue selection for a send, with or without latency fault tolerance."""

    def __init__(
        self,
        send_latency_fault_enable: bool = False,
        latency_fault_tolerance: LatencyFaultTolerance | None = None,
        latency_max: tuple[int, ...] = LATENCY_MAX,
        not_available_duration: tuple[int, ...] = NOT_AVAILABLE_DURATION,
    ) -> None:
        if len(latency_max) != len(not_available_duration):
            raise ValueError("latency_max and not_available_duration differ in length")
        self.send_latency_fault_enable = send_latency_fault_enable
        self.latency_fault_tolerance = latency_fault_tolerance or LatencyFaultTolerance()
        self.latency_max = tuple(latency_max)
        self.not_available_duration = tuple(not_available_duration)

    def select_one_message_queue(self, tp_info: TopicPublishInfo, last_broker_name: str | None) -> MessageQueue:
        if not self.send_latency_fault_enable:
            return tp_info.select_one_message_queue(last_broker_name)
        lft = self.latency_fault_tolerance
        mqs = tp_info.message_queue_list
        n = len(mqs)
        index = tp_info.send_which_queue.get_and_increment()
        for i in range(n):
            mq = mqs[(index + i) % n]
            if lft.is_available(mq.broker_name):
                return mq
        not_best = lft.pick_one_at_least()
        if not_best is not None:
            write_queue_nums = tp_info.get_queue_id_by_broker(not_best)
            if write_queue_nums > 0:
                qid = tp_info.send_which_queue.get_and_increment() % write_queue_nums
                return MessageQueue(mqs[0].topic if mqs else "", not_best, qid)
            lft.remove(not_best)
        return tp_info.select_one_message_queue()

    def update_fault_item(self, broker_name: str, current_latency_ms: int, isolation: bool) -> None:
        if not self.send_latency_fault_enable:
            return
        latency = ISOLATION_LATENCY if isolation else current_latency_ms
        duration = compute_not_available_duration(latency, self.latency_max, self.not_available_duration)
        self.latency_fault_tolerance.update_fault_item(broker_name, current_latency_ms, duration)

    def compute_not_available_duration(self, latency_ms: int) -> int:
        return compute_not_available_duration(latency_ms, self.latency_max, self.not_available_duration)
