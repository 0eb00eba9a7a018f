"""Monotonic milliseconds: for intervals and timeouts (liveness, housekeeping), which a
wall-clock step must not stretch or cut. Wall-clock time is ``rmq.common.clock.now_ms``."""

from __future__ import annotations

import time

__all__ = ["monotonic_ms"]


def monotonic_ms() -> int:
    """Milliseconds of ``time.monotonic_ns``; only differences mean anything."""
    return time.monotonic_ns() // 1_000_000
