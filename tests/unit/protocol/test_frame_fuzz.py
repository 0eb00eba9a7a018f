"""Fuzzing FrameDecoder: garbage in -> ProtocolError out, never anything else.

Also checks the stronger promise: where a length field is inconsistent with the
bytes around it, the decoder says so instead of returning a command built from
the wrong bytes.
"""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rmq.protocol.codes import SerializeType
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import FrameDecoder, RemotingCommand, encode

JSON = SerializeType.JSON
BIN = SerializeType.ROCKETMQ
FUZZ = settings(
    max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


def seed_frames() -> list[bytes]:
    ext = {
        "a": "grp",
        "b": "Topic",
        "c": "TBW102",
        "d": "4",
        "e": "1",
        "f": "0",
        "g": "1700000000000",
        "h": "0",
        "i": "WAIT\x01true\x02KEYS\x01k é\x02",
        "j": "0",
    }
    cmds = [
        RemotingCommand(310, opaque=3, ext_fields=ext, body=b"payload-bytes"),
        RemotingCommand(0, flag=1, remark="remark ü", ext_fields={"msgId": "AB", "queueId": "2"}),
        RemotingCommand(105, ext_fields={"topic": "TopicTest"}),
        RemotingCommand(34, body=b"{}"),
    ]
    return [encode(c, st_) for c in cmds for st_ in (JSON, BIN)]


SEEDS = seed_frames()


def run(data: bytes, chunk: int | None = None) -> list[RemotingCommand] | None:
    """Decoded commands, or None when the decoder rejected the input (ProtocolError).

    Anything other than ProtocolError propagates and fails the test.
    """
    dec = FrameDecoder()
    out: list[RemotingCommand] = []
    try:
        if chunk is None:
            out += dec.feed(data)
        else:
            for i in range(0, len(data), chunk):
                out += dec.feed(data[i : i + chunk])
    except ProtocolError:
        assert dec.failed
        with pytest.raises(ProtocolError):
            dec.feed(b"")
        return None
    return out


def check_sane(cmds: list[RemotingCommand], fed: int) -> None:
    """Whatever comes out is well-typed and could not have come from more bytes than fed."""
    total = 0
    for c in cmds:
        assert isinstance(c, RemotingCommand)
        assert all(type(v) is int for v in (c.code, c.language, c.version, c.opaque, c.flag))
        assert c.remark is None or type(c.remark) is str
        assert c.ext_fields is None or all(type(k) is str and type(v) is str for k, v in c.ext_fields.items())
        assert c.body is None or (type(c.body) is bytes and len(c.body) > 0)
        total += 8 + (len(c.body) if c.body else 0)
    assert total <= fed


@given(st.binary(max_size=2000), st.one_of(st.none(), st.integers(1, 64)))
@FUZZ
def test_random_bytes_only_raise_protocol_error(data, chunk):
    out = run(data, chunk)
    if out is not None:
        check_sane(out, len(data))


@given(st.binary(min_size=8, max_size=400), st.sampled_from([JSON, BIN]))
@FUZZ
def test_random_headers_behind_a_valid_prefix(header, stype):
    # Lengths consistent, header content random: exercises the header parsers.
    frame = struct.pack(">iI", 4 + len(header), (stype << 24) | len(header)) + header
    out = run(frame)
    if out is not None:
        assert len(out) == 1
        check_sane(out, len(frame))


JSON_SCALARS = (
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=10)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
HEADER_KEYS = st.sampled_from(
    ["code", "language", "version", "opaque", "flag", "remark", "extFields", "serializeTypeCurrentRPC", "other"]
)


@given(
    st.dictionaries(HEADER_KEYS, JSON_VALUES | st.dictionaries(st.text(max_size=4), JSON_VALUES, max_size=4)),
    st.binary(max_size=10),
)
@settings(FUZZ, max_examples=400)
def test_json_headers_of_any_shape(obj, body):
    # Well-formed JSON with every field of every type: decoded or refused, no crash.
    header = json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")
    frame = struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body
    out = run(frame)
    if out is not None:
        [cmd] = out
        check_sane(out, len(frame))
        # whatever was accepted re-encodes and decodes to the same command
        assert run(encode(cmd)) == [cmd]


@st.composite
def mutated(draw):
    frame = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        if not frame:
            break
        i = draw(st.integers(0, len(frame) - 1))
        if kind == "flip":
            frame[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            frame[i] = draw(st.integers(0, 255))
        elif kind == "insert":
            frame[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del frame[i : i + draw(st.integers(1, 8))]
        else:
            del frame[i:]
    return bytes(frame)


@given(mutated(), st.one_of(st.none(), st.integers(1, 97)))
@settings(FUZZ, max_examples=2000)
def test_mutated_frames_only_raise_protocol_error(data, chunk):
    out = run(data, chunk)
    if out is not None:
        check_sane(out, len(data))


@given(st.sampled_from(SEEDS), st.integers(-(2**31), 2**31 - 1), st.binary(max_size=64))
@FUZZ
def test_corrupted_total_length(frame, length, tail):
    real = struct.unpack_from(">i", frame)[0]
    assume(length != real)
    data = struct.pack(">i", length) + frame[4:] + tail
    out = run(data)
    if length < 4 or length > 16777212:
        assert out is None  # rejected at once, nothing buffered
        return
    if out is None:
        return
    check_sane(out, len(data))
    if length > len(data) - 4:
        assert out == []  # still waiting for the rest
    elif out:
        # a shorter frame is legal only when its header fits: the body just shrinks
        (word,) = struct.unpack_from(">I", frame, 4)
        assert (word & 0xFFFFFF) <= length - 4


@given(st.sampled_from(SEEDS), st.integers(0, 0xFFFFFF))
@FUZZ
def test_corrupted_header_length(frame, hlen):
    length, word = struct.unpack_from(">iI", frame)
    assume(hlen != word & 0xFFFFFF)
    data = struct.pack(">iI", length, (word & 0xFF000000) | hlen) + frame[8:]
    out = run(data)
    if hlen > length - 4:
        assert out is None  # header would run past the frame
    elif word >> 24 == JSON:
        # A JSON object cut short is never valid JSON; one extended into the body
        # ends in non-whitespace body bytes ("extra data") unless there is no body.
        body_len = length - 4 - (word & 0xFFFFFF)
        if hlen < (word & 0xFFFFFF) or body_len:
            assert out is None


def bin_field_offsets(frame: bytes) -> dict[str, list[int]]:
    """Byte offsets of each length field inside a ROCKETMQ frame."""
    pos = 8 + 13
    rlen = struct.unpack_from(">i", frame, pos)[0]
    offsets = {"remark": [pos], "ext": [pos + 4 + rlen], "key": [], "value": []}
    p = pos + 4 + rlen
    elen = struct.unpack_from(">i", frame, p)[0]
    p += 4
    stop = p + elen
    while p < stop:
        offsets["key"].append(p)
        klen = struct.unpack_from(">h", frame, p)[0]
        p += 2 + klen
        offsets["value"].append(p)
        vlen = struct.unpack_from(">i", frame, p)[0]
        p += 4 + vlen
    return offsets


BIN_SEEDS = [f for f in SEEDS if f[4] == BIN]


@given(
    st.sampled_from(BIN_SEEDS),
    st.sampled_from(["remark", "ext", "key", "value"]),
    st.integers(0, 30),
    st.integers(-(2**31), 2**31 - 1),
    st.booleans(),
)
@FUZZ
def test_inconsistent_binary_inner_lengths_are_rejected(frame, field, idx, delta, big):
    offsets = bin_field_offsets(frame)[field]
    assume(offsets)
    pos = offsets[idx % len(offsets)]
    size = 2 if field == "key" else 4
    fmt = ">h" if size == 2 else ">i"
    old = struct.unpack_from(fmt, frame, pos)[0]
    if big:
        new = delta if size == 4 else max(-(2**15), min(2**15 - 1, delta))
    else:
        new = old + (delta % 7) - 3  # small shifts are the sneaky ones
        if size == 2:
            new = max(-(2**15), min(2**15 - 1, new))
    assume(new != old)
    if field == "remark" and old == 0 and new > 0:
        # a remark that swallows the ext length: still inconsistent, checked below
        pass
    data = bytearray(frame)
    struct.pack_into(fmt, data, pos, new)
    out = run(bytes(data))
    # Every other field is intact, so the header no longer adds up: a length that
    # grew runs past its container, one that shrank leaves bytes unaccounted for
    # or misreads the next length field. Either way: an error, not a command.
    if out is not None:
        # The only survivable case: shrinking a *value* inside the ext block so
        # that the following bytes happen to parse as entries ending exactly at
        # the block's end; make sure that is what happened.
        assert field in ("key", "value"), (field, old, new)
        check_sane(out, len(data))


def test_huge_length_is_not_buffered():
    dec = FrameDecoder()
    with pytest.raises(ProtocolError):
        dec.feed(struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 100)
    assert dec.buffered == 0


def test_largest_allowed_frame_waits_without_error():
    dec = FrameDecoder()
    assert dec.feed(struct.pack(">iI", 16777212, 2) + b"{}" + b"\x00" * 1000) == []
    assert dec.buffered == 1010


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_every_truncation_of_a_valid_frame_waits(seed):
    frame = SEEDS[seed]
    for cut in range(len(frame)):
        assert run(frame[:cut]) == [], cut


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_every_single_byte_flip_of_a_valid_frame(seed):
    # exhaustive over positions, one bit pattern each; only ProtocolError may escape
    frame = SEEDS[seed]
    for i in range(len(frame)):
        for mask in (0x01, 0x80, 0xFF):
            data = bytearray(frame)
            data[i] ^= mask
            out = run(bytes(data))
            if out is not None:
                check_sane(out, len(data))
