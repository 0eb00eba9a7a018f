"""Route data -> what producers and consumers use (MQClientInstance's pure parts).

``TopicPublishInfo`` is a producer's view of a topic: the writable queues of brokers
that have a master, and the round-robin counter (Java ``TopicPublishInfo``).
``topic_route_to_subscribe_info`` gives a consumer's readable queues.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from rmq.protocol.bodies import MASTER_ID, BrokerData, MessageQueue, TopicRouteData
from rmq.protocol.codes import PermName

__all__ = [
    "TopicPublishInfo",
    "RoundRobinIndex",
    "topic_route_to_publish_info",
    "topic_route_to_subscribe_info",
    "select_broker_addr",
    "topic_route_changed",
]


class RoundRobinIndex:
    """Java's ThreadLocalIndex: starts at a random value, increments, never negative."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = random.randrange(1 << 16)

    def get_and_increment(self) -> int:
        v = self.value
        self.value = (v + 1) & 0x7FFFFFFF
        return v


@dataclass
class TopicPublishInfo:
    order_topic: bool = False
    have_topic_router_info: bool = False
    message_queue_list: list[MessageQueue] = field(default_factory=list)
    topic_route_data: TopicRouteData | None = None
    send_which_queue: RoundRobinIndex = field(default_factory=RoundRobinIndex)

    def ok(self) -> bool:
        return bool(self.message_queue_list)

    def select_one_message_queue(self, last_broker_name: str | None = None) -> MessageQueue:
        """Round-robin; on a retry, the first queue of another broker than the last one."""
        mqs = self.message_queue_list
        n = len(mqs)
        if last_broker_name is None:
            return mqs[self.send_which_queue.get_and_increment() % n]
        for _ in range(n):
            mq = mqs[self.send_which_queue.get_and_increment() % n]
            if mq.broker_name != last_broker_name:
                return mq
        return mqs[self.send_which_queue.get_and_increment() % n]

    def get_queue_id_by_broker(self, broker_name: str) -> int:
        """Write queue count of ``broker_name`` for this topic, -1 if it has none."""
        rd = self.topic_route_data
        if rd is None:
            return -1
        for qd in rd.queue_datas:
            if qd.broker_name == broker_name:
                return qd.write_queue_nums
        return -1


def topic_route_to_publish_info(topic: str, route: TopicRouteData) -> TopicPublishInfo:
    """MQClientInstance.topicRouteData2TopicPublishInfo.

    An ordered topic (``orderTopicConf`` = ``broker:n;broker:n``) lists exactly those
    queues; otherwise each writable QueueData (sorted by broker name) whose broker group
    has a master contributes ``writeQueueNums`` queues.
    """
    info = TopicPublishInfo(topic_route_data=route)
    if route.order_topic_conf:
        for part in route.order_topic_conf.split(";"):
            name, _, num = part.partition(":")
            if not name or not num.strip().lstrip("-").isdigit():
                continue
            for i in range(int(num)):
                info.message_queue_list.append(MessageQueue(topic, name, i))
        info.order_topic = True
    else:
        brokers = {bd.broker_name: bd for bd in route.broker_datas}
        for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
            if not PermName.is_writeable(qd.perm):
                continue
            bd = brokers.get(qd.broker_name)
            if bd is None or MASTER_ID not in bd.broker_addrs:
                continue
            for i in range(qd.write_queue_nums):
                info.message_queue_list.append(MessageQueue(topic, qd.broker_name, i))
        info.order_topic = False
    info.have_topic_router_info = True
    return info


def topic_route_to_subscribe_info(topic: str, route: TopicRouteData) -> set[MessageQueue]:
    """MQClientInstance.topicRouteData2TopicSubscribeInfo: readable queues of every broker."""
    out: set[MessageQueue] = set()
    for qd in route.queue_datas:
        if PermName.is_readable(qd.perm):
            for i in range(qd.read_queue_nums):
                out.add(MessageQueue(topic, qd.broker_name, i))
    return out


def select_broker_addr(bd: BrokerData) -> str | None:
    """BrokerData.selectBrokerAddr: the master, else a random member."""
    addr = bd.broker_addrs.get(MASTER_ID)
    if addr is None and bd.broker_addrs:
        return random.choice(list(bd.broker_addrs.values()))
    return addr


def _route_key(route: TopicRouteData | None) -> object:
    if route is None:
        return None
    return (
        route.order_topic_conf,
        sorted(
            (q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag) for q in route.queue_datas
        ),
        sorted((b.broker_name, b.cluster, tuple(sorted(b.broker_addrs.items()))) for b in route.broker_datas),
    )


def topic_route_changed(old: TopicRouteData | None, new: TopicRouteData | None) -> bool:
    """topicRouteDataIsChange: compares the sorted route contents."""
    return _route_key(old) != _route_key(new)
