"""CommitRound: the outcome of one CommitLog commit, shared by every put it takes.

An asyncio.Future runs its done-callbacks one loop iteration after its result is set
(call_soon). A send answered from a commit would then leave two iterations after its
put instead of one: at low concurrency, where an iteration carries few messages, that
extra iteration is a measurable part of each message's cost and latency. A CommitRound
runs its callbacks at once, inside the commit; awaiting it works as with a Future.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator
from typing import Any

from rmq.store.results import PutMessageStatus

__all__ = ["CommitRound"]

log = logging.getLogger("rmq.store.commitlog")


class CommitRound:
    __slots__ = ("_status", "_callbacks", "_after", "_fut")

    def __init__(self) -> None:
        self._status: PutMessageStatus | None = None
        self._callbacks: list[Callable[[CommitRound], object]] = []
        self._after: dict[object, Callable[[], object]] | None = None
        self._fut: asyncio.Future[PutMessageStatus] | None = None

    def done(self) -> bool:
        return self._status is not None

    def cancelled(self) -> bool:
        return False  # a commit always ends with a status

    def result(self) -> PutMessageStatus:
        if self._status is None:
            raise asyncio.InvalidStateError("the commit has not happened yet")
        return self._status

    def add_done_callback(self, fn: Callable[[CommitRound], object]) -> None:
        """fn(self) when the commit ends (at once if it has)."""
        if self._status is not None:
            fn(self)
        else:
            self._callbacks.append(fn)

    def after_callbacks(self, key: object, fn: Callable[[], object]) -> None:
        """fn() once per key, after every callback ran: the send processor flushes each
        connection's answers there, so they leave in the commit's own loop iteration,
        coalesced, instead of one iteration later."""
        after = self._after
        if after is None:
            after = self._after = {}
        if key not in after:
            after[key] = fn

    def set_result(self, status: PutMessageStatus) -> None:
        """End the round (the CommitLog, once): run every callback now."""
        if self._status is not None:
            return
        self._status = status
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            try:
                fn(self)
            except Exception:
                # one answer failing must not keep the others from being sent
                log.exception("a commit round callback failed")
        after, self._after = self._after, None
        if after is not None:
            for after_fn in after.values():
                try:
                    after_fn()
                except Exception:
                    log.exception("a commit round callback failed")
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_result(status)

    def __await__(self) -> Generator[Any, None, PutMessageStatus]:
        if self._status is None:
            if self._fut is None:
                self._fut = asyncio.get_running_loop().create_future()
            return (yield from self._fut.__await__())
        return self._status
