"""consumerProgress, updateSubGroup, deleteSubGroup, getConsumerConfig (mqadmin's consumer/
commands)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rmq.admin.admin import MQAdmin
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
    java_bool,
    register,
)
from rmq.admin.output import Col, Table, mq_version_desc
from rmq.client.errors import MQBrokerError
from rmq.common.mixall import MASTER_ID, RETRY_GROUP_TOPIC_PREFIX, dlq_topic, is_retry_topic, retry_topic
from rmq.protocol.bodies import SUBSCRIPTION_GROUP_KEYS, MessageQueue, subscription_group_string
from rmq.protocol.errors import ProtocolError
from rmq.remoting.errors import RemotingError


def date_text(ms: int) -> str:
    """UtilAll.formatDate(.., YYYY_MM_DD_HH_MM_SS); empty for a queue never consumed."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms > 0 else ""


async def _queue_holders(admin: MQAdmin, group: str) -> dict[MessageQueue, str]:
    """ConsumerProgressSubCommand.getMessageQueueAllocationResult: the IP of the client
    holding each queue, from each online client's running info (307). An offline group or
    a client that does not answer leaves its queues out (shown NA), as mqadmin does."""
    holders: dict[MessageQueue, str] = {}
    try:
        clients = (await admin.examine_consumer_connection_info(group)).connections
    except (AdminError, MQBrokerError, RemotingError):
        return holders
    for c in clients:
        try:
            info = await admin.get_consumer_running_info(group, c.client_id)
        except (AdminError, MQBrokerError, RemotingError, ProtocolError):
            continue
        for mq in info.mq_table:
            holders[mq] = c.client_id.split("@")[0]
    return holders


@register
class ConsumerProgress(Command):
    name = "consumerProgress"
    help = "Query consumers's progress, speed"
    description = (
        "Per queue: the broker offset (next message to be written), the group's "
        "committed offset, the IP of the online client holding the queue (NA: none), "
        "their difference and the store time of the last message consumed. "
        "Without -g: one line per consumer group."
    )
    options = (GROUP.but(long="groupName", help="consumer group name"), TOPIC.but(help="only this topic of the group"))

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        if args.groupName:
            await self._group(admin, args.groupName.strip(), args.topic.strip() if args.topic else None, out)
        else:
            await self._all(admin, out)

    @staticmethod
    async def _group(admin: MQAdmin, group: str, topic: str | None, out: Output) -> None:
        stats = await admin.examine_consume_stats(group, topic)
        holders = await _queue_holders(admin, group)
        table = Table(
            Col("#Topic", 32),
            Col("#Broker Name", 32),
            Col("#QID", 4),
            Col("#Broker Offset", 20),
            Col("#Consumer Offset", 20),
            Col("#Client IP", 20),
            Col("#Diff", 20, gap=" "),
            Col("#LastTime"),
        )
        rows = []
        for mq, ow in stats.offset_table:
            table.add(
                mq.topic,
                mq.broker_name,
                mq.queue_id,
                ow.broker_offset,
                ow.consumer_offset,
                holders.get(mq, "NA"),
                ow.diff,
                date_text(ow.last_timestamp),
            )
            rows.append(
                {
                    "topic": mq.topic,
                    "brokerName": mq.broker_name,
                    "queueId": mq.queue_id,
                    "brokerOffset": ow.broker_offset,
                    "consumerOffset": ow.consumer_offset,
                    "clientIp": holders.get(mq),
                    "diff": ow.diff,
                    "lastTimestamp": ow.last_timestamp,
                }
            )
        diff_total = stats.compute_total_diff()
        text = table.render() + "\n\n" + f"Consume TPS: {stats.consume_tps:.2f}\n" + f"Diff Total: {diff_total}"
        out.emit(
            text=text,
            data={
                "consumerGroup": group,
                "queues": rows,
                "consumeTps": round(stats.consume_tps, 2),
                "diffTotal": diff_total,
            },
        )

    @staticmethod
    async def _all(admin: MQAdmin, out: Output) -> None:
        table = Table(
            Col("#Group", 32),
            Col("#Count", 6),
            Col("#Version", 24),
            Col("#Type", 5, gap=" "),
            Col("#Model", 14),
            Col("#TPS", 7),
            Col("#Diff Total"),
        )
        rows = []
        groups = sorted(
            t[len(RETRY_GROUP_TOPIC_PREFIX) :] for t in await admin.fetch_all_topic_list() if is_retry_topic(t)
        )
        for group in groups:
            row: dict[str, Any] = {
                "group": group,
                "count": 0,
                "version": "OFFLINE",
                "type": "",
                "model": "",
                "tps": 0,
                "diffTotal": 0,
            }
            try:
                stats = await admin.examine_consume_stats(group)
                row["tps"] = int(stats.consume_tps)
                row["diffTotal"] = stats.compute_total_diff()
            except Exception:
                pass  # mqadmin lists the group anyway
            try:
                cc = await admin.examine_consumer_connection_info(group)
                row["count"] = len(cc.connections)
                row["version"] = mq_version_desc(cc.compute_min_version())
                push = cc.consume_type == "CONSUME_PASSIVELY"
                row["type"] = "PUSH" if push else "PULL"
                row["model"] = (cc.message_model or "") if push else ""
            except Exception:
                pass
            table.add(group, row["count"], row["version"], row["type"], row["model"], row["tps"], row["diffTotal"])
            rows.append(row)
        out.emit(text=table.render(), data={"groups": rows})


def _sub_group_config(args: argparse.Namespace) -> dict[str, Any]:
    """What UpdateSubGroupSubCommand sends: RocketMQ's defaults, broadcast and
    consume-from-min off unless asked for, then the flags given."""
    cfg: dict[str, Any] = {
        "groupName": args.groupName.strip(),
        "consumeEnable": True,
        "consumeFromMinEnable": False,
        "consumeBroadcastEnable": False,
        "retryQueueNums": 1,
        "retryMaxTimes": 16,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True,
    }
    for key, attr in (
        ("consumeEnable", "consumeEnable"),
        ("consumeFromMinEnable", "consumeFromMinEnable"),
        ("consumeBroadcastEnable", "consumeBroadcastEnable"),
        ("retryQueueNums", "retryQueueNums"),
        ("retryMaxTimes", "retryMaxTimes"),
        ("brokerId", "brokerId"),
        ("whichBrokerWhenConsumeSlowly", "whichBrokerWhenConsumeSlowly"),
        ("notifyConsumerIdsChangedEnable", "notifyConsumerIdsChanged"),
        ("consumeMessageOrderly", "consumeMessageOrderly"),
    ):
        v = getattr(args, attr)
        if v is not None:
            cfg[key] = v
    return cfg


@register
class UpdateSubGroup(OnBrokers):
    name = "updateSubGroup"
    help = "Update or create subscription group"
    options = (
        BROKER_ADDR.but(help="create subscription group to which broker"),
        CLUSTER.but(help="create subscription group to which cluster (every master)"),
        GROUP.but(long="groupName", required=True, help="consumer group name"),
        Opt("s", "consumeEnable", "consume enable (true|false)", type=java_bool, metavar="BOOL"),
        Opt("m", "consumeFromMinEnable", "from min offset (true|false)", type=java_bool, metavar="BOOL"),
        Opt("d", "consumeBroadcastEnable", "broadcast (true|false)", type=java_bool, metavar="BOOL"),
        Opt("q", "retryQueueNums", "retry queue nums", type=int, metavar="N"),
        Opt("r", "retryMaxTimes", "retry max times", type=int, metavar="N"),
        Opt("i", "brokerId", "consumer from which broker id", type=int, metavar="ID"),
        Opt("w", "whichBrokerWhenConsumeSlowly", "which broker id when consume slowly", type=int, metavar="ID"),
        Opt("a", "notifyConsumerIdsChanged", "notify consumerId changed (true|false)", type=java_bool, metavar="BOOL"),
        # RocketMQ 5's mqadmin: the group pops orderly (FIFO for 5.x clients)
        Opt("o", "consumeMessageOrderly", "consume message orderly (true|false)", type=java_bool, metavar="BOOL"),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        cfg = _sub_group_config(args)
        addrs = await self.targets(admin, args)
        for addr in addrs:
            await admin.create_and_update_subscription_group_config(addr, cfg)
            if not out.json:
                out.emit(text=f"create subscription group to {addr} success.")
        out.emit(text=subscription_group_string(cfg), data={"brokers": addrs, "subscriptionGroupConfig": cfg})


@register
class DeleteSubGroup(OnBrokers):
    name = "deleteSubGroup"
    help = "Delete subscription group from broker."
    description = (
        "Delete a subscription group from one broker, or from every master of a "
        "cluster together with its %RETRY% and %DLQ% topics."
    )
    options = (
        BROKER_ADDR.but(help="delete subscription group from which broker"),
        CLUSTER.but(help="delete subscription group from which cluster"),
        GROUP.but(long="groupName", required=True, help="subscription group name"),
        Opt(
            "r",
            "removeOffset",
            "also remove the group's consumer offsets (true|false, default false)",
            type=java_bool,
            default=False,
            metavar="BOOL",
        ),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        group = args.groupName.strip()
        cluster = args.clusterName.strip() if args.clusterName else None
        addrs = await self.targets(admin, args)
        holders = [a for a in addrs if group in await admin.subscription_groups(a)]
        if not holders:
            where = f"broker {addrs[0]}" if args.brokerAddr else f"cluster {cluster}"
            raise AdminError(f"subscription group {group} not found on {where}")
        doc: dict[str, Any] = {"groupName": group, "brokers": holders, "deletedTopics": []}
        for addr in holders:
            await admin.delete_subscription_group(addr, group, args.removeOffset)
            if not out.json:
                out.emit(
                    text=f"delete subscription group [{group}] from broker [{addr}]"
                    + (f" in cluster [{cluster}]" if cluster else "")
                    + " success."
                )
        if cluster is not None:
            # as mqadmin: the group's retry and dead-letter topics go with it
            for topic in (retry_topic(group), dlq_topic(group)):
                route = await admin.namesrv(admin.api.get_topic_route_info(topic, admin.timeout_ms))
                if route is None:
                    continue
                await admin.delete_topic_in_broker(
                    await admin.fetch_master_and_slave_addr_by_cluster_name(cluster), topic
                )
                await admin.delete_topic_in_namesrv(topic, cluster)
                doc["deletedTopics"].append(topic)
                if not out.json:
                    out.emit(
                        text=f"delete topic [{topic}] from cluster [{cluster}] success.\n"
                        f"delete topic [{topic}] from NameServer success."
                    )
        if out.json:
            out.emit(data=doc)


@register
class GetConsumerConfig(Command):
    name = "getConsumerConfig"
    help = "Get consumer config by subscription group name."
    description = "The subscription group's config on each master of every cluster that has it."
    options = (GROUP.but(long="groupName", required=True, help="subscription group name"),)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        group = args.groupName.strip()
        ci = await admin.examine_broker_cluster_info()
        lines: list[str] = []
        found = []
        for cluster in sorted(ci.cluster_addr_table):
            for bd in await admin.fetch_cluster_brokers(cluster):
                addr = bd.broker_addrs.get(MASTER_ID)
                cfg = (await admin.subscription_groups(addr)).get(group) if addr else None
                if cfg is None:
                    continue
                lines.append(f"============================={cluster}:{bd.broker_name}=============================")
                lines += [f"{k:<40}=  {_java_text(cfg.get(k))}" for k, _ in SUBSCRIPTION_GROUP_KEYS]
                found.append({"cluster": cluster, "brokerName": bd.broker_name, "brokerAddr": addr, "config": cfg})
        if not found:
            raise AdminError(f"subscription group {group} not found on any master")
        out.emit(text="\n".join(lines), data={"groupName": group, "brokers": found})


def _java_text(v: object) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)
