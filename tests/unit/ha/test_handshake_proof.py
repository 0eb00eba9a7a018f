"""ha/protocol.py's proof of the cluster credential: CHALLENGE layout, HELLO proof
(HMAC-SHA256 over nonce || the payload before it), verification (wrong secret, wrong
AccessKey, another nonce, a changed field), the slave reader taking one CHALLENGE before
the answer, and fuzzed decoders that fail only with HAProtocolError."""

from __future__ import annotations

import hashlib
import hmac
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ha.protocol import (
    FLAG_EPOCHS,
    FLAG_PROOF,
    NONCE_SIZE,
    PROOF_SIZE,
    HAProtocolError,
    MasterAccept,
    MasterChallenge,
    MasterReject,
    MasterStreamReader,
    OffsetReport,
    SlaveHello,
    SlaveStreamReader,
    encode_accept,
    encode_challenge,
    encode_hello,
    encode_reject,
    verify_hello,
)
from rmq.auth.credentials import Credential
from rmq.protocol.epoch import EpochEntry

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CRED = Credential("clusterAK01", "clusterSecret01")
NONCE = bytes(range(16))
HELLO = SlaveHello("C", "bn", 2, 7, -1, 99, 4096, 1)


def _decode_hello(frame: bytes) -> SlaveHello:
    (ev,) = MasterStreamReader().feed(frame)
    assert isinstance(ev, SlaveHello)
    return ev


def test_challenge_layout():
    assert encode_challenge(NONCE) == struct.pack(">ihhi", 0x524D5148, 1, 4, 16) + NONCE
    with pytest.raises(ValueError):
        encode_challenge(b"short")


def test_hello_proof_layout_is_hmac_sha256_over_nonce_and_payload():
    frame = encode_hello(HELLO, CRED, NONCE)
    fixed = b"\x00\x01C" + b"\x00\x02bn" + struct.pack(">qqqqqi", 2, 7, -1, 99, 4096, 1 | FLAG_PROOF)
    signed = fixed + b"\x00\x0b" + b"clusterAK01"
    mac = hmac.new(b"clusterSecret01", NONCE + signed, hashlib.sha256).digest()
    assert len(mac) == PROOF_SIZE
    assert frame == struct.pack(">ihhi", 0x524D5148, 1, 1, len(signed) + 32) + signed + mac
    h = _decode_hello(frame)
    assert h.proof is not None and h.proof.access_key == "clusterAK01" and h.proof.mac == mac
    assert h.flags & FLAG_PROOF
    assert verify_hello(h, NONCE, CRED)
    # the secret is nowhere in the bytes or the repr
    assert b"clusterSecret01" not in frame
    assert "clusterSecret01" not in repr(h) and "clusterSecret01" not in repr(CRED)


def test_proof_after_epochs():
    h0 = SlaveHello("C", "bn", 2, epochs=(EpochEntry(1, 0), EpochEntry(2, 500)))
    h = _decode_hello(encode_hello(h0, CRED, NONCE))
    assert h.epochs == h0.epochs and h.flags & FLAG_EPOCHS
    assert verify_hello(h, NONCE, CRED)


def test_no_proof_without_credential():
    h = _decode_hello(encode_hello(HELLO))
    assert h.proof is None and not h.flags & FLAG_PROOF
    assert not verify_hello(h, NONCE, CRED)
    # a FLAG_PROOF set by hand without a credential is cleared
    assert _decode_hello(encode_hello(SlaveHello("C", "bn", 2, flags=FLAG_PROOF))).proof is None


@pytest.mark.parametrize(
    "other",
    [
        Credential("clusterAK01", "wrongSecret01"),  # wrong secret
        Credential("otherAK0001", "clusterSecret01"),  # wrong AccessKey, right secret
    ],
)
def test_wrong_credential_does_not_verify(other):
    h = _decode_hello(encode_hello(HELLO, other, NONCE))
    assert not verify_hello(h, NONCE, CRED)


def test_replayed_hello_does_not_verify_against_a_new_nonce():
    captured = encode_hello(HELLO, CRED, NONCE)
    h = _decode_hello(captured)
    assert verify_hello(h, NONCE, CRED)
    assert not verify_hello(h, bytes(16), CRED)
    assert not verify_hello(h, b"", CRED)


@pytest.mark.parametrize("at", range(12, 12 + 3 + 4 + 44 + 13))  # every byte of the signed payload
def test_any_changed_byte_breaks_the_proof(at):
    frame = bytearray(encode_hello(HELLO, CRED, NONCE))
    frame[at] ^= 0x01
    try:
        h = _decode_hello(bytes(frame))
    except HAProtocolError:
        return  # e.g. a length or the flags no longer parse
    assert not verify_hello(h, NONCE, CRED)


def test_truncated_proof_is_a_protocol_error():
    frame = encode_hello(HELLO, CRED, NONCE)
    payload = frame[12:-5]
    cut = struct.pack(">ihhi", 0x524D5148, 1, 1, len(payload)) + payload
    with pytest.raises(HAProtocolError, match="proof"):
        MasterStreamReader().feed(cut)


# --------------------------------------------------------------------------- slave reader
@pytest.mark.parametrize("chunk", [1, 3, 7, 28, 1000])
def test_slave_reader_challenge_then_accept(chunk):
    rd = SlaveStreamReader(capacity=96 * 1024)
    stream = encode_challenge(NONCE) + encode_accept(MasterAccept(1, 2))
    events = []
    for i in range(0, len(stream), chunk):
        rd.feed(stream[i : i + chunk])
        events += rd.events()
    assert events == [MasterChallenge(NONCE), MasterAccept(1, 2)]


def test_slave_reader_challenge_then_reject():
    rd = SlaveStreamReader(capacity=96 * 1024)
    rd.feed(encode_challenge(NONCE) + encode_reject(MasterReject(0, "no proof")))
    assert rd.events() == [MasterChallenge(NONCE), MasterReject(0, "no proof")]


def test_slave_reader_refuses_a_second_challenge_or_one_after_the_answer():
    rd = SlaveStreamReader(capacity=96 * 1024)
    rd.feed(encode_challenge(NONCE) + encode_challenge(NONCE))
    with pytest.raises(HAProtocolError, match="frame type 4"):
        rd.events()
    rd = SlaveStreamReader(capacity=96 * 1024)
    rd.feed(encode_accept(MasterAccept(1, 2)) + encode_challenge(NONCE))
    # after the answer only transfers: a CHALLENGE there is garbage (a transfer header
    # that does not fit or arrives whole as nonsense), never a second handshake
    try:
        ev = rd.events()
    except HAProtocolError:
        return
    assert not any(isinstance(e, MasterChallenge) for e in ev)


def test_short_challenge_is_a_protocol_error():
    rd = SlaveStreamReader(capacity=96 * 1024)
    rd.feed(struct.pack(">ihhi", 0x524D5148, 1, 4, 8) + bytes(8))
    with pytest.raises(HAProtocolError, match="nonce"):
        rd.events()


def test_master_reader_refuses_a_challenge_frame():
    with pytest.raises(HAProtocolError):
        MasterStreamReader().feed(encode_challenge(NONCE))


# --------------------------------------------------------------------------- fuzz
@FUZZ
@given(st.binary(max_size=8), st.integers(0, 120))
def test_mutated_proven_hello_never_verifies_or_crashes(noise, at):
    data = bytearray(encode_hello(HELLO, CRED, NONCE))
    changed = False
    for i, b in enumerate(noise):
        if at + i < len(data) and b:
            data[at + i] ^= b
            changed = True
    try:
        events = MasterStreamReader().feed(bytes(data))
    except HAProtocolError:
        return
    for e in events:
        assert isinstance(e, (SlaveHello, OffsetReport))
        if isinstance(e, SlaveHello) and changed:
            # a changed byte inside the frame never still verifies
            assert not verify_hello(e, NONCE, CRED)


@FUZZ
@given(st.binary(max_size=200), st.integers(1, 50))
def test_slave_reader_garbage_after_challenge_raises_only_protocol_error(data, chunk):
    rd = SlaveStreamReader(capacity=96 * 1024)
    stream = encode_challenge(NONCE) + data
    try:
        for i in range(0, len(stream), chunk):
            rd.feed(stream[i : i + chunk])
            rd.events()
    except HAProtocolError:
        pass


def test_nonce_size():
    assert NONCE_SIZE == 16
