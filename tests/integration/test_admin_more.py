"""`rmq admin` commands that mirror the rest of mqadmin 4.9.8 (issue 14), against real
processes: a NameServer, master + slave of broker-a, a live producer, a live consumer
group (ONLINE, caught up) and an offline one behind (LAGGING: 5 of each queue's 10
committed).

Each command: what it prints (table or --json) read against the brokers' own state, and,
for one that changes state, the state read back. The commands run in this process
(admin_util.admin_here: rmq.admin.main, output captured) to keep the module quick.
Tests that send messages to TOPIC come last: the backlog figures before them are exact.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from rmq.client import ConsumeFromWhere, ConsumeResult, Message, MessageQueue, MQClientAPI, Producer, PushConsumer
from rmq.protocol.bodies import TopicConfig
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.remoting.client import RemotingClient
from tests.cluster.ha_util import CLUSTER, GROUP, master_conf, slave_conf
from tests.harness import start_broker, start_namesrv
from tests.integration.admin_util import Clients, Run, admin_here

pytestmark = pytest.mark.timeout(240)

TOPIC = "MoreAdminTopic"
PRODUCER, ONLINE, LAGGING = "more-producer", "more-online", "more-lagging"
PER_QUEUE = 10  # 40 messages, k-<i> on queue i % 4 with tag tag-<i % 2>


async def _raw(addr: str, code: int, ext: dict[str, str] | None = None) -> Any:
    async with RemotingClient() as rc:
        return await MQClientAPI(rc, []).raw(addr, code, ext)


def call(addr: str, code: int, ext: dict[str, str] | None = None) -> Any:
    return asyncio.run(_raw(addr, code, ext))


def offsets(addr: str, group: str, topic: str = TOPIC) -> dict[int, int | None]:
    """The group's committed offset of each queue, as the broker answers it."""
    out: dict[int, int | None] = {}
    for q in range(4):
        r = call(addr, RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": str(q)})
        out[q] = int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else None
    return out


def commit(addr: str, group: str, offset: int) -> None:
    for q in range(4):
        ext = {"consumerGroup": group, "topic": TOPIC, "queueId": str(q), "commitOffset": str(offset)}
        assert call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext).code == ResponseCode.SUCCESS


def wait_for(pred: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def ok(*args: str) -> Run:
    r = admin_here(*args)
    assert (r.rc, r.err) == (0, ""), (args, r)
    return r


def js(*args: str) -> Any:
    return ok(*args, "--json").json()


def failed(*args: str, rc: int = 1) -> str:
    r = admin_here(*args)
    assert r.rc == rc and r.out == "", (args, r)
    lines = r.err.strip().splitlines()
    return lines[-1]


async def _start_clients(c: SimpleNamespace) -> None:
    c.producer = Producer(PRODUCER, c.ns)
    await c.producer.start()
    c.uniq = []
    for i in range(4 * PER_QUEUE):
        msg = Message(TOPIC, b"body-%d" % i, tags=f"tag-{i % 2}", keys=f"k-{i}")
        r = await c.producer.send(msg, queue=MessageQueue(TOPIC, GROUP, i % 4))
        c.uniq.append(r.msg_id)
    c.got = []
    c.online = PushConsumer(
        ONLINE,
        c.ns,
        listener=lambda m, ctx: (c.got.extend(m), ConsumeResult.SUCCESS)[1],
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    c.online.subscribe(TOPIC, "*")
    await c.online.start()


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    d = tmp_path_factory.mktemp("admin-more")
    with (
        start_namesrv(d) as ns,
        start_broker(d, ns.addr, GROUP, master_conf()) as m,
        start_broker(d / "slave", ns.addr, GROUP, slave_conf(slaveSyncInterval=500)) as s,
    ):
        c = SimpleNamespace(ns=ns.addr, master=m.addr, slave=s.addr, clients=Clients(), online=None, producer=None)
        try:
            asyncio.run(_create_topic(c.master))
            c.n = ("-n", c.ns)
            ok("updateSubGroup", "-b", c.master, "-g", LAGGING, "-r", "5", *c.n)
            commit(c.master, LAGGING, PER_QUEUE // 2)
            c.clients.run(_start_clients(c), 90)
            c.client_id = c.online.instance.client_id
            wait_for(lambda: len(c.got) >= 4 * PER_QUEUE, "the online group consumed every message")
            wait_for(
                lambda: offsets(c.master, ONLINE) == dict.fromkeys(range(4), PER_QUEUE), "online offsets committed"
            )
            wait_for(lambda: offsets(c.slave, LAGGING) == dict.fromkeys(range(4), 5), "the slave synced the offsets")
            yield c
        finally:
            for obj in (c.online, c.producer):
                if obj is not None:
                    c.clients.run(obj.shutdown(), 30)
            c.clients.close()


async def _create_topic(addr: str) -> None:
    async with RemotingClient() as rc:
        await MQClientAPI(rc, []).create_topic(addr, TopicConfig(TOPIC, 4, 4, 6))


# =========================================================================== stats and clients
@pytest.mark.parametrize("which", ["master", "slave"])
def test_broker_consume_stats(rig, which):
    addr = getattr(rig, which)
    doc = js("brokerConsumeStats", "-b", addr, *rig.n)
    lagging = sorted(
        (q["queueId"], q["brokerOffset"], q["consumerOffset"], q["diff"])
        for q in doc["queues"]
        if q["group"] == LAGGING
    )
    assert lagging == [(q, PER_QUEUE, 5, 5) for q in range(4)], doc
    assert doc["totalDiff"] >= 4 * 5 and doc["brokerAddr"] == addr
    # -l: only queues at least that far behind (the online group is caught up)
    doc = js("brokerConsumeStats", "-b", addr, "-l", "1", *rig.n)
    assert {q["group"] for q in doc["queues"]} == {LAGGING}, doc
    text = ok("brokerConsumeStats", "-b", addr, *rig.n).out
    assert re.search(rf"^{TOPIC}\s+{LAGGING}\s+{GROUP}\s+2\s+{PER_QUEUE}\s+5\s+5\s", text, re.M), text
    assert re.search(r"^Diff Total: \d+$", text, re.M), text


def test_producer_lists_the_live_producer(rig):
    doc = js("producer", "--broker", rig.master, *rig.n)
    (info,) = doc["producers"][PRODUCER]
    assert info["clientId"] == rig.producer.instance.client_id and info["language"] == "PYTHON", doc
    assert re.fullmatch(r"/127\.0\.0\.1:\d+", info["remoteIP"]) and info["lastUpdateTimestamp"] > 0
    text = ok("producer", "--broker", rig.master, *rig.n).out
    assert f"producer group ({PRODUCER}) instances are:" in text and f"clientId={info['clientId']}" in text


def test_consumer_status(rig):
    doc = js("consumerStatus", "-g", ONLINE, *rig.n)
    assert [c["clientId"] for c in doc["clients"]] == [rig.client_id], doc
    held = sorted(q["queueId"] for q in doc["clients"][0]["queues"] if q["topic"] == TOPIC)
    assert held == [0, 1, 2, 3] and doc["sameSubscription"] and doc["rebalanceOk"], doc
    doc = js("consumerStatus", "-g", ONLINE, "-i", rig.client_id, *rig.n)
    held = {(q["topic"], q["queueId"]): q["commitOffset"] for q in doc["queues"] if q["topic"] == TOPIC}
    assert held == {(TOPIC, q): PER_QUEUE for q in range(4)}, doc
    assert doc["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
    text = ok("consumerStatus", "-g", ONLINE, "-i", rig.client_id, *rig.n).out
    assert re.search(rf"^\d{{3}} Topic: {TOPIC}\s+ClassFilter: false\s+SubExpression: \*$", text, re.M), text
    line = failed("consumerStatus", "-g", ONLINE, "-i", "10.0.0.1@gone", *rig.n)
    assert f"the consumer <{ONLINE}> <10.0.0.1@gone> did not answer" in line, line


def test_stats_all(rig):
    doc = js("statsAll", "-t", TOPIC, *rig.n)
    acc = {r["consumerGroup"]: r["accumulation"] for r in doc["stats"]}
    assert acc == {LAGGING: 4 * 5, ONLINE: 0}, doc
    assert re.search(rf"^{TOPIC}\s+{LAGGING}\s+20\s", ok("statsAll", "-t", TOPIC, *rig.n).out, re.M)


@pytest.mark.parametrize("which", ["master", "slave"])
def test_query_cq(rig, which):
    addr = getattr(rig, which)
    doc = js("queryCq", "-t", TOPIC, "-q", "1", "-i", "2", "-c", "3", "-g", LAGGING, "-b", addr, *rig.n)
    assert (doc["minQueueIndex"], doc["maxQueueIndex"]) == (0, PER_QUEUE), doc
    assert doc["filterData"] == f"{LAGGING}@{TOPIC} is not online!"
    assert [u["index"] for u in doc["units"]] == [2, 3, 4]
    phys = [u["physicOffset"] for u in doc["units"]]
    assert phys == sorted(phys) and all(u["physicSize"] > 0 for u in doc["units"])
    # the unit names the message: it is k-<4*index+1> of queue 1
    msg = js("queryMsgByOffset", "-t", TOPIC, "-b", GROUP, "-i", "1", "-o", "2", *rig.n)
    assert msg["commitLogOffset"] == phys[0] and msg["keys"] == "k-9"
    text = ok("queryCq", "-t", TOPIC, "-q", "1", "-i", "2", "-c", "1", *rig.n).out
    assert f"max: {PER_QUEUE}, min: 0" in text and f"physicOffset={phys[0]}," in text, text


# =========================================================================== store maintenance
@pytest.mark.parametrize("command", ["cleanExpiredCQ", "cleanUnusedTopic", "deleteExpiredCommitLog"])
def test_store_maintenance_on_master_and_slave(rig, command):
    assert js(command, "-c", CLUSTER, *rig.n) == {"brokers": [rig.master, rig.slave]}
    assert ok(command, "-b", rig.slave, *rig.n).out == f"{rig.slave}: success\n"
    # a topic that has its config keeps every message, on both
    for addr in (rig.master, rig.slave):
        assert (
            js("queryCq", "-t", TOPIC, "-q", "0", "-i", "0", "-c", "1", "-b", addr, *rig.n)["maxQueueIndex"]
            == PER_QUEUE
        )


# =========================================================================== export
def test_export_metadata_configs_metrics(rig, tmp_path):
    r = ok("exportMetadata", "-c", CLUSTER, "-f", str(tmp_path), *rig.n)
    assert r.out == f"export {tmp_path / 'metadata.json'} success\n"
    doc = json.loads((tmp_path / "metadata.json").read_text())
    assert doc["topicConfigTable"][TOPIC]["readQueueNums"] == 4
    assert doc["subscriptionGroupTable"][LAGGING]["retryMaxTimes"] == 5
    assert "SCHEDULE_TOPIC_XXXX" not in doc["topicConfigTable"] and f"%RETRY%{ONLINE}" not in doc["topicConfigTable"]
    doc = js("exportMetadata", "-b", rig.master, "-s", "-t", "-f", str(tmp_path), *rig.n)
    assert f"%RETRY%{ONLINE}" in doc["topicConfigTable"] and "subscriptionGroupTable" not in doc
    assert json.loads((tmp_path / "topic.json").read_text())["topicConfigTable"] == doc["topicConfigTable"]

    ok("exportConfigs", "-c", CLUSTER, "-f", str(tmp_path), *rig.n)
    doc = json.loads((tmp_path / "configs.json").read_text())
    assert doc["clusterScale"] == {"namesrvSize": 1, "masterBrokerSize": 1, "slaveBrokerSize": 1}
    assert (
        doc["brokerConfigs"][GROUP]["brokerRole"] == "ASYNC_MASTER" and doc["brokerConfigs"][GROUP]["brokerId"] == "0"
    )

    ok("exportMetrics", "-c", CLUSTER, "-f", str(tmp_path), *rig.n)
    doc = json.loads((tmp_path / "metrics.json").read_text())
    quota = doc["evaluateReport"][GROUP]["runtimeQuota"]
    assert quota["oneDayNum"]["normalOneDayInNum"] >= 4 * PER_QUEUE and quota["oneDayNum"]["normalOneDayOutNum"] > 0
    assert quota["topicSize"] > 1 and quota["groupSize"] > 1 and 0 < float(quota["diskRatio"]["commitLogDiskRatio"]) < 1
    assert doc["totalData"]["totalOneDayNum"]["normalOneDayInNum"] == quota["oneDayNum"]["normalOneDayInNum"]
    line = failed("exportConfigs", "-c", CLUSTER, "-f", "/proc/no-such-dir", *rig.n)
    assert "cannot write /proc/no-such-dir/configs.json" in line, line


# =========================================================================== topics and NameServer KV
def _route_perm(rig) -> int:
    (qd,) = js("topicRoute", "-t", TOPIC, *rig.n)["queueDatas"]
    return qd["perm"]


def test_update_topic_perm_then_route_shows_it(rig):
    try:
        r = ok("updateTopicPerm", "-b", rig.master, "-t", TOPIC, "-p", "4", *rig.n)
        assert r.out == f"update topic perm from 6 to 4 in {rig.master} success.\n"
        wait_for(lambda: _route_perm(rig) == 4, "the route to show perm 4", 10)
    finally:
        doc = js("updateTopicPerm", "-c", CLUSTER, "-t", TOPIC, "-p", "6", *rig.n)
    assert doc["brokers"] == [{"brokerAddr": rig.master, "oldPerm": 4, "perm": 6}]
    wait_for(lambda: _route_perm(rig) == 6, "the route to show perm 6 again", 10)
    assert "perm 5 is not 2 (W), 4 (R) or 6 (RW)" in failed(
        "updateTopicPerm", "-b", rig.master, "-t", TOPIC, "-p", "5", rc=2
    )


def _attributes(addr: str, topic: str) -> Any:
    r = call(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
    tc = json.loads(r.body)["topicConfigTable"].get(topic)
    return "no such topic" if tc is None else tc.get("attributes")


def test_update_topic_sets_the_message_type_attribute(rig):
    """RocketMQ 5's ``updateTopic -a``: message.type is stored (and copied to the slave),
    kept by an update without -a, removed by -message.type; a bad key or value is refused
    naming it and changes nothing."""
    topic = "AttrTopic"
    ok("updateTopic", "-b", rig.master, "-t", topic, "-r", "2", "-w", "2", "-a", "+message.type=FIFO", *rig.n)
    assert _attributes(rig.master, topic) == {"message.type": "FIFO"}
    wait_for(lambda: _attributes(rig.slave, topic) == {"message.type": "FIFO"}, "the slave copies the attribute")
    ok("updateTopic", "-b", rig.master, "-t", topic, "-r", "4", "-w", "4", *rig.n)
    assert _attributes(rig.master, topic) == {"message.type": "FIFO"}
    assert "unsupported key queue.kind" in failed(
        "updateTopic", "-b", rig.master, "-t", topic, "-a", "+queue.kind=x", *rig.n
    )
    assert "message.type=LIFO is not one of" in failed(
        "updateTopic", "-b", rig.master, "-t", topic, "-a", "+message.type=LIFO", *rig.n
    )
    assert _attributes(rig.master, topic) == {"message.type": "FIFO"}
    ok("updateTopic", "-b", rig.master, "-t", topic, "--attributes=-message.type", *rig.n)
    assert _attributes(rig.master, topic) is None


def test_topic_cluster_list_and_allocate_mq(rig):
    assert js("topicClusterList", "-t", TOPIC, *rig.n)["clusters"] == [CLUSTER]
    assert ok("topicClusterList", "-t", TOPIC, *rig.n).out == f"{CLUSTER}\n"
    result = js("allocateMQ", "-t", TOPIC, "-i", "10.0.0.2@b,10.0.0.1@a", *rig.n)["result"]
    got = {cid: sorted(q["queueId"] for q in qs) for cid, qs in result.items()}
    assert got == {"10.0.0.1@a": [0, 1], "10.0.0.2@b": [2, 3]}


def _kv(rig, namespace: str, key: str) -> tuple[int, str | None]:
    r = call(rig.ns, RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key})
    return r.code, (r.ext_fields or {}).get("value")


def test_update_order_conf_put_get_delete(rig):
    topic = "MoreAdminOrderTopic"
    r = ok("updateOrderConf", "-t", topic, "-m", "put", "-v", f"{GROUP}:4", *rig.n)
    assert r.out == f"update orderConf success. topic=[{topic}], orderConf=[{GROUP}:4]\n"
    assert _kv(rig, "ORDER_TOPIC_CONFIG", topic) == (ResponseCode.SUCCESS, f"{GROUP}:4")
    assert js("updateOrderConf", "-t", topic, "-m", "get", *rig.n)["orderConf"] == f"{GROUP}:4"
    ok("updateOrderConf", "-t", topic, "-m", "delete", *rig.n)
    assert _kv(rig, "ORDER_TOPIC_CONFIG", topic)[0] == ResponseCode.QUERY_NOT_FOUND
    assert failed("updateOrderConf", "-t", topic, "-m", "get", *rig.n).endswith(
        f"no orderConf for topic {topic} on NameServer {rig.ns}"
    )
    assert "-m put needs -v/--orderConf" in failed("updateOrderConf", "-t", topic, "-m", "put", *rig.n, rc=2)


def test_update_and_delete_kv_config(rig):
    r = ok("updateKvConfig", "-s", "MoreNS", "-k", "mk", "-v", "mv", *rig.n)
    assert r.out == "create or update kv config to namespace success.\n"
    assert _kv(rig, "MoreNS", "mk") == (ResponseCode.SUCCESS, "mv")
    assert js("deleteKvConfig", "-s", "MoreNS", "-k", "mk", *rig.n)["nameServers"] == [rig.ns]
    assert _kv(rig, "MoreNS", "mk")[0] == ResponseCode.QUERY_NOT_FOUND


def test_get_consumer_config(rig):
    (b,) = js("getConsumerConfig", "-g", LAGGING, *rig.n)["brokers"]
    assert (b["cluster"], b["brokerName"], b["brokerAddr"]) == (CLUSTER, GROUP, rig.master)
    assert b["config"]["retryMaxTimes"] == 5 and b["config"]["groupName"] == LAGGING
    text = ok("getConsumerConfig", "-g", LAGGING, *rig.n).out
    assert f"============================={CLUSTER}:{GROUP}=============================" in text
    assert re.search(r"^retryMaxTimes\s+=  5$", text, re.M), text
    assert "subscription group no-such-group not found" in failed("getConsumerConfig", "-g", "no-such-group", *rig.n)


# =========================================================================== offsets
def test_clone_group_offset_from_the_lagging_and_the_online_group(rig):
    r = ok("cloneGroupOffset", "-s", LAGGING, "-d", "more-clone", "-t", TOPIC, *rig.n)
    assert r.out == f"clone group offset success. srcGroup[{LAGGING}], destGroup=[more-clone], topic[{TOPIC}]\n"
    assert offsets(rig.master, "more-clone") == dict.fromkeys(range(4), 5)
    js("cloneGroupOffset", "-s", ONLINE, "-d", "more-clone", "-t", TOPIC, *rig.n)
    assert offsets(rig.master, "more-clone") == dict.fromkeys(range(4), PER_QUEUE)


def test_skip_accumulated_message(rig):
    commit(rig.master, "more-skip", 1)
    doc = js("skipAccumulatedMessage", "-g", "more-skip", "-t", TOPIC, *rig.n)
    assert sorted((e["queueId"], e["offset"]) for e in doc["offsetTable"]) == [(q, PER_QUEUE) for q in range(4)]
    assert offsets(rig.master, "more-skip") == dict.fromkeys(range(4), PER_QUEUE)


# =========================================================================== messages
def test_query_msg_by_unique_key(rig):
    doc = js("queryMsgByUniqueKey", "-t", TOPIC, "-i", rig.uniq[6], *rig.n)
    assert (doc["msgId"], doc["keys"], doc["queueId"], doc["tags"]) == (rig.uniq[6], "k-6", 2, "tag-0")
    assert re.search(r"^Keys:\s+\[k-6\]$", ok("queryMsgByUniqueKey", "-t", TOPIC, "-i", rig.uniq[6], *rig.n).out, re.M)
    assert "has the client message id 00FF" in failed("queryMsgByUniqueKey", "-t", TOPIC, "-i", "00FF", *rig.n)


def test_print_msg_and_print_msg_by_queue(rig):
    doc = js("printMsg", "-t", TOPIC, "-s", "tag-1", "-d", "true", *rig.n)
    assert sorted(m["keys"] for m in doc["messages"]) == sorted(f"k-{i}" for i in range(1, 40, 2))
    assert all(m["body"] == "body-" + m["keys"][2:] for m in doc["messages"])
    text = ok("printMsg", "-t", TOPIC, "-s", "tag-1", *rig.n).out
    assert text.count("MSGID: ") == 20 and "NOT PRINT BODY" in text, text
    doc = js("printMsgByQueue", "-t", TOPIC, "-a", GROUP, "-i", "3", "-f", "true", *rig.n)
    assert doc["tags"] == {"tag-1": PER_QUEUE} and (doc["minOffset"], doc["maxOffset"]) == (0, PER_QUEUE)
    text = ok("printMsgByQueue", "-t", TOPIC, "-a", GROUP, "-i", "3", "-f", "true", "-p", "true", *rig.n).out
    assert re.search(rf"^tag-1\s+{PER_QUEUE}$", text, re.M) and text.count("MSGID: ") == PER_QUEUE, text


def test_not_applicable_commands_say_why(rig):
    assert "not applicable to rmq: rmq.client sends no message traces" in failed("queryMsgTraceById", "-i", "X", *rig.n)
    assert "not applicable to rmq: mqadmin's MonitorService" in failed("startMonitoring", *rig.n)
    line = failed("updateBrokerConfig", "-b", rig.master, "-k", "enableDLegerCommitLog", "-v", "true", *rig.n, rc=2)
    assert "enableDLegerCommitLog: DLedger is not applicable to rmq" in line, line


# --------------------------------------------------------------------------- these send to TOPIC
def test_send_message_then_consume_message_reads_it(rig):
    sent = js(
        "sendMessage", "-t", TOPIC, "-p", "hello-more", "-k", "send-key", "-c", "TagS", "-b", GROUP, "-i", "3", *rig.n
    )
    assert (sent["sendStatus"], sent["queueId"], sent["queueOffset"]) == ("SEND_OK", 3, PER_QUEUE), sent
    doc = js("consumeMessage", "-t", TOPIC, "-b", GROUP, "-i", "3", "-o", str(PER_QUEUE), "-c", "5", *rig.n)
    (m,) = doc["messages"]
    assert (m["body"], m["keys"], m["tags"], m["msgId"]) == ("hello-more", "send-key", "TagS", sent["msgId"])
    text = ok("consumeMessage", "-t", TOPIC, "-b", GROUP, "-i", "3", "-o", str(PER_QUEUE), *rig.n).out
    assert "BODY: hello-more" in text and text.rstrip().endswith("Consume ok"), text


def test_send_msg_status_check_msg_send_rt_and_cluster_rt(rig):
    doc = js("sendMsgStatus", "-b", GROUP, "-c", "3", "-s", "16", *rig.n)
    assert [s["sendStatus"] for s in doc["sends"]] == ["SEND_OK"] * 3 and all(s["rtMs"] > 0 for s in doc["sends"])
    offs = [s["queueOffset"] for s in doc["sends"] if s["queueId"] == doc["sends"][0]["queueId"]]
    assert offs == sorted(offs) and len(set(offs)) == len(offs)  # stored one after the other
    doc = js("checkMsgSendRT", "-t", TOPIC, "-a", "4", "-s", "16", *rig.n)
    assert sorted(s["queueId"] for s in doc["sends"]) == [0, 1, 2, 3] and all(s["ok"] for s in doc["sends"])
    assert doc["avgRtMs"] > 0
    (row,) = js("clusterRT", "-a", "2", "-s", "16", "-c", CLUSTER, *rig.n)["brokers"]
    assert (row["cluster"], row["brokerName"], row["successCount"], row["failCount"]) == (CLUSTER, GROUP, 2, 0)
    assert row["rtMs"] > 0
    text = ok("clusterRT", "-a", "1", *rig.n).out
    assert re.search(rf"^{CLUSTER}\s+{GROUP}\s+\d+\.\d\d\s+1\s+0$", text, re.M), text
    # what the sends did: TOPIC's queues grew by one each, the broker's own topic by 3 + 2 + 1
    maxes = [call(rig.master, RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": str(q)}) for q in range(4)]
    assert sum(int(r.ext_fields["offset"]) for r in maxes) >= 4 * PER_QUEUE + 4


def test_stats_all_shows_live_tps_and_24_hour_counts(rig):
    """Under load, statsAll's InTPS / OutTPS / 24-hour columns are the master's stats items
    (VIEW_BROKER_STATS_DATA: TOPIC_PUT_NUMS, GROUP_GET_NUMS of topic@group); the lagging
    group, which pulls nothing, shows none."""
    sent = 20
    before = len(rig.got)

    async def send() -> None:
        for i in range(sent):
            await rig.producer.send(Message(TOPIC, b"live-%d" % i, keys=f"live-{i}"))

    rig.clients.run(send(), 60)
    wait_for(lambda: len(rig.got) >= before + sent, "the online group consumed the new messages")
    rows: dict[str, Any] = {}

    def live() -> bool:
        rows.update((r["consumerGroup"], r) for r in js("statsAll", "-t", TOPIC, *rig.n)["stats"])
        on = rows[ONLINE]
        # the brokers sample every 10 s: the figures show once a sample follows the load
        return on["inTps"] > 0 and on["outTps"] > 0 and on["inMsg24Hour"] >= sent and on["outMsg24Hour"] >= sent

    wait_for(live, "statsAll shows the load", timeout=60)
    lagging = rows[LAGGING]
    assert lagging["inTps"] == rows[ONLINE]["inTps"] and lagging["inMsg24Hour"] == rows[ONLINE]["inMsg24Hour"]
    assert (lagging["outTps"], lagging["outMsg24Hour"]) == (0, 0), rows
    text = ok("statsAll", "-t", TOPIC, "-a", *rig.n).out
    line = re.search(rf"^{TOPIC}\s+{ONLINE}\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)$", text, re.M)
    assert line and float(line[2]) > 0 and int(line[4]) >= sent and int(line[5]) >= sent, text
    # -a (active topics only) leaves the lagging group's row in: its topic had puts today
    assert re.search(rf"^{TOPIC}\s+{LAGGING}\s", text, re.M), text
