"""HA wire format, sans-IO: bytes in, events out; encode functions (spec 5.1/5.2 + our handshake).

A connection to the master's haListenPort carries, in order::

    master -> slave    CHALLENGE frame (ours), only when the master has a credential
    slave  -> master   HELLO frame (ours), then 8-byte offset reports (spec 5.1)
    master -> slave    ACCEPT or REJECT frame (ours), then 12-byte header + data (spec 5.2)

The classic frames are kept exactly as RocketMQ sends them; the handshake in front of
them is our extension (the HA port is spoken between rmq brokers only). Without it any
TCP client could report an offset and make the master believe a slave has data it does
not have (RocketMQ issues #1155, #3015).

Handshake frame (big-endian)::

    int32  magic    0x524D5148 ("RMQH")
    int16  version  1
    int16  type     1 HELLO, 2 ACCEPT, 3 REJECT, 4 CHALLENGE
    int32  length   of the payload, at most MAX_HANDSHAKE_PAYLOAD
    bytes  payload

    HELLO   str cluster, str brokerName, int64 brokerId, int64 epoch (0 = none),
            int64 lastEpochStartOffset (-1 = none), int64 maxOffset,
            int64 commitLogFileSize, int32 flags (bit 0: full sync, bit 1: epochs
            follow, bit 2: proof follows) [, epochs] [, str accessKey, 32 bytes proof]
    ACCEPT  int64 epoch, int64 masterMaxOffset [, epochs: when the HELLO had bit 1]
    REJECT  int64 epoch, str reason
    CHALLENGE  16 bytes nonce

    str = int16 length + UTF-8 bytes
    epochs = the sender's epoch history, rmq.protocol.epoch's list codec (int32 count
             + 20 bytes per entry), oldest first

Readers ignore payload bytes after the fields they know, so a later version may append
fields without breaking an older peer; a different magic or a version they do not
speak is an error. The epoch lists were added that way (still version 1): a slave in
controller mode sets HELLO flag bit 1 and appends its history; a master that knows
the flag answers with its own history appended to the ACCEPT (an empty list if it
has none), one that does not ignores both, and the slave sees no list. A HELLO with
a list announces a slave that compares histories and truncates after the handshake,
so its maxOffset may be beyond the master's.

The cluster credential (broker.conf ``innerClientAuthenticationCredentials``): a master
that has one sends a CHALLENGE with a fresh random nonce as soon as a connection is
accepted, and accepts only a HELLO whose proof is ``HMAC-SHA256(secretKey, nonce ||
every payload byte before the proof)`` (the HELLO's fields and the AccessKey) under the
cluster's AccessKey, compared in constant time. The nonce is new for every connection,
so a HELLO recorded from another connection proves nothing. A slave that has a
credential waits for the CHALLENGE before it says HELLO; one without says HELLO at once
(and a master with a credential refuses it). Payload bytes after the proof would
not be covered by it: a later version adds its fields before the proof.

Two readers, one per direction: ``MasterStreamReader`` (what the master reads from a
slave) and ``SlaveStreamReader`` (what a slave reads from its master; it can receive
straight into its own buffer, ``get_buffer``/``buffer_updated``, so data is appended to
the CommitLog from the receive buffer without a copy). Both raise ``HAProtocolError``
on garbage and stay failed afterwards.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from rmq.auth.credentials import Credential
from rmq.protocol.epoch import EpochEntry, decode_epoch_list, encode_epoch_list
from rmq.protocol.errors import ProtocolError

__all__ = [
    "HAProtocolError",
    "MAGIC",
    "VERSION",
    "HELLO",
    "ACCEPT",
    "REJECT",
    "CHALLENGE",
    "FLAG_FULL_SYNC",
    "FLAG_EPOCHS",
    "FLAG_PROOF",
    "NONCE_SIZE",
    "PROOF_SIZE",
    "MAX_HANDSHAKE_PAYLOAD",
    "REPORT_SIZE",
    "TRANSFER_HEADER_SIZE",
    "SlaveHello",
    "HelloProof",
    "MasterChallenge",
    "MasterAccept",
    "MasterReject",
    "OffsetReport",
    "Transfer",
    "encode_hello",
    "encode_challenge",
    "hello_proof",
    "verify_hello",
    "encode_accept",
    "encode_reject",
    "encode_offset_report",
    "encode_transfer_header",
    "MasterStreamReader",
    "SlaveStreamReader",
    "EpochProvider",
    "no_epoch",
]

#: What a side puts in its handshake: (its epoch, where that epoch began).
EpochProvider = Callable[[], "tuple[int, int]"]


def no_epoch() -> tuple[int, int]:
    """The ``EpochProvider`` of a broker without epochs: epoch 0, no start offset."""
    return 0, -1


MAGIC: Final = 0x524D5148
VERSION: Final = 1
HELLO: Final = 1
ACCEPT: Final = 2
REJECT: Final = 3
CHALLENGE: Final = 4
FLAG_FULL_SYNC: Final = 0x1
FLAG_EPOCHS: Final = 0x2
FLAG_PROOF: Final = 0x4
NONCE_SIZE: Final = 16
PROOF_SIZE: Final = 32  # HMAC-SHA256
MAX_HANDSHAKE_PAYLOAD: Final = 64 * 1024
REPORT_SIZE: Final = 8
TRANSFER_HEADER_SIZE: Final = 12
# The slave's receive buffer (RocketMQ's HAClient reads into 4 MiB); a transfer body
# must fit in it with its header.
DEFAULT_SLAVE_BUFFER: Final = 4 * 1024 * 1024

_HS_HEAD = struct.Struct(">ihhi")
_Q = struct.Struct(">q")
_QQ = struct.Struct(">qq")
_H = struct.Struct(">H")
_HELLO_TAIL = struct.Struct(">qqqqqi")
_TRANSFER = struct.Struct(">qi")

Buffer = bytes | bytearray | memoryview


class HAProtocolError(ProtocolError):
    """Bytes on the HA port that are not our handshake or the classic frames."""


# --------------------------------------------------------------------------- messages
@dataclass(frozen=True, slots=True)
class HelloProof:
    """A HELLO's proof of the cluster credential. ``signed``: the payload bytes the MAC
    covers, as received (set by the decoder)."""

    access_key: str
    mac: bytes = field(repr=False)
    signed: bytes = field(default=b"", repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class SlaveHello:
    cluster: str
    broker_name: str
    broker_id: int
    epoch: int = 0
    last_epoch_start_offset: int = -1
    max_offset: int = 0
    commitlog_file_size: int = 0
    flags: int = 0
    # None: a classic slave; encode_hello sets FLAG_EPOCHS when there is a list
    epochs: tuple[EpochEntry, ...] | None = None
    # decoded only (encode_hello computes it from a credential and the nonce)
    proof: HelloProof | None = None

    @property
    def full_sync(self) -> bool:
        return bool(self.flags & FLAG_FULL_SYNC)


@dataclass(frozen=True, slots=True)
class MasterChallenge:
    """The master's nonce, which the slave's HELLO proof must cover."""

    nonce: bytes


@dataclass(frozen=True, slots=True)
class MasterAccept:
    epoch: int
    master_max_offset: int
    # the master's history, sent only to a slave that sent its own (None: not sent)
    epochs: tuple[EpochEntry, ...] | None = None


@dataclass(frozen=True, slots=True)
class MasterReject:
    epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class OffsetReport:
    """The slave's max CommitLog offset (its ack)."""

    offset: int


@dataclass(slots=True)
class Transfer:
    """CommitLog bytes [offset, offset + len(data)); empty data is a heartbeat.

    From ``SlaveStreamReader`` data is a view of the reader's buffer: valid until the
    next ``get_buffer``/``feed`` call."""

    offset: int
    data: Buffer

    @property
    def size(self) -> int:
        return len(self.data)


# --------------------------------------------------------------------------- encoding
def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > 0xFFFF:
        raise ValueError(f"string of {len(b)} bytes does not fit a handshake field")
    return _H.pack(len(b)) + b


def _frame(kind: int, payload: bytes) -> bytes:
    if len(payload) > MAX_HANDSHAKE_PAYLOAD:
        raise ValueError(f"handshake payload of {len(payload)} bytes is too long")
    return _HS_HEAD.pack(MAGIC, VERSION, kind, len(payload)) + payload


def _epochs(entries: tuple[EpochEntry, ...] | None) -> bytes:
    return b"" if entries is None else encode_epoch_list(entries)


def hello_proof(secret_key: str, nonce: bytes, signed: Buffer) -> bytes:
    """HMAC-SHA256(secretKey, nonce || signed): what a HELLO's proof must be."""
    mac = hmac.new(secret_key.encode("utf-8", "replace"), nonce, hashlib.sha256)
    mac.update(signed)
    return mac.digest()


def encode_hello(h: SlaveHello, credential: Credential | None = None, nonce: bytes = b"") -> bytes:
    """With ``credential``: FLAG_PROOF set and the AccessKey and the proof over ``nonce``
    (the master's CHALLENGE) appended; ``h.proof`` is ignored either way."""
    flags = h.flags | FLAG_EPOCHS if h.epochs is not None else h.flags & ~FLAG_EPOCHS
    flags = flags | FLAG_PROOF if credential is not None else flags & ~FLAG_PROOF
    payload = (
        _str(h.cluster)
        + _str(h.broker_name)
        + _HELLO_TAIL.pack(h.broker_id, h.epoch, h.last_epoch_start_offset, h.max_offset, h.commitlog_file_size, flags)
        + _epochs(h.epochs)
    )
    if credential is not None:
        payload += _str(credential.access_key)
        payload += hello_proof(credential.secret_key, nonce, payload)
    return _frame(HELLO, payload)


def verify_hello(h: SlaveHello, nonce: bytes, credential: Credential) -> bool:
    """Whether ``h`` proves ``credential`` over this connection's ``nonce``: the right
    AccessKey and the right MAC (constant time)."""
    p = h.proof
    if p is None or not nonce:
        return False
    expected = hello_proof(credential.secret_key, nonce, p.signed)
    # both compared, whatever the first says: the time taken tells nothing
    key_ok = hmac.compare_digest(p.access_key.encode("utf-8", "replace"), credential.access_key.encode("utf-8"))
    return hmac.compare_digest(p.mac, expected) and key_ok


def encode_challenge(nonce: bytes) -> bytes:
    if len(nonce) != NONCE_SIZE:
        raise ValueError(f"a challenge nonce is {NONCE_SIZE} bytes, not {len(nonce)}")
    return _frame(CHALLENGE, nonce)


def encode_accept(a: MasterAccept) -> bytes:
    return _frame(ACCEPT, _QQ.pack(a.epoch, a.master_max_offset) + _epochs(a.epochs))


def encode_reject(r: MasterReject) -> bytes:
    return _frame(REJECT, _Q.pack(r.epoch) + _str(r.reason[:1000]))


def encode_offset_report(offset: int) -> bytes:
    return _Q.pack(offset)


def encode_transfer_header(offset: int, size: int) -> bytes:
    return _TRANSFER.pack(offset, size)


# --------------------------------------------------------------------------- decoding
class _Fields:
    """Reads a handshake payload field by field; running short is an error."""

    __slots__ = ("mv", "pos")

    def __init__(self, payload: memoryview) -> None:
        self.mv = payload
        self.pos = 0

    def need(self, n: int, what: str) -> None:
        if self.pos + n > len(self.mv):
            raise HAProtocolError(f"handshake payload too short for {what}")

    def string(self, what: str) -> str:
        self.need(2, what)
        (n,) = _H.unpack_from(self.mv, self.pos)
        self.need(2 + n, what)
        raw = bytes(self.mv[self.pos + 2 : self.pos + 2 + n])
        self.pos += 2 + n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise HAProtocolError(f"handshake {what} is not UTF-8") from None

    def unpack(self, st: struct.Struct, what: str) -> tuple:
        self.need(st.size, what)
        v = st.unpack_from(self.mv, self.pos)
        self.pos += st.size
        return v

    def epochs(self) -> tuple[EpochEntry, ...]:
        """An epoch list (rmq.protocol.epoch codec) at the current position."""
        self.need(4, "epoch list count")
        (n,) = struct.unpack_from(">i", self.mv, self.pos)
        size = 4 + 20 * n if n >= 0 else 0
        self.need(size, f"epoch list of {n} entries")
        try:
            out = decode_epoch_list(self.mv[self.pos : self.pos + size])
        except ProtocolError as e:
            raise HAProtocolError(f"handshake epoch list: {e}") from None
        self.pos += size
        return tuple(out)


def _parse_handshake_head(mv: memoryview, pos: int, expect: tuple[int, ...]) -> tuple[int, int] | None:
    """(type, payload length) of the frame at pos, None if its head is incomplete."""
    if len(mv) - pos < _HS_HEAD.size:
        # Garbage is recognised as early as possible: a wrong first byte of the magic
        # closes the connection before more is buffered.
        have = bytes(mv[pos : pos + 4])
        if have != _HS_HEAD.pack(MAGIC, 0, 0, 0)[: len(have)]:
            raise HAProtocolError(f"not an rmq HA handshake (first bytes {have.hex()})")
        return None
    magic, version, kind, length = _HS_HEAD.unpack_from(mv, pos)
    if magic != MAGIC:
        raise HAProtocolError(f"not an rmq HA handshake (magic 0x{magic & 0xFFFFFFFF:08x})")
    if version != VERSION:
        raise HAProtocolError(f"HA handshake version {version} is not supported (we speak {VERSION})")
    if kind not in expect:
        raise HAProtocolError(f"unexpected HA handshake frame type {kind}")
    if length < 0 or length > MAX_HANDSHAKE_PAYLOAD:
        raise HAProtocolError(f"HA handshake payload length {length} out of range")
    return kind, length


def decode_hello(payload: memoryview) -> SlaveHello:
    f = _Fields(payload)
    cluster = f.string("cluster")
    name = f.string("brokerName")
    broker_id, epoch, start, max_off, fsize, flags = f.unpack(_HELLO_TAIL, "HELLO fields")
    epochs = f.epochs() if flags & FLAG_EPOCHS else None
    proof = None
    if flags & FLAG_PROOF:
        access_key = f.string("accessKey")
        f.need(PROOF_SIZE, "proof")
        signed = bytes(payload[: f.pos])
        proof = HelloProof(access_key, bytes(payload[f.pos : f.pos + PROOF_SIZE]), signed)
        f.pos += PROOF_SIZE
    return SlaveHello(cluster, name, broker_id, epoch, start, max_off, fsize, flags, epochs, proof)


def decode_challenge(payload: memoryview) -> MasterChallenge:
    f = _Fields(payload)
    f.need(NONCE_SIZE, "challenge nonce")
    return MasterChallenge(bytes(payload[:NONCE_SIZE]))


def decode_answer(kind: int, payload: memoryview, expect_epochs: bool = False) -> MasterAccept | MasterReject:
    """expect_epochs: the HELLO asked for the master's history (FLAG_EPOCHS); it is
    then read when the payload goes on (a master that does not know the flag sends
    none)."""
    f = _Fields(payload)
    if kind == ACCEPT:
        epoch, max_off = f.unpack(_QQ, "ACCEPT fields")
        epochs = f.epochs() if expect_epochs and f.pos < len(payload) else None
        return MasterAccept(epoch, max_off, epochs)
    (epoch,) = f.unpack(_Q, "REJECT epoch")
    return MasterReject(epoch, f.string("reject reason"))


class MasterStreamReader:
    """What the master reads from one slave: ``feed(bytes) -> [SlaveHello | OffsetReport]``.

    First a HELLO frame, then 8-byte reports. Of the reports completed by one feed only
    the last is returned (spec 5.1: the master takes the last complete 8-byte value;
    the earlier ones are older acks of the same slave)."""

    __slots__ = ("_buf", "_hello_done", "_error")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._hello_done = False
        self._error: str | None = None

    @property
    def handshake_done(self) -> bool:
        return self._hello_done

    def feed(self, data: Buffer) -> list[SlaveHello | OffsetReport]:
        if self._error is not None:
            raise HAProtocolError(self._error)
        try:
            return self._feed(data)
        except HAProtocolError as e:
            self._error = str(e)
            self._buf = bytearray()
            raise

    def _feed(self, data: Buffer) -> list[SlaveHello | OffsetReport]:
        out: list[SlaveHello | OffsetReport] = []
        buf = self._buf
        if self._hello_done and not buf and len(data) == REPORT_SIZE:
            # the steady state: one report per read
            out.append(OffsetReport(_Q.unpack_from(data)[0]))
            return out
        buf += data
        pos = 0
        mv = memoryview(buf)
        try:
            if not self._hello_done:
                head = _parse_handshake_head(mv, 0, (HELLO,))
                if head is None:
                    return out
                _, length = head
                end = _HS_HEAD.size + length
                if len(mv) < end:
                    return out
                out.append(decode_hello(mv[_HS_HEAD.size : end]))
                self._hello_done = True
                pos = end
            n = len(mv) - pos
            if n >= REPORT_SIZE:
                last = pos + (n - n % REPORT_SIZE) - REPORT_SIZE
                out.append(OffsetReport(_Q.unpack_from(mv, last)[0]))
                pos = last + REPORT_SIZE
        finally:
            mv.release()
        del buf[:pos]
        return out


class SlaveStreamReader:
    """What a slave reads from its master: a CHALLENGE (a master with a credential),
    an ACCEPT/REJECT frame, then transfers.

    Receive either with ``feed(bytes)`` or, without copying, by writing into
    ``get_buffer()`` and calling ``buffer_updated(n)`` (asyncio.BufferedProtocol);
    then ``events()`` returns everything complete. Transfer data are views of the
    buffer, valid until the next ``get_buffer``/``feed``.
    """

    __slots__ = ("_buf", "_mv", "_cap", "_r", "_w", "_answered", "_challenged", "_error", "_min_free", "expect_epochs")

    def __init__(
        self, capacity: int = DEFAULT_SLAVE_BUFFER, min_free: int = 64 * 1024, expect_epochs: bool = False
    ) -> None:
        if capacity < MAX_HANDSHAKE_PAYLOAD + _HS_HEAD.size:
            raise ValueError("the buffer must hold a whole handshake frame")
        self._buf = bytearray(capacity)
        self._mv = memoryview(self._buf)
        self._cap = capacity
        self._min_free = min(min_free, capacity // 2)
        self._r = 0
        self._w = 0
        self._answered = False
        self._challenged = False
        self._error: str | None = None
        self.expect_epochs = expect_epochs  # the HELLO carried FLAG_EPOCHS

    @property
    def max_body(self) -> int:
        return self._cap - TRANSFER_HEADER_SIZE

    @property
    def buffered(self) -> int:
        return self._w - self._r

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Free space to receive into; moves unparsed bytes to the front when the
        space left is small (RocketMQ's HAClient swaps its two buffers there)."""
        if self._cap - self._w < self._min_free:
            self._compact()
        return self._mv[self._w :]

    def buffer_updated(self, nbytes: int) -> None:
        self._w += nbytes

    def _compact(self) -> None:
        if self._r:
            n = self._w - self._r
            self._buf[:n] = self._mv[self._r : self._w]
            self._r = 0
            self._w = n

    def feed(self, data: Buffer) -> None:
        """Copy data in (tests, plain protocols); call events() between feeds."""
        n = len(data) if not isinstance(data, memoryview) else data.nbytes
        if self._cap - self._w < n:
            self._compact()
            if self._cap - self._w < n:
                raise HAProtocolError(f"{n} bytes do not fit the receive buffer ({self._w - self._r} unparsed)")
        self._buf[self._w : self._w + n] = data
        self._w += n

    def events(self) -> list[MasterChallenge | MasterAccept | MasterReject | Transfer]:
        if self._error is not None:
            raise HAProtocolError(self._error)
        try:
            return self._events()
        except HAProtocolError as e:
            self._error = str(e)
            raise

    def _events(self) -> list[MasterChallenge | MasterAccept | MasterReject | Transfer]:
        out: list[MasterChallenge | MasterAccept | MasterReject | Transfer] = []
        mv = self._mv
        r, w = self._r, self._w
        if not self._answered:
            # at most one CHALLENGE, and only before the answer
            head = _parse_handshake_head(
                mv[:w], r, (ACCEPT, REJECT) if self._challenged else (CHALLENGE, ACCEPT, REJECT)
            )
            if head is None:
                return out
            kind, length = head
            end = r + _HS_HEAD.size + length
            if w < end:
                return out
            if kind == CHALLENGE:
                out.append(decode_challenge(mv[r + _HS_HEAD.size : end]))
                self._challenged = True
                self._r = end
                return out + self._events()
            ans = decode_answer(kind, mv[r + _HS_HEAD.size : end], self.expect_epochs)
            out.append(ans)
            self._answered = True
            r = end
            if isinstance(ans, MasterReject):
                self._r = r
                return out
        unpack = _TRANSFER.unpack_from
        limit = self.max_body
        while w - r >= TRANSFER_HEADER_SIZE:
            offset, size = unpack(mv, r)
            if size < 0 or size > limit:
                raise HAProtocolError(
                    f"transfer of {size} bytes at offset {offset} does not fit the {self._cap}-byte receive buffer"
                )
            if offset < 0:
                raise HAProtocolError(f"transfer at negative offset {offset}")
            end = r + TRANSFER_HEADER_SIZE + size
            if end > w:
                break
            out.append(Transfer(offset, mv[r + TRANSFER_HEADER_SIZE : end]))
            r = end
        self._r = r
        if r == w:
            self._r = self._w = 0
        return out
