"""Client-side messages and typed results.

``Message`` is what a producer sends; consumers receive ``rmq.protocol.message.MessageExt``
(the decoded CommitLog record, re-exported here). ``SendResult``, ``PullResult`` and
``QueryResult`` are the typed answers.
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rmq.client.errors import MQClientError
from rmq.common.mixall import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    TOPIC_MAX_LENGTH,
    VALID_NAME,
    VALID_PATTERN_STR,
    retry_topic,
)
from rmq.protocol.bodies import MessageQueue
from rmq.protocol.codes import ResponseCode
from rmq.protocol.message import MessageConst, MessageExt, SysFlag

__all__ = [
    "Message",
    "MessageExt",
    "MessageQueue",
    "SendStatus",
    "SendResult",
    "PullStatus",
    "PullResult",
    "QueryResult",
    "validate_topic",
    "validate_message",
    "RESERVED_PROPERTIES",
    "RETRY_GROUP_TOPIC_PREFIX",
    "DLQ_GROUP_TOPIC_PREFIX",
    "AUTO_CREATE_TOPIC_KEY",
    "retry_topic",
    "compress_body",
    "decompress_body",
]

AUTO_CREATE_TOPIC_KEY = AUTO_CREATE_TOPIC_KEY_TOPIC  # the client's historical name

#: Property names ``put_user_property`` refuses (MessageConst.STRING_HASH_SET, the ones
#: the client and broker give a meaning to).
RESERVED_PROPERTIES = frozenset(
    {
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "MSG_REGION",
        "TRACE_ON",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "TRANSACTION_CHECK_TIMES",
        "CHECK_IMMUNITY_TIME_IN_SECONDS",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "INNER_MULTI_DISPATCH",
        "INNER_MULTI_QUEUE_OFFSET",
        "__SHARDINGKEY",
    }
)


@dataclass(eq=False)
class Message:
    """A message to send.

    ``keys`` is one key or several (sent space-separated in ``KEYS``); ``properties``
    are user properties (system ones are set from the other fields); ``delay_time_level``
    1..18 is RocketMQ's delay level (0 = none). ``wait_store_msg_ok`` False asks the
    broker not to wait for the flush / slave before answering. ``transaction_id`` is set
    by ``TransactionProducer.send_message_in_transaction`` (the message's UNIQ_KEY).
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | Sequence[str] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    delay_time_level: int = 0
    flag: int = 0
    wait_store_msg_ok: bool = True
    transaction_id: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.body, str):
            self.body = self.body.encode("utf-8")
        elif isinstance(self.body, (bytearray, memoryview)):
            self.body = bytes(self.body)

    def put_user_property(self, name: str, value: str) -> None:
        if name in RESERVED_PROPERTIES:
            raise MQClientError(f"The Property<{name}> is used by system, input another please")
        if not name or not value:
            raise MQClientError("The name or value of property can not be null or blank string!")
        self.properties[name] = value

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)

    @property
    def keys_string(self) -> str | None:
        k = self.keys
        if k is None:
            return None
        if isinstance(k, str):
            return k or None
        return MessageConst.KEY_SEPARATOR.join(k) or None

    def wire_properties(self, uniq_key: str | None) -> dict[str, str]:
        """The properties map as sent: user properties + TAGS, KEYS, DELAY, WAIT, UNIQ_KEY."""
        props = dict(self.properties)
        if self.tags:
            props[MessageConst.TAGS] = self.tags
        keys = self.keys_string
        if keys:
            props[MessageConst.KEYS] = keys
        if self.delay_time_level > 0:
            props[MessageConst.DELAY_TIME_LEVEL] = str(self.delay_time_level)
        # The Java Message constructor sets WAIT=true; "false" only when disabled.
        props[MessageConst.WAIT_STORE_MSG_OK] = "true" if self.wait_store_msg_ok else "false"
        if uniq_key is not None and MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX not in props:
            props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq_key
        return props


def validate_topic(topic: str) -> None:
    """Validators.checkTopic + the not-allowed-to-send system topics."""
    if not topic or not topic.strip():
        raise MQClientError("The specified topic is blank", ResponseCode.MESSAGE_ILLEGAL)
    if len(topic) > TOPIC_MAX_LENGTH:
        raise MQClientError(
            f"The specified topic is longer than topic max length {TOPIC_MAX_LENGTH}.", ResponseCode.MESSAGE_ILLEGAL
        )
    if not VALID_NAME.match(topic):
        raise MQClientError(
            f"The specified topic[{topic}] contains illegal characters, allowing only {VALID_PATTERN_STR}",
            ResponseCode.MESSAGE_ILLEGAL,
        )
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise MQClientError(f"Sending message to topic[{topic}] is forbidden.", ResponseCode.NO_PERMISSION)


def validate_message(msg: Message, max_message_size: int) -> None:
    """Validators.checkMessage: topic, non-empty body, size limit."""
    if msg is None:
        raise MQClientError("the message is null", ResponseCode.MESSAGE_ILLEGAL)
    validate_topic(msg.topic)
    if not isinstance(msg.body, bytes):
        raise MQClientError("the message body must be bytes", ResponseCode.MESSAGE_ILLEGAL)
    if len(msg.body) == 0:
        raise MQClientError("the message body length is zero", ResponseCode.MESSAGE_ILLEGAL)
    if len(msg.body) > max_message_size:
        raise MQClientError(
            f"the message body size over max value, MAX: {max_message_size}", ResponseCode.MESSAGE_ILLEGAL
        )


def compress_body(body: bytes, level: int) -> bytes:
    """zlib stream (Java ``Deflater`` + ``DeflaterOutputStream``), as UtilAll.compress."""
    return zlib.compress(body, level)


def decompress_body(body: bytes, sys_flag: int) -> bytes:
    """Inflate a COMPRESSED body (ZLIB is the only 4.x compression)."""
    if sys_flag & SysFlag.COMPRESSED:
        return zlib.decompress(body)
    return body


# --------------------------------------------------------------------------- results
class SendStatus(enum.Enum):
    """How a stored message fared: codes 0 / 10 / 12 / 11 (spec 2.4)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


SEND_STATUS_BY_CODE: Mapping[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(slots=True)
class SendResult:
    """A stored message (or batch).

    ``msg_id`` is the client UNIQ_KEY (comma-joined for a batch); ``offset_msg_id``
    the broker's offset message id(s) (store host + CommitLog offset); ``queue_offset``
    the ConsumeQueue offset of the (first) message.
    """

    status: SendStatus
    msg_id: str | None
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str | None = None
    trace_on: bool = True

    @property
    def ok(self) -> bool:
        return self.status is SendStatus.SEND_OK


class PullStatus(enum.Enum):
    """Client view of a pull answer (spec 2.5: 0 / 19 / 20 / 21)."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


PULL_STATUS_BY_CODE: Mapping[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(slots=True)
class PullResult:
    """One pull. ``msg_found_list`` is filled (decoded, decompressed, tag-filtered) by
    the pull wrapper; ``body`` holds the raw records until then."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    msg_found_list: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = 0
    body: bytes | None = None


@dataclass(slots=True)
class QueryResult:
    """QUERY_MESSAGE answer(s): the index's last update time and the messages found."""

    index_last_update_timestamp: int
    messages: list[MessageExt]
