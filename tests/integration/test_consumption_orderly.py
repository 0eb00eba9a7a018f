"""Orderly push consumption against real ``rmq namesrv`` + ``rmq broker`` processes.

* consumers join and leave while keyed messages flow: per key, consumption order is
  send order, with no gap and no repeat, and no key is ever consumed by two consumers
  at once (every listener call is recorded as an interval);
* SUSPEND_CURRENT_QUEUE_A_MOMENT: the failed message comes back after the suspend time
  and nothing behind it overtakes it;
* after ``max_reconsume_times`` local retries the message goes to ``%DLQ%<group>`` and
  the queue moves on.

Consumers run in this process as separate client instances (own instance names, own
connections, own client ids), which is all the broker can tell apart.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import pytest

from rmq.client import (
    ConsumeFromWhere,
    ConsumeOrderlyResult,
    Message,
    MessageQueue,
    MQBrokerError,
    MQClientAPI,
    Producer,
    PushConsumer,
    select_by_hash,
)
from rmq.remoting.client import RemotingClient
from tests.integration.rigs import module_cluster
from tests.integration.test_client import create_topic, unique, wait_until

pytestmark = pytest.mark.timeout(120)

CONF = {"messageDelayLevel": "1s 1s 1s 1s 1s 1s 1s 1s"}


cluster = module_cluster("orderly", CONF)


@dataclass
class Call:
    consumer: str
    key: int
    seq: int
    queue_id: int
    start: float
    end: float


def orderly_consumer(cluster, group: str, topic: str, name: str, listener, **kw) -> PushConsumer:
    c = PushConsumer(
        group, cluster.namesrv, instance_name=name, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **kw
    )
    c.subscribe(topic, "*")
    c.register_message_listener_orderly(listener)
    return c


@pytest.mark.slow
async def test_orderly_consumers_join_and_leave_keep_per_key_order_and_exclusivity(cluster):
    topic = unique("OrdT")
    group = unique("OrdG")
    await create_topic(cluster.namesrv, cluster.broker, topic, 4)
    keys, per_key = 8, 100
    calls: list[Call] = []
    busy: dict[int, str] = {}  # key -> consumer currently inside the listener
    overlaps: list[tuple] = []

    def make_listener(name: str):
        async def listener(msgs, ctx):
            for m in msgs:
                key, seq = (int(x) for x in m.body.decode().split(":"))
                other = busy.get(key)
                if other is not None:
                    overlaps.append((name, other, key, seq))
                busy[key] = name
                t0 = time.monotonic()
                await asyncio.sleep(0.003)
                calls.append(Call(name, key, seq, m.queue_id, t0, time.monotonic()))
                busy.pop(key, None)
            return ConsumeOrderlyResult.SUCCESS

        return listener

    consumers: dict[str, PushConsumer] = {}

    async def start(name: str) -> None:
        c = orderly_consumer(cluster, group, topic, name, make_listener(name))
        await c.start()
        consumers[name] = c

    async def produce() -> None:
        async with Producer(unique("OrdP"), cluster.namesrv) as p:
            for seq in range(per_key):
                for key in range(keys):
                    await p.send(
                        Message(topic, f"{key}:{seq}".encode(), keys=str(key)), selector=select_by_hash, arg=key
                    )
                await asyncio.sleep(0.03)

    def consumed() -> int:
        return len({(c.key, c.seq) for c in calls})

    stopped_at: dict[str, float] = {}

    async def stop(name: str) -> None:
        await consumers.pop(name).shutdown()
        stopped_at[name] = time.monotonic()

    try:
        await start("c1")
        producing = asyncio.ensure_future(produce())
        await wait_until(lambda: consumed() >= 80, 20, what="c1 consuming")
        await start("c2")
        await start("c3")
        await wait_until(lambda: {c.consumer for c in calls[-40:]} >= {"c2", "c3"}, 20, what="c2 and c3 consuming")
        n = consumed()
        await stop("c2")
        await wait_until(lambda: consumed() >= n + 100, 20, what="more after c2 left")
        n = consumed()
        await stop("c1")
        await wait_until(lambda: consumed() >= n + 100, 20, what="more after c1 left")
        assert not producing.done(), "the stream ended before the last hand-over"
        await producing
        await wait_until(lambda: consumed() >= keys * per_key, 30, what="every message")
        await asyncio.sleep(0.5)
    finally:
        for c in consumers.values():
            await c.shutdown()

    assert not overlaps, overlaps[:5]
    by_key: dict[int, list[Call]] = {}
    for c in sorted(calls, key=lambda c: c.start):
        by_key.setdefault(c.key, []).append(c)
    for key, cs in by_key.items():
        assert [c.seq for c in cs] == list(range(per_key)), (key, [(c.consumer, c.seq) for c in cs])
        for a, b in zip(cs, cs[1:], strict=False):
            assert a.end <= b.start, (key, a, b)  # never two at once, across consumers
        assert len({c.queue_id for c in cs}) == 1  # one key, one queue
    owners = {(c.consumer, c.queue_id) for c in calls}
    # c1 had every queue, gave two to c2 / c3, then c3 took c2's, then c1's
    assert {q for who, q in owners if who == "c1"} == {0, 1, 2, 3}, owners
    assert {q for who, q in owners if who == "c3"} == {0, 1, 2, 3}, owners
    assert {who for who, _ in owners} == {"c1", "c2", "c3"}, owners
    for name, t in stopped_at.items():
        assert not [c for c in calls if c.consumer == name and c.start > t], name


async def test_suspend_retries_locally_in_order_then_moves_on(cluster):
    topic = unique("SusT")
    await create_topic(cluster.namesrv, cluster.broker, topic, 1)
    seen: list[tuple[int, int, float]] = []  # (seq, reconsume_times, when)
    failures: dict[int, int] = {}

    def listener(msgs, ctx):  # a plain function: runs in a thread
        for m in msgs:
            seq = int(m.body)
            seen.append((seq, m.reconsume_times, time.monotonic()))
            if seq == 3 and failures.get(seq, 0) < 2:
                failures[seq] = failures.get(seq, 0) + 1
                return ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyResult.SUCCESS

    async with Producer(unique("SusP"), cluster.namesrv) as p:
        for i in range(8):
            await p.send(Message(topic, str(i).encode()), queue=MessageQueue(topic, "broker-a", 0))
    c = orderly_consumer(cluster, unique("SusG"), topic, unique("sus"), listener)
    await c.start()
    try:
        await wait_until(lambda: len({s for s, _, _ in seen}) == 8, 20, what="all 8")
        await asyncio.sleep(0.3)
        mq = MessageQueue(topic, "broker-a", 0)
        await wait_until(lambda: c.offset_store.offset_table.get(mq) == 8, 5, what="offset 8")
    finally:
        await c.shutdown()
    assert [(s, r) for s, r, _ in seen] == [
        (0, 0),
        (1, 0),
        (2, 0),
        (3, 0),
        (3, 1),
        (3, 2),
        (4, 0),
        (5, 0),
        (6, 0),
        (7, 0),
    ]
    t = [w for s, _, w in seen if s == 3]
    # suspend_current_queue_time_millis defaults to 1000 ms between the attempts
    assert 0.9 <= t[1] - t[0] < 3 and 0.9 <= t[2] - t[1] < 3, t


async def test_orderly_max_reconsume_times_then_dead_letter(cluster):
    topic = unique("OdlqT")
    group = unique("OdlqG")
    await create_topic(cluster.namesrv, cluster.broker, topic, 1)
    seen: list[tuple[bytes, int, str]] = []

    async def listener(msgs, ctx):
        m = msgs[0]
        seen.append((m.body, m.reconsume_times, m.topic))
        ctx.suspend_current_queue_time_millis = 100
        if m.body == b"poison":
            return ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyResult.SUCCESS

    async with Producer(unique("OdlqP"), cluster.namesrv) as p:
        q = MessageQueue(topic, "broker-a", 0)
        r = await p.send(Message(topic, b"poison", tags="T1", keys="pk"), queue=q)
        await p.send(Message(topic, b"after"), queue=q)
    c = orderly_consumer(cluster, group, topic, unique("odlq"), listener, max_reconsume_times=2)
    await c.start()
    try:
        await wait_until(lambda: any(b == b"after" for b, _, _ in seen), 20, what="'after'")
    finally:
        await c.shutdown()
    assert seen == [(b"poison", 0, topic), (b"poison", 1, topic), (b"poison", 2, topic), (b"after", 0, topic)]
    # The DLQ a retry-topic send creates is write-only (PermName.PERM_WRITE, as 4.9.8's
    # SendMessageProcessor), so the message is looked up by its UNIQ_KEY in the index.
    dlq_topic = f"%DLQ%{group}"
    found = []
    async with RemotingClient() as rc:
        api = MQClientAPI(rc, [cluster.namesrv])

        async def dead() -> bool:
            try:
                qr = await api.query_message(cluster.broker, dlq_topic, r.msg_id, 32, 0, 2**62, unique_key=True)
            except MQBrokerError:
                return False
            found[:] = [m for m in qr.messages if m.topic == dlq_topic]
            return bool(found)

        await wait_until(dead, 15, what="the DLQ message")
    [d] = found
    assert d.body == b"poison" and d.tags == "T1" and d.keys == "pk"
    assert d.properties["RETRY_TOPIC"] == topic
    assert d.properties["ORIGIN_MESSAGE_ID"] == r.offset_msg_id
    assert d.properties["UNIQ_KEY"] == r.msg_id
    assert d.reconsume_times == 2
