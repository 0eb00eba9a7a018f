"""Writing the broker's metadata (topics, consumer offsets, subscription groups) to its
config files: periodically, at once after a change that must survive a crash, at shutdown."""

from __future__ import annotations

import logging

from rmq.broker.offsets import ConsumerOffsetManager
from rmq.broker.schedule import ScheduleMessageService
from rmq.broker.subscriptions import SubscriptionGroupManager
from rmq.broker.topics import TopicConfigManager
from rmq.runtime.service import TaskSet

__all__ = ["MetadataPersistence"]

log = logging.getLogger("rmq.broker")


class MetadataPersistence:
    def __init__(
        self, topics: TopicConfigManager, offsets: ConsumerOffsetManager, subscriptions: SubscriptionGroupManager
    ) -> None:
        self.topics = topics
        self.offsets = offsets
        self.subscriptions = subscriptions
        self._tasks = TaskSet(log)
        self._stopping = False

    async def persist_metadata(self) -> None:
        """What changed since the last write (ConsumerOffsetManager's flush interval)."""
        for mgr in (self.offsets, self.topics, self.subscriptions):
            if mgr.dirty:
                await mgr.persist()

    def schedule_persist(self) -> None:
        """Subscription group changes are written at once, as RocketMQ does."""
        if not self._stopping:
            self._tasks.spawn(self.persist_metadata(), name="persist-metadata")

    async def persist_adopted(self, schedule: ScheduleMessageService) -> None:
        """Adopted RocketMQ JSON metadata becomes msgpack right away."""
        for mgr in (self.topics, self.offsets, self.subscriptions, schedule):
            if mgr.dirty:
                await mgr.persist()

    async def close(self) -> None:
        """No more writes on change; the ones under way finish."""
        self._stopping = True
        await self._tasks.wait()

    async def persist_all(self) -> None:
        """Everything, at shutdown; a file that cannot be written is logged."""
        for mgr in (self.offsets, self.topics, self.subscriptions):
            try:
                await mgr.persist()
            except OSError as e:
                log.error("persisting %s failed: %s", mgr.file.path, e)
