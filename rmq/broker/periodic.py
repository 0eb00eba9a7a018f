"""A broker chore run every so often on the ServiceLoop base (registration, metadata
flush, idle-client scan, rates)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable

from rmq.common.service import ServiceLoop

__all__ = ["PeriodicService"]


class PeriodicService(ServiceLoop):
    """Calls ``fn`` every ``seconds`` (first after one period); a failure is logged and
    the next period comes as usual."""

    def __init__(
        self, name: str, seconds: float, fn: Callable[[], Awaitable[None] | None], logger: logging.Logger | None = None
    ) -> None:
        super().__init__(name, logger)
        self.seconds = seconds
        self.fn = fn

    def interval(self) -> float:
        return self.seconds

    async def run_once(self) -> None:
        r = self.fn()
        if inspect.isawaitable(r):
            await r
