"""ScheduleMessageService: delay levels over SCHEDULE_TOPIC_XXXX (spec 7.1).

One task per level walks that level's queue (queue id = level - 1). A unit's tag code
is its delivery time; a due message is rebuilt for its REAL_TOPIC / REAL_QID and put
again. Per-level offsets are persisted (config/delayOffset.msgpack) and, on load,
clamped into the queue's [min, max].
"""

from __future__ import annotations

import logging
from typing import Any

from rmq.broker.persist import MetadataFile
from rmq.broker.reput import real_destination, reput_message
from rmq.broker.seams import ServiceStore
from rmq.common.clock import now_ms
from rmq.common.mixall import SCHEDULE_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC
from rmq.protocol.message import MessageConst, MessageExt, MessageExtBrokerInner
from rmq.runtime.service import ServiceLoop
from rmq.store.cq_codec import CQ_UNIT
from rmq.store.results import PutMessageStatus

log = logging.getLogger("rmq.broker.schedule")

FIRST_DELAY_TIME = 1.0  # s before a level's first scan
DELAY_FOR_A_WHILE = 0.1  # s between scans of a drained level
DELAY_FOR_A_PERIOD = 10.0  # s after a failed put


def delay_level_to_queue_id(level: int) -> int:
    return level - 1


def queue_id_to_delay_level(queue_id: int) -> int:
    return queue_id + 1


def message_time_up(msg: MessageExt) -> MessageExtBrokerInner:
    """The delayed message as it goes to its real topic (RocketMQ's messageTimeup).

    DELAY is removed; REAL_TOPIC / REAL_QID stay in the properties, as in 4.9.8.
    """
    props = dict(msg.properties)
    props.pop(MessageConst.DELAY_TIME_LEVEL, None)
    real_topic, real_qid = real_destination(props, msg.topic)
    return reput_message(msg, real_topic, real_qid, props, prepared_transaction_offset=msg.prepared_transaction_offset)


class ScheduleMessageService:
    """Delay levels and their offsets. ``start`` / ``await stop()`` turn delivery on and
    off (masters only: rmq/broker/roles.py); offsets are loaded and served either way."""

    def __init__(
        self, store: ServiceStore, delay_levels_ms: list[int], config_dir: str, flush_interval_ms: int = 10_000
    ) -> None:
        self.store = store
        self.levels = list(delay_levels_ms)
        self.file = MetadataFile(config_dir, "delayOffset", "delayOffset.json")
        self.offset_table: dict[int, int] = {}
        self.flush_interval_ms = flush_interval_ms
        self.delivered = 0
        self.dirty = False
        self._services: list[ServiceLoop] = []

    @property
    def max_delay_level(self) -> int:
        return len(self.levels)

    # --- offsets ---
    def load(self) -> None:
        data, adopted = self.file.load()
        if data:
            for level, off in (data.get("offsetTable") or {}).items():
                self.offset_table[int(level)] = int(off)
            self.dirty = adopted
        self.correct_delay_offsets()

    def correct_delay_offsets(self) -> None:
        """Clamp each level's offset into its queue's [min, max] (files may have been deleted)."""
        for level, off in list(self.offset_table.items()):
            cq = self.store.get_consume_queue(SCHEDULE_TOPIC, delay_level_to_queue_id(level))
            if cq is None:
                continue
            lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
            fixed = min(max(off, lo), hi)
            if fixed != off:
                log.error("delay level %d offset %d outside [%d, %d]; corrected to %d", level, off, lo, hi, fixed)
                self.offset_table[level] = fixed
                self.dirty = True

    def snapshot(self) -> dict[str, Any]:
        return {"offsetTable": dict(self.offset_table)}

    async def persist(self) -> None:
        self.dirty = False
        await self.file.persist(self.snapshot())

    def _update_offset(self, level: int, offset: int) -> None:
        if self.offset_table.get(level) != offset:
            self.offset_table[level] = offset
            self.dirty = True

    # --- delivery ---
    def deliver_step(self, level: int) -> float:
        """Deliver what is due on this level; seconds until the next step."""
        offset = self.offset_table.get(level, 0)
        cq = self.store.get_consume_queue(SCHEDULE_TOPIC, delay_level_to_queue_id(level))
        if cq is None:
            return DELAY_FOR_A_WHILE
        got = cq.get_index_buffer(offset)
        if got is None:
            lo = cq.get_min_offset_in_queue()
            if offset < lo:
                log.error("delay level %d offset %d below the queue minimum %d; skipping ahead", level, offset, lo)
                self._update_offset(level, lo)
            return DELAY_FOR_A_WHILE
        mf, pos, end = got
        delay = self.levels[level - 1]
        idx = offset
        while pos < end:
            phy, size, deliver_at = CQ_UNIT.unpack_from(mf.mm, pos)
            now = now_ms()
            # a deliver time beyond now + the level's delay means the clock moved: due now
            if deliver_at > now + delay:
                deliver_at = now
            countdown = deliver_at - now
            if countdown > 0:
                self._update_offset(level, idx)
                return countdown / 1000
            msg = self.store.look_message_by_offset(phy)
            if msg is not None:
                inner = message_time_up(msg)
                if inner.topic == TRANS_CHECK_MAX_TIME_TOPIC:
                    log.error("delayed message for %s dropped (offset %d)", inner.topic, phy)
                else:
                    result, _ = self.store.put_nowait(inner)
                    if result.status is not PutMessageStatus.PUT_OK:
                        log.error(
                            "delay level %d: putting the due message at %d to %s failed: %s",
                            level,
                            phy,
                            inner.topic,
                            result.status.value,
                        )
                        self._update_offset(level, idx)
                        return DELAY_FOR_A_PERIOD
                    self.delivered += 1
            idx += 1
            pos += CQ_UNIT.size
        self._update_offset(level, idx)
        return DELAY_FOR_A_WHILE

    @property
    def started(self) -> bool:
        return bool(self._services)

    def start(self) -> None:
        if self._services:
            return
        self._services = [DeliverDelayedMessageService(self, lv) for lv in range(1, self.max_delay_level + 1)]
        self._services.append(PersistDelayOffsetService(self))
        for svc in self._services:
            svc.start()

    async def stop(self) -> None:
        """Stop delivering (an iteration under way finishes) and write the offsets."""
        services, self._services = self._services, []
        for svc in services:
            await svc.stop()
        await self.persist()


class DeliverDelayedMessageService(ServiceLoop):
    """One delay level: deliver what is due, then wait as long as deliver_step says."""

    def __init__(self, schedule: ScheduleMessageService, level: int) -> None:
        super().__init__(f"schedule-level-{level}", log)
        self.schedule = schedule
        self.level = level
        self._wait = FIRST_DELAY_TIME

    def interval(self) -> float:
        return self._wait

    async def run_once(self) -> None:
        try:
            self._wait = self.schedule.deliver_step(self.level)
        except Exception:
            log.exception("delay level %d delivery failed", self.level)
            self._wait = DELAY_FOR_A_PERIOD


class PersistDelayOffsetService(ServiceLoop):
    """Write the delay offsets every flushDelayOffsetInterval when they changed."""

    def __init__(self, schedule: ScheduleMessageService) -> None:
        super().__init__("schedule-persist", log)
        self.schedule = schedule

    def interval(self) -> float:
        return self.schedule.flush_interval_ms / 1000

    async def run_once(self) -> None:
        if self.schedule.dirty:
            try:
                await self.schedule.persist()
            except OSError as e:
                log.error("persisting delay offsets failed: %s", e)
