"""POP consumption through the broker's RocketMQ 5 remoting codes, for ReceiveMessage,
AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue.

The 5.x request headers are ``rmq.protocol.pop``'s (RocketMQ 5's field for field); the
``POP_CK`` of each popped message is built as ``MQClientAPIImpl.processPopResponse`` builds it
(``rmq.client.pop_api.popped_messages``: the broker writes it only on retried messages).

Receipt handle (``ReceiptHandle``): the broker's ``POP_CK`` extra info of the message
(``ckQueueOffset popTime invisibleTime reviveQid topicType brokerName queueId queueOffset``)
+ ``" " + commitLogOffset``, as RocketMQ 5's proxy builds it: it names the broker, the queue,
the offsets and the pop time, so any proxy instance can ack or change it.

A broker that does not serve POP answers REQUEST_CODE_NOT_SUPPORTED; that becomes the v2
status NOT_IMPLEMENTED naming the broker.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from rmq.client.api import MQClientAPI
from rmq.client.errors import MQBrokerError
from rmq.client.pop_api import popped_messages
from rmq.common.mixall import dlq_topic
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.headers import ConsumerSendMsgBackRequestHeader
from rmq.protocol.message import MessageExt, SysFlag
from rmq.protocol.pop import (
    INIT_MODE_MAX,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    ExtraInfo,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from rmq.proxy import pb
from rmq.proxy.convert import ProxyError, status, to_v2_message

__all__ = [
    "PopMessageRequestHeader",
    "AckMessageRequestHeader",
    "ChangeInvisibleTimeRequestHeader",
    "ReceiptHandle",
    "PopResult",
    "PopClient",
    "INIT_MODE_MAX",
]

log = logging.getLogger("rmq.proxy.pop")

POP_CK = "POP_CK"

MIN_INVISIBLE_MS = 10_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
AUTO_RENEW_INVISIBLE_MS = 60_000
MAX_BATCH = 32


def _bad_response(addr: str, e: ProtocolError) -> ProxyError:
    return ProxyError(pb.Code.INTERNAL_SERVER_ERROR, f"broker {addr} answered a malformed POP response: {e}")


# ------------------------------------------------------------------ receipt handle
@dataclass(frozen=True, slots=True)
class ReceiptHandle(ExtraInfo):
    """The broker's extra info (with the message's queue offset) plus its commitLogOffset."""

    commit_log_offset: int = -1

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        try:
            head, sep, clo = text.rpartition(" ")
            if not sep or not clo.lstrip("-").isdigit():
                raise ProtocolError("no commitLogOffset at the end")
            info = ExtraInfo.parse(head)
            if info.queue_offset is None:
                raise ProtocolError("no queueOffset")
        except ProtocolError as e:
            raise ProxyError(
                pb.Code.INVALID_RECEIPT_HANDLE, f"receipt_handle {text[:120]!r} is not valid: {e}"
            ) from None
        return cls(
            info.ck_queue_offset,
            info.pop_time,
            info.invisible_time,
            info.revive_qid,
            info.topic_type,
            info.broker_name,
            info.queue_id,
            info.queue_offset,
            int(clo),
        )

    @classmethod
    def from_pop_ck(cls, pop_ck: str, commit_log_offset: int) -> ReceiptHandle:
        return cls.decode(f"{pop_ck} {commit_log_offset}")

    def extra_info(self) -> str:
        """The POP_CK text the broker gave (without the commitLogOffset)."""
        return ExtraInfo.encode(self)

    def encode(self) -> str:
        return f"{self.extra_info()} {self.commit_log_offset}"

    def is_expired(self, now_ms: int) -> bool:
        return self.revive_time <= now_ms

    @property
    def offset(self) -> int:
        """The message's queue offset (always present in a receipt handle)."""
        return self.queue_offset if self.queue_offset is not None else self.ck_queue_offset

    def renewed(self, pop_time: int, invisible_time: int, revive_qid: int) -> ReceiptHandle:
        """The handle after CHANGE_MESSAGE_INVISIBLETIME: the response's times, the same offsets
        (the new check point holds this one message: its start offset is the message's)."""
        return ReceiptHandle(
            self.offset,
            pop_time,
            invisible_time,
            revive_qid,
            self.topic_type,
            self.broker_name,
            self.queue_id,
            self.offset,
            self.commit_log_offset,
        )


@dataclass(slots=True)
class PopResult:
    found: bool
    pop_time: int
    invisible_time: int
    revive_qid: int
    messages: list[MessageExt]


def _not_served(e: MQBrokerError, what: str) -> ProxyError:
    if e.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
        return ProxyError(pb.Code.NOT_IMPLEMENTED, f"broker {e.broker_addr} does not serve {what} (POP) yet")
    return broker_error(e)


def broker_error(e: MQBrokerError) -> ProxyError:
    """A 4.x failure code -> the nearest v2 code (ProxyException mapping)."""
    code = {
        ResponseCode.TOPIC_NOT_EXIST: pb.Code.TOPIC_NOT_FOUND,
        ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.Code.CONSUMER_GROUP_NOT_FOUND,
        ResponseCode.NO_PERMISSION: pb.Code.FORBIDDEN,
        ResponseCode.SYSTEM_BUSY: pb.Code.TOO_MANY_REQUESTS,
        ResponseCode.POLLING_FULL: pb.Code.TOO_MANY_REQUESTS,
        ResponseCode.FLOW_CONTROL: pb.Code.TOO_MANY_REQUESTS,
        ResponseCode.MESSAGE_ILLEGAL: pb.Code.BAD_REQUEST,
        ResponseCode.INVALID_PARAMETER: pb.Code.BAD_REQUEST,
        ResponseCode.SUBSCRIPTION_PARSE_FAILED: pb.Code.ILLEGAL_FILTER_EXPRESSION,
        ResponseCode.FLUSH_DISK_TIMEOUT: pb.Code.MASTER_PERSISTENCE_TIMEOUT,
        ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.Code.SLAVE_PERSISTENCE_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE: pb.Code.HA_NOT_AVAILABLE,
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED: pb.Code.NOT_IMPLEMENTED,
    }.get(e.code, pb.Code.INTERNAL_SERVER_ERROR)
    return ProxyError(code, f"broker {e.broker_addr}: {ResponseCode.name_of(e.code)} {e.remark or ''}".strip())


class PopClient:
    """The four POP-backed RPCs over ``api`` (the proxy's MQClientAPI)."""

    def __init__(self, api: MQClientAPI) -> None:
        self.api = api

    # ------------------------------------------------------------------ remoting
    async def pop(self, addr: str, broker_name: str, header: PopMessageRequestHeader, timeout_ms: int) -> PopResult:
        cmd = RemotingCommand(RequestCode.POP_MESSAGE, ext_fields=header.to_ext_fields())
        resp = await self.api.remoting.invoke(addr, cmd, timeout_ms / 1000)
        if resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.POLLING_TIMEOUT, ResponseCode.NO_MESSAGE):
            return PopResult(False, 0, 0, 0, [])
        if resp.code != ResponseCode.SUCCESS:
            raise _not_served(MQBrokerError(resp.code, resp.remark, addr), "POP_MESSAGE")
        try:
            h = PopMessageResponseHeader.from_ext_fields(resp.ext_fields)
            msgs = popped_messages(broker_name, resp, header.order)
        except ProtocolError as e:
            raise _bad_response(addr, e) from None
        for m in msgs:
            m.sys_flag &= ~SysFlag.COMPRESSED  # decoded with the body inflated: delivered as IDENTITY
        return PopResult(True, h.pop_time, h.invisible_time, h.revive_qid, msgs)

    async def ack(self, addr: str, header: AckMessageRequestHeader, timeout_ms: int) -> None:
        cmd = RemotingCommand(RequestCode.ACK_MESSAGE, ext_fields=header.to_ext_fields())
        resp = await self.api.remoting.invoke(addr, cmd, timeout_ms / 1000)
        if resp.code != ResponseCode.SUCCESS:
            raise _not_served(MQBrokerError(resp.code, resp.remark, addr), "ACK_MESSAGE")

    async def change_invisible_time(
        self, addr: str, header: ChangeInvisibleTimeRequestHeader, timeout_ms: int
    ) -> tuple[int, int, int]:
        """(popTime, invisibleTime, reviveQid) of the new checkpoint."""
        cmd = RemotingCommand(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ext_fields=header.to_ext_fields())
        resp = await self.api.remoting.invoke(addr, cmd, timeout_ms / 1000)
        if resp.code != ResponseCode.SUCCESS:
            raise _not_served(MQBrokerError(resp.code, resp.remark, addr), "CHANGE_MESSAGE_INVISIBLETIME")
        try:
            h = ChangeInvisibleTimeResponseHeader.from_ext_fields(resp.ext_fields)
        except ProtocolError as e:
            raise _bad_response(addr, e) from None
        return h.pop_time, h.invisible_time, h.revive_qid

    # ------------------------------------------------------------------ RPC bodies
    async def receive(
        self,
        addr: str,
        broker_name: str,
        request: Any,
        *,
        group: str,
        topic: str,
        fifo: bool,
        max_attempts: int,
        poll_ms: int,
        now_ms: int,
        timeout_ms: int,
    ) -> AsyncIterator[Any]:
        """ReceiveMessage's frames: status, then each message, then delivery_timestamp.

        The tag filter is the broker's; a message at or past ``max_attempts`` goes to the DLQ
        and is acked instead of delivered (``PopMessageResultFilterImpl``)."""
        Resp = pb.msg("ReceiveMessageResponse")
        fe = request.filter_expression
        exp_type = "SQL92" if fe.type == pb.FilterType.SQL else "TAG"
        exp = fe.expression or "*"
        if request.auto_renew or not request.HasField("invisible_duration"):
            invisible = AUTO_RENEW_INVISIBLE_MS
        else:
            d = request.invisible_duration
            invisible = d.seconds * 1000 + d.nanos // 1_000_000
            if not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
                raise ProxyError(
                    pb.Code.ILLEGAL_INVISIBLE_TIME,
                    f"invisible_duration {invisible} ms is outside [{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}]",
                )
        batch = request.batch_size
        if batch <= 0:
            raise ProxyError(pb.Code.BAD_REQUEST, f"batch_size {batch} must be positive")
        header = PopMessageRequestHeader(
            group,
            topic,
            -1,
            min(batch, MAX_BATCH),
            invisible,
            poll_ms,
            now_ms,
            INIT_MODE_MAX,
            exp_type,
            exp,
            fifo,
            request.attempt_id if request.HasField("attempt_id") else None,
        )
        result = await self.pop(addr, broker_name, header, timeout_ms)
        deliver: list[Any] = []
        for m in result.messages:
            pop_ck = m.properties.get(POP_CK)
            if pop_ck is None:
                log.warning("popped message %s of %s/%s has no POP_CK; skipped", m.msg_id, topic, group)
                continue
            handle = ReceiptHandle.from_pop_ck(pop_ck, m.commit_log_offset)
            if m.reconsume_times + 1 > max_attempts and not fifo:
                await self.forward_to_dlq(addr, m, handle, group, topic, timeout_ms)
                continue
            deliver.append(to_v2_message(m, topic=topic, receipt_handle=handle.encode(), now_ms=now_ms))
        if deliver:
            yield Resp(status=status(pb.Code.OK))
            for v2 in deliver:
                yield Resp(message=v2)
        else:
            yield Resp(status=status(pb.Code.MESSAGE_NOT_FOUND, "no new message"))
        ts = Resp()
        ts.delivery_timestamp.FromMilliseconds(now_ms)
        yield ts

    async def ack_handle(self, group: str, topic: str, handle: ReceiptHandle, addr: str, timeout_ms: int) -> None:
        header = AckMessageRequestHeader(
            group, handle.real_topic(topic, group), handle.queue_id, handle.extra_info(), handle.offset
        )
        await self.ack(addr, header, timeout_ms)

    async def change_invisible(
        self, group: str, topic: str, handle: ReceiptHandle, invisible_ms: int, addr: str, timeout_ms: int
    ) -> ReceiptHandle:
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            raise ProxyError(
                pb.Code.ILLEGAL_INVISIBLE_TIME,
                f"invisible_duration {invisible_ms} ms is outside [0, {MAX_INVISIBLE_MS}]",
            )
        header = ChangeInvisibleTimeRequestHeader(
            group, handle.real_topic(topic, group), handle.queue_id, handle.extra_info(), handle.offset, invisible_ms
        )
        pop_time, invisible, revive_qid = await self.change_invisible_time(addr, header, timeout_ms)
        return handle.renewed(pop_time, invisible, revive_qid)

    async def forward_to_dlq(
        self, addr: str, m: MessageExt | None, handle: ReceiptHandle, group: str, topic: str, timeout_ms: int
    ) -> None:
        """CONSUMER_SEND_MSG_BACK with delayLevel -1 into %DLQ%group, then ack the handle."""
        msg_id = m.msg_id if m is not None else ""
        header = ConsumerSendMsgBackRequestHeader(handle.commit_log_offset, group, -1, msg_id, topic, False, 0)
        resp = await self.api.raw(addr, RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext_fields(), None, timeout_ms)
        if resp.code != ResponseCode.SUCCESS:
            raise broker_error(MQBrokerError(resp.code, resp.remark, addr))
        log.info("message %s of %s moved to %s", msg_id or handle.commit_log_offset, topic, dlq_topic(group))
        await self.ack_handle(group, topic, handle, addr, timeout_ms)
