"""Tag filtering end to end: the broker filters by the tag's hash code (the ConsumeQueue
unit's tagsCode), the client re-checks the tag string.

"Aa" and "BB" have the same Java ``String.hashCode()`` (2112), so a subscription to
"Aa" makes the broker deliver "BB" messages too; only the client's re-check drops them.
"""

from __future__ import annotations

import asyncio

import pytest

from rmq.client import (
    ConsumeFromWhere,
    ConsumeResult,
    LitePullConsumer,
    Message,
    MessageQueue,
    MQClientAPI,
    Producer,
    PullStatus,
    PushConsumer,
)
from rmq.client.pull_api import PullAPIWrapper
from rmq.protocol.bodies import SubscriptionData
from rmq.protocol.codes import PullSysFlag
from rmq.protocol.headers import PullMessageRequestHeader
from rmq.protocol.message import decode_records, java_hash
from rmq.remoting.client import RemotingClient
from tests.integration.rigs import module_cluster
from tests.integration.test_client import create_topic, poll_at_least, unique, wait_until

pytestmark = pytest.mark.timeout(120)


cluster = module_cluster("filter")


TAGS = ["a", "b", "c", None, "Aa", "BB", "a ", "ab"]


async def fill(cluster, topic: str, rounds: int = 3) -> None:
    async with Producer(unique("FlP"), cluster.namesrv) as p:
        for r in range(rounds):
            for i, tag in enumerate(TAGS):
                await p.send(
                    Message(topic, f"{tag}|{r}".encode(), tags=tag), queue=MessageQueue(topic, "broker-a", (r + i) % 2)
                )


async def test_or_expression_and_a_hash_collision_push_and_lite(cluster):
    assert java_hash("Aa") == java_hash("BB")
    topic = unique("FlT")
    await create_topic(cluster.namesrv, cluster.broker, topic, 2)
    await fill(cluster, topic)
    got: dict[str, list] = {"or": [], "Aa": []}

    def sink(name):
        def listener(msgs, ctx):
            got[name].extend(msgs)
            return ConsumeResult.SUCCESS

        return listener

    consumers = []
    for name, expr in (("or", " a ||b|| "), ("Aa", "Aa")):
        c = PushConsumer(
            unique("FlG"),
            cluster.namesrv,
            listener=sink(name),
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        )
        c.subscribe(topic, expr)
        consumers.append(c)
    lite = LitePullConsumer(
        unique("FlL"), cluster.namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    lite.subscribe(topic, "BB")
    try:
        for c in consumers:
            await c.start()
        await lite.start()
        await wait_until(lambda: len(got["or"]) >= 6 and len(got["Aa"]) >= 3, 20, what="the matching messages")
        lite_got = await poll_at_least(lite, 3, "BB for the lite consumer", 20)
        await asyncio.sleep(0.5)
        lite_got.extend(await lite.poll(100))
        # consumed offsets pass the matched messages (and move over filtered ones when
        # nothing is in flight: correctTagsOffset)
        for name, c in zip(("or", "Aa"), consumers, strict=False):
            for q in (0, 1):
                last = max(m.queue_offset for m in got[name] if m.queue_id == q)
                await wait_until(
                    lambda c=c, q=q, last=last: (
                        c.offset_store.offset_table.get(MessageQueue(topic, "broker-a", q), -1) > last
                    ),
                    5,
                    what="offsets",
                )
    finally:
        for c in consumers:
            await c.shutdown()
        await lite.shutdown()
    assert sorted(m.body for m in got["or"]) == sorted(f"{t}|{r}".encode() for r in range(3) for t in ("a", "b"))
    assert sorted(m.body for m in got["Aa"]) == [b"Aa|0", b"Aa|1", b"Aa|2"]
    assert sorted(m.body for m in lite_got) == [b"BB|0", b"BB|1", b"BB|2"]


async def test_the_broker_passes_the_colliding_tag_and_the_client_drops_it(cluster):
    topic = unique("FlT")
    await create_topic(cluster.namesrv, cluster.broker, topic, 2)
    await fill(cluster, topic, rounds=1)
    sd = SubscriptionData.build(topic, "Aa", None, 0)
    async with RemotingClient() as rc:
        api = MQClientAPI(rc, [cluster.namesrv])
        bodies = []
        for q in (0, 1):
            h = PullMessageRequestHeader(
                "FlRaw", topic, q, 0, 32, PullSysFlag.build(False, False, True), 0, 0, sd.sub_version, "Aa", "TAG"
            )
            r = await api.pull_message(cluster.broker, h, 5000)
            if r.status is PullStatus.FOUND:
                raw = decode_records(r.body)
                bodies += [m.body for m in raw]
                kept = PullAPIWrapper(None, "FlRaw").process_pull_result(MessageQueue(topic, "broker-a", q), r, sd)
                assert all(m.tags == "Aa" for m in kept.msg_found_list)
    # by hash: both Aa and BB came from the broker, nothing else did
    assert sorted(bodies) == [b"Aa|0", b"BB|0"]
