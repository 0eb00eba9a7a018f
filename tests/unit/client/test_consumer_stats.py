"""ConsumerStatsManager: the last minute's pull / consume figures per (group, topic)."""

from __future__ import annotations

from rmq.client.consumer_stats import ConsumerStatsManager
from rmq.protocol.running_info import ConsumeStatus


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rates_over_the_part_of_the_minute_seen():
    clock = Clock()
    s = ConsumerStatsManager(clock)
    s.inc_pull("G", "T", 10.0, 32)
    s.inc_consume_rt("G", "T", 4.0)
    s.inc_consume_result("G", "T", 30, 2)
    clock.now += 8  # eight seconds since the first sample
    s.inc_pull("G", "T", 30.0, 8)
    s.inc_consume_rt("G", "T", 2.0)
    st = s.consume_status("G", "T")
    assert st == ConsumeStatus(
        pull_rt=20.0,
        pull_tps=5.0,
        consume_rt=3.0,
        consume_ok_tps=30 / 8,
        consume_failed_tps=2 / 8,
        consume_failed_msgs=2,
    )
    assert s.consume_status("G", "other") == ConsumeStatus()
    assert s.consume_status("H", "T") == ConsumeStatus()


def test_a_minute_later_the_rates_are_gone_but_the_hour_keeps_failures():
    clock = Clock()
    s = ConsumerStatsManager(clock)
    s.inc_pull("G", "T", 10.0, 32)
    s.inc_consume_result("G", "T", 1, 3)
    clock.now += 61
    st = s.consume_status("G", "T")
    assert (st.pull_rt, st.pull_tps, st.consume_ok_tps, st.consume_failed_tps) == (0.0, 0.0, 0.0, 0.0)
    assert st.consume_failed_msgs == 3
    clock.now += 3600
    assert s.consume_status("G", "T").consume_failed_msgs == 0


def test_rates_of_a_long_running_item_are_per_minute():
    clock = Clock()
    s = ConsumerStatsManager(clock)
    s.inc_consume_result("G", "T", 1, 0)
    clock.now += 300
    for _ in range(120):
        s.inc_consume_result("G", "T", 1, 0)
        clock.now += 0.5
    # two a second; the minute's oldest one-second bucket (two samples) has just left the window
    assert s.consume_status("G", "T").consume_ok_tps == 118 / 60
