"""Offset reset by time while consumers run: ``rmq admin resetOffsetByTime`` makes the
broker commit new offsets and push them (RESET_CONSUMER_CLIENT_OFFSET); running push
(concurrent and orderly) and lite pull consumers continue from there without a restart.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from rmq.client import (
    ConsumeFromWhere,
    ConsumeOrderlyResult,
    ConsumeResult,
    LitePullConsumer,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
)
from tests.integration import admin_util
from tests.integration.rigs import module_cluster
from tests.integration.test_client import create_topic, unique, wait_until

pytestmark = pytest.mark.timeout(120)


cluster = module_cluster("reset")


async def admin(*args: str) -> admin_util.Run:
    """`rmq admin` in a child process, off the loop (the cluster runs on this loop)."""
    return await asyncio.to_thread(admin_util.admin, *args)


async def early_and_late(cluster, topic: str) -> int:
    """5 + 5 "early" messages, a timestamp, 5 + 5 "late" ones (2 queues)."""
    async with Producer(unique("RsP"), cluster.namesrv) as p:
        for i in range(10):
            await p.send(Message(topic, f"early{i}".encode()), queue=MessageQueue(topic, "broker-a", i % 2))
        await asyncio.sleep(0.1)
        mid = int(time.time() * 1000)
        await asyncio.sleep(0.1)
        for i in range(10):
            await p.send(Message(topic, f"late{i}".encode()), queue=MessageQueue(topic, "broker-a", i % 2))
    return mid


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
async def test_running_push_consumer_reconsumes_from_the_reset_time(cluster, orderly):
    topic, group = unique("RsT"), unique("RsG")
    await create_topic(cluster.namesrv, cluster.broker, topic, 2)
    mid = await early_and_late(cluster, topic)
    got: list[bytes] = []

    def listener(msgs, ctx):
        got.extend(m.body for m in msgs)
        return ConsumeOrderlyResult.SUCCESS if orderly else ConsumeResult.SUCCESS

    c = PushConsumer(
        group,
        cluster.namesrv,
        orderly=orderly,
        listener=listener,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    c.subscribe(topic, "*")
    await c.start()
    try:
        await wait_until(lambda: len(got) >= 20, 20, what="the first 20")
        mqs = [MessageQueue(topic, "broker-a", q) for q in (0, 1)]
        await wait_until(lambda: all(c.offset_store.offset_table.get(m) == 10 for m in mqs), 5, what="offsets at 10")
        r = await admin("resetOffsetByTime", "-n", cluster.namesrv, "-g", group, "-t", topic, "-s", str(mid))
        assert r.rc == 0 and r.err == "", r
        lines = r.out.splitlines()
        assert lines[0] == (
            f"rollback consumer offset by specified consumerGroup[{group}], "
            f"topic[{topic}], force[true], timestamp(string)[{mid}], "
            f"timestamp(long)[{mid}]"
        )
        assert lines[1].split() == ["#brokerName", "#queueId", "#offset"]
        assert [ln.split() for ln in lines[2:]] == [["broker-a", "0", "5"], ["broker-a", "1", "5"]]
        # the late ten again, nothing early, no restart
        await wait_until(lambda: len(got) >= 30, 20, what="the late ones again")
        await asyncio.sleep(0.5)
        assert sorted(got[20:]) == sorted(f"late{i}".encode() for i in range(10))
        assert len(got) == 30
        await wait_until(
            lambda: all(c.offset_store.offset_table.get(m) == 10 for m in mqs), 5, what="offsets at 10 again"
        )
        # -1: the end of each queue, without force (never forward of what the broker
        # has; so let it have the consumer's offsets first); --json; nothing comes again
        await c.persist_consumer_offset(oneway=False)
        r = await admin(
            "resetOffsetByTime", "-n", cluster.namesrv, "-g", group, "-t", topic, "-s", "-1", "-f", "false", "--json"
        )
        assert r.rc == 0, r
        doc = json.loads(r.out)
        assert doc["consumerGroup"] == group and doc["topic"] == topic
        assert doc["force"] is False and doc["timestamp"] == -1
        assert doc["offsetTable"] == [
            {"brokerName": "broker-a", "queueId": 0, "offset": 10},
            {"brokerName": "broker-a", "queueId": 1, "offset": 10},
        ]
        await asyncio.sleep(0.5)
        assert len(got) == 30
    finally:
        await c.shutdown()


async def test_running_lite_pull_consumer_follows_a_reset(cluster):
    topic, group = unique("RsT"), unique("RsG")
    await create_topic(cluster.namesrv, cluster.broker, topic, 2)
    mid = await early_and_late(cluster, topic)
    c = LitePullConsumer(group, cluster.namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.subscribe(topic, "*")
    await c.start()
    got: list[bytes] = []

    async def at_least(n: int) -> bool:
        got.extend(m.body for m in await c.poll(100))
        return len(got) >= n

    try:
        await wait_until(lambda: at_least(20), 20, what="the first 20")
        await c.commit()
        r = await admin("resetOffsetByTime", "-n", cluster.namesrv, "-g", group, "-t", topic, "-s", str(mid))
        assert r.rc == 0, r
        await wait_until(lambda: at_least(30), 20, what="the late ones again")
        got.extend(m.body for m in await c.poll(500))
    finally:
        await c.shutdown()
    assert sorted(got[20:]) == sorted(f"late{i}".encode() for i in range(10))


async def test_reset_errors(cluster):
    r = await admin("resetOffsetByTime", "-n", cluster.namesrv, "-g", "G", "-t", "NoSuchTopic", "-s", "now")
    assert r.rc == 1 and r.out == ""
    assert r.err.startswith("rmq admin resetOffsetByTime: ")
    r = await admin("resetOffsetByTime", "-n", cluster.namesrv, "-g", "G", "-t", "T", "-s", "yesterday")
    assert r.rc == 2 and "yyyy-MM-dd#HH:mm:ss:SSS" in r.err
    r = await admin("resetOffsetByTime", "-n", cluster.namesrv, "-t", "T", "-s", "now")
    assert r.rc == 2 and "consumerGroup" in r.err
