"""AdminBrokerProcessor's store maintenance codes, which mqadmin's cleanExpiredCQ,
cleanUnusedTopic, deleteExpiredCommitLog and the export commands use:

CLEAN_EXPIRED_CONSUMEQUEUE (306), CLEAN_UNUSED_TOPIC (316), DELETE_EXPIRED_COMMITLOG (329),
GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305). Each is admin-only under ACL (rmq/auth/permissions.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from rmq.broker.seams import TopicConfigs
from rmq.common.mixall import SYSTEM_TOPICS
from rmq.protocol.bodies import TopicList
from rmq.protocol.codes import ResponseCode
from rmq.protocol.frame import RemotingCommand

__all__ = ["MaintainedStore", "StoreAdminProcessor"]

log = logging.getLogger("rmq.broker.admin")


class ManualDelete(Protocol):
    def execute_delete_files_manually(self) -> None: ...


class MaintainedStore(Protocol):
    def clean_unused_topics(self, keep: Iterable[str]) -> Awaitable[int]: ...

    def clean_expired_consume_queues(self) -> Awaitable[int]: ...


@dataclass(eq=False)
class StoreAdminProcessor:
    store: MaintainedStore
    commitlog_cleaner: ManualDelete
    topics: TopicConfigs

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
