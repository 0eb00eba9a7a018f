"""rmq.protocol.pop: POP headers, the extraInfo (POP_CK) codec, the per-queue info strings and
the revive-log bodies, with worked examples in RocketMQ 5's formats."""

from __future__ import annotations

import pytest

from rmq.protocol.errors import ProtocolError
from rmq.protocol.headers import HeaderFieldError
from rmq.protocol.pop import (
    AckMessageRequestHeader,
    AckMsg,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    ExtraInfo,
    PopCheckPoint,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    QueueInfo,
    ack_unique_id,
    build_queue_info,
    ck_unique_id,
    is_pop_retry_topic,
    parse_msg_offset_info,
    parse_order_count_info,
    parse_start_offset_info,
    pop_retry_topic,
    real_topic,
    revive_topic,
)


def test_pop_request_header_round_trip_with_java_names() -> None:
    ext = {
        "consumerGroup": "g",
        "topic": "T",
        "queueId": "-1",
        "maxMsgNums": "32",
        "invisibleTime": "60000",
        "pollTime": "20000",
        "bornTime": "1700000000000",
        "initMode": "1",
        "expType": "TAG",
        "exp": "a || b",
        "order": "false",
        "attemptId": "att-1",
        "bname": "broker-a",
        "lo": "true",  # unknown keys are ignored
    }
    h = PopMessageRequestHeader.from_ext_fields(ext)
    assert (h.consumer_group, h.queue_id, h.max_msg_nums, h.invisible_time, h.init_mode) == ("g", -1, 32, 60000, 1)
    assert h.order is False and h.attempt_id == "att-1" and h.broker_name == "broker-a"
    out = h.to_ext_fields()
    assert {k: v for k, v in ext.items() if k != "lo"} == out


def test_pop_request_header_missing_field_is_named() -> None:
    with pytest.raises(HeaderFieldError, match="invisibleTime"):
        PopMessageRequestHeader.from_ext_fields(
            {
                "consumerGroup": "g",
                "topic": "T",
                "queueId": "0",
                "maxMsgNums": "1",
                "pollTime": "0",
                "bornTime": "0",
                "initMode": "0",
            }
        )


def test_response_and_ack_headers() -> None:
    r = PopMessageResponseHeader(1000, 60000, 3, 5, "0 1 10", "0 1 10,11", None)
    assert r.to_ext_fields() == {
        "popTime": "1000",
        "invisibleTime": "60000",
        "reviveQid": "3",
        "restNum": "5",
        "startOffsetInfo": "0 1 10",
        "msgOffsetInfo": "0 1 10,11",
    }
    a = AckMessageRequestHeader.from_ext_fields(
        {"consumerGroup": "g", "topic": "T", "queueId": "1", "extraInfo": "10 1000 60000 3 0 b 1 11", "offset": "11"}
    )
    assert a.offset == 11 and a.queue_id == 1
    c = ChangeInvisibleTimeRequestHeader.from_ext_fields(
        {"consumerGroup": "g", "topic": "T", "queueId": "1", "extraInfo": "x", "offset": "11", "invisibleTime": "5"}
    )
    assert c.invisible_time == 5
    assert ChangeInvisibleTimeResponseHeader(1, 2, 3).to_ext_fields() == {
        "popTime": "1",
        "invisibleTime": "2",
        "reviveQid": "3",
    }


def test_extra_info_worked_example() -> None:
    # ckQueueOffset popTime invisibleTime reviveQid topicType brokerName queueId queueOffset
    e = ExtraInfo.build(10, 1700000000000, 60000, 3, "TopicA", "broker-a", 1, 12)
    assert e.encode() == "10 1700000000000 60000 3 0 broker-a 1 12"
    assert ExtraInfo.parse(e.encode()) == e
    # the proxy's receipt handle appends the commitLogOffset: ignored
    assert ExtraInfo.parse(e.encode() + " 4096") == e
    r = ExtraInfo.build(0, 5, 6, 999, pop_retry_topic("TopicA", "g"), "broker-a", 0, 7)
    assert r.encode() == "0 5 6 999 1 broker-a 0 7"
    assert r.is_order and r.real_topic("TopicA", "g") == "%RETRY%g_TopicA"
    assert ExtraInfo.parse("0 5 6 7 0 b 1").queue_offset is None


@pytest.mark.parametrize(
    "bad, word",
    [
        ("", "empty"),
        ("1 2 3", "7"),
        ("x 2 3 4 0 b 1", "ckQueueOffset"),
        ("1 2 3 4 9 b 1", "topic type"),
        ("1 2 3 4 0 b q", "queueId"),
    ],
)
def test_extra_info_errors_name_the_field(bad: str, word: str) -> None:
    with pytest.raises(ProtocolError, match=word):
        ExtraInfo.parse(bad)


def test_topic_names() -> None:
    assert revive_topic("DefaultCluster") == "rmq_sys_REVIVE_LOG_DefaultCluster"
    assert pop_retry_topic("T", "g") == "%RETRY%g_T"
    assert is_pop_retry_topic("%RETRY%g_T", "g") and not is_pop_retry_topic("%RETRY%g", "g")
    assert real_topic("T", "g", "0") == "T" and real_topic("T", "g", "2") == "%RETRY%g+T"


def test_queue_info_strings_as_the_client_parses_them() -> None:
    qs = [QueueInfo("T", 1, 10, (10, 12)), QueueInfo("%RETRY%g_T", 0, 4, (4,))]
    start, msgs, counts = build_queue_info(qs)
    assert start == "0 1 10;1 0 4"
    assert msgs == "0 1 10,12;1 0 4"
    assert counts == ""
    assert parse_start_offset_info(start) == {"0@1": 10, "1@0": 4}
    assert parse_msg_offset_info(msgs) == {"0@1": [10, 12], "1@0": [4]}
    _, _, counts = build_queue_info([QueueInfo("T", 2, 5, (5, 6), {5: 2})])
    assert counts == "0 qo2%5 2;0 2 0"
    assert parse_order_count_info(counts) == {"0@qo2%5": 2, "0@2": 0}
    with pytest.raises(ProtocolError, match="startOffsetInfo"):
        parse_start_offset_info("0 1")


def test_check_point_json_and_keys() -> None:
    ck = PopCheckPoint(10, 1000, 60000, 1, "T", "g", "broker-a", [0, 2])
    body = ck.encode()
    assert body == (
        b'{"bm":0,"bn":"broker-a","c":"g","d":[0,2],"it":60000,"n":2,"pt":1000,"q":1,'
        b'"reviveTime":61000,"ro":0,"so":10,"t":"T"}'
    )
    back = PopCheckPoint.decode(body)
    assert back == ck and back.offsets() == [10, 12]
    assert back.index_of_ack(12) == 1 and back.index_of_ack(11) == -1
    assert ck_unique_id(ck) == "T@1@10@g@1000@broker-a@ck"
    # a ck without d: n messages from so
    assert PopCheckPoint.decode(b'{"so":3,"pt":1,"it":2,"q":0,"t":"T","c":"g","n":2}').offsets() == [3, 4]
    with pytest.raises(ProtocolError, match="'so'"):
        PopCheckPoint.decode(b'{"pt":1,"it":2,"q":0,"t":"T","c":"g"}')
    with pytest.raises(ProtocolError, match="JSON"):
        PopCheckPoint.decode(b"not json")


def test_ack_json() -> None:
    ack = AckMsg([12], 10, "g", "T", 1, 1000, "broker-a")
    assert ack.encode() == b'{"ao":12,"bn":"broker-a","c":"g","pt":1000,"q":1,"so":10,"t":"T"}'
    assert AckMsg.decode(ack.encode()) == ack
    assert ack.ck_key() == PopCheckPoint(10, 1000, 1, 1, "T", "g", "broker-a", [2]).key()
    assert ack_unique_id(ack) == "T@1@12@g@1000@broker-a@ack"
    batch = AckMsg.decode(b'{"ao":-1,"aol":[10,11],"so":10,"c":"g","t":"T","q":1,"pt":1000,"bn":"b"}')
    assert batch.ack_offsets == [10, 11] and batch.is_batch
    # Java's long names are accepted too (alternateNames)
    assert AckMsg.decode(
        b'{"ackOffset":1,"startOffset":0,"consumerGroup":"g","topic":"T","queueId":0,"popTime":5}'
    ).ack_offsets == [1]
