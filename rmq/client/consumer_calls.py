"""The broker's GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309) to this
client, as Java's ClientRemotingProcessor and MQClientInstance answer them.

The group's consumer in ``consumer_table`` does the work (``rmq.client.running_info``,
through the consumer's ``consumer_running_info`` / ``consume_message_directly``); this
module only reads the request, adds what MQClientInstance.consumerRunningInfo adds (the
NameServer addresses, the consume type, the client version) and answers. A group this
client does not have: SYSTEM_ERROR ``The Consumer Group <G> not exist in this consumer``,
Java's text. It imports no consumer module: the instance, which the consumers import,
registers these handlers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from rmq.protocol.codes import ResponseCode
from rmq.protocol.errors import ProtocolError
from rmq.protocol.frame import RemotingCommand
from rmq.protocol.message import decode_record
from rmq.protocol.running_info import (
    PROP_CLIENT_VERSION,
    PROP_CONSUME_TYPE,
    PROP_NAMESERVER_ADDR,
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
)
from rmq.remoting.connection import Connection

__all__ = ["ConsumerCallHandler", "CLIENT_VERSION_DESC"]

#: MQVersion.getVersionDesc(CURRENT_VERSION): the version rmq.client announces.
CLIENT_VERSION_DESC = "V4_9_8"


class ConsumerCallHandler:
    """The two ClientRemotingProcessor handlers over one client instance's consumers.

    ``consumers``: the instance's group -> consumer table; ``namesrv_addrs``: the
    NameServer addresses it uses now."""

    def __init__(self, consumers: Mapping[str, Any], namesrv_addrs: Callable[[], list[str]]) -> None:
        self.consumers = consumers
        self.namesrv_addrs = namesrv_addrs

    async def get_consumer_running_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = GetConsumerRunningInfoRequestHeader.from_ext_fields(request.ext_fields)
        consumer = self.consumers.get(h.consumer_group)
        if consumer is None:
            return _not_exist(request, h.consumer_group)
        info = await consumer.consumer_running_info()
        props = info.properties
        props[PROP_NAMESERVER_ADDR] = "".join(a + ";" for a in self.namesrv_addrs())
        props[PROP_CONSUME_TYPE] = consumer.rebalance.consume_type
        props[PROP_CLIENT_VERSION] = CLIENT_VERSION_DESC
        if h.jstack_enable:
            info.jstack = _task_dump()
        return request.create_response(ResponseCode.SUCCESS, body=info.to_json())

    async def consume_message_directly(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        h = ConsumeMessageDirectlyResultRequestHeader.from_ext_fields(request.ext_fields)
        try:
            msg = decode_record(request.body or b"", decompress=True)
        except ProtocolError as e:
            return request.create_response(ResponseCode.SYSTEM_ERROR, f"bad message in the request body: {e}")
        consumer = self.consumers.get(h.consumer_group)
        if consumer is None:
            return _not_exist(request, h.consumer_group)
        consume: _DirectConsumer | None = getattr(consumer, "consume_message_directly", None)
        if consume is None:
            # Java casts to the push consumer and fails with a ClassCastException; say why
            return request.create_response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer Group <{h.consumer_group}> is a pull consumer in this client: no listener to consume with",
            )
        result = await consume(msg, h.broker_name or "")
        return request.create_response(ResponseCode.SUCCESS, body=result.to_json())


class _DirectConsumer(Protocol):
    async def __call__(self, msg: Any, broker_name: str) -> Any: ...


def _not_exist(request: RemotingCommand, group: str) -> RemotingCommand:
    return request.create_response(
        ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{group}> not exist in this consumer"
    )


def _task_dump() -> str:
    """The jstack a Python consumer can give: each asyncio task and where it waits."""
    lines = []
    for task in asyncio.all_tasks():
        lines.append(f'"{task.get_name()}"')
        for frame in task.get_stack(limit=8):
            lines.append(f"    at {frame.f_code.co_qualname} ({frame.f_code.co_filename}:{frame.f_lineno})")
        lines.append("")
    return "\n".join(lines)
