"""Broker: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) — spec 2.4, 3.5, 3.8.

Response headers (msgId / queueId / queueOffset / transactionId + MSG_REGION / TRACE_ON),
both flush modes, auto-creation from TBW102, the msgCheck pre-checks and the store
status -> response code table, batches (comma-joined msgIds, consecutive offsets, pull
order).
"""

from __future__ import annotations

import asyncio

import pytest

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.headers import ViewMessageRequestHeader
from rmq.protocol.message import decode_message_id, decode_record, decode_records
from tests.harness import start_broker, start_namesrv
from tests.integration.broker_util import BrokerApi, broker_in_route, props, route, uniq_key, unique, wait_until
from tests.integration.rigs import ns_and_broker

pytestmark = pytest.mark.timeout(60)


cluster = ns_and_broker("broker-send")


@pytest.mark.parametrize(
    "code", [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2], ids=["SEND_MESSAGE", "SEND_MESSAGE_V2"]
)
async def test_send_response_header_and_stored_record(api, code):
    topic = unique("Send")
    offsets = []
    for i in range(3):
        uk = uniq_key()
        r = await api.send(
            topic,
            b"body-%d" % i,
            code=code,
            queue_id=2,
            properties=props(tags="TagA", keys="k1 k2", uniq=uk, wait="true"),
        )
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        assert r.remark is None
        ext = r.ext_fields
        assert set(ext) == {"msgId", "queueId", "queueOffset", "transactionId", "MSG_REGION", "TRACE_ON"}, ext
        assert ext["queueId"] == "2"
        assert ext["queueOffset"] == str(i)
        assert ext["transactionId"] == uk
        assert ext["MSG_REGION"] == "DefaultRegion"
        assert ext["TRACE_ON"] == "true"
        # offset msgId = store host (the broker's address) + commit-log offset (3.5)
        assert len(ext["msgId"]) == 32 and ext["msgId"] == ext["msgId"].upper()
        ip, port, phy = decode_message_id(ext["msgId"])
        assert f"{ip}:{port}" == api.addr
        offsets.append(phy)

        # the record at that offset, by VIEW_MESSAGE_BY_ID (2.11)
        v = await api.call(RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(phy).to_ext_fields())
        assert v.code == ResponseCode.SUCCESS, (v.code, v.remark)
        m = decode_record(v.body)
        assert m.store_size == len(v.body)
        assert (m.topic, m.queue_id, m.queue_offset, m.commit_log_offset) == (topic, 2, i, phy)
        assert m.body == b"body-%d" % i
        assert m.properties["TAGS"] == "TagA" and m.properties["KEYS"] == "k1 k2"
        assert m.properties["UNIQ_KEY"] == uk
        assert m.properties["CLUSTER"] == "TestCluster"
        assert "WAIT" not in m.properties  # 4.9.x does not store WAIT
        assert m.store_host_str == api.addr
        assert m.msg_id == ext["msgId"]
    assert offsets == sorted(offsets)


async def test_send_negative_queue_id_picks_a_queue(api):
    topic = unique("AnyQ")
    seen = set()
    for _ in range(12):
        r = await api.send_ok(topic, b"x", queue_id=-1, default_queue_nums=4)
        seen.add(int(r.ext_fields["queueId"]))
    assert seen <= {0, 1, 2, 3} and len(seen) > 1


@pytest.mark.parametrize("mode", ["SYNC_FLUSH", "ASYNC_FLUSH"])
async def test_send_in_both_flush_modes(tmp_path, mode):
    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, ns.addr, conf={"flushDiskType": mode}) as br:
        topic = unique("Flush")
        async with BrokerApi(br.addr) as api:
            info = await api.runtime_info()
            assert info["flushDiskType"] == mode
            rs = await asyncio.gather(*(api.send(topic, b"m%03d" % i, queue_id=i % 2) for i in range(40)))
            assert all(r.code == ResponseCode.SUCCESS for r in rs), [(r.code, r.remark) for r in rs]
            for q in (0, 1):
                offs = sorted(int(r.ext_fields["queueOffset"]) for r in rs if r.ext_fields["queueId"] == str(q))
                assert offs == list(range(20))
            if mode == "SYNC_FLUSH":
                # acked => flushed: nothing of what was acknowledged waits for a flush
                info = await api.runtime_info()
                assert info["remainHowManyDataToFlush"] == "0 B", info
            # WAIT=false: answered without waiting for the flush, still stored
            r = await api.send(topic, b"nowait", queue_id=0, properties=props(wait="false"))
            assert r.code == ResponseCode.SUCCESS and r.ext_fields["queueOffset"] == "20"
            await api.wait_max_offset(topic, 0, 21)
            body, nxt = await api.pull_all(topic, 0)
            assert nxt == 21
            assert [m.body for m in decode_records(body)] == [b"m%03d" % i for i in range(0, 40, 2)] + [b"nowait"]


async def test_send_auto_creates_topic_from_tbw102(cluster):
    ns, br = cluster
    async with BrokerApi(br.addr) as api:
        tbw = (await api.topics())["TBW102"]
        assert (tbw.perm, tbw.read_queue_nums, tbw.write_queue_nums) == (7, 8, 8)
        t4, t16 = unique("Auto4x"), unique("Auto16x")
        await api.send_ok(t4, b"x", default_queue_nums=4)
        await api.send_ok(t16, b"x", default_queue_nums=16)
        topics = await api.topics()
        # queues = min(client's defaultTopicQueueNums, TBW102's), inherit bit dropped
        assert (topics[t4].read_queue_nums, topics[t4].write_queue_nums, topics[t4].perm) == (4, 4, 6)
        assert (topics[t16].read_queue_nums, topics[t16].write_queue_nums, topics[t16].perm) == (8, 8, 6)
        # a topic change re-registers with the NameServer at once
        took = await wait_until(
            lambda: broker_in_route(api.client, ns.addr, t4, br.addr),
            1.0,
            f"auto-created {t4} not in the NameServer route within 1 s",
        )
        rd = await broker_in_route(api.client, ns.addr, t4, br.addr)
        qd = [q for q in rd.queue_datas if q.broker_name == "broker-a"][0]
        assert (qd.read_queue_nums, qd.write_queue_nums, qd.perm) == (4, 4, 6)
        assert took < 1.0


async def test_send_topic_not_exist_without_auto_create(tmp_path):
    conf = {"autoCreateTopicEnable": "false"}
    with start_namesrv(tmp_path) as ns, start_broker(tmp_path, ns.addr, conf=conf) as br:
        async with BrokerApi(br.addr) as api:
            assert "TBW102" not in await api.topics()
            code, _ = await route(api.client, ns.addr, "TBW102")
            assert code == ResponseCode.TOPIC_NOT_EXIST
            for c in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
                r = await api.send("NoSuchTopic", b"x", code=c)
                assert r.code == ResponseCode.TOPIC_NOT_EXIST == 17
                assert r.remark.startswith("topic[NoSuchTopic] not exist, apply first please!")
            r = await api.send_batch("NoSuchTopic", [(b"x", "")])
            assert r.code == ResponseCode.TOPIC_NOT_EXIST
            assert "NoSuchTopic" not in await api.topics()
            # an explicitly created topic takes messages
            assert (await api.create_topic("MadeByAdmin", 2)).code == ResponseCode.SUCCESS
            await api.send_ok("MadeByAdmin", b"x", queue_id=1)


@pytest.mark.parametrize(
    "topic",
    ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"],
)
async def test_send_to_system_topic_no_permission(api, topic):
    for c in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
        r = await api.send(topic, b"x", code=c)
        assert r.code == ResponseCode.NO_PERMISSION == 16
        assert r.remark == f"Sending message to topic[{topic}] is forbidden."


@pytest.mark.parametrize(
    "topic", ["bad topic", "bad/topic", "bäd", "a.b", "x" * 128], ids=["space", "slash", "non-ascii", "dot", "too-long"]
)
async def test_send_illegal_topic_is_system_error(api, topic):
    r = await api.send(topic, b"x")
    assert r.code == ResponseCode.SYSTEM_ERROR == 1
    if len(topic) > 127:
        assert r.remark == "The specified topic is longer than topic max length 127."
    else:
        assert r.remark == (
            f"The specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        )
    assert topic not in await api.topics()


async def test_send_queue_id_out_of_range_is_system_error(api):
    topic = unique("QRange")
    assert (await api.create_topic(topic, 4)).code == ResponseCode.SUCCESS
    await api.send_ok(topic, b"ok", queue_id=3)
    for c in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
        r = await api.send(topic, b"x", code=c, queue_id=4)
        assert r.code == ResponseCode.SYSTEM_ERROR
        assert r.remark.startswith("request queueId[4] is illegal"), r.remark
    r = await api.send_batch(topic, [(b"x", "")], queue_id=9)
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert r.remark.startswith("request queueId[9] is illegal"), r.remark
    # TBW102-created topics: the queue count the producer asked for
    t2 = unique("QRange")
    await api.send_ok(t2, b"x", default_queue_nums=2, queue_id=1)
    r = await api.send(t2, b"x", queue_id=2)
    assert r.code == ResponseCode.SYSTEM_ERROR


async def test_send_oversized_body_is_message_illegal(api):
    topic = unique("Big")
    await api.send_ok(topic, b"small", queue_id=0)
    before = (await api.runtime_info())["commitLogMaxOffset"]
    r = await api.send(topic, b"\x00" * (4 * 1024 * 1024 + 1), queue_id=0)
    assert r.code == ResponseCode.MESSAGE_ILLEGAL == 13
    assert r.remark.startswith("the message is illegal"), r.remark
    assert "msgId" not in (r.ext_fields or {})
    assert (await api.runtime_info())["commitLogMaxOffset"] == before
    # the connection and the queue go on
    r = await api.send_ok(topic, b"small2", queue_id=0)
    assert r.ext_fields["queueOffset"] == "1"


async def test_batch_send_then_pull_in_order(api):
    topic = unique("Batch")
    await api.send_ok(topic, b"single-first", queue_id=1)
    items = [(b"batch-%02d" % i, props(tags=f"T{i % 3}", keys=f"bk{i}", uniq=uniq_key())) for i in range(10)]
    r = await api.send_batch(topic, items, queue_id=1)
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    ext = r.ext_fields
    assert ext["queueId"] == "1" and ext["queueOffset"] == "1"
    assert ext["MSG_REGION"] == "DefaultRegion" and ext["TRACE_ON"] == "true"
    ids = ext["msgId"].split(",")
    assert len(ids) == 10 and all(len(i) == 32 for i in ids)
    phys = [decode_message_id(i)[2] for i in ids]
    assert phys == sorted(phys) and len(set(phys)) == 10
    r2 = await api.send_ok(topic, b"single-last", queue_id=1)
    assert r2.ext_fields["queueOffset"] == "11"
    await api.wait_max_offset(topic, 1, 12)
    body, nxt = await api.pull_all(topic, 1)
    assert nxt == 12
    msgs = decode_records(body)
    assert [m.body for m in msgs] == [b"single-first"] + [b for b, _ in items] + [b"single-last"]
    assert [m.queue_offset for m in msgs] == list(range(12))
    assert [m.commit_log_offset for m in msgs[1:11]] == phys
    for i, m in enumerate(msgs[1:11]):
        assert m.properties["TAGS"] == f"T{i % 3}" and m.properties["KEYS"] == f"bk{i}"
        assert m.properties["CLUSTER"] == "TestCluster"
        assert m.msg_id == ids[i]


async def test_batch_send_auto_creates_topic(api):
    topic = unique("BatchAuto")
    r = await api.send_batch(topic, [(b"a", ""), (b"b", "")], queue_id=2, default_queue_nums=3)
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    assert (r.ext_fields["queueId"], r.ext_fields["queueOffset"]) == ("2", "0")
    tc = (await api.topics())[topic]
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (3, 3, 6)
    await api.wait_max_offset(topic, 2, 2)
    assert [m.body for m in decode_records((await api.pull(topic, 2, 0)).body)] == [b"a", b"b"]
    # a malformed batch body is refused
    r = await api.call(
        RequestCode.SEND_BATCH_MESSAGE,
        api.send_header(topic, queue_id=0, batch=True).to_v2_ext_fields(),
        b"\x00\x00\x00\x30garbage",
    )
    assert r.code == ResponseCode.MESSAGE_ILLEGAL
