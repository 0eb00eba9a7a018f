"""EpochFile: one broker's epoch history, kept in ``<storePathRootDir>/epochFileCheckpoint``.

The file is RocketMQ 5's (``CheckpointFile`` + ``EpochFileCache.EpochEntrySerializer``),
so a RocketMQ 5 store's history is read as is and ours is readable by it::

    2            <- number of entries
    1-0          <- epoch-startOffset, one line each, oldest first
    2-1048576

End offsets are not stored: each ends where the next begins, the last one is open
(its end is the CommitLog's max offset).

Writes replace the file atomically (temp file, fsync, rename, fsync of the directory),
so a crash leaves the old history or the new one, never a torn file. The history
changes only at role changes (election, a returning master's truncation), a handful
of times in a broker's life: the mutators are coroutines that write in a worker
thread, one write at a time, and return once the new history is durable; callers on
the loop never wait on the disk. ``load`` is blocking (start-up; one small file).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence

from rmq.common.fs import atomic_write
from rmq.protocol.epoch import EpochEntry, close_last, validate_history

__all__ = ["EPOCH_FILE_NAME", "EpochFile", "EpochFileError"]

log = logging.getLogger("rmq.ha.epoch")

#: MessageStoreConfig.getStorePathEpochFile(): storePathRootDir + "/epochFileCheckpoint"
EPOCH_FILE_NAME = "epochFileCheckpoint"


class EpochFileError(Exception):
    """The epoch file cannot be read, or a change would break the history."""


def _parse(path: str, text: str) -> list[EpochEntry]:
    lines = [ln.strip() for ln in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise EpochFileError(f"{path}: empty (no entry count line)")
    try:
        count = int(lines[0])
    except ValueError:
        raise EpochFileError(f"{path}: first line {lines[0]!r} is not an entry count") from None
    entries: list[EpochEntry] = []
    for lineno, line in enumerate(lines[1:], 2):
        epoch_s, sep, start_s = line.partition("-")
        try:
            if not sep:
                raise ValueError
            entries.append(EpochEntry(int(epoch_s), int(start_s)))
        except ValueError:
            raise EpochFileError(f"{path}: line {lineno} {line!r} is not <epoch>-<startOffset>") from None
    if len(entries) != count:
        raise EpochFileError(f"{path}: expects {count} entries, found {len(entries)}")
    problem = validate_history(entries)
    if problem is not None:
        raise EpochFileError(f"{path}: not a history: {problem}")
    return entries


def _format(entries: Sequence[EpochEntry]) -> bytes:
    lines = [str(len(entries))] + [f"{e.epoch}-{e.start_offset}" for e in entries]
    return ("\n".join(lines) + "\n").encode("ascii")


class EpochFile:
    """The history of one broker: entries oldest first, epochs strictly increasing,
    starts non-decreasing. Only the loop thread calls it."""

    def __init__(self, path: str, entries: Sequence[EpochEntry] = ()) -> None:
        self.path = path
        self._entries: list[EpochEntry] = [EpochEntry(e.epoch, e.start_offset) for e in entries]
        self._write_lock = asyncio.Lock()

    @classmethod
    def load(cls, store_root: str) -> EpochFile:
        """The history in store_root (empty if there is no file yet). Blocking.
        EpochFileError names the file and what is wrong with it."""
        path = os.path.join(store_root, EPOCH_FILE_NAME)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return cls(path)
        except OSError as e:
            raise EpochFileError(f"{path}: cannot read: {e.strerror}") from None
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            raise EpochFileError(f"{path}: not an epoch file (binary content)") from None
        ef = cls(path, _parse(path, text))
        log.info("epoch file %s: %s", path, ", ".join(map(str, ef.entries())) or "empty")
        return ef

    # ------------------------------------------------------------------ reads
    def entries(self, max_offset: int | None = None) -> list[EpochEntry]:
        """The history, each end filled from the next start; the last one open, or
        ending at max_offset when given (the broker's CommitLog max offset)."""
        if max_offset is not None:
            return close_last(self._entries, max_offset)
        out = close_last(self._entries, 0)
        if out:
            out[-1] = out[-1].with_end(None)
        return out

    def last_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def last_epoch(self) -> int:
        """The newest epoch, -1 if there is none (RocketMQ's lastEpoch)."""
        return self._entries[-1].epoch if self._entries else -1

    def epoch_and_start(self) -> tuple[int, int]:
        """(last epoch, its start offset), (0, -1) with no history: the shape of the
        HA service's and HA client's epoch_provider."""
        last = self.last_entry()
        return (last.epoch, last.start_offset) if last is not None else (0, -1)

    def __len__(self) -> int:
        return len(self._entries)

    # ------------------------------------------------------------------ changes
    async def append(self, epoch: int, start_offset: int) -> bool:
        """Record that epoch began at start_offset; durable on return.

        False (nothing written) when it is already the last entry: brokers hear the
        group's epoch on every heartbeat. EpochFileError for an older or equal epoch
        with another start, or a start before the last one's (the log never shrinks
        without truncate_suffix first).
        """
        entry = EpochEntry(epoch, start_offset)
        async with self._write_lock:
            last = self.last_entry()
            if last is not None:
                if last == entry:
                    return False
                if epoch <= last.epoch:
                    raise EpochFileError(
                        f"{self.path}: epoch {epoch} (start {start_offset}) is not newer than the last one, {last}"
                    )
                if start_offset < last.start_offset:
                    raise EpochFileError(
                        f"{self.path}: epoch {epoch} would start at {start_offset}, before the last one, {last}"
                    )
            await self._save(self._entries + [entry])
        log.info("epoch file %s: appended %s", self.path, entry)
        return True

    async def truncate_suffix(self, offset: int) -> list[EpochEntry]:
        """Drop the entries that start at or after offset (the store was truncated
        there: RocketMQ's truncateSuffixByOffset); the last one left becomes open.
        Returns what was dropped; durable on return."""
        return await self._drop(lambda e: e.start_offset >= offset, f"at offset {offset}")

    async def truncate_from_epoch(self, epoch: int) -> list[EpochEntry]:
        """Drop the entries of epoch and later (RocketMQ's truncateSuffixByEpoch: a
        broker told to lead an epoch it already has an older record of)."""
        return await self._drop(lambda e: e.epoch >= epoch, f"from epoch {epoch}")

    async def _drop(self, doomed: Callable[[EpochEntry], bool], what: str) -> list[EpochEntry]:
        async with self._write_lock:
            keep = [e for e in self._entries if not doomed(e)]
            dropped = [e for e in self._entries if doomed(e)]
            if dropped:
                await self._save(keep)
        if dropped:
            log.info("epoch file %s: truncated %s, dropped %s", self.path, what, ", ".join(map(str, dropped)))
        return dropped

    async def _save(self, entries: list[EpochEntry]) -> None:
        """Write entries, then adopt them (a failed write changes nothing). Caller
        holds the write lock: checks and the write see one history."""
        await asyncio.to_thread(atomic_write, self.path, _format(entries))
        self._entries = entries
