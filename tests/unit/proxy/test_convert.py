"""v2 <-> 4.x conversions (rmq.proxy.convert) and the self-describing ids, without sockets."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from rmq.protocol.bodies import BrokerData, QueueData, TopicRouteData
from rmq.protocol.message import MessageConst, SysFlag, decode_record, encode_record, pack_host, properties_to_string
from rmq.proxy import pb
from rmq.proxy.convert import (
    ProxyError,
    SendLimits,
    TransactionId,
    consistent_hash,
    delay_level_for,
    endpoints_of,
    parse_delay_levels,
    plan_send,
    route_to_queues,
    to_v2_message,
)

NOW = 1_700_000_000_000
LIMITS = SendLimits()


def _msg(**sys_fields) -> object:
    m = pb.msg("Message")()
    m.topic.name = "T"
    m.body = b"hello"
    m.system_properties.message_id = "01ABCDEF"
    for k, v in sys_fields.items():
        if k == "keys":
            m.system_properties.keys.extend(v)
        elif k in ("delivery_timestamp", "born_timestamp"):
            getattr(m.system_properties, k).FromMilliseconds(v)
        else:
            setattr(m.system_properties, k, v)
    return m


def test_normal_message_maps_tag_keys_properties_and_id() -> None:
    m = _msg(tag="TagA", keys=["k1", "k2"], born_timestamp=NOW - 5, born_host="10.0.0.9")
    m.user_properties["color"] = "red"
    plan = plan_send(m, now_ms=NOW, limits=LIMITS)
    assert plan.topic == "T" and plan.body == b"hello" and plan.sys_flag == 0
    assert plan.properties == {
        "color": "red",
        "TAGS": "TagA",
        "KEYS": "k1 k2",
        "UNIQ_KEY": "01ABCDEF",
        "PGROUP": "T",
        "BORN_TIMESTAMP": str(NOW - 5),
        "__BORNHOST": "10.0.0.9",
    }
    assert plan.born_timestamp == NOW - 5 and plan.message_id == "01ABCDEF"


def test_fifo_delay_and_transaction() -> None:
    fifo = plan_send(_msg(message_group="g1", message_type=pb.MessageType.FIFO), now_ms=NOW, limits=LIMITS)
    assert fifo.properties[MessageConst.SHARDING_KEY] == "g1" and fifo.message_group == "g1"
    delay = plan_send(
        _msg(delivery_timestamp=NOW + 7_000, message_type=pb.MessageType.DELAY), now_ms=NOW, limits=LIMITS
    )
    assert delay.properties["TIMER_DELIVER_MS"] == str(NOW + 7_000)
    assert "DELAY" not in delay.properties  # a timer message by default (RocketMQ 5's useDelayLevel=false)
    leveled = plan_send(
        _msg(delivery_timestamp=NOW + 7_000, message_type=pb.MessageType.DELAY),
        now_ms=NOW,
        limits=dataclasses.replace(LIMITS, use_delay_level=True),
    )
    assert leveled.properties["DELAY"] == "3"  # 10s: the first level not earlier than 7s
    tx = plan_send(_msg(message_type=pb.MessageType.TRANSACTION), now_ms=NOW, limits=LIMITS)
    assert tx.properties["TRAN_MSG"] == "true" and tx.sys_flag & SysFlag.TRANSACTION_PREPARED_TYPE
    gz = plan_send(_msg(body_encoding=pb.Encoding.GZIP), now_ms=NOW, limits=LIMITS)
    assert gz.sys_flag & SysFlag.COMPRESSED


@pytest.mark.parametrize(
    "mutate, code, words",
    [
        (lambda m: setattr(m, "body", b""), "MESSAGE_BODY_EMPTY", "body"),
        (lambda m: setattr(m.system_properties, "message_id", ""), "ILLEGAL_MESSAGE_ID", "message_id"),
        (lambda m: setattr(m.system_properties, "tag", "a|b"), "ILLEGAL_MESSAGE_TAG", "tag"),
        (lambda m: m.system_properties.keys.append(" "), "ILLEGAL_MESSAGE_KEY", "keys"),
        (lambda m: m.user_properties.__setitem__("TAGS", "x"), "ILLEGAL_MESSAGE_PROPERTY_KEY", "TAGS"),
        (lambda m: setattr(m.topic, "name", "TBW102"), "ILLEGAL_TOPIC", "system topic"),
        (lambda m: setattr(m.topic, "name", "a b"), "ILLEGAL_TOPIC", "message.topic"),
        (
            lambda m: m.system_properties.delivery_timestamp.FromMilliseconds(NOW + 3 * 86_400_000 + 1),
            "ILLEGAL_DELIVERY_TIME",
            "delivery_timestamp",
        ),
        (lambda m: setattr(m.system_properties, "message_group", "g" * 65), "ILLEGAL_MESSAGE_GROUP", "message_group"),
    ],
)
def test_bad_fields_are_named(mutate, code, words) -> None:
    m = _msg()
    mutate(m)
    with pytest.raises(ProxyError) as ei:
        plan_send(m, now_ms=NOW, limits=LIMITS)
    assert ei.value.code == getattr(pb.Code, code)
    assert words in ei.value.message


def test_one_topic_per_request() -> None:
    with pytest.raises(ProxyError) as ei:
        plan_send(_msg(), now_ms=NOW, limits=LIMITS, topic="Other")
    assert ei.value.code == pb.Code.MESSAGE_CORRUPTED


def test_delay_levels_never_early() -> None:
    levels = parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
    assert levels[:3] == [1000, 5000, 10000] and levels[-1] == 7_200_000
    assert delay_level_for(0, levels) == 0
    assert delay_level_for(1, levels) == 1
    assert delay_level_for(5000, levels) == 2
    assert delay_level_for(5001, levels) == 3
    assert delay_level_for(10 * 3_600_000, levels) == 18


def test_consistent_hash_is_in_range_and_moves_only_to_new_buckets() -> None:
    for key in (-7, 0, 1, 42, 2**31 - 1, -(2**31)):
        prev = consistent_hash(key, 1)
        assert prev == 0
        for n in range(2, 40):
            cur = consistent_hash(key, n)
            assert 0 <= cur < n
            assert cur in (prev, n - 1)  # Guava's property: a key moves only into the added bucket
            prev = cur


def _stored(props: dict[str, str], body: bytes = b"payload", sys_flag: int = 0):
    raw = encode_record(
        topic=b"T",
        body=body,
        properties=properties_to_string(props).encode(),
        queue_id=2,
        flag=0,
        queue_offset=17,
        physical_offset=4096,
        sys_flag=sys_flag,
        born_timestamp=NOW - 10,
        born_host=pack_host("10.1.2.3", 5555),
        store_timestamp=NOW,
        store_host=pack_host("127.0.0.1", 10911),
        reconsume_times=2,
        prepared_transaction_offset=0,
    )
    return decode_record(raw, decompress=False)


def test_stored_message_to_v2() -> None:
    msg = _stored(
        {
            "TAGS": "TagA",
            "KEYS": "k1 k2",
            "UNIQ_KEY": "01AA",
            "color": "red",
            "__SHARDINGKEY": "g1",
            "TRACE_CONTEXT": "tc",
            "PGROUP": "T",
        }
    )
    v2 = to_v2_message(msg, receipt_handle="rh")
    sp = v2.system_properties
    assert v2.topic.name == "T" and v2.body == b"payload"
    assert dict(v2.user_properties) == {"color": "red"}
    assert (sp.tag, list(sp.keys), sp.message_id) == ("TagA", ["k1", "k2"], "01AA")
    assert sp.message_type == pb.MessageType.FIFO and sp.message_group == "g1" and sp.trace_context == "tc"
    assert sp.body_digest.type == pb.DigestType.MD5
    assert sp.body_digest.checksum == hashlib.md5(b"payload").hexdigest().upper()
    assert sp.born_timestamp.ToMilliseconds() == NOW - 10 and sp.born_host == "10.1.2.3:5555"
    assert sp.store_timestamp.ToMilliseconds() == NOW and sp.store_host == "127.0.0.1:10911"
    assert (sp.queue_id, sp.queue_offset, sp.delivery_attempt, sp.receipt_handle) == (2, 17, 3, "rh")
    plain = to_v2_message(_stored({"TRAN_MSG": "true"}))
    assert plain.system_properties.message_id == _stored({}).msg_id  # no UNIQ_KEY: the offset msgId
    assert plain.system_properties.message_type == pb.MessageType.TRANSACTION


def test_route_to_queues_keeps_4x_queue_ids_and_points_at_the_proxy() -> None:
    route = TopicRouteData(
        [QueueData("b", 4, 2, 6), QueueData("a", 2, 2, 4), QueueData("nomaster", 4, 4, 6)],
        [
            BrokerData("c", "a", {0: "1:1"}),
            BrokerData("c", "b", {0: "2:2", 1: "3:3"}),
            BrokerData("c", "nomaster", {1: "4:4"}),
        ],
    )
    topic = pb.msg("Resource")(name="T")
    qs = route_to_queues(topic, route, endpoints_of("127.0.0.1", 8081))
    got = [(q.broker.name, q.id, pb.Permission.name(q.permission)) for q in qs]
    assert got == [
        ("a", 0, "READ"), ("a", 1, "READ"),
        ("b", 0, "READ_WRITE"), ("b", 1, "READ_WRITE"), ("b", 2, "READ"), ("b", 3, "READ"),
    ]  # fmt: skip
    q = qs[0]
    assert q.broker.id == 0 and q.broker.endpoints.scheme == pb.AddressScheme.IPv4
    assert (q.broker.endpoints.addresses[0].host, q.broker.endpoints.addresses[0].port) == ("127.0.0.1", 8081)
    assert list(q.accept_message_types) == [
        pb.MessageType.NORMAL, pb.MessageType.FIFO, pb.MessageType.DELAY, pb.MessageType.TRANSACTION
    ]  # fmt: skip


def test_transaction_id_round_trip_and_foreign_ids() -> None:
    tid = TransactionId("broker-a", 123456, 7, "7F00000100002A9F000000000001E240")
    assert TransactionId.decode(tid.encode()) == tid
    with pytest.raises(ProxyError) as ei:
        TransactionId.decode("0102FC00000001666E0B1C3A3400000000")
    assert ei.value.code == pb.Code.INVALID_TRANSACTION_ID
