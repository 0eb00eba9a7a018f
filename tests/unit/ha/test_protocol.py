"""ha/protocol.py: golden bytes (spec 5.1/5.2 and our handshake), splits, limits, fuzz."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ha.protocol import (
    FLAG_FULL_SYNC,
    HAProtocolError,
    MasterAccept,
    MasterReject,
    MasterStreamReader,
    OffsetReport,
    SlaveHello,
    SlaveStreamReader,
    Transfer,
    encode_accept,
    encode_hello,
    encode_offset_report,
    encode_reject,
    encode_transfer_header,
)
from rmq.protocol.errors import ProtocolError

FUZZ = settings(
    max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

HELLO = SlaveHello(
    "TestCluster",
    "broker-a",
    1,
    epoch=3,
    last_epoch_start_offset=4096,
    max_offset=123456,
    commitlog_file_size=1 << 30,
    flags=FLAG_FULL_SYNC,
)


# --------------------------------------------------------------------------- golden bytes
def test_offset_report_is_8_byte_big_endian():
    assert encode_offset_report(0x0102030405060708) == bytes.fromhex("0102030405060708")
    assert encode_offset_report(0) == bytes(8)


def test_transfer_header_is_offset_then_int32_size():
    assert encode_transfer_header(1 << 32, 32768) == (bytes.fromhex("0000000100000000") + bytes.fromhex("00008000"))
    assert len(encode_transfer_header(5, 0)) == 12


def test_hello_layout():
    b = encode_hello(SlaveHello("C", "bn", 2, 7, -1, 99, 4096, 1))
    payload = b"\x00\x01C" + b"\x00\x02bn" + struct.pack(">qqqqqi", 2, 7, -1, 99, 4096, 1)
    assert b == struct.pack(">ihhi", 0x524D5148, 1, 1, len(payload)) + payload
    assert b[:4] == b"RMQH"


def test_accept_and_reject_layout():
    assert encode_accept(MasterAccept(5, 1000)) == (
        struct.pack(">ihhi", 0x524D5148, 1, 2, 16) + struct.pack(">qq", 5, 1000)
    )
    r = encode_reject(MasterReject(2, "wrong cluster"))
    assert r == struct.pack(">ihhi", 0x524D5148, 1, 3, 8 + 2 + 13) + struct.pack(">q", 2) + b"\x00\x0dwrong cluster"


# --------------------------------------------------------------------------- master side
def test_master_reader_hello_then_last_report_only():
    rd = MasterStreamReader()
    data = encode_hello(HELLO) + encode_offset_report(10) + encode_offset_report(20) + b"\x00" * 3
    ev = rd.feed(data)
    assert ev == [HELLO, OffsetReport(20)]
    assert rd.handshake_done
    # the 3 buffered bytes + 5 more complete a report
    assert rd.feed(b"\x00\x00\x00\x00\x28") == [OffsetReport(40)]
    assert rd.feed(b"") == []


def test_master_reader_every_split_point():
    stream = encode_hello(HELLO) + encode_offset_report(77) + encode_offset_report(1 << 40)
    for cut in range(len(stream) + 1):
        rd = MasterStreamReader()
        ev = rd.feed(stream[:cut]) + rd.feed(stream[cut:])
        assert ev[0] == HELLO
        assert ev[-1] == OffsetReport(1 << 40)
        assert all(isinstance(e, OffsetReport) for e in ev[1:])


def test_master_reader_one_byte_at_a_time():
    stream = encode_hello(HELLO) + encode_offset_report(5)
    rd = MasterStreamReader()
    ev = []
    for i in range(len(stream)):
        ev += rd.feed(stream[i : i + 1])
    assert ev == [HELLO, OffsetReport(5)]


@pytest.mark.parametrize(
    "data",
    [
        encode_offset_report(0),  # a report with no handshake
        encode_offset_report(1 << 30),
        b"GET / HTTP/1.1\r\n\r\n",
        b"\x52",  # right first byte...
    ],
)
def test_master_reader_rejects_reports_without_handshake(data):
    rd = MasterStreamReader()
    if data == b"\x52":
        assert rd.feed(data) == []  # ...still possibly a handshake
        data = b"\x00"
    with pytest.raises(HAProtocolError):
        rd.feed(data)
    with pytest.raises(HAProtocolError):  # poisoned
        rd.feed(encode_hello(HELLO))
    assert isinstance(HAProtocolError("x"), ProtocolError)


def test_master_reader_limits():
    head = struct.pack(">ihhi", 0x524D5148, 1, 1, 64 * 1024 + 1)
    with pytest.raises(HAProtocolError, match="length"):
        MasterStreamReader().feed(head)
    with pytest.raises(HAProtocolError, match="version"):
        MasterStreamReader().feed(struct.pack(">ihhi", 0x524D5148, 2, 1, 0))
    with pytest.raises(HAProtocolError, match="type"):
        MasterStreamReader().feed(encode_accept(MasterAccept(1, 2)))
    short = struct.pack(">ihhi", 0x524D5148, 1, 1, 4) + b"\x00\x01C\x00"
    with pytest.raises(HAProtocolError, match="too short"):
        MasterStreamReader().feed(short)
    bad_utf8 = struct.pack(">ihhi", 0x524D5148, 1, 1, 3) + b"\x00\x01\xff"
    with pytest.raises(HAProtocolError, match="UTF-8"):
        MasterStreamReader().feed(bad_utf8)


def test_hello_with_appended_fields_is_read_by_v1():
    b = encode_hello(HELLO)
    longer = b[:8] + struct.pack(">i", struct.unpack(">i", b[8:12])[0] + 5) + b[12:] + b"extra"
    assert MasterStreamReader().feed(longer) == [HELLO]


# --------------------------------------------------------------------------- slave side
def _slave_events(reader: SlaveStreamReader, data: bytes, chunk: int) -> list:
    out = []
    for i in range(0, len(data), chunk):
        part = data[i : i + chunk]
        space = reader.get_buffer()
        space[: len(part)] = part
        reader.buffer_updated(len(part))
        for e in reader.events():
            if isinstance(e, Transfer):
                e = Transfer(e.offset, bytes(e.data))  # views die with the next get_buffer
            out.append(e)
    return out


def _stream(blocks: list[tuple[int, bytes]], answer: bytes | None = None) -> bytes:
    s = answer if answer is not None else encode_accept(MasterAccept(1, 500))
    for off, data in blocks:
        s += encode_transfer_header(off, len(data)) + data
    return s


@pytest.mark.parametrize("chunk", [1, 7, 12, 13, 100, 4096, 1 << 20])
def test_slave_reader_chunks(chunk):
    blocks = [(0, b"a" * 100), (100, b""), (100, b"b" * 5000), (5100, bytes(range(256)) * 40)]
    rd = SlaveStreamReader(capacity=128 * 1024, min_free=1024)
    ev = _slave_events(rd, _stream(blocks), chunk)
    assert ev[0] == MasterAccept(1, 500)
    assert [(e.offset, e.data) for e in ev[1:]] == blocks


def test_slave_reader_reject_stops_parsing():
    rd = SlaveStreamReader(capacity=128 * 1024)
    rd.feed(encode_reject(MasterReject(4, "brokerName b does not match a")) + b"junk")
    assert rd.events() == [MasterReject(4, "brokerName b does not match a")]


def test_slave_reader_compacts_and_keeps_partial_frame():
    rd = SlaveStreamReader(capacity=96 * 1024, min_free=32 * 1024)
    data = _stream([(i * 20000, bytes([i]) * 20000) for i in range(20)])
    ev = _slave_events(rd, data, 30000)
    assert [e.offset for e in ev[1:]] == [i * 20000 for i in range(20)]
    assert all(e.data == bytes([i]) * 20000 for i, e in enumerate(ev[1:]))


def test_slave_reader_rejects_oversized_and_negative():
    rd = SlaveStreamReader(capacity=96 * 1024)
    rd.feed(encode_accept(MasterAccept(0, 0)) + encode_transfer_header(0, 96 * 1024))
    with pytest.raises(HAProtocolError, match="does not fit"):
        rd.events()
    with pytest.raises(HAProtocolError):
        rd.events()
    rd = SlaveStreamReader(capacity=96 * 1024)
    rd.feed(encode_accept(MasterAccept(0, 0)) + encode_transfer_header(-5, 0))
    with pytest.raises(HAProtocolError, match="negative"):
        rd.events()
    rd = SlaveStreamReader(capacity=96 * 1024)
    rd.feed(encode_transfer_header(0, 0))  # data before the answer
    with pytest.raises(HAProtocolError):
        rd.events()


# --------------------------------------------------------------------------- fuzz
@FUZZ
@given(st.binary(max_size=300), st.integers(1, 64))
def test_master_reader_garbage_only_raises_protocol_error(data, chunk):
    rd = MasterStreamReader()
    try:
        for i in range(0, len(data), chunk):
            for e in rd.feed(data[i : i + chunk]):
                assert isinstance(e, (SlaveHello, OffsetReport))
    except HAProtocolError:
        pass


@FUZZ
@given(st.binary(max_size=300), st.integers(0, 60))
def test_master_reader_mutated_hello(noise, at):
    data = bytearray(encode_hello(HELLO) + encode_offset_report(9))
    for i, b in enumerate(noise[:8]):
        if at + i < len(data):
            data[at + i] ^= b
    rd = MasterStreamReader()
    try:
        ev = rd.feed(bytes(data))
    except HAProtocolError:
        return
    for e in ev:
        assert isinstance(e, (SlaveHello, OffsetReport))


@FUZZ
@given(st.binary(max_size=400), st.integers(1, 97))
def test_slave_reader_garbage_only_raises_protocol_error(data, chunk):
    rd = SlaveStreamReader(capacity=96 * 1024)
    stream = encode_accept(MasterAccept(1, 2)) + data
    try:
        _slave_events(rd, stream, chunk)
    except HAProtocolError:
        pass


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 1 << 50), st.binary(max_size=2000)), max_size=8), st.integers(1, 5000))
def test_slave_reader_roundtrip(blocks, chunk):
    rd = SlaveStreamReader(capacity=96 * 1024, min_free=8 * 1024)
    ev = _slave_events(rd, _stream(blocks), chunk)
    assert [(e.offset, e.data) for e in ev[1:]] == blocks
