"""The client against real ``rmq namesrv`` + ``rmq broker`` processes (one pair per module).

Each test uses its own topics and groups. Tests that kill or restart processes live in
``test_client_cluster.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rmq.client import (
    ConsumeFromWhere,
    ConsumeResult,
    LitePullConsumer,
    Message,
    MQBrokerError,
    MQClientAPI,
    MQClientError,
    Producer,
    PushConsumer,
    SendStatus,
    select_by_hash,
)
from rmq.client.config import ClientConfig
from rmq.protocol.bodies import MessageQueue, TopicConfig, TopicRouteData
from rmq.protocol.codes import ResponseCode, SerializeType
from rmq.protocol.message import SysFlag, decode_message_id
from rmq.remoting.client import RemotingClient
from tests.harness import start_broker, start_namesrv
from tests.integration.admin_util import REPO, repo_env

pytestmark = pytest.mark.timeout(90)
_seq = itertools.count()


# --------------------------------------------------------------------------- helpers
def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_seq)}"


async def wait_until(
    pred: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        r = pred()
        if asyncio.iscoroutine(r):
            r = await r
        if r:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


async def create_topic(namesrv: str, broker_addrs: list[str] | str, topic: str, queues: int = 4) -> TopicRouteData:
    """UPDATE_AND_CREATE_TOPIC on each broker, then wait until the NameServer routes it."""
    if isinstance(broker_addrs, str):
        broker_addrs = [broker_addrs]
    async with RemotingClient() as rc:
        api = MQClientAPI(rc, [namesrv])
        for addr in broker_addrs:
            await api.create_topic(addr, TopicConfig(topic, queues, queues, 6))
        route: TopicRouteData | None = None

        async def routed() -> bool:
            nonlocal route
            route = await api.get_topic_route_info(topic)
            return route is not None and len(route.queue_datas) == len(broker_addrs)

        await wait_until(routed, 10, what=f"route of {topic}")
        assert route is not None
        return route


class Collector:
    """A push listener that records what it got (thread-safe enough: list.append)."""

    def __init__(self, result: ConsumeResult = ConsumeResult.SUCCESS) -> None:
        self.msgs: list = []
        self.result = result

    def __call__(self, msgs, ctx) -> ConsumeResult:
        self.msgs.extend(msgs)
        return self.result

    def bodies(self) -> list[bytes]:
        return [m.body for m in self.msgs]


async def start_push_from_first(
    group: str, namesrv: str, topic: str, expression: str = "*", **options: Any
) -> tuple[PushConsumer, Collector]:
    """A started PushConsumer of topic (from the first offset) and what it receives;
    options go to PushConsumer as they are."""
    got = Collector()
    c = PushConsumer(
        group, namesrv, listener=got, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **options
    )
    c.subscribe(topic, expression)
    await c.start()
    return c, got


async def poll_at_least(c: LitePullConsumer, n: int, what: str, timeout: float = 20.0) -> list:
    """Poll a started consumer until n messages arrived; all of them, in arrival order."""
    got: list = []

    async def enough() -> bool:
        got.extend(await c.poll(200))
        return len(got) >= n

    await wait_until(enough, timeout, what=what)
    return got


async def lite_pull_at_least(
    namesrv: str, queues: list[MessageQueue], n: int, what: str, timeout: float = 20.0
) -> list:
    """Poll the queues (from the first offset, a fresh group) until n messages arrived."""
    c = LitePullConsumer(unique("lg"), namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.assign(queues)
    await c.start()
    try:
        return await poll_at_least(c, n, what, timeout)
    finally:
        await c.shutdown()


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimpleNamespace]:
    with tempfile.TemporaryDirectory(prefix="rmq-client-", ignore_cleanup_errors=True) as d:
        d = Path(d)
        with start_namesrv(d) as ns, start_broker(d, ns.addr, name="broker-a") as br:
            yield SimpleNamespace(namesrv=ns.addr, broker=br.addr, ns=ns, br=br)


async def new_topic(cluster, prefix: str = "T", queues: int = 4) -> str:
    topic = unique(prefix)
    await create_topic(cluster.namesrv, cluster.broker, topic, queues)
    return topic


# --------------------------------------------------------------------------- produce / consume
async def test_sync_send_and_push_consume_keep_tags_keys_properties_and_compression(cluster):
    topic = await new_topic(cluster)
    big = os.urandom(3000) * 2  # 6000 bytes, compressed on the way
    sent: dict[str, tuple[Message, Any]] = {}
    async with Producer(unique("pg"), cluster.namesrv) as p:
        for i in range(10):
            m = Message(
                topic,
                f"body-{i}".encode(),
                tags="TagA",
                keys=[f"k{i}", "shared"],
                properties={"color": "red", "i": str(i)},
            )
            r = await p.send(m)
            assert r.status is SendStatus.SEND_OK and r.ok
            assert len(r.msg_id) == 32
            ip, port, offset = decode_message_id(r.offset_msg_id)
            assert f"{ip}:{port}" == cluster.broker and offset >= 0
            assert r.message_queue.topic == topic and r.message_queue.broker_name == "broker-a"
            sent[r.msg_id] = (m, r)
        r = await p.send(Message(topic, big, tags="Big", keys="bigkey"))
        sent[r.msg_id] = (Message(topic, big, tags="Big"), r)
    # round robin: consecutive sends walk the 4 queues
    assert len({r.message_queue.queue_id for _, r in sent.values()}) == 4

    c, got = await start_push_from_first(unique("cg"), cluster.namesrv, topic)
    try:
        await wait_until(lambda: len(got.msgs) >= 11, what="11 messages")
    finally:
        await c.shutdown()
    assert len(got.msgs) == 11
    for m in got.msgs:
        orig, result = sent[m.uniq_key]
        assert m.body == orig.body
        assert m.topic == topic
        assert m.tags == orig.tags
        assert m.queue_id == result.message_queue.queue_id
        assert m.queue_offset == result.queue_offset
        assert m.msg_id == result.offset_msg_id
        if orig.tags == "TagA":
            i = m.properties["i"]
            assert m.keys == f"k{i} shared"
            assert m.properties["color"] == "red"
            assert not m.sys_flag & SysFlag.COMPRESSED
        else:
            assert m.sys_flag & SysFlag.COMPRESSED  # stored compressed, given inflated
            assert len(m.body) == 6000


async def test_async_oneway_and_batch_sends(cluster):
    topic = await new_topic(cluster)
    done: list = []
    async with Producer(unique("pg"), cluster.namesrv) as p:
        futs = [p.send_async(Message(topic, f"async-{i}".encode()), on_success=done.append) for i in range(20)]
        results = await asyncio.gather(*futs)
        assert all(r.status is SendStatus.SEND_OK for r in results)
        for i in range(10):
            await p.send_oneway(Message(topic, f"oneway-{i}".encode()))
        batch = [Message(topic, f"batch-{i}".encode(), tags="B", keys=f"bk{i}") for i in range(10)]
        r = await p.send_batch(batch)
        assert r.status is SendStatus.SEND_OK
        assert len(r.msg_id.split(",")) == 10 and len(r.offset_msg_id.split(",")) == 10
        # a list given to send_async is a batch too
        r2 = await p.send_async([Message(topic, b"ab-1"), Message(topic, b"ab-2")])
        assert len(r2.msg_id.split(",")) == 2
    assert len(done) == 20
    # everything is there, batch members in order at consecutive offsets of one queue
    got = await lite_pull_at_least(
        cluster.namesrv, [MessageQueue(topic, "broker-a", i) for i in range(4)], 42, "42 messages"
    )
    bodies = sorted(m.body.decode() for m in got)
    expected = sorted(
        [f"async-{i}" for i in range(20)]
        + [f"oneway-{i}" for i in range(10)]
        + [f"batch-{i}" for i in range(10)]
        + ["ab-1", "ab-2"]
    )
    assert bodies == expected
    batch_msgs = sorted((m for m in got if m.body.startswith(b"batch-")), key=lambda m: m.queue_offset)
    assert len({m.queue_id for m in batch_msgs}) == 1
    assert [m.body for m in batch_msgs] == [f"batch-{i}".encode() for i in range(10)]
    assert [m.keys for m in batch_msgs] == [f"bk{i}" for i in range(10)]
    offs = [m.queue_offset for m in batch_msgs]
    assert offs == list(range(offs[0], offs[0] + 10))
    assert r.queue_offset == offs[0]


async def test_send_to_chosen_queue_and_by_selector_keeps_order(cluster):
    topic = await new_topic(cluster)
    async with Producer(unique("pg"), cluster.namesrv) as p:
        mq = MessageQueue(topic, "broker-a", 2)
        r = await p.send(Message(topic, b"to-q2"), queue=mq)
        assert r.message_queue == mq
        await p.send_oneway(Message(topic, b"oneway-q3"), queue=MessageQueue(topic, "broker-a", 3))
        queues: dict[str, set[int]] = {}
        for step in range(8):
            for order in range(5):
                r = await p.send(
                    Message(topic, f"order-{order}:{step}".encode()), selector=select_by_hash, arg=f"order-{order}"
                )
                queues.setdefault(f"order-{order}", set()).add(r.message_queue.queue_id)
        assert all(len(q) == 1 for q in queues.values())
        with pytest.raises(MQClientError):
            await p.send(Message(topic, b"x"), queue=MessageQueue("other", "broker-a", 0))
    got = await lite_pull_at_least(
        cluster.namesrv, [MessageQueue(topic, "broker-a", i) for i in range(4)], 42, "42 messages"
    )
    assert [m.body for m in got if m.queue_id == 2][0] == b"to-q2"
    assert [m.body for m in got if m.queue_id == 3][0] == b"oneway-q3"
    per_order: dict[str, list[tuple[int, int]]] = {}
    for m in got:
        text = m.body.decode()
        if text.startswith("order-"):
            order, step = text.split(":")
            per_order.setdefault(order, []).append((m.queue_offset, int(step)))
    for order, seq in per_order.items():
        assert [s for _, s in sorted(seq)] == list(range(8)), order


async def test_send_errors_from_the_client_and_the_broker(cluster):
    topic = await new_topic(cluster)
    async with Producer(unique("pg"), cluster.namesrv) as p:
        with pytest.raises(MQClientError):
            await p.send(Message(topic, b""))  # empty body
        with pytest.raises(MQClientError):
            await p.send(Message("SCHEDULE_TOPIC_XXXX", b"x"))  # system topic
        # properties longer than 32767 bytes: the store refuses, the broker says why,
        # and the client does not retry a non-retryable code
        with pytest.raises(MQBrokerError) as ei:
            await p.send(Message(topic, b"x", properties={"huge": "v" * 40000}))
        assert ei.value.code == ResponseCode.MESSAGE_ILLEGAL
        assert ei.value.remark and "illegal" in ei.value.remark
        assert ei.value.broker_addr == cluster.broker
        # a queue id the topic does not have: SYSTEM_ERROR with the broker's remark
        with pytest.raises(MQBrokerError) as ei:
            await p.send(Message(topic, b"x"), queue=MessageQueue(topic, "broker-a", 99))
        assert ei.value.code == ResponseCode.SYSTEM_ERROR
        assert "queueId[99] is illegal" in ei.value.remark
    with pytest.raises(MQClientError):
        await p.send(Message(topic, b"x"))  # shut down


async def test_producer_without_name_server_fails_to_start():
    p = Producer(unique("pg"), "")
    os.environ.pop("NAMESRV_ADDR", None)
    with pytest.raises(MQClientError):
        await p.start()


# --------------------------------------------------------------------------- push consumer
async def test_new_groups_see_the_backlog_whatever_consume_from_where(cluster):
    """A new group gets offset 0 from QUERY_CONSUMER_OFFSET while message 0 is in memory
    (spec 2.6), so LAST / FIRST / TIMESTAMP all start at the beginning of a young queue;
    a group with committed offsets continues from them whatever it asks for."""
    topic = await new_topic(cluster, queues=2)
    async with Producer(unique("pg"), cluster.namesrv) as p:
        for i in range(6):
            await p.send(Message(topic, f"old-{i}".encode()))
    collectors = {}
    consumers = []
    for where in (
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        ConsumeFromWhere.CONSUME_FROM_TIMESTAMP,
    ):
        got = collectors[where] = Collector()
        c = PushConsumer(
            unique("cg"),
            cluster.namesrv,
            listener=got,
            consume_from_where=where,
            consume_timestamp=time.strftime("%Y%m%d%H%M%S"),
        )
        c.subscribe(topic)
        consumers.append(c)
        await c.start()
    try:
        for where, got in collectors.items():
            await wait_until(lambda: len(got.msgs) >= 6, what=f"backlog for {where}")
        async with Producer(unique("pg"), cluster.namesrv) as p:
            for i in range(4):
                await p.send(Message(topic, f"new-{i}".encode()))
        for where, got in collectors.items():
            await wait_until(lambda: len(got.msgs) >= 10, what=f"new messages for {where}")
    finally:
        for c in consumers:
            await c.shutdown()
    for got in collectors.values():
        assert sorted(got.bodies()) == sorted(
            [f"old-{i}".encode() for i in range(6)] + [f"new-{i}".encode() for i in range(4)]
        )


async def test_offset_committed_on_shutdown_survives_a_consumer_restart(cluster):
    topic = await new_topic(cluster)
    group = unique("cg")
    async with Producer(unique("pg"), cluster.namesrv) as p:
        for i in range(20):
            await p.send(Message(topic, f"first-{i}".encode()))
        got = Collector()
        c = PushConsumer(group, cluster.namesrv, listener=got)
        c.subscribe(topic)
        await c.start()
        await wait_until(lambda: len(got.msgs) >= 20, what="first 20")
        await c.shutdown()
        assert len(got.msgs) == 20
        # the broker holds the committed offsets: 20 messages over the 4 queues
        async with RemotingClient() as rc:
            api = MQClientAPI(rc, [cluster.namesrv])
            total = 0
            for q in range(4):
                total += await api.query_consumer_offset(cluster.broker, group, topic, q)
            assert total == 20
        for i in range(10):
            await p.send(Message(topic, f"second-{i}".encode()))
    c2, got2 = await start_push_from_first(group, cluster.namesrv, topic)
    try:
        await wait_until(lambda: len(got2.msgs) >= 10, what="second 10")
        await asyncio.sleep(0.5)
    finally:
        await c2.shutdown()
    assert sorted(got2.bodies()) == sorted(f"second-{i}".encode() for i in range(10))


async def test_tag_filtering_push_and_lite(cluster):
    topic = await new_topic(cluster)
    async with Producer(unique("pg"), cluster.namesrv) as p:
        for i in range(30):
            await p.send(Message(topic, f"{'abc'[i % 3]}-{i}".encode(), tags="abc"[i % 3]))
        await p.send(Message(topic, b"untagged-1"))
    got = Collector()
    c = PushConsumer(
        unique("cg"), cluster.namesrv, listener=got, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    c.subscribe(topic, "a || c")
    lite = LitePullConsumer(
        unique("lg"), cluster.namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    lite.subscribe(topic, "b")
    await c.start()
    await lite.start()
    try:
        await wait_until(lambda: len(got.msgs) >= 20, what="tags a and c")
        lite_got = await poll_at_least(lite, 10, "tag b")
        await asyncio.sleep(0.5)
        lite_got.extend(await lite.poll(100))
    finally:
        await c.shutdown()
        await lite.shutdown()
    assert sorted(m.tags for m in got.msgs) == ["a"] * 10 + ["c"] * 10
    assert [m.tags for m in lite_got] == ["b"] * 10


async def test_two_consumers_split_queues_and_rebalance_when_one_leaves(cluster):
    topic = await new_topic(cluster, queues=4)
    group = unique("cg")
    got1, got2 = Collector(), Collector()
    c1 = PushConsumer(group, cluster.namesrv, listener=got1)
    c2 = PushConsumer(group, cluster.namesrv, listener=got2)
    for c in (c1, c2):
        c.subscribe(topic)
    await c1.start()
    await c2.start()

    def owned(c) -> set[int]:
        return {
            mq.queue_id for mq, pq in c.rebalance.process_queue_table.items() if mq.topic == topic and not pq.dropped
        }

    stopped2 = False
    try:
        await wait_until(
            lambda: len(owned(c1)) == 2 and len(owned(c2)) == 2 and owned(c1) | owned(c2) == {0, 1, 2, 3},
            what="an AVG split",
        )
        # AVG over the sorted client ids: the smaller id owns queues 0 and 1
        first = min((c1, c2), key=lambda c: c.instance.client_id)
        assert owned(first) == {0, 1}
        sent = []
        async with Producer(unique("pg"), cluster.namesrv) as p:
            for i in range(40):
                await p.send(Message(topic, f"m-{i}".encode()))
                sent.append(f"m-{i}".encode())
            await wait_until(lambda: len(got1.msgs) + len(got2.msgs) >= 40, what="40 messages")
            assert got1.msgs and got2.msgs
            assert {m.queue_id for m in got1.msgs}.isdisjoint({m.queue_id for m in got2.msgs})
            # c2 leaves: the broker notifies c1, which takes every queue without waiting 20 s
            t0 = time.monotonic()
            await c2.shutdown()
            stopped2 = True
            await wait_until(lambda: owned(c1) == {0, 1, 2, 3}, timeout=10, what="c1 owns all")
            assert time.monotonic() - t0 < 10
            for i in range(40, 80):
                await p.send(Message(topic, f"m-{i}".encode()))
                sent.append(f"m-{i}".encode())
            await wait_until(lambda: set(got1.bodies()) | set(got2.bodies()) >= set(sent), what="every message")
    finally:
        await c1.shutdown()
        if not stopped2:
            await c2.shutdown()
    # nothing lost; c2's committed offsets mean c1 did not start those queues over
    assert set(got1.bodies()) | set(got2.bodies()) == set(sent)
    assert len(got1.msgs) + len(got2.msgs) == len(sent)


async def test_reconsume_later_is_delivered_again_locally(cluster):
    """Without CONSUMER_SEND_MSG_BACK (``send_back_to_broker=False``, or a broker that
    refuses it) a failed message comes back locally, and its offset is committed only
    once it succeeded."""
    topic = await new_topic(cluster, queues=1)
    group = unique("cg")
    attempts: dict[bytes, list[int]] = {}

    def listener(msgs, ctx):
        for m in msgs:
            attempts.setdefault(m.body, []).append(m.reconsume_times)
            if m.body == b"flaky" and len(attempts[m.body]) < 3:
                return ConsumeResult.RECONSUME_LATER
            if m.body == b"raises" and len(attempts[m.body]) < 2:
                raise RuntimeError("listener failure")
        return ConsumeResult.SUCCESS

    async with Producer(unique("pg"), cluster.namesrv) as p:
        for body in (b"ok-1", b"flaky", b"raises", b"ok-2"):
            await p.send(Message(topic, body))
    c = PushConsumer(
        group,
        cluster.namesrv,
        listener=listener,
        local_retry_delay_ms=200,
        send_back_to_broker=False,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    c.subscribe(topic)
    await c.start()
    mq = MessageQueue(topic, "broker-a", 0)
    try:
        await wait_until(lambda: len(attempts.get(b"flaky", [])) >= 1, what="first delivery")
        # while "flaky" is pending, the committable offset stays at it (offset 1)
        assert c.offset_store.offset_table.get(mq, 0) <= 1
        await wait_until(
            lambda: len(attempts.get(b"flaky", [])) >= 3 and len(attempts.get(b"raises", [])) >= 2, what="redeliveries"
        )
        await wait_until(lambda: c.offset_store.offset_table.get(mq) == 4, what="offset 4")
    finally:
        await c.shutdown()
    assert attempts[b"flaky"] == [0, 1, 2]
    assert attempts[b"raises"] == [0, 1]
    assert attempts[b"ok-1"] == [0] and attempts[b"ok-2"] == [0]


async def test_reconsume_later_goes_back_through_the_broker(cluster):
    """CONSUMER_SEND_MSG_BACK: the message returns from %RETRY%<group> after its delay
    level (1 = 1 s), shown under its own topic; delay level -1 sends it to the DLQ."""
    topic = await new_topic(cluster, queues=1)
    group = unique("cg")
    seen: list = []

    def listener(msgs, ctx):
        m = msgs[0]
        seen.append((m.body, m.topic, m.reconsume_times, dict(m.properties)))
        if m.reconsume_times == 0:
            ctx.delay_level_when_next_consume = -1 if m.body == b"to-dlq" else 1
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    async with Producer(unique("pg"), cluster.namesrv) as p:
        r = await p.send(Message(topic, b"retry-me", tags="t", keys="k"))
        await p.send(Message(topic, b"to-dlq"))
    c = PushConsumer(
        group, cluster.namesrv, listener=listener, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    c.subscribe(topic)
    await c.start()
    try:
        await wait_until(
            lambda: any(b == b"retry-me" and n == 1 for b, _, n, _ in seen), timeout=30, what="the retried message"
        )
        # the original queue moved on: both originals count as consumed
        mq = MessageQueue(topic, "broker-a", 0)
        await wait_until(lambda: c.offset_store.offset_table.get(mq) == 2, what="offset 2")
    finally:
        await c.shutdown()
    body, shown_topic, times, props = next(x for x in seen if x[0] == b"retry-me" and x[2] == 1)
    assert shown_topic == topic
    assert props["RETRY_TOPIC"] == topic and props["TAGS"] == "t" and props["KEYS"] == "k"
    assert props["ORIGIN_MESSAGE_ID"] == r.offset_msg_id
    assert props["UNIQ_KEY"] == r.msg_id
    assert [x for x in seen if x[0] == b"to-dlq"] and all(x[2] == 0 for x in seen if x[0] == b"to-dlq")
    got = await lite_pull_at_least(
        cluster.namesrv, [MessageQueue(f"%DLQ%{group}", "broker-a", 0)], 1, "the DLQ message"
    )
    assert [m.body for m in got] == [b"to-dlq"]


async def test_illegal_offset_is_corrected_by_the_broker(cluster):
    """An offset past the queue's end: PULL_OFFSET_MOVED. As in 4.9.8, a queue whose min
    offset is 0 is corrected to 0 (not to its max), so the consumer starts over."""
    topic = await new_topic(cluster, queues=1)
    group = unique("cg")
    async with Producer(unique("pg"), cluster.namesrv) as p:
        for i in range(3):
            await p.send(Message(topic, f"before-{i}".encode()))
        async with RemotingClient() as rc:
            api = MQClientAPI(rc, [cluster.namesrv])
            await api.update_consumer_offset(cluster.broker, group, topic, 0, 1000)
            assert await api.query_consumer_offset(cluster.broker, group, topic, 0) == 1000
        got = Collector()
        c = PushConsumer(group, cluster.namesrv, listener=got)
        c.subscribe(topic)
        await c.start()
        try:
            await wait_until(lambda: len(got.msgs) >= 3, what="the re-read queue")
            await p.send(Message(topic, b"after"))
            await wait_until(lambda: len(got.msgs) >= 4, what="the message after the correction")
            mq = MessageQueue(topic, "broker-a", 0)
            await wait_until(lambda: c.offset_store.offset_table.get(mq) == 4, what="offset 4")
        finally:
            await c.shutdown()
    assert got.bodies() == [b"before-0", b"before-1", b"before-2", b"after"]


async def test_binary_header_serialization(cluster):
    topic = await new_topic(cluster, queues=1)
    cfg = ClientConfig(namesrv_addr=cluster.namesrv, serialize_type=SerializeType.ROCKETMQ)
    async with Producer(unique("pg"), config=cfg) as p:
        r = await p.send(Message(topic, b"binary", tags="t", keys="k"))
        assert r.status is SendStatus.SEND_OK
    got = Collector()
    c = PushConsumer(unique("cg"), config=cfg, listener=got)
    c.subscribe(topic, "t")
    await c.start()
    try:
        await wait_until(lambda: got.msgs, what="the message")
    finally:
        await c.shutdown()
    assert got.msgs[0].body == b"binary" and got.msgs[0].keys == "k"


async def test_producer_and_consumer_share_one_client_instance(cluster):
    topic = await new_topic(cluster, queues=1)
    cfg = ClientConfig(namesrv_addr=cluster.namesrv, instance_name=unique("app"))
    p = Producer(unique("pg"), config=cfg)
    got = Collector()
    c = PushConsumer(unique("cg"), config=cfg, listener=got)
    c.subscribe(topic)
    await p.start()
    await c.start()
    try:
        assert p.instance is c.instance
        assert p.instance.client_id == f"{cfg.client_ip}@{cfg.instance_name}"
        await p.send(Message(topic, b"one"))
        await wait_until(lambda: len(got.msgs) == 1, what="one")
        await p.shutdown()
        assert not c.instance.closed  # the consumer still uses it
        async with Producer(unique("pg"), config=cfg) as p2:
            assert p2.instance is c.instance
            await p2.send(Message(topic, b"two"))
        await wait_until(lambda: len(got.msgs) == 2, what="two")
    finally:
        await p.shutdown()
        await c.shutdown()
    assert c.instance.closed


async def test_route_refresh_and_periodic_rebalance_pick_up_new_queues(cluster):
    topic = await new_topic(cluster, queues=2)
    fast = dict(poll_name_server_interval=200, rebalance_interval=200)
    got = Collector()
    async with Producer(unique("pg"), cluster.namesrv, **fast) as p:
        c = PushConsumer(unique("cg"), cluster.namesrv, listener=got, **fast)
        c.subscribe(topic)
        await c.start()
        try:
            assert len(await p.fetch_publish_message_queues(topic)) == 2
            await create_topic(cluster.namesrv, cluster.broker, topic, 4)  # 2 -> 4 queues
            await wait_until(
                lambda: len(p.topic_publish_info_table[topic].message_queue_list) == 4,
                what="the producer's route refresh",
            )
            await wait_until(
                lambda: len([mq for mq in c.rebalance.process_queue_table if mq.topic == topic]) == 4,
                what="the consumer's rebalance onto 4 queues",
            )
            results = [await p.send(Message(topic, f"m-{i}".encode())) for i in range(8)]
            assert {r.message_queue.queue_id for r in results} == {0, 1, 2, 3}
            await wait_until(lambda: len(got.msgs) == 8, what="8 messages")
        finally:
            await c.shutdown()


# --------------------------------------------------------------------------- lite pull
async def test_lite_pull_assign_poll_commit_seek(cluster):
    topic = await new_topic(cluster, queues=2)
    group = unique("lg")
    mqs = [MessageQueue(topic, "broker-a", i) for i in range(2)]
    async with Producer(unique("pg"), cluster.namesrv) as p:
        for i in range(10):
            await p.send(Message(topic, f"m-{i}".encode()), queue=mqs[i % 2])
        c = LitePullConsumer(
            group, cluster.namesrv, auto_commit=False, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        )
        c.assign(mqs)
        await c.start()
        try:
            got = await poll_at_least(c, 10, "10 messages")
            assert await c.committed(mqs[0]) == 0  # nothing committed yet (spec 2.6)
            await c.commit()
            assert [await c.committed(mq) for mq in mqs] == [5, 5]
            # seek back: the queue is read again from there
            await c.seek(mqs[0], 2)
            again = await poll_at_least(c, 3, "re-read after seek")
            assert [m.queue_offset for m in again] == [2, 3, 4]
            with pytest.raises(MQClientError):
                await c.seek(mqs[0], 99)
            assert await c.max_offset(mqs[0]) == 5 and await c.min_offset(mqs[0]) == 0
        finally:
            await c.shutdown()
        assert sorted(m.body for m in got) == sorted(f"m-{i}".encode() for i in range(10))
        for i in range(10, 14):
            await p.send(Message(topic, f"m-{i}".encode()), queue=mqs[i % 2])
    # a new consumer of the group continues from the committed offsets
    c2 = LitePullConsumer(group, cluster.namesrv)
    c2.assign(mqs)
    await c2.start()
    try:
        got2 = await poll_at_least(c2, 4, "4 new messages")
        assert await c2.poll(300) == []
    finally:
        await c2.shutdown()  # auto-commit: the polled messages are committed
    assert sorted(m.body for m in got2) == sorted(f"m-{i}".encode() for i in range(10, 14))
    async with RemotingClient() as rc:
        api = MQClientAPI(rc, [cluster.namesrv])
        assert [await api.query_consumer_offset(cluster.broker, group, topic, q) for q in (0, 1)] == [7, 7]


async def test_lite_pull_subscribe_rebalances_between_two_consumers(cluster):
    topic = await new_topic(cluster, queues=4)
    group = unique("lg")
    c1 = LitePullConsumer(group, cluster.namesrv)
    c2 = LitePullConsumer(group, cluster.namesrv)
    for c in (c1, c2):
        c.subscribe(topic, "*")
        await c.start()
    try:
        await wait_until(lambda: len(c1.assignment()) == 2 and len(c2.assignment()) == 2, what="2 queues each")
        assert c1.assignment().isdisjoint(c2.assignment())
        async with Producer(unique("pg"), cluster.namesrv) as p:
            for i in range(20):
                await p.send(Message(topic, f"m-{i}".encode()))
        got1, got2 = [], []

        async def enough() -> bool:
            got1.extend(await c1.poll(100))
            got2.extend(await c2.poll(100))
            return len(got1) + len(got2) >= 20

        await wait_until(enough, what="20 messages")
        assert len(got1) == 10 and len(got2) == 10
        assert {m.queue_id for m in got1}.isdisjoint({m.queue_id for m in got2})
    finally:
        await c1.shutdown()
        await c2.shutdown()


# --------------------------------------------------------------------------- admin API
async def _has_max_offset(api: MQClientAPI, broker: str, topic: str, queue: int, want: int) -> bool:
    return await api.get_max_offset(broker, topic, queue) == want


async def test_admin_requests(cluster):
    topic = await new_topic(cluster, queues=2)
    t0 = int(time.time() * 1000)
    async with Producer(unique("pg"), cluster.namesrv) as p:
        r = await p.send(Message(topic, b"findme", keys="key-1 key-2"), queue=MessageQueue(topic, "broker-a", 1))
        mqs = await p.fetch_publish_message_queues(topic)
        assert mqs == [MessageQueue(topic, "broker-a", 0), MessageQueue(topic, "broker-a", 1)]
    async with RemotingClient() as rc:
        api = MQClientAPI(rc, [cluster.namesrv])
        b = cluster.broker
        info = await api.get_broker_cluster_info()
        assert info.broker_addr_table["broker-a"].broker_addrs[0] == b
        assert "broker-a" in info.cluster_addr_table["TestCluster"]
        assert topic in await api.get_all_topic_list()
        assert await api.get_topic_route_info(unique("missing")) is None
        # the reput dispatcher writes the ConsumeQueue after PUT_OK, as in RocketMQ
        await wait_until(lambda: _has_max_offset(api, b, topic, 1, 1), 5.0, what="the sent message in the ConsumeQueue")
        assert await api.get_min_offset(b, topic, 1) == 0
        assert await api.get_max_offset(b, topic, 0) == 0
        assert await api.search_offset(b, topic, 1, t0 - 1000) == 0
        assert await api.get_earliest_msg_storetime(b, topic, 1) >= t0 - 1000
        m = await api.view_message(b, decode_message_id(r.offset_msg_id)[2])
        assert m.body == b"findme" and m.uniq_key == r.msg_id
        q = await api.query_message(b, topic, "key-2", 32, t0 - 1000, int(time.time() * 1000) + 1000)
        assert [x.body for x in q.messages] == [b"findme"]
        q = await api.query_message(b, topic, r.msg_id, 32, t0 - 1000, int(time.time() * 1000) + 1000, unique_key=True)
        assert [x.body for x in q.messages] == [b"findme"]
        with pytest.raises(MQBrokerError) as ei:
            await api.query_message(b, topic, "no-such-key", 32, t0 - 1000, t0 + 60000)
        assert ei.value.code == ResponseCode.QUERY_NOT_FOUND
        cfg = await api.get_all_topic_config(b)
        assert cfg.topic_config_table[topic].read_queue_nums == 2
        rt = await api.get_broker_runtime_info(b)
        assert "brokerVersionDesc" in rt and int(rt["msgPutTotalTodayNow"]) >= 1
        # no offset, empty queue: 0, as 4.9.8 answers (message 0 is not on disk)
        assert await api.query_consumer_offset(b, unique("nogroup"), unique("notopic"), 0) == 0
        with pytest.raises(MQBrokerError) as ei:
            await api.get_consumer_id_list_by_group(b, unique("nogroup"))
        assert ei.value.code == ResponseCode.SYSTEM_ERROR


# --------------------------------------------------------------------------- CLI
def _rmq(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rmq.cli", *args],
        cwd=REPO,
        env=repo_env(PYTHONUNBUFFERED="1"),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


async def test_cli_produce_and_consume(cluster):
    topic = await new_topic(cluster)
    loop = asyncio.get_running_loop()
    out = await loop.run_in_executor(
        None,
        lambda: _rmq(
            "produce",
            "-a",
            cluster.namesrv,
            "-t",
            topic,
            "-n",
            "6",
            "--body",
            "hello {i}",
            "--tags",
            "cli",
            "--keys",
            "ck",
        ),
    )
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("#")]
    assert len(lines) == 6 and all("sendStatus=SEND_OK" in ln for ln in lines)
    assert "sent 6 message(s)" in out.stdout
    out = await loop.run_in_executor(
        None,
        lambda: _rmq(
            "produce", "-a", cluster.namesrv, "-t", topic, "-n", "4", "--batch", "2", "-q", "--serialize", "ROCKETMQ"
        ),
    )
    assert out.returncode == 0, out.stderr
    group = unique("cli")
    out = await loop.run_in_executor(
        None,
        lambda: _rmq(
            "consume", "-a", cluster.namesrv, "-t", topic, "-g", group, "--from", "first", "-c", "8", "--idle", "20"
        ),
    )
    assert out.returncode == 0, out.stderr
    first = [ln for ln in out.stdout.splitlines() if ln.startswith("topic=")]
    assert len(first) == 8
    assert "consumed 8 message(s)" in out.stderr
    # the other 2 were not committed: the group gets them next time
    out = await loop.run_in_executor(
        None, lambda: _rmq("consume", "-a", cluster.namesrv, "-t", topic, "-g", group, "-c", "2", "--idle", "20")
    )
    assert out.returncode == 0, out.stderr
    second = [ln for ln in out.stdout.splitlines() if ln.startswith("topic=")]
    assert len(second) == 2
    bodies = sorted(ln.split(" body=")[1] for ln in first + second)
    assert bodies == sorted([repr(f"hello {i}") for i in range(6)] + [repr(f"Hello RocketMQ {i}") for i in range(4)])
    assert all(f"topic={topic} " in ln for ln in first + second)
    bad = await loop.run_in_executor(None, lambda: _rmq("produce", "-a", "127.0.0.1:1", "-t", topic))
    assert bad.returncode != 0


async def test_cli_async_produce_of_many_to_a_new_topic(cluster):
    """--mode async keeps a bounded window in flight: thousands of sends to a topic
    created on the way (TBW102 route) all answer within sendMsgTimeout."""
    topic = unique("cli-async")
    loop = asyncio.get_running_loop()
    out = await loop.run_in_executor(
        None, lambda: _rmq("produce", "-a", cluster.namesrv, "-t", topic, "-n", "6000", "--mode", "async", "-q")
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "sent 6000 message(s)" in out.stdout and "0 failed" in out.stdout
