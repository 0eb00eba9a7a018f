"""Admin bodies in RocketMQ's JSON (fastjson, object-keyed maps) and back."""

from __future__ import annotations

import pytest

from rmq.admin.output import mq_version_desc
from rmq.protocol.bodies import (
    Connection,
    ConsumerConnection,
    ConsumeStats,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    SubscriptionData,
    subscription_group_string,
)
from rmq.protocol.errors import ProtocolError


def test_consume_stats_is_fastjson_with_object_keys():
    cs = ConsumeStats(
        [
            (MessageQueue("T", "b", 0), OffsetWrapper(10, 7, 1700000000000)),
            (MessageQueue("T", "b", 1), OffsetWrapper(3, 3, 0)),
        ],
        2.5,
    )
    raw = cs.to_json()
    assert raw == (
        b'{"consumeTps":2.5,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:'
        b'{"brokerOffset":10,"consumerOffset":7,"lastTimestamp":1700000000000},'
        b'{"brokerName":"b","queueId":1,"topic":"T"}:{"brokerOffset":3,'
        b'"consumerOffset":3,"lastTimestamp":0}}}'
    )
    back = ConsumeStats.from_json(raw)
    assert back == cs and back.compute_total_diff() == 3
    assert ConsumeStats().to_json() == b'{"consumeTps":0.0,"offsetTable":{}}'
    with pytest.raises(ProtocolError):
        ConsumeStats.from_json(b'{"offsetTable":{{"topic":"T"}:{"brokerOffset":"x"}}}')


def test_connections_round_trip():
    sd = SubscriptionData.build("T", "a || b", sub_version=5)
    cc = ConsumerConnection(
        [Connection("id1", "127.0.0.1:5", "JAVA", 409)],
        {"T": sd},
        "CONSUME_PASSIVELY",
        "CLUSTERING",
        "CONSUME_FROM_LAST_OFFSET",
    )
    back = ConsumerConnection.from_json(cc.to_json())
    assert back == cc and back.compute_min_version() == 409
    assert b'"connectionSet":[{"clientAddr":"127.0.0.1:5","clientId":"id1","language":"JAVA"' in cc.to_json()
    pc = ProducerConnection([Connection("p", "1.2.3.4:9", "CPP", 121)])
    assert ProducerConnection.from_json(pc.to_json()) == pc


def test_printed_forms():
    assert subscription_group_string({"groupName": "g", "consumeEnable": True}).startswith(
        "SubscriptionGroupConfig [groupName=g, consumeEnable=true, consumeFromMinEnable=None"
    )
    assert [mq_version_desc(v) for v in (0, 121, 401, 409, 413, 10**6)] == [
        "V3_0_0_SNAPSHOT",
        "V3_4_9",
        "V4_9_4",
        "V4_9_8",
        "V5_0_0",
        "HIGHER_VERSION",
    ]
