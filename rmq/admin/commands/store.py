"""cleanExpiredCQ, deleteExpiredCommitLog, cleanUnusedTopic, queryCq (mqadmin's broker/
and queue/ store commands; broker codes 306, 329, 316, 321).

``-c`` reaches every broker of the cluster, slaves included: each keeps a store of its own
(mqadmin asks the masters only, leaving a slave's expired files where they are).
"""

from __future__ import annotations

import argparse
from typing import ClassVar

from rmq.admin.admin import MQAdmin, select_broker_addr
from rmq.admin.base import (
    BROKER_ADDR,
    CLUSTER,
    GROUP,
    TOPIC,
    AdminError,
    Command,
    OnBrokers,
    Opt,
    Output,
    each_broker,
    register,
)
from rmq.protocol.codes import RequestCode


class _StoreMaintenance(OnBrokers):
    """The three differ only in the request each broker is sent."""

    with_slaves = True

    options = (BROKER_ADDR, CLUSTER.but(help="every broker (masters and slaves) of this cluster"))
    code: ClassVar[int]

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        done = []
        addrs = await self.targets(admin, args)
        async for addr, _ in each_broker(out, addrs, lambda a: admin.call(a, self.code), alone_raises=True):
            done.append(addr)
            if not out.json:
                out.emit(text=f"{addr}: success")
        if out.json:
            out.emit(data={"brokers": done})


@register
class CleanExpiredCQ(_StoreMaintenance):
    name = "cleanExpiredCQ"
    help = "Clean expired ConsumeQueue on broker."
    description = "Destroy the ConsumeQueue files whose messages the CommitLog no longer holds."
    code = RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE


@register
class DeleteExpiredCommitLog(_StoreMaintenance):
    name = "deleteExpiredCommitLog"
    help = "Delete expired CommitLog files"
    description = "Have the broker's cleaner delete expired CommitLog files now, whatever deleteWhen says."
    code = RequestCode.DELETE_EXPIRED_COMMITLOG


@register
class CleanUnusedTopic(_StoreMaintenance):
    name = "cleanUnusedTopic"
    help = "Clean unused topic on broker."
    description = "Destroy the ConsumeQueues of topics the broker no longer has a config for."
    code = RequestCode.CLEAN_UNUSED_TOPIC


@register
class QueryCq(Command):
    name = "queryCq"
    help = "Query cq command."
    description = (
        "Units of one ConsumeQueue from an index: the CommitLog offset, size and tag "
        "hash of each message. Without -b the master of the first broker of the topic's route."
    )
    options = (
        TOPIC.but(required=True),
        Opt("q", "queue", "queue id", required=True, type=int, metavar="ID"),
        Opt("i", "index", "start queue index", required=True, type=int, metavar="INDEX"),
        Opt("c", "count", "how many units (default 10)", type=int, default=10, metavar="N"),
        Opt("b", "broker", "broker address", metavar="ADDR"),
        GROUP.but(long="consumer", help="consumer group: show its subscription of the topic"),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topic = args.topic.strip()
        addr = args.broker.strip() if args.broker else None
        if addr is None:
            route = await admin.examine_topic_route_info(topic)
            addr = select_broker_addr(min(route.broker_datas, key=lambda b: b.broker_name))
            if addr is None:
                raise AdminError(f"no broker in the route of topic {topic}")
        group = args.consumer.strip() if args.consumer else None
        body, remark = await admin.query_consume_queue(addr, topic, args.queue, args.index, args.count, group)
        doc: dict[str, object] = {"brokerAddr": addr, "topic": topic, "queueId": args.queue}
        lines = []
        if body is None:  # the index is outside the queue: the broker says so
            out.emit(text=remark, data={**doc, "remark": remark, "units": []})
            return
        if body.subscription_data is not None:
            lines += [
                "Subscription data: ",
                str(body.subscription_data.to_obj()),
                "======================================",
            ]
        if body.filter_data is not None:
            lines += ["Filter data: ", body.filter_data, "======================================"]
        lines += [
            "Queue data: ",
            f"max: {body.max_queue_index}, min: {body.min_queue_index}",
            "======================================",
        ]
        units = []
        for i, u in enumerate(body.queue_data):
            lines += [
                f"idx: {args.index + i}",
                f"ConsumeQueueData{{physicOffset={u.physic_offset}, physicSize={u.physic_size}, "
                f"tagsCode={u.tags_code}, extendDataJson='{_null(u.extend_data_json)}', bitMap='{_null(u.bit_map)}', "
                f"eval={str(u.eval).lower()}, msg='{_null(u.msg)}'}}",
                "======================================",
            ]
            units.append(
                {
                    "index": args.index + i,
                    "physicOffset": u.physic_offset,
                    "physicSize": u.physic_size,
                    "tagsCode": u.tags_code,
                }
            )
        doc |= {
            "minQueueIndex": body.min_queue_index,
            "maxQueueIndex": body.max_queue_index,
            "filterData": body.filter_data,
            "units": units,
        }
        out.emit(text="\n".join(lines), data=doc)


def _null(v: object) -> str:
    return "null" if v is None else str(v)
