"""The runtime-info figures of rmq/broker/store_stats.py against 4.9.8's formulas."""

from __future__ import annotations

import datetime

import pytest

from rmq.broker.store_stats import PutTimeStats, StatsSampler, human_readable_bytes, java_double, java_runtime


def test_distribution_buckets_as_set_put_message_entire_time_max():
    p = PutTimeStats()
    for ms in (0, 0, 1, 9, 10, 49, 50, 199, 999, 1000, 9999, 10000, 60000):
        p.observe(ms)
    assert p.distribute_text() == "null"  # nothing rotated yet, as 4.9.8 before its first minute
    p.rotate()
    assert p.distribute_text() == (
        "[<=0ms]:2 [0~10ms]:2 [10~50ms]:2 [50~100ms]:1 [100~200ms]:1 [200~500ms]:0 [500ms~1s]:1 "
        "[1~2s]:1 [2~3s]:0 [3~4s]:0 [4~5s]:0 [5~10s]:1 [10s~]:2 "
    )
    assert p.max_ms == 60000


def test_percentile_interpolates_within_the_bucket():
    p = PutTimeStats()
    assert p.percentile(0.99) == 0.0  # nothing measured
    for _ in range(100):
        p.observe(3)  # bucket (2, 3]
    p.rotate()
    # pxIndex = 99 of 100 in the bucket whose bound is 3: 2 + (3 - 2) * 99 / 100
    assert p.percentile(0.99) == pytest.approx(2.99)
    for _ in range(100):
        p.observe(500)
    p.rotate()  # the reported minute is the last full one: only the 500s
    assert p.percentile(0.99) == pytest.approx(450 + 50 * 99 / 100)


class Counters:
    def __init__(self) -> None:
        self.put = self.found = self.miss = self.transferred = 0

    def __call__(self) -> tuple[int, int, int, int]:
        return self.put, self.found, self.miss, self.transferred


def _sampler(c: Counters, clock: list[float], day: list[datetime.date]) -> StatsSampler:
    return StatsSampler(c, PutTimeStats(), clock=lambda: clock[0], today=lambda: day[0])


def test_rates_over_10s_1min_10min_windows():
    c, clock, day = Counters(), [0.0], [datetime.date(2026, 1, 1)]
    s = _sampler(c, clock, day)
    assert s.rate_text(1) == "0.0 0.0 0.0"
    # 100 puts/s for 30 s, then 10 puts/s for 30 s
    for second in range(1, 61):
        clock[0] = float(second)
        c.put += 100 if second <= 30 else 10
        c.miss += 1
        s.tick()
    ten_s, one_min, ten_min = s.rates(1)
    assert ten_s == pytest.approx(10.0)
    assert one_min == pytest.approx((3000 + 300) / 60)
    assert ten_min == one_min  # fewer samples than the window: over what there is
    assert s.rate_text(1) == "10.0 55.0 55.0"
    assert s.total_get_text() == "1.0 1.0 1.0"  # found 0 + miss 1/s
    assert s.put_tps == pytest.approx(10.0)


def test_ten_minutes_of_samples_are_kept_and_no_more():
    c, clock, day = Counters(), [0.0], [datetime.date(2026, 1, 1)]
    s = _sampler(c, clock, day)
    for second in range(1, 1201):
        clock[0] = float(second)
        c.put += 1 if second <= 600 else 3
        s.tick()
    assert s.rates(1) == pytest.approx([3.0, 3.0, 3.0])  # the first ten minutes fell out


def test_morning_totals_roll_at_midnight():
    c, clock, day = Counters(), [0.0], [datetime.date(2026, 1, 1)]
    s = _sampler(c, clock, day)
    c.put, c.transferred = 70, 40
    s.tick()
    day[0] = datetime.date(2026, 1, 2)
    c.put, c.transferred = 100, 50
    s.tick()
    assert (s.put_today_morning, s.put_yesterday_morning) == (100, 0)
    day[0] = datetime.date(2026, 1, 3)
    c.put, c.transferred = 250, 80
    s.tick()
    assert (s.put_today_morning, s.put_yesterday_morning) == (250, 100)
    assert (s.get_today_morning, s.get_yesterday_morning) == (80, 50)


def test_distribution_rotates_every_minute_of_ticks():
    c, clock, day = Counters(), [0.0], [datetime.date(2026, 1, 1)]
    s = _sampler(c, clock, day)
    s.put_time.observe(5)
    for second in range(1, 60):
        clock[0] = float(second)
        s.tick()
    assert s.put_time.distribute_text().startswith("[<=0ms]:0 [0~10ms]:1 ")


@pytest.mark.parametrize(
    ("value", "text"), [(0.0, "0.0"), (12.5, "12.5"), (4281.893110690887, "4281.893110690887"), (1e7, "1.0E7")]
)
def test_java_double(value, text):
    assert java_double(value) == text


@pytest.mark.parametrize(
    ("n", "text"), [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (3 * 1024**3, "3.0 GiB")]
)
def test_human_readable_bytes(n, text):
    assert human_readable_bytes(n) == text


def test_java_runtime():
    assert java_runtime(((2 * 24 + 3) * 3600 + 4 * 60 + 5) * 1000 + 999) == (
        "[ 2 days, 3 hours, 4 minutes, 5 seconds ]"
    )
