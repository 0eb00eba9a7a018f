"""Metadata files: msgpack under config/, atomic replace, RocketMQ's JSON adopted once.

Every manager (topics, consumer offsets, subscription groups, delay offsets) stores one
table through a MetadataFile. The bytes are produced on the event loop (a consistent
snapshot); writing, fsync and rename run in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgpack

from rmq.common.fs import atomic_write

log = logging.getLogger("rmq.broker.persist")

V = TypeVar("V")


class MetadataFile:
    def __init__(self, config_dir: str, name: str, rocketmq_json_name: str | None = None) -> None:
        self.path = os.path.join(config_dir, f"{name}.msgpack")
        self.json_path = os.path.join(config_dir, rocketmq_json_name) if rocketmq_json_name else None
        self._lock: asyncio.Lock | None = None

    def load(self) -> tuple[dict[str, Any] | None, bool]:
        """(table, adopted_from_json). None when neither file exists."""
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                raw = f.read()
            try:
                data = msgpack.unpackb(raw, raw=False, strict_map_key=False)
            except (ValueError, msgpack.UnpackException) as e:
                raise ValueError(f"{self.path}: not a valid msgpack metadata file: {e}") from None
            if not isinstance(data, dict):
                raise ValueError(f"{self.path}: expected a map at the top level")
            return data, False
        if self.json_path and os.path.exists(self.json_path):
            from rmq.protocol.bodies import loads_fastjson

            with open(self.json_path, "rb") as f:
                raw = f.read()
            data = loads_fastjson(raw) if raw.strip() else {}
            if not isinstance(data, dict):
                raise ValueError(f"{self.json_path}: expected a JSON object")
            log.info("adopting RocketMQ metadata %s (it stays untouched; rmq writes %s)", self.json_path, self.path)
            return data, True
        return None, False

    def encode(self, data: dict[str, Any]) -> bytes:
        return msgpack.packb(data, use_bin_type=True)

    def write_blocking(self, data: dict[str, Any]) -> None:
        atomic_write(self.path, self.encode(data))

    async def persist(self, data: dict[str, Any]) -> None:
        payload = self.encode(data)
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            await asyncio.get_running_loop().run_in_executor(None, atomic_write, self.path, payload)


class MetadataTable(Generic[V]):
    """What the topic and the subscription group managers share (RocketMQ's ConfigManager
    over a named table with a data version): the table and its file, ``dirty`` until the
    next ``persist``, the version moved and ``on_change`` called after every change (the
    broker writes the file, or re-registers, at once)."""

    def __init__(self, file: MetadataFile, log: logging.Logger) -> None:
        self.file = file
        self.table: dict[str, V] = {}
        self.dirty = False
        self.on_change: Callable[[], None] | None = None
        self._log = log

    def snapshot(self) -> dict[str, Any]:
        raise NotImplementedError

    def _next_version(self) -> None:
        raise NotImplementedError

    async def persist(self) -> None:
        self.dirty = False
        await self.file.persist(self.snapshot())

    def _changed(self) -> None:
        self._next_version()
        self.dirty = True
        if self.on_change is not None:
            self.on_change()

    def _delete(self, key: str, what: str) -> bool:
        """Remove ``key`` (logged as "<what> <key> deleted"); False when there was none."""
        if self.table.pop(key, None) is None:
            return False
        self._log.info("%s %s deleted", what, key)
        self._changed()
        return True
