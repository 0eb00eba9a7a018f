"""Remoting frame codec (rmq.protocol.frame): spec section 1, golden bytes, round trips."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq.protocol.codes import LanguageCode, RemotingFlag, RequestCode, ResponseCode, SerializeType
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import (
    MAX_FRAME_LENGTH,
    FrameDecoder,
    RemotingCommand,
    decode_frame,
    encode,
    encode_header_only,
    encode_parts,
)
from rmq.protocol.headers import SendMessageRequestHeader, SendMessageResponseHeader

JSON = SerializeType.JSON
BIN = SerializeType.ROCKETMQ


def unhex(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


def feed_all(data: bytes, decoder: FrameDecoder | None = None) -> list[RemotingCommand]:
    return (decoder or FrameDecoder()).feed(data)


def route_request() -> RemotingCommand:
    return RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, version=479, opaque=1, ext_fields={"topic": "TopicTest"})


# --------------------------------------------------------------------------- spec 1.1 / 1.4
SPEC_JSON_HEADER = (
    b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA",'
    b'"opaque":1,"serializeTypeCurrentRPC":"JSON","version":479}'
)
SPEC_BINARY_FRAME = unhex(
    "0000002d 01000029 0069 00 01df 00000001 00000000 00000000 00000014 0005 746f706963 00000009 546f70696354657374"
)


def test_spec_json_worked_example_byte_for_byte():
    frame = encode(route_request())
    assert len(SPEC_JSON_HEADER) == 131
    assert frame == unhex("00000087 00000083") + SPEC_JSON_HEADER
    assert len(frame) == 139


def test_spec_rocketmq_worked_example_byte_for_byte():
    frame = encode(route_request(), BIN)
    assert frame == SPEC_BINARY_FRAME
    assert len(frame) == 49
    # the command's own serialize type is used when none is given
    cmd = route_request()
    cmd.serialize_type = BIN
    assert encode(cmd) == SPEC_BINARY_FRAME


@pytest.mark.parametrize("frame, st", [(unhex("00000087 00000083") + SPEC_JSON_HEADER, JSON), (SPEC_BINARY_FRAME, BIN)])
def test_spec_worked_examples_decode(frame, st):
    [cmd] = feed_all(frame)
    assert cmd == RemotingCommand(105, LanguageCode.JAVA, 479, 1, 0, None, {"topic": "TopicTest"}, None, st)
    assert decode_frame(frame) == cmd


@pytest.mark.parametrize(
    "remark, ext, header_size", [(None, None, 21), ("Sample Remark", None, 34), (None, {"key": "value"}, 35)]
)
def test_spec_binary_header_sizes(remark, ext, header_size):
    # RocketMQSerializableTest's sizes (spec 1.4)
    frame = encode(RemotingCommand(10, remark=remark, ext_fields=ext), BIN)
    (word,) = struct.unpack_from(">I", frame, 4)
    assert word >> 24 == BIN
    assert word & 0xFFFFFF == header_size
    assert len(frame) == 8 + header_size


# --------------------------------------------------------------------------- captures
# Bytes captured from real peers (published as test vectors by the NewLife.RocketMQ .NET
# client's test-suite): a 4.8.0 broker's SEND_MESSAGE response in ROCKETMQ form ...
BROKER_480_BINARY_SEND_RESPONSE = unhex("""
    00 00 00 99 01 00 00 95 00 00 00 01 75 00 00 06 28 00 00 00 01 00 00 00 00 00 00 00 80 00 07 71
    75 65 75 65 49 64 00 00 00 01 36 00 08 54 52 41 43 45 5f 4f 4e 00 00 00 04 74 72 75 65 00 0a 4d
    53 47 5f 52 45 47 49 4f 4e 00 00 00 0d 44 65 66 61 75 6c 74 52 65 67 69 6f 6e 00 05 6d 73 67 49
    64 00 00 00 20 30 41 30 39 30 46 32 38 30 30 30 30 32 41 39 46 30 30 30 30 32 32 39 45 38 39 37
    43 46 33 38 32 00 0b 71 75 65 75 65 4f 66 66 73 65 74 00 00 00 07 36 33 37 39 38 38 31""")
BROKER_480_BINARY_EMPTY_RESPONSE = unhex(
    "00 00 00 19 01 00 00 15 00 00 00 01 75 00 00 06 27 00 00 00 01 00 00 00 00 00 00 00 00"
)
# ... a 5.2 Java client's SEND_MESSAGE_V2 header (JSON) ...
JAVA_520_SEND_V2_HEADER = (
    '{"code":310,"extFields":{"a":"R01_producer_123","b":"TeZ_Test_Lng","c":"TBW102","d":"4",'
    '"e":"0","f":"0","g":"1749883778686","h":"0","i":"UNIQ_KEY\\u00012400DD02100800152B2B7D0419D6'
    'DD5E9EFC18B4AAC246212A7D0000\\u0002WAIT\\u0001true\\u0002TAGS\\u0001*\\u0002","j":"0",'
    '"k":"false","m":"false","n":"broker-a"},"flag":0,"language":"JAVA","opaque":2,'
    '"serializeTypeCurrentRPC":"JSON","version":453}'
)
# ... a 5.2 broker's SEND_MESSAGE response (JSON; 5.x sizes the ext map for 256 entries) ...
BROKER_520_JSON_SEND_RESPONSE_HEADER = (
    '{"code":0,"extFields":{"queueId":"0","transactionId":"2400DD02100800152B2B7D0419D6DD5E9EFC18'
    'B4AAC246212A7D0000","msgId":"0A02037500002A9F0000000001EC18FC","TRACE_ON":"true",'
    '"MSG_REGION":"DefaultRegion","queueOffset":"0"},"flag":1,"language":"JAVA","opaque":2,'
    '"serializeTypeCurrentRPC":"JSON","version":453}'
)
# ... and the .NET client's SEND_MESSAGE_V2: no "flag", remark last, "k":"False".
DOTNET_SEND_V2 = unhex("""
    00 00 01 31 00 00 01 1a 7b 22 63 6f 64 65 22 3a 33 31 30 2c 22 65 78 74 46 69 65 6c 64 73 22 3a
    7b 22 61 22 3a 22 52 30 31 5f 70 72 6f 64 75 63 65 72 5f 31 32 33 22 2c 22 62 22 3a 22 54 65 5a
    5f 54 65 73 74 5f 4c 6e 67 22 2c 22 63 22 3a 22 54 42 57 31 30 32 22 2c 22 64 22 3a 22 34 22 2c
    22 65 22 3a 22 30 22 2c 22 66 22 3a 22 30 22 2c 22 67 22 3a 22 31 37 34 39 38 32 36 35 32 39 37
    31 36 22 2c 22 68 22 3a 22 30 22 2c 22 69 22 3a 22 54 41 47 53 01 2a 02 57 41 49 54 01 54 72 75
    65 02 22 2c 22 6a 22 3a 22 30 22 2c 22 6b 22 3a 22 46 61 6c 73 65 22 7d 2c 22 6c 61 6e 67 75 61
    67 65 22 3a 22 44 4f 54 4e 45 54 22 2c 22 6f 70 61 71 75 65 22 3a 31 2c 22 73 65 72 69 61 6c 69
    7a 65 54 79 70 65 43 75 72 72 65 6e 74 52 50 43 22 3a 22 4a 53 4f 4e 22 2c 22 76 65 72 73 69 6f
    6e 22 3a 33 37 33 2c 22 72 65 6d 61 72 6b 22 3a 22 53 45 4e 44 5f 4d 45 53 53 41 47 45 5f 56 32
    22 7d 32 30 32 35 2d 30 36 2d 31 33 20 32 32 3a 35 34 3a 31 32""")


def json_frame(header: str | bytes, body: bytes = b"", st: int = JSON) -> bytes:
    raw = header.encode() if isinstance(header, str) else header
    return struct.pack(">iI", 4 + len(raw) + len(body), (st << 24) | len(raw)) + raw + body


def test_capture_4x_broker_binary_response_decodes_and_reencodes_identically():
    [cmd] = feed_all(BROKER_480_BINARY_SEND_RESPONSE)
    assert cmd.serialize_type == BIN and cmd.is_response and cmd.code == ResponseCode.SUCCESS
    assert (cmd.language, cmd.version, cmd.opaque) == (0, 373, 1576)
    assert cmd.remark is None and cmd.body is None
    assert cmd.ext_fields == {
        "queueId": "6",
        "TRACE_ON": "true",
        "MSG_REGION": "DefaultRegion",
        "msgId": "0A090F2800002A9F0000229E897CF382",
        "queueOffset": "6379881",
    }
    assert encode(cmd) == BROKER_480_BINARY_SEND_RESPONSE
    # Built the way a broker builds it (header fields, then MSG_REGION/TRACE_ON), the
    # ext map still comes out in Java HashMap order, byte for byte.
    ext = SendMessageResponseHeader("0A090F2800002A9F0000229E897CF382", 6, 6379881).to_ext_fields()
    ext["MSG_REGION"] = "DefaultRegion"
    ext["TRACE_ON"] = "true"
    rebuilt = RemotingCommand(0, 0, 373, 1576, RemotingFlag.RESPONSE, None, ext, None, BIN)
    assert encode(rebuilt) == BROKER_480_BINARY_SEND_RESPONSE
    # Same map as JSON: 4.x fastjson walks the same HashMap.
    assert encode(rebuilt, JSON)[8:] == (
        b'{"code":0,"extFields":{"queueId":"6","TRACE_ON":"true","MSG_REGION":"DefaultRegion",'
        b'"msgId":"0A090F2800002A9F0000229E897CF382","queueOffset":"6379881"},"flag":1,'
        b'"language":"JAVA","opaque":1576,"serializeTypeCurrentRPC":"JSON","version":373}'
    )


def test_capture_minimal_binary_response():
    [cmd] = feed_all(BROKER_480_BINARY_EMPTY_RESPONSE)
    assert cmd == RemotingCommand(0, 0, 373, 1575, 1, None, None, None, BIN)
    assert encode(cmd) == BROKER_480_BINARY_EMPTY_RESPONSE


def test_capture_java_client_send_v2_header_json_golden():
    body = b"[1.0,15.0]"
    [cmd] = feed_all(json_frame(JAVA_520_SEND_V2_HEADER, body))
    assert cmd.code == RequestCode.SEND_MESSAGE_V2 and cmd.version == 453 and cmd.opaque == 2
    assert cmd.ext_fields["i"] == (
        "UNIQ_KEY\x012400DD02100800152B2B7D0419D6DD5E9EFC18B4AAC246212A7D0000\x02WAIT\x01true\x02TAGS\x01*\x02"
    )
    assert cmd.body == body
    # Re-encoding reproduces the Java client's header exactly (\u0001 escapes included).
    assert encode(cmd) == json_frame(JAVA_520_SEND_V2_HEADER, body)
    v1 = SendMessageRequestHeader.from_v2_ext_fields(cmd.ext_fields)
    assert (v1.producer_group, v1.topic, v1.queue_id, v1.born_timestamp, v1.broker_name) == (
        "R01_producer_123",
        "TeZ_Test_Lng",
        0,
        1749883778686,
        "broker-a",
    )
    # and our client-side V2 encoding of that header is the same text
    again = RemotingCommand(310, version=453, opaque=2, ext_fields=v1.to_v2_ext_fields(), body=body)
    assert encode(again) == json_frame(JAVA_520_SEND_V2_HEADER, body)


def test_capture_5x_broker_json_response_decodes():
    [cmd] = feed_all(json_frame(BROKER_520_JSON_SEND_RESPONSE_HEADER))
    header = SendMessageResponseHeader.from_ext_fields(cmd.ext_fields)
    assert header.msg_id == "0A02037500002A9F0000000001EC18FC"
    assert header.queue_offset == 0 and cmd.ext_fields["MSG_REGION"] == "DefaultRegion"


def test_capture_dotnet_client_send_v2():
    [cmd] = feed_all(DOTNET_SEND_V2)
    assert cmd.flag == 0 and not cmd.is_response  # "flag" absent
    assert cmd.language == LanguageCode.DOTNET and cmd.version == 373
    assert cmd.remark == "SEND_MESSAGE_V2"
    assert cmd.body == b"2025-06-13 22:54:12"
    v1 = SendMessageRequestHeader.from_v2_ext_fields(cmd.ext_fields)
    assert v1.unit_mode is False  # "False": parseBoolean
    assert v1.properties == "TAGS\x01*\x02WAIT\x01True\x02"


# --------------------------------------------------------------------------- JSON form
def test_json_property_order_and_null_omission():
    cmd = RemotingCommand(17, LanguageCode.PYTHON, 409, 7, RemotingFlag.ONEWAY, "why", {"k": "v"})
    text = encode(cmd)[8:].decode()
    assert text == (
        '{"code":17,"extFields":{"k":"v"},"flag":2,"language":"PYTHON","opaque":7,'
        '"remark":"why","serializeTypeCurrentRPC":"JSON","version":409}'
    )
    keys = list(json.loads(text))
    assert keys == sorted(keys)
    bare = encode(RemotingCommand(0))[8:].decode()
    assert bare == ('{"code":0,"flag":0,"language":"JAVA","opaque":0,"serializeTypeCurrentRPC":"JSON","version":409}')
    assert b'"extFields":{}' in encode(RemotingCommand(0, ext_fields={}))


def test_json_serialize_type_property_reflects_the_encoding_used():
    cmd = RemotingCommand(0, serialize_type=BIN)
    assert b'"serializeTypeCurrentRPC":"JSON"' in encode(cmd, JSON)


@pytest.mark.parametrize(
    "char, escaped",
    [
        ("\x00", "\\u0000"),
        ("\x01", "\\u0001"),
        ("\x02", "\\u0002"),
        ("\x07", "\\u0007"),
        ("\x08", "\\b"),
        ("\t", "\\t"),
        ("\n", "\\n"),
        ("\x0b", "\\u000B"),
        ("\x0c", "\\f"),
        ("\r", "\\r"),
        ("\x0e", "\\u000E"),
        ("\x1a", "\\u001A"),
        ("\x1f", "\\u001F"),
        ('"', '\\"'),
        ("\\", "\\\\"),
        ("/", "/"),
        ("\x7f", "\\u007F"),
        ("\x85", "\\u0085"),
        ("\x9f", "\\u009F"),
        ("\xa0", "\xa0"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
        ("é", "é"),
        ("中", "中"),
        ("\U0001f600", "\U0001f600"),
        ("<", "<"),
    ],
)
def test_json_string_escapes_like_fastjson(char, escaped):
    # fastjson 1.2.83 SerializeWriter with default features; non-ASCII is written raw
    for where in ("remark", "value", "key"):
        value = f"a{char}b"
        if where == "remark":
            cmd = RemotingCommand(1, remark=value)
            expected = f'"remark":"a{escaped}b"'
        elif where == "value":
            cmd = RemotingCommand(1, ext_fields={"topic": value, "queueId": "1"})
            expected = f'"topic":"a{escaped}b"'
        else:
            cmd = RemotingCommand(1, ext_fields={value: "x"})
            expected = f'"a{escaped}b":"x"'
        frame = encode(cmd)
        assert expected.encode() in frame
        assert feed_all(frame) == [cmd]


def test_json_properties_separators_are_unicode_escaped():
    header = SendMessageRequestHeader("g", "T", "TBW102", 4, 0, 0, 1, 0, "WAIT\x01true\x02")
    frame = encode(RemotingCommand(310, ext_fields=header.to_v2_ext_fields()))
    assert b'"i":"WAIT\\u0001true\\u0002"' in frame


def test_unencodable_string_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        encode(RemotingCommand(1, remark="lone \ud800 surrogate"))
    with pytest.raises(ProtocolError):
        encode(RemotingCommand(1, ext_fields={"k": "\udfff"}), BIN)


# --------------------------------------------------------------------------- binary form
def test_binary_empty_strings_decode_as_null():
    # Java reads a zero-length string as null: remark "" -> None, ext entries with an
    # empty value vanish (a null value is the same as no entry), {} -> None.
    cmd = RemotingCommand(10, remark="", ext_fields={"AccessKey": "", "topic": "T"}, serialize_type=BIN)
    [back] = feed_all(encode(cmd))
    assert back.remark is None and back.ext_fields == {"topic": "T"}
    [back] = feed_all(encode(RemotingCommand(10, ext_fields={}, serialize_type=BIN)))
    assert back.ext_fields is None


def test_binary_codes_must_fit_int16():
    with pytest.raises(ProtocolError, match="int16"):
        encode(RemotingCommand(RequestCode.POP_MESSAGE), BIN)
    # ... while JSON carries them fine
    [back] = feed_all(encode(RemotingCommand(RequestCode.POP_MESSAGE)))
    assert back.code == 200050


def test_binary_negative_codes_round_trip():
    cmd = RemotingCommand(ResponseCode.RPC_TIME_OUT, opaque=-5, flag=-1, serialize_type=BIN)
    assert feed_all(encode(cmd)) == [cmd]


def test_encode_rejects_unknown_serialize_type():
    with pytest.raises(ProtocolError, match="serialize type 7"):
        encode(RemotingCommand(1), 7)


# --------------------------------------------------------------------------- command helpers
def test_flags_and_create_response():
    req = RemotingCommand(10, opaque=42, serialize_type=BIN)
    assert not req.is_response and not req.is_oneway
    req.mark_oneway()
    assert req.is_oneway and req.flag == RemotingFlag.ONEWAY
    resp = req.create_response(ResponseCode.SYSTEM_BUSY, "busy", {"a": "1"}, b"x")
    assert resp.is_response and not resp.is_oneway
    assert (resp.opaque, resp.serialize_type, resp.code, resp.remark) == (42, BIN, 2, "busy")
    assert resp.ext_fields == {"a": "1"} and resp.body == b"x"
    # responses use the request's serialize type on the wire (spec 1.5)
    assert encode(resp)[4] == BIN
    [back] = feed_all(encode(resp))
    assert back.is_response and back.opaque == 42
    both = RemotingCommand(1, flag=RemotingFlag.RESPONSE | RemotingFlag.ONEWAY)
    assert both.is_response and both.is_oneway


# --------------------------------------------------------------------------- streaming
def sample_frames() -> list[tuple[RemotingCommand, bytes]]:
    cmds = [
        route_request(),
        RemotingCommand(
            310,
            opaque=9,
            ext_fields=SendMessageRequestHeader(
                "grp", "T", "TBW102", 4, 1, 0, 1700000000000, 0, "WAIT\x01true\x02"
            ).to_v2_ext_fields(),
            body=b"hello \x00 world" * 3,
        ),
        RemotingCommand(
            0,
            flag=1,
            opaque=9,
            remark="ok é",
            serialize_type=BIN,
            ext_fields={"msgId": "ABC", "queueId": "1"},
            body=b"\xff" * 70,
        ),
        RemotingCommand(34, opaque=10, body=b'{"clientID":"x"}'),
    ]
    return [(c, encode(c)) for c in cmds]


def test_several_frames_in_one_feed():
    frames = sample_frames()
    got = feed_all(b"".join(f for _, f in frames))
    assert got == [c for c, _ in frames]


def test_frame_split_at_every_byte_boundary_decodes_identically():
    for cmd, frame in sample_frames():
        for cut in range(len(frame) + 1):
            dec = FrameDecoder()
            first = dec.feed(frame[:cut])
            second = dec.feed(frame[cut:])
            assert first + second == [cmd], cut
            assert dec.buffered == 0


def test_byte_at_a_time_stream_of_many_frames():
    frames = sample_frames()
    stream = b"".join(f for _, f in frames) * 2
    dec = FrameDecoder()
    got = []
    for i in range(len(stream)):
        got += dec.feed(stream[i : i + 1])
    assert got == [c for c, _ in frames] * 2


def test_feed_accepts_bytearray_and_memoryview_and_does_not_keep_them():
    frames = sample_frames()
    stream = bytearray(b"".join(f for _, f in frames))
    dec = FrameDecoder()
    part = dec.feed(memoryview(stream)[:100]) + dec.feed(stream[100:])
    stream[:] = b"\x00" * len(stream)  # caller reuses its buffer
    assert part == [c for c, _ in frames]


@given(st.lists(st.integers(0, 10_000), max_size=8))
@settings(max_examples=60, deadline=None)
def test_random_chunking_decodes_identically(cuts):
    frames = sample_frames()
    stream = b"".join(f for _, f in frames)
    points = sorted({min(c, len(stream)) for c in cuts})
    dec = FrameDecoder()
    got, prev = [], 0
    for p in points + [len(stream)]:
        got += dec.feed(stream[prev:p])
        prev = p
    assert got == [c for c, _ in frames]


def test_empty_feed_is_harmless():
    dec = FrameDecoder()
    assert dec.feed(b"") == []
    assert dec.feed(b"\x00\x00") == [] and dec.buffered == 2


# --------------------------------------------------------------------------- bodies
def test_empty_body_decodes_as_none_and_none_body_adds_nothing():
    for body in (None, b""):
        frame = encode(RemotingCommand(1, body=body))
        assert feed_all(frame)[0].body is None
        assert struct.unpack_from(">i", frame)[0] == len(frame) - 4


def test_large_body_round_trip_and_parts():
    body = bytes(range(256)) * 4096  # 1 MiB
    cmd = RemotingCommand(0, flag=1, ext_fields={"nextBeginOffset": "5"}, body=body)
    prefix, part_body = encode_parts(cmd)
    assert part_body is body  # not copied
    assert prefix + body == encode(cmd)
    assert feed_all(prefix + body) == [cmd]
    # several store slices behind one header-only prefix
    slices = [memoryview(body)[:1000], memoryview(body)[1000:]]
    head = encode_header_only(cmd, sum(s.nbytes for s in slices))
    assert head == prefix
    assert feed_all(b"".join([head, *slices])) == [cmd]


def test_memoryview_body_is_encoded_without_copy():
    store = bytearray(b"R" * 500)
    cmd = RemotingCommand(0, flag=1, body=memoryview(store)[100:400], serialize_type=BIN)
    prefix, body = encode_parts(cmd)
    assert isinstance(body, memoryview) and body.nbytes == 300
    [back] = feed_all(encode(cmd))
    assert back.body == b"R" * 300


def test_encode_header_only_rejects_negative_length():
    with pytest.raises(ProtocolError):
        encode_header_only(RemotingCommand(0), -1)


def test_body_only_frame_with_zero_length_header_is_rejected_for_json():
    frame = struct.pack(">iI", 4 + 3, 0) + b"abc"
    with pytest.raises(ProtocolError, match="JSON"):
        feed_all(frame)


# --------------------------------------------------------------------------- third-party quirks
@pytest.mark.parametrize(
    "name, code",
    [
        ("JAVA", 0),
        ("CPP", 1),
        ("DOTNET", 2),
        ("PYTHON", 3),
        ("GO", 9),
        ("RUST", 12),
        ("NODE_JS", 13),
        ("OTHER", 7),
        ("BRAINFUCK", 7),
        ("java", 7),
    ],
)
def test_json_language_names(name, code):
    [cmd] = feed_all(json_frame(f'{{"code":10,"language":"{name}","opaque":0}}'))
    assert cmd.language == code


@pytest.mark.parametrize("value, code", [(1, 1), (13, 13), (99, 7), (-1, 7)])
def test_json_language_as_number(value, code):
    [cmd] = feed_all(json_frame(f'{{"code":10,"language":{value}}}'))
    assert cmd.language == code


def test_binary_unknown_language_maps_to_other():
    frame = bytearray(encode(RemotingCommand(10), BIN))
    frame[10] = 200
    assert feed_all(bytes(frame))[0].language == LanguageCode.OTHER


@pytest.mark.parametrize("version", [63, 121, 333, 409, 0])
@pytest.mark.parametrize("opaque", [0, 1])
def test_cpp_client_request(version, opaque):
    # C++ client: CPP language, its own versions, ACL keys sent empty, opaque from 0 or 1
    header = (
        f'{{"code":310,"extFields":{{"AccessKey":"","OnsChannel":"","Signature":"",'
        f'"a":"g","b":"T","c":"TBW102","d":"4","e":"0","f":"0","g":"1700000000000",'
        f'"h":"0","i":"","j":"0","k":"false"}},"flag":0,"language":"CPP",'
        f'"opaque":{opaque},"remark":"","serializeTypeCurrentRPC":"JSON",'
        f'"version":{version}}}'
    )
    [cmd] = feed_all(json_frame(header, b"body"))
    assert (cmd.language, cmd.version, cmd.opaque, cmd.remark) == (1, version, opaque, "")
    assert cmd.ext_fields["AccessKey"] == "" and cmd.ext_fields["Signature"] == ""
    v1 = SendMessageRequestHeader.from_v2_ext_fields(cmd.ext_fields)
    assert v1.topic == "T" and v1.properties == ""
    # the same request in binary form (C++ can be configured for it)
    cmd.serialize_type = BIN
    [back] = feed_all(encode(cmd))
    assert "AccessKey" not in back.ext_fields  # empty value = Java null
    assert SendMessageRequestHeader.from_v2_ext_fields(back.ext_fields).properties is None


def test_json_ext_values_of_other_types_become_java_strings():
    header = (
        '{"code":11,"extFields":{"queueId":3,"commitOffset":-9007199254740993,'
        '"unitMode":false,"ok":true,"ratio":1.50,"gone":null,"s":"x"}}'
    )
    [cmd] = feed_all(json_frame(header))
    assert cmd.ext_fields == {
        "queueId": "3",
        "commitOffset": "-9007199254740993",
        "unitMode": "false",
        "ok": "true",
        "ratio": "1.50",
        "s": "x",
    }


def test_json_missing_and_null_fields_take_java_defaults():
    [cmd] = feed_all(json_frame('{"code":34}'))
    assert cmd == RemotingCommand(34, LanguageCode.JAVA, 0, 0, 0, None, None, None, JSON)
    [cmd] = feed_all(
        json_frame(
            '{"code":34,"flag":null,"remark":null,"extFields":null,"language":null,"opaque":null,"version":null}'
        )
    )
    assert cmd == RemotingCommand(34, LanguageCode.JAVA, 0, 0, 0, None, None, None, JSON)


def test_json_unknown_keys_order_and_whitespace_are_ignored():
    header = (
        '  {"version":121, "opaque":5,"remark":"r", "flag":1,"code":0,'
        ' "language":"NODE_JS","serializeTypeCurrentRPC":"ROCKETMQ","extra":{"x":[1,2]},'
        '"extFields":{"b":"2","a":"1"}}\r\n'
    )
    [cmd] = feed_all(json_frame(header))
    assert cmd == RemotingCommand(0, 13, 121, 5, 1, "r", {"b": "2", "a": "1"}, None, JSON)


def test_json_remark_scalars_become_strings():
    [cmd] = feed_all(json_frame('{"code":1,"remark":404}'))
    assert cmd.remark == "404"


# --------------------------------------------------------------------------- errors
def expect_error(data: bytes, match: str, decoder: FrameDecoder | None = None) -> FrameDecoder:
    dec = decoder or FrameDecoder()
    with pytest.raises(ProtocolError, match=match):
        dec.feed(data)
    return dec


@pytest.mark.parametrize(
    "length, match",
    [
        (-1, "negative"),
        (-2147483648, "negative"),
        (0, "below the 4-byte minimum"),
        (3, "below the 4-byte minimum"),
        (16777213, "exceeds the 16777216-byte limit"),
        (0x7FFFFFFF, "exceeds"),
    ],
)
def test_bad_total_length_fails_immediately(length, match):
    expect_error(struct.pack(">i", length), match)


def test_max_frame_length_boundary_and_configuration():
    dec = FrameDecoder()
    # exactly 16 MiB on the wire is allowed: the decoder just waits for it
    assert dec.feed(struct.pack(">iI", MAX_FRAME_LENGTH - 4, 4) + b"{}{}") == []
    ok = encode(RemotingCommand(1, body=b"x" * 4))
    small = FrameDecoder(max_frame_length=len(ok))  # a frame of exactly the limit is fine
    assert small.feed(ok) == [RemotingCommand(1, body=b"x" * 4)]
    expect_error(encode(RemotingCommand(1, body=b"x" * 5)), f"exceeds the {len(ok)}-byte limit", small)


def test_header_length_beyond_frame():
    frame = struct.pack(">iI", 10, 7) + b"{}" + b"    "
    expect_error(frame, r"header length 7 exceeds frame length 10 - 4")
    # detected as soon as the 8-byte prefix is in, before the rest arrives
    expect_error(struct.pack(">iI", 1000, 997), "header length 997 exceeds")


@pytest.mark.parametrize("stype", [2, 5, 0x7F, 0xFF])
def test_unknown_serialize_type(stype):
    frame = struct.pack(">iI", 6, (stype << 24) | 2) + b"{}"
    expect_error(frame, f"unknown serialize type {stype}")
    expect_error(frame[:8], f"unknown serialize type {stype}")  # early, incomplete frame


@pytest.mark.parametrize(
    "header, match",
    [
        (b"{", "not valid JSON"),
        (b"", "not valid JSON"),
        (b'{"code":1} x', "extra data"),
        (b'{"code":1}{}', "extra data"),
        (b"[1,2]", "header is an array, not an object"),
        (b'"text"', "not an object"),
        (b"null", "not an object"),
        (b'{"code":"10"}', "field code is a string, not an integer"),
        (b'{"code":10.0}', "field code is a number, not an integer"),
        (b'{"code":1e3}', "field code is a number, not an integer"),
        (b'{"code":true}', "field code is a boolean, not an integer"),
        (b'{"code":2147483648}', "does not fit an int32"),
        (b'{"code":1,"opaque":-2147483649}', "opaque = -2147483649 does not fit an int32"),
        (b'{"code":1,"flag":[1]}', "field flag is an array"),
        (b'{"code":1,"version":{}}', "field version is an object"),
        (b'{"code":1,"extFields":[]}', "extFields is an array, not an object"),
        (b'{"code":1,"extFields":"a=b"}', "extFields is a string, not an object"),
        (b'{"code":1,"extFields":{"k":{"x":1}}}', "extFields value of 'k' is an object"),
        (b'{"code":1,"extFields":{"k":[1]}}', "extFields value of 'k' is an array"),
        (b'{"code":1,"language":true}', "language is a boolean"),
        (b'{"code":1,"language":["JAVA"]}', "language is an array"),
        (b'{"code":1,"remark":{}}', "remark is an object"),
        (b'{"code":NaN}', "not acceptable JSON"),
        (b'{"code":Infinity}', "not acceptable JSON"),
        (b'{"code":1' + b"1" * 5000 + b"}", "not acceptable JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not acceptable JSON|not an object"),
        (b'{"code":1,"remark":"\xff"}', "not valid UTF-8"),
        (b'{"code":1,"remark":"\xed\xa0\x80"}', "not valid UTF-8"),  # encoded surrogate
        (b"\xef\xbb\xbf{}", "not valid JSON"),  # BOM
    ],
)
def test_bad_json_headers(header, match):
    expect_error(json_frame(header), match)


def bin_header(
    code=10, lang=0, version=409, opaque=0, flag=0, remark=b"", ext=b"", remark_len=None, ext_len=None
) -> bytes:
    return (
        struct.pack(">hBhiii", code, lang, version, opaque, flag, len(remark) if remark_len is None else remark_len)
        + remark
        + struct.pack(">i", len(ext) if ext_len is None else ext_len)
        + ext
    )


def entry(key: bytes, value: bytes, klen=None, vlen=None) -> bytes:
    return (
        struct.pack(">h", len(key) if klen is None else klen)
        + key
        + struct.pack(">i", len(value) if vlen is None else vlen)
        + value
    )


@pytest.mark.parametrize(
    "header, match",
    [
        (bin_header()[:20], "shorter than the 21-byte minimum"),
        (b"", "shorter than the 21-byte minimum"),
        (bin_header(remark=b"abc", remark_len=4), "remark length 4 runs past the header"),
        (bin_header(remark=b"abc", remark_len=-1), "remark length -1"),
        (bin_header(remark=b"abcd", remark_len=2), "extFields length|runs past"),
        (bin_header(ext=entry(b"k", b"v"), ext_len=100), "extFields length 100 runs past"),
        (bin_header(ext=entry(b"k", b"v"), ext_len=-4), "extFields length -4"),
        (bin_header(ext=entry(b"k", b"v"), ext_len=5), "truncated|runs past|after the extFields"),
        (bin_header(ext=entry(b"k", b"v", klen=50)), "key length 50 runs past"),
        (bin_header(ext=entry(b"k", b"v", klen=-2)), "key length -2"),
        (bin_header(ext=entry(b"k", b"v", vlen=9)), "value length 9 runs past"),
        (bin_header(ext=entry(b"k", b"v", vlen=-1)), "value length -1"),
        (bin_header(ext=entry(b"k", b"v") + b"\x00"), "truncated"),
        (bin_header() + b"\x00\x00", "2 bytes after the extFields block"),
        (bin_header(remark=b"\xc3"), "remark is not valid UTF-8"),
        (bin_header(ext=entry(b"\xff", b"v")), "ext field is not valid UTF-8"),
        (bin_header(ext=entry(b"k", b"\xe2\x82")), "ext field is not valid UTF-8"),
    ],
)
def test_bad_binary_headers(header, match):
    expect_error(json_frame(header, b"BODY", BIN), match)


def test_decoder_stays_failed():
    dec = expect_error(struct.pack(">i", -1), "negative")
    assert dec.failed
    good = encode(route_request())
    with pytest.raises(ProtocolError, match="negative"):
        dec.feed(good)
    with pytest.raises(ProtocolError, match="negative"):
        dec.feed(b"")


def test_error_after_good_frames_in_same_feed_still_raises():
    good = encode(route_request())
    dec = FrameDecoder()
    with pytest.raises(ProtocolError):
        dec.feed(good + struct.pack(">i", 2))
    assert dec.failed


def test_error_while_buffered_partial_frame():
    good = encode(route_request())
    dec = FrameDecoder()
    assert dec.feed(good[:10]) == []
    expect_error(good[10:] + b"\xff\xff\xff\xff", "negative", dec)


def test_decode_frame_requires_exactly_one_frame():
    good = encode(route_request())
    assert decode_frame(good) == route_request()
    with pytest.raises(ProtocolError, match="says 139 bytes, got 140"):
        decode_frame(good + b"x")
    with pytest.raises(ProtocolError, match="no length field"):
        decode_frame(b"\x00")


# --------------------------------------------------------------------------- round trips
INT32 = st.integers(-(2**31), 2**31 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
TEXT = st.text(max_size=40)
EXT = st.dictionaries(st.text(max_size=12), TEXT, max_size=14)
BODY = st.one_of(st.none(), st.binary(max_size=300), st.binary(min_size=70_000, max_size=70_000))
LANG = st.sampled_from(sorted(LanguageCode._NAMES))


def commands(binary: bool) -> st.SearchStrategy[RemotingCommand]:
    return st.builds(
        RemotingCommand,
        code=INT16 if binary else INT32,
        language=LANG,
        version=INT16 if binary else INT32,
        opaque=INT32,
        flag=INT32,
        remark=st.one_of(st.none(), TEXT),
        ext_fields=st.one_of(st.none(), EXT),
        body=BODY,
        serialize_type=st.just(BIN if binary else JSON),
    )


def normalised(cmd: RemotingCommand) -> RemotingCommand:
    """What the wire can carry: b"" body is no body; binary drops Java-null strings."""
    body = cmd.body or None
    if cmd.serialize_type == JSON:
        return RemotingCommand(
            cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields, body, JSON
        )
    ext = {k: v for k, v in (cmd.ext_fields or {}).items() if k and v} or None
    return RemotingCommand(
        cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark or None, ext, body, BIN
    )


@given(commands(binary=False))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_json_round_trip(cmd):
    frame = encode(cmd)
    assert feed_all(frame) == [normalised(cmd)]
    # the header is JSON any strict parser accepts, with the same content
    (word,) = struct.unpack_from(">I", frame, 4)
    obj = json.loads(frame[8 : 8 + (word & 0xFFFFFF)].decode("utf-8"))
    assert obj["code"] == cmd.code and obj.get("extFields") == cmd.ext_fields
    assert obj.get("remark") == cmd.remark


@given(commands(binary=True))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_binary_round_trip(cmd):
    assert feed_all(encode(cmd)) == [normalised(cmd)]


@given(commands(binary=True))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_cross_encoding_round_trip(cmd):
    # a command read from one encoding and written in the other keeps its meaning
    first = normalised(cmd)
    [as_json] = feed_all(encode(first, JSON))
    assert as_json.ext_fields == first.ext_fields and as_json.remark == first.remark
    [back] = feed_all(encode(as_json, BIN))
    assert back == first


@given(st.lists(commands(binary=False) | commands(binary=True), min_size=1, max_size=5), st.integers(1, 50))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_stream_of_mixed_frames_in_fixed_chunks(cmds, chunk):
    stream = b"".join(encode(c) for c in cmds)
    if len(stream) > 20_000:
        chunk = 4096
    dec = FrameDecoder()
    got = []
    for i in range(0, len(stream), chunk):
        got += dec.feed(stream[i : i + chunk])
    assert got == [normalised(c) for c in cmds]
    assert dec.buffered == 0


def test_ext_map_larger_than_twelve_entries_uses_bigger_java_table():
    ext = {f"key{i:02d}": str(i) for i in range(30)}
    for st_ in (JSON, BIN):
        [back] = feed_all(encode(RemotingCommand(1, ext_fields=ext, serialize_type=st_)))
        assert back.ext_fields == ext


def test_ext_values_must_be_strings_and_none_means_absent():
    for st_ in (JSON, BIN):
        with pytest.raises(ProtocolError, match="not a str|not str"):
            encode(RemotingCommand(1, ext_fields={"queueId": 3}), st_)  # type: ignore[dict-item]
        ext = {"a": None, "b": "x"}
        cmd = RemotingCommand(1, ext_fields=ext, serialize_type=st_)  # type: ignore[arg-type]
        assert feed_all(encode(cmd))[0].ext_fields == {"b": "x"}
