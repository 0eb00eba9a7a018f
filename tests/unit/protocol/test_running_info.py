"""ConsumerRunningInfo, ConsumeMessageDirectlyResult and the 307/309 headers as RocketMQ
4.9.8 / fastjson 1.2.83 write them."""

from __future__ import annotations

import pytest

from rmq.common import fastjson
from rmq.protocol.bodies import MessageQueue, SubscriptionData
from rmq.protocol.errors import ProtocolError
from rmq.protocol.headers import HeaderFieldError
from rmq.protocol.running_info import (
    CMResult,
    ConsumeMessageDirectlyResult,
    ConsumeMessageDirectlyResultRequestHeader,
    ConsumerRunningInfo,
    ConsumeStatus,
    GetConsumerRunningInfoRequestHeader,
    ProcessQueueInfo,
)

_PQ = (
    '{"cachedMsgCount":2,"cachedMsgMaxOffset":11,"cachedMsgMinOffset":10,"cachedMsgSizeInMiB":0,'
    '"commitOffset":10,"droped":false,"lastConsumeTimestamp":1700000000300,"lastLockTimestamp":1700000000100,'
    '"lastPullTimestamp":1700000000200,"locked":true,"transactionMsgCount":0,"transactionMsgMaxOffset":0,'
    '"transactionMsgMinOffset":0,"tryUnlockTimes":0}'
)
_PQ0 = (
    '{"cachedMsgCount":0,"cachedMsgMaxOffset":0,"cachedMsgMinOffset":0,"cachedMsgSizeInMiB":0,'
    '"commitOffset":5,"droped":false,"lastConsumeTimestamp":0,"lastLockTimestamp":0,'
    '"lastPullTimestamp":0,"locked":false,"transactionMsgCount":0,"transactionMsgMaxOffset":0,'
    '"transactionMsgMinOffset":0,"tryUnlockTimes":0}'
)
_STATUS = (
    '{"consumeFailedMsgs":3,"consumeFailedTPS":0.0,"consumeOKTPS":12.5,"consumeRT":1.25,"pullRT":0.0,"pullTPS":33.0}'
)
_SUB_RETRY = (
    '{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*","subVersion":1700000000000,'
    '"tagsSet":[],"topic":"%RETRY%G"}'
)
_SUB_T = (
    '{"classFilterMode":false,"codeSet":[65,66],"expressionType":"TAG","subString":"A || B",'
    '"subVersion":1700000000000,"tagsSet":["A","B"],"topic":"T"}'
)
# fastjson's bytes: bean properties sorted, the TreeMap/TreeSet contents in their Java order, the
# MessageQueue keys of mqTable in key position. (Java writes the Properties in its Hashtable's
# order; rmq sorts them; readers take any order.)
GOLDEN = (
    '{"jstack":"\\"main\\"\\n","mqTable":{'
    '{"brokerName":"broker-a","queueId":0,"topic":"T"}:' + _PQ + ","
    '{"brokerName":"broker-a","queueId":1,"topic":"T"}:' + _PQ0 + "},"
    '"properties":{"PROP_CONSUMER_START_TIMESTAMP":"1700000000000","PROP_CONSUME_TYPE":"CONSUME_PASSIVELY",'
    '"consumerGroup":"G"},'
    '"statusTable":{"%RETRY%G":' + _STATUS + ',"T":' + _STATUS + "},"
    '"subscriptionSet":[' + _SUB_RETRY + "," + _SUB_T + "]}"
)


def golden_info() -> ConsumerRunningInfo:
    status = ConsumeStatus(0.0, 33.0, 1.25, 12.5, 0.0, 3)
    return ConsumerRunningInfo(
        properties={
            "consumerGroup": "G",
            "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
            "PROP_CONSUMER_START_TIMESTAMP": "1700000000000",
        },
        subscription_set=[
            SubscriptionData.build("T", "A || B", sub_version=1700000000000),
            SubscriptionData.build("%RETRY%G", "*", sub_version=1700000000000),
        ],
        mq_table={
            MessageQueue("T", "broker-a", 1): ProcessQueueInfo(commit_offset=5),
            MessageQueue("T", "broker-a", 0): ProcessQueueInfo(
                10, 10, 11, 2, 0, 0, 0, 0, True, 0, 1700000000100, False, 1700000000200, 1700000000300
            ),
        },
        status_table={"T": status, "%RETRY%G": status},
        jstack='"main"\n',
    )


def test_running_info_is_written_as_fastjson_writes_it():
    assert golden_info().to_json().decode() == GOLDEN


def test_running_info_reads_what_java_writes():
    info = ConsumerRunningInfo.from_json(GOLDEN.encode())
    want = golden_info()
    assert info.properties == want.properties
    assert info.mq_table == want.mq_table
    assert info.status_table == want.status_table
    assert info.jstack == want.jstack
    assert sorted(s.topic for s in info.subscription_set) == ["%RETRY%G", "T"]
    assert ConsumerRunningInfo.from_json(info.to_json()).to_json() == GOLDEN.encode()


def test_running_info_round_trip_empty_and_pull_style():
    info = ConsumerRunningInfo({"PROP_CONSUME_TYPE": "CONSUME_ACTIVELY"})
    text = info.to_json()
    assert (
        text
        == b'{"mqTable":{},"properties":{"PROP_CONSUME_TYPE":"CONSUME_ACTIVELY"},"statusTable":{},"subscriptionSet":[]}'
    )
    assert ConsumerRunningInfo.from_json(text) == info
    # properties read whatever order the Java Hashtable iterated in; absent parts are empty
    assert ConsumerRunningInfo.from_json(b'{"properties":{"b":"1","a":"2"}}').properties == {"b": "1", "a": "2"}
    assert ConsumerRunningInfo.from_json(b"{}") == ConsumerRunningInfo()


@pytest.mark.parametrize(
    "bad",
    [
        b'{"mqTable":{"x":{}}}',  # a string where the MessageQueue goes
        b'{"mqTable":{{"topic":"T","brokerName":"b","queueId":0}:{"commitOffset":"x"}}}',
        b'{"statusTable":{"T":{"pullTPS":"fast"}}}',
        b'{"subscriptionSet":{}}',
        b'{"properties":[]}',
        b'{"mqTable":{',
        b"[]",
    ],
)
def test_running_info_refuses_malformed(bad):
    with pytest.raises(ProtocolError):
        ConsumerRunningInfo.from_json(bad)


def test_consume_status_reads_integers_and_numeric_strings():
    s = ConsumeStatus.from_obj({"pullRT": 2, "consumeOKTPS": "1.5", "consumeFailedMsgs": "4"})
    assert (s.pull_rt, s.consume_ok_tps, s.consume_failed_msgs) == (2.0, 1.5, 4)


def test_consume_message_directly_result_json_and_to_string():
    r = ConsumeMessageDirectlyResult(consume_result=CMResult.CR_SUCCESS, spent_time_mills=3)
    # remark null: left out, as fastjson leaves out null properties
    assert r.to_json() == b'{"autoCommit":true,"consumeResult":"CR_SUCCESS","order":false,"spentTimeMills":3}'
    assert ConsumeMessageDirectlyResult.from_json(r.to_json()) == r
    assert str(r) == (
        "ConsumeMessageDirectlyResult [order=false, autoCommit=true, consumeResult=CR_SUCCESS, "
        "remark=null, spentTimeMills=3]"
    )
    thrown = ConsumeMessageDirectlyResult.from_json(
        b'{"autoCommit":false,"consumeResult":"CR_THROW_EXCEPTION","order":true,"remark":"E: x","spentTimeMills":0}'
    )
    assert (thrown.order, thrown.auto_commit, thrown.consume_result, thrown.remark) == (
        True,
        False,
        CMResult.CR_THROW_EXCEPTION,
        "E: x",
    )
    assert "consumeResult=null" in str(ConsumeMessageDirectlyResult())
    with pytest.raises(ProtocolError):
        ConsumeMessageDirectlyResult.from_json(b'{"consumeResult":"CR_MAYBE"}')


def test_headers_wire_form():
    h = GetConsumerRunningInfoRequestHeader("G", "10.0.0.1@123")
    # jstackEnable is a Java primitive: always on the wire
    assert h.to_ext_fields() == {"consumerGroup": "G", "clientId": "10.0.0.1@123", "jstackEnable": "false"}
    assert GetConsumerRunningInfoRequestHeader.from_ext_fields(
        {"consumerGroup": "G", "clientId": "c", "jstackEnable": "true"}
    ).jstack_enable
    with pytest.raises(HeaderFieldError, match="clientId"):
        GetConsumerRunningInfoRequestHeader.from_ext_fields({"consumerGroup": "G"})
    d = ConsumeMessageDirectlyResultRequestHeader("G", "c", "0A" * 16)
    assert d.to_ext_fields() == {"consumerGroup": "G", "clientId": "c", "msgId": "0A" * 16}
    assert ConsumeMessageDirectlyResultRequestHeader.from_ext_fields(
        {"consumerGroup": "G", "brokerName": "broker-a"}
    ) == ConsumeMessageDirectlyResultRequestHeader("G", None, None, "broker-a")


def test_split_object_keyed_map():
    props, entries = fastjson.split_object_keyed_map(
        b'{"a":1,"m":{{"k":1}:[2],{"k":2}:3},"z":{"y":[1,{"x":"}"}]},0:"bare"}', "m"
    )
    assert props == {"a": 1, "z": {"y": [1, {"x": "}"}]}, "0": "bare"}
    assert entries == [({"k": 1}, [2]), ({"k": 2}, 3)]
    assert fastjson.split_object_keyed_map(b'{"m":null}', "m") == ({}, [])
