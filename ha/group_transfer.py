"""GroupTransferService (SYNC_MASTER, spec 5.4): a put waits until a slave acked its end.

No coroutine, thread or timer per message (RocketMQ's blocking wait per request cost it
10x throughput, its issue #1515): waiting puts are a deque of rounds in end-offset
order (the put path appends in offset order), an ack completes every round it covers
from the left, and one timer, armed for the oldest round's deadline, answers the
rounds nobody acked in time with FLUSH_SLAVE_TIMEOUT.

A round is shared by every put of one loop iteration (their records are committed
together and go to the slave in the same writes), so its future is created once per
iteration, not per message; its target is the highest end offset among them.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import logging

from rmq.store.results import PutMessageStatus

log = logging.getLogger("rmq.ha")

_OK = PutMessageStatus.PUT_OK


class _Round:
    __slots__ = ("target", "future", "deadline", "count")

    def __init__(self, target: int, future: asyncio.Future[PutMessageStatus], deadline: float) -> None:
        self.target = target
        self.future = future
        self.deadline = deadline
        self.count = 1

    def __lt__(self, other: _Round) -> bool:
        return self.target < other.target


class GroupTransferService:
    def __init__(self, timeout_ms: int) -> None:
        self.timeout = timeout_ms / 1000
        self.acked = 0  # RocketMQ's push2SlaveMaxOffset
        self._rounds: collections.deque[_Round] = collections.deque()
        self._open: _Round | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.timeouts = 0
        self.completed = 0

    @property
    def pending(self) -> int:
        """Puts waiting for a slave."""
        return sum(r.count for r in self._rounds)

    def submit(self, end_offset: int) -> asyncio.Future[PutMessageStatus] | None:
        """A future completed PUT_OK once a slave acked end_offset (FLUSH_SLAVE_TIMEOUT
        after slaveTimeout); None if one already has."""
        if end_offset <= self.acked:
            return None
        r = self._open
        if r is not None and not r.future.done():
            if end_offset > r.target:
                r.target = end_offset
            r.count += 1
            return r.future
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        r = _Round(end_offset, loop.create_future(), loop.time() + self.timeout)
        rounds = self._rounds
        if not rounds or rounds[-1].target <= end_offset:
            rounds.append(r)
        else:  # not expected: the put path appends in offset order
            rounds.insert(bisect.bisect_right(rounds, r), r)
        self._open = r
        loop.call_soon(self._close_round, r)
        if self._timer is None:
            self._timer = loop.call_at(r.deadline, self._sweep)
        return r.future

    def _close_round(self, r: _Round) -> None:
        if self._open is r:
            self._open = None

    def on_ack(self, offset: int) -> None:
        """A slave has every byte below offset."""
        if offset <= self.acked:
            return
        self.acked = offset
        rounds = self._rounds
        while rounds and rounds[0].target <= offset:
            r = self._pop_oldest()
            if r is not None:
                r.future.set_result(_OK)
                self.completed += r.count

    def _pop_oldest(self) -> _Round | None:
        """Take the oldest round off; None if it was answered already."""
        r = self._rounds.popleft()
        if r is self._open:
            self._open = None
        return None if r.future.done() else r

    def _sweep(self) -> None:
        self._timer = None
        loop = self._loop
        assert loop is not None
        now = loop.time()
        rounds = self._rounds
        while rounds and rounds[0].deadline <= now:
            r = self._pop_oldest()
            if r is not None:
                self.timeouts += r.count
                log.warning(
                    "slave did not ack CommitLog offset %d within %.0f ms "
                    "(acked %d); %d put(s) answered FLUSH_SLAVE_TIMEOUT",
                    r.target,
                    self.timeout * 1000,
                    self.acked,
                    r.count,
                )
                r.future.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        if rounds:
            self._timer = loop.call_at(rounds[0].deadline, self._sweep)

    def fail_all(self, status: PutMessageStatus) -> None:
        """Answer every waiting put (shutdown, role change)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._open = None
        while self._rounds:
            r = self._rounds.popleft()
            if not r.future.done():
                r.future.set_result(status)
