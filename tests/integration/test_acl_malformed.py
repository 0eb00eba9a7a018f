"""Bad input with ``aclEnable=true`` (issue 12 item 8): the malformed-frame cases of
test_broker_protocol.py, and the state-changing request codes sent unsigned, badly signed,
with a huge AccessKey, with non-UTF-8 ext values, oneway: each closes that connection or is
refused (code 1, 4.9.8's AclException remark; a oneway request gets no answer), nothing the
broker holds changes (topic config, broker config, subscription groups, consumer and max
offsets, the ACL file), and a rightly signed client is served throughout.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import struct
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from rmq.auth.permissions import ACL_EXCEPTION, ADMIN_CODES
from rmq.auth.signing import sign_request
from rmq.protocol.codes import RemotingFlag, RemotingSysResponseCode, RequestCode, ResponseCode, SerializeType
from rmq.protocol.frame import RemotingCommand, encode
from rmq.protocol.headers import CreateTopicRequestHeader, ResetOffsetRequestHeader
from tests.integration import test_acl
from tests.integration.broker_util import BrokerApi, RawConn, unique
from tests.integration.test_acl import ADMIN, USER, client
from tests.integration.test_broker_protocol import BAD_INPUT, _frame

pytestmark = pytest.mark.timeout(120)

# One rmq NameServer + broker for this module: aclEnable, test_acl.PLAIN_ACL.
cluster = test_acl.cluster

VICTIM, VICTIM_GROUP = unique("AclVictim"), unique("AclVictimG")
SERVE, SERVE_GROUP = unique("AclServe"), unique("AclServeG")
NEW_TOPIC = unique("AclNoSuchTopic")
HUGE = 100_000  # characters of AccessKey (real ones have 7 to ~32)


def state_changing() -> dict[str, tuple[int, dict[str, str], bytes | None]]:
    """code name -> (code, ext, body) of a request that would change the broker's state."""
    R = RequestCode
    return {
        "create-topic": (
            R.UPDATE_AND_CREATE_TOPIC,
            CreateTopicRequestHeader(NEW_TOPIC, "TBW102", 4, 4, 6).to_ext_fields(),
            None,
        ),
        "write-protect-topic": (
            R.UPDATE_AND_CREATE_TOPIC,
            CreateTopicRequestHeader(VICTIM, "TBW102", 1, 1, 2).to_ext_fields(),
            None,
        ),
        "delete-topic": (R.DELETE_TOPIC_IN_BROKER, {"topic": VICTIM}, None),
        "broker-config": (R.UPDATE_BROKER_CONFIG, {}, b"brokerPermission=2\nautoCreateTopicEnable=false\n"),
        "reset-offset": (
            R.INVOKE_BROKER_TO_RESET_OFFSET,
            ResetOffsetRequestHeader(VICTIM, VICTIM_GROUP, 0, True).to_ext_fields(),
            None,
        ),
        "commit-offset": (
            R.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": VICTIM_GROUP, "topic": VICTIM, "queueId": "0", "commitOffset": "0"},
            None,
        ),
        "update-group": (
            R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            {},
            json.dumps({"groupName": VICTIM_GROUP, "consumeEnable": False}).encode(),
        ),
        "delete-group": (R.DELETE_SUBSCRIPTIONGROUP, {"groupName": VICTIM_GROUP}, None),
        "send": (R.SEND_MESSAGE_V2, BrokerApi.send_header(VICTIM).to_v2_ext_fields(), b"must not be stored"),
        "clean-consumequeue": (R.CLEAN_EXPIRED_CONSUMEQUEUE, {}, None),
        "clean-unused-topic": (R.CLEAN_UNUSED_TOPIC, {}, None),
        "add-account": (
            R.UPDATE_AND_CREATE_ACL_CONFIG,
            {"accessKey": "Intruder01", "secretKey": "intruder-secret", "admin": "true"},
            None,
        ),
        "delete-account": (R.DELETE_ACL_CONFIG, {"accessKey": USER[0]}, None),
        "global-white": (R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "*", "aclFileFullPath": ""}, None),
    }


def hmac_b64(secret: str, content: bytes) -> str:
    return base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha1).digest()).decode()


def tampered(ext: dict[str, str], body: bytes | None) -> dict[str, str]:
    """Rightly signed by the admin, then one value changed (or one added)."""
    signed = sign_request(ext, body, *ADMIN)
    key = next((k for k in ("topic", "groupName", "accessKey") if k in ext), None)
    if key:
        signed[key] += "x"
    else:
        signed["brokerPermission"] = "2"
    return signed


# auth variant -> ext fields to send (the request's own ext + these credentials)
AUTH = {
    "unsigned": lambda ext, body: dict(ext),
    "access-key-only": lambda ext, body: {**ext, "AccessKey": ADMIN[0]},
    "empty-signature": lambda ext, body: {**ext, "AccessKey": ADMIN[0], "Signature": ""},
    "garbage-signature": lambda ext, body: {**ext, "AccessKey": ADMIN[0], "Signature": "!!not*base64=="},
    "wrong-secret": lambda ext, body: sign_request(ext, body, ADMIN[0], "not-the-admin-secret"),
    "tampered-after-signing": tampered,
    "empty-access-key": lambda ext, body: {**ext, "AccessKey": "", "Signature": "", "OnsChannel": "ALIYUN"},
    "huge-access-key": lambda ext, body: sign_request(ext, body, "K" * HUGE, ADMIN[1]),
    "non-admin": lambda ext, body: sign_request(ext, body, *USER),
}


async def snapshot(cluster: SimpleNamespace) -> dict[str, object]:
    """Everything the requests above could change, read back as the admin."""
    async with BrokerApi(cluster.broker, client=client(ADMIN)) as api:
        topics = {n: (t.read_queue_nums, t.write_queue_nums, t.perm) for n, t in (await api.topics()).items()}
        config = await api.call(RequestCode.GET_BROKER_CONFIG)
        groups = await api.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        offsets = [(await api.query_offset(VICTIM_GROUP, VICTIM, q)).ext_fields for q in range(4)]
        maxes = [await api.max_offset(VICTIM, q) for q in range(4)]
    acl_files = {p.name: p.read_bytes() for p in sorted(cluster.home.rglob("*.y*ml"))}
    return {
        "topics": topics,
        "config": (config.body, config.ext_fields),
        "groups": groups.body,
        "offsets": offsets,
        "max_offsets": maxes,
        "acl": acl_files,
    }


@pytest.fixture(scope="module")
def before(cluster) -> Iterator[dict[str, object]]:
    """A victim topic with messages, a group with a committed offset, a topic to serve on;
    then the state every test must leave as it found it."""

    async def setup() -> dict[str, object]:
        async with BrokerApi(cluster.broker, client=client(ADMIN)) as api:
            for topic in (VICTIM, SERVE):
                assert (await api.create_topic(topic)).code == ResponseCode.SUCCESS
            body = json.dumps({"groupName": VICTIM_GROUP}).encode()
            r = await api.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
            assert r.code == ResponseCode.SUCCESS, r.remark
            for i in range(3):
                await api.send_ok(VICTIM, b"v%d" % i, queue_id=0)
            await api.wait_max_offset(VICTIM, 0, 3)
            assert (await api.update_offset(VICTIM_GROUP, VICTIM, 0, 2)).code == ResponseCode.SUCCESS
        await served(cluster)  # creates SERVE_GROUP once: later pulls change nothing
        return await snapshot(cluster)

    yield asyncio.run(setup())


async def served(cluster: SimpleNamespace) -> None:
    """A rightly signed client still sends and pulls."""
    async with BrokerApi(cluster.broker, client=client(USER)) as api:
        sent = await api.send_ok(SERVE, b"still served", queue_id=1)
        offset = int(sent.ext_fields["queueOffset"])
        await api.wait_max_offset(SERVE, 1, offset + 1)
        r = await api.pull(SERVE, 1, offset, group=SERVE_GROUP)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)


async def answer(conn: RawConn, frame: bytes) -> RemotingCommand | None:
    """The broker's answer to ``frame``, None when it closed the connection instead."""
    await conn.write(frame)
    try:
        return await conn.read_frame()
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


def refused_or_closed(r: RemotingCommand | None, what: str) -> None:
    if r is None:
        return
    assert r.code == RemotingSysResponseCode.SYSTEM_ERROR, (what, r.code, r.remark)
    assert r.remark.startswith(f"{ACL_EXCEPTION}: "), (what, r.remark)
    # (4.9.8 names the AccessKey in its remark, however long: so does rmq)
    assert len(r.remark) < 4096 + HUGE, (what, "the remark echoes more than the AccessKey", len(r.remark))
    assert not r.body, what


# --------------------------------------------------------------------------- malformed frames
@pytest.mark.parametrize("case", list(BAD_INPUT))
async def test_malformed_frame_closes_only_that_connection(cluster, before, case):
    bad = await RawConn.open(cluster.broker)
    try:
        await bad.write(BAD_INPUT[case])
        assert await bad.closed_by_peer(5.0), f"{case}: the broker kept the connection open"
    finally:
        await bad.close()
    await served(cluster)
    assert await snapshot(cluster) == before


SIGNED_CREATE = sign_request(CreateTopicRequestHeader(NEW_TOPIC, "TBW102", 4, 4, 6).to_ext_fields(), None, *ADMIN)
TRUNCATED = {
    # a rightly signed admin request, cut: nothing of it may be acted on
    "signed-json-cut-in-header": _frame(
        json.dumps({"code": 17, "flag": 0, "opaque": 9, "version": 409, "extFields": SIGNED_CREATE}).encode()[:-5]
    ),
    "signed-frame-shorter-than-said": _frame(
        json.dumps({"code": 17, "flag": 0, "opaque": 9, "version": 409, "extFields": SIGNED_CREATE}).encode(), length=40
    ),
    "ext-not-an-object": _frame(b'{"code":17,"flag":0,"opaque":9,"version":409,"extFields":[1,2]}'),
    "ext-value-an-object": _frame(b'{"code":17,"flag":0,"opaque":9,"version":409,"extFields":{"AccessKey":{"a":1}}}'),
}


@pytest.mark.parametrize("case", list(TRUNCATED))
async def test_broken_admin_frame_closes_or_is_refused(cluster, before, case):
    conn = await RawConn.open(cluster.broker)
    try:
        await conn.write(TRUNCATED[case])
        try:
            r: RemotingCommand | None = await conn.read_frame(3.0)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            r = None  # closed, or still waiting for the rest of a frame that never comes
        refused_or_closed(r, case)
    finally:
        await conn.close()
    await served(cluster)
    assert await snapshot(cluster) == before


# --------------------------------------------------------------------------- bad signatures
@pytest.mark.parametrize("auth", list(AUTH))
@pytest.mark.parametrize("st", [SerializeType.JSON, SerializeType.ROCKETMQ], ids=["json", "rocketmq"])
async def test_state_changing_requests_badly_signed_change_nothing(cluster, before, auth, st):
    conn = await RawConn.open(cluster.broker)
    try:
        for opaque, (what, (code, ext, body)) in enumerate(state_changing().items(), 100):
            if auth == "non-admin" and code not in ADMIN_CODES:
                continue  # the user may send and commit offsets (PUB|SUB by default)
            cmd = RemotingCommand(code, opaque=opaque, ext_fields=AUTH[auth](ext, body), body=body, serialize_type=st)
            r = await answer(conn, encode(cmd))
            refused_or_closed(r, f"{what} {auth}")
            if r is None:
                conn = await RawConn.open(cluster.broker)
            else:
                assert r.opaque == opaque
    finally:
        await conn.close()
    await served(cluster)
    assert await snapshot(cluster) == before


async def test_state_changing_oneway_requests_unsigned_get_no_answer_and_change_nothing(cluster, before):
    conn = await RawConn.open(cluster.broker)
    try:
        for auth in ("unsigned", "wrong-secret", "non-admin"):
            for opaque, (code, ext, body) in enumerate(state_changing().values(), 200):
                if auth == "non-admin" and code not in ADMIN_CODES:
                    continue
                flag = RemotingFlag.ONEWAY
                await conn.send(
                    RemotingCommand(code, opaque=opaque, flag=flag, ext_fields=AUTH[auth](ext, body), body=body)
                )
        # the same connection then answers a signed request: nothing was answered before it
        probe = sign_request({"topic": SERVE, "queueId": "0"}, None, *USER)
        await conn.send(RemotingCommand(RequestCode.GET_MAX_OFFSET, opaque=999, ext_fields=probe))
        r = await conn.read_frame()
        assert r.opaque == 999 and r.code == ResponseCode.SUCCESS, (r.opaque, r.code, r.remark)
    finally:
        await conn.close()
    await served(cluster)
    assert await snapshot(cluster) == before


# --------------------------------------------------------------------------- non-UTF-8 values
def _json_frame_raw(code: int, opaque: int, ext: dict[bytes, bytes]) -> bytes:
    items = b",".join(b'"%s":"%s"' % (k, v) for k, v in ext.items())
    header = b'{"code":%d,"flag":0,"language":"JAVA","opaque":%d,"version":409,"extFields":{%s}}' % (
        code,
        opaque,
        items,
    )
    return _frame(header)


def _binary_frame_raw(code: int, opaque: int, ext: dict[bytes, bytes]) -> bytes:
    fields = b"".join(struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v for k, v in ext.items())
    header = (
        struct.pack(">hbhii", code, 0, 409, opaque, 0) + struct.pack(">i", 0) + struct.pack(">i", len(fields)) + fields
    )
    return _frame(header, st=SerializeType.ROCKETMQ)


@pytest.mark.parametrize("encoding", ["json", "rocketmq"])
async def test_non_utf8_ext_values_refused_or_closed(cluster, before, encoding):
    """Signed over the raw bytes with the admin's secret: the broker signs what it decoded
    (invalid UTF-8 becomes U+FFFD, spec 1.7), so the signature cannot match."""
    make = _json_frame_raw if encoding == "json" else _binary_frame_raw
    for opaque, (what, ext) in enumerate(
        {
            "delete-topic": {b"topic": VICTIM.encode() + b"\xff"},
            "create-topic": {
                b"topic": NEW_TOPIC.encode() + b"\xc3",
                b"defaultTopic": b"TBW102",
                b"readQueueNums": b"4",
                b"writeQueueNums": b"4",
                b"perm": b"6",
                b"topicFilterType": b"SINGLE_TAG",
            },
            "delete-group": {b"groupName": b"\xfe" + VICTIM_GROUP.encode()},
        }.items(),
        300,
    ):
        code = {"delete-topic": 215, "create-topic": 17, "delete-group": 207}[what]
        ext = {b"AccessKey": ADMIN[0].encode(), **ext}
        raw = b"".join(v for _, v in sorted(ext.items()))
        ext[b"Signature"] = hmac_b64(ADMIN[1], raw).encode()
        conn = await RawConn.open(cluster.broker)
        try:
            refused_or_closed(await answer(conn, make(code, opaque, ext)), f"{what} {encoding}")
        finally:
            await conn.close()
    await served(cluster)
    assert await snapshot(cluster) == before
