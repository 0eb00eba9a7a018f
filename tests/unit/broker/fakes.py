"""Fakes of the broker's narrow capabilities (rmq/broker/seams.py) for processor tests:
no store files, no sockets. Each records what it was asked, so a test can check it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rmq.broker.subscriptions import SubscriptionGroupConfig
from rmq.protocol.bodies import MessageQueue, TopicConfig, TopicConfigSerializeWrapper
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.message import MessageExt, MessageExtBatch, MessageExtBrokerInner, pack_host
from rmq.store.message_filter import MessageFilter
from rmq.store.results import GetMessageResult, GetMessageStatus, PutMessageResult, PutMessageStatus, QueryMessageResult


@dataclass
class FakeConn:
    remote_address: str = "10.0.0.7:50123"
    closed: bool = False
    attrs: dict[str, Any] = field(default_factory=dict)
    sent: list[RemotingCommand] = field(default_factory=list)

    def send_response(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)

    def send_oneway(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)


class FakeStore:
    """StoreReader + StoreWriter: a put answers with ``put_status`` (and ``waiter``);
    queues are {(topic, qid): (min, max)}; get_messages answers ``get_result``."""

    def __init__(self) -> None:
        self.store_host = pack_host("10.0.0.1", 10911)
        self.put_status = PutMessageStatus.PUT_OK
        self.waiter: Awaitable[PutMessageStatus] | None = None
        self.puts: list[MessageExtBrokerInner | MessageExtBatch] = []
        self.queues: dict[tuple[str, int], tuple[int, int]] = {}
        self.store_times: dict[tuple[str, int, int], int] = {}
        self.get_result = GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE)
        self.gets: list[tuple[str, str, int, int, int]] = []
        self.next_phy = 4096

    # --- writes
    def _put(self, msg: MessageExtBrokerInner | MessageExtBatch, n: int):
        self.puts.append(msg)
        lo, hi = self.queues.get((msg.topic, msg.queue_id), (0, 0))
        result = PutMessageResult(
            self.put_status,
            wrote_offset=self.next_phy,
            wrote_bytes=200 * n,
            queue_offset=hi,
            msg_num=n,
            store_host=self.store_host,
        )
        if self.put_status.stored:
            self.queues[(msg.topic, msg.queue_id)] = (lo, hi + n)
            self.next_phy += 200 * n
        return result, self.waiter

    def put_nowait(self, msg: MessageExtBrokerInner):
        return self._put(msg, 1)

    def put_batch_nowait(self, batch: MessageExtBatch):
        return self._put(batch, len(batch.items))

    def commit_waiter(self, result: PutMessageResult) -> Awaitable[PutMessageStatus] | None:
        # the fake writes nothing: a put's waiter (if any) is its commit too
        return self.waiter if result.status.stored else None

    # --- reads
    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult:
        self.gets.append((group, topic, queue_id, offset, max_msg_nums))
        return self.get_result

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.queues.get((topic, queue_id), (0, 0))[1]

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        q = self.queues.get((topic, queue_id))
        return q[0] if q is not None else -1

    def get_offset_in_queue_by_time(
        self, topic: str, queue_id: int, timestamp: int, boundary: str | None = None
    ) -> int:
        return self.get_min_offset_in_queue(topic, queue_id)

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        return -1

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        return self.store_times.get((topic, queue_id, cq_offset), -1)

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None:
        return None

    def select_one_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> bytes | None:
        return None

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryMessageResult:
        return QueryMessageResult()

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, consume_offset: int) -> bool:
        return False


class FakeTopics:
    def __init__(self, *configs: TopicConfig, auto_create: bool = False) -> None:
        self.table = {tc.topic_name: tc for tc in configs}
        self.auto_create_topic = auto_create
        self.created: list[str] = []

    def select(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def is_order_topic(self, topic: str) -> bool:
        tc = self.table.get(topic)
        return tc is not None and tc.order

    def create_topic_in_send_message_method(
        self, topic: str, default_topic: str, remote_addr: str, client_default_queue_nums: int, topic_sys_flag: int
    ) -> TopicConfig | None:
        if not self.auto_create_topic:
            return None
        tc = self.table[topic] = TopicConfig(topic, client_default_queue_nums, client_default_queue_nums)
        self.created.append(topic)
        return tc

    def create_topic_in_send_message_back_method(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int
    ) -> TopicConfig:
        tc = self.table.get(topic)
        if tc is None:
            tc = self.table[topic] = TopicConfig(topic, queue_nums, queue_nums, perm)
            self.created.append(topic)
        return tc

    def update_topic_config(self, tc: TopicConfig) -> None:
        self.table[tc.topic_name] = tc

    def delete_topic_config(self, topic: str) -> bool:
        return self.table.pop(topic, None) is not None

    def serialize_wrapper(self) -> TopicConfigSerializeWrapper:
        raise AssertionError("not used by these tests")

    def bump_data_version(self) -> None:
        pass


class FakeSubscriptions:
    def __init__(self, *groups: SubscriptionGroupConfig) -> None:
        self.table = {g.groupName: g for g in groups}
        self.auto_create = False

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        self.table[cfg.groupName] = cfg

    def delete(self, group: str) -> bool:
        return self.table.pop(group, None) is not None

    def names(self) -> list[str]:
        return list(self.table)

    def snapshot(self) -> dict[str, Any]:
        return {"subscriptionGroupTable": {k: v.to_dict() for k, v in self.table.items()}}


class FakeOffsets:
    def __init__(self) -> None:
        self.table: dict[tuple[str, str, int], int] = {}
        self.commits: list[tuple[str, str, str, int, int]] = []

    def commit_offset(self, client: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.commits.append((client, group, topic, queue_id, offset))
        self.table[(group, topic, queue_id)] = offset

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self.table.get((group, topic, queue_id), -1)

    def topics_of_group(self, group: str) -> set[str]:
        return {t for g, t, _ in self.table if g == group}

    def groups_of_topic(self, topic: str) -> set[str]:
        return {g for g, t, _ in self.table if t == topic}

    def remove_topic(self, topic: str) -> None:
        self.table = {k: v for k, v in self.table.items() if k[1] != topic}

    def remove_group(self, group: str, topics: Iterable[str] | None = None) -> None:
        self.table = {k: v for k, v in self.table.items() if k[0] != group}

    def snapshot(self) -> dict[str, Any]:
        return {"offsetTable": {}}


class FakeStats:
    def __init__(self) -> None:
        self.puts: list[tuple[PutMessageStatus, str]] = []
        self.gets: list[tuple[str, str, int, int]] = []
        self.misses = 0
        self.send_backs: list[tuple[str, str]] = []

    def on_put(self, result: PutMessageResult, request: RemotingCommand, topic: str = "") -> None:
        self.puts.append((result.status, topic))

    def on_send_back(self, group: str, topic: str) -> None:
        self.send_backs.append((group, topic))

    def on_get(
        self, group: str, topic: str, result: GetMessageResult, queue_id: int = -1, latency_ms: int = -1
    ) -> None:
        self.gets.append((group, topic, queue_id, len(result.buffers)))

    def on_get_done(self, elapsed_ms: int, found: bool) -> None:
        self.misses += not found


class FakePullHold:
    def __init__(self) -> None:
        self.parked: list[tuple[str, int, int, int]] = []

    def suspend(
        self, conn: Any, request: Any, topic: str, queue_id: int, pull_from_offset: int, timeout_ms: int
    ) -> None:
        self.parked.append((topic, queue_id, pull_from_offset, timeout_ms))


class FakeMetadata:
    def __init__(self) -> None:
        self.persisted = 0
        self.registered = 0

    async def persist_metadata(self) -> None:
        self.persisted += 1

    async def register_broker_all(self) -> None:
        self.registered += 1


class FakeDelayOffsets:
    def snapshot(self) -> dict[str, Any]:
        return {"offsetTable": {1: 5}}


class FakeHA:
    def ha_runtime_info(self) -> dict[str, Any]:
        return {"brokerRole": "ASYNC_MASTER"}


class FakeRuntime:
    def runtime_table(self) -> dict[str, str]:
        return {"brokerVersionDesc": "V4_9_8"}


def done_future(status: PutMessageStatus) -> asyncio.Future[PutMessageStatus]:
    f: asyncio.Future[PutMessageStatus] = asyncio.get_running_loop().create_future()
    f.set_result(status)
    return f


__all__ = [
    "FakeConn",
    "FakeStore",
    "FakeTopics",
    "FakeSubscriptions",
    "FakeOffsets",
    "FakeStats",
    "FakePullHold",
    "FakeMetadata",
    "FakeDelayOffsets",
    "FakeHA",
    "FakeRuntime",
    "done_future",
    "MessageQueue",
]
