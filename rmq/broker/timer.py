"""Timer messages: RocketMQ 5's arbitrary delivery time (TIMER_DELIVER_MS / TIMER_DELAY_SEC /
TIMER_DELAY_MS), over the normal CommitLog.

**Put hook** (``TimerHook``, called by the send processor only when the properties string
mentions ``TIMER_``; RocketMQ 5's HookUtils.handleScheduleMessage / transformTimerMessage):
a message that also has a delay level (DELAY) loses its TIMER_* keys and keeps the 4.x
delay-level path (the store's rewrite to SCHEDULE_TOPIC_XXXX, rmq/broker/schedule.py). Else
the delivery time is parsed; a past one goes straight to the real topic; one further ahead
than ``timerMaxDelaySec`` is refused (MESSAGE_ILLEGAL, the field named); otherwise it is
floored to a ``timerPrecisionMs`` slot (an exact multiple moves one slot earlier), kept as
TIMER_OUT_MS, and the message is stored in ``rmq_sys_wheel_timer`` queue 0 with
REAL_TOPIC / REAL_QID. Flushing and HA replication cover it like any record.

**Delivery** (``TimerMessageService``, masters only: rmq/broker/roles.py): a scanner reads
the timer topic's ConsumeQueue, reads each record's TIMER_* keys and keeps
``(due, cqOffset, commitLogOffset, size)`` in a min-heap (``due``: the asked time, or, if
that cannot be read back, the end of its TIMER_OUT_MS slot; never before the asked time,
less than one slot after it). A deliverer puts every due record back to its real topic /
queue (REAL_* removed, TIMER_ENQUEUE_MS / TIMER_DEQUEUE_MS added, as
TimerMessageStore.convertMessage), whose normal dispatch wakes long-polling consumers.

**Memory bound** (``TimerWheelState``): only entries due within ``WINDOW_MS`` (10 min) of the
last scan are in the heap; a further one is left on disk and only the lowest such CQ
offset is remembered. When ``now + WINDOW_MS / 2`` reaches the horizon the scanner passes
again over the queue from that offset with the horizon moved on: memory is O(timers due
in the next 10 minutes), the price is a re-read of the far entries every 5 minutes.

**Progress** (``TimerCheckpoint``: L, the lowest undelivered CQ offset; S, the scan end;
W, every entry below S due at or before W is delivered) is kept in ``config/timercheck``,
RocketMQ 5's TimerCheckpoint file (layout: ``encode_timer_check``), owned by this service.
A checkpoint is taken every second and written (atomically, in a worker thread) only after
the CommitLog has committed every copy delivered before it. The master answers
GET_TIMER_CHECK_POINT (60) with the last one written; a slave's service, not running,
stores its master's (slave sync, ``adopt``), so a promoted slave resumes from its master's
last checkpoint (cut to the end of its own timer queue, whose later offsets hold entries
its old master never wrote). A restart scans again from L and skips what the checkpoint
proves delivered: it re-delivers at most what was delivered after the last written
checkpoint (at-least-once). A copy is committed, not replicated, when its progress is
saved: an ASYNC failover may lose a copy delivered less than a slave-sync interval before
the failure whose bytes had not reached the slave.

Before the file, the progress was kept as consumer offsets of queues 0 / 1 / 2 of the
internal group ``CID_RMQ_SYS_TIMER`` on the timer topic (``TIMER_GROUP``); a broker that
finds no file but those offsets takes them once (``load``), writes the file and removes
the group's offsets.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import os
import struct
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from rmq.broker.reput import real_destination, reput_message
from rmq.broker.seams import ServiceStore
from rmq.common.clock import now_ms
from rmq.common.fs import atomic_write
from rmq.protocol.bodies import DataVersion, TopicConfig
from rmq.protocol.codes import ResponseCode
from rmq.protocol.message import MessageConst, MessageExt, MessageExtBrokerInner, SysFlag
from rmq.runtime.service import ServiceLoop
from rmq.store.results import PutMessageResult, PutMessageStatus

__all__ = [
    "TIMER_CHECK_FILE",
    "TIMER_GROUP",
    "TIMER_TOPIC",
    "TimerCheckpoint",
    "TimerHook",
    "TimerIllegal",
    "TimerMessageService",
    "TimerWheelState",
    "decode_timer_check",
    "due_of",
    "encode_timer_check",
    "parse_deliver_ms",
    "slot_of",
    "timer_copy",
    "timer_topic_config",
]

log = logging.getLogger("rmq.broker.timer")

TIMER_TOPIC = "rmq_sys_wheel_timer"  # TimerMessageStore.TIMER_TOPIC
TIMER_GROUP = "CID_RMQ_SYS_TIMER"  # rmq before config/timercheck: the group progress was kept under
TIMER_CHECK_FILE = "timercheck"  # under config/ (BrokerPathConfigHelper.getTimerCheckPath)
WINDOW_MS = 10 * 60 * 1000  # entries due within this much of the last scan are in memory
SCAN_BATCH = 2000  # CQ units read per scanner step before yielding the loop
DELIVER_BATCH = 1000  # puts per deliverer step before yielding the loop
POLL = 0.1  # s: how often an idle scanner / deliverer looks again
RETRY_AFTER = 1.0  # s after a failed put
CHECKPOINT_INTERVAL = 1.0  # s

_TIMER_KEYS = (MessageConst.TIMER_DELIVER_MS, MessageConst.TIMER_DELAY_SEC, MessageConst.TIMER_DELAY_MS)
_NOT_TIMER_TRANSACTION = (SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE)


def timer_topic_config() -> TopicConfig:
    """rmq_sys_wheel_timer as RocketMQ 5 creates it: one queue, read and write."""
    return TopicConfig(TIMER_TOPIC, 1, 1, 6)


# ---------------------------------------------------------------------------- the put hook
class TimerIllegal(ValueError):
    """A timer message refused: the text is the response's remark, ``response_code`` its
    code (RocketMQ 5: MESSAGE_ILLEGAL for WHEEL_TIMER_MSG_ILLEGAL, SYSTEM_ERROR for
    WHEEL_TIMER_NOT_ENABLE)."""

    def __init__(self, remark: str, response_code: int = ResponseCode.MESSAGE_ILLEGAL) -> None:
        super().__init__(remark)
        self.response_code = response_code


def parse_deliver_ms(props: dict[str, str], now: int) -> int | None:
    """The delivery time the TIMER_* keys ask for (TIMER_DELAY_SEC first, then
    TIMER_DELAY_MS, then TIMER_DELIVER_MS, as RocketMQ 5); None without any."""
    for key, scale, relative in (
        (MessageConst.TIMER_DELAY_SEC, 1000, True),
        (MessageConst.TIMER_DELAY_MS, 1, True),
        (MessageConst.TIMER_DELIVER_MS, 1, False),
    ):
        raw = props.get(key)
        if raw is None:
            continue
        try:
            v = int(raw.strip())
        except ValueError:
            raise TimerIllegal(f"timer message illegal: {key}={raw!r} is not a whole number") from None
        return now + v * scale if relative else v
    return None


def slot_of(deliver_ms: int, precision_ms: int) -> int:
    """TIMER_OUT_MS for a delivery time: its slot's start; an exact multiple of the
    precision is one slot earlier (RocketMQ 5). The slot ends (is due) at
    ``slot + precision``, never before deliver_ms and less than one slot after it."""
    if deliver_ms % precision_ms == 0:
        return deliver_ms - precision_ms
    return deliver_ms // precision_ms * precision_ms


def due_of(props: dict[str, str], store_timestamp: int, precision_ms: int) -> int | None:
    """When a stored timer record is delivered: the time its TIMER_* keys asked for (a
    relative delay counted from its store time, which is after the hook's clock read)
    when that lies in its TIMER_OUT_MS slot, else the slot's end; None without a
    readable TIMER_OUT_MS."""
    try:
        out = int(props[MessageConst.TIMER_OUT_MS])
    except (KeyError, ValueError):
        return None
    end = out + precision_ms
    try:
        asked = parse_deliver_ms(props, store_timestamp)
    except TimerIllegal:
        return end
    if asked is not None and out < asked <= end:
        return asked
    return end


@dataclass(frozen=True, slots=True)
class TimerHook:
    """The send path's timer transform. ``__call__`` rewrites msg in place (its properties
    dict, topic and queue id; the caller encodes the properties string after) and raises
    TimerIllegal for a refusal."""

    enabled: bool = True
    max_delay_sec: int = 3600 * 24 * 3
    precision_ms: int = 1000
    clock: Callable[[], int] = now_ms

    def __call__(self, msg: MessageExtBrokerInner) -> None:
        props = msg.properties
        if SysFlag.transaction_value(msg.sys_flag) not in _NOT_TIMER_TRANSACTION:
            return  # a half message: its commit is a new message
        if msg.topic == TIMER_TOPIC or MessageConst.TIMER_OUT_MS in props:
            return  # already transformed
        level = props.get(MessageConst.DELAY_TIME_LEVEL)
        if level is not None and level.strip() not in ("", "0"):
            # a delay level wins: the 4.x schedule service delivers it, TIMER_* dropped
            for key in _TIMER_KEYS:
                props.pop(key, None)
            return
        if not any(k in props for k in _TIMER_KEYS):
            return
        if not self.enabled:
            raise TimerIllegal(
                "accurate timer message is not enabled, timerWheelEnable is false", ResponseCode.SYSTEM_ERROR
            )
        now = self.clock()
        deliver = parse_deliver_ms(props, now)
        if deliver is None or deliver <= now:
            return  # a past delivery time: straight to the real topic
        if deliver - now > self.max_delay_sec * 1000:
            key = next(k for k in _TIMER_KEYS if k in props)
            raise TimerIllegal(
                f"timer message illegal, the delay time should not be bigger than the max delay "
                f"{self.max_delay_sec * 1000}ms: {key}={props[key]} asks for delivery "
                f"{deliver - now} ms from now (timerMaxDelaySec={self.max_delay_sec})"
            )
        props[MessageConst.TIMER_OUT_MS] = str(slot_of(deliver, self.precision_ms))
        props[MessageConst.REAL_TOPIC] = msg.topic
        props[MessageConst.REAL_QUEUE_ID] = str(msg.queue_id)
        msg.properties_string = None
        msg.topic = TIMER_TOPIC
        msg.queue_id = 0


def timer_copy(msg: MessageExt, now: int) -> MessageExtBrokerInner:
    """A due timer record as it goes to its real topic (TimerMessageStore.convertMessage):
    REAL_TOPIC / REAL_QID removed, TIMER_ENQUEUE_MS (when it was stored) and
    TIMER_DEQUEUE_MS added, everything else (body, keys, UNIQ_KEY, TIMER_*) kept."""
    props = dict(msg.properties)
    topic, qid = real_destination(props, msg.topic)
    props.pop(MessageConst.REAL_TOPIC, None)
    props.pop(MessageConst.REAL_QUEUE_ID, None)
    props.setdefault(MessageConst.TIMER_ENQUEUE_MS, str(msg.store_timestamp))
    props[MessageConst.TIMER_DEQUEUE_MS] = str(now)
    return reput_message(msg, topic, qid, props)


# ---------------------------------------------------------------------------- progress
@dataclass(frozen=True, slots=True)
class TimerCheckpoint:
    """``low``: the lowest timer CQ offset not yet delivered (a restart scans from there);
    ``scanned``: the CQ offset scanning had reached; ``delivered_through``: every entry
    below ``scanned`` due at or before this time is delivered."""

    low: int
    scanned: int
    delivered_through: int

    @classmethod
    def from_offsets(cls, queues: dict[int, int]) -> TimerCheckpoint | None:
        """The checkpoint as rmq kept it before config/timercheck: the offsets of queues 0
        (low), 1 (scanned) and 2 (delivered_through) of TIMER_GROUP on TIMER_TOPIC."""
        low = queues.get(0, -1)
        if low < 0:
            return None
        scanned = max(queues.get(1, low), low)
        return cls(low, scanned, queues.get(2, 0))

    def within(self, top: int) -> TimerCheckpoint:
        """This checkpoint for a queue that ends at ``top``: a new master whose copy of the
        log ends before its old master's scan end gets new entries at those offsets, which
        nothing here has seen."""
        if self.scanned <= top:
            return self
        return TimerCheckpoint(min(self.low, top), top, self.delivered_through)


# config/timercheck and GET_TIMER_CHECK_POINT's body: RocketMQ 5's TimerCheckpoint, seven
# big-endian longs (TimerCheckpoint.encode / flush); the file is one mapped OS page, zeros
# after them; a file of the first four longs only (before 5.x added the DataVersion) reads
# with version (0, 0, 0).
_TIMER_CHECK = struct.Struct(">7q")
_TIMER_CHECK_V0 = 32
TIMER_CHECK_FILE_SIZE = 4096  # DefaultMappedFile.OS_PAGE_SIZE
NO_VERSION = DataVersion(0, 0, 0)


def encode_timer_check(cp: TimerCheckpoint, version: DataVersion, size: int = _TIMER_CHECK.size) -> bytes:
    """RocketMQ 5's TimerCheckpoint bytes for ``cp`` (``size``: padded with zeros, as the file).

    ======  ======================  ===========================================================
    offset  RocketMQ 5              rmq
    ======  ======================  ===========================================================
    0       lastReadTimeMs          ``delivered_through``: the time the delivery has read up to
                                    (RocketMQ: commitReadTimeMs, every slot before it delivered)
    8       lastTimerLogFlushPos    ``low``: where a restart reads pending timers again. We keep
                                    no TimerLog: the pending timers are the timer topic's CQ
                                    entries from ``low`` on, so this slot holds a CQ offset, not
                                    a TimerLog position (the only field whose unit differs)
    16      lastTimerQueueOffset    ``scanned``: the timer CQ offset scanning had reached
                                    (RocketMQ: commitQueueOffset, what the enqueue had read)
    24      masterTimerQueueOffset  ``scanned`` as well: RocketMQ's master writes its own
                                    commitQueueOffset there; a slave's copy is its master's
    32      dataVersion.stateVersion   0 (we have no state machine version)
    40      dataVersion.timestamp      when the checkpoint last changed (ms)
    48      dataVersion.counter        bumped at every change
    ======  ======================  ===========================================================

    So a RocketMQ 5 slave syncing from us reads the fields it copies (lastReadTimeMs,
    masterTimerQueueOffset, dataVersion) with their own meaning."""
    state = version.state_version or 0
    raw = _TIMER_CHECK.pack(
        cp.delivered_through, cp.low, cp.scanned, cp.scanned, state, version.timestamp, version.counter
    )
    return raw.ljust(size, b"\0")


def decode_timer_check(raw: bytes) -> tuple[TimerCheckpoint, DataVersion]:
    """``encode_timer_check``'s inverse (trailing bytes ignored); ValueError when short.
    ``scanned`` is lastTimerQueueOffset (RocketMQ writes min(its own, the master's) there)."""
    if len(raw) < _TIMER_CHECK_V0:
        raise ValueError(f"timer checkpoint: {len(raw)} bytes, at least {_TIMER_CHECK_V0} expected")
    if len(raw) < _TIMER_CHECK.size:
        raw = bytes(raw[:_TIMER_CHECK_V0]).ljust(_TIMER_CHECK.size, b"\0")
    read_ms, low, scanned, _master, state, ts, counter = _TIMER_CHECK.unpack_from(raw)
    low = max(0, min(low, scanned))
    return TimerCheckpoint(low, scanned, read_ms), DataVersion(ts, counter, state)


Entry = tuple[int, int, int, int]  # (due ms, cq offset, commitlog offset, size)


class TimerWheelState:
    """The pure bookkeeping of the timer service: what is pending, what a checkpoint is.

    Invariant: every entry in ``[low, scan)`` due at or before ``horizon`` is in the heap or
    delivered; the others (due later) start at ``far_low`` or above, and are read again by
    a pass that moves the horizon on. A pass (``begin_pass`` ... ``offer`` ... ``end_pass``)
    goes from ``far_low`` (or ``scan``) to the queue's end."""

    def __init__(self, start: int, restored: TimerCheckpoint | None, now: int, window_ms: int = WINDOW_MS) -> None:
        self.window_ms = window_ms
        self.heap: list[Entry] = []
        self.scan = start
        self.horizon = now + window_ms
        self.far_low: int | None = None
        self.far = 0  # entries known to be beyond the horizon
        self.restored = restored if restored is not None and restored.scanned > start else None
        # the pass under way
        self.cursor = start
        self._pass_horizon = self.horizon
        self._pass_far_low: int | None = None
        self._pass_far = 0
        self._pass_from_far = False
        self.in_pass = False

    # --- passes
    def needs_rescan(self, now: int) -> bool:
        return self.far_low is not None and now + self.window_ms // 2 >= self.horizon

    def begin_pass(self, now: int) -> None:
        """A pass from the scan end over new entries, or, when the horizon is near, from
        far_low with the horizon moved on."""
        if self.needs_rescan(now):
            assert self.far_low is not None
            self.cursor = self.far_low
            self._pass_horizon = now + self.window_ms
            self._pass_from_far = True
            self._pass_far = 0
        else:
            if self.far_low is None:
                self.horizon = max(self.horizon, now + self.window_ms)  # nothing far: free
            self.cursor = self.scan
            self._pass_horizon = self.horizon
            self._pass_from_far = False
            self._pass_far = self.far
        self._pass_far_low = None
        self.in_pass = True

    def offer(self, cq_offset: int, phy: int, size: int, due: int) -> bool:
        """The entry at the pass's cursor (it moves on); True if it went into the heap."""
        self.cursor = cq_offset + 1
        r = self.restored
        if r is not None and cq_offset < r.scanned and due <= r.delivered_through:
            return False  # delivered before the restart
        if cq_offset < self.scan and due <= self.horizon:
            return False  # a re-read entry already in the heap or delivered
        if due <= self._pass_horizon:
            heapq.heappush(self.heap, (due, cq_offset, phy, size))
            return True
        if self._pass_far_low is None:
            self._pass_far_low = cq_offset
        if cq_offset >= self.scan or self._pass_from_far:
            self._pass_far += 1
        return False

    def skip(self, cq_offset: int) -> None:
        """An entry whose record is gone (CommitLog files deleted): nothing to deliver."""
        self.cursor = cq_offset + 1

    def end_pass(self) -> None:
        """The pass reached the queue's end."""
        if self._pass_from_far:
            self.far_low = self._pass_far_low
        elif self.far_low is None:
            self.far_low = self._pass_far_low
        self.far = self._pass_far
        self.horizon = self._pass_horizon
        self.scan = max(self.scan, self.cursor)
        if self.restored is not None and self.scan >= self.restored.scanned:
            self.restored = None
        self._pass_from_far = False
        self.in_pass = False
        self.cursor = self.scan

    # --- delivery
    def peek_due(self, now: int) -> Entry | None:
        if self.heap and self.heap[0][0] <= now:
            return self.heap[0]
        return None

    def delivered(self) -> Entry:
        return heapq.heappop(self.heap)

    @property
    def pending(self) -> int:
        return len(self.heap) + self.far

    def lag_ms(self, now: int) -> int:
        return max(0, now - self.heap[0][0]) if self.heap else 0

    # --- progress
    def checkpoint(self, now: int) -> TimerCheckpoint:
        """What may be persisted now (once every copy delivered so far is stored)."""
        if self.restored is not None:
            # entries below the old scan end are not all read again yet
            r = self.restored
            return TimerCheckpoint(min(r.low, self._low()), r.scanned, r.delivered_through)
        through = now if not self.heap else min(now, self.heap[0][0] - 1)
        return TimerCheckpoint(self._low(), self.scan, through)

    def _low(self) -> int:
        low = self.scan
        if self.far_low is not None:
            low = min(low, self.far_low)
        if self._pass_from_far and self._pass_far_low is not None:
            low = min(low, self._pass_far_low)
        if self.heap:
            low = min(low, min(e[1] for e in self.heap))
        return low


# ---------------------------------------------------------------------------- the service
class LegacyTimerOffsets(Protocol):
    """Where progress was kept before config/timercheck (the consumer offset manager)."""

    def query_offsets(self, group: str, topic: str) -> dict[int, int]: ...

    def remove_group(self, group: str, topics: Iterable[str] | None = None) -> None: ...


class TimerMessageService:
    """Delivers due timer messages; ``start`` / ``await stop()`` on the master only. Owns
    config/timercheck on every role: ``await load()`` once at broker start."""

    def __init__(self, store: ServiceStore, config_dir: str, precision_ms: int = 1000) -> None:
        self.store = store
        self.precision_ms = precision_ms
        self.check_path = os.path.join(config_dir, TIMER_CHECK_FILE)
        self.saved: TimerCheckpoint | None = None  # what config/timercheck holds
        self.version = NO_VERSION
        self._write_lock = asyncio.Lock()
        self.state: TimerWheelState | None = None
        self.delivered = 0
        self._last_put: PutMessageResult | None = None
        # made once, started and stopped with the role (a ServiceLoop can start again)
        self._deliverer = TimerDeliverService(self)
        self._loops: tuple[ServiceLoop, ...] = (TimerScanService(self), self._deliverer, TimerCheckpointService(self))

    # --- config/timercheck
    async def load(self, legacy: LegacyTimerOffsets) -> None:
        """Read config/timercheck; without one, take the checkpoint once from the consumer
        offsets rmq kept it in before and write the file. Those offsets are removed once
        the file exists (again after a crash before the offset table was written)."""
        raw = await asyncio.to_thread(_read_if_exists, self.check_path)
        if raw is not None:
            try:
                self.saved, self.version = decode_timer_check(raw)
            except ValueError as e:
                raise ValueError(f"{self.check_path}: {e}") from None
        else:
            old = TimerCheckpoint.from_offsets(legacy.query_offsets(TIMER_GROUP, TIMER_TOPIC))
            if old is not None:
                await self._write(old, self.version.next_version(now_ms()))
                log.info("timer checkpoint %s moved from the offsets of %s to %s", old, TIMER_GROUP, self.check_path)
        legacy.remove_group(TIMER_GROUP, (TIMER_TOPIC,))

    async def _write(self, cp: TimerCheckpoint, version: DataVersion) -> None:
        payload = encode_timer_check(cp, version, TIMER_CHECK_FILE_SIZE)
        async with self._write_lock:
            await asyncio.to_thread(atomic_write, self.check_path, payload)
            self.saved, self.version = cp, version

    def check_body(self) -> bytes:
        """GET_TIMER_CHECK_POINT's body: the last checkpoint written (zeros before any)."""
        return encode_timer_check(self.saved or TimerCheckpoint(0, 0, 0), self.version)

    async def adopt(self, body: bytes) -> bool:
        """A slave stores its master's checkpoint (GET_TIMER_CHECK_POINT's body) whole when
        its version differs (RocketMQ 5 copies lastReadTimeMs and masterTimerQueueOffset
        only: its TimerLog holds the rest); never while delivering. True if written."""
        cp, version = decode_timer_check(body)
        if self.started or (cp, version) == (self.saved, self.version):
            return False
        await self._write(cp, version)
        return True

    # --- lifecycle
    @property
    def started(self) -> bool:
        return self.state is not None

    def start(self) -> None:
        """Begin from the checkpoint in config/timercheck (this broker's, or its old
        master's as slave sync copied it)."""
        if self.state is not None:
            return
        restored = self.saved
        if restored is not None:
            restored = restored.within(self.store.get_max_offset_in_queue(TIMER_TOPIC, 0))
        first = max(restored.low if restored is not None else 0, self.store.get_min_offset_in_queue(TIMER_TOPIC, 0))
        self.state = TimerWheelState(first, restored, now_ms())
        self._last_put = None
        log.info("timer service starting at %s offset %d (checkpoint %s)", TIMER_TOPIC, first, restored)
        for svc in self._loops:
            svc.start()

    async def stop(self, cancel: bool = False) -> None:
        """Stop delivering (an iteration under way finishes) and save the progress made;
        ``cancel`` as roles.py's master services are stopped, the same here."""
        if self.state is None:
            return
        for svc in self._loops:
            await svc.stop()
        await self.save_checkpoint()
        self.state = None

    # --- scanning
    def scan_step(self) -> float:
        """Read up to SCAN_BATCH timer CQ units; seconds until the next step."""
        st = self.state
        if st is None:
            return POLL
        cq = self.store.get_consume_queue(TIMER_TOPIC, 0)
        if cq is None:
            return POLL
        now = now_ms()
        if not st.in_pass:
            st.begin_pass(now)
        read = 0
        woke = False
        for idx, phy, size, _tag in cq.iter_units(st.cursor):
            if read >= SCAN_BATCH:
                return 0.0  # the pass goes on at the next step
            read += 1
            msg = self.store.look_message_by_offset(phy)
            due = due_of(msg.properties, msg.store_timestamp, self.precision_ms) if msg is not None else None
            if due is None:
                if msg is not None:  # sent to the timer topic itself, not by the hook
                    log.warning("timer record at %d (%s offset %d): no TIMER_OUT_MS; skipped", phy, TIMER_TOPIC, idx)
                st.skip(idx)
                continue
            top = st.heap[0][0] if st.heap else None
            if st.offer(idx, phy, size, due) and (top is None or due < top):
                woke = True
        lo = cq.get_min_offset_in_queue()
        if st.cursor < lo:  # files deleted under the pass
            st.cursor = lo
        st.end_pass()
        if woke:
            self._deliverer.wakeup()
        return POLL

    # --- delivery
    def deliver_step(self) -> float:
        """Put what is due (at most DELIVER_BATCH); seconds until the next step."""
        st = self.state
        if st is None:
            return POLL
        now = now_ms()
        for _ in range(DELIVER_BATCH):
            e = st.peek_due(now)
            if e is None:
                break
            _due, cq_off, phy, _size = e
            msg = self.store.look_message_by_offset(phy)
            if msg is None:
                log.error("timer record at %d (%s offset %d) is gone; not delivered", phy, TIMER_TOPIC, cq_off)
                st.delivered()
                continue
            copy = timer_copy(msg, now)
            if copy.topic == TIMER_TOPIC:  # sent to the timer topic itself, not by the hook
                log.warning("timer record at %d has no REAL_TOPIC; dropped", phy)
                st.delivered()
                continue
            result, _ = self.store.put_nowait(copy)
            if result.status is not PutMessageStatus.PUT_OK:
                log.error("timer: putting the due message at %d to %s failed: %s", phy, copy.topic, result.status.value)
                return RETRY_AFTER
            self._last_put = result
            st.delivered()
            self.delivered += 1
        else:
            return 0.0
        if not st.heap:
            return POLL
        return min(POLL, max(0.0, (st.heap[0][0] - now_ms()) / 1000))

    # --- progress
    async def save_checkpoint(self) -> None:
        """Write the progress to config/timercheck once the copies delivered so far are
        committed to the CommitLog (nothing when it has not changed)."""
        st = self.state
        if st is None:
            return
        cp = st.checkpoint(now_ms())
        last = self._last_put
        if last is not None:
            waiter: Awaitable[PutMessageStatus] | None = self.store.commit_waiter(last)
            if waiter is not None and await waiter is not PutMessageStatus.PUT_OK:
                log.error("timer: the CommitLog did not commit delivered copies; progress not saved")
                return
        if cp == self.saved:
            return
        try:
            await self._write(cp, self.version.next_version(now_ms()))
        except OSError as e:
            log.error("timer: writing %s failed (progress not saved; a restart re-delivers): %s", self.check_path, e)

    # --- metrics
    def figures(self) -> dict[str, int]:
        """Pending timers, delivered since start, delivery lag (ms) (rmq/broker/metrics.py)."""
        st = self.state
        pending, lag = (st.pending, st.lag_ms(now_ms())) if st is not None else (0, 0)
        return {"timer_pending": pending, "timer_delivered": self.delivered, "timer_latency_ms": lag}


class _Step(ServiceLoop):
    def __init__(self, name: str, step: Callable[[], float]) -> None:
        super().__init__(name, log)
        self._step = step
        self._wait = 0.0

    def interval(self) -> float:
        return self._wait

    async def run_once(self) -> None:
        try:
            self._wait = self._step()
        except Exception:
            log.exception("%s failed", self.name)
            self._wait = RETRY_AFTER


class TimerScanService(_Step):
    def __init__(self, timer: TimerMessageService) -> None:
        super().__init__("timer-scan", timer.scan_step)


class TimerDeliverService(_Step):
    def __init__(self, timer: TimerMessageService) -> None:
        super().__init__("timer-deliver", timer.deliver_step)


class TimerCheckpointService(ServiceLoop):
    def __init__(self, timer: TimerMessageService) -> None:
        super().__init__("timer-checkpoint", log)
        self.timer = timer

    def interval(self) -> float:
        return CHECKPOINT_INTERVAL

    async def run_once(self) -> None:
        await self.timer.save_checkpoint()


def _read_if_exists(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
