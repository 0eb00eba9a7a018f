"""Typed custom headers (rmq.protocol.headers) and the code tables (rmq.protocol.codes)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.protocol import headers as H
from rmq.protocol.codes import (
    LanguageCode,
    MQVersion,
    PermName,
    PullSysFlag,
    RemotingFlag,
    RemotingSysResponseCode,
    RequestCode,
    ResponseCode,
    SerializeType,
    request_name,
    response_name,
)
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import FrameDecoder, RemotingCommand, encode
from rmq.protocol.headers import HeaderFieldError, Long

ALL_HEADERS = [
    cls for cls in vars(H).values() if isinstance(cls, type) and issubclass(cls, H.Header) and cls is not H.Header
]

SAMPLE = {H.STR: "some-value é", H.INT: -2147483648, H.LONG: 9223372036854775807, H.BOOL: True}


def sample(cls: type[H.Header]) -> H.Header:
    return cls(*[SAMPLE[f.kind] for f in cls.FIELDS])


def minimal(cls: type[H.Header]) -> H.Header:
    return cls(*[SAMPLE[f.kind] if f.required else f.default for f in cls.FIELDS])


# --------------------------------------------------------------------------- the tables
def test_every_spec_header_exists():
    names = {cls.__name__ for cls in ALL_HEADERS}
    assert names >= {
        "SendMessageRequestHeader",
        "SendMessageRequestHeaderV2",
        "SendMessageResponseHeader",
        "PullMessageRequestHeader",
        "PullMessageResponseHeader",
        "QueryConsumerOffsetRequestHeader",
        "QueryConsumerOffsetResponseHeader",
        "UpdateConsumerOffsetRequestHeader",
        "GetMaxOffsetRequestHeader",
        "GetMaxOffsetResponseHeader",
        "GetMinOffsetRequestHeader",
        "GetMinOffsetResponseHeader",
        "SearchOffsetRequestHeader",
        "SearchOffsetResponseHeader",
        "GetEarliestMsgStoretimeRequestHeader",
        "GetEarliestMsgStoretimeResponseHeader",
        "ConsumerSendMsgBackRequestHeader",
        "QueryMessageRequestHeader",
        "QueryMessageResponseHeader",
        "ViewMessageRequestHeader",
        "EndTransactionRequestHeader",
        "CheckTransactionStateRequestHeader",
        "CreateTopicRequestHeader",
        "RegisterBrokerRequestHeader",
        "RegisterBrokerResponseHeader",
        "UnRegisterBrokerRequestHeader",
        "GetRouteInfoRequestHeader",
        "GetConsumerListByGroupRequestHeader",
        "NotifyConsumerIdsChangedRequestHeader",
        "UnregisterClientRequestHeader",
    }


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=lambda c: c.__name__)
def test_table_matches_dataclass(cls):
    fields = dataclasses.fields(cls)
    assert [f.name for f in fields] == [t.attr for t in cls.FIELDS]
    wires = [t.wire for t in cls.FIELDS]
    assert len(set(wires)) == len(wires)
    for f, t in zip(fields, cls.FIELDS, strict=True):
        assert t.kind in (H.STR, H.INT, H.LONG, H.BOOL)
        assert t.required == (f.default is dataclasses.MISSING)
    assert not hasattr(sample(cls), "__dict__")  # slots: no per-instance dict


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=lambda c: c.__name__)
def test_round_trip_every_header(cls):
    for h in (sample(cls), minimal(cls)):
        ext = h.to_ext_fields()
        assert all(type(k) is str and type(v) is str for k, v in ext.items())
        assert cls.from_ext_fields(ext) == h
        # and through a real frame, both encodings
        for st_ in (SerializeType.JSON, SerializeType.ROCKETMQ):
            [cmd] = FrameDecoder().feed(encode(RemotingCommand(1, ext_fields=ext), st_))
            assert cls.from_ext_fields(cmd.ext_fields) == h


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=lambda c: c.__name__)
def test_each_missing_required_field_is_named(cls):
    ext = sample(cls).to_ext_fields()
    for f in cls.FIELDS:
        if not f.required:
            continue
        partial = {k: v for k, v in ext.items() if k != f.wire}
        with pytest.raises(HeaderFieldError, match=f"^the custom field <{f.wire}> is null$") as ei:
            cls.from_ext_fields(partial)
        assert (ei.value.field, ei.value.reason) == (f.wire, "is null")


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=lambda c: c.__name__)
def test_each_numeric_field_rejects_garbage(cls):
    ext = sample(cls).to_ext_fields()
    for f in cls.FIELDS:
        if f.kind in (H.INT, H.LONG):
            with pytest.raises(HeaderFieldError, match=f"^the custom field <{f.wire}> is not a number: x$") as ei:
                cls.from_ext_fields({**ext, f.wire: "x"})
            assert ei.value.field == f.wire


def test_none_ext_fields():
    assert H.RegisterBrokerResponseHeader.from_ext_fields(None) == H.RegisterBrokerResponseHeader()
    with pytest.raises(ProtocolError, match="the custom field <topic> is null"):
        H.GetRouteInfoRequestHeader.from_ext_fields(None)


def test_none_fields_are_omitted_and_defaults_are_sent():
    h = H.SendMessageRequestHeader("pg", "T", "TBW102", 4, -1, 0, 1, 0)
    assert h.to_ext_fields() == {
        "producerGroup": "pg",
        "topic": "T",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "-1",
        "sysFlag": "0",
        "bornTimestamp": "1",
        "flag": "0",
        "unitMode": "false",
        "batch": "false",
    }
    r = H.RegisterBrokerRequestHeader("b", "1.2.3.4:10911", "c", "1.2.3.4:10912", 0)
    assert r.to_ext_fields()["compressed"] == "false" and r.to_ext_fields()["bodyCrc32"] == "0"
    assert "heartbeatTimeoutMillis" not in r.to_ext_fields()
    # missing optional fields decode to the defaults
    back = H.RegisterBrokerRequestHeader.from_ext_fields(
        {"brokerName": "b", "brokerAddr": "a", "clusterName": "c", "haServerAddr": "h", "brokerId": "1"}
    )
    assert back.compressed is False and back.body_crc32 == 0 and back.enable_acting_master is None


def test_unknown_ext_keys_are_ignored():
    ext = {"consumerGroup": "g", "AccessKey": "", "Signature": "", "OnsChannel": "ALIYUN", "ns": "x", "bname": "b"}
    assert H.GetConsumerListByGroupRequestHeader.from_ext_fields(ext).consumer_group == "g"


# --------------------------------------------------------------------------- value parsing
@pytest.mark.parametrize(
    "raw, value",
    [
        ("0", 0),
        ("42", 42),
        ("-7", -7),
        ("+7", 7),
        ("007", 7),
        ("2147483647", 2147483647),
        ("-2147483648", -2147483648),
        ("١٢", 12),  # Java's parseInt takes any Unicode digit
    ],
)
def test_int_values(raw, value):
    h = H.GetMinOffsetRequestHeader.from_ext_fields({"topic": "t", "queueId": raw})
    assert h.queue_id == value


@pytest.mark.parametrize("raw", ["", " 1", "1 ", "1_000", "0x10", "1.0", "1e3", "--1", "+", "١٢x", "²"])
def test_int_garbage(raw):
    with pytest.raises(HeaderFieldError, match="the custom field <queueId> is not a number"):
        H.GetMinOffsetRequestHeader.from_ext_fields({"topic": "t", "queueId": raw})


@pytest.mark.parametrize("raw", ["2147483648", "-2147483649", "99999999999999999999"])
def test_int_out_of_range(raw):
    with pytest.raises(HeaderFieldError, match="the custom field <queueId> is out of range for int"):
        H.GetMinOffsetRequestHeader.from_ext_fields({"topic": "t", "queueId": raw})


def test_long_range_and_python_digit_limit():
    ok = {"offset": "-9223372036854775808"}
    assert H.GetMaxOffsetResponseHeader.from_ext_fields(ok).offset == -(2**63)
    for raw in ("9223372036854775808", "1" * 5000):
        with pytest.raises(ProtocolError, match="out of range for long"):
            H.GetMaxOffsetResponseHeader.from_ext_fields({"offset": raw})


@pytest.mark.parametrize(
    "raw, value",
    [
        ("true", True),
        ("TRUE", True),
        ("True", True),
        ("tRuE", True),
        ("false", False),
        ("False", False),
        ("1", False),
        ("yes", False),
        ("", False),
        (" true", False),
    ],
)
def test_bool_values_follow_parse_boolean(raw, value):
    h = H.GetRouteInfoRequestHeader.from_ext_fields({"topic": "t", "acceptStandardJsonOnly": raw})
    assert h.accept_standard_json_only is value


def test_bool_and_int_formatting():
    h = H.QueryConsumerOffsetRequestHeader("g", "t", 3, set_zero_if_not_found=False)
    assert h.to_ext_fields() == {"consumerGroup": "g", "topic": "t", "queueId": "3", "setZeroIfNotFound": "false"}


# --------------------------------------------------------------------------- send (2.4)
V2_EXT = {
    "a": "pg",
    "b": "TopicA",
    "c": "TBW102",
    "d": "4",
    "e": "3",
    "f": "4",
    "g": "1700000000123",
    "h": "16",
    "i": "TAGS\x01t\x02WAIT\x01true\x02",
    "j": "2",
    "k": "true",
    "l": "16",
    "m": "true",
    "n": "broker-a",
}


def test_v2_key_mapping():
    v1 = H.SendMessageRequestHeader.from_v2_ext_fields(V2_EXT)
    assert v1 == H.SendMessageRequestHeader(
        producer_group="pg",
        topic="TopicA",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=3,
        sys_flag=4,
        born_timestamp=1700000000123,
        flag=16,
        properties="TAGS\x01t\x02WAIT\x01true\x02",
        reconsume_times=2,
        unit_mode=True,
        batch=True,
        max_reconsume_times=16,
        broker_name="broker-a",
    )
    assert v1.to_v2_ext_fields() == V2_EXT
    v1_wire = v1.to_ext_fields()
    assert v1_wire["producerGroup"] == "pg" and v1_wire["bname"] == "broker-a"
    assert v1_wire["maxReconsumeTimes"] == "16" and v1_wire["batch"] == "true"


def test_v2_fast_path_agrees_with_the_generic_v2_header():
    v2 = H.SendMessageRequestHeaderV2.from_ext_fields(V2_EXT)
    assert (v2.a, v2.d, v2.g, v2.k, v2.l, v2.n) == ("pg", 4, 1700000000123, True, 16, "broker-a")
    assert v2.to_v1() == H.SendMessageRequestHeader.from_v2_ext_fields(V2_EXT)
    assert H.SendMessageRequestHeaderV2.from_v1(v2.to_v1()) == v2
    assert v2.to_ext_fields() == V2_EXT
    minimal_ext = {k: V2_EXT[k] for k in "abcdefgh"}
    v1 = H.SendMessageRequestHeader.from_v2_ext_fields(minimal_ext)
    assert (v1.properties, v1.reconsume_times, v1.unit_mode, v1.batch, v1.max_reconsume_times, v1.broker_name) == (
        None,
        None,
        False,
        False,
        None,
        None,
    )
    assert H.SendMessageRequestHeaderV2.from_ext_fields(minimal_ext).to_v1() == v1


@pytest.mark.parametrize("key", list("abcdefgh"))
def test_v2_missing_required_key(key):
    names = {
        "a": "producerGroup",
        "b": "topic",
        "c": "defaultTopic",
        "d": "defaultTopicQueueNums",
        "e": "queueId",
        "f": "sysFlag",
        "g": "bornTimestamp",
        "h": "flag",
    }
    ext = {k: v for k, v in V2_EXT.items() if k != key}
    with pytest.raises(HeaderFieldError, match=rf"^the custom field <{key}> \({names[key]}\) is null$") as ei:
        H.SendMessageRequestHeader.from_v2_ext_fields(ext)
    assert ei.value.field == key
    with pytest.raises(HeaderFieldError, match=f"^the custom field <{key}> is null$"):
        H.SendMessageRequestHeaderV2.from_ext_fields(ext)


def test_v2_missing_everything():
    with pytest.raises(HeaderFieldError, match=r"the custom field <a> \(producerGroup\) is null"):
        H.SendMessageRequestHeader.from_v2_ext_fields(None)


@pytest.mark.parametrize(
    "key, raw", [("d", "four"), ("e", "1.5"), ("f", ""), ("g", "x"), ("h", "2147483648"), ("j", "-"), ("l", "z")]
)
def test_v2_bad_numbers(key, raw):
    with pytest.raises(HeaderFieldError, match=f"^the custom field <{key}> "):
        H.SendMessageRequestHeader.from_v2_ext_fields({**V2_EXT, key: raw})


def test_v2_bool_spellings():
    for raw, value in (("False", False), ("TRUE", True), ("1", False)):
        v1 = H.SendMessageRequestHeader.from_v2_ext_fields({**V2_EXT, "k": raw, "m": raw})
        assert v1.unit_mode is value and v1.batch is value


def test_send_response_hand_written_matches_generic():
    generic_from = H.Header.from_ext_fields.__func__  # type: ignore[attr-defined]
    generic_to = H.Header.to_ext_fields
    for h in (
        H.SendMessageResponseHeader("MSGID", 1, 2),
        H.SendMessageResponseHeader("MSGID", -1, 2**62, "tx", "batch", "recall"),
    ):
        ext = h.to_ext_fields()
        assert ext == generic_to(h)
        assert list(ext) == list(generic_to(h))
        assert H.SendMessageResponseHeader.from_ext_fields(ext) == generic_from(H.SendMessageResponseHeader, ext) == h
    for bad, match in (
        ({}, "the custom field <msgId> is null"),
        ({"msgId": "m", "queueId": "1"}, "the custom field <queueOffset> is null"),
        ({"msgId": "m", "queueId": "q", "queueOffset": "1"}, "the custom field <queueId> is not a number: q"),
        (None, "the custom field <msgId> is null"),
    ):
        with pytest.raises(HeaderFieldError, match=match):
            H.SendMessageResponseHeader.from_ext_fields(bad)


headers_v1 = st.builds(
    H.SendMessageRequestHeader,
    producer_group=st.text(min_size=1, max_size=20),
    topic=st.text(min_size=1, max_size=20),
    default_topic=st.text(min_size=1, max_size=10),
    default_topic_queue_nums=st.integers(-(2**31), 2**31 - 1),
    queue_id=st.integers(-(2**31), 2**31 - 1),
    sys_flag=st.integers(0, 2**31 - 1),
    born_timestamp=st.integers(-(2**63), 2**63 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    properties=st.none() | st.text(max_size=50),
    reconsume_times=st.none() | st.integers(0, 100),
    unit_mode=st.booleans(),
    batch=st.booleans(),
    max_reconsume_times=st.none() | st.integers(-1, 100),
    broker_name=st.none() | st.text(min_size=1, max_size=10),
)


@given(headers_v1)
@settings(max_examples=200, deadline=None)
def test_v1_v2_round_trips(h):
    assert H.SendMessageRequestHeader.from_v2_ext_fields(h.to_v2_ext_fields()) == h
    assert H.SendMessageRequestHeader.from_ext_fields(h.to_ext_fields()) == h
    assert h.to_v2().to_v1() == h
    assert H.SendMessageRequestHeaderV2.from_ext_fields(h.to_v2_ext_fields()) == h.to_v2()


# --------------------------------------------------------------------------- wire names (spec)
@pytest.mark.parametrize(
    "cls, wires",
    [
        (
            H.PullMessageRequestHeader,
            [
                "consumerGroup",
                "topic",
                "queueId",
                "queueOffset",
                "maxMsgNums",
                "sysFlag",
                "commitOffset",
                "suspendTimeoutMillis",
                "subVersion",
                "subscription",
                "expressionType",
                "maxMsgBytes",
                "requestSource",
                "proxyFrowardClientId",
            ],
        ),
        (
            H.PullMessageResponseHeader,
            [
                "suggestWhichBrokerId",
                "nextBeginOffset",
                "minOffset",
                "maxOffset",
                "offsetDelta",
                "topicSysFlag",
                "groupSysFlag",
                "forbiddenType",
            ],
        ),
        (
            H.ConsumerSendMsgBackRequestHeader,
            ["offset", "group", "delayLevel", "originMsgId", "originTopic", "unitMode", "maxReconsumeTimes"],
        ),
        (
            H.QueryMessageRequestHeader,
            ["topic", "key", "maxNum", "beginTimestamp", "endTimestamp", "_UNIQUE_KEY_QUERY"],
        ),
        (H.QueryMessageResponseHeader, ["indexLastUpdateTimestamp", "indexLastUpdatePhyoffset"]),
        (
            H.EndTransactionRequestHeader,
            [
                "producerGroup",
                "tranStateTableOffset",
                "commitLogOffset",
                "commitOrRollback",
                "msgId",
                "topic",
                "fromTransactionCheck",
                "transactionId",
            ],
        ),
        (
            H.CheckTransactionStateRequestHeader,
            ["tranStateTableOffset", "commitLogOffset", "topic", "msgId", "transactionId", "offsetMsgId"],
        ),
        (
            H.CreateTopicRequestHeader,
            [
                "topic",
                "defaultTopic",
                "readQueueNums",
                "writeQueueNums",
                "perm",
                "topicFilterType",
                "topicSysFlag",
                "order",
                "attributes",
                "force",
            ],
        ),
        (
            H.RegisterBrokerRequestHeader,
            [
                "brokerName",
                "brokerAddr",
                "clusterName",
                "haServerAddr",
                "brokerId",
                "heartbeatTimeoutMillis",
                "enableActingMaster",
                "compressed",
                "bodyCrc32",
            ],
        ),
        (H.RegisterBrokerResponseHeader, ["haServerAddr", "masterAddr"]),
        (H.UnRegisterBrokerRequestHeader, ["brokerName", "brokerAddr", "clusterName", "brokerId"]),
        (H.UnregisterClientRequestHeader, ["clientID", "producerGroup", "consumerGroup"]),
        (H.SearchOffsetRequestHeader, ["topic", "queueId", "timestamp", "boundaryType"]),
        (H.GetEarliestMsgStoretimeResponseHeader, ["timestamp"]),
        (
            H.SendMessageResponseHeader,
            ["msgId", "queueId", "queueOffset", "transactionId", "batchUniqId", "recallHandle"],
        ),
    ],
)
def test_wire_names(cls, wires):
    assert [f.wire for f in cls.FIELDS] == wires


def test_pull_request_from_a_java_consumer():
    ext = {
        "consumerGroup": "cg",
        "topic": "T",
        "queueId": "2",
        "queueOffset": "100",
        "maxMsgNums": "32",
        "sysFlag": str(PullSysFlag.build(True, True, True)),
        "commitOffset": "90",
        "suspendTimeoutMillis": "15000",
        "subscription": "tagA || tagB",
        "subVersion": "1700000000000",
        "expressionType": "TAG",
    }
    h = H.PullMessageRequestHeader.from_ext_fields(ext)
    assert h.sys_flag == 7 and PullSysFlag.has_suspend(h.sys_flag)
    assert h.subscription == "tagA || tagB" and h.max_msg_bytes is None
    assert h.to_ext_fields() == ext


def test_request_header_registry():
    assert H.REQUEST_HEADERS[RequestCode.SEND_MESSAGE_V2] is H.SendMessageRequestHeaderV2
    assert H.REQUEST_HEADERS[RequestCode.SEND_BATCH_MESSAGE] is H.SendMessageRequestHeaderV2
    assert H.REQUEST_HEADERS[RequestCode.LITE_PULL_MESSAGE] is H.PullMessageRequestHeader
    for code, cls in H.REQUEST_HEADERS.items():
        assert RequestCode.is_known(code) and issubclass(cls, H.Header)
    with pytest.raises(TypeError):
        H.REQUEST_HEADERS[1] = H.Header  # type: ignore[index]


def test_wire_decorator_refuses_inconsistent_tables():
    with pytest.raises(TypeError, match="does not match"):

        @H._wire(("x", "x", H.STR, H.REQUIRED))
        @dataclasses.dataclass(slots=True)
        class Bad(H.Header):
            y: str

    with pytest.raises(TypeError, match="required fields take no default"):

        @H._wire(("x", "x", H.STR, H.REQUIRED))
        @dataclasses.dataclass(slots=True)
        class Bad2(H.Header):
            x: str = "d"


def test_wire_decorator_reads_the_table_from_the_fields():
    @H._wire(client_id="clientID")
    @dataclasses.dataclass(slots=True)
    class Derived(H.Header):
        client_id: str
        queue_offset: Long
        queue_id: int | None = None
        order: bool = False

    assert Derived.FIELDS == (
        H.HeaderField("client_id", "clientID", H.STR, True, None),
        H.HeaderField("queue_offset", "queueOffset", H.LONG, True, None),
        H.HeaderField("queue_id", "queueId", H.INT, False, None),
        H.HeaderField("order", "order", H.BOOL, False, False),
    )
    with pytest.raises(TypeError, match="unknown fields"):

        @H._wire(nope="x")
        @dataclasses.dataclass(slots=True)
        class Bad(H.Header):
            x: str

    with pytest.raises(TypeError, match="no wire kind"):

        @H._wire()
        @dataclasses.dataclass(slots=True)
        class Bad2(H.Header):
            x: float


# --------------------------------------------------------------------------- codes
def test_request_codes_from_the_spec():
    expected = {
        "SEND_MESSAGE": 10,
        "PULL_MESSAGE": 11,
        "QUERY_MESSAGE": 12,
        "QUERY_BROKER_OFFSET": 13,
        "QUERY_CONSUMER_OFFSET": 14,
        "UPDATE_CONSUMER_OFFSET": 15,
        "UPDATE_AND_CREATE_TOPIC": 17,
        "GET_ALL_TOPIC_CONFIG": 21,
        "SEARCH_OFFSET_BY_TIMESTAMP": 29,
        "GET_MAX_OFFSET": 30,
        "GET_MIN_OFFSET": 31,
        "GET_EARLIEST_MSG_STORETIME": 32,
        "VIEW_MESSAGE_BY_ID": 33,
        "HEART_BEAT": 34,
        "UNREGISTER_CLIENT": 35,
        "CONSUMER_SEND_MSG_BACK": 36,
        "END_TRANSACTION": 37,
        "GET_CONSUMER_LIST_BY_GROUP": 38,
        "CHECK_TRANSACTION_STATE": 39,
        "NOTIFY_CONSUMER_IDS_CHANGED": 40,
        "LOCK_BATCH_MQ": 41,
        "UNLOCK_BATCH_MQ": 42,
        "GET_ALL_CONSUMER_OFFSET": 43,
        "GET_ALL_DELAY_OFFSET": 45,
        "PUT_KV_CONFIG": 100,
        "GET_KV_CONFIG": 101,
        "DELETE_KV_CONFIG": 102,
        "REGISTER_BROKER": 103,
        "UNREGISTER_BROKER": 104,
        "GET_ROUTEINFO_BY_TOPIC": 105,
        "GET_BROKER_CLUSTER_INFO": 106,
        "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP": 200,
        "GET_ALL_TOPIC_LIST_FROM_NAMESERVER": 206,
        "SEND_MESSAGE_V2": 310,
        "SEND_BATCH_MESSAGE": 320,
        "SEND_REPLY_MESSAGE": 324,
        "SEND_REPLY_MESSAGE_V2": 325,
        "LITE_PULL_MESSAGE": 361,
        "BROKER_HEARTBEAT": 904,
        # 5.x selection
        "UPDATE_AND_CREATE_TOPIC_LIST": 18,
        "GET_TOPIC_CONFIG_LIST": 22,
        "GET_TOPIC_NAME_LIST": 23,
        "UPDATE_BROKER_CONFIG": 25,
        "GET_BROKER_CONFIG": 26,
        "TRIGGER_DELETE_FILES": 27,
        "GET_BROKER_RUNTIME_INFO": 28,
        "CHECK_CLIENT_CONFIG": 46,
        "GET_CLIENT_CONFIG": 47,
        "GET_TIMER_CHECK_POINT": 60,
        "GET_TIMER_METRICS": 61,
        "GET_ALL_SUBSCRIPTIONGROUP_CONFIG": 201,
        "GET_TOPIC_STATS_INFO": 202,
        "GET_CONSUMER_CONNECTION_LIST": 203,
        "GET_PRODUCER_CONNECTION_LIST": 204,
        "WIPE_WRITE_PERM_OF_BROKER": 205,
        "DELETE_SUBSCRIPTIONGROUP": 207,
        "GET_CONSUME_STATS": 208,
        "DELETE_TOPIC_IN_BROKER": 215,
        "DELETE_TOPIC_IN_NAMESRV": 216,
        "REGISTER_TOPIC_IN_NAMESRV": 217,
        "GET_TOPICS_BY_CLUSTER": 224,
        "QUERY_TOPIC_CONSUME_BY_WHO": 300,
        "QUERY_CONSUME_TIME_SPAN": 303,
        "GET_SYSTEM_TOPIC_LIST_FROM_NS": 304,
        "GET_SYSTEM_TOPIC_LIST_FROM_BROKER": 305,
        "GET_CONSUMER_RUNNING_INFO": 307,
        "QUERY_CORRECTION_OFFSET": 308,
        "CONSUME_MESSAGE_DIRECTLY": 309,
        "QUERY_CONSUME_QUEUE": 321,
        "QUERY_DATA_VERSION": 322,
        "RESUME_CHECK_HALF_MESSAGE": 323,
        "ADD_WRITE_PERM_OF_BROKER": 327,
        "GET_TOPIC_CONFIG": 351,
        "GET_SUBSCRIPTIONGROUP_CONFIG": 352,
        "RECALL_MESSAGE": 370,
        "QUERY_ASSIGNMENT": 400,
        "SET_MESSAGE_REQUEST_MODE": 401,
        "GET_ALL_MESSAGE_REQUEST_MODE": 402,
        "UPDATE_AND_CREATE_STATIC_TOPIC": 513,
        "GET_BROKER_MEMBER_GROUP": 901,
        "RESET_MASTER_FLUSH_OFFSET": 908,
        "CONTROLLER_ALTER_SYNC_STATE_SET": 1001,
        "CONTROLLER_APPLY_BROKER_ID": 1013,
        "UPDATE_COLD_DATA_FLOW_CTR_CONFIG": 2001,
        "SET_COMMITLOG_READ_MODE": 2004,
        "AUTH_CREATE_USER": 3001,
        "AUTH_LIST_ACL": 3010,
        "POP_MESSAGE": 200050,
        "ACK_MESSAGE": 200051,
        "BATCH_ACK_MESSAGE": 200151,
        "PEEK_MESSAGE": 200052,
        "CHANGE_MESSAGE_INVISIBLETIME": 200053,
        "NOTIFICATION": 200054,
        "POLLING_INFO": 200055,
        "POP_ROLLBACK": 200056,
    }
    for name, code in expected.items():
        assert getattr(RequestCode, name) == code, name
        assert RequestCode.name_of(code) == name


def test_response_codes_from_the_spec():
    expected = {
        "SUCCESS": 0,
        "SYSTEM_ERROR": 1,
        "SYSTEM_BUSY": 2,
        "REQUEST_CODE_NOT_SUPPORTED": 3,
        "TRANSACTION_FAILED": 4,
        "FLUSH_DISK_TIMEOUT": 10,
        "SLAVE_NOT_AVAILABLE": 11,
        "FLUSH_SLAVE_TIMEOUT": 12,
        "MESSAGE_ILLEGAL": 13,
        "SERVICE_NOT_AVAILABLE": 14,
        "VERSION_NOT_SUPPORTED": 15,
        "NO_PERMISSION": 16,
        "TOPIC_NOT_EXIST": 17,
        "TOPIC_EXIST_ALREADY": 18,
        "PULL_NOT_FOUND": 19,
        "PULL_RETRY_IMMEDIATELY": 20,
        "PULL_OFFSET_MOVED": 21,
        "QUERY_NOT_FOUND": 22,
        "SUBSCRIPTION_PARSE_FAILED": 23,
        "SUBSCRIPTION_NOT_EXIST": 24,
        "SUBSCRIPTION_NOT_LATEST": 25,
        "SUBSCRIPTION_GROUP_NOT_EXIST": 26,
        "FILTER_DATA_NOT_EXIST": 27,
        "FILTER_DATA_NOT_LATEST": 28,
        "INVALID_PARAMETER": 29,
        "TRANSACTION_SHOULD_COMMIT": 200,
        "TRANSACTION_SHOULD_ROLLBACK": 201,
        "TRANSACTION_STATE_UNKNOW": 202,
        "TRANSACTION_STATE_GROUP_WRONG": 203,
        "NO_BUYER_ID": 204,
        "NOT_IN_CURRENT_UNIT": 205,
        "CONSUMER_NOT_ONLINE": 206,
        "CONSUME_MSG_TIMEOUT": 207,
        "NO_MESSAGE": 208,
        "POLLING_FULL": 209,
        "POLLING_TIMEOUT": 210,
        "BROKER_NOT_EXIST": 211,
        "BROKER_DISPATCH_NOT_COMPLETE": 212,
        "BROADCAST_CONSUMPTION": 213,
        "FLOW_CONTROL": 215,
        "NOT_LEADER_FOR_QUEUE": 501,
        "ILLEGAL_OPERATION": 604,
        "GO_AWAY": 1500,
        "CONTROLLER_FENCED_MASTER_EPOCH": 2000,
        "CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS": 2016,
        "USER_NOT_EXIST": 3001,
        "POLICY_NOT_EXIST": 3002,
        "RPC_UNKNOWN": -1000,
        "RPC_ADDR_IS_NULL": -1002,
        "RPC_SEND_TO_CHANNEL_FAILED": -1004,
        "RPC_TIME_OUT": -1006,
    }
    for name, code in expected.items():
        assert getattr(ResponseCode, name) == code, name
        assert ResponseCode.name_of(code) == name
    assert RemotingSysResponseCode.name_of(3) == "REQUEST_CODE_NOT_SUPPORTED"
    assert RemotingSysResponseCode.name_of(10) == "10"  # not a remoting-level code


def test_name_lookups_for_logs():
    assert request_name(310) == "SEND_MESSAGE_V2" and request_name(99999) == "99999"
    assert response_name(19) == "PULL_NOT_FOUND" and response_name(-1) == "-1"
    assert not RequestCode.is_known(16)


def test_language_codes():
    assert [LanguageCode.name_of(i) for i in range(14)] == [
        "JAVA",
        "CPP",
        "DOTNET",
        "PYTHON",
        "DELPHI",
        "ERLANG",
        "RUBY",
        "OTHER",
        "HTTP",
        "GO",
        "PHP",
        "OMS",
        "RUST",
        "NODE_JS",
    ]
    assert LanguageCode.from_name("GO") == 9 and LanguageCode.from_name("ZIG") == LanguageCode.OTHER
    assert LanguageCode.name_of(200) == "OTHER"


def test_flags_serialize_types_versions():
    assert (RemotingFlag.RESPONSE, RemotingFlag.ONEWAY) == (1, 2)
    assert (SerializeType.JSON, SerializeType.ROCKETMQ) == (0, 1)
    assert SerializeType.name_of(1) == "ROCKETMQ"
    assert (MQVersion.V3_4_9, MQVersion.V4_9_4, MQVersion.V4_9_8, MQVersion.V5_0_0, MQVersion.V5_3_3) == (
        121,
        401,
        409,
        413,
        479,
    )


def test_pull_sys_flag_and_perm():
    assert (
        PullSysFlag.COMMIT_OFFSET,
        PullSysFlag.SUSPEND,
        PullSysFlag.SUBSCRIPTION,
        PullSysFlag.CLASS_FILTER,
        PullSysFlag.LITE_PULL_MESSAGE,
    ) == (1, 2, 4, 8, 16)
    flag = PullSysFlag.build(commit_offset=True, suspend=False, subscription=True, lite_pull=True)
    assert flag == 0x15 and PullSysFlag.has_commit_offset(flag) and PullSysFlag.has_lite_pull(flag)
    assert PullSysFlag.clear_commit_offset(flag) == 0x14 and not PullSysFlag.has_class_filter(flag)
    assert (PermName.PERM_PRIORITY, PermName.PERM_READ, PermName.PERM_WRITE, PermName.PERM_INHERIT) == (8, 4, 2, 1)
    assert PermName.perm_to_string(6) == "RW-" and PermName.perm_to_string(7) == "RWX"
    assert PermName.perm_to_string(4) == "R--" and PermName.is_writeable(2)
    assert not PermName.is_readable(2)


def test_code_tables_are_read_only():
    with pytest.raises(TypeError):
        RequestCode._NAMES[1] = "X"  # type: ignore[index]


# --------------------------------------------------------------------------- field errors (issue 11)
def test_header_field_error_is_a_protocol_error_with_rocketmq_wording():
    with pytest.raises(HeaderFieldError) as ei:
        H.GetMaxOffsetRequestHeader.from_ext_fields({"queueId": "0"})
    e = ei.value
    assert isinstance(e, ProtocolError)
    assert (e.field, e.reason, str(e)) == ("topic", "is null", "the custom field <topic> is null")
    with pytest.raises(HeaderFieldError) as ei:
        H.GetMaxOffsetRequestHeader.from_ext_fields({"topic": "t", "queueId": "abc"})
    assert (ei.value.field, str(ei.value)) == ("queueId", "the custom field <queueId> is not a number: abc")


def test_header_field_error_cuts_long_values():
    with pytest.raises(HeaderFieldError) as ei:
        H.GetMaxOffsetRequestHeader.from_ext_fields({"topic": "t", "queueId": "x" * 10_000})
    assert len(str(ei.value)) < 120
