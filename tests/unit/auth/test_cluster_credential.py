"""rmq.auth.credentials (innerClientAuthenticationCredentials: parsing, signing hook, the
credential as an admin account) and rmq.auth.namesrv_rules (reads open, every other code
needs an admin account's signature; no white list)."""

from __future__ import annotations

import pytest

from rmq.auth.acl_config import build_acl_set
from rmq.auth.credentials import Credential, CredentialError, parse_credential, with_cluster_account
from rmq.auth.namesrv_rules import OPEN_CODES, validate_namesrv
from rmq.auth.permissions import ADMIN_CODES, Allowed, Denied, denial_remark, validate
from rmq.auth.signing import sign_request, verify
from rmq.protocol.codes import RequestCode
from rmq.protocol.frame import RemotingCommand

R = RequestCode
CRED = Credential("clusterAK01", "clusterSecret01")

YML = b"""
globalWhiteRemoteAddresses: ["10.0.0.*"]
accounts:
  - accessKey: adminAK0001
    secretKey: adminSecret01
    admin: true
    whiteRemoteAddress: 10.0.0.9
  - accessKey: plainAK0001
    secretKey: plainSecret01
    admin: false
    defaultTopicPerm: PUB|SUB
"""


def _acl():
    return with_cluster_account(build_acl_set([("/home/conf/plain_acl.yml", YML)]), CRED)


# --------------------------------------------------------------------------- parsing
def test_parse_json_and_colon_forms():
    assert parse_credential('{"accessKey":"clusterAK01","secretKey":"clusterSecret01"}') == CRED
    assert parse_credential(' { "secretKey": "clusterSecret01", "accessKey": "clusterAK01" } ') == CRED
    assert parse_credential("clusterAK01:clusterSecret01") == CRED
    # a secret may itself hold a colon: only the first one separates
    assert parse_credential("clusterAK01:a:b:c:d:e:f") == Credential("clusterAK01", "a:b:c:d:e:f")
    assert parse_credential("") is None and parse_credential("   ") is None


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[1, 2]",
        '{"accessKey":"clusterAK01"}',
        '{"accessKey":"clusterAK01","secretKey":12345678}',
        "no-separator-here",
        "short:clusterSecret01",
        "clusterAK01:short",
    ],
)
def test_bad_values_name_the_key_never_the_value(text):
    with pytest.raises(CredentialError) as e:
        parse_credential(text)
    msg = str(e.value)
    assert msg.startswith("innerClientAuthenticationCredentials:")
    for secret in ("clusterSecret01", "12345678", "short"):
        assert secret not in msg.replace("innerClientAuthenticationCredentials", "")


def test_secret_not_in_repr():
    assert "clusterSecret01" not in repr(CRED)


def test_sign_hook_is_the_client_signature():
    cmd = RemotingCommand(R.REGISTER_BROKER, ext_fields={"brokerName": "b", "brokerId": "0"}, body=b"xyz")
    original = cmd.ext_fields
    CRED.sign("127.0.0.1:9876", cmd)
    assert original == {"brokerName": "b", "brokerId": "0"}  # not changed in place
    assert cmd.ext_fields == sign_request(original, b"xyz", "clusterAK01", "clusterSecret01")
    assert verify(cmd.ext_fields, b"xyz", "clusterSecret01", 0)


# --------------------------------------------------------------------------- broker rule
def _signed(code: int, cred: Credential, ext: dict | None = None, body: bytes | None = None) -> RemotingCommand:
    return RemotingCommand(code, ext_fields=sign_request(ext or {}, body, cred.access_key, cred.secret_key), body=body)


def _decide(rule, acl, cmd: RemotingCommand, peer: str = "192.168.1.5"):
    return rule(acl, cmd.code, cmd.ext_fields, cmd.body, cmd.version, peer)


def test_broker_accepts_the_credential_as_admin():
    acl = _acl()
    for code in sorted(ADMIN_CODES) + [R.GET_ALL_TOPIC_CONFIG, R.GET_ALL_CONSUMER_OFFSET, R.SEND_MESSAGE_V2]:
        d = _decide(validate, acl, _signed(code, CRED, {"a": "G", "b": "AnyTopic"}))
        assert isinstance(d, Allowed), (code, d)
    wrong = Credential("clusterAK01", "notTheSecret")
    d = _decide(validate, acl, _signed(R.GET_ALL_TOPIC_CONFIG, wrong))
    assert isinstance(d, Denied) and d.reason == "signature"
    # without the credential the same key is unknown
    bare = build_acl_set([("/home/conf/plain_acl.yml", YML)])
    d = _decide(validate, bare, _signed(R.GET_ALL_TOPIC_CONFIG, CRED))
    assert isinstance(d, Denied) and d.reason == "unknown_access_key"
    assert with_cluster_account(bare, None) is bare


def test_the_credential_wins_over_a_yml_account_of_the_same_key():
    yml = b"accounts:\n  - accessKey: clusterAK01\n    secretKey: fromTheFile1\n    admin: false\n"
    acl = with_cluster_account(build_acl_set([("/h/conf/plain_acl.yml", yml)]), CRED)
    assert isinstance(_decide(validate, acl, _signed(R.UPDATE_AND_CREATE_TOPIC, CRED)), Allowed)
    d = _decide(validate, acl, _signed(R.UPDATE_AND_CREATE_TOPIC, Credential("clusterAK01", "fromTheFile1")))
    assert isinstance(d, Denied)


# --------------------------------------------------------------------------- NameServer rule
WRITES = [
    R.REGISTER_BROKER,
    R.UNREGISTER_BROKER,
    R.DELETE_TOPIC_IN_NAMESRV,
    R.REGISTER_TOPIC_IN_NAMESRV,
    R.PUT_KV_CONFIG,
    R.DELETE_KV_CONFIG,
    R.WIPE_WRITE_PERM_OF_BROKER,
    R.ADD_WRITE_PERM_OF_BROKER,
    R.UPDATE_NAMESRV_CONFIG,
    R.QUERY_DATA_VERSION,
    R.BROKER_HEARTBEAT,
    R.CONTROLLER_ELECT_MASTER,
    R.CONTROLLER_GET_SYNC_STATE_DATA,
    R.CONTROLLER_REGISTER_BROKER,
    R.CONTROLLER_ALTER_SYNC_STATE_SET,
    R.CLEAN_BROKER_DATA,
    R.UPDATE_CONTROLLER_CONFIG,
    99999,  # a code nobody listed is closed
]


@pytest.mark.parametrize("code", WRITES)
def test_namesrv_writes_need_an_admin_signature(code):
    acl = _acl()
    d = _decide(validate_namesrv, acl, RemotingCommand(code, ext_fields={"brokerName": "b"}))
    assert isinstance(d, Denied) and d.reason == "no_access_key"
    assert denial_remark(d).startswith("org.apache.rocketmq.acl.common.AclException: No accessKey is configured, ")
    d = _decide(validate_namesrv, acl, _signed(code, Credential("plainAK0001", "plainSecret01")))
    assert isinstance(d, Denied) and d.reason == "admin"
    assert d.message == f"Need admin permission for request code={code}, but accessKey=plainAK0001 is not"
    d = _decide(validate_namesrv, acl, _signed(code, Credential("adminAK0001", "wrongSecret1")))
    assert isinstance(d, Denied) and d.reason == "signature"
    d = _decide(validate_namesrv, acl, _signed(code, Credential("nobody00001", "whatever01")))
    assert isinstance(d, Denied) and d.reason == "unknown_access_key"
    assert isinstance(
        _decide(validate_namesrv, acl, _signed(code, Credential("adminAK0001", "adminSecret01"))), Allowed
    )
    assert isinstance(_decide(validate_namesrv, acl, _signed(code, CRED)), Allowed)


def test_namesrv_white_lists_open_nothing():
    acl = _acl()
    unsigned = RemotingCommand(R.REGISTER_BROKER, ext_fields={"brokerName": "b"})
    # globally white-listed peer, and the admin account's own white address
    for peer in ("10.0.0.1", "10.0.0.9"):
        assert isinstance(_decide(validate_namesrv, acl, unsigned, peer), Denied)
        assert isinstance(_decide(validate, acl, unsigned, peer), Allowed)  # (the broker's rule would)
    with_ak = RemotingCommand(R.REGISTER_BROKER, ext_fields={"AccessKey": "adminAK0001", "Signature": "x"})
    assert isinstance(_decide(validate_namesrv, acl, with_ak, "10.0.0.9"), Denied)


@pytest.mark.parametrize("code", sorted(OPEN_CODES))
def test_namesrv_reads_are_open_to_everybody(code):
    acl = _acl()
    assert isinstance(_decide(validate_namesrv, acl, RemotingCommand(code)), Allowed)
    assert isinstance(_decide(validate_namesrv, acl, RemotingCommand(code, ext_fields={"topic": "T"})), Allowed)
    # a bad signature on a read does not matter either (the NameServer ignored them in 4.9.8)
    bad = _signed(code, Credential("nobody00001", "whatever01"))
    assert isinstance(_decide(validate_namesrv, acl, bad), Allowed)


def test_no_write_code_is_open():
    assert not OPEN_CODES & set(WRITES)
