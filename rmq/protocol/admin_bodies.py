"""JSON bodies of the admin requests (RocketMQ's ``protocol/body`` and ``admin`` beans).

* ``ConsumeStats`` (GET_CONSUME_STATS 208): ``{"consumeTps":0.0,"offsetTable":{<MessageQueue>:
  {"brokerOffset":..,"consumerOffset":..,"lastTimestamp":..}}}`` -- an object-keyed map,
  as fastjson writes ``HashMap<MessageQueue, OffsetWrapper>``.
* ``ConsumerConnection`` (GET_CONSUMER_CONNECTION_LIST 203) and ``ProducerConnection``
  (GET_PRODUCER_CONNECTION_LIST 204): sets of ``Connection`` beans.
* ``SUBSCRIPTION_GROUP_KEYS``: the properties of a 4.9.8 ``SubscriptionGroupConfig`` body
  (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP 200) with their Java types.

Field names and value shapes are Java's (fastjson, properties sorted), so the Java
mqadmin reads what our broker writes and the other way round.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rmq.protocol.errors import ProtocolError
from rmq.protocol.route import (MessageQueue, SubscriptionData, dumps_fastjson, loads_fastjson,
                                loads_object_keyed_map)

__all__ = ["OffsetWrapper", "ConsumeStats", "Connection", "ConsumerConnection",
           "ProducerConnection", "SUBSCRIPTION_GROUP_KEYS", "subscription_group_string",
           "java_double"]


def java_double(v: float) -> str:
    """``Double.toString`` for the values a TPS takes (``0.0``, ``12.5``)."""
    r = repr(float(v))
    return r if ("." in r or "e" in r or "n" in r) else r + ".0"


def _num(obj: dict[str, Any], key: str, what: str) -> int:
    v = obj.get(key, 0)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProtocolError(f"{what}.{key} is not an integer: {v!r:.40}")
    return v


def _obj(v: Any, what: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise ProtocolError(f"{what} is not an object")
    return v


@dataclass(slots=True)
class OffsetWrapper:
    broker_offset: int = 0
    consumer_offset: int = 0
    last_timestamp: int = 0

    def to_obj(self) -> dict[str, Any]:
        return {"brokerOffset": self.broker_offset, "consumerOffset": self.consumer_offset,
                "lastTimestamp": self.last_timestamp}

    @classmethod
    def from_obj(cls, obj: Any) -> OffsetWrapper:
        o = _obj(obj, "OffsetWrapper")
        return cls(_num(o, "brokerOffset", "OffsetWrapper"),
                   _num(o, "consumerOffset", "OffsetWrapper"),
                   _num(o, "lastTimestamp", "OffsetWrapper"))

    @property
    def diff(self) -> int:
        return self.broker_offset - self.consumer_offset


@dataclass(slots=True)
class ConsumeStats:
    offset_table: list[tuple[MessageQueue, OffsetWrapper]] = field(default_factory=list)
    consume_tps: float = 0.0

    def to_json(self) -> bytes:
        entries = ",".join(dumps_fastjson(mq.to_obj()).decode() + ":"
                           + dumps_fastjson(ow.to_obj()).decode()
                           for mq, ow in self.offset_table)
        return ('{"consumeTps":' + java_double(self.consume_tps)
                + ',"offsetTable":{' + entries + "}}").encode()

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str) -> ConsumeStats:
        table = [(MessageQueue.from_obj(k), OffsetWrapper.from_obj(v))
                 for k, v in loads_object_keyed_map(data, "offsetTable")]
        tps = 0.0
        text = data if isinstance(data, str) else bytes(data).decode("utf-8", "replace")
        # consumeTps is a plain property; read it without the object-keyed map in the way
        i = text.find('"consumeTps":')
        if i >= 0:
            j = i + len('"consumeTps":')
            k = j
            while k < len(text) and text[k] in "+-.0123456789eE":
                k += 1
            try:
                tps = float(text[j:k])
            except ValueError:
                raise ProtocolError(f"ConsumeStats.consumeTps is not a number: "
                                    f"{text[j:j + 20]!r}") from None
        return cls(table, tps)

    def compute_total_diff(self) -> int:
        return sum(ow.diff for _, ow in self.offset_table)


@dataclass(slots=True)
class Connection:
    client_id: str
    client_addr: str
    language: str
    version: int

    def to_obj(self) -> dict[str, Any]:
        return {"clientAddr": self.client_addr, "clientId": self.client_id,
                "language": self.language, "version": self.version}

    @classmethod
    def from_obj(cls, obj: Any) -> Connection:
        o = _obj(obj, "Connection")
        return cls(str(o.get("clientId") or ""), str(o.get("clientAddr") or ""),
                   str(o.get("language") or ""), _num(o, "version", "Connection"))


def _connections(o: dict[str, Any]) -> list[Connection]:
    items = o.get("connectionSet") or []
    if not isinstance(items, list):
        raise ProtocolError("connectionSet is not an array")
    return [Connection.from_obj(c) for c in items]


@dataclass(slots=True)
class ConsumerConnection:
    connections: list[Connection] = field(default_factory=list)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None

    def to_obj(self) -> dict[str, Any]:
        return {"connectionSet": [c.to_obj() for c in self.connections],
                "consumeFromWhere": self.consume_from_where, "consumeType": self.consume_type,
                "messageModel": self.message_model,
                "subscriptionTable": {t: s.to_obj() for t, s in self.subscriptions.items()}}

    def to_json(self) -> bytes:
        return dumps_fastjson(self.to_obj())

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str) -> ConsumerConnection:
        o = _obj(loads_fastjson(data), "ConsumerConnection")
        subs = o.get("subscriptionTable") or {}
        if not isinstance(subs, dict):
            raise ProtocolError("subscriptionTable is not an object")
        return cls(_connections(o), {str(t): SubscriptionData.from_obj(s) for t, s in subs.items()},
                   o.get("consumeType"), o.get("messageModel"), o.get("consumeFromWhere"))

    def compute_min_version(self) -> int:
        return min((c.version for c in self.connections), default=2147483647)


@dataclass(slots=True)
class ProducerConnection:
    connections: list[Connection] = field(default_factory=list)

    def to_json(self) -> bytes:
        return dumps_fastjson({"connectionSet": [c.to_obj() for c in self.connections]})

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str) -> ProducerConnection:
        return cls(_connections(_obj(loads_fastjson(data), "ProducerConnection")))


#: SubscriptionGroupConfig (4.9.8) properties, in toString order, with their types.
SUBSCRIPTION_GROUP_KEYS: tuple[tuple[str, type], ...] = (
    ("groupName", str), ("consumeEnable", bool), ("consumeFromMinEnable", bool),
    ("consumeBroadcastEnable", bool), ("retryQueueNums", int), ("retryMaxTimes", int),
    ("brokerId", int), ("whichBrokerWhenConsumeSlowly", int),
    ("notifyConsumerIdsChangedEnable", bool))


def subscription_group_string(cfg: dict[str, Any]) -> str:
    """SubscriptionGroupConfig.toString() (what ``mqadmin updateSubGroup`` prints)."""
    def fmt(v: Any) -> str:
        return ("true" if v else "false") if isinstance(v, bool) else str(v)
    return ("SubscriptionGroupConfig [" + ", ".join(f"{k}={fmt(cfg.get(k))}"
                                                   for k, _ in SUBSCRIPTION_GROUP_KEYS) + "]")
