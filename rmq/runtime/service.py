"""RocketMQ's ServiceThread, on the event loop: one background loop with start / stop /
wakeup, its task tracked, every failed iteration logged once with the service's name; and
``TaskSet``, which keeps the fire-and-forget tasks of an owner so none is lost or left running.

A service overrides ``run_once`` (one iteration) and, when it waits between iterations,
``interval`` (seconds; ``None`` waits for ``wakeup`` alone). ``wait_for_running`` behaves like
Java's: a wakeup that came while the service was busy is not lost, the next wait returns at once.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

__all__ = ["PeriodicService", "ServiceLoop", "TaskSet"]

_log = logging.getLogger("rmq.service")


class ServiceLoop:
    """A background loop: ``start()`` on the event loop, ``await stop()`` to end it."""

    def __init__(self, name: str, logger: logging.Logger | None = None) -> None:
        self.name = name
        self.log = logger if logger is not None else _log
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._stopped = False

    # ------------------------------------------------------------------ for subclasses
    async def run_once(self) -> None:
        """One iteration of the service's work."""
        raise NotImplementedError

    def interval(self) -> float | None:
        """Seconds to wait between iterations unless woken; None waits for a wakeup."""
        return None

    async def on_start(self) -> None:
        """Runs once in the service's task before the first wait."""

    async def on_stop(self) -> None:
        """Runs once in the service's task after the last iteration (a final flush ...)."""

    # ------------------------------------------------------------------ lifecycle
    @property
    def started(self) -> bool:
        return self._task is not None

    @property
    def stopped(self) -> bool:
        return self._stopped

    def start(self) -> None:
        if self._task is not None:
            return
        self._stopped = False
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._main(), name=self.name)

    def wakeup(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def stop(self, cancel: bool = False) -> None:
        """End the loop. ``cancel=False`` lets the current iteration finish (then ``on_stop``
        runs); ``cancel=True`` interrupts it (a blocked connect, a long sleep) and skips
        ``on_stop``. Safe to call twice, or before ``start``."""
        self._stopped = True
        task = self._task
        if task is None:
            return
        self.wakeup()
        if cancel:
            task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            if not task.cancelled():
                raise
        finally:
            self._task = None

    async def wait_for_running(self, timeout: float | None) -> None:
        """Return on a wakeup (also one that came while busy), on stop, or after timeout."""
        wake = self._wake
        assert wake is not None, f"{self.name}: not started"
        if not wake.is_set() and not self._stopped:
            if timeout is None:
                await wake.wait()
            elif timeout > 0:
                try:
                    await asyncio.wait_for(wake.wait(), timeout)
                except TimeoutError:
                    pass
        wake.clear()

    async def _main(self) -> None:
        try:
            await self.on_start()
        except Exception:
            self.log.exception("%s: start-up failed", self.name)
        while not self._stopped:
            await self.wait_for_running(self.interval())
            if self._stopped:
                break
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.exception("%s: an iteration failed", self.name)
        try:
            await self.on_stop()
        except Exception:
            self.log.exception("%s: stopping failed", self.name)


class PeriodicService(ServiceLoop):
    """``fn`` every ``period`` seconds, the first run ``initial`` seconds after start (default:
    one period), the next period counted from the end of a run (scheduleWithFixedDelay). A
    failed run is logged and the next one comes as planned. ``fn`` may be a coroutine function."""

    def __init__(
        self,
        name: str,
        period: float,
        fn: Callable[[], Awaitable[object] | object],
        logger: logging.Logger | None = None,
        initial: float | None = None,
    ) -> None:
        super().__init__(name, logger)
        self.period = period
        self.fn = fn
        self._next = period if initial is None else initial

    def interval(self) -> float:
        wait, self._next = self._next, self.period
        return wait

    async def run_once(self) -> None:
        r = self.fn()
        if inspect.isawaitable(r):
            await r


class TaskSet:
    """Fire-and-forget tasks of one owner: kept referenced until done, an exception logged
    with the task's name, the rest cancelled and awaited by ``close``."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.log = logger if logger is not None else _log
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.log.error("task %s failed", task.get_name(), exc_info=exc)

    def __len__(self) -> int:
        return len(self._tasks)

    async def wait(self) -> None:
        """Wait for the tasks running now to finish by themselves."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Cancel what is still running and wait for it."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
