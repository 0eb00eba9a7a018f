"""rmq's RocketMQ 4.x client: producer, push consumer, lite pull consumer.

Depends only on ``rmq.protocol`` and ``rmq.remoting``. Durations are milliseconds
everywhere (``*_ms`` parameters, Java-named config fields).
"""

from rmq.client.api import MQClientAPI
from rmq.client.config import ClientConfig
from rmq.client.consume_concurrently import ConsumeConcurrentlyContext, ConsumeResult
from rmq.client.consume_orderly import ConsumeOrderlyContext, ConsumeOrderlyResult
from rmq.client.consumer_base import ConsumeFromWhere, MessageModel
from rmq.client.errors import (
    ClientErrorCode,
    MQBrokerError,
    MQClientError,
    MQError,
    RemotingClosedError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
)
from rmq.client.fault import LatencyFaultTolerance, MQFaultStrategy
from rmq.client.instance import MQClientInstance
from rmq.client.lite_pull_consumer import LitePullConsumer
from rmq.client.message import (
    Message,
    MessageExt,
    MessageQueue,
    PullResult,
    PullStatus,
    QueryResult,
    SendResult,
    SendStatus,
)
from rmq.client.offset_store import LocalFileOffsetStore, OffsetStore, ReadOffsetType, RemoteBrokerOffsetStore
from rmq.client.producer import Producer
from rmq.client.push_consumer import PushConsumer
from rmq.client.rebalance import (
    AVG,
    AVG_BY_CIRCLE,
    AllocateStrategy,
    by_config,
    by_machine_room,
    consistent_hash,
    machine_room_nearby,
)
from rmq.client.selector import select_by_hash, select_by_random
from rmq.client.transaction import (
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)

__all__ = [
    "AVG",
    "AVG_BY_CIRCLE",
    "AllocateStrategy",
    "ClientConfig",
    "ClientErrorCode",
    "ConsumeConcurrentlyContext",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyResult",
    "ConsumeResult",
    "LatencyFaultTolerance",
    "LitePullConsumer",
    "LocalFileOffsetStore",
    "LocalTransactionState",
    "MQBrokerError",
    "MQClientAPI",
    "MQClientError",
    "MQClientInstance",
    "MQError",
    "MQFaultStrategy",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "OffsetStore",
    "Producer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "QueryResult",
    "ReadOffsetType",
    "RemoteBrokerOffsetStore",
    "RemotingClosedError",
    "RemotingConnectError",
    "RemotingError",
    "RemotingTimeoutError",
    "SendResult",
    "SendStatus",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "by_config",
    "by_machine_room",
    "consistent_hash",
    "machine_room_nearby",
    "select_by_hash",
    "select_by_random",
]
