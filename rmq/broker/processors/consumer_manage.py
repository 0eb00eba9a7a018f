"""GET_CONSUMER_LIST_BY_GROUP (38), UPDATE_CONSUMER_OFFSET (15), QUERY_CONSUMER_OFFSET (14)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rmq.broker.processors.decode import with_header
from rmq.broker.seams import ConsumerOffsets, ConsumerRegistry, StoreReader
from rmq.protocol.bodies import ConsumerIdList
from rmq.protocol.codes import ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)


@dataclass(eq=False)
class ConsumerManageProcessor:
    store: StoreReader
    offsets: ConsumerOffsets
    consumers: ConsumerRegistry

    @with_header(GetConsumerListByGroupRequestHeader)
    def get_consumer_list_by_group(
        self, conn: Any, request: RemotingCommand, h: GetConsumerListByGroupRequestHeader
    ) -> RemotingCommand:
        info = self.consumers.get_group(h.consumer_group)
        ids = info.client_ids() if info is not None else []
        if not ids:
            return request.create_response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}")
        return request.create_response(ResponseCode.SUCCESS, body=ConsumerIdList(ids).to_json())

    @with_header(UpdateConsumerOffsetRequestHeader)
    def update_consumer_offset(
        self, conn: Any, request: RemotingCommand, h: UpdateConsumerOffsetRequestHeader
    ) -> RemotingCommand:
        self.offsets.commit_offset(conn.remote_address, h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return request.create_response(ResponseCode.SUCCESS)

    @with_header(QueryConsumerOffsetRequestHeader)
    def query_consumer_offset(
        self, conn: Any, request: RemotingCommand, h: QueryConsumerOffsetRequestHeader
    ) -> RemotingCommand:
        store = self.store
        offset = self.offsets.query_offset(h.consumer_group, h.topic, h.queue_id)
        if offset < 0:
            # A group that never committed starts at 0 when message 0 of the queue is
            # still there and in memory (spec 2.6): a new group sees the backlog.
            min_offset = store.get_min_offset_in_queue(h.topic, h.queue_id)
            if (
                min_offset <= 0 and not store.check_in_disk_by_consume_offset(h.topic, h.queue_id, 0)
            ) or h.set_zero_if_not_found:
                offset = 0
            else:
                return request.create_response(
                    ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
                )
        resp = request.create_response(ResponseCode.SUCCESS)
        resp.ext_fields = QueryConsumerOffsetResponseHeader(offset).to_ext_fields()
        return resp
