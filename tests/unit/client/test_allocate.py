"""Allocation strategies (spec 8.2): expected partitions and properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.client.rebalance import (
    AVG,
    AVG_BY_CIRCLE,
    by_config,
    by_machine_room,
    consistent_hash,
    machine_room_nearby,
    md5_hash,
    mq_to_string,
    strategy_by_name,
)
from rmq.protocol.bodies import MessageQueue


def qs(n: int, topic: str = "T", broker: str = "b") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def cids(n: int) -> list[str]:
    return [f"c{i}" for i in range(1, n + 1)]


def allocation(strategy, mqs, consumers) -> dict[str, list[MessageQueue]]:
    return {c: strategy.allocate("G", c, mqs, consumers) for c in consumers}


# --------------------------------------------------------------------------- expected results
def test_avg_five_queues_three_consumers():
    q = qs(5)
    a = allocation(AVG, q, cids(3))
    assert a == {"c1": [q[0], q[1]], "c2": [q[2], q[3]], "c3": [q[4]]}


def test_avg_by_circle_five_queues_three_consumers():
    q = qs(5)
    a = allocation(AVG_BY_CIRCLE, q, cids(3))
    assert a == {"c1": [q[0], q[3]], "c2": [q[1], q[4]], "c3": [q[2]]}


def test_avg_more_consumers_than_queues():
    q = qs(5)
    a = allocation(AVG, q, cids(6))
    assert [a[f"c{i}"] for i in range(1, 6)] == [[m] for m in q]
    assert a["c6"] == []


def test_avg_even_split_and_single_consumer():
    q = qs(8)
    a = allocation(AVG, q, cids(4))
    assert a == {"c1": q[0:2], "c2": q[2:4], "c3": q[4:6], "c4": q[6:8]}
    assert AVG.allocate("G", "c1", q, ["c1"]) == q


def test_unknown_consumer_gets_nothing_and_bad_args_raise():
    q = qs(4)
    assert AVG.allocate("G", "stranger", q, cids(2)) == []
    with pytest.raises(ValueError):
        AVG.allocate("G", "", q, cids(2))
    with pytest.raises(ValueError):
        AVG.allocate("G", "c1", [], cids(2))
    with pytest.raises(ValueError):
        AVG.allocate("G", "c1", q, [])


def test_names():
    assert AVG.name == "AVG"
    assert AVG_BY_CIRCLE.name == "AVG_BY_CIRCLE"
    assert consistent_hash().name == "CONSISTENT_HASH"
    assert by_config([]).name == "CONFIG"
    assert by_machine_room({"r1"}).name == "MACHINE_ROOM"
    assert machine_room_nearby(AVG, lambda mq: "r", lambda c: "r").name == "MACHINE_ROOM_NEARBY-AVG"
    assert strategy_by_name("avg") is AVG
    with pytest.raises(ValueError):
        strategy_by_name("nope")


def test_by_config_returns_the_configured_queues():
    q = qs(6)
    s = by_config([q[1], q[4]])
    assert s.allocate("G", "c1", q, cids(3)) == [q[1], q[4]]
    assert s.allocate("G", "c2", q, cids(3)) == [q[1], q[4]]


def test_machine_room():
    mqs = [MessageQueue("T", f"{room}@b{i}", qid) for room, i in (("r1", 1), ("r2", 2), ("r3", 3)) for qid in range(3)]
    s = by_machine_room({"r1", "r2"})
    a = allocation(s, mqs, cids(4))
    # 6 eligible queues over 4 consumers: 1 each, the 2 left to the first 2 consumers
    eligible = [m for m in mqs if m.broker_name.split("@")[0] in ("r1", "r2")]
    got = sorted(m for v in a.values() for m in v)
    assert got == sorted(eligible)
    assert [len(a[c]) for c in cids(4)] == [2, 2, 1, 1]
    assert all(not m.broker_name.startswith("r3") for v in a.values() for m in v)


def test_machine_room_nearby():
    mqs = [MessageQueue("T", b, i) for b in ("hz-b1", "sh-b2", "bj-b3") for i in range(4)]
    consumers = ["hz-c1", "hz-c2", "sh-c3"]
    room = lambda s: s.split("-")[0]  # noqa: E731
    s = machine_room_nearby(AVG, lambda mq: room(mq.broker_name), room)
    a = allocation(s, mqs, consumers)
    # hz queues only to hz consumers, sh queues only to sh-c3, bj (no consumer) to everyone
    assert {m.broker_name for m in a["hz-c1"] + a["hz-c2"]} >= {"hz-b1"}
    assert all(m.broker_name != "sh-b2" for m in a["hz-c1"] + a["hz-c2"])
    assert [m for m in a["sh-c3"] if m.broker_name == "sh-b2"] == [m for m in mqs if m.broker_name == "sh-b2"]
    bj = [m for c in consumers for m in a[c] if m.broker_name == "bj-b3"]
    assert sorted(bj) == [m for m in mqs if m.broker_name == "bj-b3"]
    all_assigned = sorted(m for v in a.values() for m in v)
    assert all_assigned == sorted(mqs)


def test_consistent_hash_java_compatible_keys():
    mq = MessageQueue("TopicTest", "broker-a", 3)
    assert mq_to_string(mq) == "MessageQueue [topic=TopicTest, brokerName=broker-a, queueId=3]"
    # MD5("abc") = 900150983cd24fb0... -> first four bytes 0x90015098
    assert md5_hash("abc") == 0x90015098


# --------------------------------------------------------------------------- properties
mq_lists = st.integers(min_value=1, max_value=40).flatmap(lambda n: st.just(qs(n)))
cid_lists = st.lists(
    st.text(alphabet="abcdefgh0123456789@.#", min_size=1, max_size=12), min_size=1, max_size=12, unique=True
).map(sorted)

STRATEGIES = [AVG, AVG_BY_CIRCLE, consistent_hash(), consistent_hash(3)]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: f"{s.name}")
@settings(max_examples=150, deadline=None)
@given(mqs=mq_lists, consumers=cid_lists)
def test_each_queue_to_exactly_one_consumer(strategy, mqs, consumers):
    a = allocation(strategy, mqs, consumers)
    assigned = [m for c in consumers for m in a[c]]
    assert sorted(assigned) == sorted(mqs)  # every queue, none twice


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: f"{s.name}")
@settings(max_examples=100, deadline=None)
@given(mqs=mq_lists, consumers=cid_lists)
def test_deterministic(strategy, mqs, consumers):
    assert allocation(strategy, mqs, consumers) == allocation(strategy, list(mqs), list(consumers))


@settings(max_examples=100, deadline=None)
@given(mqs=mq_lists, consumers=cid_lists)
def test_avg_balanced(mqs, consumers):
    sizes = [len(v) for v in allocation(AVG, mqs, consumers).values()]
    assert max(sizes) - min(sizes) <= 1
    sizes = [len(v) for v in allocation(AVG_BY_CIRCLE, mqs, consumers).values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=100, deadline=None)
@given(mqs=mq_lists, consumers=cid_lists.filter(lambda c: len(c) >= 2))
def test_consistent_hash_is_stable_when_a_consumer_leaves(mqs, consumers):
    s = consistent_hash()
    before = allocation(s, mqs, consumers)
    gone = consumers[0]
    after = allocation(s, mqs, consumers[1:])
    for c in consumers[1:]:
        # a surviving consumer keeps every queue it had; it may only gain the leaver's
        assert set(before[c]) <= set(after[c])
        assert set(after[c]) - set(before[c]) <= set(before[gone])
