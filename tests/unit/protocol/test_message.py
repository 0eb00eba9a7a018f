"""The message codec (rmq.protocol.message) against spec sections 3.1-3.7 and 2.4.

Expected bytes are built here by hand with ``struct`` from the spec's field table,
never through the codec under test.
"""

from __future__ import annotations

import ipaddress
import struct
import time
import zlib
from datetime import datetime

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rmq.protocol.errors import ProtocolError
from rmq.protocol.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    BatchItem,
    SysFlag,
    UniqueIdGenerator,
    body_crc,
    create_message_id,
    decode_batch,
    decode_message_id,
    decode_properties,
    decode_record,
    decode_records,
    encode_batch,
    encode_blank,
    encode_record,
    host_sysflag,
    java_hash,
    pack_host,
    properties_to_string,
    read_record_head,
    record_length,
    store_timestamp_position,
    string_to_properties,
    tags_string_to_tags_code,
    unpack_host,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

# ---------------------------------------------------------------------------
# helpers built straight from the spec tables (independent of the codec)
# ---------------------------------------------------------------------------
MAGIC_V1_BYTES = bytes.fromhex("DAA320A7")
MAGIC_V2_BYTES = bytes.fromhex("DAA320AB")
BLANK_MAGIC_BYTES = bytes.fromhex("CBD43194")


def host_bytes(ip: bytes, port: int) -> bytes:
    return ip + struct.pack(">i", port)


def manual_record(
    *,
    body: bytes,
    topic: bytes,
    properties: bytes,
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: bytes = b"\x7f\0\0\x01\0\0\0\x01",
    store_timestamp: int = 0,
    store_host: bytes = b"\x7f\0\0\x01\0\0\0\x02",
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    v2: bool = False,
    crc: int | None = None,
) -> bytes:
    """Spec 3.2 table, field by field (encode_record's arguments, written without it)."""
    crc = (zlib.crc32(body) & 0x7FFFFFFF) if crc is None else crc
    tail = (
        struct.pack(">i", len(body))
        + body
        + (struct.pack(">h", len(topic)) if v2 else struct.pack(">b", len(topic)))
        + topic
        + struct.pack(">h", len(properties))
        + properties
    )
    mid = (
        struct.pack(">i", crc)
        + struct.pack(">i", queue_id)
        + struct.pack(">i", flag)
        + struct.pack(">q", queue_offset)
        + struct.pack(">q", physical_offset)
        + struct.pack(">i", sys_flag)
        + struct.pack(">q", born_timestamp)
        + born_host
        + struct.pack(">q", store_timestamp)
        + store_host
        + struct.pack(">i", reconsume_times)
        + struct.pack(">q", prepared_transaction_offset)
    )
    magic = MAGIC_V2_BYTES if v2 else MAGIC_V1_BYTES
    total = 4 + len(magic) + len(mid) + len(tail)
    return struct.pack(">i", total) + magic + mid + tail


def ref_java_hash(s: str) -> int:
    """Straightforward String.hashCode over UTF-16 code units."""
    raw = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def local_month_start_ms(now_ms: int) -> int:
    dt = datetime.fromtimestamp(now_ms / 1000)
    return int(dt.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp() * 1000)


# ---------------------------------------------------------------------------
# golden bytes (spec 3.1, 3.2, 3.7)
# ---------------------------------------------------------------------------
GOLDEN_BODY = bytes(range(32))
GOLDEN_TOPIC = b"FooBar"
GOLDEN_PROPS = b"TAGS\x01TAG1\x02KEYS\x011234567890123\x02"
GOLDEN_BORN = host_bytes(bytes([10, 1, 2, 3]), 54321)
GOLDEN_STORE = host_bytes(bytes([127, 0, 0, 1]), 10911)
GOLDEN_FIELDS = dict(
    queue_id=3,
    flag=7,
    queue_offset=42,
    physical_offset=1580,
    sys_flag=0,
    born_timestamp=1_700_000_000_000,
    born_host=GOLDEN_BORN,
    store_timestamp=1_700_000_000_005,
    store_host=GOLDEN_STORE,
    reconsume_times=2,
    prepared_transaction_offset=99,
)

# the spec's 158-byte example record, as encode_record's arguments
GOLDEN_RECORD_FIELDS = dict(topic=GOLDEN_TOPIC, body=GOLDEN_BODY, properties=GOLDEN_PROPS, **GOLDEN_FIELDS)


def test_magic_constants_match_spec_bytes():
    assert struct.pack(">i", MESSAGE_MAGIC_CODE) == MAGIC_V1_BYTES
    assert struct.pack(">i", MESSAGE_MAGIC_CODE_V2) == MAGIC_V2_BYTES
    assert struct.pack(">i", BLANK_MAGIC_CODE) == BLANK_MAGIC_BYTES


def test_golden_properties_string_is_29_bytes():
    s = properties_to_string({"TAGS": "TAG1", "KEYS": "1234567890123"})
    assert s.encode("utf-8") == GOLDEN_PROPS
    assert len(GOLDEN_PROPS) == 29


def test_golden_record_spec_example_158_bytes():
    rec = encode_record(**GOLDEN_RECORD_FIELDS)
    assert len(rec) == 158
    # field by field at the offsets of spec 3.2 (v4 born + v4 store)
    assert rec[0:4] == struct.pack(">i", 158)  # TOTALSIZE
    assert rec[4:8] == b"\xda\xa3\x20\xa7"  # MAGICCODE v1
    assert rec[8:12] == struct.pack(">i", zlib.crc32(GOLDEN_BODY) & 0x7FFFFFFF)  # BODYCRC
    assert rec[12:16] == struct.pack(">i", 3)  # QUEUEID
    assert rec[16:20] == struct.pack(">i", 7)  # FLAG
    assert rec[20:28] == struct.pack(">q", 42)  # QUEUEOFFSET
    assert rec[28:36] == struct.pack(">q", 1580)  # PHYSICALOFFSET
    assert rec[36:40] == struct.pack(">i", 0)  # SYSFLAG
    assert rec[40:48] == struct.pack(">q", 1_700_000_000_000)  # BORNTIMESTAMP
    assert rec[48:52] == bytes([10, 1, 2, 3])  # BORNHOST ip
    assert rec[52:56] == struct.pack(">i", 54321)  # BORNHOST port
    assert rec[56:64] == struct.pack(">q", 1_700_000_000_005)  # STORETIMESTAMP
    assert rec[64:68] == bytes([127, 0, 0, 1])  # STOREHOST ip
    assert rec[68:72] == struct.pack(">i", 10911)  # STOREHOST port
    assert rec[72:76] == struct.pack(">i", 2)  # RECONSUMETIMES
    assert rec[76:84] == struct.pack(">q", 99)  # PREPARED TX OFFSET
    assert rec[84:88] == struct.pack(">i", 32)  # BODY LENGTH
    assert rec[88:120] == GOLDEN_BODY  # BODY
    assert rec[120] == 6  # TOPIC LENGTH (1 byte)
    assert rec[121:127] == b"FooBar"  # TOPIC
    assert rec[127:129] == struct.pack(">h", 29)  # PROPERTIES LENGTH
    assert rec[129:158] == GOLDEN_PROPS  # PROPERTIES
    # and the whole thing equals the hand-built record
    assert rec == manual_record(**GOLDEN_RECORD_FIELDS)
    assert record_length(0, 32, 6, 29) == 158
    # 10 such records back to back end at 1580 (ReputMessageServiceTest)
    assert record_length(0, 32, 6, 29) * 10 == 1580


def test_golden_record_decodes():
    rec = manual_record(**GOLDEN_RECORD_FIELDS)
    m = decode_record(rec, check_crc=True)
    assert (m.store_size, m.magic, m.queue_id, m.flag, m.queue_offset, m.commit_log_offset) == (
        158,
        MESSAGE_MAGIC_CODE,
        3,
        7,
        42,
        1580,
    )
    assert m.body_crc == zlib.crc32(GOLDEN_BODY) & 0x7FFFFFFF
    assert (m.sys_flag, m.born_timestamp, m.store_timestamp) == (0, 1_700_000_000_000, 1_700_000_000_005)
    assert m.born_host == GOLDEN_BORN and m.store_host == GOLDEN_STORE
    assert m.born_host_str == "10.1.2.3:54321" and m.store_host_str == "127.0.0.1:10911"
    assert (m.reconsume_times, m.prepared_transaction_offset) == (2, 99)
    assert m.body == GOLDEN_BODY and m.topic == "FooBar"
    assert m.properties == {"TAGS": "TAG1", "KEYS": "1234567890123"}
    assert m.tags == "TAG1" and m.keys == "1234567890123" and m.uniq_key is None
    assert m.msg_id == "7F000001" + "00002A9F" + "000000000000062C"


V6_A = bytes.fromhex("20010db8000000000000000000000001")
V6_B = bytes.fromhex("fe800000000000000202b3fffe1e8329")


@pytest.mark.parametrize("born_v6,store_v6", [(False, False), (True, False), (False, True), (True, True)])
def test_ipv6_host_layout(born_v6: bool, store_v6: bool):
    born = host_bytes(V6_A if born_v6 else bytes([192, 168, 0, 9]), 40000)
    store = host_bytes(V6_B if store_v6 else bytes([127, 0, 0, 1]), 10911)
    sys_flag = (0x10 if born_v6 else 0) | (0x20 if store_v6 else 0) | 0x2
    assert host_sysflag(born, store) == sys_flag & 0x30
    # the golden record with these hosts (and a flag word to match)
    fields = {**GOLDEN_RECORD_FIELDS, "sys_flag": sys_flag, "born_host": born, "store_host": store}
    rec = encode_record(**fields)
    expect_len = 158 + (12 if born_v6 else 0) + (12 if store_v6 else 0)
    assert len(rec) == expect_len == record_length(sys_flag, 32, 6, 29)
    assert rec == manual_record(**fields)
    bh = 20 if born_v6 else 8
    sh = 20 if store_v6 else 8
    st_pos = 48 + bh
    assert store_timestamp_position(sys_flag) == st_pos == (68 if born_v6 else 56)
    assert rec[48 : 48 + bh] == born
    assert rec[st_pos : st_pos + 8] == struct.pack(">q", GOLDEN_FIELDS["store_timestamp"])
    assert rec[st_pos + 8 : st_pos + 8 + sh] == store
    body_len_pos = st_pos + 8 + sh + 4 + 8
    assert rec[body_len_pos : body_len_pos + 4] == struct.pack(">i", 32)
    assert rec[body_len_pos + 4 : body_len_pos + 36] == GOLDEN_BODY
    m = decode_record(rec, check_crc=True)
    assert m.born_host == born and m.store_host == store and m.store_timestamp == GOLDEN_FIELDS["store_timestamp"]
    assert len(m.msg_id) == (56 if store_v6 else 32)
    head = read_record_head(rec)
    assert head.body_len == 32 and head.store_host == store and head.total_size == expect_len


def test_blank_record_bytes():
    assert encode_blank(177) == b"\x00\x00\x00\xb1" + b"\xcb\xd4\x31\x94"
    assert encode_blank(1 << 20) == struct.pack(">i", 1 << 20) + BLANK_MAGIC_BYTES
    assert len(encode_blank(8)) == 8
    blank = encode_blank(64) + bytes(56)
    with pytest.raises(ProtocolError):
        decode_record(blank)
    with pytest.raises(ProtocolError):
        read_record_head(blank)


def test_v2_record_two_byte_topic_length_decodes():
    topic = b"T" * 200
    rec = manual_record(body=b"xyz", topic=topic, properties=b"a\x01b\x02", v2=True, physical_offset=77)
    assert len(rec) == record_length(0, 3, 200, 4, v2=True) == 91 + 1 + 3 + 200 + 4
    m = decode_record(rec, check_crc=True)
    assert m.magic == MESSAGE_MAGIC_CODE_V2 and m.topic == "T" * 200
    assert m.body == b"xyz" and m.properties == {"a": "b"} and m.commit_log_offset == 77


def test_v1_topic_length_is_a_signed_byte():
    # Java reads the v1 topic length as a signed byte: 0x80..0xFF is negative, so a
    # record carrying such a length is corrupt even when TOTALSIZE adds up.
    ok = manual_record(body=b"", topic=b"T" * 127, properties=b"")
    assert decode_record(ok).topic == "T" * 127
    head = manual_record(body=b"", topic=b"", properties=b"")[:88]  # through BODY LENGTH (0)
    raw = bytearray(head + bytes([200]) + b"T" * 200 + struct.pack(">h", 0))
    raw[0:4] = struct.pack(">i", len(raw))
    with pytest.raises(ProtocolError):
        decode_record(bytes(raw))


def test_encode_limits():
    with pytest.raises(ProtocolError):
        encode_record(topic=b"T" * 128, body=b"", properties=b"", **GOLDEN_FIELDS)
    with pytest.raises(ProtocolError):
        encode_record(topic=b"T", body=b"", properties=b"p" * 32768, **GOLDEN_FIELDS)
    rec = encode_record(topic=b"T" * 127, body=b"", properties=b"p" * 32767, **GOLDEN_FIELDS)
    assert len(rec) == record_length(0, 0, 127, 32767) == 91 + 127 + 32767


def test_explicit_crc_is_written_verbatim_and_checked():
    rec = encode_record(topic=b"t", body=b"abc", properties=b"", crc=12345, **GOLDEN_FIELDS)
    assert rec[8:12] == struct.pack(">i", 12345)
    assert decode_record(rec).body == b"abc"
    with pytest.raises(ProtocolError):
        decode_record(rec, check_crc=True)
    assert body_crc(b"abc") == zlib.crc32(b"abc") & 0x7FFFFFFF


def test_compressed_body_inflates_only_on_request():
    body = b"hello world " * 1000
    stored = zlib.compress(body, 5)
    rec = encode_record(topic=b"t", body=stored, properties=b"", **{**GOLDEN_FIELDS, "sys_flag": SysFlag.COMPRESSED})
    assert decode_record(rec, check_crc=True).body == stored
    assert decode_record(rec, check_crc=True, decompress=True).body == body
    assert decode_records(rec)[0].body == body
    assert decode_records(rec, decompress=False)[0].body == stored
    # COMPRESSED flag on a body that is not zlib: ProtocolError, not zlib.error
    bad = encode_record(
        topic=b"t", body=b"not zlib", properties=b"", **{**GOLDEN_FIELDS, "sys_flag": SysFlag.COMPRESSED}
    )
    with pytest.raises(ProtocolError):
        decode_record(bad, decompress=True)


# ---------------------------------------------------------------------------
# hosts and msgId (spec 3.5)
# ---------------------------------------------------------------------------
def test_pack_unpack_host():
    assert pack_host("127.0.0.1", 9103) == b"\x7f\x00\x00\x01\x00\x00\x23\x8f"
    assert pack_host("::ffff:10.0.0.1", 1) == b"\x0a\x00\x00\x01\x00\x00\x00\x01"
    assert pack_host("2001:db8::1", 10911) == V6_A + struct.pack(">i", 10911)
    assert unpack_host(pack_host("2001:db8::1", 10911)) == ("2001:db8::1", 10911)
    assert unpack_host(b"\x7f\x00\x00\x01\x00\x00\x23\x8f") == ("127.0.0.1", 9103)
    with pytest.raises(ProtocolError):
        pack_host("not-an-ip", 1)
    with pytest.raises(ProtocolError):
        unpack_host(b"\x00" * 7)


def test_msg_id_spec_example():
    store = pack_host("127.0.0.1", 9103)
    mid = create_message_id(store, 123456)
    assert mid == "7F0000010000238F000000000001E240"
    assert decode_message_id(mid) == ("127.0.0.1", 9103, 123456)
    # Java's string2bytes upper-cases first: lowercase input is the same id
    assert decode_message_id(mid.lower()) == ("127.0.0.1", 9103, 123456)


def test_msg_id_ipv6():
    store = pack_host("2001:db8::1", 10911)
    mid = create_message_id(store, 2**40 + 5)
    assert len(mid) == 56
    assert mid == ("20010DB8000000000000000000000001" + "00002A9F" + "0000010000000005")
    assert decode_message_id(mid) == ("2001:db8::1", 10911, 2**40 + 5)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "7F",
        "7F0000010000238F000000000001E24",  # 31
        "7F0000010000238F000000000001E2400",  # 33
        "ZZ0000010000238F000000000001E240",  # not hex
        "7F000001 0000238F000000000001E24",  # whitespace, 32 chars
        "7F0000010000238F000000000001E240".ljust(56),  # 56 chars but only 16 bytes of hex
        " 7F 00 00 01 00 00 23 8F 00 00 00 00 00 01 E2 40 ".ljust(56),
        "é" * 32,
        "\u0663" * 32,  # non-ASCII digits
        "7F0000010000238F000000000001E240" + "0" * 24 + "00",  # 58
    ],
)
def test_msg_id_decode_errors(bad: str):
    with pytest.raises(ProtocolError):
        decode_message_id(bad)


@settings(deadline=None, max_examples=150)
@given(ip=st.one_of(st.binary(min_size=4, max_size=4), st.binary(min_size=16, max_size=16)), port=INT32, offset=INT64)
def test_msg_id_round_trip(ip: bytes, port: int, offset: int):
    store = host_bytes(ip, port)
    mid = create_message_id(store, offset)
    assert len(mid) == (32 if len(ip) == 4 else 56)
    assert mid == mid.upper() and mid == (store + struct.pack(">q", offset)).hex().upper()
    got_ip, got_port, got_off = decode_message_id(mid)
    assert pack_host(got_ip, got_port)[-4:] == struct.pack(">i", port)
    assert (got_port, got_off) == (port, offset)
    if len(ip) == 4:
        assert got_ip == ".".join(str(b) for b in ip)


# ---------------------------------------------------------------------------
# Java String.hashCode (tag codes)
# ---------------------------------------------------------------------------
JAVA_GOLDEN = [
    ("", 0),
    ("a", 97),
    ("TagA", 2598919),
    ("TopicTest#ABC", 85086976),
    ("héllo wörld", 1628148953),
    ("日本語テキスト", -304642003),
    ("\U0001f600emoji", -1233692477),
    ("%RETRY%group_1", -649322193),
    ("averyveryveryveryveryveryveryveryveryveryveryveryverylongtopicname#7F0000010000238F000000000001E240", 1317859341),
]


@pytest.mark.parametrize("s,expected", JAVA_GOLDEN)
def test_java_hash_golden_values_from_real_java(s: str, expected: int):
    assert java_hash(s) == expected
    assert ref_java_hash(s) == expected


def test_tags_code():
    assert tags_string_to_tags_code(None) == 0
    assert tags_string_to_tags_code("") == 0
    assert tags_string_to_tags_code("TagA") == 2598919
    assert [tags_string_to_tags_code(f"Tag{i}") for i in range(3)] == [2598902, 2598903, 2598904]


@pytest.mark.parametrize(
    "s",
    [
        "a" * 4095,
        "a" * 4096,
        "a" * 4097,
        "z" * 10000,
        "\U0001f600" * 2047,
        "\U0001f600" * 2048,
        "\U0001f600" * 2049,  # 4094 / 4096 / 4098 units
        "é" * 4096,
        "é" * 4097,
        ("x\U0001f600é日" * 1500),
    ],
)
def test_java_hash_long_strings(s: str):
    assert java_hash(s) == ref_java_hash(s)


_ANY_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=60)


@settings(deadline=None, max_examples=300)
@given(
    s=st.one_of(
        _ANY_TEXT,
        st.text(alphabet=st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF), max_size=20),
        st.builds(
            lambda part, n: part * n,
            st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=8),
            st.integers(500, 3000),
        ),
    )
)
def test_java_hash_matches_reference(s: str):
    h = java_hash(s)
    assert -(2**31) <= h < 2**31
    assert h == ref_java_hash(s)


# ---------------------------------------------------------------------------
# properties (spec 3.4)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "s,expected",
    [
        (None, {}),
        ("", {}),
        ("k\x01", {}),
        ("\x01v", {}),
        ("aaa", {}),
        ("k\x01\x02", {}),
        ("\x01v\x02", {}),
        ("aaa\x02", {}),
        ("\x02\x02\x02", {}),
        ("a\x01b", {"a": "b"}),  # 3 chars, no final separator
        ("a\x01b\x02", {"a": "b"}),
        ("a\x01b\x02c\x01d", {"a": "b", "c": "d"}),  # missing final separator
        ("a\x01b\x02\x02\x02c\x01d\x02", {"a": "b", "c": "d"}),  # empty segments
        ("k\x01\x02a\x01b\x02\x01v\x02zz\x02", {"a": "b"}),  # bad segments skipped
        ("a\x011\x02b\x012\x02a\x013\x02", {"a": "3", "b": "2"}),  # duplicate: last wins
        ("a\x01b\x01c\x02", {"a": "b\x01c"}),  # value keeps later \x01
        ("k\x01\x01\x02", {"k": "\x01"}),
        ("\x01\x01v\x02", {}),
        ("名前\x01値ü\x02😀\x01✓", {"名前": "値ü", "😀": "✓"}),  # non-ASCII
    ],
)
def test_string_to_properties_edge_cases(s, expected):
    assert string_to_properties(s) == expected
    if s is not None:
        assert decode_properties(s.encode("utf-8")) == expected
        assert decode_properties(memoryview(s.encode("utf-8"))) == expected


def test_properties_to_string():
    assert properties_to_string({}) == ""
    assert properties_to_string({"a": "1", "skip": None, "b": "2"}) == "a\x011\x02b\x012\x02"
    assert NAME_VALUE_SEPARATOR == "\x01" and PROPERTY_SEPARATOR == "\x02"


def test_decode_properties_rejects_invalid_utf8():
    for raw in (b"\xff", b"a\x01\xc3", b"\xed\xa0\x80\x01v"):
        with pytest.raises(ProtocolError):
            decode_properties(raw)


_PROP_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"), min_size=1, max_size=20)


@settings(deadline=None, max_examples=200)
@given(props=st.dictionaries(_PROP_TEXT, _PROP_TEXT, max_size=12))
def test_properties_round_trip(props: dict[str, str]):
    s = properties_to_string(props)
    assert s.count("\x02") == len(props) and (s == "" or s.endswith("\x02"))
    assert string_to_properties(s) == props
    assert decode_properties(s.encode("utf-8")) == props
    # without the trailing separator (as the real 4.9.8 store has it) too
    assert string_to_properties(s[:-1]) == props


# ---------------------------------------------------------------------------
# UniqueIdGenerator (spec 3.6)
# ---------------------------------------------------------------------------
def test_unique_id_layout_and_prefix():
    gen = UniqueIdGenerator(ip=b"\x7f\x00\x00\x01", pid=0x2B4A, seed=0x1CF68AC4)
    now = int(time.time() * 1000)
    ids = [gen.next_id(now) for _ in range(5)]
    for i, uid in enumerate(ids):
        assert len(uid) == 32 and uid == uid.upper()
        bytes.fromhex(uid)
        assert uid[:20] == "7F0000012B4A1CF68AC4"  # ip + pid + seed: stable
        assert int(uid[28:], 16) == i  # counter
        assert int(uid[20:28], 16) == now - local_month_start_ms(now)


def test_unique_id_reproduces_a_real_cpp_client_id():
    # UNIQ_KEY of message 0 in the RocketMQ 4.9.8 fixture store:
    # 7F000001 (ip) 2B4A (pid) 1CF68AC4 (seed) 6CB1C447 (ms since month start) 0000 (counter)
    gen = UniqueIdGenerator(ip=b"\x7f\x00\x00\x01", pid=0x2B4A, seed=0x1CF68AC4)
    now = local_month_start_ms(int(time.time() * 1000)) + 0x6CB1C447
    assert gen.next_id(now) == "7F0000012B4A1CF68AC46CB1C4470000"


def test_unique_id_pid_and_seed_truncation():
    gen = UniqueIdGenerator(ip=b"\x0a\x00\x00\x02", pid=0x12345, seed=-1)
    assert gen.next_id()[:20] == "0A000002" + "2345" + "FFFFFFFF"
    gen = UniqueIdGenerator(ip=b"\x0a\x00\x00\x02", pid=0xFFFF, seed=-(2**31))
    assert gen.next_id()[:20] == "0A000002" + "FFFF" + "80000000"


def test_unique_id_ipv6_is_56_chars():
    gen = UniqueIdGenerator(ip=V6_A, pid=1, seed=2)
    uid = gen.next_id()
    assert len(uid) == 56 and uid.startswith("20010DB8" + "0" * 22 + "01" + "0001" + "00000002")


def test_unique_id_rejects_bad_ip():
    with pytest.raises(ValueError):
        UniqueIdGenerator(ip=b"\x01\x02\x03")


def test_unique_id_counter_wraps_at_65536():
    gen = UniqueIdGenerator(pid=1, seed=1)
    now = int(time.time() * 1000)
    counters = [int(gen.next_id(now)[28:], 16) for _ in range(65536 + 3)]
    assert counters[:3] == [0, 1, 2]
    assert counters[65535] == 65535
    assert counters[65536:] == [0, 1, 2]


@pytest.mark.parametrize("day,hour", [(1, 0), (1, 12), (15, 8), (24, 23), (25, 1), (28, 23), (31, 23)])
def test_unique_id_time_part_is_ms_since_local_month_start(day: int, hour: int):
    # Late in a month the difference exceeds 2**31 ms; Java writes (int) diff, i.e.
    # its low 32 bits, so all 32 bits must be present.
    dt = datetime(2025, 1, day, hour, 17, 3, 456000)
    now = int(dt.timestamp() * 1000)
    gen = UniqueIdGenerator(pid=1, seed=1)
    uid = gen.next_id(now)
    assert int(uid[20:28], 16) == (now - local_month_start_ms(now)) & 0xFFFFFFFF


def test_unique_id_month_rollover_resets_time_part():
    gen = UniqueIdGenerator(pid=1, seed=1)
    feb1 = int(datetime(2025, 2, 1).timestamp() * 1000)
    late_jan = gen.next_id(feb1 - 1)
    assert int(late_jan[20:28], 16) == feb1 - 1 - int(datetime(2025, 1, 1).timestamp() * 1000)
    assert int(gen.next_id(feb1)[20:28], 16) == 0
    assert int(gen.next_id(feb1 + 1234)[20:28], 16) == 1234
    # going back in time (earlier month) recomputes the start too
    assert int(gen.next_id(feb1 - 10)[20:28], 16) == int(late_jan[20:28], 16) - 9


def test_unique_ids_are_unique():
    gen = UniqueIdGenerator()
    ids = [gen.next_id() for _ in range(30000)]
    assert len(set(ids)) == len(ids)
    # fixed clock: the 16-bit counter alone separates 65536 ids
    now = int(time.time() * 1000)
    gen2 = UniqueIdGenerator()
    fixed = {gen2.next_id(now) for _ in range(65536)}
    assert len(fixed) == 65536


# ---------------------------------------------------------------------------
# hypothesis round trips
# ---------------------------------------------------------------------------
_HOST = st.builds(host_bytes, st.one_of(st.binary(min_size=4, max_size=4), st.binary(min_size=16, max_size=16)), INT32)
_TOPIC = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=40).map(lambda s: s.encode("utf-8")),
    st.sampled_from([b"T" * 127, "é".encode() * 63 + b"x", b"TopicTest", b""]),
).filter(lambda b: len(b) <= 127)
_BODY = st.one_of(
    st.binary(max_size=300),
    st.builds(
        lambda n, pat: (pat * (n // len(pat) + 1))[:n], st.integers(4096, 300_000), st.binary(min_size=1, max_size=16)
    ),
)
_PROPS = st.dictionaries(_PROP_TEXT, _PROP_TEXT, max_size=8)


@st.composite
def records(draw, compressed_ok: bool = True):
    born = draw(_HOST)
    store = draw(_HOST)
    sys_flag = (draw(INT32) & ~0x30) | host_sysflag(born, store)
    if not compressed_ok:
        sys_flag &= ~SysFlag.COMPRESSED
    props = draw(_PROPS)
    fields = dict(
        topic=draw(_TOPIC),
        body=draw(_BODY),
        properties=properties_to_string(props).encode("utf-8"),
        queue_id=draw(INT32),
        flag=draw(INT32),
        queue_offset=draw(INT64),
        physical_offset=draw(INT64),
        sys_flag=sys_flag,
        born_timestamp=draw(INT64),
        born_host=born,
        store_timestamp=draw(INT64),
        store_host=store,
        reconsume_times=draw(INT32),
        prepared_transaction_offset=draw(INT64),
    )
    return fields, props


def _check_decoded(m, f, props):
    assert m.store_size == record_length(f["sys_flag"], len(f["body"]), len(f["topic"]), len(f["properties"]))
    assert m.magic == MESSAGE_MAGIC_CODE
    assert m.body_crc == zlib.crc32(f["body"]) & 0x7FFFFFFF
    assert m.queue_id == f["queue_id"] and m.flag == f["flag"]
    assert m.queue_offset == f["queue_offset"] and m.commit_log_offset == f["physical_offset"]
    assert m.sys_flag == f["sys_flag"] and m.born_timestamp == f["born_timestamp"]
    assert m.born_host == f["born_host"] and m.store_host == f["store_host"]
    assert m.store_timestamp == f["store_timestamp"]
    assert m.reconsume_times == f["reconsume_times"]
    assert m.prepared_transaction_offset == f["prepared_transaction_offset"]
    assert m.body == f["body"] and m.topic == f["topic"].decode("utf-8")
    assert m.properties == props
    assert m.msg_id == create_message_id(f["store_host"], f["physical_offset"])


@settings(deadline=None, max_examples=120, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rec=records(), prefix=st.binary(max_size=12))
def test_record_round_trip(rec, prefix: bytes):
    f, props = rec
    raw = encode_record(**f)
    assert len(raw) == record_length(f["sys_flag"], len(f["body"]), len(f["topic"]), len(f["properties"]))
    assert raw == manual_record(**f)
    _check_decoded(decode_record(raw, check_crc=True), f, props)
    # at an offset inside a larger buffer, in every buffer type
    buf = prefix + raw + b"\x00" * 3
    for b in (buf, bytearray(buf), memoryview(buf)):
        _check_decoded(decode_record(b, len(prefix), check_crc=True), f, props)
    head = read_record_head(buf, len(prefix))
    assert head.total_size == len(raw) and head.body_len == len(f["body"])
    assert head.physical_offset == f["physical_offset"] and head.sys_flag == f["sys_flag"]
    assert head.store_timestamp == f["store_timestamp"]
    # truncated by one byte: ProtocolError
    with pytest.raises(ProtocolError):
        decode_record(raw[:-1])


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    recs=st.lists(records(compressed_ok=False), min_size=1, max_size=5),
    tail=st.sampled_from([b"", b"\x00" * 7, encode_blank(64) + bytes(56), b"\x00" * 30]),
)
def test_decode_records_concatenated(recs, tail: bytes):
    raws = [encode_record(**f) for f, _ in recs]
    buf = b"".join(raws) + tail
    for decompress in (False, True):
        got = decode_records(buf, decompress=decompress)
        assert len(got) == len(recs)
        for m, (f, props) in zip(got, recs, strict=True):
            _check_decoded(m, f, props)
    assert len(decode_records(memoryview(buf))) == len(recs)
    # a damaged record ends the batch: everything before it is still returned
    if len(raws) > 1:
        cut = b"".join(raws[:-1]) + raws[-1][:-1]
        assert len(decode_records(cut, decompress=False)) == len(raws) - 1


def test_decode_records_empty_and_blank():
    assert decode_records(b"") == []
    assert decode_records(encode_blank(8)) == []


_BATCH_ITEM = st.builds(
    BatchItem,
    INT32,
    st.binary(max_size=200),
    st.one_of(_PROPS.map(properties_to_string), st.text(alphabet=st.characters(codec="utf-8"), max_size=30)),
)


def test_batch_golden_bytes():
    got = encode_batch([(5, b"abc", "a\x01b\x02"), BatchItem(-1, b"", "")])
    first = struct.pack(">iiiii", 20 + 3 + 2 + 4, 0, 0, 5, 3) + b"abc" + struct.pack(">h", 4) + b"a\x01b\x02"
    second = struct.pack(">iiiii", 22, 0, 0, -1, 0) + struct.pack(">h", 0)
    assert got == first + second
    assert decode_batch(got) == [BatchItem(5, b"abc", "a\x01b\x02"), BatchItem(-1, b"", "")]
    assert decode_batch(b"") == []
    with pytest.raises(ProtocolError):
        encode_batch([(0, b"", "p" * 32768)])


@settings(deadline=None, max_examples=150)
@given(items=st.lists(_BATCH_ITEM, max_size=8))
def test_batch_round_trip(items):
    raw = encode_batch(items)
    assert len(raw) == sum(22 + len(i.body) + len(i.properties.encode("utf-8")) for i in items)
    assert decode_batch(raw) == items
    assert decode_batch(memoryview(raw)) == items


# ---------------------------------------------------------------------------
# fuzz: only ProtocolError, ever
# ---------------------------------------------------------------------------
def _only_protocol_errors(fn, *args, **kwargs):
    """Call fn; success and ProtocolError are fine, anything else fails the test."""
    try:
        return fn(*args, **kwargs)
    except ProtocolError:
        return None


def _all_record_decoders(buf):
    _only_protocol_errors(decode_record, buf, check_crc=True)
    _only_protocol_errors(decode_record, buf, check_crc=True, decompress=True)
    _only_protocol_errors(read_record_head, buf)
    res = _only_protocol_errors(decode_records, buf)
    assert isinstance(res, list)  # decode_records itself never raises
    _only_protocol_errors(decode_batch, buf)
    _only_protocol_errors(decode_properties, buf)


@settings(deadline=None, max_examples=300)
@given(data=st.binary(max_size=400))
def test_fuzz_random_bytes(data: bytes):
    _all_record_decoders(data)
    # the same bytes behind a valid magic code get past the magic check
    if len(data) >= 8:
        _all_record_decoders(data[:4] + MAGIC_V1_BYTES + data[8:])
        _all_record_decoders(data[:4] + MAGIC_V2_BYTES + data[8:])


_INTERESTING_INTS = [
    0,
    1,
    2,
    7,
    8,
    21,
    22,
    88,
    127,
    128,
    255,
    256,
    0x7FFF,
    0x8000,
    0xFFFF,
    2**31 - 1,
    -1,
    -2,
    -(2**31),
    -88,
]


@st.composite
def mutations(draw, size: int):
    """A list of (kind, args) edits applied in order to a buffer of about `size` bytes."""
    ops = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "extend", "int32", "int16", "byte"]))
        pos = draw(st.integers(0, max(size + 8, 1)))
        if kind == "flip":
            ops.append((kind, pos, draw(st.integers(1, 255))))
        elif kind == "truncate":
            ops.append((kind, pos, None))
        elif kind == "extend":
            ops.append((kind, pos, draw(st.binary(min_size=1, max_size=40))))
        else:
            val = draw(st.one_of(st.sampled_from(_INTERESTING_INTS), st.integers(-300, 300)))
            # aim length fields most of the time
            if draw(st.booleans()):
                pos = draw(st.sampled_from([0, 84, 96, 108, 16, 20, 36, 4]))
            ops.append((kind, pos, val))
    return ops


def _apply(buf: bytes, ops) -> bytes:
    b = bytearray(buf)
    for kind, pos, arg in ops:
        if kind == "flip":
            if b:
                b[pos % len(b)] ^= arg
        elif kind == "truncate":
            del b[pos:]
        elif kind == "extend":
            b[pos:pos] = arg
        elif kind == "int32":
            if pos + 4 <= len(b):
                b[pos : pos + 4] = (arg & 0xFFFFFFFF).to_bytes(4, "big")
        elif kind == "int16":
            if pos + 2 <= len(b):
                b[pos : pos + 2] = (arg & 0xFFFF).to_bytes(2, "big")
        elif kind == "byte":
            if pos < len(b):
                b[pos] = arg & 0xFF
    return bytes(b)


def _small_record(draw_fields):
    f, _ = draw_fields
    f = dict(f)
    f["body"] = f["body"][:500]
    return encode_record(**f)


def _tail_field_positions(raw: bytes) -> list[int]:
    """Positions of topic-length byte and properties-length short in a v1 record."""
    sys_flag = struct.unpack_from(">i", raw, 36)[0]
    hb = 20 if sys_flag & 0x10 else 8
    hs = 20 if sys_flag & 0x20 else 8
    bl_pos = 48 + hb + 8 + hs + 4 + 8
    body_len = struct.unpack_from(">i", raw, bl_pos)[0]
    tpos = bl_pos + 4 + body_len
    return [bl_pos, tpos, tpos + 1 + raw[tpos]]


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), rec=records())
def test_fuzz_mutated_records(data, rec):
    raw = _small_record(rec)
    bl_pos, tpos, ppos = _tail_field_positions(raw)
    ops = data.draw(mutations(len(raw)))
    # also target this record's own variable-length fields
    target = data.draw(st.sampled_from([None, ("int32", bl_pos), ("byte", tpos), ("int16", ppos)]))
    if target is not None:
        ops.append((target[0], target[1], data.draw(st.sampled_from(_INTERESTING_INTS))))
    mutated = _apply(raw, ops)
    _all_record_decoders(mutated)
    # inside a PULL body: several records, one of them mutated
    _all_record_decoders(raw + mutated + raw)


@settings(deadline=None, max_examples=200)
@given(data=st.data(), items=st.lists(_BATCH_ITEM, min_size=1, max_size=4))
def test_fuzz_mutated_batches(data, items):
    raw = encode_batch(items)
    ops = data.draw(mutations(len(raw)))
    # length fields of the first item: size@0, bodylen@16, proplen after the body
    ops.append(
        (
            data.draw(st.sampled_from(["int32", "int32", "int16"])),
            data.draw(st.sampled_from([0, 16, 20 + len(items[0].body)])),
            data.draw(st.sampled_from(_INTERESTING_INTS)),
        )
    )
    mutated = _apply(raw, ops)
    _only_protocol_errors(decode_batch, mutated)
    _only_protocol_errors(decode_batch, memoryview(mutated))


@settings(deadline=None, max_examples=300)
@given(
    s=st.one_of(
        st.text(max_size=70),
        st.text(alphabet="0123456789ABCDEFabcdef \t\n\x0b\x0c\r", min_size=30, max_size=58),
        st.text(alphabet="0123456789ABCDEF", min_size=32, max_size=32),
        st.text(alphabet="0123456789ABCDEF", min_size=56, max_size=56),
    )
)
def test_fuzz_decode_message_id(s: str):
    res = _only_protocol_errors(decode_message_id, s)
    if res is not None:
        assert len(s) in (32, 56)
        ip, port, off = res
        # whatever decodes re-encodes to the same id
        raw = ipaddress.ip_address(ip).packed + struct.pack(">i", port) + struct.pack(">q", off)
        assert len(raw) * 2 == len(s)
        assert raw.hex().upper() == s.upper()


@settings(deadline=None, max_examples=300)
@given(raw=st.binary(max_size=200))
def test_fuzz_decode_properties(raw: bytes):
    res = _only_protocol_errors(decode_properties, raw)
    if res is not None:
        for k, v in res.items():
            assert k and v and "\x02" not in k + v and "\x01" not in k


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), rec=records())
def test_flipped_body_byte_fails_crc(data, rec):
    f, _ = rec
    f = dict(f)
    f["body"] = f["body"][:4096]
    assume(f["body"])
    raw = bytearray(encode_record(**f))
    bl_pos, _, _ = _tail_field_positions(bytes(raw))
    i = data.draw(st.integers(0, len(f["body"]) - 1))
    raw[bl_pos + 4 + i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(ProtocolError):
        decode_record(bytes(raw), check_crc=True)
    # without the check the record still parses (the CRC is not structural)
    assert decode_record(bytes(raw)).body != f["body"]
