"""ConsumerOffsetManager: committed offsets per topic@group and queue."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from rmq.broker.persist import MetadataFile

log = logging.getLogger("rmq.broker.offsets")

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    def __init__(self, config_dir: str) -> None:
        self.file = MetadataFile(config_dir, "consumerOffset", "consumerOffset.json")
        # "topic@group" -> {queueId: offset}, as RocketMQ's offsetTable
        self.offset_table: dict[str, dict[int, int]] = {}
        self.dirty = False

    def load(self) -> None:
        data, adopted = self.file.load()
        if not data:
            return
        table = data.get("offsetTable") or {}
        for key, queues in table.items():
            self.offset_table[str(key)] = {int(q): int(o) for q, o in (queues or {}).items()}
        self.dirty = adopted

    def snapshot(self) -> dict:
        return {"offsetTable": {k: dict(v) for k, v in self.offset_table.items()}}

    async def persist(self) -> None:
        self.dirty = False
        await self.file.persist(self.snapshot())

    def persist_blocking(self) -> None:
        self.dirty = False
        self.file.write_blocking(self.snapshot())

    # --- offsets ---
    def commit_offset(self, client: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
        queues = self.offset_table.get(key)
        if queues is None:
            queues = self.offset_table[key] = {}
        prev = queues.get(queue_id)
        if prev is not None and offset < prev:
            log.debug("offset of %s queue %d moves back %d -> %d (client %s)", key, queue_id, prev, offset, client)
        queues[queue_id] = offset
        self.dirty = True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        queues = self.offset_table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}")
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.offset_table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}))

    def topics_of_group(self, group: str) -> set[str]:
        return {
            k.split(TOPIC_GROUP_SEPARATOR, 1)[0]
            for k in self.offset_table
            if k.split(TOPIC_GROUP_SEPARATOR, 1)[1:] == [group]
        }

    def groups_of_topic(self, topic: str) -> set[str]:
        return {
            k.split(TOPIC_GROUP_SEPARATOR, 1)[1]
            for k in self.offset_table
            if TOPIC_GROUP_SEPARATOR in k and k.split(TOPIC_GROUP_SEPARATOR, 1)[0] == topic
        }

    def groups(self) -> set[str]:
        return {k.split(TOPIC_GROUP_SEPARATOR, 1)[1] for k in self.offset_table if TOPIC_GROUP_SEPARATOR in k}

    def remove_group(self, group: str, topics: Iterable[str] | None = None) -> None:
        for key in list(self.offset_table):
            t, _, g = key.partition(TOPIC_GROUP_SEPARATOR)
            if g == group and (topics is None or t in topics):
                del self.offset_table[key]
                self.dirty = True

    def remove_topic(self, topic: str) -> None:
        for key in list(self.offset_table):
            if key.partition(TOPIC_GROUP_SEPARATOR)[0] == topic:
                del self.offset_table[key]
                self.dirty = True

    def merge_all(self, table: dict[str, dict[int, int]]) -> bool:
        """A slave takes its master's offsets key by key (RocketMQ's putAll); True if
        anything changed."""
        changed = False
        for k, v in table.items():
            if self.offset_table.get(k) != v:
                self.offset_table[k] = dict(v)
                changed = True
        if changed:
            self.dirty = True
        return changed

    def replace_all(self, table: dict[str, dict[int, int]]) -> None:
        """A slave takes its master's table wholesale."""
        self.offset_table = {k: dict(v) for k, v in table.items()}
        self.dirty = True
