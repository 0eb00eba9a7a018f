"""Metadata files: msgpack under config/, atomic replace, RocketMQ's JSON adopted once.

Every manager (topics, consumer offsets, subscription groups, delay offsets) stores one
table through a MetadataFile. The bytes are produced on the event loop (a consistent
snapshot); writing, fsync and rename run in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import msgpack

from rmq.common.fs import atomic_write

log = logging.getLogger("rmq.broker.persist")


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
