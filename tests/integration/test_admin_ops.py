"""`rmq admin` operations commands against real processes (one cluster for the module:
two NameServers and a broker registered with both, a live producer, a live consumer
group and one that went offline behind): consumerProgress, consumerConnection,
producerConnection, queryMsgById/ByKey/ByOffset, updateSubGroup, deleteSubGroup,
updateBrokerConfig, getBrokerConfig, wipeWritePerm, addWritePerm, deleteTopic.

Each command: the table (mqadmin's layout), --json, and an error case (one line on
stderr, exit 1). Tests run in file order; the destructive ones come last.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgpack
import pytest

from rmq.client import ConsumeFromWhere, ConsumeResult, Message, MQClientAPI, Producer, PushConsumer
from rmq.protocol.bodies import ConsumeStats, TopicConfig, loads_fastjson
from rmq.protocol.codes import RequestCode
from rmq.remoting.client import RemotingClient
from tests.harness import start_broker, start_namesrv
from tests.integration.admin_util import Clients, admin, closed_port, failed, header_cols, ok

pytestmark = pytest.mark.timeout(180)

TOPIC = "OpsTopic"
PRODUCER, ONLINE, LAGGING = "ops-producer", "ops-online", "ops-lagging"


async def _wait(pred, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def _setup(c: SimpleNamespace) -> None:
    async with RemotingClient() as rc:
        api = MQClientAPI(rc, [c.ns1])
        await api.create_topic(c.broker, TopicConfig(TOPIC, 4, 4, 6))
        while await api.get_topic_route_info(TOPIC) is None:
            await asyncio.sleep(0.1)
    c.producer = Producer(PRODUCER, c.namesrvs)
    await c.producer.start()
    c.sent = []
    for i in range(30):
        r = await c.producer.send(Message(TOPIC, f"ops-{i}".encode(), tags="TagA", keys=[f"ops-key-{i}"]))
        c.sent.append(r)
    # a group that consumed all 30, went away, and is now 12 behind
    got: list = []
    lag = PushConsumer(
        LAGGING,
        c.namesrvs,
        listener=lambda m, ctx: (got.extend(m), ConsumeResult.SUCCESS)[1],
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    lag.subscribe(TOPIC)
    await lag.start()
    await _wait(lambda: len(got) >= 30, "lagging group consumed the first 30")
    await lag.shutdown()
    for i in range(30, 42):
        c.sent.append(await c.producer.send(Message(TOPIC, f"late-{i}".encode(), tags="TagB", keys=[f"ops-key-{i}"])))
    c.online_got = []
    c.online = PushConsumer(
        ONLINE,
        c.namesrvs,
        listener=lambda m, ctx: (c.online_got.extend(m), ConsumeResult.SUCCESS)[1],
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    c.online.subscribe(TOPIC, "TagA || TagB")
    await c.online.start()
    await _wait(lambda: len(c.online_got) >= 42, "online group consumed all 42")
    # ... and its offsets reached the broker (the client commits them every few seconds)
    async with RemotingClient() as rc:
        api = MQClientAPI(rc, [c.ns1])
        deadline = time.monotonic() + 30
        while True:
            r = await api.raw(c.broker, RequestCode.GET_CONSUME_STATS, {"consumerGroup": ONLINE, "topic": TOPIC})
            if ConsumeStats.from_json(r.body).compute_total_diff() == 0:
                break
            assert time.monotonic() < deadline, "online group's offsets never committed"
            await asyncio.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[SimpleNamespace]:
    d = tmp_path_factory.mktemp("admin-ops")
    with (
        start_namesrv(d, name="ns1") as ns1,
        start_namesrv(d, name="ns2") as ns2,
        start_broker(d, f"{ns1.addr};{ns2.addr}", name="broker-a") as br,
    ):
        c = SimpleNamespace(
            ns1=ns1.addr, ns2=ns2.addr, namesrvs=f"{ns1.addr};{ns2.addr}", broker=br.addr, br=br, clients=Clients()
        )
        try:
            c.clients.run(_setup(c), 90)
            yield c
        finally:
            for name in ("online", "producer"):
                obj = getattr(c, name, None)
                if obj is not None:
                    c.clients.run(obj.shutdown(), 30)
            c.clients.close()


def broker_call(c: SimpleNamespace, code: int, ext: dict | None = None, body: bytes | None = None):
    async def go():
        async with RemotingClient() as rc:
            return await MQClientAPI(rc, [c.ns1]).raw(c.broker, code, ext, body)

    return asyncio.run(go())


def wait_offsets(c: SimpleNamespace, pred, what: str, timeout: float = 15) -> None:
    """Until pred(topic@group keys of the broker's persisted consumer offsets)."""
    path = c.br.store_dir / "config" / "consumerOffset.msgpack"
    deadline = time.monotonic() + timeout
    while True:
        keys = set(msgpack.unpackb(path.read_bytes(), strict_map_key=False)["offsetTable"]) if path.exists() else set()
        if pred(keys):
            return
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def aligned(table: str) -> list[list[str]]:
    """Rows of a table whose cells start at the header's columns; asserts the alignment."""
    lines = table.splitlines()
    cols = header_cols(lines[0])
    rows = []
    for ln in lines[1:]:
        cells = []
        ln = ln.ljust(cols[-1][0])  # an empty last cell leaves no blanks
        for i, (start, _) in enumerate(cols):
            end = cols[i + 1][0] if i + 1 < len(cols) else len(ln)
            assert start == 0 or ln[start - 1] == " ", (ln, start)
            cells.append(ln[start:end].strip())
        rows.append(cells)
    return rows


# =========================================================================== consumers
def test_consumer_progress(cluster):
    c = cluster
    r = ok("consumerProgress", "-g", LAGGING, "-n", c.ns1)
    table, _, summary = r.out.partition("\n\n")
    assert [t for _, t in header_cols(table.splitlines()[0])] == [
        "#Topic",
        "#Broker Name",
        "#QID",
        "#Broker Offset",
        "#Consumer Offset",
        "#Client IP",
        "#Diff",
        "#LastTime",
    ]
    rows = [row for row in aligned(table) if row[0] == TOPIC]
    assert [int(row[2]) for row in rows] == [0, 1, 2, 3]
    assert sum(int(row[3]) for row in rows) == 42
    assert sum(int(row[4]) for row in rows) == 30
    assert sum(int(row[6]) for row in rows) == 12
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", row[7]) for row in rows)
    assert "Diff Total: 12" in summary and "Consume TPS: " in summary

    doc = ok("consumerProgress", "-g", LAGGING, "--json", "-n", c.ns1).json()
    assert doc["diffTotal"] == 12
    q = [x for x in doc["queues"] if x["topic"] == TOPIC]
    assert sum(x["diff"] for x in q) == 12 and all(x["diff"] == x["brokerOffset"] - x["consumerOffset"] for x in q)

    # every group: the live one with its connection, the other offline
    rows = {row[0]: row for row in aligned(ok("consumerProgress", "-n", c.ns1).out)}
    assert rows[ONLINE][1:5] == ["1", "V4_9_8", "PUSH", "CLUSTERING"]
    assert rows[LAGGING][1:3] == ["0", "OFFLINE"] and rows[LAGGING][6] == "12"

    assert failed("consumerProgress", "-g", "no-such-group", "-n", c.ns1) == (
        "consumer group no-such-group not found: the NameServer has no route for its retry "
        "topic %RETRY%no-such-group (no consumer of it ever connected)"
    )


def test_consumer_connection(cluster):
    c = cluster
    lines = ok("consumerConnection", "-g", ONLINE, "-n", c.ns1).out.splitlines()
    m = re.fullmatch(r"001  (\S+) +(127\.0\.0\.1:\d+) +PYTHON   V4_9_8", lines[0])
    assert m and lines[0].index(m.group(2)) == 5 + 32 + 1, lines[0]
    assert lines[1:3] == ["", "Below is subscription:"]
    subs = {ln.split()[2]: ln for ln in lines[3:5]}
    assert re.fullmatch(rf"00\d  Topic: {TOPIC} +SubExpression: TagA \|\| TagB", subs[TOPIC])
    assert lines[-3:] == [
        "ConsumeType: CONSUME_PASSIVELY",
        "MessageModel: CLUSTERING",
        "ConsumeFromWhere: CONSUME_FROM_FIRST_OFFSET",
    ]
    doc = ok("consumerConnection", "--json", "-g", ONLINE, "-n", c.ns1).json()
    assert doc["connections"][0]["clientId"] == m.group(1)
    assert doc["connections"][0]["version"] == 409
    assert {s["topic"]: s["subExpression"] for s in doc["subscriptions"]}[TOPIC] == "TagA || TagB"
    assert failed("consumerConnection", "-g", LAGGING, "-n", c.ns1).startswith(
        f"consumer group {LAGGING} is not online: no consumer of it is connected"
    )


def test_producer_connection(cluster):
    c = cluster
    deadline = time.monotonic() + 40  # producers announce themselves on their heartbeat
    while True:
        r = admin("producerConnection", "-g", PRODUCER, "-t", TOPIC, "-n", c.ns1)
        if r.rc == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert r.rc == 0, r
    assert re.fullmatch(r"0001  \S+ +127\.0\.0\.1:\d+ +PYTHON   V4_9_8\n", r.out), r.out
    doc = ok("producerConnection", "-g", PRODUCER, "-t", TOPIC, "--json", "-n", c.ns1).json()
    assert doc["producerGroup"] == PRODUCER and len(doc["connections"]) == 1
    assert failed("producerConnection", "-g", "nobody", "-t", TOPIC, "-n", c.ns1) == (
        f"producer group nobody is not online: no producer of it is connected to the brokers of topic {TOPIC}"
    )
    assert failed("producerConnection", "-g", PRODUCER, "-t", "NoSuchTopic", "-n", c.ns1) == (
        "No topic route info in name server for the topic: NoSuchTopic"
    )


# =========================================================================== messages
def test_query_msg_by_key_id_and_offset(cluster):
    c = cluster
    sent = c.sent[3]
    r = ok("queryMsgByKey", "-t", TOPIC, "-k", "ops-key-3", "-n", c.ns1)
    header, row = r.out.splitlines()
    assert [t for _, t in header_cols(header)] == ["#Message ID", "#QID", "#Offset"]
    assert len(header) == 50 + 1 + 4 + 1 + 40
    assert row.split() == [sent.msg_id, str(sent.message_queue.queue_id), str(sent.queue_offset)]
    doc = ok("queryMsgByKey", "--json", "-t", TOPIC, "-k", "ops-key-3", "-n", c.ns1).json()
    assert doc["messages"][0]["offsetMsgId"] == sent.offset_msg_id
    assert failed("queryMsgByKey", "-t", TOPIC, "-k", "no-such-key", "-n", c.ns1) == (
        f"no message with key no-such-key in topic {TOPIC}"
    )

    out = ok("queryMsgById", "-i", sent.offset_msg_id, "-f", "UTF-8", "-n", c.ns1).out
    fields = dict(re.findall(r"^(\S[^:]*:) +(.*)$", out, re.M))
    assert fields["OffsetID:"] == sent.offset_msg_id
    assert fields["Topic:"] == TOPIC and fields["Tags:"] == "[TagA]"
    assert fields["Keys:"] == "[ops-key-3]" and fields["Message Body:"] == "ops-3"
    assert fields["Queue Offset:"] == str(sent.queue_offset)
    assert fields["Store Host:"] == c.broker
    assert f"UNIQ_KEY={sent.msg_id}" in fields["Properties:"]
    tracks = re.findall(
        r"^MessageTrack \[consumerGroup=(\S+), trackType=(\w+), "
        r"exceptionDesc=(.*)\]$",
        out,
        re.M,
    )
    by_group = {g: t for g, t, _ in tracks}
    assert by_group[ONLINE] == "CONSUMED" and by_group[LAGGING] == "NOT_ONLINE"
    # a client message id with its topic; --json
    doc = ok("queryMsgById", "--json", "-i", sent.msg_id, "-t", TOPIC, "-n", c.ns1).json()
    assert doc["offsetMsgId"] == sent.offset_msg_id and doc["msgId"] == sent.msg_id
    assert {t["consumerGroup"]: t["trackType"] for t in doc["tracks"]}[ONLINE] == "CONSUMED"
    assert "give its topic with -t" in failed("queryMsgById", "-i", sent.msg_id, "-n", c.ns1)
    assert failed("queryMsgById", "-i", "XYZ", "-n", c.ns1).startswith("XYZ is not an offset message id")

    q, off = sent.message_queue.queue_id, sent.queue_offset
    out = ok("queryMsgByOffset", "-t", TOPIC, "-b", "broker-a", "-i", str(q), "-o", str(off), "-n", c.ns1).out
    assert f"OffsetID:            {sent.offset_msg_id}" in out.splitlines()
    doc = ok(
        "queryMsgByOffset", "--json", "-t", TOPIC, "-b", "broker-a", "-i", str(q), "-o", str(off), "-n", c.ns1
    ).json()
    assert doc["queueOffset"] == off and doc["keys"] == "ops-key-3"
    assert failed("queryMsgByOffset", "-t", TOPIC, "-b", "broker-a", "-i", str(q), "-o", "999", "-n", c.ns1).startswith(
        f"no message at offset 999 of {TOPIC} queue broker-a:{q}"
    )
    assert failed("queryMsgByOffset", "-t", TOPIC, "-b", "broker-x", "-i", "0", "-o", "0", "-n", c.ns1) == (
        f"broker broker-x is not in the route of topic {TOPIC} (its brokers: broker-a)"
    )


# =========================================================================== broker config
def test_get_and_update_broker_config(cluster):
    c = cluster
    lines = ok("getBrokerConfig", "-b", c.broker).out.splitlines()
    assert lines[0] == f"============{c.broker}============"
    kv = {}
    for ln in lines[1:]:
        assert ln[50:53] == "=  ", ln
        kv[ln[:50].rstrip()] = ln[53:]
    assert list(kv) == sorted(kv) and len(kv) > 80
    assert kv["brokerName"] == "broker-a" and kv["deleteWhen"] == "04"
    assert kv["diskSpaceWarningLevelRatio"] == "90" and kv["fileReservedTime"] == "72"
    cl = ok("getBrokerConfig", "-c", "TestCluster", "-n", c.ns1).out
    assert cl.startswith(f"============Master: {c.broker}============\n")
    assert ok("getBrokerConfig", "--json", "-b", c.broker).json()[c.broker]["brokerId"] == "0"

    # at run time and persisted to the config file
    r = ok("updateBrokerConfig", "-b", c.broker, "-k", "fileReservedTime", "-v", "0.5")
    assert r.out == f"update broker config success, {c.broker} (persisted to broker.conf)\n"
    assert ok("getBrokerConfig", "--json", "-b", c.broker).json()[c.broker]["fileReservedTime"] == "0.5"
    assert "fileReservedTime=0.5\n" in Path(c.br.conf_path).read_text()
    # a key the running broker does not read again: the file only, said so
    doc = ok(
        "updateBrokerConfig", "--json", "-c", "TestCluster", "-k", "maxMessageSize", "-v", "2097152", "-n", c.ns1
    ).json()
    assert doc["brokers"][0]["remark"].startswith("takes effect after a restart: maxMessageSize")
    assert "maxMessageSize=2097152\n" in Path(c.br.conf_path).read_text()
    assert ok("getBrokerConfig", "--json", "-b", c.broker).json()[c.broker]["maxMessageSize"] == str(4 * 1024 * 1024)
    # brokerPermission takes effect at once: the broker registers read-only queue data
    ok("updateBrokerConfig", "-b", c.broker, "-k", "brokerPermission", "-v", "4")
    try:
        assert '"perm":4' in ok("topicRoute", "-t", TOPIC, "-n", c.ns2).out
    finally:
        ok("updateBrokerConfig", "-b", c.broker, "-k", "brokerPermission", "-v", "6")
    assert '"perm":6' in ok("topicRoute", "-t", TOPIC, "-n", c.ns2).out

    prefix = f"broker {c.broker} answered SYSTEM_ERROR (1): "
    assert failed("updateBrokerConfig", "-b", c.broker, "-k", "deleteWhen", "-v", "25") == (
        prefix + "deleteWhen: 25 is not an hour of the day (00-23)"
    )
    assert failed("updateBrokerConfig", "-b", c.broker, "-k", "noSuchKey", "-v", "1") == (
        prefix + "noSuchKey: not a broker config key"
    )
    assert (
        failed("updateBrokerConfig", "-b", c.broker, "-k", "fileReservedTime", "-v", "soon")
        == prefix + "fileReservedTime: expected a number, got 'soon'"
    )
    dead = f"127.0.0.1:{closed_port()}"
    assert failed("getBrokerConfig", "-b", dead).startswith(f"connect to {dead} failed")
    assert failed("updateBrokerConfig", "-c", "NoCluster", "-k", "a", "-v", "b", "-n", c.ns1).startswith(
        "cluster NoCluster not found"
    )


# =========================================================================== NameServer perms
def test_wipe_and_add_write_perm(cluster):
    c = cluster
    r = ok("wipeWritePerm", "-b", "broker-a", "-n", c.namesrvs)
    lines = r.out.splitlines()
    assert [re.sub(r"OK, \d+$", "OK, N", ln) for ln in lines] == [
        f"wipe write perm of broker[broker-a] in name server[{ns}] OK, N" for ns in (c.ns1, c.ns2)
    ]
    assert all(int(ln.rsplit(" ", 1)[1]) >= 1 for ln in lines)
    for ns in (c.ns1, c.ns2):
        qd = ok("topicRoute", "-t", TOPIC, "--json", "-n", ns).json()["queueDatas"]
        assert qd[0]["perm"] == 4, ns  # PERM_WRITE cleared, PERM_READ kept
    doc = ok("addWritePerm", "--json", "-b", "broker-a", "-n", c.namesrvs).json()
    assert [x["nameServer"] for x in doc["nameServers"]] == [c.ns1, c.ns2]
    assert all(x["ok"] and x["topicCount"] >= 1 for x in doc["nameServers"])
    for ns in (c.ns1, c.ns2):
        qd = ok("topicRoute", "-t", TOPIC, "--json", "-n", ns).json()["queueDatas"]
        assert qd[0]["perm"] == 6, ns
    assert failed("wipeWritePerm", "-b", "broker-zz", "-n", c.ns1) == (
        f"broker broker-zz is not registered with NameServer {c.ns1} (known: broker-a)"
    )


def test_get_and_update_namesrv_config(cluster):
    c = cluster
    r = ok("getNamesrvConfig", "-n", c.namesrvs)
    lines = r.out.splitlines()
    assert f"============{c.ns1}============" in lines and f"============{c.ns2}============" in lines
    assert any(re.fullmatch(r"listenPort\s+=  \d+", ln) for ln in lines)
    doc = ok("getNamesrvConfig", "--json", "-n", c.namesrvs).json()
    for ns in (c.ns1, c.ns2):
        assert doc[ns]["listenPort"] == ns.rsplit(":", 1)[1] and doc[ns]["orderMessageEnable"] == "false"
        assert {"rocketmqHome", "kvConfigPath", "configStorePath", "serverWorkerThreads"} <= set(doc[ns])
    try:
        r = ok("updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true", "-n", c.namesrvs)
        assert r.out.splitlines() == [
            f"update name server config success! {c.ns1}",
            f"update name server config success! {c.ns2}",
            "orderMessageEnable : true",
        ]
        doc = ok("getNamesrvConfig", "--json", "-n", c.namesrvs).json()
        assert doc[c.ns1]["orderMessageEnable"] == doc[c.ns2]["orderMessageEnable"] == "true"
    finally:
        ok("updateNamesrvConfig", "--json", "-k", "orderMessageEnable", "-v", "false", "-n", c.namesrvs)
    assert failed("updateNamesrvConfig", "-k", "kvConfigPath", "-v", "/tmp/x", "-n", c.ns1).endswith(
        "answered NO_PERMISSION (16): Can not update config in black list: kvConfigPath"
    )
    assert "bogusKey: not a NameServer config key" in failed(
        "updateNamesrvConfig", "-k", "bogusKey", "-v", "1", "-n", c.ns1
    )


# =========================================================================== subscription groups
def _groups(c) -> dict[str, Any]:
    r = broker_call(c, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    return loads_fastjson(r.body)["subscriptionGroupTable"]


def test_update_and_delete_sub_group(cluster):
    c = cluster
    r = ok("updateSubGroup", "-b", c.broker, "-g", "ops-sub", "-q", "2", "-r", "5", "-d", "true")
    assert r.out == (
        f"create subscription group to {c.broker} success.\n"
        "SubscriptionGroupConfig [groupName=ops-sub, consumeEnable=true, "
        "consumeFromMinEnable=false, consumeBroadcastEnable=true, retryQueueNums=2, "
        "retryMaxTimes=5, brokerId=0, whichBrokerWhenConsumeSlowly=1, "
        "notifyConsumerIdsChangedEnable=true]\n"
    )
    g = _groups(c)["ops-sub"]
    assert (g["retryQueueNums"], g["retryMaxTimes"], g["consumeBroadcastEnable"]) == (2, 5, True)
    doc = ok("updateSubGroup", "--json", "-c", "TestCluster", "-g", "ops-sub", "-s", "false", "-n", c.ns1).json()
    assert doc["brokers"] == [c.broker] and doc["subscriptionGroupConfig"]["consumeEnable"] is False
    assert _groups(c)["ops-sub"]["consumeEnable"] is False
    # RocketMQ 5's -o: the group pops orderly
    doc = ok("updateSubGroup", "--json", "-b", c.broker, "-g", "ops-sub", "-o", "true", "-n", c.ns1).json()
    assert doc["subscriptionGroupConfig"]["consumeMessageOrderly"] is True
    assert _groups(c)["ops-sub"]["consumeMessageOrderly"] is True
    assert admin("updateSubGroup", "-b", c.broker, "-g", "x", "-s", "maybe").rc == 2
    assert failed("updateSubGroup", "-b", c.broker, "-g", "bad group!").startswith(
        f"broker {c.broker} answered SYSTEM_ERROR (1): SubscriptionGroupConfig.groupName"
    )

    assert ok("deleteSubGroup", "-b", c.broker, "-g", "ops-sub").out == (
        f"delete subscription group [ops-sub] from broker [{c.broker}] success.\n"
    )
    assert "ops-sub" not in _groups(c)
    assert failed("deleteSubGroup", "-b", c.broker, "-g", "ops-sub") == (
        f"subscription group ops-sub not found on broker {c.broker}"
    )

    # a whole cluster, with the group's retry topic and its offsets
    doc = ok("deleteSubGroup", "--json", "-c", "TestCluster", "-g", LAGGING, "-r", "true", "-n", c.namesrvs).json()
    assert doc == {"groupName": LAGGING, "brokers": [c.broker], "deletedTopics": [f"%RETRY%{LAGGING}"]}
    assert LAGGING not in _groups(c)
    for ns in (c.ns1, c.ns2):
        assert "No topic route info" in failed("topicRoute", "-t", f"%RETRY%{LAGGING}", "-n", ns)
    wait_offsets(c, lambda keys: not any(k.endswith("@" + LAGGING) for k in keys), "the group's offsets removed")


# =========================================================================== deleteTopic
def test_delete_topic(cluster):
    c = cluster
    gone = "OpsGone"
    ok("updateTopic", "-c", "TestCluster", "-t", gone, "-r", "2", "-w", "2", "-n", c.ns1)

    async def fill() -> None:
        for i in range(4):
            await c.producer.send(Message(gone, b"bye %d" % i))

    c.clients.run(fill())
    cq = c.br.store_dir / "consumequeue" / gone
    assert cq.is_dir()
    broker_call(
        c,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "gone-group", "topic": gone, "queueId": "0", "commitOffset": "1"},
    )
    wait_offsets(c, lambda keys: f"{gone}@gone-group" in keys, "the offset persisted")

    r = ok("deleteTopic", "-t", gone, "-c", "TestCluster", "-n", c.namesrvs)
    assert r.out == (
        f"delete topic [{gone}] from cluster [TestCluster] success.\ndelete topic [{gone}] from NameServer success.\n"
    )
    for ns in (c.ns1, c.ns2):
        assert failed("topicRoute", "-t", gone, "-n", ns) == (
            f"No topic route info in name server for the topic: {gone}"
        )
    assert gone not in loads_fastjson(broker_call(c, RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
    assert not cq.exists(), "its consume queues are gone"
    wait_offsets(c, lambda keys: f"{gone}@gone-group" not in keys, "the topic's offsets removed")

    assert failed("deleteTopic", "-t", gone, "-c", "TestCluster", "-n", c.ns1) == (
        f"No topic route info in name server for the topic: {gone}"
    )
    assert failed("deleteTopic", "-t", TOPIC, "-c", "NoCluster", "-n", c.ns1).startswith("cluster NoCluster not found")
    ok("updateTopic", "-c", "TestCluster", "-t", gone, "-n", c.ns1)
    doc = ok("deleteTopic", "--json", "-t", gone, "-c", "TestCluster", "-n", c.namesrvs).json()
    assert doc == {"topic": gone, "cluster": "TestCluster", "brokers": [c.broker], "nameServers": [c.ns1, c.ns2]}
    # the broker refuses system topics
    assert failed("deleteTopic", "-t", "SCHEDULE_TOPIC_XXXX", "-c", "TestCluster", "-n", c.ns1).endswith(
        "The topic[SCHEDULE_TOPIC_XXXX] is conflict with system topic."
    )
