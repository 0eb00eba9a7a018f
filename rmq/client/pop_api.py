"""The client side of RocketMQ 5's POP over remoting (what a 5.x proxy sends a broker):
POP_MESSAGE, ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME over a ``RemotingClient``, and
the receipt handle of each popped message built as ``MQClientAPIImpl.processPopResponse``
builds it (the ``POP_CK`` property: from startOffsetInfo / msgOffsetInfo for a normal
message, as the broker set it for a retried one; orderly pops take the consumed count from
orderCountInfo as the reconsume times).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.message import MessageExt, decode_records
from rmq.protocol.pop import (
    INIT_MODE_MAX,
    PROPERTY_POP_CK,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    ExtraInfo,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    order_count_key,
    parse_msg_offset_info,
    parse_order_count_info,
    parse_start_offset_info,
    topic_type,
)
from rmq.remoting.client import RemotingClient

__all__ = ["PopResponse", "pop", "ack", "change_invisible_time", "popped_messages"]

TIMEOUT = 10.0


@dataclass
class PopResponse:
    code: int
    remark: str | None
    header: PopMessageResponseHeader | None
    messages: list[MessageExt] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.code == ResponseCode.SUCCESS


def popped_messages(broker_name: str, resp: RemotingCommand, order: bool) -> list[MessageExt]:
    """The records of a SUCCESS pop, each with its POP_CK (the receipt handle)."""
    h = PopMessageResponseHeader.from_ext_fields(resp.ext_fields)
    msgs = decode_records(resp.body or b"")
    start = parse_start_offset_info(h.start_offset_info)
    counts = parse_order_count_info(h.order_count_info) if order else {}
    parse_msg_offset_info(h.msg_offset_info)  # checked, as the Java client does
    for m in msgs:
        if PROPERTY_POP_CK in m.properties:
            continue  # a retried message: the broker wrote it
        mark = topic_type(m.topic)
        key = f"{mark}@{m.queue_id}"
        m.properties[PROPERTY_POP_CK] = ExtraInfo(
            start.get(key, m.queue_offset),
            h.pop_time,
            h.invisible_time,
            h.revive_qid,
            mark,
            broker_name,
            m.queue_id,
            m.queue_offset,
        ).encode()
        if order:
            n = counts.get(f"{mark}@{order_count_key(m.queue_id, m.queue_offset)}", counts.get(key))
            if n:
                m.reconsume_times = n
    return msgs


async def pop(
    client: RemotingClient,
    addr: str,
    broker_name: str,
    group: str,
    topic: str,
    *,
    invisible_ms: int,
    queue_id: int = -1,
    max_nums: int = 32,
    poll_ms: int = 0,
    init_mode: int = INIT_MODE_MAX,
    exp: str | None = None,
    order: bool = False,
    attempt_id: str | None = None,
    timeout: float = TIMEOUT,
) -> PopResponse:
    h = PopMessageRequestHeader(
        group,
        topic,
        queue_id,
        max_nums,
        invisible_ms,
        poll_ms,
        int(time.time() * 1000),
        init_mode,
        "TAG" if exp else None,
        exp,
        order,
        attempt_id,
    )
    cmd = RemotingCommand(RequestCode.POP_MESSAGE, ext_fields=h.to_ext_fields())
    resp = await client.invoke(addr, cmd, timeout + poll_ms / 1000)
    if resp.code == ResponseCode.SUCCESS:
        return PopResponse(
            resp.code,
            resp.remark,
            PopMessageResponseHeader.from_ext_fields(resp.ext_fields),
            popped_messages(broker_name, resp, order),
        )
    header = None
    if resp.code in (ResponseCode.POLLING_TIMEOUT, ResponseCode.POLLING_FULL):
        header = PopMessageResponseHeader.from_ext_fields(resp.ext_fields)
    return PopResponse(resp.code, resp.remark, header)


def _target(msg_topic: str, group: str, pop_ck: str) -> tuple[ExtraInfo, str, int, int]:
    ei = ExtraInfo.parse(pop_ck)
    offset = ei.queue_offset if ei.queue_offset is not None else ei.ck_queue_offset
    return ei, ei.real_topic(msg_topic, group), ei.queue_id, offset


async def ack(
    client: RemotingClient, addr: str, group: str, topic: str, pop_ck: str, timeout: float = TIMEOUT
) -> RemotingCommand:
    """Ack a popped message of ``topic`` (the topic it was popped as) by its POP_CK."""
    _, real, qid, offset = _target(topic, group, pop_ck)
    h = AckMessageRequestHeader(group, real, qid, pop_ck, offset)
    return await client.invoke(addr, RemotingCommand(RequestCode.ACK_MESSAGE, ext_fields=h.to_ext_fields()), timeout)


async def change_invisible_time(
    client: RemotingClient, addr: str, group: str, topic: str, pop_ck: str, invisible_ms: int, timeout: float = TIMEOUT
) -> tuple[RemotingCommand, str | None]:
    """(response, the new POP_CK) — built as MQClientAPIImpl does from the response header."""
    ei, real, qid, offset = _target(topic, group, pop_ck)
    h = ChangeInvisibleTimeRequestHeader(group, real, qid, pop_ck, offset, invisible_ms)
    cmd = RemotingCommand(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ext_fields=h.to_ext_fields())
    resp = await client.invoke(addr, cmd, timeout)
    if resp.code != ResponseCode.SUCCESS:
        return resp, None
    r = ChangeInvisibleTimeResponseHeader.from_ext_fields(resp.ext_fields)
    new = ExtraInfo(offset, r.pop_time, r.invisible_time, r.revive_qid, ei.topic_type, ei.broker_name, qid, offset)
    return resp, new.encode()
