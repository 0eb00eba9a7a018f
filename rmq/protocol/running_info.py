"""GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309): the request headers
and the bodies a consumer answers with, as RocketMQ 4.9.8 and fastjson 1.2.83 write them.

Both requests go admin -> broker -> the consumer's connection and the answer comes back
the same way (the broker relays ext fields and body unchanged; for 309 it adds
``brokerName`` and the stored message's bytes as the body).

``ConsumerRunningInfo`` is what ``mqadmin consumerStatus`` prints and where
``consumerProgress`` finds which client holds a queue. Its ``mqTable`` is a
``TreeMap<MessageQueue, ProcessQueueInfo>``, which fastjson writes with the queue object in
key position (``{"mqTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}}``), the
form ``ConsumeStats`` uses too; the whole body is therefore assembled here rather than
declared as a table. The ``double`` figures of ``ConsumeStatus`` are written as
``Double.toString`` writes them (``0.0``), which the fastjson writer has no type for.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Final

from rmq.common import fastjson
from rmq.common.fastjson import FastjsonError, type_name
from rmq.protocol import headers as hdr
from rmq.protocol.bodies import (
    BOOL,
    INT,
    LONG,
    STR,
    Body,
    Codec,
    MessageQueue,
    SubscriptionData,
    Text,
    java_double,
    json_body,
    map_of,
    read_double,
)
from rmq.protocol.errors import ProtocolError

__all__ = [
    "GetConsumerRunningInfoRequestHeader",
    "ConsumeMessageDirectlyResultRequestHeader",
    "ProcessQueueInfo",
    "ConsumeStatus",
    "ConsumerRunningInfo",
    "CMResult",
    "ConsumeMessageDirectlyResult",
    "PROP_NAMESERVER_ADDR",
    "PROP_THREADPOOL_CORE_SIZE",
    "PROP_CONSUME_ORDERLY",
    "PROP_CONSUME_TYPE",
    "PROP_CLIENT_VERSION",
    "PROP_CONSUMER_START_TIMESTAMP",
]

# ConsumerRunningInfo's property keys (mqadmin's analyzeSubscription reads CONSUME_TYPE
# and CONSUMER_START_TIMESTAMP without a null check: a consumer must send both).
PROP_NAMESERVER_ADDR: Final = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE: Final = "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUME_ORDERLY: Final = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE: Final = "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION: Final = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP: Final = "PROP_CONSUMER_START_TIMESTAMP"


# =========================================================================== headers
@hdr._wire(
    ("consumer_group", "consumerGroup", hdr.STR, True),
    ("client_id", "clientId", hdr.STR, True),
    ("jstack_enable", "jstackEnable", hdr.BOOL, False),
)
@dataclass(slots=True)
class GetConsumerRunningInfoRequestHeader(hdr.Header):
    """GET_CONSUMER_RUNNING_INFO (307); ``jstackEnable`` is a primitive: always sent."""

    consumer_group: str
    client_id: str
    jstack_enable: bool = False


@hdr._wire(
    ("consumer_group", "consumerGroup", hdr.STR, True),
    ("client_id", "clientId", hdr.STR, False),
    ("msg_id", "msgId", hdr.STR, False),
    ("broker_name", "brokerName", hdr.STR, False),
)
@dataclass(slots=True)
class ConsumeMessageDirectlyResultRequestHeader(hdr.Header):
    """CONSUME_MESSAGE_DIRECTLY (309). ``msgId`` is the offset msgId the broker reads the
    message by; ``brokerName`` is added by the broker on the way to the consumer."""

    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    broker_name: str | None = None


# =========================================================================== bodies
@json_body(
    ("commit_offset", "commitOffset", LONG),
    ("cached_msg_min_offset", "cachedMsgMinOffset", LONG),
    ("cached_msg_max_offset", "cachedMsgMaxOffset", LONG),
    ("cached_msg_count", "cachedMsgCount", INT),
    ("cached_msg_size_in_mib", "cachedMsgSizeInMiB", INT),
    ("transaction_msg_min_offset", "transactionMsgMinOffset", LONG),
    ("transaction_msg_max_offset", "transactionMsgMaxOffset", LONG),
    ("transaction_msg_count", "transactionMsgCount", INT),
    ("locked", "locked", BOOL),
    ("try_unlock_times", "tryUnlockTimes", LONG),
    ("last_lock_timestamp", "lastLockTimestamp", LONG),
    ("droped", "droped", BOOL),  # sic: isDroped()
    ("last_pull_timestamp", "lastPullTimestamp", LONG),
    ("last_consume_timestamp", "lastConsumeTimestamp", LONG),
)
@dataclass(slots=True)
class ProcessQueueInfo(Body):
    """One held queue as ``ProcessQueue.fillProcessQueueInfo`` sees it; the "transaction"
    figures are an orderly consumer's taken-but-uncommitted messages."""

    commit_offset: int = 0
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mib: int = 0
    transaction_msg_min_offset: int = 0
    transaction_msg_max_offset: int = 0
    transaction_msg_count: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    droped: bool = False
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0


# (attribute, JSON name) in fastjson's order; every one a Java double but the last, a long.
_STATUS_FIELDS: Final = (
    ("consume_failed_msgs", "consumeFailedMsgs"),
    ("consume_failed_tps", "consumeFailedTPS"),
    ("consume_ok_tps", "consumeOKTPS"),
    ("consume_rt", "consumeRT"),
    ("pull_rt", "pullRT"),
    ("pull_tps", "pullTPS"),
)


@dataclass(slots=True)
class ConsumeStatus:
    """One subscribed topic's figures over the last minute (ConsumerStatsManager)."""

    pull_rt: float = 0.0
    pull_tps: float = 0.0
    consume_rt: float = 0.0
    consume_ok_tps: float = 0.0
    consume_failed_tps: float = 0.0
    consume_failed_msgs: int = 0

    def to_text(self) -> str:
        parts = []
        for attr, name in _STATUS_FIELDS:
            v = getattr(self, attr)
            parts.append(f'"{name}":' + (str(v) if attr == "consume_failed_msgs" else java_double(v)))
        return "{" + ",".join(parts) + "}"

    @classmethod
    def from_obj(cls, obj: Any, what: str = "ConsumeStatus") -> ConsumeStatus:
        if not isinstance(obj, dict):
            raise ProtocolError(f"{what} is {type_name(obj)}, not an object")
        out = cls()
        for attr, name in _STATUS_FIELDS:
            v = obj.get(name)
            if v is None:
                continue
            if attr == "consume_failed_msgs":
                setattr(out, attr, LONG.read(v, f"field {name}"))
            else:
                setattr(out, attr, read_double(v, f"field {name}"))
        return out


_PROPERTIES: Final[Codec] = map_of(STR)


def _subscription_order(sd: SubscriptionData) -> str:
    """TreeSet<SubscriptionData> order: SubscriptionData.compareTo compares topic@subString."""
    return sd.topic + "@" + sd.sub_string


@dataclass(slots=True)
class ConsumerRunningInfo:
    """What one consumer of a group reports about itself (GET_CONSUMER_RUNNING_INFO answer).

    ``properties``: its configuration under the Java field names plus the ``PROP_*`` keys,
    every value a string (Java ``Properties``). ``mq_table``: the queues it holds now (a
    pull-style consumer reports none, as Java's lite pull consumer). ``status_table``: per
    subscribed topic, pull / consume rates.
    """

    properties: dict[str, str] = field(default_factory=dict)
    subscription_set: list[SubscriptionData] = field(default_factory=list)
    mq_table: dict[MessageQueue, ProcessQueueInfo] = field(default_factory=dict)
    status_table: dict[str, ConsumeStatus] = field(default_factory=dict)
    jstack: str | None = None

    def to_json(self) -> bytes:
        """fastjson's bytes: bean properties sorted by name (jstack, mqTable, properties,
        statusTable, subscriptionSet), the TreeMap/TreeSet contents in their Java order.
        ``properties`` is written sorted (Java: its Hashtable's order; no reader cares)."""
        out: list[str] = []
        if self.jstack is not None:
            out.append('"jstack":' + fastjson.quote(self.jstack))
        mqs = ",".join(
            fastjson.dumps(mq.to_obj()).decode() + ":" + fastjson.dumps(self.mq_table[mq].to_obj()).decode()
            for mq in sorted(self.mq_table)
        )
        out.append('"mqTable":{' + mqs + "}")
        out.append('"properties":' + fastjson.dumps(self.properties).decode())
        status = ",".join(fastjson.quote(t) + ":" + self.status_table[t].to_text() for t in sorted(self.status_table))
        out.append('"statusTable":{' + status + "}")
        subs = sorted(self.subscription_set, key=_subscription_order)
        out.append('"subscriptionSet":' + fastjson.dumps([s.to_obj() for s in subs]).decode())
        return ("{" + ",".join(out) + "}").encode("utf-8", "surrogatepass")

    @classmethod
    def from_json(cls, data: Text) -> ConsumerRunningInfo:
        try:
            props, entries = fastjson.split_object_keyed_map(data, "mqTable")
        except FastjsonError as e:
            raise ProtocolError(str(e)) from None
        if not isinstance(props, dict):
            raise ProtocolError(f"ConsumerRunningInfo is {type_name(props)}, not an object")
        info = cls()
        raw = props.get("properties")
        if raw is not None:
            info.properties = _PROPERTIES.read(raw, "field properties")
        subs = props.get("subscriptionSet")
        if subs is not None:
            if not isinstance(subs, list):
                raise ProtocolError(f"field subscriptionSet is {type_name(subs)}, not an array")
            info.subscription_set = [SubscriptionData.from_obj(s, "subscriptionSet entry") for s in subs]
        for k, v in entries:
            info.mq_table[MessageQueue.from_obj(k, "mqTable key")] = ProcessQueueInfo.from_obj(v, "mqTable value")
        status = props.get("statusTable")
        if status is not None:
            if not isinstance(status, dict):
                raise ProtocolError(f"field statusTable is {type_name(status)}, not an object")
            info.status_table = {str(t): ConsumeStatus.from_obj(s, f"statusTable[{t!r}]") for t, s in status.items()}
        jstack = props.get("jstack")
        if jstack is not None:
            info.jstack = STR.read(jstack, "field jstack")
        return info


class CMResult(enum.Enum):
    """How a directly consumed message went (CMResult)."""

    CR_SUCCESS = "CR_SUCCESS"
    CR_LATER = "CR_LATER"
    CR_ROLLBACK = "CR_ROLLBACK"
    CR_COMMIT = "CR_COMMIT"
    CR_THROW_EXCEPTION = "CR_THROW_EXCEPTION"
    CR_RETURN_NULL = "CR_RETURN_NULL"


def _read_cm_result(v: Any, what: str) -> CMResult:
    s = STR.read(v, what)
    try:
        return CMResult(s)
    except ValueError:
        raise ProtocolError(f"unknown {what.removeprefix('field ')} {s!r:.40}") from None


def _write_cm_result(v: CMResult) -> str:
    return v.value


@json_body(
    ("order", "order", BOOL),
    ("auto_commit", "autoCommit", BOOL),
    ("consume_result", "consumeResult", Codec(_read_cm_result, _write_cm_result)),
    ("remark", "remark", STR),
    ("spent_time_mills", "spentTimeMills", LONG),
)
@dataclass(slots=True)
class ConsumeMessageDirectlyResult(Body):
    """The CONSUME_MESSAGE_DIRECTLY answer; ``str()`` is Java's toString, which
    ``mqadmin queryMsgById -g G -d CLIENT`` prints."""

    order: bool = False
    auto_commit: bool = True
    consume_result: CMResult | None = None
    remark: str | None = None
    spent_time_mills: int = 0

    def __str__(self) -> str:
        def text(v: object) -> str:
            if isinstance(v, bool):
                return "true" if v else "false"
            if isinstance(v, CMResult):
                return v.value
            return "null" if v is None else str(v)

        return (
            f"ConsumeMessageDirectlyResult [order={text(self.order)}, autoCommit={text(self.auto_commit)}, "
            f"consumeResult={text(self.consume_result)}, remark={text(self.remark)}, "
            f"spentTimeMills={self.spent_time_mills}]"
        )
