"""The 5.x ``authorization`` header checked against plain_acl.yml accounts."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from rmq.auth.acl_config import PUB, SUB, build_acl_set
from rmq.proxy import pb
from rmq.proxy.auth import Authenticator, parse_authorization
from rmq.proxy.convert import ProxyError

YAML = b"""
globalWhiteRemoteAddresses:
  - 10.9.*.*
accounts:
  - accessKey: RocketMQ5
    secretKey: 12345678
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - TopicA=PUB
  - accessKey: adminuser
    secretKey: adminsecret
    admin: true
"""
DATE = "20261128T093000Z"


def _header(ak: str, sk: str, *, upper: bool = False) -> str:
    sig = hmac.new(sk.encode(), DATE.encode(), hashlib.sha1).hexdigest()
    sig = sig.upper() if upper else sig
    return f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}"


@pytest.fixture
def auth() -> Authenticator:
    return Authenticator(build_acl_set([("plain_acl.yml", YAML)], "plain_acl.yml"))


@pytest.mark.parametrize("upper", [False, True])
def test_signature_either_case(auth: Authenticator, upper: bool) -> None:
    md = {"authorization": _header("RocketMQ5", "12345678", upper=upper), "x-mq-date-time": DATE}
    account = auth.authenticate(md, "127.0.0.1")
    assert account is not None and account.access_key == "RocketMQ5"
    auth.authorize(account, "TopicA", PUB)
    with pytest.raises(ProxyError) as ei:
        auth.authorize(account, "TopicB", PUB)
    assert ei.value.code == pb.Code.FORBIDDEN and "TopicB" in ei.value.message
    auth.authorize(account, "G", SUB, group=True)


def test_refusals(auth: Authenticator) -> None:
    for md, words in [
        ({"authorization": _header("RocketMQ5", "wrong!!!"), "x-mq-date-time": DATE}, "signature"),
        ({"authorization": _header("nobody", "12345678"), "x-mq-date-time": DATE}, "nobody"),
        ({"authorization": _header("", "")}, "anonymous"),  # the Python client without credentials
        ({}, "anonymous"),
    ]:
        with pytest.raises(ProxyError) as ei:
            auth.authenticate(md, "127.0.0.1")
        assert ei.value.code == pb.Code.UNAUTHORIZED and words in ei.value.message
    assert auth.authenticate({}, "10.9.1.1") is None  # globally white: anonymous allowed


def test_acl_off_lets_everything_through() -> None:
    off = Authenticator(None)
    assert off.authenticate({"authorization": "garbage"}, "1.2.3.4") is None
    off.authorize(None, "T", PUB)


def test_parse_authorization() -> None:
    a = parse_authorization(_header("ak/2026/region", "sk"))
    assert a is not None and a.access_key == "ak"
    assert parse_authorization("MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=ab") is None
