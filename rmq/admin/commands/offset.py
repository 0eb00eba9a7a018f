"""resetOffsetByTime, skipAccumulatedMessage, cloneGroupOffset (mqadmin's offset/ commands).

    rmq admin resetOffsetByTime -g GROUP -t TOPIC -s now|-1|<ms>|yyyy-MM-dd#HH:mm:ss:SSS [-f false]

INVOKE_BROKER_TO_RESET_OFFSET (222) goes to the master of every broker in the topic's
route: each sets the group's offset of each of its queues to the first message stored
at or after the time (``-1``: the end of each queue; without ``-f true``, the default,
an offset is never moved forward), commits it, and pushes it to the group's live
consumers (RESET_CONSUMER_CLIENT_OFFSET), which continue from there without a
restart. The table printed is mqadmin's: brokerName, queueId, new offset.
"""

from __future__ import annotations

import argparse
from datetime import datetime

from rmq.admin.admin import MQAdmin, route_brokers
from rmq.admin.base import GROUP, TOPIC, AdminError, Command, Opt, Output, UsageError, java_bool, register
from rmq.admin.output import Col, Table
from rmq.client.errors import MQBrokerError
from rmq.common.clock import now_ms
from rmq.common.mixall import MASTER_ID
from rmq.protocol.bodies import MessageQueue, loads_object_keyed_map
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.headers import ResetOffsetRequestHeader

#: UtilAll.YYYY_MM_DD_HH_MM_SS_SSS
TIME_FORMAT = "%Y-%m-%d#%H:%M:%S:%f"


def parse_reset_timestamp(text: str) -> int:
    """``now`` | milliseconds (``-1`` = the end of each queue) | yyyy-MM-dd#HH:mm:ss:SSS
    (local time), as ResetOffsetByTimeCommand reads ``-s``."""
    t = text.strip()
    if t == "now":
        return now_ms()
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return int(datetime.strptime(t, TIME_FORMAT).timestamp() * 1000)
    except ValueError:
        raise UsageError(f"timestamp {text!r} is not now, milliseconds, -1 or yyyy-MM-dd#HH:mm:ss:SSS") from None


_FORCE = Opt(
    "f",
    "force",
    "set the force rollback by timestamp switch[true|false] (default true)",
    type=java_bool,
    default=True,
    metavar="BOOL",
)


@register
class ResetOffsetByTime(Command):
    name = "resetOffsetByTime"
    help = "Reset consumer offset by timestamp(without client restart)."
    options = (
        GROUP.but(required=True, help="set the consumer group"),
        TOPIC.but(required=True, help="set the topic"),
        Opt(
            "s",
            "timestamp",
            "set the timestamp[now|currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS], -1 = the end of each queue",
            required=True,
            metavar="TIMESTAMP",
        ),
        _FORCE,
    )

    def validate(self, args: argparse.Namespace) -> None:
        args.timestamp_ms = parse_reset_timestamp(args.timestamp)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        group = args.consumerGroup.strip()
        topic = args.topic.strip()
        ts = args.timestamp_ms
        head = (
            f"rollback consumer offset by specified consumerGroup[{group}], "
            f"topic[{topic}], force[{str(args.force).lower()}], "
            f"timestamp(string)[{args.timestamp.strip()}], timestamp(long)[{ts}]"
        )
        await reset_and_print(admin, out, group, topic, ts, args.force, head)


async def reset_and_print(
    admin: MQAdmin, out: Output, group: str, topic: str, ts: int, force: bool, head: str | None
) -> None:
    """INVOKE_BROKER_TO_RESET_OFFSET on each master of the topic's route, then mqadmin's
    table of the offsets set (``head`` above it)."""
    route = await admin.examine_topic_route_info(topic)
    header = ResetOffsetRequestHeader(topic, group, ts, force)
    table: dict[MessageQueue, int] = {}
    brokers = 0
    for bd in sorted(route.broker_datas, key=lambda b: b.broker_name):
        addr = bd.broker_addrs.get(MASTER_ID)
        if not addr:
            out.error(f"broker {bd.broker_name} has no master; its queues were not reset")
            continue
        brokers += 1
        try:
            resp = await admin.call(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header.to_ext_fields())
        except MQBrokerError as e:
            if e.code == ResponseCode.CONSUMER_NOT_ONLINE:
                raise AdminError(f"broker {addr} answered CONSUMER_NOT_ONLINE: {e.remark}") from None
            raise
        for k, v in loads_object_keyed_map(resp.body or b"{}", "offsetTable"):
            table[MessageQueue.from_obj(k)] = int(v)
    if not brokers:
        raise AdminError(f"no master broker in the route of topic {topic}")
    rows = sorted(table.items())
    text_table = Table(Col("#brokerName", 40), Col("#queueId", 40), Col("#offset"))
    for mq, off in rows:
        text_table.add(mq.broker_name, mq.queue_id, off)
    out.emit(
        text=(head + "\n" if head else "") + text_table.render(),
        data={
            "consumerGroup": group,
            "topic": topic,
            "force": force,
            "timestamp": ts,
            "offsetTable": [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off} for mq, off in rows],
        },
    )


@register
class SkipAccumulatedMessage(Command):
    name = "skipAccumulatedMessage"
    help = "Skip all messages that are accumulated (not consumed) currently"
    description = "Move the group's offsets of the topic to the end of each queue (live consumers follow)."
    options = (
        GROUP.but(required=True, help="set the consumer group"),
        TOPIC.but(required=True, help="set the topic"),
        _FORCE,
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        await reset_and_print(admin, out, args.consumerGroup.strip(), args.topic.strip(), -1, args.force, None)


@register
class CloneGroupOffset(Command):
    name = "cloneGroupOffset"
    help = "clone offset from other group."
    description = "Give the destination group the source group's committed offsets of the topic, queue by queue."
    options = (
        Opt("s", "srcGroup", "set source consumer group", required=True, metavar="GROUP"),
        Opt("d", "destGroup", "set destination consumer group", required=True, metavar="GROUP"),
        TOPIC.but(required=True, help="set the topic"),
        Opt("o", "offline", "ignored (mqadmin's flag for an offline group or topic)", metavar="BOOL"),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        src, dest, topic = args.srcGroup.strip(), args.destGroup.strip(), args.topic.strip()
        route = await admin.examine_topic_route_info(topic)
        masters = {bd.broker_name: bd.broker_addrs.get(MASTER_ID) for bd in route.broker_datas}
        # the topic's brokers, not the group's retry route: an offline source that never
        # had a consumer online has offsets but no retry topic
        stats = await admin.examine_consume_stats(src, topic, route_brokers(route))
        cloned = []
        for mq, ow in stats.offset_table:
            addr = masters.get(mq.broker_name)
            if mq.topic != topic or not addr:
                continue
            await admin.update_consume_offset(addr, dest, mq, ow.consumer_offset)
            cloned.append({"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": ow.consumer_offset})
        out.emit(
            text=f"clone group offset success. srcGroup[{src}], destGroup=[{dest}], topic[{topic}]",
            data={"srcGroup": src, "destGroup": dest, "topic": topic, "offsets": cloned},
        )
