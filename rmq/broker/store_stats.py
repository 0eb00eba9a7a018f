"""The figures behind GET_BROKER_RUNTIME_INFO's rate and latency keys, as RocketMQ 4.9.8's
``StoreStatsService`` and ``BrokerStats`` keep them.

* ``PutTimeStats``: the "entire put time" of each stored message (store timestamp to the
  moment the store said stored, flush and replica waits included, in ms as 4.9.8 measures
  it): the maximum, the 13-bucket distribution of the last full minute
  (``putMessageDistributeTime``) and p99 / p999 interpolated over 4.9.8's finer buckets;
* ``StatsSampler``: one snapshot of the counters per second (the ``tps`` chore) kept for ten
  minutes, from which the 10 s / 1 min / 10 min rates are read; the day's morning totals.

Everything here runs on the broker's loop: plain integers, no locks.
"""

from __future__ import annotations

import asyncio
import bisect
import datetime
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["DISTRIBUTE_DESC", "PutTimeStats", "StatsSampler", "human_readable_bytes", "java_double", "java_runtime"]

# StoreStatsService.PUT_MESSAGE_ENTIRE_TIME_MAX_DESC and the upper bounds (exclusive, ms)
# that setPutMessageEntireTimeMax sorts a put into; the first bucket is "<= 0 ms".
DISTRIBUTE_DESC = (
    "[<=0ms]",
    "[0~10ms]",
    "[10~50ms]",
    "[50~100ms]",
    "[100~200ms]",
    "[200~500ms]",
    "[500ms~1s]",
    "[1~2s]",
    "[2~3s]",
    "[3~4s]",
    "[4~5s]",
    "[5~10s]",
    "[10s~]",
)
_DISTRIBUTE_BOUNDS = (1, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000)


def _percentile_bounds() -> tuple[int, ...]:
    """PUT_MESSAGE_ENTIRE_TIME_BUCKETS: steps of 1 ms to 20, 2 to 50, 5 to 100, 10 to 200,
    50 to 500, 100 to 1000, 1000 to 10000 (inclusive upper bounds; one more for the rest)."""
    bounds: list[int] = []
    at = 0
    for step, times in ((1, 20), (2, 15), (5, 10), (10, 10), (50, 6), (100, 5), (1000, 9)):
        for _ in range(times):
            at += step
            bounds.append(at)
    return tuple(bounds)


_PX_BOUNDS = _percentile_bounds()
SAMPLES_KEPT = 601  # ten minutes of one-second snapshots, plus the newest
ROTATE_EVERY_S = 60  # 4.9.8 rotates the distributions when it prints the TPS, every minute


class PutTimeStats:
    """Per stored put: ``observe(ms)``; ``rotate()`` once a minute makes the current
    minute's figures the reported ones."""

    __slots__ = ("max_ms", "_dist", "_last_dist", "_px", "_last_px")

    def __init__(self) -> None:
        self.max_ms = 0
        self._dist = [0] * len(DISTRIBUTE_DESC)
        self._last_dist: list[int] | None = None
        self._px = [0] * (len(_PX_BOUNDS) + 1)
        self._last_px = [0] * (len(_PX_BOUNDS) + 1)

    def observe(self, ms: int) -> None:
        self._dist[0 if ms <= 0 else bisect.bisect_right(_DISTRIBUTE_BOUNDS, ms)] += 1
        # ceilingEntry: the first bucket whose bound is >= ms
        self._px[bisect.bisect_left(_PX_BOUNDS, ms)] += 1
        if ms > self.max_ms:
            self.max_ms = ms

    def rotate(self) -> None:
        self._last_dist, self._dist = self._dist, [0] * len(DISTRIBUTE_DESC)
        self._last_px, self._px = self._px, [0] * (len(_PX_BOUNDS) + 1)

    def distribute_text(self) -> str:
        """``[<=0ms]:5 [0~10ms]:2 ...`` of the last full minute; ``null`` before the first."""
        if self._last_dist is None:
            return "null"
        return "".join(f"{desc}:{n} " for desc, n in zip(DISTRIBUTE_DESC, self._last_dist, strict=True))

    def percentile(self, px: float) -> float:
        """findPutMessageEntireTimePX over the last full minute: linear within a bucket."""
        counts = self._last_px
        index = int(sum(counts) * px)
        passed = 0
        for i, count in enumerate(counts):
            if index <= passed + count:
                upper = _PX_BOUNDS[i] if i < len(_PX_BOUNDS) else 2**63 - 1
                lower = _PX_BOUNDS[i - 1] if i else 0
                return lower + ((upper - lower) * (index - passed) / count if count else 0.0)
            passed += count
        return 0.0


class Sample(NamedTuple):
    t: float  # monotonic seconds
    put: int
    get_found: int
    get_miss: int
    transferred: int


class StatsSampler:
    """One ``Sample`` a second; rates over the last 10 s, 1 min and 10 min.

    ``counters()`` returns (put messages, found pulls' messages, pulls that found nothing,
    messages handed out). Until a window has filled, its rate is taken over the samples
    there are (4.9.8 leaves the figure empty then; a rate from what was seen is what an
    operator watching a fresh broker expects, and every reader parses it)."""

    WINDOWS = (10, 60, 600)

    def __init__(
        self,
        counters: Callable[[], tuple[int, int, int, int]],
        put_time: PutTimeStats,
        clock: Callable[[], float] = time.monotonic,
        today: Callable[[], datetime.date] = datetime.date.today,
    ) -> None:
        self._counters = counters
        self.put_time = put_time
        self._clock = clock
        self._today = today
        self._samples: deque[Sample] = deque(maxlen=SAMPLES_KEPT)
        self.loop_wait_ms = 0
        self._ticks = 0
        self._day = today()
        # BrokerStats: put / get totals at the start of today and of yesterday
        self.put_today_morning = 0
        self.put_yesterday_morning = 0
        self.get_today_morning = 0
        self.get_yesterday_morning = 0
        self.tick()

    def tick(self) -> None:
        self._probe_loop()
        s = Sample(self._clock(), *self._counters())
        self._samples.append(s)
        self._ticks += 1
        if self._ticks % ROTATE_EVERY_S == 0:
            self.put_time.rotate()
        day = self._today()
        if day != self._day:
            self._day = day
            self.put_yesterday_morning, self.put_today_morning = self.put_today_morning, s.put
            self.get_yesterday_morning, self.get_today_morning = self.get_today_morning, s.transferred

    def _probe_loop(self) -> None:
        """How long a callback made ready now waits for its turn on the loop: rmq's
        counterpart of 4.9.8's "thread pool queue head wait" (requests are handled on the
        loop, not queued for a pool)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        loop.call_soon(self._probe_done, loop.time())

    def _probe_done(self, ready_at: float) -> None:
        self.loop_wait_ms = int((asyncio.get_running_loop().time() - ready_at) * 1000)

    def _rate(self, seconds: int, field: int) -> float:
        samples = self._samples
        last = samples[-1]
        first = samples[max(0, len(samples) - 1 - seconds)]
        dt = last.t - first.t
        return (last[field] - first[field]) / dt if dt > 0 else 0.0

    def rates(self, field: int) -> list[float]:
        return [self._rate(w, field) for w in self.WINDOWS]

    def rate_text(self, field: int) -> str:
        """Three figures, space-separated, as StoreStatsService formats them."""
        return " ".join(java_double(r) for r in self.rates(field))

    def total_get_text(self) -> str:
        return " ".join(java_double(a + b) for a, b in zip(self.rates(2), self.rates(3), strict=True))

    @property
    def put_tps(self) -> float:
        """Over the last second (the status line's figure)."""
        return self._rate(1, 1)

    @property
    def get_tps(self) -> float:
        return self._rate(1, 4)


def java_double(v: float) -> str:
    """Java's Double.toString for the values rates take (finite, >= 0): ``0.0``, ``12.5``,
    ``1.0E7`` from ten million up."""
    if v >= 1e7:
        mantissa, exp = f"{v:.16e}".split("e")
        m = repr(float(mantissa))
        return f"{m}E{int(exp)}"
    return repr(float(v))


def human_readable_bytes(n: int) -> str:
    """MixAll.humanReadableByteCount(n, false): ``512 B``, ``1.5 KiB``, ``3.0 GiB``."""
    if n < 1024:
        return f"{n} B"
    exp, unit = 0, 1
    while n >= unit * 1024 and exp < 6:
        unit *= 1024
        exp += 1
    return f"{n / unit:.1f} {'KMGTPE'[exp - 1]}iB"


def java_runtime(elapsed_ms: int) -> str:
    """StoreStatsService.getFormatRuntime."""
    s = elapsed_ms // 1000
    return f"[ {s // 86400} days, {s % 86400 // 3600} hours, {s % 3600 // 60} minutes, {s % 60} seconds ]"
