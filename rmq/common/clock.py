"""Wall-clock milliseconds, the unit of every RocketMQ timestamp."""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """Milliseconds since the epoch (System.currentTimeMillis)."""
    return time.time_ns() // 1_000_000
