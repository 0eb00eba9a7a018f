"""ConsumerStatsManager: a client's pull and consume rates per (group, topic), what
GET_CONSUMER_RUNNING_INFO reports as ``statusTable`` (``mqadmin consumerStatus``'s
"#Consumer RT&TPS#").

As Java's, figures are over the last minute: pull RT and consume RT are averages in ms,
the TPS figures messages per second, ``consumeFailedMsgs`` the failures of the last hour.
Samples go into one-second buckets (one-minute buckets for the hour) so a busy consumer
costs one dict lookup and two additions per sample; the topic is the queue's (a retried
message counts under ``%RETRY%<group>``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from rmq.protocol.running_info import ConsumeStatus

__all__ = ["ConsumerStatsManager"]

_MINUTE = 60
_HOUR = 3600


class _Window:
    """(sum, count) of the samples of the last ``span`` seconds in ``width``-second buckets."""

    __slots__ = ("span", "width", "buckets")

    def __init__(self, span: int, width: int = 1) -> None:
        self.span = span
        self.width = width
        self.buckets: deque[list[float]] = deque()  # [bucket start, sum, count]

    def add(self, value: float, count: int, now: float) -> None:
        start = now - now % self.width
        b = self.buckets
        if b and b[-1][0] == start:
            last = b[-1]
            last[1] += value
            last[2] += count
        else:
            b.append([start, value, count])
            self._prune(now)

    def totals(self, now: float) -> tuple[float, int]:
        self._prune(now)
        return sum(x[1] for x in self.buckets), int(sum(x[2] for x in self.buckets))

    def _prune(self, now: float) -> None:
        b = self.buckets
        while b and b[0][0] <= now - self.span:
            b.popleft()


class _Item:
    """One (group, topic): the windows of each figure and since when it is counted."""

    __slots__ = ("since", "pull_rt", "pull_msgs", "consume_rt", "consume_ok", "consume_failed", "failed_hour")

    def __init__(self, now: float) -> None:
        self.since = now
        self.pull_rt = _Window(_MINUTE)
        self.pull_msgs = _Window(_MINUTE)
        self.consume_rt = _Window(_MINUTE)
        self.consume_ok = _Window(_MINUTE)
        self.consume_failed = _Window(_MINUTE)
        self.failed_hour = _Window(_HOUR, _MINUTE)


class ConsumerStatsManager:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._items: dict[tuple[str, str], _Item] = {}

    def _item(self, group: str, topic: str) -> tuple[_Item, float]:
        now = self.clock()
        item = self._items.get((group, topic))
        if item is None:
            item = self._items[(group, topic)] = _Item(now)
        return item, now

    def inc_pull(self, group: str, topic: str, rt_ms: float, msgs: int) -> None:
        """One pull that found ``msgs`` messages in ``rt_ms`` (incPullRT + incPullTPS)."""
        item, now = self._item(group, topic)
        item.pull_rt.add(rt_ms, 1, now)
        item.pull_msgs.add(msgs, 0, now)

    def inc_consume_rt(self, group: str, topic: str, rt_ms: float, calls: int = 1) -> None:
        """``calls`` listener calls that took ``rt_ms`` in all."""
        item, now = self._item(group, topic)
        item.consume_rt.add(rt_ms, calls, now)

    def inc_consume_result(self, group: str, topic: str, ok: int, failed: int) -> None:
        """incConsumeOKTPS / incConsumeFailedTPS of one consumed batch."""
        item, now = self._item(group, topic)
        if ok:
            item.consume_ok.add(ok, 0, now)
        if failed:
            item.consume_failed.add(failed, 0, now)
            item.failed_hour.add(failed, 0, now)

    def consume_status(self, group: str, topic: str) -> ConsumeStatus:
        """The last minute's figures (a topic not seen yet: zeros)."""
        item = self._items.get((group, topic))
        if item is None:
            return ConsumeStatus()
        now = self.clock()
        # a rate over the part of the minute the item has existed (a new consumer is not
        # averaged over time it did not run)
        seconds = min(float(_MINUTE), max(now - item.since, 1.0))

        def avg(w: _Window) -> float:
            total, n = w.totals(now)
            return total / n if n else 0.0

        def tps(w: _Window) -> float:
            return w.totals(now)[0] / seconds

        return ConsumeStatus(
            pull_rt=avg(item.pull_rt),
            pull_tps=tps(item.pull_msgs),
            consume_rt=avg(item.consume_rt),
            consume_ok_tps=tps(item.consume_ok),
            consume_failed_tps=tps(item.consume_failed),
            consume_failed_msgs=int(item.failed_hour.totals(now)[0]),
        )
