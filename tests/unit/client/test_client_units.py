"""Client pieces without a broker: routes, process queue, message preparation, offsets,
where a new consumer starts, pull result processing."""

from __future__ import annotations

import zlib

import pytest

from rmq.client.errors import MQBrokerError, MQClientError, RemotingConnectError
from rmq.client.message import Message, PullResult, PullStatus, validate_message
from rmq.client.offset_store import ReadOffsetType, RemoteBrokerOffsetStore
from rmq.client.process_queue import ProcessQueue
from rmq.client.producer import Producer
from rmq.client.pull_api import PullAPIWrapper
from rmq.client.push_consumer import (
    ConsumeFromWhere,
    ConsumeResult,
    PushConsumer,
    RebalancePushImpl,
    parse_consume_timestamp,
)
from rmq.client.routes import topic_route_changed, topic_route_to_publish_info, topic_route_to_subscribe_info
from rmq.protocol.bodies import BrokerData, MessageQueue, QueueData, SubscriptionData, TopicRouteData
from rmq.protocol.codes import ResponseCode
from rmq.protocol.message import MessageConst, SysFlag, UniqueIdGenerator, decode_batch, string_to_properties
from tests.unit.client.records import ext, record


# --------------------------------------------------------------------------- routes
def route(*qds: QueueData, masters=("a", "b")) -> TopicRouteData:
    bds = [BrokerData("C", n, {0: f"h{n}:1", 1: f"s{n}:1"}) for n in masters]
    return TopicRouteData(list(qds), bds)


def test_publish_info_takes_writable_queues_of_brokers_with_a_master():
    r = route(
        QueueData("b", 8, 2, 6),
        QueueData("a", 4, 3, 6),
        QueueData("c", 4, 4, 6),
        QueueData("d", 4, 4, 4),
        masters=("a", "b", "d"),
    )
    info = topic_route_to_publish_info("T", r)
    # sorted by broker name; c has no BrokerData, d is read-only
    assert [(m.broker_name, m.queue_id) for m in info.message_queue_list] == [
        ("a", 0),
        ("a", 1),
        ("a", 2),
        ("b", 0),
        ("b", 1),
    ]
    assert info.ok() and info.have_topic_router_info and not info.order_topic
    assert info.get_queue_id_by_broker("b") == 2
    assert info.get_queue_id_by_broker("zz") == -1


def test_publish_info_skips_a_broker_without_master():
    r = TopicRouteData([QueueData("a", 4, 4, 6)], [BrokerData("C", "a", {1: "slave:1"})])
    assert not topic_route_to_publish_info("T", r).ok()


def test_publish_info_of_an_ordered_topic():
    r = route(QueueData("a", 4, 4, 6))
    r.order_topic_conf = "a:2;b:1"
    info = topic_route_to_publish_info("T", r)
    assert info.order_topic
    assert [(m.broker_name, m.queue_id) for m in info.message_queue_list] == [("a", 0), ("a", 1), ("b", 0)]


def test_subscribe_info_takes_readable_queues():
    r = route(QueueData("a", 3, 1, 6), QueueData("b", 2, 2, 2))
    assert topic_route_to_subscribe_info("T", r) == {MessageQueue("T", "a", i) for i in range(3)}


def test_route_change_detection_ignores_order():
    r1 = route(QueueData("a", 4, 4, 6), QueueData("b", 4, 4, 6))
    r2 = route(QueueData("b", 4, 4, 6), QueueData("a", 4, 4, 6))
    assert not topic_route_changed(r1, r2)
    r2.queue_datas[0].write_queue_nums = 3
    assert topic_route_changed(r1, r2)
    assert topic_route_changed(None, r1)


# --------------------------------------------------------------------------- process queue
def test_process_queue_commit_offset_is_the_smallest_in_flight():
    pq = ProcessQueue()
    assert pq.remove_messages([]) == -1
    msgs = [ext(i, props={MessageConst.MAX_OFFSET: "20"}) for i in range(10, 15)]
    assert pq.put_messages(msgs) is True
    assert pq.msg_count == 5 and pq.queue_offset_max == 14 and pq.msg_acc_cnt == 6
    assert pq.max_span() == 4
    assert pq.remove_messages([msgs[2]]) == 10  # 10 still in flight
    assert pq.remove_messages([msgs[0]]) == 11
    assert pq.remove_messages([msgs[1], msgs[4]]) == 13
    assert pq.remove_messages([msgs[3]]) == 15  # nothing left: max + 1
    assert pq.msg_count == 0 and pq.msg_size == 0
    assert pq.put_messages([ext(15)]) is True
    assert pq.put_messages([ext(15)]) is False  # duplicate offset not counted twice
    assert pq.msg_count == 1


def test_process_queue_clear():
    pq = ProcessQueue()
    pq.put_messages([ext(1), ext(2)])
    pq.clear()
    assert pq.msg_count == 0 and pq.min_offset is None and pq.max_span() == 0


# --------------------------------------------------------------------------- messages
def test_validate_message():
    validate_message(Message("T", b"x"), 10)
    for bad in (
        Message("", b"x"),
        Message("bad topic", b"x"),
        Message("T", b""),
        Message("T" * 128, b"x"),
        Message("SCHEDULE_TOPIC_XXXX", b"x"),
        Message("T", b"x" * 11),
    ):
        with pytest.raises(MQClientError):
            validate_message(bad, 10)


def test_wire_properties_and_user_properties():
    m = Message("T", "héllo", tags="TagA", keys=["k1", "k2"], properties={"u": "v"}, delay_time_level=3)
    assert m.body == "héllo".encode()
    props = m.wire_properties("UNIQ1")
    assert props == {"u": "v", "TAGS": "TagA", "KEYS": "k1 k2", "DELAY": "3", "WAIT": "true", "UNIQ_KEY": "UNIQ1"}
    m2 = Message("T", b"x", keys="one", wait_store_msg_ok=False)
    assert m2.wire_properties(None) == {"KEYS": "one", "WAIT": "false"}
    with pytest.raises(MQClientError):
        m.put_user_property("TAGS", "x")
    m.put_user_property("color", "red")
    assert m.get_property("color") == "red"


def _producer() -> Producer:
    p = Producer("g", "127.0.0.1:1")
    p._ids = UniqueIdGenerator(b"\x0a\x00\x00\x01", pid=7, seed=1)
    return p


def test_prepare_compresses_at_4096_bytes():
    p = _producer()
    small = p._prepare(Message("T", b"a" * 4095))
    assert small.sys_flag == 0 and small.body == b"a" * 4095
    big = p._prepare(Message("T", b"a" * 4096, tags="t"))
    assert big.sys_flag & SysFlag.COMPRESSED
    assert zlib.decompress(big.body) == b"a" * 4096
    props = string_to_properties(big.properties)
    assert props["TAGS"] == "t" and props["WAIT"] == "true"
    assert props["UNIQ_KEY"] == big.uniq_id and big.uniq_id.startswith("0A000001")
    assert len(big.uniq_id) == 32


def test_prepare_batch():
    p = _producer()
    b = p._prepare_batch([Message("T", b"1", tags="a"), Message("T", b"22", keys="k")])
    assert b.batch and len(b.uniq_id.split(",")) == 2
    items = decode_batch(b.body)
    assert [i.body for i in items] == [b"1", b"22"]
    assert string_to_properties(items[0].properties)["TAGS"] == "a"
    assert string_to_properties(b.properties) == {"WAIT": "true"}
    for bad in (
        [],
        [Message("T", b"1"), Message("U", b"1")],
        [Message("T", b"1", delay_time_level=1)],
        [Message("%RETRY%g", b"1")],
    ):
        with pytest.raises(MQClientError):
            p._prepare_batch(bad)


def test_prepare_retry_topic_moves_reconsume_times_to_the_header():
    p = _producer()
    m = Message("%RETRY%g", b"x", properties={"RECONSUME_TIME": "2", "MAX_RECONSUME_TIMES": "5"})
    prep = p._prepare(m)
    assert (prep.reconsume_times, prep.max_reconsume_times) == (2, 5)
    assert "RECONSUME_TIME" not in string_to_properties(prep.properties)


# --------------------------------------------------------------------------- pull results
def test_process_pull_result_decompresses_filters_and_stamps():
    def rec(off, tags, body, sys_flag=0):
        return record(off, body, {"TAGS": tags}, queue_id=1, physical_offset=off, sys_flag=sys_flag)

    body = rec(0, "a", b"plain") + rec(1, "b", b"nope") + rec(2, "c", zlib.compress(b"z" * 5000, 5), SysFlag.COMPRESSED)
    w = PullAPIWrapper(None, "g")
    mq = MessageQueue("T", "b", 1)
    res = PullResult(PullStatus.FOUND, 3, 0, 3, [], 1, body)
    sd = SubscriptionData.build("T", "a || c")
    out = w.process_pull_result(mq, res, sd)
    assert [m.queue_offset for m in out.msg_found_list] == [0, 2]
    assert out.msg_found_list[1].body == b"z" * 5000
    assert out.msg_found_list[0].properties["MIN_OFFSET"] == "0"
    assert out.msg_found_list[0].properties["MAX_OFFSET"] == "3"
    assert out.body is None
    assert w.recalculate_pull_from_which_node(mq) == 1


# --------------------------------------------------------------------------- offsets
class _Api:
    def __init__(self, answer):
        self.answer = answer

    async def query_consumer_offset(self, *a, **k):
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


class _Found:
    broker_addr = "h:1"
    slave = False


class _Instance:
    client_id = "me"

    class config:
        mq_client_api_timeout = 3000

    def __init__(self, answer):
        self.api = _Api(answer)

    def find_broker_address_in_subscribe(self, *a):
        return _Found()

    async def find_broker_address_in_subscribe_or_update(self, *a):
        return _Found()


MQ = MessageQueue("T", "b", 0)


@pytest.mark.parametrize(
    "answer,expected",
    [
        (17, 17),
        (MQBrokerError(ResponseCode.QUERY_NOT_FOUND, "Not found"), -1),
        (MQBrokerError(ResponseCode.SYSTEM_ERROR, "x"), -1),  # any broker refusal, as Java
        (RemotingConnectError("refused"), -2),
    ],
)
async def test_remote_offset_store_read_from_store(answer, expected):
    store = RemoteBrokerOffsetStore(_Instance(answer), "g")
    assert await store.read_offset(MQ, ReadOffsetType.READ_FROM_STORE) == expected
    if expected >= 0:
        assert await store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY) == expected


async def test_remote_offset_store_memory_and_increase_only():
    store = RemoteBrokerOffsetStore(_Instance(5), "g")
    assert await store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY) == -1
    store.update_offset(MQ, 10, True)
    store.update_offset(MQ, 8, True)
    assert store.offset_table[MQ] == 10
    store.update_offset(MQ, 8, False)
    assert await store.read_offset(MQ, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 8
    store.remove_offset(MQ)
    assert await store.read_offset(MQ, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 5


class _Store:
    def __init__(self, value):
        self.value = value

    async def read_offset(self, mq, type_):
        return self.value


def _rebalance(where: ConsumeFromWhere, stored: int) -> RebalancePushImpl:
    c = PushConsumer(
        "g",
        "127.0.0.1:1",
        listener=lambda m, c: ConsumeResult.SUCCESS,
        consume_from_where=where,
        consume_timestamp="20240102030405",
    )
    c.offset_store = _Store(stored)

    async def max_offset(mq):
        return 42

    async def search_offset(mq, ts):
        assert ts == parse_consume_timestamp("20240102030405")
        return 7

    c.max_offset = max_offset
    c.search_offset = search_offset
    r = RebalancePushImpl(c)
    r.instance = object()
    return r


RETRY_MQ = MessageQueue("%RETRY%g", "b", 0)


@pytest.mark.parametrize(
    "where,stored,mq,expected",
    [
        (ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, 5, MQ, 5),  # stored offset wins
        (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, 5, MQ, 5),
        (ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, 5, MQ, 5),
        (ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, -1, MQ, 42),  # none: the queue's max
        (ConsumeFromWhere.CONSUME_FROM_MAX_OFFSET, -1, MQ, 42),  # deprecated = LAST
        (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, -1, MQ, 0),
        (ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, -1, MQ, 7),  # searched by time
        (ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, -1, RETRY_MQ, 0),
        (ConsumeFromWhere.CONSUME_FROM_TIMESTAMP, -1, RETRY_MQ, 42),
        (ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, -2, MQ, -1),  # unknown: try later
    ],
)
async def test_compute_pull_from_where(where, stored, mq, expected):
    assert await _rebalance(where, stored).compute_pull_from_where(mq) == expected


def test_parse_consume_timestamp():
    assert parse_consume_timestamp(1234) == 1234
    with pytest.raises(MQClientError):
        parse_consume_timestamp("yesterday")


# --------------------------------------------------------------------------- send retries
def _retry_producer(outcomes: dict[str, list], **kw) -> tuple[Producer, list[MessageQueue]]:
    """A started-looking producer whose kernel send follows ``outcomes[broker]`` in turn."""
    from rmq.client.message import SendResult, SendStatus

    p = Producer("g", "127.0.0.1:1", **kw)
    p._ids = UniqueIdGenerator(b"\x0a\x00\x00\x01", pid=7, seed=1)
    p._state = "RUNNING"
    p.instance = object()  # only checked for presence
    info = topic_route_to_publish_info("T", route(QueueData("a", 2, 2, 6), QueueData("b", 2, 2, 6)))
    info.send_which_queue.value = 0  # the first pick is a:0
    tried: list[MessageQueue] = []

    async def find(topic):
        return info

    async def kernel(prep, mq, mode, timeout_ms):
        tried.append(mq)
        outcome = outcomes[mq.broker_name].pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return SendResult(SendStatus(outcome), prep.uniq_id, "OFF", mq, 0)

    p._try_to_find_topic_publish_info = find
    p._send_kernel = kernel
    p._make_sure_state_ok = lambda: p.instance
    return p, tried


async def test_sync_send_retries_a_retryable_code_on_the_other_broker():
    busy = MQBrokerError(ResponseCode.SYSTEM_BUSY, "busy")
    p, tried = _retry_producer({"a": [busy], "b": ["SEND_OK"]})
    r = await p.send(Message("T", b"x"))
    assert r.ok and [mq.broker_name for mq in tried] == ["a", "b"]


async def test_sync_send_gives_up_after_three_attempts_and_raises_the_last_error():
    p, tried = _retry_producer(
        {"a": [RemotingConnectError("refused")] * 3, "b": [MQBrokerError(ResponseCode.SERVICE_NOT_AVAILABLE, "na")] * 3}
    )
    with pytest.raises((RemotingConnectError, MQBrokerError)) as ei:
        await p.send(Message("T", b"x"))
    assert len(tried) == 3
    assert any("brokers tried" in n for n in getattr(ei.value, "__notes__", []))


async def test_non_retryable_code_is_raised_at_once():
    bad = MQBrokerError(ResponseCode.MESSAGE_ILLEGAL, "illegal")
    p, tried = _retry_producer({"a": [bad, bad], "b": [bad, bad]})
    with pytest.raises(MQBrokerError) as ei:
        await p.send(Message("T", b"x"))
    assert ei.value.code == ResponseCode.MESSAGE_ILLEGAL and len(tried) == 1


async def test_oneway_and_async_do_not_retry_broker_codes():
    busy = MQBrokerError(ResponseCode.SYSTEM_BUSY, "busy")
    p, tried = _retry_producer({"a": [busy] * 3, "b": [busy] * 3})
    with pytest.raises(MQBrokerError):
        await p.send_async(Message("T", b"x"))
    assert len(tried) == 1
    p, tried = _retry_producer({"a": [RemotingConnectError("x")] * 3, "b": [RemotingConnectError("x")] * 3})
    with pytest.raises(RemotingConnectError):
        await p.send_oneway(Message("T", b"x"))
    assert len(tried) == 1


async def test_async_send_retries_network_errors_on_another_broker():
    p, tried = _retry_producer({"a": [RemotingConnectError("x")], "b": ["SEND_OK"]})
    r = await p.send_async(Message("T", b"x"))
    assert r.ok and [mq.broker_name for mq in tried] == ["a", "b"]


async def test_not_stored_status_retries_only_when_asked():
    p, tried = _retry_producer({"a": ["FLUSH_DISK_TIMEOUT"] * 3, "b": ["FLUSH_DISK_TIMEOUT"] * 3})
    r = await p.send(Message("T", b"x"))
    assert r.status.value == "FLUSH_DISK_TIMEOUT" and len(tried) == 1
    p, tried = _retry_producer(
        {"a": ["FLUSH_DISK_TIMEOUT"] * 3, "b": ["FLUSH_DISK_TIMEOUT"] * 3}, retry_another_broker_when_not_store_ok=True
    )
    r = await p.send(Message("T", b"x"))
    assert r.status.value == "FLUSH_DISK_TIMEOUT" and len(tried) == 3
