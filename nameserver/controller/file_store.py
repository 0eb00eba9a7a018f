"""The embedded controller's state: one msgpack file, ``controller.msgpack`` next to
the KV config, replaced atomically (fsync + rename) before any answer that depends
on it. One controller per cluster: nothing else writes the file, so there is no
conflict to detect."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nameserver.controller.election import Controller
from nameserver.controller.state import GroupRecord
from rmq.common.fs import atomic_write

__all__ = ["FileStateStore"]


class FileStateStore:
    def __init__(self, path: Path | None) -> None:
        self.path = path  # None: kept in memory only (tests without a KV path)
        self._records: dict[str, GroupRecord] = {}
        self._write_lock = asyncio.Lock()

    def describe(self) -> str:
        return f"file {self.path}" if self.path is not None else "memory"

    def read_file(self) -> list[GroupRecord]:
        """Blocking read; ValueError naming the file when it is damaged: epochs handed
        out again would let two masters write one epoch."""
        if self.path is None or not self.path.exists():
            return []
        try:
            return Controller.parse_snapshot(self.path.read_bytes())
        except ValueError as e:
            raise ValueError(f"{self.path}: {e}") from None

    async def load(self) -> list[GroupRecord]:
        records = await asyncio.to_thread(self.read_file)
        self._records = {r.name: r for r in records}
        return records

    async def peek(self) -> list[GroupRecord]:
        return list(self._records.values())

    async def save(self, records: list[GroupRecord]) -> None:
        """Durable when it returns; OSError if the file could not be written."""
        async with self._write_lock:
            for r in records:
                self._records[r.name] = r
            if self.path is not None:
                data = Controller.snapshot_of(self._records.values())
                await asyncio.to_thread(atomic_write, str(self.path), data)

    async def close(self) -> None:
        async with self._write_lock:
            pass
