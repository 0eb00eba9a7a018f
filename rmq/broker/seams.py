"""The narrow capabilities broker parts receive instead of the assembled Broker
(rocketmq-rust's processor contexts, as Python Protocols).

A processor or service declares the few of these it uses; ``rmq.broker.broker`` hands it
the real managers and the store, a unit test hands it fakes. Nothing here is called per
message beyond what the real object does: a protocol is only a type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import Any, Protocol

from rmq.broker.client_manager import ClientChannelInfo, ConsumerGroupInfo
from rmq.broker.subscriptions import SubscriptionGroupConfig
from rmq.protocol.bodies import ConsumerData, MessageQueue, TopicConfig, TopicConfigSerializeWrapper
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.message import MessageExt, MessageExtBatch, MessageExtBrokerInner
from rmq.store.consume_queue import ConsumeQueue
from rmq.store.message_filter import MessageFilter
from rmq.store.results import GetMessageResult, PutMessageResult, PutMessageStatus, QueryMessageResult

__all__ = [
    "PutAnswer",
    "StoreWriter",
    "StoreReader",
    "MessageStoreView",
    "ConsumeQueues",
    "ServiceStore",
    "TopicStore",
    "QueueStore",
    "TopicConfigs",
    "ConsumerOffsets",
    "SubscriptionGroups",
    "ConsumerRegistry",
    "ProducerRegistry",
    "QueueLocks",
    "PutStats",
    "GetStats",
    "PullHold",
    "MetadataPersist",
    "Registration",
    "HAStatus",
    "RuntimeInfo",
    "DelayOffsets",
    "HalfMessages",
]

# (result now, awaitable completed by flush / replication or None: answer now)
PutAnswer = tuple[PutMessageResult, Awaitable[PutMessageStatus] | None]


# ---------------------------------------------------------------------- the store
class StoreWriter(Protocol):
    """Appends to the CommitLog (send, retry, delayed delivery, transactions)."""

    @property
    def store_host(self) -> bytes: ...

    def put_nowait(self, msg: MessageExtBrokerInner) -> PutAnswer: ...

    def put_batch_nowait(self, batch: MessageExtBatch) -> PutAnswer: ...

    def commit_waiter(self, result: PutMessageResult) -> Awaitable[PutMessageStatus] | None:
        """Completed when result's records are written (not flushed); None if they are."""
        ...


class StoreReader(Protocol):
    """Reads of the ConsumeQueues, the CommitLog and the index."""

    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult: ...

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def get_offset_in_queue_by_time(
        self, topic: str, queue_id: int, timestamp: int, boundary: str | None = None
    ) -> int: ...

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int: ...

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int: ...

    def look_message_by_offset(self, commit_log_offset: int) -> MessageExt | None: ...

    def select_one_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> bytes | None: ...

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryMessageResult: ...

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, consume_offset: int) -> bool: ...


class MessageStoreView(StoreReader, StoreWriter, Protocol):
    """Reads and appends (send-back of a consumed message, the transaction check)."""


class ConsumeQueues(Protocol):
    """A queue's ConsumeQueue itself (the schedule service walks its units)."""

    def get_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None: ...


class ServiceStore(MessageStoreView, ConsumeQueues, Protocol):
    """What the schedule and transaction-check services use of the store."""


class TopicStore(Protocol):
    """Destroys a deleted topic's ConsumeQueues."""

    async def delete_topics(self, topics: Iterable[str]) -> int: ...


class QueueStore(StoreReader, TopicStore, Protocol):
    """Reads of queue offsets, and dropping a deleted topic's queues (admin)."""


# ---------------------------------------------------------------------- metadata
class TopicConfigs(Protocol):
    auto_create_topic: bool

    def select(self, topic: str) -> TopicConfig | None: ...

    def is_order_topic(self, topic: str) -> bool: ...

    def create_topic_in_send_message_method(
        self, topic: str, default_topic: str, remote_addr: str, client_default_queue_nums: int, topic_sys_flag: int
    ) -> TopicConfig | None: ...

    def create_topic_in_send_message_back_method(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int
    ) -> TopicConfig: ...

    def update_topic_config(self, tc: TopicConfig) -> None: ...

    def delete_topic_config(self, topic: str) -> bool: ...

    def serialize_wrapper(self) -> TopicConfigSerializeWrapper: ...

    def bump_data_version(self) -> None: ...


class ConsumerOffsets(Protocol):
    def commit_offset(self, client: str, group: str, topic: str, queue_id: int, offset: int) -> None: ...

    def query_offset(self, group: str, topic: str, queue_id: int) -> int: ...

    def topics_of_group(self, group: str) -> set[str]: ...

    def groups_of_topic(self, topic: str) -> set[str]: ...

    def remove_topic(self, topic: str) -> None: ...

    def remove_group(self, group: str, topics: Iterable[str] | None = None) -> None: ...

    def snapshot(self) -> dict[str, Any]: ...


class SubscriptionGroups(Protocol):
    auto_create: bool

    def find(self, group: str) -> SubscriptionGroupConfig | None: ...

    def update(self, cfg: SubscriptionGroupConfig) -> None: ...

    def delete(self, group: str) -> bool: ...

    def names(self) -> list[str]: ...

    def snapshot(self) -> dict[str, Any]: ...


class DelayOffsets(Protocol):
    """The schedule service's per-level offsets (GET_ALL_DELAY_OFFSET)."""

    def snapshot(self) -> dict[str, Any]: ...


# ---------------------------------------------------------------------- clients
class ConsumerRegistry(Protocol):
    def get_group(self, group: str) -> ConsumerGroupInfo | None: ...

    def register(self, info: ClientChannelInfo, data: ConsumerData, notify: bool) -> bool: ...

    def unregister(self, group: str, conn: Any, notify: bool) -> None: ...

    def groups_of_topic(self, topic: str) -> list[str]: ...


class ProducerRegistry(Protocol):
    @property
    def table(self) -> dict[str, dict[Any, ClientChannelInfo]]: ...

    def register(self, group: str, info: ClientChannelInfo) -> None: ...

    def unregister(self, group: str, conn: Any) -> None: ...

    def any_channel(self, group: str) -> ClientChannelInfo | None: ...


class QueueLocks(Protocol):
    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]: ...

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None: ...


# ---------------------------------------------------------------------- broker services
class PutStats(Protocol):
    def on_put(self, result: PutMessageResult, request: RemotingCommand, topic: str = "") -> None: ...

    def on_send_back(self, group: str, topic: str) -> None: ...


class GetStats(Protocol):
    def on_get(
        self, group: str, topic: str, result: GetMessageResult, queue_id: int = -1, latency_ms: int = -1
    ) -> None: ...

    def on_get_done(self, elapsed_ms: int, found: bool) -> None: ...


class PullHold(Protocol):
    """Long polling: park a pull that found nothing."""

    def suspend(
        self, conn: Any, request: Any, topic: str, queue_id: int, pull_from_offset: int, timeout_ms: int
    ) -> Any: ...


class MetadataPersist(Protocol):
    """Write changed metadata now (admin changes answer after it)."""

    async def persist_metadata(self) -> None: ...


class Registration(Protocol):
    """Tell the NameServers now (admin changes answer after it)."""

    async def register_broker_all(self) -> None: ...


class HAStatus(Protocol):
    def ha_runtime_info(self) -> dict[str, Any]: ...


class RuntimeInfo(Protocol):
    def runtime_table(self) -> dict[str, str]: ...


class HalfMessages(Protocol):
    """Transactional half messages (END_TRANSACTION)."""

    def look_half(self, commit_log_offset: int) -> MessageExt | None: ...

    def check_prepare(
        self, msg: MessageExt, producer_group: str, tran_state_table_offset: int, commit_log_offset: int
    ) -> str | None: ...

    def end_message_transaction(self, half: MessageExt, commit_log_offset: int) -> MessageExtBrokerInner: ...

    def put_op(self, half: MessageExt) -> PutMessageResult: ...
