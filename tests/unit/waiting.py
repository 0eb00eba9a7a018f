"""Waiting on the running event loop for a condition, in unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def wait_until(pred: Callable[[], object], timeout: float = 5.0, interval: float = 0.005) -> None:
    """Poll ``pred`` until it holds; AssertionError after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)
