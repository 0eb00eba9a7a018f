"""Resources per request code, the order of checks of validate(), permission tables,
admin-only codes, and the failure answer (spec 2.4-2.7)."""

from __future__ import annotations

import json

import pytest

from rmq.auth.acl_config import ANY, DENY, PUB, SUB, AclSet, build_acl_set
from rmq.auth.permissions import (
    ADMIN_CODES,
    ADMIN_CODES_4_9_8,
    Allowed,
    Denied,
    ResourceError,
    _java_hashmap_order,
    check_permission,
    denial_remark,
    denial_response,
    required_resources,
    validate,
)
from rmq.auth.signing import sign_request
from rmq.protocol.codes import RequestCode as R
from rmq.protocol.codes import SerializeType
from rmq.protocol.frame import RemotingCommand, decode_frame, encode

ACL_YML = """\
globalWhiteRemoteAddresses: [10.10.10.*]
accounts:
  - accessKey: NormalAK
    secretKey: normal-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB, topicP=PUB]
    groupPerms: [groupA=DENY, groupB=PUB|SUB, groupC=SUB]
  - accessKey: AdminAK
    secretKey: admin-secret
    admin: true
  - accessKey: AdminWithPerms
    secretKey: admin-secret
    admin: true
    topicPerms: [topicA=PUB]
  - accessKey: WhiteAK
    secretKey: white-secret
    whiteRemoteAddress: 192.168.7.*
    defaultTopicPerm: DENY
"""
ACL: AclSet = build_acl_set([("/h/conf/plain_acl.yml", ACL_YML.encode())])
SECRETS = {
    "NormalAK": "normal-secret",
    "AdminAK": "admin-secret",
    "AdminWithPerms": "admin-secret",
    "WhiteAK": "white-secret",
}
PEER = "172.16.0.9"


def signed(ak: str, header: dict[str, object], body: bytes | None = None) -> dict[str, str]:
    return sign_request(header, body, ak, SECRETS[ak])


def send_v2(topic: str, group: str = "PG") -> dict[str, object]:
    return {
        "a": group,
        "b": topic,
        "c": "TBW102",
        "d": 4,
        "e": 0,
        "f": 0,
        "g": 1,
        "h": 0,
        "j": 0,
        "k": False,
        "m": False,
    }


def decide(
    ak: str, code: int, header: dict[str, object], body: bytes | None = None, peer: str = PEER
) -> Allowed | Denied:
    return validate(ACL, code, signed(ak, header, body), body, 409, peer)


# ------------------------------------------------------------------ check_permission
@pytest.mark.parametrize(
    ("needed", "owned", "ok"),
    [
        (PUB, PUB, True),
        (PUB, SUB, False),
        (PUB, PUB | SUB, True),
        (SUB, PUB | SUB, True),
        (SUB, SUB, True),
        (SUB, PUB, False),
        (PUB, DENY, False),
        (SUB, DENY | SUB, False),  # DENY wins over anything
        (ANY, PUB, True),
        (ANY, SUB, True),
        (ANY, DENY, False),
        (PUB | SUB, SUB, True),
    ],
)
def test_check_permission(needed: int, owned: int, ok: bool) -> None:
    assert check_permission(needed, owned) is ok


# ------------------------------------------------------------------ resources
HEARTBEAT = json.dumps(
    {
        "clientID": "c1",
        "producerDataSet": [{"groupName": "ProducerG"}],
        "consumerDataSet": [
            {
                "groupName": "groupC",
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [
                    {"topic": "topicC", "subString": "*"},
                    {"topic": "%RETRY%groupC", "subString": "*"},
                ],
                "unitMode": False,
            }
        ],
    }
).encode()


@pytest.mark.parametrize(
    ("code", "ext", "body", "expected"),
    [
        (R.SEND_MESSAGE_V2, {"a": "PG", "b": "T1"}, None, {"T1": PUB}),
        (R.SEND_MESSAGE_V2, {"a": "G1", "b": "%RETRY%G1"}, None, {"%RETRY%G1": SUB}),
        # a consumer's send-back through its inner producer: the check is on that group
        (
            R.SEND_MESSAGE_V2,
            {"a": "CLIENT_INNER_PRODUCER", "b": "%RETRY%G1"},
            None,
            {"%RETRY%CLIENT_INNER_PRODUCER": SUB},
        ),
        (R.SEND_BATCH_MESSAGE, {"a": "PG", "b": "T1"}, None, {"T1": PUB}),  # 4.9.8 skipped batches
        (R.SEND_BATCH_MESSAGE, {"producerGroup": "PG", "topic": "T1"}, None, {"T1": PUB}),
        (R.SEND_MESSAGE, {"producerGroup": "PG", "topic": "T1"}, None, {"T1": PUB}),
        (R.SEND_MESSAGE, {"producerGroup": "G1", "topic": "%RETRY%G1"}, None, {"%RETRY%G1": SUB}),
        (R.CONSUMER_SEND_MSG_BACK, {"group": "G1", "offset": "1"}, None, {"%RETRY%G1": SUB}),
        (R.PULL_MESSAGE, {"topic": "T1", "consumerGroup": "G1"}, None, {"T1": SUB, "%RETRY%G1": SUB}),
        (R.LITE_PULL_MESSAGE, {"topic": "T1", "consumerGroup": "G1"}, None, {"T1": SUB, "%RETRY%G1": SUB}),
        (R.POP_MESSAGE, {"topic": "T1", "consumerGroup": "G1"}, None, {"T1": SUB, "%RETRY%G1": SUB}),
        (R.ACK_MESSAGE, {"topic": "T1", "consumerGroup": "G1"}, None, {"T1": SUB, "%RETRY%G1": SUB}),
        (R.CHANGE_MESSAGE_INVISIBLETIME, {"topic": "T1", "consumerGroup": "G1"}, None, {"T1": SUB, "%RETRY%G1": SUB}),
        # an ack of a retried message names the group's POP retry topic: the group covers it
        (R.ACK_MESSAGE, {"topic": "%RETRY%G1_T1", "consumerGroup": "G1"}, None, {"%RETRY%G1": SUB}),
        (R.QUERY_MESSAGE, {"topic": "T1", "key": "k"}, None, {"T1": SUB}),
        (R.HEART_BEAT, {}, HEARTBEAT, {"%RETRY%groupC": SUB, "topicC": SUB}),
        (R.UNREGISTER_CLIENT, {"clientID": "c", "consumerGroup": "G1"}, None, {"%RETRY%G1": SUB}),
        (R.UNREGISTER_CLIENT, {"clientID": "c", "producerGroup": "P"}, None, {}),
        (R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G1"}, None, {"%RETRY%G1": SUB}),
        (
            R.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "G1", "topic": "T1", "queueId": "0", "commitOffset": "5"},
            None,
            {"%RETRY%G1": SUB, "T1": SUB},
        ),
        (R.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G1", "topic": "T1", "queueId": "0"}, None, {}),
        (R.GET_MAX_OFFSET, {"topic": "T1", "queueId": "0"}, None, {}),
        (R.SEND_MESSAGE_V2, None, None, {}),  # no ext at all: nothing to read
    ],
)
def test_required_resources(
    code: int, ext: dict[str, str] | None, body: bytes | None, expected: dict[str, int]
) -> None:
    assert required_resources(code, ext, body) == expected


@pytest.mark.parametrize(
    ("code", "ext", "body", "message"),
    [
        (R.HEART_BEAT, {}, b"{not json", "malformed JSON body"),
        (R.HEART_BEAT, {}, None, None),
        (R.GET_CONSUMER_LIST_BY_GROUP, {}, None, "the custom field <consumerGroup> is null"),
        (
            R.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "G", "topic": "T", "queueId": "x", "commitOffset": "1"},
            None,
            "queueId",
        ),
        (R.UNREGISTER_CLIENT, {"consumerGroup": "G"}, None, "<clientID> is null"),
    ],
)
def test_unreadable_requests(code: int, ext: dict[str, str], body: bytes | None, message: str | None) -> None:
    with pytest.raises(ResourceError, match=message):
        required_resources(code, ext, body)


def test_parse_failure_refuses_even_a_white_listed_address() -> None:
    d = validate(ACL, R.GET_CONSUMER_LIST_BY_GROUP, {}, None, 409, "10.10.10.1")
    assert isinstance(d, Denied) and d.reason == "parse"
    assert denial_remark(d) == (
        "org.apache.rocketmq.acl.common.AclException: the custom field <consumerGroup> is null, "
        "org.apache.rocketmq.acl.plain.PlainAccessValidator.parse(PlainAccessValidator.java:134)"
    )


# ------------------------------------------------------------------ order of checks
def test_1_global_white_list_needs_nothing() -> None:
    assert validate(ACL, R.UPDATE_AND_CREATE_TOPIC, None, None, 409, "10.10.10.5") == Allowed("global_white")
    assert validate(ACL, R.SEND_MESSAGE_V2, {"b": "topicA", "a": "g"}, None, 409, "::ffff:10.10.10.5") == Allowed(
        "global_white"
    )


def test_2_no_access_key() -> None:
    d = validate(ACL, R.SEND_MESSAGE_V2, {"b": "T", "a": "g"}, None, 409, PEER)
    assert isinstance(d, Denied) and d.message == "No accessKey is configured"
    assert d.frame.endswith("validate(PlainPermissionManager.java:664)")
    assert validate(ACL, R.HEART_BEAT, None, b"junk", 409, PEER) == d  # no ext: the body is not read


def test_3_unknown_access_key() -> None:
    ext = sign_request({"b": "T"}, None, "Nobody1", "whatever1")
    d = validate(ACL, R.SEND_MESSAGE_V2, ext, None, 409, PEER)
    assert isinstance(d, Denied)
    assert denial_remark(d) == (
        "org.apache.rocketmq.acl.common.AclException: No acl config for Nobody1, "
        "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:668)"
    )


def test_5_account_white_address_skips_signature_and_perms() -> None:
    ext = {"AccessKey": "WhiteAK", "b": "topicA", "a": "g", "Signature": "garbage"}
    assert validate(ACL, R.SEND_MESSAGE_V2, ext, None, 409, "192.168.7.20") == Allowed("account_white", "WhiteAK")
    d = validate(ACL, R.SEND_MESSAGE_V2, ext, None, 409, "192.168.8.20")
    assert isinstance(d, Denied) and d.reason == "signature"


def test_6_bad_signature() -> None:
    ext = sign_request(send_v2("topicB"), b"body", "NormalAK", "wrong-secret")
    d = validate(ACL, R.SEND_MESSAGE_V2, ext, b"body", 409, PEER)
    assert isinstance(d, Denied)
    assert denial_remark(d) == (
        "org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey=NormalAK, "
        "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:684)"
    )
    ok = signed("NormalAK", send_v2("topicB"), b"body")
    assert isinstance(validate(ACL, R.SEND_MESSAGE_V2, ok, b"tampered", 409, PEER), Denied)


def test_7_trace_topic_pub_is_always_allowed() -> None:
    assert decide("NormalAK", R.SEND_MESSAGE_V2, send_v2("RMQ_SYS_TRACE_TOPIC")) == Allowed("trace_topic", "NormalAK")
    d = decide("NormalAK", R.PULL_MESSAGE, {"topic": "RMQ_SYS_TRACE_TOPIC", "consumerGroup": "groupA"})
    assert isinstance(d, Denied)


@pytest.mark.parametrize("code", sorted(ADMIN_CODES))
def test_8_admin_codes_need_admin(code: int) -> None:
    d = decide("NormalAK", code, {"topic": "topicB"})
    assert isinstance(d, Denied) and d.reason == "admin"
    assert d.message == f"Need admin permission for request code={code}, but accessKey=NormalAK is not"
    assert d.frame.endswith("checkPerm(PlainPermissionManager.java:581)")
    assert isinstance(decide("AdminAK", code, {"topic": "topicB"}), Allowed)


def test_admin_code_sets() -> None:
    assert ADMIN_CODES_4_9_8 == {17, 25, 200, 207, 215}
    assert ADMIN_CODES == {17, 25, 200, 207, 215, 222, 306, 316, 329, 50, 51, 52, 53, R.RMQ_FAILSAFE_CHECK}
    assert R.GET_BROKER_CONFIG not in ADMIN_CODES


def test_9_and_10_no_resources_or_admin_without_perms() -> None:
    assert decide("NormalAK", R.GET_MAX_OFFSET, {"topic": "topicA", "queueId": 0}) == Allowed("no_resource", "NormalAK")
    assert decide("AdminAK", R.SEND_MESSAGE_V2, send_v2("anything")) == Allowed("admin", "AdminAK")
    # an admin with some perms falls back to its (DENY) defaults for the rest
    assert decide("AdminWithPerms", R.SEND_MESSAGE_V2, send_v2("topicA")) == Allowed("permission", "AdminWithPerms")
    assert isinstance(decide("AdminWithPerms", R.SEND_MESSAGE_V2, send_v2("other")), Denied)


PERM_TABLE = [
    # code, header, allowed?, message, line
    (R.SEND_MESSAGE_V2, send_v2("topicA"), False, "No default permission for topic:topicA", 611),
    (R.SEND_MESSAGE_V2, send_v2("topicB"), True, None, 0),
    (R.SEND_MESSAGE_V2, send_v2("topicC"), False, "No default permission for topic:topicC", 611),
    (R.SEND_MESSAGE_V2, send_v2("topicP"), True, None, 0),
    (R.SEND_MESSAGE_V2, send_v2("unlisted"), False, "No default permission for topic:unlisted", 606),
    (R.SEND_BATCH_MESSAGE, send_v2("topicA"), False, "No default permission for topic:topicA", 611),
    (R.SEND_MESSAGE_V2, send_v2("%RETRY%groupB", "groupB"), True, None, 0),
    (R.SEND_MESSAGE_V2, send_v2("%RETRY%groupA", "groupA"), False, "No default permission for group:groupA", 611),
    (R.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "groupC"}, True, None, 0),
    (
        R.PULL_MESSAGE,
        {"topic": "topicP", "consumerGroup": "groupC"},
        False,
        "No default permission for topic:topicP",
        611,
    ),
    (
        R.PULL_MESSAGE,
        {"topic": "topicC", "consumerGroup": "groupA"},
        False,
        "No default permission for group:groupA",
        611,
    ),
    # unlisted group: defaultGroupPerm SUB
    (R.PULL_MESSAGE, {"topic": "topicB", "consumerGroup": "other"}, True, None, 0),
    (R.CONSUMER_SEND_MSG_BACK, {"group": "groupA", "offset": 1}, False, "No default permission for group:groupA", 611),
    (R.QUERY_MESSAGE, {"topic": "unlisted", "key": "k"}, False, "No default permission for topic:unlisted", 606),
    (
        R.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "groupC", "topic": "topicC", "queueId": 0, "commitOffset": 1},
        True,
        None,
        0,
    ),
]


@pytest.mark.parametrize(("code", "header", "ok", "message", "line"), PERM_TABLE)
def test_11_permissions(code: int, header: dict[str, object], ok: bool, message: str | None, line: int) -> None:
    d = decide("NormalAK", code, header)
    if ok:
        assert isinstance(d, Allowed), d
        return
    assert isinstance(d, Denied) and d.reason == "permission" and d.message == message
    assert (
        d.frame == f"org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java:{line})"
    )


def test_heartbeat_checks_every_group_and_subscription() -> None:
    assert isinstance(decide("NormalAK", R.HEART_BEAT, {}, HEARTBEAT), Allowed)
    denied = HEARTBEAT.replace(b'"topicC"', b'"topicA"')
    d = decide("NormalAK", R.HEART_BEAT, {}, denied)
    assert isinstance(d, Denied) and d.message == "No default permission for topic:topicA"


def test_first_failure_reported_in_java_hashmap_order() -> None:
    # Both resources denied: 4.9.8 reports the one its HashMap iterates first. "topicA"
    # (String.hashCode -868034318, bucket 0) comes before "%RETRY%groupA" (810338084, bucket 8).
    d = decide("NormalAK", R.PULL_MESSAGE, {"topic": "topicA", "consumerGroup": "groupA"})
    assert isinstance(d, Denied) and d.message == "No default permission for topic:topicA"
    # insertion order does not matter: UPDATE_CONSUMER_OFFSET adds the group first
    header = {"consumerGroup": "groupA", "topic": "topicA", "queueId": 0, "commitOffset": 1}
    d = decide("NormalAK", R.UPDATE_CONSUMER_OFFSET, header)
    assert isinstance(d, Denied) and d.message == "No default permission for topic:topicA"


def test_java_hashmap_order() -> None:
    # What java.util.HashMap iterates for these insertions (buckets by spread hash; a
    # collision keeps insertion order; 13 keys resize the table to 32 buckets).
    assert _java_hashmap_order({"c": 1, "b": 1, "a": 1}) == ["a", "b", "c"]
    assert _java_hashmap_order({"BB": 1, "Aa": 1}) == ["BB", "Aa"]  # equal hashCode 2112
    assert _java_hashmap_order({"Aa": 1, "BB": 1}) == ["Aa", "BB"]
    keys = {f"k{i}": 1 for i in range(13)}
    assert _java_hashmap_order(keys) == [
        "k0",
        "k1",
        "k2",
        "k3",
        "k4",
        "k5",
        "k11",
        "k6",
        "k10",
        "k7",
        "k8",
        "k12",
        "k9",
    ]


def test_unique_key_query_from_a_4_9_8_client_is_accepted() -> None:
    header = {
        "topic": "topicC",
        "key": "k",
        "maxNum": 32,
        "beginTimestamp": 0,
        "endTimestamp": 1,
        "_UNIQUE_KEY_QUERY": "true",
    }
    ext = signed("NormalAK", header)
    assert isinstance(validate(ACL, R.QUERY_MESSAGE, ext, None, 409, PEER), Allowed)


def test_validate_never_raises_on_junk_heartbeat() -> None:
    ext = signed("NormalAK", {}, b"\xff\xfe")
    d = validate(ACL, R.HEART_BEAT, ext, b"\xff\xfe", 409, PEER)
    assert isinstance(d, Denied) and d.reason == "parse"


# ------------------------------------------------------------------ the answer
def test_denial_response_is_json_system_error_and_none_for_oneway() -> None:
    d = Denied("signature", "Check signature failed for accessKey=NormalAK", "f.g(F.java:1)", "NormalAK")
    request = RemotingCommand(
        R.SEND_MESSAGE_V2, opaque=77, serialize_type=SerializeType.ROCKETMQ, ext_fields={"a": "b"}
    )
    response = denial_response(request, d)
    assert response is not None
    wire = decode_frame(encode(response))
    assert wire.code == 1 and wire.opaque == 77 and wire.is_response and not wire.is_oneway
    assert wire.serialize_type == SerializeType.JSON
    assert (
        wire.remark
        == "org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey=NormalAK, f.g(F.java:1)"
    )
    assert not wire.ext_fields and wire.body is None
    request.mark_oneway()
    assert denial_response(request, d) is None


def test_denial_remark_without_message() -> None:
    assert (
        denial_remark(Denied("parse", None, "x.y(Z.java:1)"))
        == "org.apache.rocketmq.acl.common.AclException, x.y(Z.java:1)"
    )
