"""PullRequestHoldService: long polling for PULL_MESSAGE with the SUSPEND flag.

A pull that finds nothing is parked per queue. Dispatch of that queue re-runs it
(answering with the new messages); otherwise its own timer re-runs it at the deadline
(answering PULL_NOT_FOUND). RocketMQ sweeps held requests every 5 s; a timer per
request answers exactly on time and costs one TimerHandle.

POP (rmq/broker/processors/pop.py) parks here too, with its own ``on_wake``: under queue id
-1 (any queue of the topic: new messages in any of them wake it) and from offset -1.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("rmq.broker.pull")


@dataclass(eq=False)
class HeldPullRequest:
    conn: Any  # rmq.remoting Connection
    request: Any  # RemotingCommand
    topic: str
    queue_id: int
    pull_from_offset: int
    deadline: float  # loop.time()
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)
    done: bool = False
    # re-runs this request instead of the service's execute_when_wakeup (POP)
    on_wake: Callable[[HeldPullRequest], None] | None = field(default=None, repr=False)


class PullRequestHoldService:
    def __init__(self, execute_when_wakeup: Callable[[HeldPullRequest], None] | None = None) -> None:
        # re-runs the pull without suspending and sends the response: the pull processor,
        # which is built after the store this service listens to (so it may come later)
        self.execute_when_wakeup = execute_when_wakeup
        self._held: dict[tuple[str, int], list[HeldPullRequest]] = {}
        self.held_count = 0

    def suspend(
        self,
        conn: Any,
        request: Any,
        topic: str,
        queue_id: int,
        pull_from_offset: int,
        timeout_ms: int,
        on_wake: Callable[[HeldPullRequest], None] | None = None,
    ) -> HeldPullRequest:
        loop = asyncio.get_running_loop()
        req = HeldPullRequest(conn, request, topic, queue_id, pull_from_offset, loop.time() + timeout_ms / 1000)
        req.on_wake = on_wake
        req.timer = loop.call_at(req.deadline, self._on_timeout, req)
        self._held.setdefault((topic, queue_id), []).append(req)
        self.held_count += 1
        return req

    def _remove(self, req: HeldPullRequest) -> None:
        lst = self._held.get((req.topic, req.queue_id))
        if lst is not None:
            try:
                lst.remove(req)
            except ValueError:
                pass
            if not lst:
                del self._held[(req.topic, req.queue_id)]
        self.held_count -= 1

    def _fire(self, req: HeldPullRequest) -> None:
        if req.done:
            return
        req.done = True
        if req.timer is not None:
            req.timer.cancel()
        self._remove(req)
        if getattr(req.conn, "closed", False):
            return
        execute = req.on_wake or self.execute_when_wakeup
        if execute is None:
            return
        try:
            execute(req)
        except Exception:
            log.exception(
                "re-running held pull for %s-%d from %s failed",
                req.topic,
                req.queue_id,
                getattr(req.conn, "remote_address", "?"),
            )

    def _on_timeout(self, req: HeldPullRequest) -> None:
        self._fire(req)

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Dispatch reached max_offset in this queue: wake every pull waiting below it."""
        for qid in (queue_id, -1):
            lst = self._held.get((topic, qid))
            if lst:
                for req in [r for r in lst if max_offset > r.pull_from_offset]:
                    self._fire(req)

    def notify_pop_arriving(self, topic: str, queue_id: int) -> None:
        """Wake the POP requests parked on this queue (or on every queue of the topic): a
        FIFO queue was unblocked by an ack. Parked pulls are left alone."""
        for qid in (queue_id, -1):
            lst = self._held.get((topic, qid))
            if lst:
                for req in [r for r in lst if r.on_wake is not None]:
                    self._fire(req)

    def cancel(self, req: HeldPullRequest) -> None:
        """Forget a parked request without running it (its twin under another key fired)."""
        if req.done:
            return
        req.done = True
        if req.timer is not None:
            req.timer.cancel()
        self._remove(req)

    def drop_connection(self, conn: Any) -> None:
        """A client went away: forget its parked pulls."""
        for lst in list(self._held.values()):
            for req in [r for r in lst if r.conn is conn]:
                req.done = True
                if req.timer is not None:
                    req.timer.cancel()
                self._remove(req)

    def wake_all(self, pops_only: bool = False) -> None:
        """Answer every parked pull (or only the POP requests) now (shutdown)."""
        for lst in list(self._held.values()):
            for req in list(lst):
                if not pops_only or req.on_wake is not None:
                    self._fire(req)
