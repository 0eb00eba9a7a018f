"""GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309) relayed by a real
broker to a real rmq.client PushConsumer, as mqadmin consumerStatus / consumerProgress /
queryMsgById -d send them (issue 14)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

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
from rmq.client.consumer_calls import ConsumerCallHandler
from rmq.common.mixall import retry_topic
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.message import decode_message_id
from rmq.protocol.running_info import (
    PROP_CONSUME_ORDERLY,
    PROP_CONSUME_TYPE,
    PROP_CONSUMER_START_TIMESTAMP,
    PROP_NAMESERVER_ADDR,
    CMResult,
    ConsumeMessageDirectlyResult,
    ConsumeMessageDirectlyResultRequestHeader,
    ConsumerRunningInfo,
    GetConsumerRunningInfoRequestHeader,
)
from rmq.remoting.client import RemotingClient
from tests.integration.admin_util import admin
from tests.integration.broker_util import BrokerApi
from tests.integration.rigs import module_cluster
from tests.integration.test_client import Collector, create_topic, unique, wait_until

pytestmark = pytest.mark.timeout(120)

cluster = module_cluster("rmq-runinfo-")

# what mqadmin gives the whole call (timeoutMillis * 3); the broker waits 10 s for the consumer
ADMIN_TIMEOUT = 15.0


async def running_info(api: BrokerApi, group: str, client_id: str) -> RemotingCommand:
    ext = GetConsumerRunningInfoRequestHeader(group, client_id).to_ext_fields()
    return await api.call(RequestCode.GET_CONSUMER_RUNNING_INFO, ext, timeout=ADMIN_TIMEOUT)


async def consume_directly(api: BrokerApi, group: str, client_id: str, msg_id: str) -> RemotingCommand:
    ext = ConsumeMessageDirectlyResultRequestHeader(group, client_id, msg_id).to_ext_fields()
    return await api.call(RequestCode.CONSUME_MESSAGE_DIRECTLY, ext, timeout=ADMIN_TIMEOUT)


async def send_and_consume_directly(cluster: Any, c: PushConsumer, topic: str, body: bytes) -> Any:
    """A tag-B message (the consumers here subscribe to tag A: only 309 brings it to the
    listener) sent, then consumed directly by ``c``; the parsed result."""
    async with Producer(unique("P"), cluster.namesrv) as p:
        sent = await p.send(Message(topic, body, tags="B"))
    async with BrokerApi(cluster.broker) as api:
        resp = await consume_directly(api, c.group, c.instance.client_id, sent.offset_msg_id)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return ConsumeMessageDirectlyResult.from_json(resp.body)


async def start_consumer(cluster: Any, group: str, topic: str, listener: Any, expression: str = "*", **kw: Any):
    c = PushConsumer(
        group, cluster.namesrv, listener=listener, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **kw
    )
    c.subscribe(topic, expression)
    await c.start()
    return c


@contextlib.asynccontextmanager
async def consumer_on_new_topic(
    cluster: Any, name: str, queues: int, listener: Any, expression: str = "*"
) -> AsyncIterator[tuple[str, str, PushConsumer]]:
    """A new topic ``<name>...`` of ``queues`` queues and a started push consumer of group
    ``<name>Group...`` on it: (topic, group, consumer), shut down on the way out."""
    topic, group = unique(name), unique(name + "Group")
    await create_topic(cluster.namesrv, cluster.broker, topic, queues)
    c = await start_consumer(cluster, group, topic, listener, expression)
    try:
        yield topic, group, c
    finally:
        await c.shutdown()


async def test_running_info_reports_subscription_and_held_queues(cluster):
    topic, group = unique("RunInfo"), unique("RunInfoGroup")
    await create_topic(cluster.namesrv, cluster.broker, topic, 4)
    async with Producer(unique("P"), cluster.namesrv) as p:
        for i in range(12):
            await p.send(Message(topic, b"m%d" % i), queue=MessageQueue(topic, "broker-a", i % 4))
    got = Collector()
    c = await start_consumer(cluster, group, topic, got)
    try:
        await wait_until(lambda: len(got.msgs) == 12, what="12 messages consumed")
        client_id = c.instance.client_id
        queues = {MessageQueue(topic, "broker-a", q) for q in range(4)}

        async with BrokerApi(cluster.broker) as api:

            async def info_settled() -> ConsumerRunningInfo | None:
                resp = await running_info(api, group, client_id)
                assert resp.code == ResponseCode.SUCCESS, resp.remark
                info = ConsumerRunningInfo.from_json(resp.body)
                held = {mq: pq.commit_offset for mq, pq in info.mq_table.items() if mq.topic == topic}
                return info if set(held) == queues and sum(held.values()) == 12 else None

            await wait_until(info_settled, what="the 4 queues held with their 12 consumed offsets")
            info = await info_settled()
        assert info is not None
        assert {(s.topic, s.sub_string) for s in info.subscription_set} == {(topic, "*"), (retry_topic(group), "*")}
        assert retry_topic(group) in {mq.topic for mq in info.mq_table}
        for mq in queues:
            pq = info.mq_table[mq]
            assert pq.commit_offset == 3 and not pq.droped and pq.last_pull_timestamp > 0
        props = info.properties
        assert props["consumerGroup"] == group
        assert props[PROP_CONSUME_TYPE] == "CONSUME_PASSIVELY"
        assert props[PROP_CONSUME_ORDERLY] == "false"
        assert props[PROP_NAMESERVER_ADDR] == cluster.namesrv + ";"
        assert int(props[PROP_CONSUMER_START_TIMESTAMP]) > 0
        assert set(info.status_table) == {topic, retry_topic(group)}
        # live rates of the last minute: 12 pulled and consumed just now
        status = info.status_table[topic]
        assert status.pull_tps > 0 and status.consume_ok_tps > 0 and status.pull_rt >= 0
        assert (status.consume_failed_tps, status.consume_failed_msgs) == (0.0, 0)
    finally:
        await c.shutdown()


async def test_consume_message_directly_through_the_listener(cluster):
    got = Collector()
    async with consumer_on_new_topic(cluster, "Direct", 2, got, "A") as (topic, _, c):
        result = await send_and_consume_directly(cluster, c, topic, b"direct-body")
        assert result.consume_result is CMResult.CR_SUCCESS
        assert (result.order, result.auto_commit) == (False, True)
        assert got.bodies() == [b"direct-body"]
        assert got.msgs[0].tags == "B" and got.msgs[0].topic == topic


@pytest.mark.parametrize(
    "listener_result, expected",
    [
        (ConsumeOrderlyResult.SUCCESS, CMResult.CR_SUCCESS),
        (ConsumeOrderlyResult.SUSPEND_CURRENT_QUEUE_A_MOMENT, CMResult.CR_LATER),
        (None, CMResult.CR_RETURN_NULL),
        (RuntimeError("listener broke"), CMResult.CR_THROW_EXCEPTION),
    ],
)
async def test_consume_message_directly_orderly(cluster, listener_result, expected):
    topic, group = unique("DirectOrderly"), unique("DirectOrderlyGroup")
    await create_topic(cluster.namesrv, cluster.broker, topic, 2)
    seen: list[bytes] = []

    def listener(msgs, ctx):
        seen.extend(m.body for m in msgs)
        if isinstance(listener_result, Exception):
            raise listener_result
        return listener_result

    c = PushConsumer(group, cluster.namesrv, consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET)
    c.register_message_listener_orderly(listener)
    c.subscribe(topic, "A")
    await c.start()
    try:
        result = await send_and_consume_directly(cluster, c, topic, b"orderly-direct")
        assert result.order is True
        assert result.consume_result is expected
        assert seen == [b"orderly-direct"]
        if expected is CMResult.CR_THROW_EXCEPTION:
            assert "listener broke" in (result.remark or "")
    finally:
        await c.shutdown()


async def test_concurrent_listener_later_is_reported_not_retried(cluster):
    got = Collector(ConsumeResult.RECONSUME_LATER)
    async with consumer_on_new_topic(cluster, "DirectLater", 1, got, "A") as (topic, group, c):
        result = await send_and_consume_directly(cluster, c, topic, b"later")
        assert result.consume_result is CMResult.CR_LATER
        # a direct consumption is outside the pull flow: nothing goes to the retry topic
        async with BrokerApi(cluster.broker) as api:
            assert await api.max_offset(retry_topic(group), 0) == 0


async def test_consumer_gone_is_not_online(cluster):
    topic, group = unique("Gone"), unique("GoneGroup")
    await create_topic(cluster.namesrv, cluster.broker, topic, 1)
    c = await start_consumer(cluster, group, topic, Collector())
    client_id = c.instance.client_id
    await c.shutdown()
    async with BrokerApi(cluster.broker) as api:
        resp = await running_info(api, group, client_id)
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark == f"The Consumer <{group}> <{client_id}> not online"
        resp = await running_info(api, unique("NeverGroup"), "10.0.0.1@1")
        assert resp.code == ResponseCode.SYSTEM_ERROR and "not online" in resp.remark


async def test_consumer_whose_connection_died_is_not_online(cluster):
    """A consumer known only by a heartbeat whose connection then drops (a killed process)."""
    topic, group = unique("Died"), unique("DiedGroup")
    await create_topic(cluster.namesrv, cluster.broker, topic, 1)
    client_id = "127.0.0.9@died"
    api = BrokerApi(cluster.broker)
    assert (await api.heartbeat(client_id, [(group, [(topic, "*")])])).code == ResponseCode.SUCCESS
    await api.close()
    async with BrokerApi(cluster.broker) as admin:

        async def answered_not_online() -> bool:
            resp = await running_info(admin, group, client_id)
            return resp.code == ResponseCode.SYSTEM_ERROR and resp.remark == (
                f"The Consumer <{group}> <{client_id}> not online"
            )

        # the broker drops the channel when it sees the connection close
        await wait_until(answered_not_online, what="the closed consumer reported not online")


async def test_consumer_that_does_not_answer_times_out(cluster):
    """A consumer that is connected but never answers: CONSUME_MSG_TIMEOUT, within the
    admin's own timeout (the broker gives up after 10 s)."""
    topic, group = unique("Mute"), unique("MuteGroup")
    await create_topic(cluster.namesrv, cluster.broker, topic, 1)
    client_id = "127.0.0.9@mute"
    asked = asyncio.Event()

    def never_answer(conn, cmd):
        asked.set()
        return None  # taken over, never answered

    mute = RemotingClient()
    mute.register_processor(RequestCode.GET_CONSUMER_RUNNING_INFO, never_answer)
    try:
        api = BrokerApi(cluster.broker, client=mute)
        assert (await api.heartbeat(client_id, [(group, [(topic, "*")])])).code == ResponseCode.SUCCESS
        async with BrokerApi(cluster.broker) as admin:
            resp = await running_info(admin, group, client_id)
        assert asked.is_set()
        assert resp.code == ResponseCode.CONSUME_MSG_TIMEOUT, resp.remark
        assert resp.remark.startswith(f"consumer <{group}> <{client_id}> Timeout: ")
    finally:
        await mute.close()


async def test_client_answers_unknown_group_as_java(cluster):
    """The client side of both codes for a group this client does not have (the broker
    only relays to a group's own clients, so the handler is asked directly)."""
    async with consumer_on_new_topic(cluster, "Unknown", 1, Collector()) as (topic, _, c):
        async with Producer(unique("P"), cluster.namesrv) as p:
            sent = await p.send(Message(topic, b"x"))
        async with BrokerApi(cluster.broker) as api:
            offset = decode_message_id(sent.offset_msg_id)[2]
            stored = (await api.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)})).body
        handler = ConsumerCallHandler(c.instance.consumer_table, lambda: [])
        other = unique("NotHere")
        ext = GetConsumerRunningInfoRequestHeader(other, c.instance.client_id).to_ext_fields()
        resp = await handler.get_consumer_running_info(None, RemotingCommand(307, ext_fields=ext))
        assert (resp.code, resp.remark) == (
            ResponseCode.SYSTEM_ERROR,
            f"The Consumer Group <{other}> not exist in this consumer",
        )
        ext = ConsumeMessageDirectlyResultRequestHeader(
            other, c.instance.client_id, sent.offset_msg_id, "broker-a"
        ).to_ext_fields()
        resp = await handler.consume_message_directly(None, RemotingCommand(309, ext_fields=ext, body=stored))
        assert (resp.code, resp.remark) == (
            ResponseCode.SYSTEM_ERROR,
            f"The Consumer Group <{other}> not exist in this consumer",
        )


async def test_rmq_admin_consumer_progress_shows_the_client_holding_each_queue(cluster):
    topic, group = unique("AdminHolders"), unique("AdminHoldersGroup")
    await create_topic(cluster.namesrv, cluster.broker, topic, 4)
    async with Producer(unique("P"), cluster.namesrv) as p:
        for i in range(4):
            await p.send(Message(topic, b"m%d" % i), queue=MessageQueue(topic, "broker-a", i))
    got = Collector()
    c = await start_consumer(cluster, group, topic, got)
    try:
        await wait_until(lambda: len(got.msgs) == 4, what="4 messages consumed")
        ip = c.instance.client_id.split("@")[0]

        async def progress() -> dict | None:
            r = await asyncio.to_thread(admin, "consumerProgress", "-g", group, "--json", "-n", cluster.namesrv)
            if r.rc != 0:  # no committed offset yet: "has no consume stats", as mqadmin's 206
                assert "has no consume stats" in r.err, r
                return None
            rows = [q for q in r.json()["queues"] if q["topic"] == topic]
            return r.json() if len(rows) == 4 and all(q["clientIp"] == ip for q in rows) else None

        # the group's offsets reach the broker within its 5 s persist interval
        await wait_until(progress, 30, what="consumerProgress with the client's IP on every queue")
        r = await asyncio.to_thread(admin, "consumerProgress", "-g", group, "-n", cluster.namesrv)
        rows = [ln.split() for ln in r.out.splitlines() if ln.startswith(topic + " ")]
        assert len(rows) == 4 and all(row[5] == ip for row in rows), r.out
    finally:
        await c.shutdown()


async def test_rmq_admin_query_msg_by_id_consumes_directly(cluster):
    got = Collector()
    # subscribed to tag A: the tag-B message is not pulled
    async with consumer_on_new_topic(cluster, "AdminDirect", 1, got, "A") as (topic, group, c):
        async with Producer(unique("P"), cluster.namesrv) as p:
            sent = await p.send(Message(topic, b"admin-direct", tags="B"))
        args = ("queryMsgById", "-i", sent.offset_msg_id, "-g", group, "-d", c.instance.client_id)
        r = await asyncio.to_thread(admin, *args, "-n", cluster.namesrv)
        assert r.rc == 0, r
        assert re.fullmatch(
            r"ConsumeMessageDirectlyResult \[order=false, autoCommit=true, consumeResult=CR_SUCCESS, "
            r"remark=null, spentTimeMills=\d+\]\n",
            r.out,
        ), r.out
        assert got.bodies() == [b"admin-direct"]
        doc = (await asyncio.to_thread(admin, *args, "--json", "-n", cluster.namesrv)).json()
        assert (doc["msgId"], doc["consumeResult"]) == (sent.offset_msg_id, "CR_SUCCESS")
        assert got.bodies() == [b"admin-direct"] * 2


async def test_lite_pull_consumer_reports_subscriptions_only_and_cannot_consume_directly(cluster):
    topic, group = unique("Lite"), unique("LiteGroup")
    await create_topic(cluster.namesrv, cluster.broker, topic, 2)
    c = LitePullConsumer(group, cluster.namesrv)
    c.subscribe(topic, "*")
    await c.start()
    try:
        async with Producer(unique("P"), cluster.namesrv) as p:
            sent = await p.send(Message(topic, b"lite"))
        async with BrokerApi(cluster.broker) as api:
            resp = await running_info(api, group, c.instance.client_id)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            info = ConsumerRunningInfo.from_json(resp.body)
            # DefaultLitePullConsumerImpl.consumerRunningInfo: properties and subscriptions only
            assert info.properties[PROP_CONSUME_TYPE] == "CONSUME_ACTIVELY"
            assert info.properties["consumerGroup"] == group and info.properties["autoCommit"] == "true"
            assert [s.topic for s in info.subscription_set] == [topic]
            assert info.mq_table == {} and info.status_table == {}
            resp = await consume_directly(api, group, c.instance.client_id, sent.offset_msg_id)
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert "is a pull consumer" in resp.remark
    finally:
        await c.shutdown()
