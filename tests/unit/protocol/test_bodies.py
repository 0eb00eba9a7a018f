"""JSON bodies of rmq.protocol.bodies: fastjson's two styles, round trips, fuzzing."""

from __future__ import annotations

import dataclasses
import json
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq.protocol.bodies import (
    BOOL,
    INT,
    LONG,
    REQUIRED,
    STR,
    Body,
    BrokerData,
    ClusterInfo,
    Connection,
    ConsumerConnection,
    ConsumerData,
    ConsumerIdList,
    DataVersion,
    HeartbeatData,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    ProducerData,
    QueueData,
    RegisterBrokerBody,
    SubscriptionData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
    UnlockBatchRequestBody,
    dumps_fastjson,
    json_body,
    loads_fastjson,
    loads_object_keyed_map,
)
from rmq.protocol.controller import (
    EpochRecord,
    GroupStatus,
    HeartbeatBody,
    MemberStatus,
    decode_group_statuses,
    encode_group_statuses,
)
from rmq.protocol.errors import ProtocolError
from rmq.protocol.message import java_hash

FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Spec 2.15, verbatim: what a 4.9.8 NameServer (5.x field enableActingMaster included)
# answers an old client.
SPEC_LEGACY_ROUTE = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"192.168.0.47:10911",1:"192.168.0.47:10921"},'
    b'"brokerName":"broker-a","cluster":"TestCluster","enableActingMaster":false}],'
    b'"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,'
    b'"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8}]}'
)

# Spec 2.7, verbatim (5.x heartbeat fields included).
SPEC_HEARTBEAT = (
    b'{"clientID":"10.0.0.5@4242#123","consumerDataSet":[{"consumeFromWhere":'
    b'"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"G1",'
    b'"messageModel":"CLUSTERING","subscriptionDataSet":[{"classFilterMode":false,'
    b'"codeSet":[],"expressionType":"TAG","subString":"*","subVersion":1700000000000,'
    b'"tagsSet":[],"topic":"T1"}],"unitMode":false}],"heartbeatFingerprint":0,'
    b'"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}],"withoutSub":false}'
)


def sample_route() -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[QueueData("broker-a", 8, 8, 6, 0), QueueData("broker-b", 4, 4, 4, 1)],
        broker_datas=[
            BrokerData("C1", "broker-a", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}),
            BrokerData("C1", "broker-b", {0: "10.0.0.3:10911"}),
        ],
        filter_server_table={"10.0.0.1:10911": ["10.0.0.1:30000"]},
        order_topic_conf="broker-a:8;broker-b:4",
    )


# --------------------------------------------------------------------------- TopicRouteData
def test_spec_legacy_example_parses_exactly() -> None:
    route = TopicRouteData.from_json(SPEC_LEGACY_ROUTE)
    assert route == TopicRouteData(
        queue_datas=[QueueData("broker-a", 8, 8, 6, 0)],
        broker_datas=[
            BrokerData(
                "TestCluster",
                "broker-a",
                {0: "192.168.0.47:10911", 1: "192.168.0.47:10921"},
                enable_acting_master=False,
            )
        ],
        filter_server_table={},
    )
    assert route.to_json() == SPEC_LEGACY_ROUTE  # and we write it back byte for byte


def test_route_standard_form_quotes_keys() -> None:
    route = TopicRouteData.from_json(SPEC_LEGACY_ROUTE)
    std = route.to_json(standard=True)
    assert std == SPEC_LEGACY_ROUTE.replace(b"{0:", b'{"0":').replace(b",1:", b',"1":')
    json.loads(std)  # strict JSON
    assert TopicRouteData.from_json(std) == route
    with pytest.raises(ValueError):
        json.loads(route.to_json())  # the legacy form is not


def test_route_round_trip_both_forms() -> None:
    route = sample_route()
    for standard in (False, True):
        assert TopicRouteData.from_json(route.to_json(standard)) == route


def test_route_field_layout() -> None:
    text = sample_route().to_json().decode()
    assert text.startswith(
        '{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a","cluster":"C1"}'
    )
    assert '"filterServerTable":{"10.0.0.1:10911":["10.0.0.1:30000"]}' in text
    assert '"orderTopicConf":"broker-a:8;broker-b:4"' in text
    assert " " not in text
    # absent optional fields are left out, not written as null
    assert "null" not in TopicRouteData().to_json().decode()
    assert TopicRouteData().to_json() == b'{"brokerDatas":[],"filterServerTable":{},"queueDatas":[]}'


def test_standard_form_is_browser_compatible() -> None:
    route = TopicRouteData([QueueData("brökér/ä😀", 1, 1, 6)], [BrokerData("c", "brökér/ä😀", {0: "h:1"})])
    std = route.to_json(True)
    assert std.isascii()
    assert b'"brokerName":"br\\u00F6k\\u00E9r\\/\\u00E4\\uD83D\\uDE00"' in std
    assert TopicRouteData.from_json(std) == route
    legacy = route.to_json(False)
    assert "brökér/ä😀".encode() in legacy  # legacy: raw UTF-8, '/' unescaped
    assert TopicRouteData.from_json(legacy) == route


def test_negative_and_large_broker_ids() -> None:
    bd = BrokerData("c", "b", {-1: "a:1", 0: "a:2", 2**40: "a:3"})
    legacy = bd.to_json()
    assert b'{-1:"a:1",0:"a:2",1099511627776:"a:3"}' in legacy
    assert BrokerData.from_json(legacy) == bd
    assert BrokerData.from_json(bd.to_json(standard=True)) == bd


# --------------------------------------------------------------------------- loads_fastjson
def test_bare_keys_in_nested_objects() -> None:
    # consumerOffset.json shape: integer keys two levels down, blanks around them
    data = b'{"offsetTable":{"T@G":{0:12, 1 :5,\n-3: 7},"x":{}},"n":[{5:{6:[]}}]}'
    assert loads_fastjson(data) == {
        "offsetTable": {"T@G": {"0": 12, "1": 5, "-3": 7}, "x": {}},
        "n": [{"5": {"6": []}}],
    }


@pytest.mark.parametrize(
    "text",
    [
        '{"s":"{0:\\"a\\",1:2}","t":[",7:"]}',
        '{"s":"\\\\",0:"x"}',  # escaped backslash right before the closing quote
        '{"s":"a\\"{0:b"}',
    ],
)
def test_strings_that_look_like_bare_keys_are_untouched(text: str) -> None:
    parsed = loads_fastjson(text.encode())
    expected = json.loads(text.replace(',0:"x"', ',"0":"x"'))
    assert parsed == expected


def test_array_numbers_are_not_keys() -> None:
    assert loads_fastjson(b"[0,1,-2]") == [0, 1, -2]
    assert loads_fastjson(b'{"a":[1,2],3:[4]}') == {"a": [1, 2], "3": [4]}


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b'{"a":}',
        b"{0}",
        b"[0:1]",
        b"\xff\xfe",
        b'{"a":NaN}',
        b"{'a':1}",
        b'{"a":1}x',
        b'{"a" 1}',
        b"[" * 100000,
    ],
)
def test_malformed_input_raises_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        loads_fastjson(data)


@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_random_bytes_only_raise_protocol_error(data: bytes) -> None:
    for reader in (
        loads_fastjson,
        TopicRouteData.from_json,
        ClusterInfo.from_json,
        HeartbeatData.from_json,
        RegisterBrokerBody.from_json,
    ):
        try:
            reader(data)
        except ProtocolError:
            pass
    for compressed in (False, True):
        try:
            RegisterBrokerBody.decode(data, compressed)
        except ProtocolError:
            pass


@FUZZ
@given(st.binary(max_size=200))
def test_fuzz_inflatable_garbage_only_raises_protocol_error(data: bytes) -> None:
    try:
        RegisterBrokerBody.decode(zlib.compress(data), True)
    except ProtocolError:
        pass


@FUZZ
@given(st.sampled_from([SPEC_LEGACY_ROUTE, SPEC_HEARTBEAT]), st.integers(0, 400), st.binary(min_size=1, max_size=3))
def test_fuzz_mutated_bodies_only_raise_protocol_error(seed: bytes, pos: int, junk: bytes) -> None:
    pos %= len(seed)
    data = seed[:pos] + junk + seed[pos + len(junk) :]
    for reader in (TopicRouteData.from_json, HeartbeatData.from_json, BrokerData.from_json):
        try:
            reader(data)
        except ProtocolError:
            pass


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=8))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
        st.dictionaries(st.integers(-1000, 1000), inner, max_size=4),
    ),
    max_leaves=20,
)


def _normalise(v: object) -> object:
    """What a written-then-read value looks like: int keys as strings, null map values gone."""
    if isinstance(v, dict):
        return {str(k): _normalise(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_normalise(x) for x in v]
    return v


@FUZZ
@given(json_values, st.booleans())
def test_dumps_loads_round_trip(value: object, standard: bool) -> None:
    assert loads_fastjson(dumps_fastjson(value, standard)) == _normalise(value)


ALL_BODIES = (
    TopicConfig,
    DataVersion,
    TopicConfigSerializeWrapper,
    RegisterBrokerBody,
    QueueData,
    BrokerData,
    TopicRouteData,
    ClusterInfo,
    TopicList,
    KVTable,
    ProducerData,
    SubscriptionData,
    ConsumerData,
    HeartbeatData,
    ConsumerIdList,
    MessageQueue,
    LockBatchRequestBody,
    LockBatchResponseBody,
    UnlockBatchRequestBody,
)
FIELD_NAMES = st.sampled_from(
    [
        "topicName",
        "perm",
        "readQueueNums",
        "topicFilterType",
        "attributes",
        "counter",
        "timestamp",
        "stateVersion",
        "dataVersion",
        "topicConfigTable",
        "filterServerList",
        "topicConfigSerializeWrapper",
        "brokerName",
        "brokerAddrs",
        "cluster",
        "queueDatas",
        "brokerDatas",
        "filterServerTable",
        "orderTopicConf",
        "brokerAddrTable",
        "clusterAddrTable",
        "topicList",
        "table",
        "groupName",
        "topic",
        "subString",
        "codeSet",
        "tagsSet",
        "subVersion",
        "clientID",
        "consumerDataSet",
        "producerDataSet",
        "subscriptionDataSet",
        "consumerIdList",
        "queueId",
        "mqSet",
        "lockOKMQSet",
        "unitMode",
        "topicSysFlag",
        "enableActingMaster",
        "0",
    ]
)
typed_values = st.recursive(
    json_scalars | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(FIELD_NAMES, inner, max_size=5),
    max_leaves=25,
)


@FUZZ
@given(st.dictionaries(FIELD_NAMES, typed_values, max_size=6))
def test_fuzz_well_formed_json_of_wrong_shape_only_raises_protocol_error(obj: dict) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode()
    for body in ALL_BODIES:
        try:
            parsed = body.from_json(data)
        except ProtocolError:
            continue
        # whatever was accepted writes back and reads back the same
        again = parsed.to_json()
        assert type(parsed).from_json(again) == parsed


def test_legacy_string_escapes_match_fastjson() -> None:
    assert dumps_fastjson('a"b\\c/\n\x01\x7f\u2028é') == '"a\\"b\\\\c/\\n\\u0001\\u007F\\u2028é"'.encode()


# --------------------------------------------------------------------------- register body
def sample_register_body() -> RegisterBrokerBody:
    table = {
        "TopicA": TopicConfig("TopicA", 8, 8, 6),
        "%RETRY%G1": TopicConfig("%RETRY%G1", 1, 1, 6, topic_sys_flag=0),
        "Ordered": TopicConfig("Ordered", 4, 2, 4, "MULTI_TAG", topic_sys_flag=3, order=True),
    }
    return RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1700000000000, 7)), ["10.0.0.1:30000"])


def test_topic_config_text_form() -> None:
    tc = TopicConfig("TopicA", 8, 4, 6)
    assert tc.encode() == "TopicA 8 4 6 SINGLE_TAG"
    assert TopicConfig.decode("TopicA 8 4 6 SINGLE_TAG") == tc
    # 5.x adds the attributes as JSON
    tc5 = TopicConfig.decode('TopicB 2 2 6 MULTI_TAG {"+message.type":"NORMAL"}')
    assert tc5.attributes == {"+message.type": "NORMAL"}
    assert TopicConfig.decode(tc5.encode()) == tc5
    assert TopicConfig.decode("TopicC 1 1 6 SINGLE_TAG ") == TopicConfig("TopicC", 1, 1, 6)
    for bad in ("TopicA 8 4 6", "TopicA x 4 6 SINGLE_TAG", "TopicA 8 4 6 BOGUS", " 1 1 6 SINGLE_TAG"):
        with pytest.raises(ProtocolError):
            TopicConfig.decode(bad)


def test_register_body_plain_json() -> None:
    body = sample_register_body()
    data = body.encode(compress=False)
    assert data.startswith(
        b'{"filterServerList":["10.0.0.1:30000"],"topicConfigSerializeWrapper":'
        b'{"dataVersion":{"counter":7,"timestamp":1700000000000},'
        b'"topicConfigTable":{"%RETRY%G1":{'
    )
    assert RegisterBrokerBody.decode(data, compressed=False) == body


def test_register_body_compressed_round_trip() -> None:
    body = sample_register_body()
    back = RegisterBrokerBody.decode(body.encode(compress=True), compressed=True)
    assert back.filter_server_list == body.filter_server_list
    w, bw = back.topic_config_serialize_wrapper, body.topic_config_serialize_wrapper
    assert w.data_version == bw.data_version
    assert w.topic_config_table["TopicA"] == bw.topic_config_table["TopicA"]
    # the text form carries no topicSysFlag / order (as in RocketMQ)
    assert w.topic_config_table["Ordered"] == TopicConfig("Ordered", 4, 2, 4, "MULTI_TAG")


def compressed_layout(dv: bytes, tc: bytes) -> bytes:
    """A compressed RegisterBrokerBody before zlib, one topic and no filter servers: the
    data version, the topic count, each topic line, the filter server list; all sized."""
    return (
        struct.pack(">i", len(dv))
        + dv
        + struct.pack(">i", 1)
        + struct.pack(">i", len(tc))
        + tc
        + struct.pack(">i", 2)
        + b"[]"
    )


def test_register_body_compressed_layout_golden() -> None:
    body = RegisterBrokerBody(
        TopicConfigSerializeWrapper({"TopicA": TopicConfig("TopicA", 8, 8, 6)}, DataVersion(1700000000000, 3)), []
    )
    data = body.encode(compress=True)
    assert data[:2] == b"\x78\xda"  # zlib header, BEST_COMPRESSION
    dv = b'{"counter":3,"timestamp":1700000000000}'
    tc = b"TopicA 8 8 6 SINGLE_TAG"
    assert zlib.decompress(data) == compressed_layout(dv, tc)


def test_register_body_compressed_from_5x_broker() -> None:
    # stateVersion in the data version, attributes in the text, mapping data appended
    dv = b'{"counter":1,"stateVersion":2,"timestamp":5}'
    tc = b"T 1 1 6 SINGLE_TAG {}"
    raw = compressed_layout(dv, tc) + struct.pack(">i", 0)
    body = RegisterBrokerBody.decode(zlib.compress(raw), True)
    assert body.topic_config_serialize_wrapper.data_version == DataVersion(5, 1, 2)
    assert body.topic_config_serialize_wrapper.topic_config_table["T"].attributes == {}


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00\x00\x00\x05{}",
        struct.pack(">i", 2) + b"{}" + struct.pack(">i", 99),
        struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", -1),
        struct.pack(">i", 2) + b"{}" + struct.pack(">i", 0) + struct.pack(">i", 4) + b"nope",
    ],
)
def test_register_body_compressed_truncated_or_bad(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        RegisterBrokerBody.decode(zlib.compress(raw), True)
    with pytest.raises(ProtocolError):
        RegisterBrokerBody.decode(b"not zlib at all", True)


def test_data_version_forms() -> None:
    assert DataVersion(5, 1).to_json() == b'{"counter":1,"timestamp":5}'
    assert DataVersion(5, 1, 0).to_json() == b'{"counter":1,"stateVersion":0,"timestamp":5}'
    assert DataVersion.from_json(b'{"counter":1,"timestamp":5}') == DataVersion(5, 1)
    assert DataVersion(5, 1) != DataVersion(5, 2)
    assert DataVersion(5, 1).next_version(9) == DataVersion(9, 2)


# --------------------------------------------------------------------------- other bodies
@pytest.mark.parametrize(
    ("body", "wire"),
    [
        pytest.param(
            TopicConfig("TopicA", 8, 4, 6),
            b'{"order":false,"perm":6,"readQueueNums":8,"topicFilterType":'
            b'"SINGLE_TAG","topicName":"TopicA","topicSysFlag":0,'
            b'"writeQueueNums":4}',
            id="topic-config",
        ),
        pytest.param(  # legacy: fastjson's integer map keys
            ClusterInfo({"broker-a": BrokerData("C1", "broker-a", {1: "h:2", 0: "h:1"})}, {"C1": ["broker-a"]}),
            b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"h:1",1:"h:2"},'
            b'"brokerName":"broker-a","cluster":"C1"}},'
            b'"clusterAddrTable":{"C1":["broker-a"]}}',
            id="cluster-info",
        ),
        pytest.param(TopicList(["a", "b"]), b'{"topicList":["a","b"]}', id="topic-list"),
        pytest.param(
            TopicList(["C1", "broker-a"], "h:1"),
            b'{"brokerAddr":"h:1","topicList":["C1","broker-a"]}',
            id="topic-list-with-broker",
        ),
        pytest.param(KVTable({"T": "broker-a:8"}), b'{"table":{"T":"broker-a:8"}}', id="kv-table"),
        pytest.param(ConsumerIdList(["cid1", "cid2"]), b'{"consumerIdList":["cid1","cid2"]}', id="consumer-ids"),
    ],
)
def test_json_layout_and_round_trip(body: Body, wire: bytes) -> None:
    assert body.to_json() == wire
    assert type(body).from_json(body.to_json()) == body


def test_heartbeat_spec_example_round_trip() -> None:
    hb = HeartbeatData.from_json(SPEC_HEARTBEAT)
    assert hb.client_id == "10.0.0.5@4242#123"
    assert hb.producer_data_set == [ProducerData("CLIENT_INNER_PRODUCER")]
    cd = hb.consumer_data_set[0]
    assert (cd.group_name, cd.consume_type, cd.message_model) == ("G1", "CONSUME_PASSIVELY", "CLUSTERING")
    assert cd.subscription_data_set[0] == SubscriptionData("T1", "*", [], [], 1700000000000)
    assert hb.to_json() == SPEC_HEARTBEAT


def test_heartbeat_4x_form_omits_5x_fields() -> None:
    hb = HeartbeatData(
        "c@1",
        [ProducerData("P")],
        [
            ConsumerData(
                "G",
                "CONSUME_ACTIVELY",
                "BROADCASTING",
                "CONSUME_FROM_FIRST_OFFSET",
                [SubscriptionData.build("T", "a || b", sub_version=1)],
            )
        ],
    )
    text = hb.to_json()
    assert b"heartbeatFingerprint" not in text and b"withoutSub" not in text
    assert HeartbeatData.from_json(text) == hb


def test_subscription_build_follows_filter_api() -> None:
    sd = SubscriptionData.build("T", " tagA || tagB||  ||tagA|| \ttagC ", sub_version=42)
    assert sd.sub_string == " tagA || tagB||  ||tagA|| \ttagC "  # kept as given
    assert sd.tags_set == ["tagA", "tagB", "tagC"]
    assert sd.code_set == [java_hash("tagA"), java_hash("tagB"), java_hash("tagC")]
    assert sd.code_set[0] == 3552231  # "tagA".hashCode() = ((116*31+97)*31+103)*31+65
    assert sd.expression_type == "TAG" and sd.sub_version == 42
    for everything in (None, "", "*"):
        sd = SubscriptionData.build("T", everything)
        assert (sd.sub_string, sd.tags_set, sd.code_set) == ("*", [], [])
    sql = SubscriptionData.build("T", "a > 5", "SQL92")
    assert (sql.sub_string, sql.tags_set, sql.expression_type) == ("a > 5", [], "SQL92")
    with pytest.raises(ValueError):
        SubscriptionData.build("T", "", "SQL92")
    # a non-ASCII tag hashes over UTF-16 units
    assert SubscriptionData.build("T", "标签😀").code_set == [java_hash("标签😀")]


def test_message_queue_order_and_lock_bodies() -> None:
    mqs = [MessageQueue("T", "b", 1), MessageQueue("T", "a", 2), MessageQueue("S", "z", 0), MessageQueue("T", "a", 0)]
    assert sorted(mqs) == [
        MessageQueue("S", "z", 0),
        MessageQueue("T", "a", 0),
        MessageQueue("T", "a", 2),
        MessageQueue("T", "b", 1),
    ]
    assert len({MessageQueue("T", "a", 0), MessageQueue("T", "a", 0)}) == 1
    req = LockBatchRequestBody("G", "cid", {mqs[0], mqs[1]})
    assert req.to_json() == (
        b'{"clientId":"cid","consumerGroup":"G","mqSet":['
        b'{"brokerName":"a","queueId":2,"topic":"T"},'
        b'{"brokerName":"b","queueId":1,"topic":"T"}],'
        b'"onlyThisBroker":false}'
    )
    assert LockBatchRequestBody.from_json(req.to_json()) == req
    un = UnlockBatchRequestBody("G", "cid", {mqs[2]}, only_this_broker=True)
    assert UnlockBatchRequestBody.from_json(un.to_json()) == un
    resp = LockBatchResponseBody({mqs[3]})
    assert resp.to_json() == b'{"lockOKMQSet":[{"brokerName":"a","queueId":0,"topic":"T"}]}'
    assert LockBatchResponseBody.from_json(resp.to_json()) == resp


def test_unknown_fields_ignored_and_types_checked() -> None:
    qd = QueueData.from_json(
        b'{"brokerName":"b","perm":6,"readQueueNums":"8","writeQueueNums":8,"future":{"x":[1]},"topicSynFlag":2}'
    )
    assert qd == QueueData("b", 8, 8, 6, 2)
    for bad in (
        b'{"brokerName":1.5}',
        b'{"brokerName":"b","perm":[]}',
        b'{"brokerName":"b","perm":99999999999}',
        b"[]",
        b'"x"',
        b'{"brokerName":"b","brokerAddrs":{"x":"h"}}',
    ):
        with pytest.raises(ProtocolError):
            BrokerData.from_json(bad) if b"brokerAddrs" in bad else QueueData.from_json(bad)


def test_cpp_client_heartbeat_enum_ordinals_become_names():
    """The C++ clients (1.x and 2.1.0, captured in tests/interop/captures) send Java
    enum ordinals, and subVersion as a string; the broker works with names."""
    from rmq.protocol.bodies import HeartbeatData

    body = (
        b'{"clientID":"127.0.0.1@1234","consumerDataSet":[{"consumeFromWhere":0,'
        b'"consumeType":1,"groupName":"CG","messageModel":1,"subscriptionDataSet":'
        b'[{"expressionType":"TAG","subString":"*","subVersion":"1795318506976",'
        b'"topic":"T"}]}],"producerDataSet":[]}'
    )
    hb = HeartbeatData.from_json(body)
    c = hb.consumer_data_set[0]
    assert (c.consume_type, c.message_model, c.consume_from_where) == (
        "CONSUME_PASSIVELY",
        "CLUSTERING",
        "CONSUME_FROM_LAST_OFFSET",
    )
    assert c.subscription_data_set[0].sub_version == 1795318506976
    body = body.replace(b'"messageModel":1', b'"messageModel":0').replace(
        b'"consumeFromWhere":0', b'"consumeFromWhere":4'
    )
    c = HeartbeatData.from_json(body).consumer_data_set[0]
    assert (c.message_model, c.consume_from_where) == ("BROADCASTING", "CONSUME_FROM_FIRST_OFFSET")


# --------------------------------------------------------------------------- the table
ALL_TABLE_BODIES = ALL_BODIES + (
    OffsetWrapper,
    Connection,
    ConsumerConnection,
    ProducerConnection,
    HeartbeatBody,
    MemberStatus,
    EpochRecord,
    GroupStatus,
)


@pytest.mark.parametrize("cls", ALL_TABLE_BODIES, ids=lambda c: c.__name__)
def test_table_matches_dataclass(cls: type[Body]) -> None:
    fields = dataclasses.fields(cls)
    assert [f.name for f in fields] == [t.attr for t in cls.FIELDS]
    names = [n for t in cls.FIELDS for n in (t.name, *t.aliases)]
    assert len(set(names)) == len(names)
    samples = {INT: 0, LONG: 0, BOOL: True, STR: "x"}
    minimal = {t.name: samples.get(t.codec, []) for t in cls.FIELDS if t.missing is REQUIRED}
    assert list(cls.from_obj(minimal).to_obj()) == sorted(t.name for t in cls.FIELDS)
    assert not hasattr(cls.__new__(cls), "__dict__")  # slots: no per-instance dict


def test_table_is_checked_at_import() -> None:
    with pytest.raises(TypeError, match="does not match"):

        @json_body(("b", "b", STR, ""))
        @dataclasses.dataclass
        class Wrong(Body):
            a: str

    with pytest.raises(TypeError, match="absent property reads as"):

        @json_body(("a", "a", STR))
        @dataclasses.dataclass
        class NoDefault(Body):
            a: str


def test_missing_required_field_is_named() -> None:
    with pytest.raises(ProtocolError, match="missing field topicName"):
        TopicConfig.from_json(b'{"perm":6}')
    with pytest.raises(ProtocolError, match="missing field brokerName"):
        QueueData.from_json(b'{"brokerName":null}')


def test_lock_and_unlock_bodies_stay_distinct_types() -> None:
    mq = MessageQueue("T", "b", 0)
    lock, unlock = LockBatchRequestBody("G", "c", {mq}), UnlockBatchRequestBody("G", "c", {mq})
    assert lock.to_json() == unlock.to_json()
    assert lock != unlock
    assert type(UnlockBatchRequestBody.from_json(lock.to_json())) is UnlockBatchRequestBody


def test_protocol_layer_turns_dialect_errors_into_protocol_errors() -> None:
    for call in (
        lambda: loads_fastjson(b"{0:"),
        lambda: loads_object_keyed_map(b"{{", "offsetTable"),
        lambda: TopicRouteData.from_json(b"\xff"),
    ):
        with pytest.raises(ProtocolError):
            call()


# --------------------------------------------------------------------------- controller bodies
def test_controller_heartbeat_body() -> None:
    hb = HeartbeatBody("10.0.0.1:10912", {"10.0.0.2:10911": 7, "1": 0})
    assert hb.to_json() == b'{"haServerAddr":"10.0.0.1:10912","slaveAckOffsets":{"1":0,"10.0.0.2:10911":7}}'
    assert HeartbeatBody.from_json(hb.to_json()) == hb
    # what the previous (json.dumps) writer sent still reads
    assert HeartbeatBody.from_json(b'{"slaveAckOffsets": {"a": 3}, "haServerAddr": "h:1"}') == HeartbeatBody(
        "h:1", {"a": 3}
    )
    assert HeartbeatBody.from_json(None) == HeartbeatBody.from_json(b"") == HeartbeatBody()
    for bad in (b"[]", b'{"slaveAckOffsets":{"a":-1}}', b'{"haServerAddr":5}', b'{"slaveAckOffsets":[1]}', b"{"):
        with pytest.raises(ProtocolError):
            HeartbeatBody.from_json(bad)


def test_group_statuses_round_trip_and_errors() -> None:
    g = GroupStatus(
        "C",
        "b",
        2,
        100,
        None,
        False,
        [MemberStatus("h:1", 1, "SLAVE", 2, 90, None, True, True, 5)],
        [EpochRecord(2, 100, "h:0", "elected", 1700000000000)],
    )
    assert decode_group_statuses(encode_group_statuses([g])) == [g]
    for bad in (None, b"{}", b'{"groups":[{}]}', b'{"groups":1}', b"x"):
        with pytest.raises(ProtocolError, match="sync state data is malformed"):
            decode_group_statuses(bad)
