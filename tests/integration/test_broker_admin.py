"""Broker: UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG (21), GET_BROKER_RUNTIME_INFO (28),
TBW102 with autoCreateTopicEnable, registration with the NameServer at start-up and on
topic changes — spec 2.13, 2.14, 2.15.
"""

from __future__ import annotations

import pytest

from rmq.protocol.bodies import TopicConfigSerializeWrapper
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.message import decode_message_id, decode_records, properties_to_string
from tests.integration.broker_util import BrokerApi, broker_in_route, cluster_info, route, unique, wait_until
from tests.integration.rigs import ns_and_broker

pytestmark = pytest.mark.timeout(60)


cluster = ns_and_broker("broker-admin")


async def test_tbw102_created_and_registered_at_start(cluster):
    """Registered before the broker reports itself started: the harness returns on the
    'boot success' line, and nothing here waits."""
    ns, br = cluster
    async with BrokerApi(br.addr) as api:
        code, rd = await route(api.client, ns.addr, "TBW102")
        assert code == ResponseCode.SUCCESS
        assert [(q.broker_name, q.perm, q.read_queue_nums, q.write_queue_nums) for q in rd.queue_datas] == [
            ("broker-a", 7, 8, 8)
        ]
        assert [(b.cluster, b.broker_name, b.broker_addrs) for b in rd.broker_datas] == [
            ("TestCluster", "broker-a", {0: br.addr})
        ]
        ci = await cluster_info(api.client, ns.addr)
        assert ci.cluster_addr_table["TestCluster"] == ["broker-a"]
        assert ci.broker_addr_table["broker-a"].broker_addrs == {0: br.addr}

        r = await api.call(RequestCode.GET_ALL_TOPIC_CONFIG)
        assert r.code == ResponseCode.SUCCESS
        w = TopicConfigSerializeWrapper.from_json(r.body)
        tbw = w.topic_config_table["TBW102"]
        assert (tbw.perm, tbw.read_queue_nums, tbw.write_queue_nums) == (7, 8, 8)
        # RocketMQ's other start-up topics
        for t in (
            "SELF_TEST_TOPIC",
            "BenchmarkTest",
            "OFFSET_MOVED_EVENT",
            "TestCluster",
            "broker-a",
            "SCHEDULE_TOPIC_XXXX",
        ):
            assert t in w.topic_config_table, t


async def test_update_and_create_topic_registers_within_one_second(cluster):
    ns, br = cluster
    topic = unique("Created")
    async with BrokerApi(br.addr) as api:
        code, _ = await route(api.client, ns.addr, topic)
        assert code == ResponseCode.TOPIC_NOT_EXIST
        before = (await api.call(RequestCode.GET_ALL_TOPIC_CONFIG)).body
        v0 = TopicConfigSerializeWrapper.from_json(before).data_version
        r = await api.create_topic(topic, 6, perm=6, topic_filter_type="SINGLE_TAG", order=False)
        assert (r.code, r.remark) == (ResponseCode.SUCCESS, None)
        w = TopicConfigSerializeWrapper.from_json((await api.call(RequestCode.GET_ALL_TOPIC_CONFIG)).body)
        tc = w.topic_config_table[topic]
        assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_filter_type, tc.order) == (
            6,
            6,
            6,
            "SINGLE_TAG",
            False,
        )
        assert w.data_version.counter > v0.counter
        took = await wait_until(
            lambda: broker_in_route(api.client, ns.addr, topic, br.addr),
            1.0,
            f"{topic} not in the NameServer route within 1 s",
        )
        assert took < 1.0
        rd = await broker_in_route(api.client, ns.addr, topic, br.addr)
        assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in rd.queue_datas] == [(6, 6, 6)]

        # an update (fewer queues, read-only) is registered as well
        r = await api.create_topic(topic, 2, perm=4)
        assert r.code == ResponseCode.SUCCESS

        async def updated() -> bool:
            rd = await broker_in_route(api.client, ns.addr, topic, br.addr)
            return rd is not None and [(q.read_queue_nums, q.perm) for q in rd.queue_datas] == [(2, 4)]

        await wait_until(updated, 1.0, f"update of {topic} not in the route within 1 s")
        # a readable topic can be pulled from
        assert (await api.pull(topic, 0, 0)).code == ResponseCode.PULL_NOT_FOUND


@pytest.mark.parametrize(
    "topic,remark",
    [
        ("bad topic", "The specified topic[bad topic] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"),
        ("TestCluster", "the topic[TestCluster] is conflict with system reserved words."),
        ("SCHEDULE_TOPIC_XXXX", "The topic[SCHEDULE_TOPIC_XXXX] is conflict with system topic."),
        ("TBW102", "The topic[TBW102] is conflict with system topic."),
    ],
)
async def test_update_and_create_topic_rejects_bad_names(api, topic, remark):
    before = await api.topics()
    r = await api.create_topic(topic, 3)
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, remark)
    after = await api.topics()
    assert after.get(topic) == before.get(topic)


async def test_update_and_create_topic_missing_header_field(api):
    r = await api.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": unique("NoQueues")})
    assert r.code == ResponseCode.SYSTEM_ERROR


async def test_broker_runtime_info(api):
    topic = unique("Runtime")
    info0 = await api.runtime_info()
    for k in (
        "brokerVersionDesc",
        "brokerVersion",
        "bootTimestamp",
        "msgPutTotalTodayNow",
        "msgGetTotalTodayNow",
        "putTps",
        "getFoundTps",
        "commitLogMinOffset",
        "commitLogMaxOffset",
        "dispatchBehindBytes",
        "remainHowManyDataToFlush",
        "brokerRole",
        "flushDiskType",
        "runtime",
    ):
        assert k in info0, k
    assert info0["brokerVersionDesc"] == "V4_9_8" and info0["brokerVersion"] == "409"
    assert info0["brokerRole"] == "ASYNC_MASTER" and info0["flushDiskType"] == "ASYNC_FLUSH"
    last = None
    for i in range(5):
        last = await api.send_ok(topic, b"rt-%d" % i, queue_id=0)
    await api.wait_max_offset(topic, 0, 5)
    r = await api.pull(topic, 0, 0)
    assert r.code == ResponseCode.SUCCESS
    info = await api.runtime_info()
    assert int(info["msgPutTotalTodayNow"]) - int(info0["msgPutTotalTodayNow"]) == 5
    assert int(info["msgGetTotalTodayNow"]) - int(info0["msgGetTotalTodayNow"]) == 5
    end = decode_records(r.body)[-1]
    assert end.msg_id == last.ext_fields["msgId"]
    assert int(info["commitLogMaxOffset"]) >= end.commit_log_offset + end.store_size
    assert int(info["commitLogMinOffset"]) == 0
    assert int(info["bootTimestamp"]) > 0
    assert decode_message_id(last.ext_fields["msgId"])[2] == end.commit_log_offset


# Every key 4.9.8's GET_BROKER_RUNTIME_INFO answers (AdminBrokerProcessor.prepareRuntimeInfo,
# DefaultMessageStore / StoreStatsService.getRuntimeInfo), commitLogDiskRatio_<path> aside.
RUNTIME_KEYS_4_9_8 = """
bootTimestamp runtime putMessageEntireTimeMax putMessageTimesTotal putMessageFailedTimes putMessageSizeTotal
putMessageDistributeTime putMessageAverageSize dispatchMaxBuffer getMessageEntireTimeMax putTps getFoundTps
getMissTps getTotalTps getTransferedTps putLatency99 putLatency999 commitLogDiskRatio consumeQueueDiskRatio
commitLogMinOffset commitLogMaxOffset brokerVersionDesc brokerVersion msgPutTotalYesterdayMorning
msgPutTotalTodayMorning msgPutTotalTodayNow msgGetTotalYesterdayMorning msgGetTotalTodayMorning msgGetTotalTodayNow
sendThreadPoolQueueSize sendThreadPoolQueueCapacity pullThreadPoolQueueSize pullThreadPoolQueueCapacity
queryThreadPoolQueueSize queryThreadPoolQueueCapacity EndTransactionQueueSize EndTransactionThreadPoolQueueCapacity
dispatchBehindBytes pageCacheLockTimeMills sendThreadPoolQueueHeadWaitTimeMills pullThreadPoolQueueHeadWaitTimeMills
queryThreadPoolQueueHeadWaitTimeMills earliestMessageTimeStamp startAcceptSendRequestTimeStamp
remainTransientStoreBufferNumbs remainHowManyDataToFlush commitLogDirCapacity
""".split()


async def test_runtime_info_has_every_key_of_4_9_8_with_live_rates(api):
    topic = unique("RuntimeRates")
    for i in range(20):
        await api.send_ok(topic, b"rate-%d" % i, queue_id=0)
    await api.wait_max_offset(topic, 0, 20)
    assert (await api.pull(topic, 0, 0)).code == ResponseCode.SUCCESS

    async def rates_moved() -> bool:
        info = await api.runtime_info()
        return float(info["putTps"].split()[0]) > 0 and float(info["getTransferedTps"].split()[0]) > 0

    # the rates come from once-a-second samples
    await wait_until(rates_moved, 5.0, "putTps and getTransferedTps above zero after sends and a pull")
    info = await api.runtime_info()
    assert [k for k in RUNTIME_KEYS_4_9_8 if k not in info] == []
    for key in ("putTps", "getFoundTps", "getMissTps", "getTotalTps", "getTransferedTps"):
        figures = info[key].split(" ")
        assert len(figures) == 3 and all(float(f) >= 0 for f in figures), (key, info[key])
    assert int(info["putMessageTimesTotal"]) >= 20 and int(info["putMessageSizeTotal"]) > 20 * 100
    assert float(info["putMessageAverageSize"]) > 100
    assert any(k.startswith("commitLogDiskRatio_") for k in info)
    assert 0 <= float(info["commitLogDiskRatio"]) <= 1
    assert info["commitLogDirCapacity"].startswith("Total : ") and ", Free : " in info["commitLogDirCapacity"]
    assert info["remainHowManyDataToFlush"].endswith("B")

    # a delayed message: its level appears as "<delivered offset>,<max offset in SCHEDULE_TOPIC_XXXX>"
    await api.send_ok(topic, b"later", queue_id=0, properties=properties_to_string({"DELAY": "1"}))

    async def level_1_delivered() -> bool:
        return (await api.runtime_info()).get("scheduleMessageOffset_1") == "1,1"

    await wait_until(level_1_delivered, 10.0, "scheduleMessageOffset_1 = 1,1 after the 1 s delay")
