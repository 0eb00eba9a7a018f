"""Signatures byte-exact against the spec's worked examples (rocketmq-4x-acl-tls.md 1.6),
the canonicalization rules of 1.7 / 2.4, and verify() on junk."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq.auth.signing import (
    SigningError,
    calculate_signature,
    canonical_content,
    ext_value_text,
    sign_request,
    sorted_keys,
    verify,
)
from rmq.protocol.codes import SerializeType
from rmq.protocol.frame import RemotingCommand, decode_frame, encode

SECRET = "12345678"

# Example A: Java 4.9.8 producer, SEND_MESSAGE_V2, header fields as makeCustomHeaderToNet puts them.
HEADER_A = {
    "a": "please_rename_unique_group_name",
    "b": "TopicTest",
    "c": "TBW102",
    "d": 4,
    "e": 0,
    "f": 0,
    "g": 1700000000000,
    "h": 0,
    "i": "WAIT\x01true\x02TAGS\x01TagA\x02",
    "j": 0,
    "k": False,
    "l": None,
    "m": False,
    "n": "broker-a",
}
BODY_A = b"Hello RocketMQ"
CONTENT_A_HEX = (
    "526f636b65744d51706c656173655f72656e616d655f756e697175655f67726f75705f6e616d65546f70696354657374"
    "544257313032343030313730303030303030303030303057414954017472756502544147530154616741023066616c73"
    "6566616c736562726f6b65722d6148656c6c6f20526f636b65744d51"
)


def test_example_a_java_send_message_v2() -> None:
    ext = sign_request(HEADER_A, BODY_A, "RocketMQ", SECRET)
    assert ext["Signature"] == "fF1yuuGpatwxBwMJ6VRCpqerz18="
    assert "l" not in ext  # null fields are not sent
    assert ext["d"] == "4" and ext["k"] == "false" and ext["AccessKey"] == "RocketMQ"
    content = canonical_content(ext, BODY_A)
    assert content.hex() == CONTENT_A_HEX
    assert len(content) == 124
    assert calculate_signature(content, SECRET) == "fF1yuuGpatwxBwMJ6VRCpqerz18="
    assert verify(ext, BODY_A, SECRET, 409)


def test_example_b_cpp_and_ali_ons_style() -> None:
    header = {"topic": "TopicTest", "consumerGroup": "GID_demo", "queueId": 0, "commitOffset": 42}
    ext = sign_request(header, None, "RocketMQ", SECRET, ons_channel="ALIYUN")
    assert ext["OnsChannel"] == "ALIYUN"
    assert canonical_content(ext, None) == b"RocketMQALIYUN42GID_demo0TopicTest"
    assert ext["Signature"] == "OdOeAjuLe2lx0ZeKRRGmhGy5Tpk="


def test_example_c_headerless_request_signs_the_body() -> None:
    body = b'{"clientID":"x"}'
    ext = sign_request(None, body, "RocketMQ", SECRET)
    assert ext.keys() == {"AccessKey", "Signature"}
    assert canonical_content(ext, body) == b'RocketMQ{"clientID":"x"}'
    assert ext["Signature"] == "SC9kzFTBVLXXAqxyRji08hY5LG4="


def test_example_d_non_ascii_values_are_utf8() -> None:
    ext = sign_request({"topic": "TopicTest", "key": "订单-1"}, None, "RocketMQ", SECRET)
    assert canonical_content(ext, None).hex() == "526f636b65744d51" + "e8aea2e58d952d31" + "546f70696354657374"
    assert ext["Signature"] == "1uNCOMbaEtFRP0O6lGVsxRyMeWk="


def test_security_token_is_signed_and_never_validated() -> None:
    ext = sign_request({"topic": "T"}, None, "RocketMQ", SECRET, security_token="tok")
    assert ext["SecurityToken"] == "tok"
    assert canonical_content(ext, None) == b"RocketMQtokT"
    assert verify(ext, None, SECRET, 409)


def test_stale_signature_in_input_is_replaced_not_signed() -> None:
    first = sign_request({"topic": "T"}, None, "RocketMQ", SECRET)
    again = sign_request(first, None, "RocketMQ", SECRET)
    assert again == first


def test_empty_secret_refused_like_aclsigner() -> None:
    with pytest.raises(SigningError, match="10015:signature-failed"):
        sign_request({}, None, "RocketMQ", "")


def test_wrong_secret_body_or_value_fails() -> None:
    ext = sign_request({"topic": "T"}, b"body", "RocketMQ", SECRET)
    assert verify(ext, b"body", SECRET, 409)
    assert not verify(ext, b"body", SECRET + "x", 409)
    assert not verify(ext, b"bodY", SECRET, 409)
    assert not verify(ext, None, SECRET, 409)
    assert not verify({**ext, "topic": "U"}, b"body", SECRET, 409)
    assert verify({**ext, "extra": ""}, b"body", SECRET, 409)  # an empty value adds no bytes: same content
    assert not verify({**ext, "extra": "x"}, b"body", SECRET, 409)
    assert not verify({k: v for k, v in ext.items() if k != "Signature"}, b"body", SECRET, 409)


def test_empty_values_count_as_empty_strings_cpp_style() -> None:
    # C++ 2.x signs every header field, empty strings included (spec 1.4); 4.9.8's binary
    # decoder turned "" into "null" (spec 1.7.3) - we must not.
    ext = sign_request({"topic": "T", "tags": "", "keys": ""}, None, "RocketMQ", SECRET, ons_channel="ALIYUN")
    assert canonical_content(ext, None) == b"RocketMQALIYUNT"
    for st_ in (SerializeType.JSON, SerializeType.ROCKETMQ):
        wire = encode(RemotingCommand(10, ext_fields=ext, serialize_type=st_))
        got = decode_frame(wire)
        # rmq's binary decoder drops a zero-length value; that signs the same bytes as "".
        assert got.ext_fields is not None and got.ext_fields.get("tags", "") == ""
        assert "null" not in canonical_content(got.ext_fields, None).decode()
        assert verify(got.ext_fields, got.body, SECRET, got.version), SerializeType.name_of(st_)


def _json_frame(header: dict[str, object], body: bytes = b"") -> bytes:
    head = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    return struct.pack(">ii", 4 + len(head) + len(body), len(head)) + head + body


def test_json_numbers_and_booleans_are_signed_as_their_literal_text() -> None:
    # What C++ 2.x / ali-ons put on the wire: numbers and booleans, not strings.
    signed = sign_request(
        {"topic": "TopicTest", "queueId": 3, "commitOffset": 1700000000000, "unitMode": False, "sysFlag": -1},
        None,
        "RocketMQ",
        SECRET,
        ons_channel="ALIYUN",
    )
    native: dict[str, object] = dict(signed)
    native.update({"queueId": 3, "commitOffset": 1700000000000, "unitMode": False, "sysFlag": -1})
    frame = _json_frame({"code": 15, "language": "CPP", "version": 409, "opaque": 1, "flag": 0, "extFields": native})
    cmd = decode_frame(frame)
    assert cmd.ext_fields is not None
    assert cmd.ext_fields["queueId"] == "3" and cmd.ext_fields["unitMode"] == "false"
    assert verify(cmd.ext_fields, cmd.body, SECRET, cmd.version)


def test_json_fraction_keeps_its_source_text() -> None:
    content = b"RocketMQ1.50"
    sig = calculate_signature(content, SECRET)
    frame = _json_frame(
        {"code": 10, "version": 409, "extFields": {"AccessKey": "RocketMQ", "x": 1.50, "Signature": sig}}
    )
    text = frame.replace(b'"x":1.5', b'"x":1.50')
    text = struct.pack(">ii", len(text) - 4, len(text) - 8) + text[8:]
    cmd = decode_frame(text)
    assert cmd.ext_fields is not None and cmd.ext_fields["x"] == "1.50"
    assert verify(cmd.ext_fields, None, SECRET, 409)


def test_ext_value_text() -> None:
    assert ext_value_text(True) == "true" and ext_value_text(False) == "false"
    assert ext_value_text(-7) == "-7" and ext_value_text("x") == "x" and ext_value_text(None) is None
    with pytest.raises(TypeError):
        ext_value_text(1.5)


def test_unique_key_query_excluded_only_for_old_clients() -> None:
    header = {"topic": "T", "key": "k", "maxNum": 32, "beginTimestamp": 0, "endTimestamp": 1}
    # 4.9.4+ client (version 409): signs _UNIQUE_KEY_QUERY like any ext field.
    new = sign_request({**header, "_UNIQUE_KEY_QUERY": "true"}, None, "RocketMQ", SECRET)
    assert verify(new, None, SECRET, 409)
    assert not verify(new, None, SECRET, 399)  # 4.9.8's unconditional exclusion would refuse it
    # 4.9.3 client (version 399): signed without it, sends it anyway.
    old = sign_request(header, None, "RocketMQ", SECRET)
    old_wire = {**old, "_UNIQUE_KEY_QUERY": "true"}
    assert verify(old_wire, None, SECRET, 399)
    assert not verify(old_wire, None, SECRET, 400)


def test_keys_sort_in_java_utf16_order() -> None:
    # U+FF21 (BMP, above the surrogates) sorts after U+1F600 in UTF-16 (0xD83D...),
    # before it in code-point order.
    keys = ["\uff21", "\U0001f600", "B", "a"]
    assert sorted_keys(keys) == ["B", "a", "\U0001f600", "\uff21"]
    ext = {"\uff21": "1", "\U0001f600": "2", "AccessKey": "ak"}
    assert canonical_content(ext, None) == b"ak21"


def test_body_may_be_a_memoryview_and_is_not_required_to_be_bytes() -> None:
    ext = sign_request({"topic": "T"}, BODY_A, "RocketMQ", SECRET)
    assert verify(ext, memoryview(BODY_A), SECRET, 409)
    assert verify(ext, bytearray(BODY_A), SECRET, 409)


JUNK_VALUES = st.one_of(st.text(), st.none(), st.integers(), st.binary(), st.booleans(), st.floats())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ext=st.one_of(st.none(), st.dictionaries(st.one_of(st.text(), st.integers()), JUNK_VALUES, max_size=8)),
    body=st.one_of(st.none(), st.binary(max_size=64)),
    secret=st.text(max_size=12),
    version=st.integers(min_value=-(2**31), max_value=2**31 - 1),
)
def test_verify_never_raises_on_junk(ext: object, body: bytes | None, secret: str, version: int) -> None:
    assert verify(ext, body, secret, version) in (True, False)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    header=st.dictionaries(st.text(min_size=1), st.text(), max_size=8),
    body=st.one_of(st.none(), st.binary(max_size=64)),
    secret=st.text(min_size=1, max_size=16),
)
def test_sign_then_verify_round_trip(header: dict[str, str], body: bytes | None, secret: str) -> None:
    ext = sign_request(header, body, "RocketMQ", secret)
    assert verify(ext, body, secret, 409)
    assert not verify(ext, (body or b"") + b"!", secret, 409)


@pytest.mark.parametrize("secret", ["12345678", "k" * 64, "long-" * 40, "ünïcödé-secret"])
def test_signing_key_is_hmac_sha1(secret):
    import hashlib
    import hmac

    from rmq.auth.signing import SigningKey

    key = SigningKey(secret)
    for head, body in ((b"abc", b"body" * 300), (b"", None), (b"x" * 1000, b"")):
        want = hmac.new(secret.encode(), head + (body or b""), hashlib.sha1).digest()
        assert key.mac(head, body) == want
    assert secret not in repr(key)
