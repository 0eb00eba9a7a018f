"""Epoch entries: which master wrote which CommitLog range (sans-IO).

After a failover every broker of a group keeps a history of epochs: epoch N began at
CommitLog offset S when its master was elected (RocketMQ 5's ``EpochEntry`` and
``EpochFileCache``, auto-switch HA). One master per epoch means two replicas that hold
the same epoch starting at the same offset hold the same bytes there, which is what
lets a returning old master find where its log and the new master's part ways.

Binary layout of one entry (our own; big-endian like every other rmq frame), 20 bytes:

====== ====== ===========================================================
offset size   field
====== ====== ===========================================================
0      4      epoch, int32, >= 0
4      8      start offset, int64, >= 0
12     8      end offset, int64; -1 = open (the epoch is still being written)
====== ====== ===========================================================

A list is an int32 count followed by that many entries (4 + 20 n bytes). Decoders
accept exactly that many bytes: a short or long buffer is a ProtocolError, as is an
entry whose end lies before its start. ``decode_epoch_list`` also checks that the list
is a history: epochs strictly increasing, start offsets non-decreasing (an epoch in
which nothing was written has start == end == the next epoch's start), each end open
(implied by the next start) or equal to the next start.

RocketMQ's own HA handshake sends 12-byte entries (epoch, start) and lets the receiver
fill in each end from the next start plus the sender's max offset; we carry the end so
the entries are self-contained, and ``close_last`` does that fill-in where needed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rmq.protocol.errors import ProtocolError

__all__ = [
    "EPOCH_ENTRY_SIZE",
    "EpochEntry",
    "encode_epoch_entry",
    "decode_epoch_entry",
    "encode_epoch_list",
    "decode_epoch_list",
    "validate_history",
    "close_last",
    "find_consistent_point",
]

EPOCH_ENTRY_SIZE = 20
_ENTRY = struct.Struct(">iqq")
_COUNT = struct.Struct(">i")
_INT32_MAX = 0x7FFFFFFF
_INT64_MAX = 0x7FFFFFFFFFFFFFFF
# A list longer than this is garbage, not a history (one entry per failover).
MAX_EPOCH_LIST = 1 << 16


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """Epoch ``epoch`` covers CommitLog offsets [start_offset, end_offset); an
    end of None means open: the epoch is current and its end is the log's end."""

    epoch: int
    start_offset: int
    end_offset: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.epoch <= _INT32_MAX:
            raise ValueError(f"epoch {self.epoch} outside [0, 2^31)")
        if not 0 <= self.start_offset <= _INT64_MAX:
            raise ValueError(f"start offset {self.start_offset} outside [0, 2^63)")
        if self.end_offset is not None and not self.start_offset <= self.end_offset <= _INT64_MAX:
            raise ValueError(f"epoch {self.epoch}: end offset {self.end_offset} before its start {self.start_offset}")

    def with_end(self, end_offset: int | None) -> EpochEntry:
        return EpochEntry(self.epoch, self.start_offset, end_offset)

    def __str__(self) -> str:
        end = "open" if self.end_offset is None else str(self.end_offset)
        return f"epoch {self.epoch} [{self.start_offset}, {end})"


def encode_epoch_entry(entry: EpochEntry) -> bytes:
    return _ENTRY.pack(entry.epoch, entry.start_offset, -1 if entry.end_offset is None else entry.end_offset)


def _entry_at(buf: bytes | bytearray | memoryview, pos: int) -> EpochEntry:
    epoch, start, end = _ENTRY.unpack_from(buf, pos)
    if end < -1:
        raise ProtocolError(f"epoch entry at byte {pos}: end offset {end} is negative")
    try:
        return EpochEntry(epoch, start, None if end == -1 else end)
    except ValueError as e:
        raise ProtocolError(f"epoch entry at byte {pos}: {e}") from None


def decode_epoch_entry(buf: bytes | bytearray | memoryview) -> EpochEntry:
    if len(buf) != EPOCH_ENTRY_SIZE:
        raise ProtocolError(f"an epoch entry is {EPOCH_ENTRY_SIZE} bytes, got {len(buf)}")
    return _entry_at(buf, 0)


def encode_epoch_list(entries: Sequence[EpochEntry]) -> bytes:
    if len(entries) > MAX_EPOCH_LIST:
        raise ValueError(f"{len(entries)} epoch entries; at most {MAX_EPOCH_LIST}")
    return _COUNT.pack(len(entries)) + b"".join(encode_epoch_entry(e) for e in entries)


def decode_epoch_list(buf: bytes | bytearray | memoryview) -> list[EpochEntry]:
    """The entries of an encoded list; ProtocolError if the bytes are not exactly one
    list or the entries are not a history (see validate_history)."""
    if len(buf) < _COUNT.size:
        raise ProtocolError(f"epoch list of {len(buf)} bytes has no count")
    (n,) = _COUNT.unpack_from(buf, 0)
    if not 0 <= n <= MAX_EPOCH_LIST:
        raise ProtocolError(f"epoch list count {n} outside [0, {MAX_EPOCH_LIST}]")
    want = _COUNT.size + n * EPOCH_ENTRY_SIZE
    if len(buf) != want:
        raise ProtocolError(f"epoch list of {n} entries is {want} bytes, got {len(buf)}")
    entries = [_entry_at(buf, _COUNT.size + i * EPOCH_ENTRY_SIZE) for i in range(n)]
    problem = validate_history(entries)
    if problem is not None:
        raise ProtocolError(problem)
    return entries


def validate_history(entries: Sequence[EpochEntry]) -> str | None:
    """Why entries are not a history (None if they are): epochs strictly increasing,
    starts non-decreasing, and every end but the last either open (implied: the next
    start) or equal to the next start."""
    for i in range(1, len(entries)):
        a, b = entries[i - 1], entries[i]
        if b.epoch <= a.epoch:
            return f"epochs not increasing: {a.epoch} then {b.epoch}"
        if b.start_offset < a.start_offset:
            return f"epoch {b.epoch} starts at {b.start_offset}, before epoch {a.epoch} ({a.start_offset})"
        if a.end_offset is not None and a.end_offset != b.start_offset:
            return f"epoch {a.epoch} ends at {a.end_offset} but epoch {b.epoch} starts at {b.start_offset}"
    return None


def _implied_ends(entries: Iterable[EpochEntry]) -> list[EpochEntry]:
    """Sorted by epoch, each open end but the last set to the next start."""
    out = sorted(entries, key=lambda e: e.epoch)
    for i in range(len(out) - 1):
        if out[i].end_offset is None:
            out[i] = out[i].with_end(out[i + 1].start_offset)
    return out


def close_last(entries: Iterable[EpochEntry], max_offset: int) -> list[EpochEntry]:
    """The history with every end filled in: each from the next start, the last one
    from the broker's CommitLog max offset (RocketMQ's setLastEpochEntryEndOffset; a
    last epoch starting after max_offset keeps its start as end: it holds nothing)."""
    out = _implied_ends(entries)
    if out:
        last = out[-1]
        out[-1] = last.with_end(max(max_offset, last.start_offset))
    return out


def find_consistent_point(local: Sequence[EpochEntry], remote: Sequence[EpochEntry]) -> int:
    """The highest CommitLog offset up to which the two logs are the same, -1 if the
    histories share no epoch (e.g. one is empty: a new replica, copy everything).

    The rule of RocketMQ's EpochFileCache.findConsistentPoint: walk local from its newest
    epoch down; the first epoch the remote history also has *with the same start offset*
    is the last one both wrote; they agree up to the smaller of its two ends. (An epoch
    with a different start on each side was not written by one master at one place, so
    the walk goes on to older epochs.) Close both histories with their brokers' max
    offsets first (close_last): an open end of a last epoch counts as unbounded, and two
    open ends of the common epoch leave nothing to compare, which raises ValueError.
    """
    by_epoch = {e.epoch: e for e in _implied_ends(remote)}
    for mine in reversed(_implied_ends(local)):
        theirs = by_epoch.get(mine.epoch)
        if theirs is None or theirs.start_offset != mine.start_offset:
            continue
        ends = [e for e in (mine.end_offset, theirs.end_offset) if e is not None]
        if not ends:
            raise ValueError(
                f"both histories are open in epoch {mine.epoch}: close them "
                "with each broker's max offset (close_last) first"
            )
        return min(ends)
    return -1
