"""The memos behind the per-request ACL check (rmq.auth.cache and where they live): they
must never change a verdict. A reload or a code 50-53 write is in force on the next
request, a changed secret is not served from the old one, a topic, group or code is not
served from another one's verdict, and every request's signature is still checked."""

from __future__ import annotations

import random

import pytest

from rmq.auth.acl_config import HOST_MEMO, AclSet, build_acl_set
from rmq.auth.cache import BoundedCache
from rmq.auth.credentials import Credential
from rmq.auth.permissions import Allowed, Denied, validate
from rmq.auth.signing import (
    SIGNATURE,
    UNIQUE_KEY_QUERY,
    SigningError,
    SigningKey,
    SigningOrder,
    _header_bytes,
    sign_request,
    signed_keys,
    verify,
)
from rmq.client.acl import AclClientRPCHook
from rmq.protocol.codes import RequestCode as R
from rmq.protocol.frame import RemotingCommand
from rmq.remoting.acl_guard import AclGuard

PEER = "172.16.0.9"
BODY = b"body-bytes"


def acl_of(yml: str) -> AclSet:
    return build_acl_set([("/h/conf/plain_acl.yml", yml.encode())])


def account_yml(secret: str = "user-secret1", topic_perms: str = "[topicA=PUB, topicB=DENY]", **extra: str) -> str:
    lines = [
        "accounts:",
        "  - accessKey: UserAK01",
        f"    secretKey: {secret}",
        "    defaultTopicPerm: DENY",
        "    defaultGroupPerm: SUB",
        f"    topicPerms: {topic_perms}",
    ]
    lines += [f"    {k}: {v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def send(topic: str, secret: str = "user-secret1", body: bytes = BODY) -> dict[str, str]:
    header = {"a": "PG", "b": topic, "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 1, "h": 0}
    return sign_request(header, body, "UserAK01", secret)


def pull(topic: str, secret: str = "user-secret1") -> dict[str, str]:
    return sign_request({"consumerGroup": "CG", "topic": topic, "queueId": 0}, None, "UserAK01", secret)


def check(acl: AclSet, code: int, ext: dict[str, str], body: bytes | None = BODY, peer: str = PEER):
    return validate(acl, code, ext, body, 435, peer)


# --------------------------------------------------------------------------- verdicts
def test_another_topic_is_not_served_from_a_remembered_verdict() -> None:
    acl = acl_of(account_yml())
    for _ in range(3):  # the second and third rounds are memo hits
        assert isinstance(check(acl, R.SEND_MESSAGE_V2, send("topicA")), Allowed)
        denied = check(acl, R.SEND_MESSAGE_V2, send("topicB"))
        assert isinstance(denied, Denied) and denied.message == "No default permission for topic:topicB"
        assert isinstance(check(acl, R.SEND_MESSAGE_V2, send("topicZ")), Denied)  # the default: DENY
    assert len(acl.accounts["UserAK01"].decisions) == 3


def test_another_code_is_not_served_from_a_remembered_verdict() -> None:
    acl = acl_of(account_yml())
    assert isinstance(check(acl, R.SEND_MESSAGE_V2, send("topicA")), Allowed)
    # the same topic, but a pull needs SUB: topicA is PUB only
    assert isinstance(check(acl, R.PULL_MESSAGE, pull("topicA"), None), Denied)
    # an admin-only code with no resources at all is not served from a no-resource verdict
    bare = sign_request({}, None, "UserAK01", "user-secret1")
    assert check(acl, R.GET_BROKER_RUNTIME_INFO, bare, None) == Allowed("no_resource", "UserAK01")
    admin = check(acl, R.UPDATE_AND_CREATE_TOPIC, bare, None)
    assert isinstance(admin, Denied) and admin.reason == "admin"


def test_every_request_signature_is_checked_after_a_remembered_verdict() -> None:
    acl = acl_of(account_yml())
    good = send("topicA")
    assert isinstance(check(acl, R.SEND_MESSAGE_V2, good), Allowed)
    assert check(acl, R.SEND_MESSAGE_V2, dict(good)) == Allowed("permission", "UserAK01")  # the same request again
    tampered = [
        (dict(good), b"other-body"),  # body changed
        ({**good, "g": "2"}, BODY),  # a field changed
        ({k: v for k, v in good.items() if k != "h"}, BODY),  # a field dropped
        ({**good, "x": "1"}, BODY),  # a field added
        ({**good, SIGNATURE: send("topicA", body=b"x")[SIGNATURE]}, BODY),  # another request's signature
        ({k: v for k, v in good.items() if k != SIGNATURE}, BODY),  # no signature
    ]
    for ext, body in tampered:
        got = check(acl, R.SEND_MESSAGE_V2, ext, body)
        assert isinstance(got, Denied) and got.reason == "signature", ext


def test_reload_that_removes_a_permission_is_in_force_on_the_next_request() -> None:
    guard = AclGuard(acl_of(account_yml(topic_perms="[topicA=PUB]")))
    request = RemotingCommand(R.SEND_MESSAGE_V2, opaque=1, ext_fields=send("topicA"), body=BODY)
    assert guard(f"{PEER}:4000", request) is None
    assert guard(f"{PEER}:4000", request) is None  # remembered
    guard.acl = acl_of(account_yml(topic_perms="[topicA=DENY]"))  # what a reload / code 50 does
    refusal = guard(f"{PEER}:4000", request)
    assert refusal is not None and "No default permission for topic:topicA" in (refusal.remark or "")
    guard.acl = acl_of(account_yml(topic_perms="[topicA=PUB]"))
    assert guard(f"{PEER}:4000", request) is None


def test_reload_that_removes_admin_or_the_account_is_in_force_on_the_next_request() -> None:
    create = sign_request({"topic": "T"}, None, "UserAK01", "user-secret1")
    guard = AclGuard(acl_of(account_yml(admin="true")))
    request = RemotingCommand(R.UPDATE_AND_CREATE_TOPIC, opaque=1, ext_fields=create)
    assert guard(f"{PEER}:1", request) is None
    guard.acl = acl_of(account_yml(admin="false"))
    assert guard(f"{PEER}:1", request) is not None
    guard.acl = acl_of("accounts: []\n")
    refusal = guard(f"{PEER}:1", request)
    assert refusal is not None and "No acl config for UserAK01" in (refusal.remark or "")


def test_a_changed_secret_is_not_served_from_the_old_one() -> None:
    guard = AclGuard(acl_of(account_yml(secret="user-secret1")))
    old = RemotingCommand(R.SEND_MESSAGE_V2, opaque=1, ext_fields=send("topicA", "user-secret1"), body=BODY)
    new = RemotingCommand(R.SEND_MESSAGE_V2, opaque=2, ext_fields=send("topicA", "user-secret2"), body=BODY)
    assert guard(f"{PEER}:1", old) is None
    assert guard(f"{PEER}:1", new) is not None
    guard.acl = acl_of(account_yml(secret="user-secret2"))
    assert guard(f"{PEER}:1", old) is not None
    assert guard(f"{PEER}:1", new) is None


def test_a_changed_cluster_credential_is_not_served_from_the_old_one() -> None:
    acl = acl_of(account_yml())
    first = AclGuard(acl, cluster=Credential("clusterAK01", "clusterSecret1"))
    ext = sign_request({"topic": "T"}, None, "clusterAK01", "clusterSecret1")
    request = RemotingCommand(R.UPDATE_AND_CREATE_TOPIC, opaque=1, ext_fields=ext)
    assert first(f"{PEER}:1", request) is None
    second = AclGuard(acl, cluster=Credential("clusterAK01", "clusterSecret2"))
    assert second(f"{PEER}:1", request) is not None
    ext = sign_request({"topic": "T"}, None, "clusterAK01", "clusterSecret2")
    assert second(f"{PEER}:1", RemotingCommand(R.UPDATE_AND_CREATE_TOPIC, opaque=2, ext_fields=ext)) is None


def test_white_lists_are_remembered_per_host_and_replaced_with_the_set() -> None:
    acl = acl_of("globalWhiteRemoteAddresses: [10.10.10.*]\n" + account_yml(whiteRemoteAddress="192.168.7.*"))
    unsigned = {"a": "PG", "b": "topicB", "c": "TBW102"}
    for _ in range(2):
        assert check(acl, R.SEND_MESSAGE_V2, unsigned, peer="10.10.10.7") == Allowed("global_white")
        assert isinstance(check(acl, R.SEND_MESSAGE_V2, unsigned, peer="10.10.11.7"), Denied)
        # the account's white address skips the signature and the permission check
        as_user = {**unsigned, "AccessKey": "UserAK01"}
        assert check(acl, R.SEND_MESSAGE_V2, as_user, peer="192.168.7.1") == Allowed("account_white", "UserAK01")
        assert isinstance(check(acl, R.SEND_MESSAGE_V2, as_user, peer="192.168.8.1"), Denied)
    assert acl.white_hosts == {"10.10.10.7": True, "10.10.11.7": False, "192.168.7.1": False, "192.168.8.1": False}
    assert acl.accounts["UserAK01"].white_hosts == {"192.168.7.1": True, "192.168.8.1": False}
    # code 53 / a reload: the new set starts with nothing remembered
    narrowed = acl_of("globalWhiteRemoteAddresses: [10.10.12.*]\n" + account_yml())
    assert isinstance(check(narrowed, R.SEND_MESSAGE_V2, unsigned, peer="10.10.10.7"), Denied)
    assert isinstance(check(narrowed, R.SEND_MESSAGE_V2, as_user, peer="192.168.7.1"), Denied)


def test_peer_host_is_cut_once_per_address_and_ports_do_not_mix_hosts() -> None:
    acl = acl_of("globalWhiteRemoteAddresses: [10.10.10.*]\n" + account_yml())
    guard = AclGuard(acl)
    unsigned = RemotingCommand(R.SEND_MESSAGE_V2, opaque=1, ext_fields={"a": "PG", "b": "topicB", "c": "TBW102"})
    assert guard("10.10.10.7:5000", unsigned) is None
    assert guard("10.10.10.7:5000", unsigned) is None
    assert guard("10.10.11.7:5000", unsigned) is not None
    assert guard("[::ffff:10.10.10.7]:5001", unsigned) is None  # IPv4-mapped: as 10.10.10.7
    assert guard("[::1]:5000", unsigned) is not None


def test_memos_stay_bounded() -> None:
    acl = acl_of(account_yml(topic_perms="[topicA=PUB]"))
    account = acl.accounts["UserAK01"]
    for i in range(account.decisions.limit + 10):
        check(acl, R.SEND_MESSAGE_V2, send(f"t{i}"))
    assert 0 < len(account.decisions) <= account.decisions.limit
    # a huge topic name is decided but not remembered
    before = len(account.decisions)
    assert isinstance(check(acl, R.SEND_MESSAGE_V2, send("T" * 5000)), Denied)
    assert len(account.decisions) == before
    hosts = acl_of("globalWhiteRemoteAddresses: [10.10.10.*]\n")
    for i in range(HOST_MEMO + 10):
        hosts.is_globally_white(f"10.0.{i // 256}.{i % 256}")
    assert 0 < len(hosts.white_hosts) <= HOST_MEMO


def test_bounded_cache_forgets_everything_when_full() -> None:
    cache: BoundedCache[str, int] = BoundedCache(3)
    for i in range(3):
        assert cache.put(str(i), i) == i
    assert len(cache) == 3
    cache.put("3", 3)
    assert dict(cache) == {"3": 3}


# --------------------------------------------------------------------------- signing order
def _shapes() -> list[dict[str, str]]:
    rng = random.Random(7)
    names = ["a", "b", "topic", "AccessKey", "Signature", UNIQUE_KEY_QUERY, "OnsChannel", "é", "\ue000", "😀", "Z", ""]
    out = [{}, {"AccessKey": "ak"}, {"Signature": "s"}, {"AccessKey": "ak", UNIQUE_KEY_QUERY: "true"}]
    for _ in range(300):
        keys = rng.sample(names, rng.randint(0, len(names)))
        out.append({k: rng.choice(["", "v", "值", "\ud800x", "12"]) for k in keys})
    return out


@pytest.mark.parametrize("version", [0, 399, 400, 435, 0x7FFFFFFF])
def test_signing_order_gives_the_bytes_of_the_plain_computation(version: int) -> None:
    order = SigningOrder()
    for _ in range(2):  # learning, then remembered
        for ext in _shapes():
            assert order.head(ext, version) == _header_bytes(ext, signed_keys(ext, version)), ext


def test_signing_order_is_per_key_tuple_and_bounded() -> None:
    order = SigningOrder(limit=2)
    # the same keys in another order of the map: the same signed order
    assert order.head({"b": "2", "a": "1"}, 435) == order.head({"a": "1", "b": "2"}, 435) == b"12"
    assert order.head({"c": "3"}, 435) == b"3"
    assert len(order._orders) <= 2
    with pytest.raises(TypeError):  # a key that is no text: as sorted_keys, and not remembered
        order.head({1: "x", "a": "y"}, 435)  # type: ignore[dict-item]
    huge = {"k" * 5000: "v"}
    assert order.head(huge, 435) == b"v"
    assert tuple(huge) not in order._orders


def test_verify_with_and_without_the_order_memo_agree() -> None:
    order = SigningOrder()
    key = SigningKey("user-secret1")
    good = sign_request({"topic": "T", UNIQUE_KEY_QUERY: "true"}, BODY, "UserAK01", "user-secret1")
    legacy = sign_request({"topic": "T"}, BODY, "UserAK01", "user-secret1")  # 4.9.3 did not sign the flag
    cases = [good, {**good, "topic": "U"}, {**legacy, UNIQUE_KEY_QUERY: "true"}, {}, {SIGNATURE: "x"}]
    for ext in cases:
        for version in (399, 400):
            for body in (BODY, b"", None):
                expected = verify(ext, body, key, version)
                assert verify(ext, body, key, version, order) is expected
                assert verify(ext, body, "user-secret1", version, order) is expected
    assert verify(good, BODY, key, 400, order) and not verify(good, BODY, key, 399, order)
    assert verify({**legacy, UNIQUE_KEY_QUERY: "true"}, BODY, key, 399, order)


# --------------------------------------------------------------------------- the client hook
def test_client_hook_signs_as_sign_request_does() -> None:
    hook = AclClientRPCHook("UserAK01", "user-secret1", security_token="tok")
    for header in ({"b": "T", "d": 4, "k": False}, {"topic": "T"}, {"b": "T", "d": 4, "k": False}, {}):
        for body in (BODY, None):
            cmd = RemotingCommand(R.SEND_MESSAGE_V2, ext_fields=dict(header), body=body)
            hook("addr", cmd)
            assert cmd.ext_fields == sign_request(header, body, "UserAK01", "user-secret1", "tok")
    assert "user-secret1" not in repr(hook)


def test_an_empty_signing_key_is_refused_as_an_empty_secret() -> None:
    with pytest.raises(SigningError, match="empty secret key"):
        sign_request({"topic": "T"}, None, "UserAK01", SigningKey(""))
    with pytest.raises(SigningError):
        AclClientRPCHook("UserAK01", "")
