"""ProcessQueue: the messages of one queue pulled but not yet consumed (Java ``ProcessQueue``).

Messages are kept by queue offset. The offset a consumer may commit is the smallest
offset still in flight (or, when none is, one past the largest offset seen), so a
crash never skips a message that was pulled but not consumed.
"""
from __future__ import annotations

import heapq
import time
from typing import Iterable

from rmq.protocol.message import MessageConst, MessageExt

__all__ = ["ProcessQueue", "PULL_MAX_IDLE_TIME_MS"]

#: A queue not pulled for this long is considered stuck and re-created by rebalance.
PULL_MAX_IDLE_TIME_MS = 120000


def _now_ms() -> int:
    return int(time.time() * 1000)


class ProcessQueue:
    __slots__ = ("_msgs", "_heap", "msg_count", "msg_size", "queue_offset_max", "dropped",
                 "last_pull_timestamp", "last_consume_timestamp", "msg_acc_cnt", "locked",
                 "last_lock_timestamp", "consuming", "try_unlock_times")

    def __init__(self) -> None:
        self._msgs: dict[int, MessageExt] = {}
        self._heap: list[int] = []           # offsets; lazily cleaned of removed ones
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0
        self.dropped = False
        self.last_pull_timestamp = _now_ms()
        self.last_consume_timestamp = _now_ms()
        self.msg_acc_cnt = 0                 # messages behind the broker's max offset
        # Orderly consumption (consumption-semantics issue) uses these.
        self.locked = False
        self.last_lock_timestamp = _now_ms()
        self.consuming = False
        self.try_unlock_times = 0

    # ------------------------------------------------------------------ state
    def is_pull_expired(self) -> bool:
        return _now_ms() - self.last_pull_timestamp > PULL_MAX_IDLE_TIME_MS

    def _first(self) -> int | None:
        heap = self._heap
        msgs = self._msgs
        while heap and heap[0] not in msgs:
            heapq.heappop(heap)
        return heap[0] if heap else None

    @property
    def min_offset(self) -> int | None:
        return self._first()

    def max_span(self) -> int:
        """Largest minus smallest offset in flight (flow control: consumeConcurrentlyMaxSpan)."""
        first = self._first()
        if first is None:
            return 0
        return self.queue_offset_max - first

    @property
    def msg_size_mib(self) -> float:
        return self.msg_size / (1024 * 1024)

    # ------------------------------------------------------------------ changes
    def put_messages(self, msgs: Iterable[MessageExt]) -> bool:
        """Add pulled messages; True when there was nothing in flight (orderly dispatch)."""
        was_empty = not self._msgs
        last: MessageExt | None = None
        for m in msgs:
            off = m.queue_offset
            if off not in self._msgs:
                self._msgs[off] = m
                heapq.heappush(self._heap, off)
                self.msg_count += 1
                self.msg_size += len(m.body)
            last = m
        if last is not None:
            self.queue_offset_max = max(self.queue_offset_max, last.queue_offset)
            max_offset = last.properties.get(MessageConst.MAX_OFFSET)
            if max_offset is not None:
                try:
                    self.msg_acc_cnt = max(int(max_offset) - last.queue_offset, 0)
                except ValueError:
                    pass
        return was_empty

    def remove_messages(self, msgs: Iterable[MessageExt]) -> int:
        """Drop consumed messages; the offset to commit, or -1 if nothing was in flight."""
        self.last_consume_timestamp = _now_ms()
        if not self._msgs:
            return -1
        result = self.queue_offset_max + 1
        for m in msgs:
            removed = self._msgs.pop(m.queue_offset, None)
            if removed is not None:
                self.msg_count -= 1
                self.msg_size -= len(removed.body)
        first = self._first()
        if first is not None:
            result = first
        return result

    def clear(self) -> None:
        """Forget everything in flight (seek, re-balance)."""
        self._msgs.clear()
        self._heap.clear()
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0

    def __len__(self) -> int:
        return self.msg_count

    def __repr__(self) -> str:
        return (f"ProcessQueue(count={self.msg_count}, size={self.msg_size}, "
                f"max={self.queue_offset_max}, dropped={self.dropped})")
