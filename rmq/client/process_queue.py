"""ProcessQueue: the messages of one queue pulled but not yet consumed (Java ``ProcessQueue``).

The offset a consumer may commit is the smallest offset still in flight (or, when none
is, one past the largest offset seen), so a crash never skips a message that was pulled
but not consumed.

Messages are kept as pulled batches (``PulledBatch``), and a pulled batch stays the raw
PULL_MESSAGE body until a consumer takes it: under a backlog the queue caches up to
``pull_threshold_for_queue`` messages per queue (hundreds of thousands per process), and
decoded they were 30-odd GC-tracked objects each that every full collection of the cyclic
GC walked (a quarter of the consumer's CPU). Undecoded, a batch is one bytes object plus
objects the GC does not track (offsets, body sizes, an in-flight flag per message), the flow-control
figures (count, body bytes) come from a header scan, and the messages are decoded when a
worker (or the orderly task) takes the batch, so they die young. A batch decoded once keeps
its messages until all of them are consumed (the consume timeout reads them).

The batches are kept in an ascending list read from a head index: a queue's pulls arrive
in offset order, so adding a batch is an append and the smallest offset still in flight is
found by moving the head past consumed batches (the list is compacted when the dead head is
most of it). A batch below the last one (a duplicate pull) is inserted in place, which is
rare; the queue then notes that batches may overlap and searches them all.

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
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Sequence

from rmq.common.clock import now_ms
from rmq.protocol.message import MessageConst, MessageExt, decode_records_batch

__all__ = [
    "ProcessQueue",
    "PulledBatch",
    "PULL_MAX_IDLE_TIME_MS",
    "REBALANCE_LOCK_MAX_LIVE_TIME_MS",
    "REBALANCE_LOCK_INTERVAL_MS",
]

#: A queue not pulled for this long is considered stuck and re-created by rebalance.
PULL_MAX_IDLE_TIME_MS = 120000
#: Java rocketmq.client.rebalance.lockMaxLiveTime: a lock not renewed for this long is
#: not trusted any more (the broker's lasts 60 s).
REBALANCE_LOCK_MAX_LIVE_TIME_MS = 30000
#: Java rocketmq.client.rebalance.lockInterval: how often held locks are renewed.
REBALANCE_LOCK_INTERVAL_MS = 20000


class PulledBatch:
    """One pull's messages of a queue, in offset order: the raw body (``data``) until the
    first take decodes it into ``msgs`` (aligned with ``offsets``). ``live[i]``: message i
    is still in flight; ``sizes``: body lengths (flow control, cachedMsgSizeInMiB);
    ``gappy``: ``data`` holds records that are not in the batch (filtered out by tag)."""

    __slots__ = ("data", "msgs", "offsets", "sizes", "live", "live_count", "head", "taken", "gappy", "stamp")

    def __init__(
        self,
        offsets: Sequence[int],
        sizes: Sequence[int],
        data: bytes | None = None,
        msgs: list[MessageExt] | None = None,
        gappy: bool = False,
        stamp: tuple[str, str] | None = None,
    ) -> None:
        self.data = data
        self.msgs = msgs
        # ascending, no duplicates: consecutive offsets (no record left out) are a range,
        # others a tuple of ints, which the cyclic GC stops tracking after its first pass
        # (an array stays tracked)
        n = len(offsets)
        self.offsets: Sequence[int] = (
            range(offsets[0], offsets[0] + n) if n and offsets[-1] - offsets[0] == n - 1 else tuple(offsets)
        )
        self.sizes: Sequence[int] = tuple(sizes)
        self.live = bytearray(b"\x01") * len(offsets)
        self.live_count = len(offsets)
        self.head = 0  # no live message before it
        self.taken = 0  # orderly: messages handed out so far
        self.gappy = gappy
        self.stamp = stamp  # (MIN_OFFSET, MAX_OFFSET) put on each message when decoded

    @classmethod
    def of_messages(cls, msgs: list[MessageExt]) -> PulledBatch:
        """A batch of decoded messages (sorted by offset, no duplicates)."""
        return cls([m.queue_offset for m in msgs], [len(m.body) for m in msgs], msgs=msgs)

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def first(self) -> int:
        return self.offsets[0]

    @property
    def last(self) -> int:
        return self.offsets[-1]

    def index(self, offset: int) -> int:
        """Position of ``offset`` in the batch, or -1."""
        offsets = self.offsets
        i = bisect_left(offsets, offset)
        return i if i < len(offsets) and offsets[i] == offset else -1

    def first_live(self) -> int | None:
        i = self.live.find(1, self.head)
        if i < 0:
            return None
        self.head = i
        return self.offsets[i]

    def last_live(self) -> int | None:
        i = self.live.rfind(1)
        return None if i < 0 else self.offsets[i]

    def live_offsets(self) -> Iterable[int]:
        live, offsets = self.live, self.offsets
        return (offsets[i] for i in range(self.head, len(offsets)) if live[i])

    def kill(self, i: int) -> int:
        """Message i is no longer in flight: its body size, or -1 when it already was not."""
        live = self.live
        if not live[i]:
            return -1
        live[i] = 0
        self.live_count -= 1
        if not self.live_count:
            self.data = self.msgs = None  # nothing of it is cached any more
        return self.sizes[i]


class ProcessQueue:
    __slots__ = (
        "_order",
        "_firsts",
        "_head",
        "_overlap",
        "_take",
        "_again",
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
        # batches ascending by first offset from ``_head`` on (``_firsts``: their first
        # offsets, for bisect); the ones before ``_head`` have nothing in flight
        self._order: list[PulledBatch] = []
        self._firsts: list[int] = []
        self._head = 0
        self._overlap = False  # a batch went in below the last one: ranges may interleave
        self._take = 0  # orderly: the first batch with messages not handed out yet
        self._again: list[MessageExt] = []  # orderly: put back, taken again first (ascending)
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
        """Pulled messages not taken for consumption yet (orderly: not in the consuming set)."""
        return self.msg_count > len(self._consuming)

    def _first_batch(self) -> int:
        """Index of the first batch with messages in flight (len(_order) when none); the
        dead head is passed, and compacted away when it is most of the list."""
        order = self._order
        head = self._head
        n = len(order)
        while head < n and not order[head].live_count:
            head += 1
        if head >= n:
            order.clear()
            self._firsts.clear()
            self._head = self._take = 0
            self._overlap = False
            return 0
        if head >= 8 and head * 2 > n:
            del order[:head]
            del self._firsts[:head]
            self._take = max(self._take - head, 0)
            head = 0
        self._head = head
        return head

    def _first(self) -> int | None:
        i = self._first_batch()
        order = self._order
        if i >= len(order):
            return None
        if self._overlap:
            return min(o for b in order[i:] if b.live_count and (o := b.first_live()) is not None)
        return order[i].first_live()

    def _find(self, offset: int) -> tuple[PulledBatch, int] | None:
        """The batch holding ``offset`` (in flight or not) and its position there."""
        order = self._order
        i = bisect_right(self._firsts, offset, self._head) - 1
        while i >= self._head:
            b = order[i]
            if offset <= b.offsets[-1]:
                j = b.index(offset)
                if j >= 0 and (b.live[j] or not self._overlap):
                    return b, j
            if not self._overlap:
                return None
            i -= 1
        return None

    def _is_live(self, offset: int) -> bool:
        found = self._find(offset)
        return found is not None and bool(found[0].live[found[1]])

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
        """The message at ``offset`` while it is in flight, if its batch was decoded (taken)."""
        found = self._find(offset)
        if found is None:
            return None
        b, j = found
        if not b.live[j] or b.msgs is None:
            return None
        return b.msgs[j]

    @property
    def msg_size_mib(self) -> float:
        return self.msg_size / (1024 * 1024)

    # ------------------------------------------------------------------ changes
    def put_messages(self, msgs: Iterable[MessageExt]) -> bool:
        """Add pulled (decoded) messages; True when an orderly consume task must be started
        (there are messages and none is running: ``consuming`` was False and is now True)."""
        msgs = list(msgs)
        last = msgs[-1] if msgs else None
        if msgs:
            if any(a.queue_offset >= b.queue_offset for a, b in zip(msgs, msgs[1:], strict=False)):
                msgs = list({m.queue_offset: m for m in reversed(msgs)}.values())  # first copy wins
                msgs.sort(key=_queue_offset)
            self._put(PulledBatch.of_messages(msgs))
        if last is not None:
            max_offset = last.properties.get(MessageConst.MAX_OFFSET)
            if max_offset is not None:
                try:
                    self.msg_acc_cnt = max(int(max_offset) - last.queue_offset, 0)
                except ValueError:
                    pass
        return self._dispatch()

    def put_batch(self, batch: PulledBatch, broker_max_offset: int) -> bool:
        """Add a pulled batch (``put_messages`` for an undecoded one)."""
        if len(batch):
            self._put(batch)
            self.msg_acc_cnt = max(broker_max_offset - batch.last, 0)
        return self._dispatch()

    def _dispatch(self) -> bool:
        if self.msg_count > len(self._consuming) and not self.consuming:
            self.consuming = True
            return True
        return False

    def _put(self, batch: PulledBatch) -> None:
        order = self._order
        first = batch.first
        if self._first_batch() < len(order) and first <= order[-1].offsets[-1]:
            # below the last batch (a re-pull): offsets already in flight are not added twice
            keep = [i for i, off in enumerate(batch.offsets) if not self._is_live(off)]
            if not keep:
                return
            if len(keep) < len(batch):
                batch = _subset(batch, keep)
                first = batch.first
            i = bisect_right(self._firsts, first, self._head)
            order.insert(i, batch)
            self._firsts.insert(i, first)
            self._take = min(self._take, i)
            self._overlap = True
        else:
            order.append(batch)
            self._firsts.append(first)
        self.msg_count += batch.live_count
        self.msg_size += sum(batch.sizes)
        if batch.last > self.queue_offset_max:
            self.queue_offset_max = batch.last

    def messages(self, batch: PulledBatch) -> list[MessageExt]:
        """The batch's messages (decoded on the first call), aligned with its offsets."""
        msgs = batch.msgs
        if msgs is not None:
            return msgs
        data = batch.data
        if data is None:  # all consumed (or cleared) before anyone took it
            return []
        msgs = decode_records_batch(data, decompress=True)
        offsets = batch.offsets
        if batch.gappy or len(msgs) != len(offsets):
            keep = set(offsets)
            msgs = [m for m in msgs if m.queue_offset in keep]
            if len(msgs) != len(offsets):
                # a record the header scan passed did not decode: as the eager decode ended
                # the batch there, what is missing is not delivered and counts as consumed
                self._drop_undecoded(batch, {m.queue_offset for m in msgs})
        if batch.stamp is not None:
            lo, hi = batch.stamp
            for m in msgs:
                props = m.properties
                props[MessageConst.MIN_OFFSET] = lo
                props[MessageConst.MAX_OFFSET] = hi
        if batch.live_count:
            batch.msgs = msgs
        batch.data = None
        return msgs

    def _drop_undecoded(self, batch: PulledBatch, decoded: set[int]) -> None:
        keep = []
        for i, off in enumerate(batch.offsets):
            if off in decoded:
                keep.append(i)
            else:
                size = batch.kill(i)
                if size >= 0:
                    self.msg_count -= 1
                    self.msg_size -= size
        live = bytearray(batch.live[i] for i in keep)
        batch.offsets = tuple(batch.offsets[i] for i in keep)
        batch.sizes = tuple(batch.sizes[i] for i in keep)
        batch.live, batch.head = live, 0
        batch.live_count = live.count(1)
        batch.taken = 0

    def remove_messages(self, msgs: Iterable[MessageExt]) -> int:
        """Drop consumed messages; the offset to commit, or -1 if nothing was in flight."""
        self.last_consume_timestamp = now_ms()
        if not self.msg_count:
            return -1
        result = self.queue_offset_max + 1
        count = size = 0
        b: PulledBatch | None = None
        j = -1
        for m in msgs:
            off = m.queue_offset
            # the usual run: consecutive messages of one batch
            if b is not None and j + 1 < len(b.offsets) and b.offsets[j + 1] == off and b.live[j + 1]:
                j += 1
            else:
                found = self._find(off)
                if found is None:
                    b = None
                    continue
                b, j = found
            s = b.kill(j)
            if s >= 0:
                count += 1
                size += s
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
        self.last_consume_timestamp = now_ms()
        consuming = self._consuming
        again = self._again
        while again and len(out) < batch_size:
            m = again.pop(0)
            consuming[m.queue_offset] = m
            out.append(m)
        if self._overlap and len(out) < batch_size:
            self._take_interleaved(out, batch_size)
        else:
            first = self._first_batch()  # may compact the list, which moves ``_take``
            order = self._order
            i = max(self._take, first)
            while len(out) < batch_size and i < len(order):
                b = order[i]
                msgs = self.messages(b) if b.taken < len(b.offsets) else []
                live = b.live
                while b.taken < len(msgs) and len(out) < batch_size:
                    k = b.taken
                    b.taken += 1
                    if live[k]:
                        m = msgs[k]
                        consuming[m.queue_offset] = m
                        out.append(m)
                if b.taken >= len(msgs):
                    i += 1
            self._take = i
        if not out:
            self.consuming = False
        return out

    def _take_interleaved(self, out: list[MessageExt], batch_size: int) -> None:
        """take_messages when batches overlap (a re-pull below the last one): the smallest
        offsets not handed out over every batch (rare). Within a batch they are handed out
        in order, so each batch's cursor still marks what it has handed out."""
        waiting: list[tuple[int, list[MessageExt], PulledBatch, int]] = []
        for b in self._order[self._first_batch() :]:
            if b.taken < len(b.offsets):
                msgs = self.messages(b)
                waiting += ((b.offsets[k], msgs, b, k) for k in range(b.taken, len(msgs)) if b.live[k])
        waiting.sort(key=lambda t: t[0])
        for off, msgs, b, k in waiting[: batch_size - len(out)]:
            b.taken = k + 1
            self._consuming[off] = msgs[k]
            out.append(msgs[k])

    def commit(self) -> int:
        """The taken messages are done: the offset to commit (one past the largest), or
        -1 when nothing was taken."""
        consuming = self._consuming
        if not consuming:
            return -1
        offset = max(consuming) + 1
        count = size = 0
        for off in consuming:
            found = self._find(off)
            if found is not None:
                s = found[0].kill(found[1])
                if s >= 0:
                    count += 1
                    size += s
        self.msg_count -= count
        self.msg_size -= size
        consuming.clear()
        return offset

    def make_message_to_consume_again(self, msgs: Iterable[MessageExt]) -> None:
        """Put taken messages back; they are taken again before anything later."""
        for m in msgs:
            if self._consuming.pop(m.queue_offset, None) is not None:
                insort(self._again, m, key=_queue_offset)

    def rollback(self) -> None:
        """Put every taken message back."""
        self.make_message_to_consume_again(list(self._consuming.values()))

    @property
    def consuming_count(self) -> int:
        return len(self._consuming)

    def cached_range(self) -> tuple[int, int, int] | None:
        """(smallest, largest offset, count) of the messages waiting to be consumed (not in
        the orderly consuming set), or None (what GET_CONSUMER_RUNNING_INFO reports as
        cachedMsg*)."""
        count = self.msg_count - len(self._consuming)
        if count <= 0:
            return None
        consuming = self._consuming
        live = [b for b in self._order[self._first_batch() :] if b.live_count]
        lo = min(o for b in live for o in b.live_offsets() if o not in consuming)
        hi = max(
            (o for b in (live if self._overlap else live[-1:]) for o in b.live_offsets() if o not in consuming),
            default=None,
        )
        if hi is None:  # the last batch is all being consumed (orderly)
            hi = max(o for b in live for o in b.live_offsets() if o not in consuming)
        return lo, hi, count

    def consuming_range(self) -> tuple[int, int, int] | None:
        """The same for an orderly consumer's taken, uncommitted messages (transactionMsg*)."""
        if not self._consuming:
            return None
        return min(self._consuming), max(self._consuming), len(self._consuming)

    def clear(self) -> None:
        """Forget everything in flight (seek, re-balance, offset reset)."""
        # the batches' data stay: consume requests already queued still deliver them, as
        # Java's ConsumeRequests already submitted do
        self._order.clear()
        self._firsts.clear()
        self._consuming.clear()
        self._again.clear()
        self._head = self._take = 0
        self._overlap = False
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


def _queue_offset(m: MessageExt) -> int:
    return m.queue_offset


def _subset(batch: PulledBatch, keep: list[int]) -> PulledBatch:
    """The messages ``keep`` (positions) of a batch not taken yet."""
    sub = PulledBatch(
        [batch.offsets[i] for i in keep],
        [batch.sizes[i] for i in keep],
        data=batch.data,
        msgs=None if batch.msgs is None else [batch.msgs[i] for i in keep],
        gappy=True,
        stamp=batch.stamp,
    )
    return sub
