"""GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309): requests for one
online consumer, relayed on its own connection (AdminBrokerProcessor.callConsumer).

The broker finds the client's channel by group and client id, sends it a new request with
the same ext fields and body, waits up to ``timeout`` (Broker2Client.callClient: 10 s,
under mqadmin's 15 s) and answers the admin with whatever the consumer answered. For 309 it
first adds ``brokerName`` and reads the message named by the offset ``msgId`` from the
CommitLog: the consumer gets the stored record as the body.

Errors, worded as 4.9.8's: a client not in the group's channels (never came, or its
connection closed) -> SYSTEM_ERROR ``The Consumer <G> <C> not online``; no answer in time
-> CONSUME_MSG_TIMEOUT ``consumer <G> <C> Timeout: ...``; a connection that fails under the
request -> SYSTEM_ERROR ``invoke consumer <G> <C> Exception: ...``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from rmq.broker.processors.decode import with_header
from rmq.broker.seams import ConsumerRegistry, StoreReader
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.message import decode_message_id
from rmq.protocol.running_info import ConsumeMessageDirectlyResultRequestHeader, GetConsumerRunningInfoRequestHeader
from rmq.remoting.dispatch import exception_text
from rmq.remoting.errors import RemotingError, RemotingTimeoutError

__all__ = ["ConsumerCallProcessor", "CALL_CLIENT_TIMEOUT_S"]

log = logging.getLogger("rmq.broker.admin")

#: Broker2Client.callClient's invokeSync timeout.
CALL_CLIENT_TIMEOUT_S = 10.0


@dataclass(eq=False)
class ConsumerCallProcessor:
    broker_name: str
    store: StoreReader
    consumers: ConsumerRegistry
    timeout: float = CALL_CLIENT_TIMEOUT_S

    @with_header(GetConsumerRunningInfoRequestHeader)
    def get_consumer_running_info(
        self, conn: Any, request: RemotingCommand, h: GetConsumerRunningInfoRequestHeader
    ) -> Awaitable[RemotingCommand]:
        return self._call(RequestCode.GET_CONSUMER_RUNNING_INFO, request, request.body, h.consumer_group, h.client_id)

    @with_header(ConsumeMessageDirectlyResultRequestHeader)
    def consume_message_directly(
        self, conn: Any, request: RemotingCommand, h: ConsumeMessageDirectlyResultRequestHeader
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        # 4.9.8 fails with a NullPointerException on a missing or unknown msgId; say what it is
        if h.msg_id is None:
            return request.create_response(ResponseCode.SYSTEM_ERROR, "the custom field <msgId> is null")
        try:
            _, _, offset = decode_message_id(h.msg_id)
        except ProtocolError as e:
            return request.create_response(ResponseCode.SYSTEM_ERROR, f"bad msgId {h.msg_id}: {e}")
        data = self.store.select_one_message_by_offset(offset)
        if data is None:
            return request.create_response(
                ResponseCode.SYSTEM_ERROR, f"can not find message {h.msg_id} by the offset {offset}"
            )
        ext = dict(request.ext_fields or {})
        ext["brokerName"] = self.broker_name
        relayed = RemotingCommand(request.code, ext_fields=ext)
        return self._call(
            RequestCode.CONSUME_MESSAGE_DIRECTLY, relayed, bytes(data), h.consumer_group, h.client_id or ""
        )

    async def _call(
        self, code: int, request: RemotingCommand, body: bytes | None, group: str, client_id: str
    ) -> RemotingCommand:
        info = self.consumers.get_group(group)
        channel = None
        if info is not None:
            channel = next((c for c in info.channels.values() if c.client_id == client_id), None)
        if channel is None or getattr(channel.conn, "closed", False):
            return request.create_response(
                ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online"
            )
        call = RemotingCommand(code, ext_fields=dict(request.ext_fields or {}), body=body)
        try:
            resp: RemotingCommand = await channel.conn.request(call, self.timeout)
            return resp
        except RemotingTimeoutError as e:
            log.warning("%s to consumer %s of group %s timed out: %s", RequestCode.name_of(code), client_id, group, e)
            return request.create_response(
                ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout: {exception_text(e)}"
            )
        except RemotingError as e:
            log.warning("%s to consumer %s of group %s failed: %s", RequestCode.name_of(code), client_id, group, e)
            return request.create_response(
                ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: {exception_text(e)}"
            )
