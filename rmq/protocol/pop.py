"""RocketMQ 5's POP consumption on the wire (sans-IO): the POP_MESSAGE (200050),
ACK_MESSAGE (200051) and CHANGE_MESSAGE_INVISIBLETIME (200053) headers, the receipt
handle (``ExtraInfoUtil``'s extraInfo, the ``POP_CK`` property), the per-queue info
strings of a POP response, and the revive-log bodies (``PopCheckPoint`` / ``AckMsg``).

Field names are RocketMQ 5.3's, so a 5.x proxy (ours or Apache's) talks to an rmq
broker as it does to a 5.x broker. The headers are declared with
``rmq.protocol.headers``' ``@_wire`` machinery.

ExtraInfo (space separated, ``ExtraInfoUtil.buildExtraInfo``)::

    ckQueueOffset popTime invisibleTime reviveQid topicType brokerName queueId queueOffset

``topicType`` is 0 for a normal topic, 1 for a v1 POP retry topic (``%RETRY%<group>_<topic>``),
2 for v2 (``%RETRY%<group>+<topic>``); ``reviveQid`` 999 marks an orderly (FIFO) pop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from rmq.common import fastjson
from rmq.common.mixall import RETRY_GROUP_TOPIC_PREFIX
from rmq.protocol.errors import ProtocolError
from rmq.protocol.headers import Header, Long, _wire

__all__ = [
    "POP_ORDER_REVIVE_QUEUE",
    "CK_TAG",
    "ACK_TAG",
    "BATCH_ACK_TAG",
    "REVIVE_GROUP",
    "REVIVE_QUEUE_NUM",
    "INIT_MODE_MIN",
    "INIT_MODE_MAX",
    "PROPERTY_POP_CK",
    "PROPERTY_FIRST_POP_TIME",
    "PROPERTY_DLQ_ORIGIN_TOPIC",
    "PROPERTY_DLQ_ORIGIN_MESSAGE_ID",
    "revive_topic",
    "pop_retry_topic",
    "pop_retry_topic_v2",
    "is_pop_retry_topic",
    "topic_type",
    "real_topic",
    "PopMessageRequestHeader",
    "PopMessageResponseHeader",
    "AckMessageRequestHeader",
    "ChangeInvisibleTimeRequestHeader",
    "ChangeInvisibleTimeResponseHeader",
    "ExtraInfo",
    "QueueInfo",
    "build_queue_info",
    "parse_start_offset_info",
    "parse_msg_offset_info",
    "parse_order_count_info",
    "order_count_key",
    "PopCheckPoint",
    "AckMsg",
    "ck_unique_id",
    "ack_unique_id",
]

POP_ORDER_REVIVE_QUEUE: Final = 999  # KeyBuilder.POP_ORDER_REVIVE_QUEUE
CK_TAG: Final = "ck"
ACK_TAG: Final = "ack"
BATCH_ACK_TAG: Final = "bAck"
SPLIT: Final = "@"  # PopAckConstants.SPLIT
REVIVE_GROUP: Final = "CID_RMQ_SYS_REVIVE_GROUP"
REVIVE_QUEUE_NUM: Final = 8  # BrokerConfig.reviveQueueNum
INIT_MODE_MIN: Final = 0  # ConsumeInitMode
INIT_MODE_MAX: Final = 1
PROPERTY_POP_CK: Final = "POP_CK"
PROPERTY_FIRST_POP_TIME: Final = "1ST_POP_TIME"
PROPERTY_DLQ_ORIGIN_TOPIC: Final = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID: Final = "DLQ_ORIGIN_MESSAGE_ID"

_NORMAL, _RETRY_V1, _RETRY_V2 = "0", "1", "2"


def revive_topic(cluster_name: str) -> str:
    """``rmq_sys_REVIVE_LOG_<cluster>`` (PopAckConstants.buildClusterReviveTopic)."""
    return "rmq_sys_REVIVE_LOG_" + cluster_name


def pop_retry_topic(topic: str, group: str) -> str:
    """``%RETRY%<group>_<topic>`` (KeyBuilder.buildPopRetryTopicV1; v2 is off by default)."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}"


def pop_retry_topic_v2(topic: str, group: str) -> str:
    """``%RETRY%<group>+<topic>`` (KeyBuilder.buildPopRetryTopicV2)."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}+{topic}"


def is_pop_retry_topic(topic: str, group: str) -> bool:
    prefix = f"{RETRY_GROUP_TOPIC_PREFIX}{group}"
    return topic.startswith(prefix) and topic[len(prefix) : len(prefix) + 1] in ("_", "+")


def topic_type(topic: str) -> str:
    """ExtraInfo's retry mark for the topic a message was read from (getRetry)."""
    if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return _NORMAL
    return _RETRY_V2 if "+" in topic else _RETRY_V1


def real_topic(topic: str, group: str, mark: str) -> str:
    """The topic an ack goes to: the retry topic for a message popped from it."""
    if mark == _NORMAL:
        return topic
    if mark == _RETRY_V1:
        return pop_retry_topic(topic, group)
    if mark == _RETRY_V2:
        return pop_retry_topic_v2(topic, group)
    raise ProtocolError(f"extraInfo topic type {mark!r} is not 0, 1 or 2")


# --------------------------------------------------------------------------- headers
@_wire(broker_name="bname")
@dataclass(slots=True)
class PopMessageRequestHeader(Header):
    """POP_MESSAGE (200050). ``queue_id`` -1: every readable queue of the topic."""

    consumer_group: str
    topic: str
    queue_id: int
    max_msg_nums: int
    invisible_time: Long
    poll_time: Long
    born_time: Long
    init_mode: int
    exp_type: str | None = None
    exp: str | None = None
    order: bool = False
    attempt_id: str | None = None
    broker_name: str | None = None  # RpcRequestHeader.bname


@_wire()
@dataclass(slots=True)
class PopMessageResponseHeader(Header):
    pop_time: Long
    invisible_time: Long
    revive_qid: int
    rest_num: Long
    start_offset_info: str | None = None
    msg_offset_info: str | None = None
    order_count_info: str | None = None


@_wire(broker_name="bname")
@dataclass(slots=True)
class AckMessageRequestHeader(Header):
    """ACK_MESSAGE (200051): ``topic`` is the real topic (the retry topic for a retry
    message), ``offset`` the message's queue offset, ``extra_info`` its POP_CK."""

    consumer_group: str
    topic: str
    queue_id: int
    extra_info: str
    offset: Long
    broker_name: str | None = None


@_wire(broker_name="bname")
@dataclass(slots=True)
class ChangeInvisibleTimeRequestHeader(Header):
    """CHANGE_MESSAGE_INVISIBLETIME (200053)."""

    consumer_group: str
    topic: str
    queue_id: int
    extra_info: str
    offset: Long
    invisible_time: Long
    broker_name: str | None = None


@_wire()
@dataclass(slots=True)
class ChangeInvisibleTimeResponseHeader(Header):
    pop_time: Long
    invisible_time: Long
    revive_qid: int


# --------------------------------------------------------------------------- extraInfo
def _int_at(parts: Sequence[str], i: int, name: str) -> int:
    if len(parts) <= i:
        raise ProtocolError(f"extraInfo has no {name} (field {i + 1}); got {len(parts)} fields")
    try:
        return int(parts[i])
    except ValueError:
        raise ProtocolError(f"extraInfo {name} is not a number: {parts[i][:40]!r}") from None


@dataclass(frozen=True, slots=True)
class ExtraInfo:
    """A receipt handle as the broker reads it back (ExtraInfoUtil)."""

    ck_queue_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    topic_type: str
    broker_name: str
    queue_id: int
    queue_offset: int | None = None

    @property
    def is_order(self) -> bool:
        return self.revive_qid == POP_ORDER_REVIVE_QUEUE

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    def real_topic(self, topic: str, group: str) -> str:
        return real_topic(topic, group, self.topic_type)

    def encode(self) -> str:
        head = (
            f"{self.ck_queue_offset} {self.pop_time} {self.invisible_time} {self.revive_qid} "
            f"{self.topic_type} {self.broker_name} {self.queue_id}"
        )
        return head if self.queue_offset is None else f"{head} {self.queue_offset}"

    @classmethod
    def build(
        cls,
        ck_queue_offset: int,
        pop_time: int,
        invisible_time: int,
        revive_qid: int,
        topic: str,
        broker_name: str,
        queue_id: int,
        queue_offset: int | None = None,
    ) -> ExtraInfo:
        """ExtraInfoUtil.buildExtraInfo: the topic the message was read from gives the mark."""
        return cls(
            ck_queue_offset,
            pop_time,
            invisible_time,
            revive_qid,
            topic_type(topic),
            broker_name,
            queue_id,
            queue_offset,
        )

    @classmethod
    def parse(cls, text: str | None) -> ExtraInfo:
        """Read a POP_CK / extraInfo (a trailing commitLogOffset, as the proxy's receipt
        handle has, is ignored); ProtocolError names the bad field."""
        if not text:
            raise ProtocolError("extraInfo is empty")
        parts = text.split(" ")
        if len(parts) < 7:
            raise ProtocolError(f"extraInfo needs at least 7 space-separated fields, got {len(parts)}: {text[:80]!r}")
        mark = parts[4]
        if mark not in (_NORMAL, _RETRY_V1, _RETRY_V2):
            raise ProtocolError(f"extraInfo topic type {mark[:10]!r} is not 0, 1 or 2")
        return cls(
            _int_at(parts, 0, "ckQueueOffset"),
            _int_at(parts, 1, "popTime"),
            _int_at(parts, 2, "invisibleTime"),
            _int_at(parts, 3, "reviveQid"),
            mark,
            parts[5],
            _int_at(parts, 6, "queueId"),
            _int_at(parts, 7, "queueOffset") if len(parts) > 7 else None,
        )


# --------------------------------------------------------------------------- per-queue info strings
@dataclass(frozen=True, slots=True)
class QueueInfo:
    """One queue's part of a POP response: where its ck starts, the offsets returned, and
    (orderly) how often each was consumed."""

    topic: str  # the topic read (a retry topic gives mark 1)
    queue_id: int
    start_offset: int
    msg_offsets: tuple[int, ...]
    order_counts: Mapping[int, int] | None = None  # queue offset -> consumed count


def order_count_key(queue_id: int, queue_offset: int) -> str:
    """``qo<qid>%<offset>`` (ExtraInfoUtil.getQueueOffsetKeyValueKey)."""
    return f"qo{queue_id}%{queue_offset}"


def build_queue_info(queues: Iterable[QueueInfo]) -> tuple[str, str, str]:
    """(startOffsetInfo, msgOffsetInfo, orderCountInfo) as ExtraInfoUtil builds them."""
    start: list[str] = []
    msgs: list[str] = []
    counts: list[str] = []
    for q in queues:
        mark = topic_type(q.topic)
        start.append(f"{mark} {q.queue_id} {q.start_offset}")
        msgs.append(f"{mark} {q.queue_id} " + ",".join(str(o) for o in q.msg_offsets))
        if q.order_counts is not None:
            # per offset consumed more than once, then the queue's least (older SDKs read that)
            for off in q.msg_offsets:
                n = q.order_counts.get(off, 0)
                if n > 0:
                    counts.append(f"{mark} {order_count_key(q.queue_id, off)} {n}")
            least = min((q.order_counts.get(off, 0) for off in q.msg_offsets), default=0)
            counts.append(f"{mark} {q.queue_id} {least}")
    return ";".join(start), ";".join(msgs), ";".join(counts)


def _entries(text: str | None, what: str) -> Iterable[tuple[str, str]]:
    if not text:
        return
    for one in text.split(";"):
        parts = one.split(" ")
        if len(parts) != 3:
            raise ProtocolError(f"{what} entry {one[:60]!r} is not '<type> <key> <value>'")
        yield f"{parts[0]}@{parts[1]}", parts[2]


def _num(raw: str, what: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ProtocolError(f"{what}: {raw[:40]!r} is not a number") from None


def parse_start_offset_info(text: str | None) -> dict[str, int]:
    """``{"<type>@<qid>": startOffset}`` (parseStartOffsetInfo)."""
    return {k: _num(v, "startOffsetInfo") for k, v in _entries(text, "startOffsetInfo")}


def parse_msg_offset_info(text: str | None) -> dict[str, list[int]]:
    """``{"<type>@<qid>": [queueOffset, ...]}`` (parseMsgOffsetInfo)."""
    return {k: [_num(x, "msgOffsetInfo") for x in v.split(",")] for k, v in _entries(text, "msgOffsetInfo")}


def parse_order_count_info(text: str | None) -> dict[str, int]:
    """``{"<type>@qo<qid>%<offset>" or "<type>@<qid>": count}`` (parseOrderCountInfo)."""
    return {k: _num(v, "orderCountInfo") for k, v in _entries(text, "orderCountInfo")}


# --------------------------------------------------------------------------- revive-log bodies
def _field(d: Mapping[str, Any], short: str, long: str, kind: type, what: str) -> Any:
    v = d.get(short, d.get(long))
    if v is None or not isinstance(v, kind) or isinstance(v, bool):
        raise ProtocolError(f"{what} field {short!r} ({long}) is missing or not {kind.__name__}: {v!r}")
    return v


def _json_object(body: bytes, what: str) -> Mapping[str, Any]:
    try:
        d = fastjson.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"{what} body is not JSON: {e}") from None
    if not isinstance(d, dict):
        raise ProtocolError(f"{what} body is not a JSON object")
    return d


@dataclass(slots=True)
class PopCheckPoint:
    """A pop's check point (``PopCheckPoint``): the ``n`` messages popped from ``t``/``q``
    at ``so + d[i]``, invisible until ``pt + it``; ``bm`` bit i set = message i acked."""

    start_offset: int  # so
    pop_time: int  # pt
    invisible_time: int  # it
    queue_id: int  # q
    topic: str  # t
    group: str  # c
    broker_name: str  # bn
    queue_offset_diff: list[int] = field(default_factory=list)  # d
    bit_map: int = 0  # bm
    revive_offset: int = 0  # ro
    re_put_times: str | None = None  # rp

    @property
    def num(self) -> int:
        return len(self.queue_offset_diff)

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    def offsets(self) -> list[int]:
        return [self.start_offset + d for d in self.queue_offset_diff]

    def index_of_ack(self, ack_offset: int) -> int:
        """The message index for a queue offset, -1 if this ck has none there."""
        try:
            return self.queue_offset_diff.index(ack_offset - self.start_offset)
        except ValueError:
            return -1

    def key(self) -> tuple[str, str, int, int, int, str]:
        """What an ack names its ck by (topic, group, qid, startOffset, popTime, broker)."""
        return (self.topic, self.group, self.queue_id, self.start_offset, self.pop_time, self.broker_name)

    def encode(self) -> bytes:
        """fastjson's form: keys sorted, getters included (reviveTime), nulls left out."""
        d: dict[str, Any] = {
            "bm": self.bit_map,
            "bn": self.broker_name,
            "c": self.group,
            "d": list(self.queue_offset_diff),
            "it": self.invisible_time,
            "n": self.num,
            "pt": self.pop_time,
            "q": self.queue_id,
            "reviveTime": self.revive_time,
            "ro": self.revive_offset,
        }
        if self.re_put_times is not None:
            d["rp"] = self.re_put_times
        d["so"] = self.start_offset
        d["t"] = self.topic
        return fastjson.dumps(d)

    @classmethod
    def decode(cls, body: bytes) -> PopCheckPoint:
        d = _json_object(body, "ck")
        diff = d.get("d", d.get("queueOffsetDiff"))
        if diff is None:
            diff = []
        if not isinstance(diff, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in diff):
            raise ProtocolError(f"ck field 'd' (queueOffsetDiff) is not a list of numbers: {diff!r}")
        rp = d.get("rp")
        ck = cls(
            _field(d, "so", "startOffset", int, "ck"),
            _field(d, "pt", "popTime", int, "ck"),
            _field(d, "it", "invisibleTime", int, "ck"),
            _field(d, "q", "queueId", int, "ck"),
            _field(d, "t", "topic", str, "ck"),
            _field(d, "c", "cid", str, "ck"),
            d.get("bn", d.get("brokerName")) or "",
            list(diff),
            int(d.get("bm", 0) or 0),
            int(d.get("ro", 0) or 0),
            None if rp is None else str(rp),
        )
        n = d.get("n")
        if not ck.queue_offset_diff and isinstance(n, int) and n > 0:
            ck.queue_offset_diff = list(range(n))  # a ck without d: n messages in a row
        return ck


@dataclass(slots=True)
class AckMsg:
    """An ack (``AckMsg``) or, with several ``ack_offsets``, a batch ack (``BatchAckMsg``)
    of messages of the ck (topic, group, qid, startOffset, popTime, broker)."""

    ack_offsets: list[int]  # ao (one) / aol (batch)
    start_offset: int  # so
    group: str  # c
    topic: str  # t
    queue_id: int  # q
    pop_time: int  # pt
    broker_name: str  # bn

    @property
    def is_batch(self) -> bool:
        return len(self.ack_offsets) != 1

    def ck_key(self) -> tuple[str, str, int, int, int, str]:
        return (self.topic, self.group, self.queue_id, self.start_offset, self.pop_time, self.broker_name)

    def encode(self) -> bytes:
        d: dict[str, Any] = {"ao": self.ack_offsets[0] if len(self.ack_offsets) == 1 else -1}
        if self.is_batch:
            d["aol"] = list(self.ack_offsets)
        d.update(
            {
                "bn": self.broker_name,
                "c": self.group,
                "pt": self.pop_time,
                "q": self.queue_id,
                "so": self.start_offset,
                "t": self.topic,
            }
        )
        return fastjson.dumps(d)

    @classmethod
    def decode(cls, body: bytes) -> AckMsg:
        d = _json_object(body, "ack")
        aol = d.get("aol", d.get("ackOffsetList"))
        if aol is not None:
            if not isinstance(aol, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in aol):
                raise ProtocolError(f"ack field 'aol' (ackOffsetList) is not a list of numbers: {aol!r}")
            offsets = list(aol)
        else:
            offsets = [_field(d, "ao", "ackOffset", int, "ack")]
        return cls(
            offsets,
            _field(d, "so", "startOffset", int, "ack"),
            _field(d, "c", "consumerGroup", str, "ack"),
            _field(d, "t", "topic", str, "ack"),
            _field(d, "q", "queueId", int, "ack"),
            _field(d, "pt", "popTime", int, "ack"),
            d.get("bn", d.get("brokerName")) or "",
        )


def ck_unique_id(ck: PopCheckPoint) -> str:
    """The ck record's UNIQ_KEY (PopMessageProcessor.genCkUniqueId)."""
    return SPLIT.join(
        (ck.topic, str(ck.queue_id), str(ck.start_offset), ck.group, str(ck.pop_time), ck.broker_name, CK_TAG)
    )


def ack_unique_id(ack: AckMsg) -> str:
    """The ack record's UNIQ_KEY (genAckUniqueId / genBatchAckUniqueId)."""
    offsets = ",".join(str(o) for o in ack.ack_offsets) if ack.is_batch else str(ack.ack_offsets[0])
    tag = BATCH_ACK_TAG if ack.is_batch else ACK_TAG
    return SPLIT.join((ack.topic, str(ack.queue_id), offsets, ack.group, str(ack.pop_time), ack.broker_name, tag))
