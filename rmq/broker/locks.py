"""RebalanceLockManager: which client of a group may consume a queue orderly (spec 2.10)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from rmq.common.clock import now_ms
from rmq.protocol.bodies import MessageQueue

log = logging.getLogger("rmq.broker.locks")

# rocketmq.broker.rebalance.lockMaxLiveTime; clients renew every 20 s
LOCK_MAX_LIVE_TIME_MS = 60_000


@dataclass
class LockEntry:
    client_id: str
    last_update: int

    def expired(self, now: int, max_live: int) -> bool:
        return now - self.last_update > max_live

    def held_by(self, client_id: str, now: int, max_live: int) -> bool:
        return self.client_id == client_id and not self.expired(now, max_live)


class RebalanceLockManager:
    def __init__(self, max_live_ms: int = LOCK_MAX_LIVE_TIME_MS) -> None:
        self.max_live_ms = max_live_ms
        self.table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]:
        """Lock (or renew) every queue that is free, expired or already ours; return those."""
        now = now_ms()
        locks = self.table.setdefault(group, {})
        got: set[MessageQueue] = set()
        for mq in mqs:
            e = locks.get(mq)
            if e is None:
                locks[mq] = LockEntry(client_id, now)
                log.info("lock: group %s queue %s free, locked by %s", group, mq, client_id)
                got.add(mq)
            elif e.held_by(client_id, now, self.max_live_ms):
                e.last_update = now
                got.add(mq)
            elif e.expired(now, self.max_live_ms):
                log.warning(
                    "lock: group %s queue %s expired (held by %s), locked by %s", group, mq, e.client_id, client_id
                )
                e.client_id = client_id
                e.last_update = now
                got.add(mq)
            else:
                log.warning("lock: group %s queue %s held by %s, refused to %s", group, mq, e.client_id, client_id)
        return got

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        locks = self.table.get(group)
        if locks is None:
            return
        for mq in mqs:
            e = locks.get(mq)
            if e is None:
                log.warning("unlock: group %s queue %s was not locked (%s)", group, mq, client_id)
            elif e.client_id == client_id:
                del locks[mq]
                log.info("unlock: group %s queue %s released by %s", group, mq, client_id)
            else:
                log.warning("unlock: group %s queue %s is held by %s, not %s", group, mq, e.client_id, client_id)
        if not locks:
            del self.table[group]

    def is_locked(self, group: str, mq: MessageQueue, client_id: str) -> bool:
        e = self.table.get(group, {}).get(mq)
        return e is not None and e.held_by(client_id, now_ms(), self.max_live_ms)

    def holder(self, group: str, mq: MessageQueue) -> str | None:
        e = self.table.get(group, {}).get(mq)
        if e is None or e.expired(now_ms(), self.max_live_ms):
            return None
        return e.client_id
