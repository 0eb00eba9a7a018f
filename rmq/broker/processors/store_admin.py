"""AdminBrokerProcessor's store inspection and maintenance codes, which mqadmin's queryCq,
cleanExpiredCQ, cleanUnusedTopic, deleteExpiredCommitLog and the export commands use:

QUERY_CONSUME_QUEUE (321), CLEAN_EXPIRED_CONSUMEQUEUE (306), CLEAN_UNUSED_TOPIC (316),
DELETE_EXPIRED_COMMITLOG (329), GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305). The cleanups are
admin-only under ACL (rmq/auth/permissions.py).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from rmq.broker.processors.decode import with_header
from rmq.broker.seams import ConsumerRegistry, TopicConfigs
from rmq.common.mixall import SYSTEM_TOPICS
from rmq.protocol.bodies import ConsumeQueueData, QueryConsumeQueueResponseBody, TopicList
from rmq.protocol.codes import ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import QueryConsumeQueueRequestHeader

__all__ = ["MaintainedStore", "StoreAdminProcessor"]

log = logging.getLogger("rmq.broker.admin")


class ManualDelete(Protocol):
    def execute_delete_files_manually(self) -> None: ...


class Units(Protocol):
    def get_min_offset_in_queue(self) -> int: ...

    def get_max_offset_in_queue(self) -> int: ...

    def iter_units(self, start_index: int) -> Iterator[tuple[int, int, int, int]]: ...


class MaintainedStore(Protocol):
    def get_consume_queue(self, topic: str, queue_id: int) -> Units | None: ...

    def clean_unused_topics(self, keep: Iterable[str]) -> Awaitable[int]: ...

    def clean_expired_consume_queues(self) -> Awaitable[int]: ...


@dataclass(eq=False)
class StoreAdminProcessor:
    store: MaintainedStore
    commitlog_cleaner: ManualDelete
    topics: TopicConfigs
    consumers: ConsumerRegistry

    @with_header(QueryConsumeQueueRequestHeader)
    def query_consume_queue(
        self, conn: Any, request: RemotingCommand, h: QueryConsumeQueueRequestHeader
    ) -> RemotingCommand:
        cq = self.store.get_consume_queue(h.topic, h.queue_id)
        if cq is None:
            return request.create_response(ResponseCode.SYSTEM_ERROR, f"{h.queue_id}@{h.topic} is not exist!")
        body = QueryConsumeQueueResponseBody(
            max_queue_index=cq.get_max_offset_in_queue(), min_queue_index=cq.get_min_offset_in_queue()
        )
        if h.consumer_group is not None:
            group = self.consumers.get_group(h.consumer_group)
            sub = group.find_subscription(h.topic) if group is not None else None
            body.subscription_data = sub
            # tag filters only: 4.9.8 prints its SQL92 ConsumerFilterData here, null for tags
            body.filter_data = f"{h.consumer_group}@{h.topic} is not online!" if sub is None else "null"
        if not cq.get_min_offset_in_queue() <= h.index < cq.get_max_offset_in_queue():
            remark = f"Index {h.index} of {h.queue_id}@{h.topic} is not exist!"
            return request.create_response(ResponseCode.SUCCESS, remark)
        for _, offset, size, tags in itertools.islice(cq.iter_units(h.index), max(h.count, 0)):
            body.queue_data.append(ConsumeQueueData(offset, size, tags))
        return request.create_response(ResponseCode.SUCCESS, body=body.to_json())

    async def clean_expired_consume_queue(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        log.warning("cleanExpiredConsumeQueue requested by %s", conn.remote_address)
        n = await self.store.clean_expired_consume_queues()
        log.warning("cleanExpiredConsumeQueue: %d queue(s) destroyed", n)
        return request.create_response(ResponseCode.SUCCESS)

    async def clean_unused_topic(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        log.warning("cleanUnusedTopic requested by %s", conn.remote_address)
        keep = self.topics.serialize_wrapper().topic_config_table
        n = await self.store.clean_unused_topics(keep)
        log.warning("cleanUnusedTopic: %d queue(s) of topics without a config destroyed", n)
        return request.create_response(ResponseCode.SUCCESS)

    def delete_expired_commitlog(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        """executeDeleteFilesManually: the cleaner's next runs delete expired CommitLog
        files whatever the hour (deleteWhen)."""
        log.warning("deleteExpiredCommitLog requested by %s", conn.remote_address)
        self.commitlog_cleaner.execute_delete_files_manually()
        return request.create_response(ResponseCode.SUCCESS)

    def get_system_topic_list(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        body = TopicList(sorted(SYSTEM_TOPICS)).to_json()
        return request.create_response(ResponseCode.SUCCESS, body=body)
