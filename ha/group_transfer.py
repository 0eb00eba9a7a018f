"""GroupTransferService (SYNC_MASTER, spec 5.4): a put waits until slaves acked its end.

No coroutine, thread or timer per message (RocketMQ's blocking wait per request cost it
10x throughput, its issue #1515): waiting puts are a deque of rounds in end-offset
order (the put path appends in offset order), an ack completes every round it covers
from the left, and one timer, armed for the oldest round's deadline, answers the
rounds nobody acked in time with FLUSH_SLAVE_TIMEOUT.

A round is shared by every put of one loop iteration (their records are committed
together and go to the slave in the same writes), so its future is created once per
iteration, not per message; its target is the highest end offset among them.

Which acks complete a round (RocketMQ 5's in-sync replica rules; ha/service.py picks
the rule per put):

* one slave, ``submit(end)`` (rmq's SYNC_MASTER by default): ``acked``, the highest
  offset any slave acked (RocketMQ's push2SlaveMaxOffset), passes the round's target;
* n different slaves, ``submit_n(end, n)``: the n-th highest of the slaves' latest acks
  passes it (``on_ack(offset, slave)`` with the slave's brokerId: a slave counts once,
  however many connections it has);
* every member of the in-sync set, ``submit_all(end)``: the lowest ack among the
  members named by ``set_required`` passes it (a member that never acked holds it; the
  set emptied: answered PUT_OK).

An ack is a fact about the past: a slave that disconnected still counts for the offsets
it acked (it has those bytes), never for later ones. Each rule other than the first has
its own lane (rounds, timer); the first is this object itself, its path as it was.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import heapq
import logging

from rmq.store.results import PutMessageStatus

log = logging.getLogger("rmq.ha")

_OK = PutMessageStatus.PUT_OK
# lane key of "every member of the in-sync set" (RocketMQ: MixAll.ALL_ACK_IN_SYNC_STATE_SET)
ALL = -1


class _Round:
    __slots__ = ("target", "future", "deadline", "count")

    def __init__(self, target: int, future: asyncio.Future[PutMessageStatus], deadline: float) -> None:
        self.target = target
        self.future = future
        self.deadline = deadline
        self.count = 1

    def __lt__(self, other: _Round) -> bool:
        return self.target < other.target


class _Rounds:
    """The waiting puts of one ack rule: rounds in target order, one timer."""

    def __init__(self, timeout: float, who: str) -> None:
        self.timeout = timeout
        self.who = who  # whose ack is awaited (the timeout's log line)
        self.acked = 0  # the highest offset this rule has seen acked
        self._rounds: collections.deque[_Round] = collections.deque()
        self._open: _Round | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timeouts = 0
        self._completed = 0

    @property
    def pending(self) -> int:
        """Puts waiting for acks."""
        return sum(r.count for r in self._rounds)

    @property
    def timeouts(self) -> int:
        """Puts answered FLUSH_SLAVE_TIMEOUT."""
        return self._timeouts

    @property
    def completed(self) -> int:
        """Puts answered PUT_OK."""
        return self._completed

    def submit(self, end_offset: int) -> asyncio.Future[PutMessageStatus] | None:
        """A future completed PUT_OK once the acks cover end_offset (FLUSH_SLAVE_TIMEOUT
        after slaveTimeout); None if they already do."""
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

    def advance(self, offset: int) -> None:
        """The acks this rule needs cover every byte below offset."""
        if offset <= self.acked:
            return
        self.acked = offset
        rounds = self._rounds
        while rounds and rounds[0].target <= offset:
            r = self._pop_oldest()
            if r is not None:
                r.future.set_result(_OK)
                self._completed += r.count

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
                self._timeouts += r.count
                log.warning(
                    "%s did not ack CommitLog offset %d within %.0f ms "
                    "(acked %d); %d put(s) answered FLUSH_SLAVE_TIMEOUT",
                    self.who,
                    r.target,
                    self.timeout * 1000,
                    self.acked,
                    r.count,
                )
                r.future.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        if rounds:
            self._timer = loop.call_at(rounds[0].deadline, self._sweep)

    def fail_all(self, status: PutMessageStatus) -> None:
        """Answer every waiting put (shutdown, role change; PUT_OK: nothing is awaited
        any more)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._open = None
        while self._rounds:
            r = self._rounds.popleft()
            if not r.future.done():
                r.future.set_result(status)
                if status is _OK:
                    self._completed += r.count


class GroupTransferService(_Rounds):
    """Rounds waiting for one slave (this object), n different slaves or the whole
    in-sync set (lanes of their own)."""

    def __init__(self, timeout_ms: int) -> None:
        super().__init__(timeout_ms / 1000, "slave")
        # slave (brokerId) -> its latest ack; lower after a reconnect that truncated
        self._acks: dict[int, int] = {}
        # slaves needed (or ALL) -> its rounds
        self._lanes: dict[int, _Rounds] = {}
        self._required: frozenset[int] = frozenset()

    @property
    def pending(self) -> int:
        return super().pending + sum(lane.pending for lane in self._lanes.values())

    @property
    def timeouts(self) -> int:
        return self._timeouts + sum(lane.timeouts for lane in self._lanes.values())

    @property
    def completed(self) -> int:
        return self._completed + sum(lane.completed for lane in self._lanes.values())

    def on_ack(self, offset: int, slave: int | None = None) -> None:
        """A slave (brokerId; None: an unnamed one, counted for the one-slave rule only)
        has every byte below offset."""
        if slave is not None:
            self._acks[slave] = offset
            if self._lanes:
                self._advance_lanes()
        self.advance(offset)

    def submit_n(self, end_offset: int, slaves: int) -> asyncio.Future[PutMessageStatus] | None:
        """As submit, completed once ``slaves`` different slaves acked end_offset."""
        if slaves <= 1:
            return self.submit(end_offset)
        return self._lane(slaves).submit(end_offset)

    def submit_all(self, end_offset: int) -> asyncio.Future[PutMessageStatus] | None:
        """As submit, completed once every slave of ``set_required`` acked end_offset;
        None when the set is empty."""
        if not self._required:
            return None
        return self._lane(ALL).submit(end_offset)

    def set_required(self, slaves: frozenset[int]) -> None:
        """The in-sync set (brokerIds, this master not included) submit_all waits for."""
        if slaves == self._required:
            return
        self._required = slaves
        lane = self._lanes.get(ALL)
        if lane is not None:
            self._advance(ALL, lane)

    @property
    def required(self) -> frozenset[int]:
        return self._required

    def acked_by(self, slaves: int) -> int:
        """The highest offset ``slaves`` different slaves have acked (-1: fewer slaves
        ever acked)."""
        acks = self._acks
        if len(acks) < slaves:
            return -1
        if slaves == 1:
            return max(acks.values())
        return heapq.nlargest(slaves, acks.values())[-1]

    def _lane(self, key: int) -> _Rounds:
        lane = self._lanes.get(key)
        if lane is None:
            who = "the in-sync set" if key == ALL else f"{key} different slaves"
            lane = self._lanes[key] = _Rounds(self.timeout, who)
            self._advance(key, lane)
        return lane

    def _advance_lanes(self) -> None:
        for key, lane in self._lanes.items():
            if lane._rounds:
                self._advance(key, lane)

    def _advance(self, key: int, lane: _Rounds) -> None:
        if key != ALL:
            lane.advance(self.acked_by(key))
        elif not self._required:
            lane.fail_all(_OK)  # only this master is in sync: nothing to wait for
        else:
            acks = self._acks
            lane.advance(min(acks.get(s, -1) for s in self._required))

    def fail_all(self, status: PutMessageStatus) -> None:
        super().fail_all(status)
        for lane in self._lanes.values():
            lane.fail_all(status)
