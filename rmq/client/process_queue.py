"""ProcessQueue: the messages of one queue pulled but not yet consumed (Java ``ProcessQueue``).

Messages are kept by queue offset. The offset a consumer may commit is the smallest
offset still in flight (or, when none is, one past the largest offset seen), so a
crash never skips a message that was pulled but not consumed.

The offsets are kept in an ascending list read from a head index: a queue's pulls arrive
in offset order, so adding a batch is an append and the smallest offset still in flight is
found by moving the head past consumed ones (each offset is passed once; the list is
compacted when the dead head is most of it). Both are O(1) amortised per message, where a
heap cost O(log n) per message on both sides. An offset below the last one (orderly's
put-back, a duplicate pull) is inserted in place, which is rare and O(n).

Orderly consumption takes messages in offset order (``take_messages``) into a
"consuming" set, and either ``commit``s them (the next offset to consume) or puts them
back (``make_message_to_consume_again``) to be taken again first. ``consume_lock`` is
held while the listener runs, so rebalance can wait for in-flight work before it
gives the queue away; ``locked`` / ``last_lock_timestamp`` mirror the broker-side lock
(LOCK_BATCH_MQ), which the client treats as expired after ``REBALANCE_LOCK_MAX_LIVE_TIME_MS``
without a renewal (the broker keeps it for 60 s, renewals come every 20 s).
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import Iterable

from rmq.common.clock import now_ms
from rmq.protocol.message import MessageConst, MessageExt

__all__ = ["ProcessQueue", "PULL_MAX_IDLE_TIME_MS", "REBALANCE_LOCK_MAX_LIVE_TIME_MS", "REBALANCE_LOCK_INTERVAL_MS"]

#: A queue not pulled for this long is considered stuck and re-created by rebalance.
PULL_MAX_IDLE_TIME_MS = 120000
#: Java rocketmq.client.rebalance.lockMaxLiveTime: a lock not renewed for this long is
#: not trusted any more (the broker's lasts 60 s).
REBALANCE_LOCK_MAX_LIVE_TIME_MS = 30000
#: Java rocketmq.client.rebalance.lockInterval: how often held locks are renewed.
REBALANCE_LOCK_INTERVAL_MS = 20000


class ProcessQueue:
    __slots__ = (
        "_msgs",
        "_order",
        "_head",
        "msg_count",
        "msg_size",
        "queue_offset_max",
        "dropped",
        "last_pull_timestamp",
        "last_consume_timestamp",
        "msg_acc_cnt",
        "locked",
        "last_lock_timestamp",
        "consuming",
        "try_unlock_times",
        "_consuming",
        "_consume_lock",
    )

    def __init__(self) -> None:
        self._msgs: dict[int, MessageExt] = {}
        # ascending offsets from ``_head`` on; ones no longer in ``_msgs`` are passed lazily
        self._order: list[int] = []
        self._head = 0
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0
        self.dropped = False
        self.last_pull_timestamp = now_ms()
        self.last_consume_timestamp = now_ms()
        self.msg_acc_cnt = 0  # messages behind the broker's max offset
        # Orderly consumption (consumption-semantics issue) uses these.
        self.locked = False
        self.last_lock_timestamp = now_ms()
        self.consuming = False
        self.try_unlock_times = 0
        self._consuming: dict[int, MessageExt] = {}  # orderly: taken, not yet committed
        self._consume_lock: asyncio.Lock | None = None

    # ------------------------------------------------------------------ state
    def is_pull_expired(self) -> bool:
        return now_ms() - self.last_pull_timestamp > PULL_MAX_IDLE_TIME_MS

    def is_lock_expired(self) -> bool:
        return now_ms() - self.last_lock_timestamp > REBALANCE_LOCK_MAX_LIVE_TIME_MS

    @property
    def consume_lock(self) -> asyncio.Lock:
        """Held while the listener runs on this queue (created on first use)."""
        if self._consume_lock is None:
            self._consume_lock = asyncio.Lock()
        return self._consume_lock

    def has_temp_message(self) -> bool:
        """Pulled messages not taken for consumption yet."""
        return bool(self._msgs)

    def _first(self) -> int | None:
        order = self._order
        msgs = self._msgs
        head = self._head
        n = len(order)
        while head < n and order[head] not in msgs:
            head += 1
        if head >= n:
            order.clear()
            self._head = 0
            return None
        if head > 1024 and head * 2 > n:
            # compact: the passed head is most of the list (amortised O(1) per offset)
            del order[:head]
            head = 0
        self._head = head
        return order[head]

    def _insert(self, off: int) -> None:
        """Add ``off`` (not in ``_msgs``) to the ordered offsets."""
        order = self._order
        if not order or off > order[-1]:
            order.append(off)  # the common case: pulls come in offset order
        else:
            i = bisect_left(order, off, self._head)
            if i == len(order) or order[i] != off:  # a passed copy may still be there
                order.insert(i, off)

    @property
    def min_offset(self) -> int | None:
        return self._first()

    def max_span(self) -> int:
        """Largest minus smallest offset in flight (flow control: consumeConcurrentlyMaxSpan)."""
        first = self._first()
        if first is None:
            return 0
        return self.queue_offset_max - first

    def message_at(self, offset: int) -> MessageExt | None:
        return self._msgs.get(offset)

    @property
    def msg_size_mib(self) -> float:
        return self.msg_size / (1024 * 1024)

    # ------------------------------------------------------------------ changes
    def put_messages(self, msgs: Iterable[MessageExt]) -> bool:
        """Add pulled messages; True when an orderly consume task must be started (there
        are messages and none is running: ``consuming`` was False and is now True)."""
        last: MessageExt | None = None
        table = self._msgs
        insert = self._insert
        count = size = 0
        for m in msgs:
            off = m.queue_offset
            if off not in table:
                table[off] = m
                insert(off)
                count += 1
                size += len(m.body)
            last = m
        self.msg_count += count
        self.msg_size += size
        if last is not None:
            self.queue_offset_max = max(self.queue_offset_max, last.queue_offset)
            max_offset = last.properties.get(MessageConst.MAX_OFFSET)
            if max_offset is not None:
                try:
                    self.msg_acc_cnt = max(int(max_offset) - last.queue_offset, 0)
                except ValueError:
                    pass
        dispatch = False
        if self._msgs and not self.consuming:
            dispatch = True
            self.consuming = True
        return dispatch

    def remove_messages(self, msgs: Iterable[MessageExt]) -> int:
        """Drop consumed messages; the offset to commit, or -1 if nothing was in flight."""
        self.last_consume_timestamp = now_ms()
        if not self._msgs:
            return -1
        result = self.queue_offset_max + 1
        pop = self._msgs.pop
        count = size = 0
        for m in msgs:
            removed = pop(m.queue_offset, None)
            if removed is not None:
                count += 1
                size += len(removed.body)
        self.msg_count -= count
        self.msg_size -= size
        first = self._first()
        if first is not None:
            result = first
        elif not self._consuming:
            self.consuming = False  # concurrent use: the next put starts afresh
        return result

    # ------------------------------------------------------------------ orderly
    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """The next ``batch_size`` messages in offset order, moved to the consuming set.
        Nothing left: ``consuming`` becomes False (the consume task ends)."""
        out: list[MessageExt] = []
        now = now_ms()
        self.last_consume_timestamp = now
        while len(out) < batch_size:
            first = self._first()
            if first is None:
                break
            self._head += 1
            m = self._msgs.pop(first)
            self._consuming[first] = m
            out.append(m)
        if not out:
            self.consuming = False
        return out

    def commit(self) -> int:
        """The taken messages are done: the offset to commit (one past the largest), or
        -1 when nothing was taken."""
        if not self._consuming:
            return -1
        offset = max(self._consuming) + 1
        self.msg_count -= len(self._consuming)
        self.msg_size -= sum(len(m.body) for m in self._consuming.values())
        self._consuming.clear()
        return offset

    def make_message_to_consume_again(self, msgs: Iterable[MessageExt]) -> None:
        """Put taken messages back; they are taken again before anything later."""
        for m in msgs:
            off = m.queue_offset
            self._consuming.pop(off, None)
            if off not in self._msgs:
                self._msgs[off] = m
                self._insert(off)

    def rollback(self) -> None:
        """Put every taken message back."""
        self.make_message_to_consume_again(list(self._consuming.values()))

    @property
    def consuming_count(self) -> int:
        return len(self._consuming)

    def cached_range(self) -> tuple[int, int, int] | None:
        """(smallest, largest offset, count) of the messages waiting to be consumed, or
        None (what GET_CONSUMER_RUNNING_INFO reports as cachedMsg*)."""
        first = self._first()
        if first is None:
            return None
        return first, max(self._msgs), len(self._msgs)

    def consuming_range(self) -> tuple[int, int, int] | None:
        """The same for an orderly consumer's taken, uncommitted messages (transactionMsg*)."""
        if not self._consuming:
            return None
        return min(self._consuming), max(self._consuming), len(self._consuming)

    def clear(self) -> None:
        """Forget everything in flight (seek, re-balance, offset reset)."""
        self._msgs.clear()
        self._consuming.clear()
        self._order.clear()
        self._head = 0
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0

    def __len__(self) -> int:
        return self.msg_count

    def __repr__(self) -> str:
        return (
            f"ProcessQueue(count={self.msg_count}, size={self.msg_size}, "
            f"max={self.queue_offset_max}, dropped={self.dropped})"
        )
