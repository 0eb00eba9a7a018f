"""v2 (gRPC) <-> 4.x (remoting) conversions, pure functions (no I/O, no clock of their own).

* ``plan_send``: a v2 ``Message`` -> what SEND_MESSAGE_V2 carries (properties, sysFlag, body),
  validated the way RocketMQ 5's proxy validates it (``SendMessageActivity``); a bad field raises
  ``ProxyError`` with the v2 code and a message naming the field.
* ``to_v2_message``: a stored 4.x message -> v2 ``Message`` (``GrpcConverter.buildMessage``).
* ``route_to_queues``: a 4.x TopicRouteData -> v2 MessageQueues whose broker endpoints are the
  proxy's own address (cluster mode).
* Transaction ids and receipt handles describe themselves, so any proxy instance serves them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rmq.common import mixall
from rmq.protocol.bodies import MASTER_ID, TopicRouteData
from rmq.protocol.codes import PermName
from rmq.protocol.message import MessageConst, MessageExt, SysFlag, java_hash
from rmq.proxy import pb

__all__ = [
    "ProxyError",
    "SYSTEM_PROPERTY_KEYS",
    "SendPlan",
    "SendLimits",
    "plan_send",
    "to_v2_message",
    "route_to_queues",
    "TransactionId",
    "consistent_hash",
    "delay_level_for",
    "parse_delay_levels",
    "status",
    "validate_topic",
    "validate_group",
]

# MessageConst.STRING_HASH_SET (RocketMQ 5.3.3): names a user property may not take
SYSTEM_PROPERTY_KEYS = frozenset(
    {
        "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID",
        "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
        "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME",
        "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO",
        "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER",
        "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS",
        "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL", "__BORNHOST", "BORN_TIMESTAMP", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID",
        "__CRC32#",
    }
)  # fmt: skip
# carried as v2 system properties, so not repeated among the user properties on the way out
_SHOWN_AS_SYSTEM = SYSTEM_PROPERTY_KEYS | {MessageConst.SHARDING_KEY, "TRACE_CONTEXT", "__transactionId__"}

TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
BORN_HOST = "__BORNHOST"
BORN_TIMESTAMP = "BORN_TIMESTAMP"
TRACE_CONTEXT = "TRACE_CONTEXT"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"

#: RocketMQ's default ``messageDelayLevel``
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ProxyError(Exception):
    """A request the proxy answers with ``code`` (a v2 ``Code``) and ``message``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def status(code: int, message: str = "") -> Any:
    s = pb.msg("Status")()
    s.code = code
    s.message = message or pb.Code.name(code)
    return s


# ------------------------------------------------------------------ names
def validate_topic(name: str, *, field: str = "topic") -> None:
    """TopicValidator: non-blank, [%|a-zA-Z0-9_-], <= 127 chars, not a system topic."""
    if not name or not name.strip():
        raise ProxyError(pb.Code.ILLEGAL_TOPIC, f"{field} is blank")
    if len(name) > mixall.TOPIC_MAX_LENGTH:
        raise ProxyError(pb.Code.ILLEGAL_TOPIC, f"{field} {name!r} is longer than {mixall.TOPIC_MAX_LENGTH}")
    if not mixall.VALID_NAME.match(name):
        raise ProxyError(pb.Code.ILLEGAL_TOPIC, f"{field} {name!r} has characters outside [%|a-zA-Z0-9_-]")
    if mixall.is_sys_topic(name) or name in mixall.SYSTEM_TOPICS:
        raise ProxyError(pb.Code.ILLEGAL_TOPIC, f"{field} {name!r} is a system topic")


def validate_group(name: str, *, field: str = "group") -> None:
    if not name or not name.strip():
        raise ProxyError(pb.Code.ILLEGAL_CONSUMER_GROUP, f"{field} is blank")
    if len(name) > 255 or not mixall.VALID_NAME.match(name):
        raise ProxyError(pb.Code.ILLEGAL_CONSUMER_GROUP, f"{field} {name!r} is not a valid group name")


# ------------------------------------------------------------------ delay levels
def parse_delay_levels(spec: str) -> list[int]:
    """``"1s 5s 10s 30s 1m ..."`` -> milliseconds per level (level 1 first)."""
    out = []
    for word in spec.split():
        unit = _UNIT_MS.get(word[-1:])
        if unit is None or not word[:-1].isdigit():
            raise ValueError(f"bad messageDelayLevel entry {word!r}")
        out.append(int(word[:-1]) * unit)
    return out


def delay_level_for(delay_ms: int, levels_ms: Sequence[int]) -> int:
    """The smallest level whose delay is not shorter than ``delay_ms`` (the message is never
    delivered early), else the largest; 0 (no delay) when ``delay_ms <= 0``."""
    if delay_ms <= 0 or not levels_ms:
        return 0
    for i, level in enumerate(levels_ms):
        if level >= delay_ms:
            return i + 1
    return len(levels_ms)


# ------------------------------------------------------------------ queue choice
def consistent_hash(key: int, buckets: int) -> int:
    """Guava ``Hashing.consistentHash(long, int)`` (what the Java proxy uses for message groups)."""
    if buckets <= 0:
        raise ValueError("buckets must be positive")
    state = key & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        as_int = (state >> 33) & 0xFFFFFFFF
        if as_int >= 1 << 31:
            as_int -= 1 << 32
        nxt = int((candidate + 1) / ((as_int + 1) / 2147483648.0))
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


def message_group_queue(message_group: str, n: int) -> int:
    """The index among ``n`` writable queues for a FIFO message group (Java's hashCode, signed)."""
    h = java_hash(message_group)
    if h >= 1 << 31:
        h -= 1 << 32
    return consistent_hash(h, n)


# ------------------------------------------------------------------ send
@dataclass(frozen=True, slots=True)
class SendLimits:
    max_body_size: int = 4 * 1024 * 1024
    max_user_properties: int = 128
    max_properties_size: int = 16 * 1024
    max_message_group_size: int = 64
    max_delay_ms: int = 3 * 86_400_000
    delay_levels_ms: tuple[int, ...] = tuple(parse_delay_levels(DEFAULT_DELAY_LEVELS))
    use_delay_level: bool = False


@dataclass(slots=True)
class SendPlan:
    """One message as SEND_MESSAGE_V2 carries it."""

    topic: str
    body: bytes
    sys_flag: int
    properties: dict[str, str]
    born_timestamp: int
    message_id: str
    message_type: int
    message_group: str | None


def _check_text(value: str, code: int, what: str) -> None:
    if not value.strip():
        raise ProxyError(code, f"{what} is blank")
    if _CONTROL.search(value):
        raise ProxyError(code, f"{what} {value!r} has control characters")


def plan_send(message: Any, *, now_ms: int, limits: SendLimits, topic: str | None = None) -> SendPlan:
    """v2 Message -> SendPlan (``SendMessageActivity.buildMessage``); raises ProxyError."""
    name = message.topic.name
    if topic is not None and name != topic:
        raise ProxyError(pb.Code.MESSAGE_CORRUPTED, f"topic {name!r} differs from the request's first topic {topic!r}")
    validate_topic(name, field="message.topic")
    sp = message.system_properties
    body = bytes(message.body)
    if not body:
        raise ProxyError(pb.Code.MESSAGE_BODY_EMPTY, "message body is empty")
    if len(body) > limits.max_body_size:
        raise ProxyError(
            pb.Code.MESSAGE_BODY_TOO_LARGE, f"message body is {len(body)} bytes, over the {limits.max_body_size} limit"
        )
    message_id = sp.message_id
    if not message_id or not message_id.strip():
        raise ProxyError(pb.Code.ILLEGAL_MESSAGE_ID, "system_properties.message_id is blank")

    props: dict[str, str] = {}
    user = dict(message.user_properties)
    if len(user) > limits.max_user_properties:
        raise ProxyError(
            pb.Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"{len(user)} user properties, over the {limits.max_user_properties} limit",
        )
    size = 0
    for k, v in user.items():
        if k in _SHOWN_AS_SYSTEM or not k.strip():
            raise ProxyError(pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property key {k!r} is reserved or blank")
        if "\x01" in k or "\x02" in k or "\x01" in v or "\x02" in v:
            raise ProxyError(pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property {k!r} has a separator character")
        size += len(k) + len(v)
        props[k] = v

    if sp.HasField("tag"):
        _check_text(sp.tag, pb.Code.ILLEGAL_MESSAGE_TAG, "system_properties.tag")
        if "|" in sp.tag:
            raise ProxyError(pb.Code.ILLEGAL_MESSAGE_TAG, f"system_properties.tag {sp.tag!r} has '|'")
        props[MessageConst.TAGS] = sp.tag
        size += len(sp.tag)
    if sp.keys:
        for key in sp.keys:
            _check_text(key, pb.Code.ILLEGAL_MESSAGE_KEY, "system_properties.keys[]")
            if " " in key:
                raise ProxyError(pb.Code.ILLEGAL_MESSAGE_KEY, f"system_properties.keys[] {key!r} has a space")
        props[MessageConst.KEYS] = MessageConst.KEY_SEPARATOR.join(sp.keys)
        size += len(props[MessageConst.KEYS])
    if size > limits.max_properties_size:
        raise ProxyError(
            pb.Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"tag, keys and properties are {size} bytes, over the {limits.max_properties_size} limit",
        )

    props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = message_id
    props[MessageConst.PRODUCER_GROUP] = name  # the Java proxy's producer group is the topic
    born_ms = sp.born_timestamp.ToMilliseconds() if sp.HasField("born_timestamp") else now_ms
    props[BORN_TIMESTAMP] = str(born_ms)
    if sp.born_host:
        props[BORN_HOST] = sp.born_host
    if sp.HasField("trace_context") and sp.trace_context:
        props[TRACE_CONTEXT] = sp.trace_context

    mtype = sp.message_type
    sys_flag = 0
    if sp.body_encoding == pb.Encoding.GZIP:
        sys_flag |= SysFlag.COMPRESSED
    group: str | None = None
    if sp.HasField("message_group"):
        group = sp.message_group
        _check_text(group, pb.Code.ILLEGAL_MESSAGE_GROUP, "system_properties.message_group")
        if len(group.encode()) > limits.max_message_group_size:
            raise ProxyError(
                pb.Code.ILLEGAL_MESSAGE_GROUP,
                f"system_properties.message_group is over {limits.max_message_group_size} bytes",
            )
        if mtype not in (pb.MessageType.FIFO, pb.MessageType.MESSAGE_TYPE_UNSPECIFIED):
            raise ProxyError(
                pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"message_group set on a {pb.MessageType.name(mtype)} message",
            )
        props[MessageConst.SHARDING_KEY] = group
    if sp.HasField("delivery_timestamp"):
        deliver_ms = sp.delivery_timestamp.ToMilliseconds()
        if mtype not in (pb.MessageType.DELAY, pb.MessageType.MESSAGE_TYPE_UNSPECIFIED):
            raise ProxyError(
                pb.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"delivery_timestamp set on a {pb.MessageType.name(mtype)} message",
            )
        if deliver_ms - now_ms > limits.max_delay_ms:
            raise ProxyError(
                pb.Code.ILLEGAL_DELIVERY_TIME,
                f"system_properties.delivery_timestamp {deliver_ms} ms is more than {limits.max_delay_ms} ms ahead",
            )
        props[TIMER_DELIVER_MS] = str(deliver_ms)
        if limits.use_delay_level:
            level = delay_level_for(deliver_ms - now_ms, limits.delay_levels_ms)
            if level > 0:
                props[MessageConst.DELAY_TIME_LEVEL] = str(level)
    if mtype == pb.MessageType.TRANSACTION:
        props[MessageConst.TRANSACTION_PREPARED] = "true"
        sys_flag |= SysFlag.TRANSACTION_PREPARED_TYPE
        if sp.HasField("orphaned_transaction_recovery_duration"):
            secs = min(3600, max(0, sp.orphaned_transaction_recovery_duration.seconds))
            props[MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(secs)
    elif mtype in (pb.MessageType.LITE, pb.MessageType.PRIORITY):
        raise ProxyError(pb.Code.UNSUPPORTED, f"message type {pb.MessageType.name(mtype)} is not supported")
    return SendPlan(name, body, sys_flag, props, born_ms, message_id, mtype, group)


# ------------------------------------------------------------------ transactions
@dataclass(frozen=True, slots=True)
class TransactionId:
    """What END_TRANSACTION needs, in the id itself: any proxy instance can commit it.

    Text form ``"<brokerName> <commitLogOffset> <tranStateTableOffset> <offsetMsgId>"``.
    """

    broker_name: str
    commit_log_offset: int
    tran_state_table_offset: int
    offset_msg_id: str

    def encode(self) -> str:
        return f"{self.broker_name} {self.commit_log_offset} {self.tran_state_table_offset} {self.offset_msg_id}"

    @classmethod
    def decode(cls, text: str) -> TransactionId:
        parts = text.split(" ")
        if len(parts) != 4 or not parts[0] or not parts[1].isdigit() or not parts[2].isdigit():
            raise ProxyError(pb.Code.INVALID_TRANSACTION_ID, f"transaction_id {text!r} was not issued by rmq proxy")
        return cls(parts[0], int(parts[1]), int(parts[2]), parts[3])


# ------------------------------------------------------------------ route
def _permission(readable: bool, writable: bool) -> int:
    if readable and writable:
        return pb.Permission.READ_WRITE
    if readable:
        return pb.Permission.READ
    if writable:
        return pb.Permission.WRITE
    return pb.Permission.NONE


ALL_TYPES = (pb.MessageType.NORMAL, pb.MessageType.FIFO, pb.MessageType.DELAY, pb.MessageType.TRANSACTION)


def accept_types(message_type_attribute: str | None) -> tuple[int, ...]:
    """A topic's ``message.type`` attribute -> the v2 message types it accepts. Unset (every 4.x
    topic) or MIXED: all four (the Java proxy says NORMAL for an unset one: a deliberate difference,
    so FIFO, delayed and transactional 5.x producers work with plain 4.x topics)."""
    if message_type_attribute in ("NORMAL", "FIFO", "DELAY", "TRANSACTION"):
        return (getattr(pb.MessageType, message_type_attribute),)
    return ALL_TYPES


def route_to_queues(
    topic: Any, route: TopicRouteData, endpoints: Any, accept_types: Iterable[int] = ALL_TYPES
) -> list[Any]:
    """One v2 MessageQueue per 4.x queue id of every broker group that has a master.

    Queue ``i`` of a QueueData is readable when ``i < readQueueNums`` and the perm allows reads,
    writable likewise: ids stay the 4.x queue ids (the Java proxy numbers READ, WRITE and
    READ_WRITE runs consecutively instead, which only differs when read != write counts).
    The broker is reported as id 0 (the master) at the proxy's own ``endpoints``.
    """
    masters = {bd.broker_name for bd in route.broker_datas if MASTER_ID in bd.broker_addrs}
    types = list(accept_types)
    out = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if qd.broker_name not in masters:
            continue
        r = qd.read_queue_nums if PermName.is_readable(qd.perm) else 0
        w = qd.write_queue_nums if PermName.is_writeable(qd.perm) else 0
        for qid in range(max(qd.read_queue_nums, qd.write_queue_nums)):
            mq = pb.msg("MessageQueue")()
            mq.topic.CopyFrom(topic)
            mq.id = qid
            mq.permission = _permission(qid < r, qid < w)
            mq.broker.name = qd.broker_name
            mq.broker.id = MASTER_ID
            mq.broker.endpoints.CopyFrom(endpoints)
            mq.accept_message_types.extend(types)
            out.append(mq)
    return out


def endpoints_of(host: str, port: int) -> Any:
    ep = pb.msg("Endpoints")()
    ep.scheme = pb.AddressScheme.IPv4 if re.fullmatch(r"[0-9.]+", host) else pb.AddressScheme.DOMAIN_NAME
    a = ep.addresses.add()
    a.host = host
    a.port = port
    return ep


# ------------------------------------------------------------------ receive
def message_type_of(props: Mapping[str, str]) -> int:
    if props.get(MessageConst.TRANSACTION_PREPARED) == "true":
        return pb.MessageType.TRANSACTION
    if MessageConst.DELAY_TIME_LEVEL in props or TIMER_DELIVER_MS in props or TIMER_DELAY_SEC in props:
        return pb.MessageType.DELAY
    if MessageConst.SHARDING_KEY in props:
        return pb.MessageType.FIFO
    return pb.MessageType.NORMAL


def to_v2_message(
    msg: MessageExt, *, topic: str | None = None, receipt_handle: str | None = None, now_ms: int | None = None
) -> Any:
    """A stored message -> v2 Message (``GrpcConverter.buildMessage``); ``topic`` overrides
    the stored one (a retry copy is shown under its original topic)."""
    props = msg.properties
    m = pb.msg("Message")()
    m.topic.name = topic or msg.topic
    for k, v in props.items():
        if k not in _SHOWN_AS_SYSTEM:
            m.user_properties[k] = v
    sp = m.system_properties
    if MessageConst.TAGS in props:
        sp.tag = props[MessageConst.TAGS]
    if props.get(MessageConst.KEYS):
        sp.keys.extend(k for k in props[MessageConst.KEYS].split(MessageConst.KEY_SEPARATOR) if k)
    sp.message_id = props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id
    sp.body_digest.type = pb.DigestType.MD5
    sp.body_digest.checksum = hashlib.md5(msg.body).hexdigest().upper()
    sp.body_encoding = pb.Encoding.GZIP if msg.sys_flag & SysFlag.COMPRESSED else pb.Encoding.IDENTITY
    sp.message_type = message_type_of(props)
    sp.born_timestamp.FromMilliseconds(msg.born_timestamp)
    sp.born_host = props.get(BORN_HOST) or msg.born_host_str
    sp.store_timestamp.FromMilliseconds(msg.store_timestamp)
    sp.store_host = msg.store_host_str
    if TIMER_DELAY_SEC in props and props[TIMER_DELAY_SEC].isdigit() and now_ms is not None:
        sp.delivery_timestamp.FromMilliseconds(now_ms + int(props[TIMER_DELAY_SEC]) * 1000)
    elif props.get(TIMER_DELIVER_MS, "").isdigit():
        sp.delivery_timestamp.FromMilliseconds(int(props[TIMER_DELIVER_MS]))
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    sp.queue_id = msg.queue_id
    sp.queue_offset = msg.queue_offset
    sp.delivery_attempt = msg.reconsume_times + 1
    if MessageConst.SHARDING_KEY in props:
        sp.message_group = props[MessageConst.SHARDING_KEY]
    if TRACE_CONTEXT in props:
        sp.trace_context = props[TRACE_CONTEXT]
    if DLQ_ORIGIN_TOPIC in props and DLQ_ORIGIN_MESSAGE_ID in props:
        sp.dead_letter_queue.topic = props[DLQ_ORIGIN_TOPIC]
        sp.dead_letter_queue.message_id = props[DLQ_ORIGIN_MESSAGE_ID]
    m.body = msg.body
    return m
