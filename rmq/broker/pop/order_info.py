"""FIFO (orderly) POP state: RocketMQ 5's ConsumerOrderInfoManager.

Per ``topic@group`` and queue id, the last orderly pop's OrderInfo: its popTime, invisible
time, the offsets it returned, per-offset next visible time (change invisible time) and
consumed count, the acked bits and the attempt id. While a popped batch is neither fully
acked nor past its invisible time the queue is blocked (a pop retried with the same
attempt id is not); after that the same offsets are popped again with the count + 1. An
ack moves the consumer offset to the first offset not yet acked.

Persisted like the other metadata (config/consumerOrderInfo.msgpack; RocketMQ's
config/consumerOrderInfo.json is adopted once), by the POP system's periodic persist.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from rmq.broker.persist import MetadataFile

__all__ = ["ConsumerOrderInfoManager", "OrderInfo"]

log = logging.getLogger("rmq.broker.pop")


@dataclass
class OrderInfo:
    pop_time: int
    invisible_time: int
    offsets: list[int]
    attempt_id: str | None = None
    next_visible: dict[int, int] = field(default_factory=dict)  # ot
    consumed: dict[int, int] = field(default_factory=dict)  # oc: only counts > 0
    commit_bits: int = 0  # cm

    def acked(self, i: int) -> bool:
        return bool(self.commit_bits >> i & 1)

    def blocked(self, now: int) -> bool:
        default = self.pop_time + self.invisible_time
        return any(not self.acked(i) and now < self.next_visible.get(o, default) for i, o in enumerate(self.offsets))

    def visible_in(self, now: int) -> int:
        """ms until the first un-acked offset is visible again (0: one is)."""
        default = self.pop_time + self.invisible_time
        times = [self.next_visible.get(o, default) for i, o in enumerate(self.offsets) if not self.acked(i)]
        return max(min(times, default=now) - now, 0)

    def next_offset(self) -> int:
        """The first offset not acked; past the last when all are."""
        for i, o in enumerate(self.offsets):
            if not self.acked(i):
                return o
        return self.offsets[-1] + 1

    def to_dict(self) -> dict[str, Any]:
        # RocketMQ's short names
        return {
            "popTime": self.pop_time,
            "i": self.invisible_time,
            "o": list(self.offsets),
            "ot": dict(self.next_visible),
            "oc": dict(self.consumed),
            "cm": self.commit_bits,
            "a": self.attempt_id,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OrderInfo:
        return cls(
            int(d.get("popTime", 0)),
            int(d.get("i", 0)),
            [int(x) for x in d.get("o") or []],
            d.get("a"),
            {int(k): int(v) for k, v in (d.get("ot") or {}).items()},
            {int(k): int(v) for k, v in (d.get("oc") or {}).items()},
            int(d.get("cm", 0)),
        )


class ConsumerOrderInfoManager:
    def __init__(self, config_dir: str) -> None:
        self.file = MetadataFile(config_dir, "consumerOrderInfo", "consumerOrderInfo.json")
        self.table: dict[str, dict[int, OrderInfo]] = {}
        self.dirty = False

    @staticmethod
    def _key(topic: str, group: str) -> str:
        return f"{topic}@{group}"

    def get(self, topic: str, group: str, queue_id: int) -> OrderInfo | None:
        return self.table.get(self._key(topic, group), {}).get(queue_id)

    def check_block(
        self, attempt_id: str | None, topic: str, group: str, queue_id: int, invisible_time: int, now: int
    ) -> bool:
        info = self.get(topic, group, queue_id)
        if info is None or not info.offsets:
            return False
        if attempt_id and attempt_id == info.attempt_id:
            return False  # the same attempt retried: served again
        return info.blocked(now)

    def visible_in(self, topic: str, group: str, queue_id: int, now: int) -> int:
        info = self.get(topic, group, queue_id)
        return 0 if info is None else info.visible_in(now)

    def update(
        self,
        attempt_id: str | None,
        topic: str,
        group: str,
        queue_id: int,
        pop_time: int,
        invisible_time: int,
        offsets: list[int],
    ) -> dict[int, int]:
        """Record an orderly pop; the consumed count of each offset popped (0: first time)."""
        qs = self.table.setdefault(self._key(topic, group), {})
        prev = qs.get(queue_id)
        info = OrderInfo(pop_time, invisible_time, list(offsets), attempt_id)
        if prev is not None:
            if attempt_id and attempt_id == prev.attempt_id:
                info.consumed = dict(prev.consumed)
            else:
                before = set(prev.offsets)
                for o in offsets:
                    if o in before:
                        info.consumed[o] = prev.consumed.get(o, 0) + 1
        qs[queue_id] = info
        self.dirty = True
        return {o: info.consumed.get(o, 0) for o in offsets}

    def commit_and_next(self, topic: str, group: str, queue_id: int, offset: int, pop_time: int) -> int:
        """Mark offset acked: the offset to commit; -1 the offset is not in the pop,
        -2 the ack belongs to an older pop (nothing to do)."""
        info = self.get(topic, group, queue_id)
        if info is None:
            return offset + 1
        if not info.offsets:
            return -1
        if info.pop_time != pop_time:
            return -2
        try:
            i = info.offsets.index(offset)
        except ValueError:
            return -1
        info.commit_bits |= 1 << i
        self.dirty = True
        return info.next_offset()

    def update_next_visible_time(
        self, topic: str, group: str, queue_id: int, offset: int, pop_time: int, next_visible: int
    ) -> None:
        info = self.get(topic, group, queue_id)
        if info is None or info.pop_time != pop_time or offset not in info.offsets:
            return
        info.next_visible[offset] = next_visible
        self.dirty = True

    def clear_block(self, topic: str, group: str, queue_id: int) -> None:
        if self.table.get(self._key(topic, group), {}).pop(queue_id, None) is not None:
            self.dirty = True

    # ------------------------------------------------------------------ persistence
    def load(self) -> None:
        data, adopted = self.file.load()
        if not data:
            return
        for key, qs in (data.get("table") or {}).items():
            if isinstance(qs, dict):
                self.table[str(key)] = {int(q): OrderInfo.from_dict(d) for q, d in qs.items() if isinstance(d, dict)}
        self.dirty = adopted

    def snapshot(self) -> dict[str, Any]:
        return {"table": {k: {q: i.to_dict() for q, i in qs.items()} for k, qs in self.table.items() if qs}}

    async def persist(self) -> None:
        self.dirty = False
        await self.file.persist(self.snapshot())

    async def persist_if_dirty(self) -> None:
        if self.dirty:
            await self.persist()
