"""Receipt-handle renewal for ``auto_renew`` receives (PushConsumer), RocketMQ 5's
``DefaultReceiptHandleManager``: the proxy keeps the messages a client is consuming invisible
while the client works on them, so a long consumption is not redelivered.

Per (client id, group, handle the client holds): the current handle (each renewal makes a new
one at the broker). Every second, a handle within ``RENEW_AHEAD_MS`` of its expiry gets
CHANGE_MESSAGE_INVISIBLETIME for the next step of ``RENEW_STEPS_MS``; after ``MAX_RENEW_MS`` it is
left to expire. The client's Ack / ChangeInvisibleDuration use the handle it holds: ``take``
gives the current one instead (an ack with a superseded handle would be lost at the broker and
the message redelivered). A client that goes away gets its messages back after 1 s.

Memory only: a proxy that restarts, or an ack through another proxy instance, costs a
redelivery (at-least-once), never a message.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rmq.common.clock import now_ms
from rmq.proxy.pop_client import PopClient, ReceiptHandle

__all__ = ["Renewer", "RENEW_STEPS_MS", "RENEW_AHEAD_MS", "MAX_RENEW_MS"]

log = logging.getLogger("rmq.proxy.renew")

RENEW_AHEAD_MS = 10_000
RENEW_STEPS_MS = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)
MAX_RENEW_MS = 3 * 3600 * 1000
RELEASE_MS = 1000

#: (topic, broker name) -> the broker's master address
AddrOf = Callable[[str, str], Awaitable[str]]


@dataclass
class Tracked:
    client_id: str
    group: str
    topic: str
    current: ReceiptHandle
    since_ms: int
    renewals: int = 0


class Renewer:
    def __init__(self, pop: PopClient, addr_of: AddrOf, timeout_ms: int, clock: Callable[[], int] = now_ms) -> None:
        self.pop = pop
        self.addr_of = addr_of
        self.timeout_ms = timeout_ms
        self.clock = clock
        self._tracked: dict[tuple[str, str, str], Tracked] = {}

    def __len__(self) -> int:
        return len(self._tracked)

    def track(self, client_id: str, group: str, topic: str, handle: str) -> None:
        self._tracked[(client_id, group, handle)] = Tracked(
            client_id, group, topic, ReceiptHandle.decode(handle), self.clock()
        )

    def take(self, client_id: str, group: str, handle: str) -> ReceiptHandle | None:
        """The current handle for the one the client holds (and stop renewing it), or None."""
        t = self._tracked.pop((client_id, group, handle), None)
        return t.current if t is not None else None

    async def renew_due(self) -> None:
        """One round: renew what is about to expire, drop what renewed long enough."""
        now = self.clock()
        for key, t in list(self._tracked.items()):
            cur = t.current
            if now < cur.pop_time + cur.invisible_time - RENEW_AHEAD_MS:
                continue
            if now - t.since_ms >= MAX_RENEW_MS or cur.is_expired(now):
                self._tracked.pop(key, None)
                continue
            step = RENEW_STEPS_MS[min(t.renewals, len(RENEW_STEPS_MS) - 1)]
            try:
                addr = await self.addr_of(t.topic, cur.broker_name)
                t.current = await self.pop.change_invisible(t.group, t.topic, cur, step, addr, self.timeout_ms)
                t.renewals += 1
            except Exception as e:  # one handle: it expires and is redelivered
                log.warning(
                    "renewing a receipt handle of client %s (group %s, topic %s) failed: %s",
                    t.client_id,
                    t.group,
                    t.topic,
                    e,
                )
                self._tracked.pop(key, None)

    async def release_client(self, client_id: str) -> None:
        """The client went away: what it was consuming becomes visible again in 1 s."""
        for key, t in list(self._tracked.items()):
            if t.client_id != client_id:
                continue
            del self._tracked[key]
            if t.current.is_expired(self.clock()):
                continue
            try:
                addr = await self.addr_of(t.topic, t.current.broker_name)
                await self.pop.change_invisible(t.group, t.topic, t.current, RELEASE_MS, addr, self.timeout_ms)
            except Exception as e:  # it expires by itself then
                log.info("releasing a message of client %s (group %s) failed: %s", client_id, t.group, e)
