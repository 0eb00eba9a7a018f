"""ACK_MESSAGE (200051) and CHANGE_MESSAGE_INVISIBLETIME (200053): RocketMQ 5's
AckMessageProcessor and ChangeInvisibleTimeProcessor.

Both name the message by (consumerGroup, topic — the retry topic for a retried message —
queueId, offset) and its receipt handle (``extraInfo``, the POP_CK). SUCCESS is answered
once the ack (or the new check point and the ack of the old one) is stored durably.
Errors as RocketMQ 5: unknown topic TOPIC_NOT_EXIST, bad queue MESSAGE_ILLEGAL, offset
outside the queue NO_MESSAGE; a malformed extraInfo is a header error naming the field.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import Any, Protocol

from rmq.broker.pop.pop_service import Answer
from rmq.protocol.codes import ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.pop import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
)

__all__ = ["AckMessageProcessor", "Acker"]


class Acker(Protocol):
    def ack(
        self, group: str, topic: str, queue_id: int, offset: int, extra_info: str, client: str
    ) -> Answer | Awaitable[Answer]: ...

    def change_invisible_time(
        self, group: str, topic: str, queue_id: int, offset: int, extra_info: str, invisible_time: int
    ) -> Answer | Awaitable[Answer]: ...


async def _later(request: RemotingCommand, pending: Awaitable[Answer], change: bool) -> RemotingCommand:
    return _respond(request, await pending, change)


def _respond(request: RemotingCommand, a: Answer, change: bool) -> RemotingCommand:
    resp = request.create_response(a.code, a.remark)
    if change and a.code == ResponseCode.SUCCESS:
        resp.ext_fields = ChangeInvisibleTimeResponseHeader(a.pop_time, a.invisible_time, a.revive_qid).to_ext_fields()
    return resp


def _answer(request: RemotingCommand, a: Answer | Awaitable[Answer], change: bool) -> Any:
    if inspect.isawaitable(a):
        return _later(request, a, change)
    return _respond(request, a, change)


class AckMessageProcessor:
    def __init__(self, acker: Acker) -> None:
        self.acker = acker

    def ack(self, conn: Any, request: RemotingCommand) -> Any:
        h = AckMessageRequestHeader.from_ext_fields(request.ext_fields)
        client = getattr(conn, "remote_address", "?")
        return _answer(
            request, self.acker.ack(h.consumer_group, h.topic, h.queue_id, h.offset, h.extra_info, client), False
        )

    def change_invisible_time(self, conn: Any, request: RemotingCommand) -> Any:
        h = ChangeInvisibleTimeRequestHeader.from_ext_fields(request.ext_fields)
        if h.invisible_time < 0:
            return request.create_response(
                ResponseCode.INVALID_PARAMETER, f"the custom field <invisibleTime> is negative: {h.invisible_time}"
            )
        a = self.acker.change_invisible_time(
            h.consumer_group, h.topic, h.queue_id, h.offset, h.extra_info, h.invisible_time
        )
        return _answer(request, a, True)
