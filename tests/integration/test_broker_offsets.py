"""Broker: offsets (spec 2.6) and QUERY_MESSAGE / VIEW_MESSAGE_BY_ID (spec 2.11).

QUERY_CONSUMER_OFFSET for a group with no stored offset gets 0 when the queue's min
offset is 0 and that message is still in memory (the OFFSET_TOO_SMALL test in
test_broker_pull.py covers the QUERY_NOT_FOUND side); UPDATE_CONSUMER_OFFSET two-way
and oneway; GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP,
GET_EARLIEST_MSG_STORETIME.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.headers import (
    GetEarliestMsgStoretimeRequestHeader,
    QueryMessageRequestHeader,
    SearchOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from rmq.protocol.message import decode_message_id, decode_record, decode_records
from tests.integration.broker_util import BrokerApi, props, uniq_key, unique, wait_until
from tests.integration.rigs import ns_and_broker

pytestmark = pytest.mark.timeout(60)


cluster = ns_and_broker("broker-offsets")


async def test_query_consumer_offset_of_a_new_group_is_zero(api):
    """Spec 2.6: no stored offset, min offset 0 and message 0 in memory -> SUCCESS, 0."""
    topic = unique("QcoNew")
    for i in range(3):
        await api.send_ok(topic, b"%d" % i, queue_id=0)
    await api.wait_max_offset(topic, 0, 3)
    r = await api.query_offset(unique("NewGroup"), topic, 0)
    assert r.code == ResponseCode.SUCCESS
    assert r.remark is None
    assert r.ext_fields == {"offset": "0"}
    # a queue of the topic that never got a message: min offset <= 0 as well
    r = await api.query_offset(unique("NewGroup"), topic, 3)
    assert (r.code, r.ext_fields) == (ResponseCode.SUCCESS, {"offset": "0"})


async def test_update_and_query_consumer_offset(api):
    topic, group = unique("Qco"), unique("QcoG")
    await api.send_ok(topic, b"x", queue_id=1)
    r = await api.update_offset(group, topic, 1, 17)
    assert r.code == ResponseCode.SUCCESS and r.remark is None
    r = await api.query_offset(group, topic, 1)
    assert (r.code, r.ext_fields) == (ResponseCode.SUCCESS, {"offset": "17"})
    # the Java client updates oneway: no answer, but it is applied
    assert await api.update_offset(group, topic, 1, 23, oneway=True) is None
    await wait_until(lambda: _offset_is(api, group, topic, 1, "23"), 2.0, "oneway UPDATE_CONSUMER_OFFSET not applied")
    # per queue and per group
    r = await api.query_offset(group, topic, 0)
    assert (r.code, r.ext_fields) == (ResponseCode.SUCCESS, {"offset": "0"})
    r = await api.query_offset(unique("OtherG"), topic, 1)
    assert r.ext_fields == {"offset": "0"}
    # an offset may move back (reset)
    await api.update_offset(group, topic, 1, 5)
    assert (await api.query_offset(group, topic, 1)).ext_fields == {"offset": "5"}


async def _offset_is(api: BrokerApi, group: str, topic: str, qid: int, want: str) -> bool:
    r = await api.query_offset(group, topic, qid)
    return r.code == ResponseCode.SUCCESS and r.ext_fields.get("offset") == want


async def test_get_max_and_min_offset(api):
    topic = unique("MaxMin")
    assert (await api.create_topic(topic, 2)).code == ResponseCode.SUCCESS
    assert await api.max_offset(topic, 0) == 0
    assert await api.min_offset(topic, 0) == 0
    for i in range(5):
        await api.send_ok(topic, b"%d" % i, queue_id=0)
    await api.wait_max_offset(topic, 0, 5)
    r = await api.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"})
    assert (r.code, r.ext_fields) == (ResponseCode.SUCCESS, {"offset": "5"})
    r = await api.call(RequestCode.GET_MIN_OFFSET, {"topic": topic, "queueId": "0"})
    assert (r.code, r.ext_fields) == (ResponseCode.SUCCESS, {"offset": "0"})
    assert await api.max_offset(topic, 1) == 0


async def test_search_offset_by_timestamp_and_earliest_store_time(api):
    topic = unique("ByTime")
    for i in range(4):
        await api.send_ok(topic, b"%d" % i, queue_id=0)
        await asyncio.sleep(0.05)
    await api.wait_max_offset(topic, 0, 4)
    msgs = decode_records((await api.pull(topic, 0, 0)).body)
    ts = [m.store_timestamp for m in msgs]
    assert ts == sorted(ts) and len(set(ts)) == 4

    async def search(t: int) -> int:
        r = await api.call(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, SearchOffsetRequestHeader(topic, 0, t).to_ext_fields()
        )
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        assert set(r.ext_fields) == {"offset"}
        return int(r.ext_fields["offset"])

    for i, t in enumerate(ts):  # exact store times
        assert await search(t) == i
    assert await search(ts[0] - 60_000) == 0  # before all -> first
    assert await search(ts[-1] + 60_000) == 3  # after all -> last (4.x)
    assert await search(ts[1] + 1) == 1  # nearer neighbour (4.x)
    assert await search(ts[2] - 1) == 2
    # a queue that does not exist
    assert await search_missing(api, topic) == 0

    r = await api.call(
        RequestCode.GET_EARLIEST_MSG_STORETIME, GetEarliestMsgStoretimeRequestHeader(topic, 0).to_ext_fields()
    )
    assert (r.code, r.ext_fields) == (ResponseCode.SUCCESS, {"timestamp": str(ts[0])})
    r = await api.call(
        RequestCode.GET_EARLIEST_MSG_STORETIME, GetEarliestMsgStoretimeRequestHeader(topic, 3).to_ext_fields()
    )
    assert (r.code, r.ext_fields) == (ResponseCode.SUCCESS, {"timestamp": "-1"})


async def search_missing(api: BrokerApi, topic: str) -> int:
    r = await api.call(
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        SearchOffsetRequestHeader(topic, 3, int(time.time() * 1000)).to_ext_fields(),
    )
    assert r.code == ResponseCode.SUCCESS
    return int(r.ext_fields["offset"])


async def test_query_message_by_key_and_by_uniq_key(api):
    topic = unique("Query")
    t0 = int(time.time() * 1000) - 1000
    uks = [uniq_key() for _ in range(4)]
    for i, uk in enumerate(uks):
        await api.send_ok(
            topic, b"q%d" % i, queue_id=i % 2, properties=props(keys=f"order-{i % 2} common", uniq=uk, wait="true")
        )
    await api.wait_max_offset(topic, 0, 2)
    await api.wait_max_offset(topic, 1, 2)
    t1 = int(time.time() * 1000) + 1000

    async def query(key: str, unique_key: bool = False, max_num: int = 32, begin: int = t0, end: int = t1):
        ext = QueryMessageRequestHeader(topic, key, max_num, begin, end).to_ext_fields()
        ext["_UNIQUE_KEY_QUERY"] = "true" if unique_key else "false"
        return await api.call(RequestCode.QUERY_MESSAGE, ext)

    async def found(key: str) -> bool:
        return (await query(key)).code == ResponseCode.SUCCESS

    await wait_until(lambda: found("common"), 3.0, "index never found key 'common'")
    r = await query("order-1")
    assert r.code == ResponseCode.SUCCESS
    assert set(r.ext_fields) == {"indexLastUpdateTimestamp", "indexLastUpdatePhyoffset"}
    assert sorted(m.body for m in decode_records(r.body)) == [b"q1", b"q3"]
    r = await query("common")
    assert sorted(m.body for m in decode_records(r.body)) == [b"q0", b"q1", b"q2", b"q3"]
    r = await query(uks[2], unique_key=True)
    assert r.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(r.body)] == [b"q2"]
    # nothing found (unknown key, or a time range before the messages)
    for resp in (await query("no-such-key"), await query("common", begin=0, end=t0 - 10_000)):
        assert resp.code == ResponseCode.QUERY_NOT_FOUND == 22
        assert resp.remark == "can not find message, maybe time range not correct"
        assert resp.body is None


async def test_view_message_by_id(api):
    topic = unique("View")
    r = await api.send_ok(topic, b"view-me", queue_id=0, properties=props(tags="TV", keys="vk", wait="true"))
    _, _, phy = decode_message_id(r.ext_fields["msgId"])
    v = await api.call(RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(phy).to_ext_fields())
    assert v.code == ResponseCode.SUCCESS
    m = decode_record(v.body)
    assert m.store_size == len(v.body)  # exactly one record
    assert (m.body, m.topic, m.commit_log_offset) == (b"view-me", topic, phy)
    bad = phy + 10**9
    v = await api.call(RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(bad).to_ext_fields())
    assert v.code == ResponseCode.SYSTEM_ERROR
    assert v.remark == f"can not find message by the offset, {bad}"
    assert v.body is None
