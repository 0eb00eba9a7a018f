"""QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33) — spec 2.11."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rmq.broker.processors.decode import with_header
from rmq.broker.seams import StoreReader
from rmq.protocol.codes import ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import QueryMessageRequestHeader, QueryMessageResponseHeader, ViewMessageRequestHeader
from rmq.store.config import MessageStoreConfig


@dataclass(eq=False)
class QueryMessageProcessor:
    store_config: MessageStoreConfig
    store: StoreReader

    @with_header(QueryMessageRequestHeader)
    def query_message(self, conn: Any, request: RemotingCommand, h: QueryMessageRequestHeader) -> RemotingCommand:
        cfg = self.store_config
        max_num = h.max_num
        if h.unique_key_query:
            max_num = cfg.defaultQueryMaxNum
        max_num = min(max_num, cfg.maxMsgsNumBatch)
        result = self.store.query_message(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        if not result.buffers:
            return request.create_response(
                ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct"
            )
        resp = request.create_response(ResponseCode.SUCCESS, body=result.body())
        resp.ext_fields = QueryMessageResponseHeader(
            result.index_last_update_timestamp, result.index_last_update_phyoffset
        ).to_ext_fields()
        return resp

    @with_header(ViewMessageRequestHeader)
    def view_message_by_id(self, conn: Any, request: RemotingCommand, h: ViewMessageRequestHeader) -> RemotingCommand:
        data = self.store.select_one_message_by_offset(h.offset)
        if data is None:
            return request.create_response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}")
        return request.create_response(ResponseCode.SUCCESS, body=data)
