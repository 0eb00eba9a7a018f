"""Retry and dead letters of a concurrent push consumer, end to end.

The broker's delay levels are all 1 s (``messageDelayLevel``) so the retry path
(level 3 + reconsumeTimes) is quick; the client's ``max_reconsume_times`` (sent in the
CONSUMER_SEND_MSG_BACK header) decides when a message is dead-lettered.
"""

from __future__ import annotations

import asyncio

import pytest

from rmq.client import ConsumeFromWhere, ConsumeResult, Message, MessageQueue, Producer, PushConsumer
from rmq.client.instance import CLIENT_INNER_PRODUCER_GROUP
from tests.integration.rigs import module_cluster
from tests.integration.test_client import create_topic, lite_pull_at_least, unique, wait_until

pytestmark = pytest.mark.timeout(120)

CONF = {"messageDelayLevel": "1s 1s 1s 1s 1s 1s 1s 1s"}


cluster = module_cluster("retry", CONF)


async def setup(cluster, body: bytes = b"payload"):
    topic = unique("RtT")
    await create_topic(cluster.namesrv, cluster.broker, topic, 2)
    async with Producer(unique("RtP"), cluster.namesrv) as p:
        r = await p.send(Message(topic, body, tags="TagR", keys="k1"))
    return topic, r


def consumer(cluster, group: str, topic: str, listener, **kw) -> PushConsumer:
    # The broker creates %RETRY%<group> at the consumer's first heartbeat; a route poll
    # that ran before the broker registered it sees no retry route until the next poll
    # (30 s by default, as Java), longer than these tests wait on a loaded box.
    kw.setdefault("poll_name_server_interval", 1000)
    c = PushConsumer(
        group, cluster.namesrv, listener=listener, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **kw
    )
    c.subscribe(topic, "*")
    return c


async def pull_all(cluster, topic: str, expect: int, timeout: float = 15) -> list:
    return await lite_pull_at_least(
        cluster.namesrv, [MessageQueue(topic, "broker-a", 0)], expect, f"{expect} message(s) in {topic}", timeout
    )


@pytest.mark.slow
async def test_always_failing_message_goes_through_the_retry_levels_into_the_dlq(cluster):
    topic, r = await setup(cluster)
    group = unique("RtG")
    seen: list[tuple[int, str, dict]] = []

    def listener(msgs, ctx):
        for m in msgs:
            seen.append((m.reconsume_times, m.topic, dict(m.properties)))
        return ConsumeResult.RECONSUME_LATER

    c = consumer(cluster, group, topic, listener, max_reconsume_times=2)
    await c.start()
    try:
        [d] = await pull_all(cluster, f"%DLQ%{group}", 1)
    finally:
        await c.shutdown()
    # deliveries 0, 1, 2 (the group's retryMaxTimes is 16: the header's 2 decided)
    assert [n for n, _, _ in seen] == [0, 1, 2]
    assert all(t == topic for _, t, _ in seen)  # RETRY_TOPIC restored
    assert "RETRY_TOPIC" not in seen[0][2]
    for _, _, props in seen[1:]:
        assert props["RETRY_TOPIC"] == topic
        assert props["ORIGIN_MESSAGE_ID"] == r.offset_msg_id
        assert props["UNIQ_KEY"] == r.msg_id
    assert d.body == b"payload" and d.reconsume_times == 3
    assert d.properties["ORIGIN_MESSAGE_ID"] == r.offset_msg_id
    assert d.properties["RETRY_TOPIC"] == topic
    assert d.tags == "TagR" and d.keys == "k1"


async def test_message_failing_twice_succeeds_on_the_third_delivery(cluster):
    topic, r = await setup(cluster, b"flaky")
    group = unique("RtG")
    seen: list = []

    async def listener(msgs, ctx):  # a coroutine listener
        m = msgs[0]
        seen.append(m)
        return ConsumeResult.SUCCESS if m.reconsume_times >= 2 else ConsumeResult.RECONSUME_LATER

    c = consumer(cluster, group, topic, listener, max_reconsume_times=2)
    await c.start()
    try:
        await wait_until(lambda: len(seen) >= 3, 20, what="the third delivery")
        await asyncio.sleep(1.5)  # nothing more comes
        retry_mq = MessageQueue(f"%RETRY%{group}", "broker-a", 0)
        await wait_until(lambda: c.offset_store.offset_table.get(retry_mq) == 2, 5, what="both retries consumed")
    finally:
        await c.shutdown()
    assert [m.reconsume_times for m in seen] == [0, 1, 2]
    third = seen[2]
    assert third.topic == topic and third.body == b"flaky"
    assert third.properties["RETRY_TOPIC"] == topic
    assert third.properties["ORIGIN_MESSAGE_ID"] == r.offset_msg_id
    assert third.properties["UNIQ_KEY"] == r.msg_id == seen[0].uniq_key
    assert third.tags == "TagR"


async def test_send_back_falls_back_to_the_inner_producer(cluster):
    """When CONSUMER_SEND_MSG_BACK fails, the message goes to %RETRY%<group> through the
    client's own producer (CLIENT_INNER_PRODUCER), as Java's sendMessageBack does."""
    topic, r = await setup(cluster, b"fallback")
    group = unique("RtG")
    seen: list = []

    def listener(msgs, ctx):
        seen.append(msgs[0])
        return ConsumeResult.SUCCESS if msgs[0].reconsume_times else ConsumeResult.RECONSUME_LATER

    c = consumer(cluster, group, topic, listener)
    await c.start()

    async def refused(*a, **kw):
        raise RuntimeError("CONSUMER_SEND_MSG_BACK unavailable")

    c.instance.api.consumer_send_message_back = refused
    try:
        await wait_until(lambda: len(seen) >= 2, 20, what="the retried message")
        assert CLIENT_INNER_PRODUCER_GROUP in c.instance.producer_table
    finally:
        await c.shutdown()
    again = seen[1]
    assert again.reconsume_times == 1 and again.topic == topic
    assert again.properties["RETRY_TOPIC"] == topic
    assert again.properties["ORIGIN_MESSAGE_ID"] == r.offset_msg_id
    assert again.properties["UNIQ_KEY"] == r.msg_id
    assert "RECONSUME_TIME" not in again.properties  # moved into the send header
    assert c.instance.closed


async def test_consume_timeout_hands_the_message_back(cluster):
    topic, r = await setup(cluster, b"slow")
    group = unique("RtG")
    seen: list[int] = []
    release = asyncio.Event()

    async def listener(msgs, ctx):
        seen.append(msgs[0].reconsume_times)
        if msgs[0].reconsume_times == 0:
            await release.wait()  # stuck past consume_timeout_ms
        return ConsumeResult.SUCCESS

    c = consumer(cluster, group, topic, listener, consume_timeout_ms=1000)
    await c.start()
    try:
        await wait_until(lambda: seen[-1:] == [1], 15, what="the timed-out message again")
        mq = MessageQueue(topic, r.message_queue.broker_name, r.message_queue.queue_id)
        # no longer holding the original queue's offset
        await wait_until(lambda: c.offset_store.offset_table.get(mq) == 1, 5, what="offset 1")
    finally:
        release.set()
        await c.shutdown()
    assert seen == [0, 1]
