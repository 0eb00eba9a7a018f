"""Small asyncio helpers shared by the client's services."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from rmq.runtime.service import TaskSet

log = logging.getLogger("rmq.client")

#: ServiceState names (Java's enum values) of the producer and the consumers.
CREATE_JUST, RUNNING, SHUTDOWN_ALREADY = "CREATE_JUST", "RUNNING", "SHUTDOWN_ALREADY"


async def cancel_and_wait(tasks: Iterable[asyncio.Future], timeout: float = 5.0, what: str = "tasks") -> None:
    """Cancel ``tasks`` and wait (bounded) for them to finish.

    Bounded because a cancellation can be lost: on Python 3.11, ``asyncio.wait_for``
    returns its result instead of raising when the cancellation and the completion land
    in the same loop iteration (anywhere below us, the remoting layer included). Every
    loop of the client also checks its owner's state, so a task that missed its
    cancellation still ends at its next step; this only keeps shutdown from waiting on it.
    """
    pending = [t for t in tasks if not t.done()]
    for t in pending:
        t.cancel()
    if not pending:
        return
    done, still = await asyncio.wait(pending, timeout=timeout)
    for t in done:
        if not t.cancelled():
            t.exception()  # retrieved: nobody else will look
    if still:
        for t in still:
            t.cancel()
        log.warning("%d %s still running %.1fs after cancel; not waiting for them", len(still), what, timeout)


async def sleep_unless(event: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds`` or until ``event`` is set; True when the event is set."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
        return True
    except TimeoutError:
        return event.is_set()


class BoundedTaskSet(TaskSet):
    """A ``TaskSet`` whose shutdown waits a bounded time (see ``cancel_and_wait``)."""

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        """The tasks running now (a snapshot)."""
        return iter(list(self._tasks))

    async def close_within(self, timeout: float, what: str) -> None:
        await cancel_and_wait(list(self), timeout, what)


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """A coroutine function, or an object whose ``__call__`` is one (run on the loop,
    not in a thread)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004 - the method itself, not callable()
