"""The real mqadmin 4.9.8's consumer subcommands against rmq with an online rmq.client
PushConsumer (issue 14): consumerStatus and consumerProgress read GET_CONSUMER_RUNNING_INFO
(307) relayed by the broker to the consumer, queryMsgById -g -d sends CONSUME_MESSAGE_DIRECTLY
(309) the same way.

The online group GROUP consumed OLD messages (committed) and holds NEW ones in its listener
unconsumed, so its backlog is exactly len(NEW) while it stays online and holds every queue.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from rmq.client import ConsumeFromWhere, ConsumeResult, Message, MessageQueue, Producer, PushConsumer
from rmq.common.mixall import retry_topic
from rmq.protocol.bodies import ConsumerIdList
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.headers import GetConsumerListByGroupRequestHeader
from tests.integration.broker_util import BrokerApi, unique, wait_until
from tests.interop.conftest import Cluster
from tests.interop.mqadmin_util import ROCKETMQ, MqadminRun, mqadmin, mqadmin_available

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(mqadmin_available() is not None, reason=str(mqadmin_available())),
]

QUEUES = 4
OLD = [b"old-%d" % i for i in range(8)]  # consumed and committed: 2 per queue
NEW = [b"new-%d" % i for i in range(6)]  # held in the listener: the backlog


@pytest.fixture(scope="module")
def online(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    topic, group = unique("MqadminConsumerTopic"), unique("MqadminConsumerGroup")
    cluster.create_topic(topic, QUEUES)
    release = threading.Event()
    consumed: list[bytes] = []

    def listener(msgs, ctx):
        for m in msgs:
            if m.body.startswith(b"new"):
                release.wait(120)  # held: the offset stays before it
            consumed.append(m.body)
        return ConsumeResult.SUCCESS

    # routes polled every second: %RETRY%<group> is created at the first heartbeat, and a
    # poll that ran before the broker registered it would wait 30 s for the next one
    consumer = PushConsumer(
        group,
        cluster.namesrv_addr,
        listener=listener,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        poll_name_server_interval=1000,
    )
    consumer.subscribe(topic, "*")

    async def send(bodies: list[bytes]) -> list:
        async with Producer(unique("MqadminConsumerProducer"), cluster.namesrv_addr) as p:
            return [
                await p.send(Message(topic, b), queue=MessageQueue(topic, cluster.broker_name, i % QUEUES))
                for i, b in enumerate(bodies)
            ]

    async def committed() -> int:
        async with BrokerApi(cluster.broker_addr) as api:
            total = 0
            for q in range(QUEUES):
                r = await api.query_offset(group, topic, q)
                total += int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else 0
            return total

    async def start() -> None:
        await send(OLD)
        await consumer.start()
        await wait_until(lambda: sorted(consumed) == sorted(OLD), 30, what="the old messages consumed")
        await wait_until(lambda: committed_is(len(OLD)), 30, "the old messages' offsets committed", interval=0.2)
        await send(NEW)

    async def committed_is(n: int) -> bool:
        return await committed() == n

    cluster._loop.run(start(), 90)
    # mqadmin finds the consumer's broker through the route of %RETRY%<group>
    cluster.wait_route(retry_topic(group), cluster.namesrv_addr.split(";")[0], 1)
    try:
        yield SimpleNamespace(
            topic=topic,
            group=group,
            client_id=consumer.instance.client_id,
            consumer=consumer,
            consumed=consumed,
            home=tmp_path_factory.mktemp("mqadmin-consumer-home"),
        )
    finally:
        release.set()
        cluster._loop.run(consumer.shutdown(), 60)


def run(cluster: Cluster, online: SimpleNamespace, *args: str, cwd: Path | None = None) -> MqadminRun:
    r = mqadmin(online.home, *args, "-n", cluster.namesrv_addr, cwd=cwd)
    assert "Exception" not in r.text, r.text
    assert r.rc == 0, r.text
    return r


def test_consumer_status_lists_the_client_and_writes_its_running_info(cluster, online, tmp_path):
    r = run(cluster, online, "consumerStatus", "-g", online.group, cwd=tmp_path)
    rows = [ln.split() for ln in r.out.splitlines() if re.match(r"\d+\s", ln)]
    assert [row[:3] for row in rows] == [["1", online.client_id, "V4_9_8"]], r.out
    assert "Same subscription in the same group of consumer" in r.out
    assert "Rebalance OK" in r.out
    # the running info file mqadmin wrote (relative to its working directory)
    text = (tmp_path / rows[0][3]).read_text()
    assert re.search(
        rf"^001 Topic: {re.escape(retry_topic(online.group))}\s+ClassFilter: false\s+SubExpression: \*$", text, re.M
    ), text
    assert re.search(rf"^002 Topic: {online.topic}\s+ClassFilter: false\s+SubExpression: \*$", text, re.M), text
    assert re.search(r"^PROP_CONSUME_TYPE\s*: CONSUME_PASSIVELY$", text, re.M), text


def test_consumer_status_of_one_client_shows_offsets_and_queues(cluster, online):
    r = run(cluster, online, "consumerStatus", "-g", online.group, "-i", online.client_id, "-s")
    out = r.out
    assert re.search(rf"^consumerGroup\s*: {online.group}$", out, re.M), out
    assert re.search(r"^PROP_CONSUMEORDERLY\s*: false$", out, re.M), out
    assert re.search(rf"^PROP_NAMESERVER_ADDR\s*: {re.escape(cluster.namesrv_addr)};$", out, re.M), out
    offsets = out.split("#Consumer Offset#")[1].split("#Consumer MQ Detail#")[0]
    held = {
        int(q): int(off)
        for t, b, q, off in re.findall(r"^(\S+)\s+(\S+)\s+(\d+)\s+(-?\d+)\s*$", offsets, re.M)
        if t == online.topic and b == cluster.broker_name
    }
    assert held == {q: len(OLD) // QUEUES for q in range(QUEUES)}, out
    detail = out.split("#Consumer MQ Detail#")[1].split("#Consumer RT&TPS#")[0]
    assert detail.count(f"{online.topic} ") == QUEUES and "ProcessQueueInfo [commitOffset=2" in detail, out
    rates = out.split("#Consumer RT&TPS#")[1].split("#Consumer jstack#")[0]
    row = next(ln.split() for ln in rates.splitlines() if ln.startswith(online.topic + " "))
    assert float(row[4]) > 0, out  # #ConsumeOK TPS: the old messages, within the minute
    assert "#Consumer jstack#" in out  # -s: the consumer's tasks


def test_consumer_progress_shows_client_ip_per_queue_and_the_backlog(cluster, online):
    r = run(cluster, online, "consumerProgress", "-g", online.group, "-s", "true")
    ip = online.client_id.split("@")[0]
    rows = [ln.split() for ln in r.out.splitlines() if ln.startswith(online.topic + " ")]
    assert sorted(int(row[2]) for row in rows) == list(range(QUEUES)), r.out
    for row in rows:
        assert row[5] == ip, r.out  # #Client IP from the running info's mqTable, not N/A
    diffs = {int(row[2]): int(row[6]) for row in rows}
    assert sum(diffs.values()) == len(NEW), r.out

    async def backlog() -> int:  # the broker's own figures
        async with BrokerApi(cluster.broker_addr) as api:
            total = 0
            for q in range(QUEUES):
                committed = int((await api.query_offset(online.group, online.topic, q)).ext_fields["offset"])
                total += await api.max_offset(online.topic, q) - committed
            return total

    assert cluster._loop.run(backlog(), 30) == len(NEW)
    assert int(re.search(r"Diff Total: (\d+)", r.out).group(1)) == len(NEW), r.out
    retry_rows = [ln.split() for ln in r.out.splitlines() if ln.startswith(retry_topic(online.group) + " ")]
    assert retry_rows and all(row[5] == ip for row in retry_rows), r.out


def test_query_msg_by_id_consumes_directly_through_the_listener(cluster, online):
    # a topic the group does not subscribe to: only 309 can bring the message to its listener
    other = unique("MqadminDirectTopic")
    cluster.create_topic(other, 1)

    async def send() -> str:
        async with Producer(unique("MqadminDirectProducer"), cluster.namesrv_addr) as p:
            return (await p.send(Message(other, b"direct-me"))).offset_msg_id

    msg_id = cluster._loop.run(send(), 60)
    r = run(cluster, online, "queryMsgById", "-i", msg_id, "-g", online.group, "-d", online.client_id)
    assert re.search(
        r"ConsumeMessageDirectlyResult \[order=false, autoCommit=true, consumeResult=CR_SUCCESS, remark=null, "
        r"spentTimeMills=\d+\]",
        r.out,
    ), r.out
    assert online.consumed.count(b"direct-me") == 1


def test_consumer_status_of_a_client_that_is_not_online(cluster, online):
    r = mqadmin(online.home, "consumerStatus", "-g", online.group, "-i", "10.0.0.1@gone", "-n", cluster.namesrv_addr)
    assert f"The Consumer <{online.group}> <10.0.0.1@gone> not online" in r.text, r.text


def test_consumer_status_and_progress_of_a_java_consumer(cluster, online, tmp_path):
    """The broker relays 307 to a Java 4.9.8 consumer (the benchmark Consumer) the same way."""
    topic, group = unique("MqadminJavaTopic"), unique("MqadminJavaGroup")
    cluster.create_topic(topic, QUEUES)
    env = dict(os.environ, ROCKETMQ_USER_HOME=str(tmp_path), JAVA_HEAP="256m")
    java = subprocess.Popen(
        [str(ROCKETMQ), "consumer", "-n", cluster.namesrv_addr, "-t", topic, "-g", group],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    try:

        async def java_client_ids() -> list[str]:
            ext = GetConsumerListByGroupRequestHeader(group).to_ext_fields()
            async with BrokerApi(cluster.broker_addr) as api:
                r = await api.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext)
            return ConsumerIdList.from_json(r.body).consumer_id_list if r.code == ResponseCode.SUCCESS else []

        async def online_with_queues() -> bool:
            return bool(await java_client_ids())

        cluster._loop.run(wait_until(online_with_queues, 60, "the Java consumer registered", interval=0.5), 70)
        cluster.wait_route(retry_topic(group), cluster.namesrv_addr.split(";")[0], 1)
        (client_id,) = cluster._loop.run(java_client_ids(), 30)
        r = run(cluster, online, "consumerStatus", "-g", group, "-i", client_id)
        assert re.search(rf"^consumerGroup\s*: {group}$", r.out, re.M), r.out
        assert re.search(r"^PROP_CLIENT_VERSION\s*: V4_9_8$", r.out, re.M), r.out
        assert re.search(rf"^\d+ Topic: {topic}\s+ClassFilter: false\s+SubExpression: \*$", r.out, re.M), r.out

        def shows_ip() -> bool:
            p = mqadmin(online.home, "consumerProgress", "-g", group, "-s", "true", "-n", cluster.namesrv_addr)
            rows = [ln.split() for ln in p.out.splitlines() if ln.startswith(topic + " ")]
            return len(rows) == QUEUES and all(row[5] == client_id.split("@")[0] for row in rows)

        # consumerProgress fails (206, as against RocketMQ) until the group has committed an
        # offset: the Java consumer writes its offsets every 5 s
        deadline = time.monotonic() + 60
        while not shows_ip():
            assert time.monotonic() < deadline, "consumerProgress never showed the Java client on every queue"
            time.sleep(1)
    finally:
        os.killpg(java.pid, signal.SIGKILL)
        java.wait(10)


def test_consumer_connection_shows_the_online_client_and_its_subscription(cluster, online):
    r = run(cluster, online, "consumerConnection", "-g", online.group)
    rows = [ln.split() for ln in r.out.splitlines() if ln.startswith(online.client_id + " ")]
    assert len(rows) == 1, r.out
    assert re.match(r"127\.0\.0\.1:\d+$", rows[0][1]) and rows[0][2:] == ["PYTHON", "V4_9_8"], r.out
    assert re.search(rf"^{online.topic}\s+\*$", r.out, re.M), r.out
    assert re.search(rf"^{re.escape(retry_topic(online.group))}\s+\*$", r.out, re.M), r.out
    for line in (
        "ConsumeType: CONSUME_PASSIVELY",
        "MessageModel: CLUSTERING",
        "ConsumeFromWhere: CONSUME_FROM_FIRST_OFFSET",
    ):
        assert line in r.out, r.out


def test_producer_connection_shows_the_online_producer(cluster, online):
    group = unique("MqadminOnlineProducer")

    async def with_producer() -> MqadminRun:
        async with Producer(group, cluster.namesrv_addr) as p, BrokerApi(cluster.broker_addr) as api:
            await p.send(Message(online.topic, b"from-a-live-producer"))

            async def known() -> bool:  # the heartbeat follows the first send on its own
                ext = {"producerGroup": group}
                return (await api.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, ext)).code == ResponseCode.SUCCESS

            await wait_until(known, 10.0, "the broker to know the producer")
            client_id = p.instance.client_id
            r = await asyncio.to_thread(run, cluster, online, "producerConnection", "-g", group, "-t", online.topic)
            return r, client_id

    r, client_id = cluster._loop.run(with_producer(), 90)
    rows = [ln.split() for ln in r.out.splitlines() if re.match(r"\d{4}\s", ln)]
    assert [row[:2] for row in rows] == [["0001", client_id]], r.out
    assert re.match(r"127\.0\.0\.1:\d+$", rows[0][2]) and rows[0][3:] == ["PYTHON", "V4_9_8"], r.out


def test_clone_group_offset_from_the_online_group(cluster, online):
    dest = unique("MqadminCloneDest")
    r = run(cluster, online, "cloneGroupOffset", "-s", online.group, "-d", dest, "-t", online.topic)
    assert (
        f"clone group offset success. srcGroup[{online.group}], destGroup=[{dest}], topic[{online.topic}]" in r.out
    ), r.out

    async def offsets(group: str) -> dict[int, int]:
        async with BrokerApi(cluster.broker_addr) as api:
            return {
                q: int((await api.query_offset(group, online.topic, q)).ext_fields["offset"]) for q in range(QUEUES)
            }

    # the online group's offsets, now the new group's too (read from the broker)
    assert cluster._loop.run(offsets(dest), 30) == cluster._loop.run(offsets(online.group), 30)
    assert sum(cluster._loop.run(offsets(dest), 30).values()) == len(OLD)
