"""A topic's message type (``message.type`` attribute) as the proxy learns it from a broker
(GET_TOPIC_CONFIG, RocketMQ 5; else GET_ALL_TOPIC_CONFIG) and what QueryRoute / SendMessage
make of it."""

from __future__ import annotations

import json
from typing import Any

from rmq.protocol.bodies import BrokerData, QueueData, TopicRouteData
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.frame import RemotingCommand
from rmq.proxy import pb
from rmq.proxy.brokers import BrokerAccess, Route
from rmq.proxy.config import ProxyConfig
from rmq.proxy.convert import ALL_TYPES, accept_types
from rmq.remoting.server import RemotingServer


def test_accept_types() -> None:
    assert accept_types(None) == ALL_TYPES and accept_types("MIXED") == ALL_TYPES
    assert accept_types("FIFO") == (pb.MessageType.FIFO,)
    assert accept_types("TRANSACTION") == (pb.MessageType.TRANSACTION,)


async def _type_from(handler: Any) -> str | None:
    server = RemotingServer()
    server.register_default_processor(handler)
    await server.start()
    access = BrokerAccess(ProxyConfig(namesrvAddr="127.0.0.1:1"))
    try:
        data = TopicRouteData([QueueData("b", 4, 4, 6)], [BrokerData("c", "b", {0: server.address})])
        return await access.topic_message_type(Route("T", data, True, 0.0))
    finally:
        await access.close()
        await server.stop()


async def test_rocketmq5_get_topic_config() -> None:
    def handler(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        assert cmd.code == RequestCode.GET_TOPIC_CONFIG and cmd.ext_fields == {"topic": "T"}
        body = {"topicConfig": {"topicName": "T", "attributes": {"message.type": "FIFO"}}}
        return cmd.create_response(ResponseCode.SUCCESS, body=json.dumps(body).encode())

    assert await _type_from(handler) == "FIFO"


async def test_4x_broker_falls_back_to_all_topic_config() -> None:
    def handler(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.GET_TOPIC_CONFIG:
            return cmd.create_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
        assert cmd.code == RequestCode.GET_ALL_TOPIC_CONFIG
        table = {"topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}}
        return cmd.create_response(ResponseCode.SUCCESS, body=json.dumps(table).encode())

    assert await _type_from(handler) is None  # a 4.x topic has no type: all four accepted
