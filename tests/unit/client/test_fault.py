"""Latency fault tolerance with the 4.9.8 tables (spec 8.1) and queue selection."""

from __future__ import annotations

import random

import pytest

from rmq.client.fault import (
    ISOLATION_LATENCY,
    LATENCY_MAX,
    NOT_AVAILABLE_DURATION,
    LatencyFaultTolerance,
    MQFaultStrategy,
    compute_not_available_duration,
)
from rmq.client.routes import TopicPublishInfo, topic_route_to_publish_info
from rmq.protocol.bodies import BrokerData, MessageQueue, QueueData, TopicRouteData


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def publish_info(brokers: dict[str, int]) -> TopicPublishInfo:
    route = TopicRouteData(
        [QueueData(b, n, n, 6) for b, n in brokers.items()],
        [BrokerData("C", b, {0: f"10.0.0.{i}:10911"}) for i, b in enumerate(brokers)],
    )
    return topic_route_to_publish_info("T", route)


def test_tables_are_the_4_9_8_ones():
    assert LATENCY_MAX == (50, 100, 550, 1000, 2000, 3000, 15000)
    assert NOT_AVAILABLE_DURATION == (0, 0, 30000, 60000, 120000, 180000, 600000)
    assert ISOLATION_LATENCY == 30000


@pytest.mark.parametrize(
    "latency,expected",
    [
        (0, 0),
        (49, 0),
        (50, 0),
        (99, 0),
        (100, 0),
        (549, 0),
        (550, 30000),
        (999, 30000),
        (1000, 60000),
        (1999, 60000),
        (2000, 120000),
        (3000, 180000),
        (14999, 180000),
        (15000, 600000),
        (30000, 600000),
    ],
)
def test_compute_not_available_duration(latency, expected):
    assert compute_not_available_duration(latency) == expected
    assert MQFaultStrategy(True).compute_not_available_duration(latency) == expected


def test_fault_item_availability_follows_the_clock():
    clock = Clock()
    lft = LatencyFaultTolerance(clock)
    assert lft.is_available("b1")  # unknown brokers are available
    lft.update_fault_item("b1", 600, 30000)
    assert not lft.is_available("b1")
    clock.now += 29999
    assert not lft.is_available("b1")
    clock.now += 1
    assert lft.is_available("b1")
    lft.update_fault_item("b1", 10, 0)
    assert lft.is_available("b1")
    lft.remove("b1")
    assert "b1" not in lft.fault_item_table


def test_pick_one_at_least_prefers_available_then_low_latency():
    clock = Clock()
    lft = LatencyFaultTolerance(clock, random.Random(1))
    assert lft.pick_one_at_least() is None
    lft.update_fault_item("slow", 5000, 180000)
    assert lft.pick_one_at_least() == "slow"  # one item: that one
    lft.update_fault_item("fast", 700, 30000)
    # two items, half = 1: always the best one (lower latency among unavailable ones)
    assert {lft.pick_one_at_least() for _ in range(10)} == {"fast"}
    lft.update_fault_item("ok", 10, 0)  # available beats everything
    lft.update_fault_item("worse", 9000, 600000)
    picks = {lft.pick_one_at_least() for _ in range(20)}
    assert picks == {"ok", "fast"}  # the better half, in turn


def test_update_fault_item_charges_isolation_as_30s():
    clock = Clock()
    s = MQFaultStrategy(True, LatencyFaultTolerance(clock))
    s.update_fault_item("b1", 5, isolation=True)
    item = s.latency_fault_tolerance.fault_item_table["b1"]
    assert item.current_latency == 5
    assert item.start_timestamp == clock.now + 600000
    s.update_fault_item("b2", 120, isolation=False)
    assert s.latency_fault_tolerance.fault_item_table["b2"].start_timestamp == clock.now
    s.update_fault_item("b3", 700, isolation=False)
    assert s.latency_fault_tolerance.fault_item_table["b3"].start_timestamp == clock.now + 30000


def test_disabled_strategy_is_round_robin_and_records_nothing():
    s = MQFaultStrategy(False)
    info = publish_info({"a": 2, "b": 2})
    picks = [s.select_one_message_queue(info, None) for _ in range(8)]
    assert {(m.broker_name, m.queue_id) for m in picks} == {("a", 0), ("a", 1), ("b", 0), ("b", 1)}
    # consecutive picks walk the list
    order = info.message_queue_list
    i0 = order.index(picks[0])
    assert picks[:4] == [order[(i0 + k) % 4] for k in range(4)]
    s.update_fault_item("a", 99999, True)
    assert s.latency_fault_tolerance.fault_item_table == {}


def test_retry_skips_the_last_broker():
    s = MQFaultStrategy(False)
    info = publish_info({"a": 4, "b": 4})
    for _ in range(20):
        assert s.select_one_message_queue(info, "a").broker_name == "b"
        assert s.select_one_message_queue(info, "b").broker_name == "a"
    only = publish_info({"a": 2})
    assert s.select_one_message_queue(only, "a").broker_name == "a"  # nothing else


def test_enabled_strategy_avoids_unavailable_brokers():
    clock = Clock()
    s = MQFaultStrategy(True, LatencyFaultTolerance(clock))
    info = publish_info({"a": 4, "b": 4})
    s.update_fault_item("a", 10, isolation=True)  # a is out for 10 minutes
    assert {s.select_one_message_queue(info, None).broker_name for _ in range(20)} == {"b"}
    clock.now += 600000
    assert {s.select_one_message_queue(info, None).broker_name for _ in range(20)} == {"a", "b"}


def test_enabled_strategy_when_every_broker_is_out_picks_one_at_least():
    clock = Clock()
    s = MQFaultStrategy(True, LatencyFaultTolerance(clock))
    info = publish_info({"a": 4, "b": 2})
    s.update_fault_item("a", 600, isolation=False)  # 30 s out, lower latency
    s.update_fault_item("b", 2500, isolation=False)  # 2 min out
    for _ in range(10):
        mq = s.select_one_message_queue(info, None)
        assert mq.broker_name == "a" and 0 <= mq.queue_id < 4 and mq.topic == "T"


def test_enabled_strategy_forgets_a_broker_without_queues():
    clock = Clock()
    s = MQFaultStrategy(True, LatencyFaultTolerance(clock))
    info = publish_info({"a": 2})
    s.update_fault_item("a", 10, isolation=True)
    s.update_fault_item("gone", 10, isolation=False)  # available, but not in the route
    s.latency_fault_tolerance.fault_item_table["gone"].start_timestamp = clock.now + 1
    mq = s.select_one_message_queue(info, None)
    assert mq.broker_name == "a"
    assert isinstance(mq, MessageQueue)
