"""The two clocks, in milliseconds.

``now_ms`` is wall-clock time, the unit of every RocketMQ timestamp. ``monotonic_ms`` is for
intervals and timeouts (liveness, housekeeping, fault isolation), which a wall-clock step must
not stretch or cut; only its differences mean anything."""

from __future__ import annotations

import time

__all__ = ["now_ms", "monotonic_ms"]


def now_ms() -> int:
    """Milliseconds since the epoch (System.currentTimeMillis)."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """Milliseconds of ``time.monotonic_ns``; only differences mean anything."""
    return time.monotonic_ns() // 1_000_000
