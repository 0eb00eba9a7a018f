"""rmq.protocol.epoch: entry/list codec and the consistent-point rule."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.protocol.epoch import (
    EPOCH_ENTRY_SIZE,
    EpochEntry,
    close_last,
    decode_epoch_entry,
    decode_epoch_list,
    encode_epoch_entry,
    encode_epoch_list,
    find_consistent_point,
    validate_history,
)
from rmq.protocol.errors import ProtocolError


# ---------------------------------------------------------------- codec
def test_entry_golden_bytes():
    assert encode_epoch_entry(EpochEntry(3, 0x0A0B, 0x0102030405)) == bytes.fromhex(
        "000000030000000000000a0b0000000102030405"
    )
    assert encode_epoch_entry(EpochEntry(1, 7)) == bytes.fromhex("000000010000000000000007ffffffffffffffff")
    assert EPOCH_ENTRY_SIZE == 20


def test_list_golden_bytes():
    data = encode_epoch_list([EpochEntry(1, 0, 100), EpochEntry(2, 100)])
    assert data[:4] == b"\x00\x00\x00\x02"
    assert len(data) == 4 + 2 * 20
    assert decode_epoch_list(data) == [EpochEntry(1, 0, 100), EpochEntry(2, 100, None)]
    assert decode_epoch_list(encode_epoch_list([])) == []


@pytest.mark.parametrize(
    "raw, why",
    [
        (b"", "no count"),
        (b"\x00\x00\x00\x01", "is 24 bytes"),
        (b"\x00\x00\x00\x00\x00", "is 4 bytes"),
        (b"\xff\xff\xff\xff", "outside"),
        (struct.pack(">iiqq", 1, 1, 10, 5), "before its start"),
        (struct.pack(">iiqq", 1, -1, 0, -1), "outside"),
        (struct.pack(">iiqq", 1, 1, 0, -7), "negative"),
        (struct.pack(">i", 2) + struct.pack(">iqq", 2, 0, 10) + struct.pack(">iqq", 1, 10, -1), "not increasing"),
        (struct.pack(">i", 2) + struct.pack(">iqq", 1, 0, 10) + struct.pack(">iqq", 2, 12, -1), "ends at 10"),
    ],
)
def test_list_rejects_garbage(raw, why):
    with pytest.raises(ProtocolError, match=why):
        decode_epoch_list(raw)


def test_entry_rejects_wrong_length():
    with pytest.raises(ProtocolError, match="20 bytes"):
        decode_epoch_entry(b"\x00" * 19)


def test_entry_validation():
    with pytest.raises(ValueError):
        EpochEntry(-1, 0)
    with pytest.raises(ValueError):
        EpochEntry(1, 10, 9)
    assert str(EpochEntry(2, 5)) == "epoch 2 [5, open)"


@st.composite
def histories(draw) -> list[EpochEntry]:
    n = draw(st.integers(0, 8))
    epochs = sorted(draw(st.sets(st.integers(0, 2**31 - 1), min_size=n, max_size=n)))
    starts = sorted(draw(st.lists(st.integers(0, 2**62), min_size=n, max_size=n)))
    out = [
        EpochEntry(e, s, starts[i + 1] if i + 1 < n else None)
        for i, (e, s) in enumerate(zip(epochs, starts, strict=True))
    ]
    if out and draw(st.booleans()):
        out[-1] = out[-1].with_end(draw(st.integers(out[-1].start_offset, 2**63 - 1)))
    return out


@given(histories())
def test_list_roundtrip(h):
    assert validate_history(h) is None
    assert decode_epoch_list(encode_epoch_list(h)) == h


@given(st.binary(max_size=200))
def test_decode_garbage_raises_protocol_error_only(raw):
    try:
        decode_epoch_list(raw)
    except ProtocolError:
        pass


# ---------------------------------------------------------------- consistent point
def E(epoch, start, end=None):
    return EpochEntry(epoch, start, end)


def test_close_last_fills_every_end():
    assert close_last([E(1, 0), E(2, 10), E(4, 30)], 45) == [E(1, 0, 10), E(2, 10, 30), E(4, 30, 45)]
    # a last epoch that starts past the log end holds nothing
    assert close_last([E(1, 0), E(2, 10)], 5) == [E(1, 0, 10), E(2, 10, 10)]
    assert close_last([], 100) == []


def test_returning_master_with_unreplicated_tail():
    # old master wrote epoch 1 up to 1500; the slave had 1000 when it became master
    # of epoch 2 and wrote up to 1800
    old = close_last([E(1, 0)], 1500)
    new = close_last([E(1, 0), E(2, 1000)], 1800)
    assert find_consistent_point(old, new) == 1000
    assert find_consistent_point(new, old) == 1000


def test_behind_slave_agrees_up_to_its_own_end():
    assert (
        find_consistent_point(close_last([E(1, 0), E(2, 1000)], 1200), close_last([E(1, 0), E(2, 1000)], 1800)) == 1200
    )


def test_same_epoch_other_start_is_skipped():
    # epoch 2 has different starts: not the same master's data; fall back to epoch 1
    a = close_last([E(1, 0), E(2, 500)], 900)
    b = close_last([E(1, 0), E(2, 600)], 900)
    assert find_consistent_point(a, b) == 500


def test_no_common_epoch():
    assert find_consistent_point([], close_last([E(1, 0)], 10)) == -1
    assert find_consistent_point(close_last([E(3, 0)], 10), close_last([E(1, 0)], 10)) == -1


def test_both_open_is_an_error():
    with pytest.raises(ValueError, match="close_last"):
        find_consistent_point([E(1, 0)], [E(1, 0)])
    # one open side: the other's end bounds it
    assert find_consistent_point([E(1, 0)], [E(1, 0, 70)]) == 70


def test_empty_epoch_in_between():
    # master of epoch 2 wrote nothing before it died; epoch 3 started at the same offset
    a = close_last([E(1, 0), E(2, 400)], 400)
    b = close_last([E(1, 0), E(3, 400)], 900)
    assert find_consistent_point(a, b) == 400


# A cluster simulation: logs are lists of epoch tags (one per offset), masters change,
# followers truncate to the oracle's common prefix and copy. Histories are kept the way
# brokers keep them; the rule must agree with the oracle for every pair of brokers.
def _lcp(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _consistent(ha, la, hb, lb):
    """The rule's answer as a common-prefix length: -1 (no common epoch) agrees on
    nothing, which is what an empty history must give."""
    p = find_consistent_point(close_last(ha, len(la)), close_last(hb, len(lb)))
    if not ha or not hb:
        assert p == -1
    return 0 if p == -1 else p


@settings(max_examples=300, deadline=None)
@given(
    st.integers(2, 4),
    st.lists(st.tuples(st.sampled_from(["write", "sync", "elect"]), st.integers(0, 3), st.integers(0, 6)), max_size=40),
)
def test_consistent_point_matches_common_prefix(n_brokers, ops):
    logs: list[list[int]] = [[] for _ in range(n_brokers)]
    hist: list[list[EpochEntry]] = [[] for _ in range(n_brokers)]
    starts: dict[int, int] = {1: 0}
    master, epoch = 0, 1
    hist[0] = [E(1, 0)]
    for op, who, k in ops:
        who %= n_brokers
        if op == "write":
            logs[master].extend([epoch] * k)
        elif op == "elect":
            master, epoch = who, epoch + 1
            starts[epoch] = len(logs[master])
            hist[master] = hist[master] + [E(epoch, len(logs[master]))]
        elif who != master:
            f, m = logs[who], logs[master]
            p = _lcp(f, m)
            assert _consistent(hist[who], f, hist[master], m) == p
            del f[p:]
            hist[who] = [e for e in hist[who] if e.start_offset < p]
            q = p + min(k, len(m) - p)
            f.extend(m[p:q])
            have = {e.epoch for e in hist[who]}
            for e in close_last(hist[master], len(m)):
                copied = e.start_offset < q and e.end_offset > p
                at_tail = q == len(m) and e.end_offset == len(m)
                if e.epoch not in have and (copied or at_tail) and (not hist[who] or e.epoch > hist[who][-1].epoch):
                    hist[who].append(E(e.epoch, e.start_offset))
    for a in range(n_brokers):
        for b in range(n_brokers):
            assert validate_history(hist[a]) is None
            assert _consistent(hist[a], logs[a], hist[b], logs[b]) == _lcp(logs[a], logs[b])
