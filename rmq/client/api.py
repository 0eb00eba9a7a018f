"""MQClientAPI: one typed coroutine per request code (Java ``MQClientAPIImpl``).

Every method sends one request and turns the answer into Python values: the typed
headers of ``rmq.protocol.headers`` on the way out, dataclasses on the way back. A
failure code raises ``MQBrokerError(code, remark)``; a transport failure raises the
``RemotingError`` the remoting client gave. Nothing here retries or caches: the
producer, the consumers and the admin tool decide that.

Requests without a broker address go to a NameServer: the one that answered last, or
the next of the configured list when it stops answering (NettyRemotingClient's choice).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence

from rmq.client.errors import ClientErrorCode, MQBrokerError, MQClientError
from rmq.client.message import PULL_STATUS_BY_CODE, SEND_STATUS_BY_CODE, PullResult, QueryResult, SendResult
from rmq.common.mixall import AUTO_CREATE_TOPIC_KEY_TOPIC
from rmq.protocol.bodies import (
    ClusterInfo,
    ConsumerIdList,
    HeartbeatData,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
    UnlockBatchRequestBody,
)
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    EndTransactionRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    GetRouteInfoRequestHeader,
    Header,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from rmq.protocol.message import MessageExt, decode_record, decode_records
from rmq.remoting.client import RemotingClient
from rmq.remoting.errors import RemotingClosedError, RemotingConnectError, RemotingError

__all__ = ["MQClientAPI"]

log = logging.getLogger("rmq.client.api")


def _request(code: int, header: Header | dict[str, str] | None = None, body: bytes | None = None) -> RemotingCommand:
    if header is None:
        ext = None
    elif isinstance(header, dict):
        ext = header
    else:
        ext = header.to_ext_fields()
    return RemotingCommand(code, ext_fields=ext, body=body)


class MQClientAPI:
    """Typed requests over one ``RemotingClient`` (owned by the caller)."""

    def __init__(self, remoting: RemotingClient, namesrv_addrs: Sequence[str] = ()) -> None:
        self.remoting = remoting
        self._namesrv: list[str] = []
        self._namesrv_index = 0
        self._namesrv_chosen: str | None = None
        self.update_name_server_address_list(namesrv_addrs)

    # ------------------------------------------------------------------ name servers
    def update_name_server_address_list(self, addrs: Sequence[str]) -> None:
        addrs = [a for a in addrs if a]
        if addrs != self._namesrv:
            self._namesrv = list(addrs)
            self._namesrv_index = random.randrange(len(addrs)) if addrs else 0
            if self._namesrv_chosen not in addrs:
                self._namesrv_chosen = None

    @property
    def name_server_address_list(self) -> list[str]:
        return list(self._namesrv)

    async def invoke_namesrv(self, cmd: RemotingCommand, timeout_ms: int) -> RemotingCommand:
        """Send to the chosen NameServer; on a connection failure, the next ones in turn."""
        if not self._namesrv:
            raise MQClientError("No name server address, please set it", ClientErrorCode.NO_NAME_SERVER_EXCEPTION)
        order: list[str] = []
        if self._namesrv_chosen is not None:
            order.append(self._namesrv_chosen)
        n = len(self._namesrv)
        for i in range(n):
            addr = self._namesrv[(self._namesrv_index + i) % n]
            if addr not in order:
                order.append(addr)
        deadline = time.monotonic() + timeout_ms / 1000
        last: RemotingError | None = None
        for addr in order:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                resp = await self.remoting.invoke(addr, cmd, left)
            except (RemotingConnectError, RemotingClosedError) as e:
                log.debug("name server %s unreachable: %s", addr, e)
                last = e
                if self._namesrv_chosen == addr:
                    self._namesrv_chosen = None
                self._namesrv_index = (
                    (self._namesrv.index(addr) + 1) % n if addr in self._namesrv else self._namesrv_index
                )
                continue
            self._namesrv_chosen = addr
            return resp
        if last is not None:
            raise last
        raise RemotingConnectError(f"no name server reachable within {timeout_ms}ms")

    # ------------------------------------------------------------------ helpers
    async def _invoke(self, addr: str | None, cmd: RemotingCommand, timeout_ms: int) -> RemotingCommand:
        if addr is None:
            return await self.invoke_namesrv(cmd, timeout_ms)
        return await self.remoting.invoke(addr, cmd, timeout_ms / 1000)

    @staticmethod
    def _check(resp: RemotingCommand, addr: str | None, *ok: int) -> None:
        if resp.code != ResponseCode.SUCCESS and resp.code not in ok:
            raise MQBrokerError(resp.code, resp.remark, addr)

    @staticmethod
    def _header(cls: type[Header], resp: RemotingCommand, addr: str | None):
        try:
            return cls.from_ext_fields(resp.ext_fields)
        except ProtocolError as e:
            raise MQClientError(f"bad response header from {addr}: {e}") from None

    # ------------------------------------------------------------------ NameServer
    async def get_topic_route_info(self, topic: str, timeout_ms: int = 3000) -> TopicRouteData | None:
        """GET_ROUTEINFO_BY_TOPIC (105); None when the NameServer says TOPIC_NOT_EXIST."""
        cmd = _request(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic))
        resp = await self.invoke_namesrv(cmd, timeout_ms)
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        self._check(resp, None)
        if not resp.body:
            return None
        try:
            return TopicRouteData.from_json(resp.body)
        except ProtocolError as e:
            raise MQClientError(f"bad route data for {topic}: {e}") from None

    async def get_broker_cluster_info(self, timeout_ms: int = 3000) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO (106)."""
        resp = await self.invoke_namesrv(_request(RequestCode.GET_BROKER_CLUSTER_INFO), timeout_ms)
        self._check(resp, None)
        return ClusterInfo.from_json(resp.body or b"{}")

    async def get_all_topic_list(self, timeout_ms: int = 3000) -> list[str]:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206)."""
        resp = await self.invoke_namesrv(_request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), timeout_ms)
        self._check(resp, None)
        return TopicList.from_json(resp.body or b"{}").topic_list

    # ------------------------------------------------------------------ send (2.4)
    @staticmethod
    def _send_command(header: SendMessageRequestHeader, body: bytes, batch: bool) -> RemotingCommand:
        code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
        return RemotingCommand(code, ext_fields=header.to_v2_ext_fields(), body=body)

    async def send_message(
        self,
        addr: str,
        broker_name: str,
        header: SendMessageRequestHeader,
        body: bytes,
        *,
        uniq_id: str | None,
        batch: bool = False,
        timeout_ms: int = 3000,
    ) -> SendResult:
        """SEND_MESSAGE_V2 (310) or SEND_BATCH_MESSAGE (320); raises on a not-stored code."""
        cmd = self._send_command(header, body, batch)
        resp = await self.remoting.invoke(addr, cmd, timeout_ms / 1000)
        return self.process_send_response(addr, broker_name, header.topic, uniq_id, resp)

    async def send_message_oneway(
        self, addr: str, header: SendMessageRequestHeader, body: bytes, *, batch: bool = False
    ) -> None:
        await self.remoting.invoke_oneway(addr, self._send_command(header, body, batch))

    @staticmethod
    def process_send_response(
        addr: str, broker_name: str, topic: str, uniq_id: str | None, resp: RemotingCommand
    ) -> SendResult:
        status = SEND_STATUS_BY_CODE.get(resp.code)
        if status is None:
            raise MQBrokerError(resp.code, resp.remark, addr)
        try:
            h = SendMessageResponseHeader.from_ext_fields(resp.ext_fields)
        except ProtocolError as e:
            raise MQClientError(f"bad send response header from {addr}: {e}") from None
        ext = resp.ext_fields or {}
        return SendResult(
            status,
            uniq_id,
            h.msg_id,
            MessageQueue(topic, broker_name, h.queue_id),
            h.queue_offset,
            h.transaction_id,
            ext.get("MSG_REGION"),
            ext.get("TRACE_ON", "true") != "false",
        )

    # ------------------------------------------------------------------ pull (2.5)
    async def pull_message(self, addr: str, header: PullMessageRequestHeader, timeout_ms: int) -> PullResult:
        """PULL_MESSAGE (11), for the lite-pull consumer too (its flag rides in sysFlag), as
        the 4.9.8 Java client sends it: a 4.9.8 broker does not know 5.x's LITE_PULL_MESSAGE (361).

        The result carries the raw records in ``body``; ``PullAPIWrapper`` decodes them.
        """
        resp = await self.remoting.invoke(addr, _request(RequestCode.PULL_MESSAGE, header), timeout_ms / 1000)
        status = PULL_STATUS_BY_CODE.get(resp.code)
        if status is None:
            raise MQBrokerError(resp.code, resp.remark, addr)
        h = self._header(PullMessageResponseHeader, resp, addr)
        return PullResult(
            status, h.next_begin_offset, h.min_offset, h.max_offset, [], h.suggest_which_broker_id, resp.body
        )

    # ------------------------------------------------------------------ offsets (2.6)
    async def query_consumer_offset(
        self, addr: str, group: str, topic: str, queue_id: int, timeout_ms: int = 3000
    ) -> int:
        """QUERY_CONSUMER_OFFSET (14); raises MQBrokerError(QUERY_NOT_FOUND) when the group
        has no offset for the queue."""
        cmd = _request(RequestCode.QUERY_CONSUMER_OFFSET, QueryConsumerOffsetRequestHeader(group, topic, queue_id))
        resp = await self.remoting.invoke(addr, cmd, timeout_ms / 1000)
        self._check(resp, addr)
        return self._header(QueryConsumerOffsetResponseHeader, resp, addr).offset

    async def update_consumer_offset(
        self, addr: str, group: str, topic: str, queue_id: int, offset: int, timeout_ms: int = 3000
    ) -> None:
        """UPDATE_CONSUMER_OFFSET (15), two-way."""
        cmd = _request(
            RequestCode.UPDATE_CONSUMER_OFFSET, UpdateConsumerOffsetRequestHeader(group, topic, queue_id, offset)
        )
        resp = await self.remoting.invoke(addr, cmd, timeout_ms / 1000)
        self._check(resp, addr)

    async def update_consumer_offset_oneway(
        self, addr: str, group: str, topic: str, queue_id: int, offset: int
    ) -> None:
        """UPDATE_CONSUMER_OFFSET (15), oneway (how Java's offset store persists)."""
        cmd = _request(
            RequestCode.UPDATE_CONSUMER_OFFSET, UpdateConsumerOffsetRequestHeader(group, topic, queue_id, offset)
        )
        await self.remoting.invoke_oneway(addr, cmd)

    async def get_max_offset(self, addr: str, topic: str, queue_id: int, timeout_ms: int = 3000) -> int:
        """GET_MAX_OFFSET (30): the queue's next offset to be written."""
        resp = await self.remoting.invoke(
            addr, _request(RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader(topic, queue_id)), timeout_ms / 1000
        )
        self._check(resp, addr)
        return self._header(GetMaxOffsetResponseHeader, resp, addr).offset

    async def get_min_offset(self, addr: str, topic: str, queue_id: int, timeout_ms: int = 3000) -> int:
        """GET_MIN_OFFSET (31)."""
        resp = await self.remoting.invoke(
            addr, _request(RequestCode.GET_MIN_OFFSET, GetMinOffsetRequestHeader(topic, queue_id)), timeout_ms / 1000
        )
        self._check(resp, addr)
        return self._header(GetMinOffsetResponseHeader, resp, addr).offset

    async def search_offset(
        self,
        addr: str,
        topic: str,
        queue_id: int,
        timestamp_ms: int,
        timeout_ms: int = 3000,
        boundary_type: str | None = None,
    ) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP (29)."""
        cmd = _request(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
            SearchOffsetRequestHeader(topic, queue_id, timestamp_ms, boundary_type),
        )
        resp = await self.remoting.invoke(addr, cmd, timeout_ms / 1000)
        self._check(resp, addr)
        return self._header(SearchOffsetResponseHeader, resp, addr).offset

    async def get_earliest_msg_storetime(self, addr: str, topic: str, queue_id: int, timeout_ms: int = 3000) -> int:
        """GET_EARLIEST_MSG_STORETIME (32)."""
        cmd = _request(RequestCode.GET_EARLIEST_MSG_STORETIME, GetEarliestMsgStoretimeRequestHeader(topic, queue_id))
        resp = await self.remoting.invoke(addr, cmd, timeout_ms / 1000)
        self._check(resp, addr)
        return self._header(GetEarliestMsgStoretimeResponseHeader, resp, addr).timestamp

    # ------------------------------------------------------------------ clients (2.7, 2.8)
    async def send_heartbeat(self, addr: str, heartbeat: HeartbeatData, timeout_ms: int = 3000) -> int:
        """HEART_BEAT (34); returns the broker's version (the response header field)."""
        cmd = _request(RequestCode.HEART_BEAT, None, heartbeat.to_json())
        resp = await self.remoting.invoke(addr, cmd, timeout_ms / 1000)
        self._check(resp, addr)
        return resp.version

    async def unregister_client(
        self, addr: str, client_id: str, producer_group: str | None, consumer_group: str | None, timeout_ms: int = 3000
    ) -> None:
        """UNREGISTER_CLIENT (35)."""
        cmd = _request(
            RequestCode.UNREGISTER_CLIENT, UnregisterClientRequestHeader(client_id, producer_group, consumer_group)
        )
        resp = await self.remoting.invoke(addr, cmd, timeout_ms / 1000)
        self._check(resp, addr)

    async def get_consumer_id_list_by_group(self, addr: str, group: str, timeout_ms: int = 3000) -> list[str]:
        """GET_CONSUMER_LIST_BY_GROUP (38)."""
        cmd = _request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, GetConsumerListByGroupRequestHeader(group))
        resp = await self.remoting.invoke(addr, cmd, timeout_ms / 1000)
        self._check(resp, addr)
        if not resp.body:
            return []
        return ConsumerIdList.from_json(resp.body).consumer_id_list

    async def consumer_send_message_back(
        self,
        addr: str,
        msg: MessageExt,
        group: str,
        delay_level: int,
        timeout_ms: int = 5000,
        max_reconsume_times: int = 16,
    ) -> None:
        """CONSUMER_SEND_MSG_BACK (36): hand a failed message back for a retry (spec 2.9)."""
        header = ConsumerSendMsgBackRequestHeader(
            msg.commit_log_offset, group, delay_level, msg.msg_id, msg.topic, False, max_reconsume_times
        )
        resp = await self.remoting.invoke(addr, _request(RequestCode.CONSUMER_SEND_MSG_BACK, header), timeout_ms / 1000)
        self._check(resp, addr)

    async def lock_batch_mq(self, addr: str, body: LockBatchRequestBody, timeout_ms: int = 1000) -> set[MessageQueue]:
        """LOCK_BATCH_MQ (41): the queues now locked by this client."""
        resp = await self.remoting.invoke(
            addr, _request(RequestCode.LOCK_BATCH_MQ, None, body.to_json()), timeout_ms / 1000
        )
        self._check(resp, addr)
        return LockBatchResponseBody.from_json(resp.body or b"{}").lock_ok_mq_set

    async def unlock_batch_mq(
        self, addr: str, body: UnlockBatchRequestBody, timeout_ms: int = 1000, oneway: bool = False
    ) -> None:
        """UNLOCK_BATCH_MQ (42)."""
        cmd = _request(RequestCode.UNLOCK_BATCH_MQ, None, body.to_json())
        if oneway:
            await self.remoting.invoke_oneway(addr, cmd)
            return
        resp = await self.remoting.invoke(addr, cmd, timeout_ms / 1000)
        self._check(resp, addr)

    async def end_transaction_oneway(
        self, addr: str, header: EndTransactionRequestHeader, remark: str | None = None
    ) -> None:
        """END_TRANSACTION (37), oneway (spec 2.12)."""
        cmd = _request(RequestCode.END_TRANSACTION, header)
        cmd.remark = remark
        await self.remoting.invoke_oneway(addr, cmd)

    # ------------------------------------------------------------------ query (2.11)
    async def view_message(self, addr: str, phy_offset: int, timeout_ms: int = 3000) -> MessageExt:
        """VIEW_MESSAGE_BY_ID (33): the record at a CommitLog offset (body decompressed)."""
        resp = await self.remoting.invoke(
            addr, _request(RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(phy_offset)), timeout_ms / 1000
        )
        self._check(resp, addr)
        try:
            return decode_record(resp.body or b"", decompress=True)
        except ProtocolError as e:
            raise MQClientError(f"bad message record from {addr}: {e}") from None

    async def query_message(
        self,
        addr: str,
        topic: str,
        key: str,
        max_num: int,
        begin_timestamp: int,
        end_timestamp: int,
        *,
        unique_key: bool = False,
        timeout_ms: int = 3000,
    ) -> QueryResult:
        """QUERY_MESSAGE (12) by key (or by UNIQ_KEY with ``unique_key``).

        Raises MQBrokerError(QUERY_NOT_FOUND) when nothing matches.
        """
        header = QueryMessageRequestHeader(
            topic, key, max_num, begin_timestamp, end_timestamp, True if unique_key else None
        )
        resp = await self.remoting.invoke(addr, _request(RequestCode.QUERY_MESSAGE, header), timeout_ms / 1000)
        self._check(resp, addr)
        h = self._header(QueryMessageResponseHeader, resp, addr)
        return QueryResult(h.index_last_update_timestamp, decode_records(resp.body or b"", decompress=True))

    # ------------------------------------------------------------------ admin
    async def create_topic(
        self,
        addr: str,
        topic_config: TopicConfig,
        default_topic: str = AUTO_CREATE_TOPIC_KEY_TOPIC,
        timeout_ms: int = 3000,
        attributes: str | None = None,
    ) -> None:
        """UPDATE_AND_CREATE_TOPIC (17) on one broker; ``attributes`` is RocketMQ 5's change
        string (``+message.type=FIFO``, ``-message.type``)."""
        tc = topic_config
        header = CreateTopicRequestHeader(
            tc.topic_name,
            default_topic,
            tc.read_queue_nums,
            tc.write_queue_nums,
            tc.perm,
            tc.topic_filter_type,
            tc.topic_sys_flag,
            tc.order,
            attributes,
        )
        resp = await self.remoting.invoke(
            addr, _request(RequestCode.UPDATE_AND_CREATE_TOPIC, header), timeout_ms / 1000
        )
        self._check(resp, addr)

    async def get_all_topic_config(self, addr: str, timeout_ms: int = 3000) -> TopicConfigSerializeWrapper:
        """GET_ALL_TOPIC_CONFIG (21)."""
        resp = await self.remoting.invoke(addr, _request(RequestCode.GET_ALL_TOPIC_CONFIG), timeout_ms / 1000)
        self._check(resp, addr)
        return TopicConfigSerializeWrapper.from_json(resp.body or b"{}")

    async def get_broker_runtime_info(self, addr: str, timeout_ms: int = 3000) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO (28): the broker's KV table of counters."""
        resp = await self.remoting.invoke(addr, _request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout_ms / 1000)
        self._check(resp, addr)
        return KVTable.from_json(resp.body or b"{}").table

    async def raw(
        self,
        addr: str | None,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout_ms: int = 3000,
    ) -> RemotingCommand:
        """Any request, answer returned as is (to a NameServer when ``addr`` is None)."""
        return await self._invoke(addr, _request(code, ext_fields, body), timeout_ms)
