"""topicList, topicRoute, topicStatus, updateTopic, deleteTopic, updateTopicPerm,
topicClusterList, allocateMQ, updateOrderConf (mqadmin's topic/ commands)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from rmq.admin.admin import NAMESPACE_ORDER_TOPIC_CONFIG, MQAdmin
from rmq.admin.base import (
    BROKER_ADDR,
    CLUSTER,
    TOPIC,
    AdminError,
    Command,
    OnBrokers,
    Opt,
    Output,
    UsageError,
    each_broker,
    java_bool,
    register,
)
from rmq.admin.output import Col, Table, fastjson_pretty, human_time, topic_config_string, without_nulls
from rmq.client.rebalance import allocate_averagely
from rmq.client.routes import topic_route_to_subscribe_info
from rmq.common.mixall import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from rmq.protocol.bodies import ClusterInfo, TopicConfig, TopicRouteData
from rmq.protocol.codes import PermName

# TopicSysFlag
FLAG_UNIT = 0x1
FLAG_UNIT_SUB = 0x2


def build_sys_flag(unit: bool, has_unit_sub: bool) -> int:
    return (FLAG_UNIT if unit else 0) | (FLAG_UNIT_SUB if has_unit_sub else 0)


@register
class TopicList(Command):
    name = "topicList"
    help = "Fetch all topic list from name server"
    options = (Opt("c", "clusterModel", "with the cluster and consumer groups of each topic", arg=False),)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topics = sorted(await admin.fetch_all_topic_list())
        if not args.clusterModel:
            out.emit(text="\n".join(topics), data={"topics": topics})
            return
        ci = await admin.examine_broker_cluster_info()
        topics = [t for t in topics if not t.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))]
        limit = asyncio.Semaphore(16)

        async def describe(topic: str) -> tuple[str, list[str]]:
            # mqadmin leaves a topic's cluster / groups empty when they cannot be found
            async with limit:
                cluster = ""
                groups: list[str] = []
                try:
                    route = await admin.examine_topic_route_info(topic)
                    cluster = self._cluster_of(route, ci)
                    groups = await admin.query_topic_consume_by_who(topic, route)
                except Exception:
                    pass
                return cluster, groups

        found = await asyncio.gather(*(describe(t) for t in topics))
        table = Table(Col("#Cluster Name", 20), Col("#Topic", 48), Col("#Consumer Group", 48))
        rows = []
        for topic, (cluster, groups) in zip(topics, found, strict=True):
            for g in groups or [""]:
                table.add(cluster, topic, g)
            rows.append({"cluster": cluster, "topic": topic, "consumerGroups": groups})
        out.emit(text=table.render(), data={"topics": rows})

    @staticmethod
    def _cluster_of(route: TopicRouteData, ci: ClusterInfo) -> str:
        if not route.broker_datas:
            return ""
        bd = route.broker_datas[0]
        for cluster in sorted(ci.cluster_addr_table):
            if bd.broker_name in ci.cluster_addr_table[cluster]:
                return cluster
        return bd.cluster or ""


@register
class TopicRoute(Command):
    name = "topicRoute"
    help = "Examine topic route info"
    options = (TOPIC.but(required=True),)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        route = await admin.examine_topic_route_info(args.topic.strip())
        obj = route.to_obj()
        out.emit(text=fastjson_pretty(obj), data=without_nulls(obj))


@register
class TopicStatus(Command):
    name = "topicStatus"
    help = "Examine topic Status info"
    options = (TOPIC.but(required=True),)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topic = args.topic.strip()
        stats = await admin.examine_topic_stats(topic)
        table = Table(
            Col("#Broker Name", 32),
            Col("#QID", 4),
            Col("#Min Offset", 20),
            Col("#Max Offset", 20),
            Col("#Last Updated", gap="    "),
        )
        rows = []
        for mq, off in stats:
            ts = off.last_update_timestamp
            table.add(mq.broker_name, mq.queue_id, off.min_offset, off.max_offset, human_time(ts) if ts > 0 else "")
            rows.append(
                {
                    "brokerName": mq.broker_name,
                    "queueId": mq.queue_id,
                    "minOffset": off.min_offset,
                    "maxOffset": off.max_offset,
                    "lastUpdateTimestamp": ts,
                }
            )
        out.emit(text=table.render(), data={"topic": topic, "queues": rows})


@register
class UpdateTopic(OnBrokers):
    name = "updateTopic"
    help = "Update or create topic"
    options = (
        BROKER_ADDR.but(help="create topic to which broker"),
        CLUSTER.but(help="create topic to which cluster (every master)"),
        TOPIC.but(required=True),
        Opt("r", "readQueueNums", "set read queue nums (default 8)", type=int, default=8, metavar="N"),
        Opt("w", "writeQueueNums", "set write queue nums (default 8)", type=int, default=8, metavar="N"),
        Opt(
            "p",
            "perm",
            "set topic's permission(2|4|6), intro[2:W 4:R; 6:RW] (default 6)",
            type=int,
            default=PermName.PERM_READ | PermName.PERM_WRITE,
            metavar="PERM",
        ),
        Opt("o", "order", "set topic's order(true|false)", type=java_bool, default=False, metavar="BOOL"),
        Opt("u", "unit", "is unit topic (true|false)", type=java_bool, default=False, metavar="BOOL"),
        Opt("s", "hasUnitSub", "has unit sub (true|false)", type=java_bool, default=False, metavar="BOOL"),
        # RocketMQ 5's mqadmin option; the broker knows message.type (NORMAL|FIFO|DELAY|TRANSACTION|MIXED)
        Opt("a", "attributes", "attribute(+a=b,+c=d,-e), e.g. +message.type=FIFO", metavar="ATTRS"),
    )

    def validate(self, args: argparse.Namespace) -> None:
        super().validate(args)
        if args.readQueueNums < 0 or args.writeQueueNums < 0:
            raise UsageError("queue numbers must not be negative")
        if not 0 <= args.perm <= 15:
            raise UsageError(f"perm {args.perm} is not a permission (2:W 4:R 6:RW)")

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        tc = TopicConfig(
            args.topic.strip(),
            args.readQueueNums,
            args.writeQueueNums,
            args.perm,
            topic_sys_flag=build_sys_flag(args.unit, args.hasUnitSub),
            order=args.order,
        )
        doc: dict[str, Any] = {"brokers": [], "topicConfig": without_nulls(tc.to_obj())}

        def say(line: str) -> None:
            if not out.json:
                out.emit(text=line)

        async def create(addr: str) -> None:
            await admin.create_and_update_topic_config(addr, tc, args.attributes)
            doc["brokers"].append(addr)

        if args.brokerAddr:
            addr = args.brokerAddr.strip()
            await create(addr)
            if tc.order:
                broker_name = await admin.fetch_broker_name_by_addr(addr)
                conf = await admin.create_or_update_order_conf(
                    tc.topic_name, f"{broker_name}:{tc.write_queue_nums}", False
                )
                doc["orderConf"] = conf
                say(f"set broker orderConf. isOrder=true, orderConf=[{conf}]")
            say(f"create topic to {addr} success.")
        else:
            cluster = args.clusterName.strip()
            for addr in await admin.fetch_master_addr_by_cluster_name(cluster):
                await create(addr)
                say(f"create topic to {addr} success.")
            if tc.order:
                names = await admin.fetch_broker_name_by_cluster_name(cluster)
                conf = ";".join(f"{n}:{tc.write_queue_nums}" for n in names)
                await admin.create_or_update_order_conf(tc.topic_name, conf, True)
                doc["orderConf"] = conf
                say(f"set cluster orderConf. isOrder=true, orderConf=[{conf}]")
        out.emit(text=topic_config_string(tc), data=doc)


@register
class DeleteTopic(Command):
    name = "deleteTopic"
    help = "Delete topic from broker and NameServer."
    description = (
        "Delete topic from every broker (master and slaves) of the cluster, with "
        "its consume queues and consumer offsets, then from the NameServers."
    )
    options = (TOPIC.but(required=True), CLUSTER.but(required=True, help="delete topic from which cluster"))

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topic = args.topic.strip()
        cluster = args.clusterName.strip()
        addrs = await admin.fetch_master_and_slave_addr_by_cluster_name(cluster)
        route = await admin.examine_topic_route_info(topic)
        names = set(await admin.fetch_broker_name_by_cluster_name(cluster))
        on = sorted(bd.broker_name for bd in route.broker_datas)
        if not names.intersection(on):
            raise AdminError(f"topic {topic} is not on cluster {cluster} (its brokers: {', '.join(on) or 'none'})")
        await admin.delete_topic_in_broker(addrs, topic)
        if not out.json:
            out.emit(text=f"delete topic [{topic}] from cluster [{cluster}] success.")
        namesrvs = await admin.delete_topic_in_namesrv(topic, cluster)
        out.emit(
            text=f"delete topic [{topic}] from NameServer success.",
            data={"topic": topic, "cluster": cluster, "brokers": addrs, "nameServers": namesrvs},
        )


@register
class UpdateTopicPerm(OnBrokers):
    name = "updateTopicPerm"
    help = "Update topic perm"
    description = "Change a topic's permission on one broker or every master of a cluster, keeping its other fields."
    options = (
        BROKER_ADDR.but(help="update the topic on which broker"),
        CLUSTER.but(help="update the topic on every master of which cluster"),
        TOPIC.but(required=True),
        Opt("p", "perm", "topic's permission (2|4|6), intro[2:W; 4:R; 6:RW]", required=True, type=int, metavar="PERM"),
    )

    def validate(self, args: argparse.Namespace) -> None:
        super().validate(args)
        if args.perm not in (PermName.PERM_WRITE, PermName.PERM_READ, PermName.PERM_READ | PermName.PERM_WRITE):
            raise UsageError(f"perm {args.perm} is not 2 (W), 4 (R) or 6 (RW)")

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topic = args.topic.strip()
        addrs = await self.targets(admin, args)
        changed = []

        async def update(addr: str) -> int:
            tc = (await admin.all_topic_config(addr)).get(topic)
            if tc is None:
                raise AdminError(f"topic {topic} is not on broker {addr}")
            old = tc.perm
            tc.perm = args.perm
            await admin.create_and_update_topic_config(addr, tc)
            return old

        async for addr, old in each_broker(out, addrs, update, alone_raises=True):
            changed.append({"brokerAddr": addr, "oldPerm": old, "perm": args.perm})
            if not out.json:
                out.emit(text=f"update topic perm from {old} to {args.perm} in {addr} success.")
        if out.json:
            out.emit(data={"topic": topic, "brokers": changed})


@register
class TopicClusterList(Command):
    name = "topicClusterList"
    help = "get cluster info for topic"
    options = (TOPIC.but(required=True),)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topic = args.topic.strip()
        route = await admin.examine_topic_route_info(topic)
        ci = await admin.examine_broker_cluster_info()
        names = {bd.broker_name for bd in route.broker_datas}
        clusters = sorted(c for c, brokers in ci.cluster_addr_table.items() if names & set(brokers))
        out.emit(text="\n".join(clusters), data={"topic": topic, "clusters": clusters})


@register
class AllocateMQ(Command):
    name = "allocateMQ"
    help = "Allocate MQ"
    description = "How the default strategy (averagely) would share the topic's queues among the given client ids."
    options = (
        TOPIC.but(required=True),
        Opt("i", "ipList", "client ids, comma separated", required=True, metavar="IDS"),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topic = args.topic.strip()
        route = await admin.examine_topic_route_info(topic)
        mqs = sorted(topic_route_to_subscribe_info(topic, route))
        cids = sorted({c.strip() for c in args.ipList.split(",") if c.strip()})
        if not cids:
            raise UsageError("-i/--ipList: no client id given")
        result = {cid: [mq.to_obj() for mq in allocate_averagely("", cid, mqs, cids)] for cid in cids}
        text = "\n".join(
            f"{cid}: " + ", ".join(f"{q['brokerName']}:{q['queueId']}" for q in queues)
            for cid, queues in result.items()
        )
        out.emit(text=f"topic: {topic}\n{text}", data={"topic": topic, "result": result})


@register
class UpdateOrderConf(Command):
    name = "updateOrderConf"
    help = "Create or update or delete order conf"
    description = (
        "The NameServers' ORDER_TOPIC_CONFIG of a topic (brokerName:queueNums;...), "
        "which routes carry as orderTopicConf when orderMessageEnable is on: put, get or delete."
    )
    options = (
        TOPIC.but(required=True),
        Opt("m", "method", "put | get | delete", required=True, metavar="METHOD"),
        Opt("v", "orderConf", "with put: brokerName1:num;brokerName2:num", metavar="CONF"),
    )

    def validate(self, args: argparse.Namespace) -> None:
        args.method = args.method.strip().lower()
        if args.method not in ("put", "get", "delete"):
            raise UsageError(f"-m: {args.method!r} is not put, get or delete")
        if args.method == "put" and not (args.orderConf or "").strip():
            raise UsageError("-m put needs -v/--orderConf")

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        topic = args.topic.strip()
        if args.method == "put":
            conf = args.orderConf.strip()
            await admin.put_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, topic, conf)
            text = f"update orderConf success. topic=[{topic}], orderConf=[{conf}]"
        elif args.method == "get":
            value = await admin.get_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
            if value is None:
                raise AdminError(f"no orderConf for topic {topic} on NameServer {admin.namesrv_desc}")
            conf = value
            text = f"get orderConf success. topic=[{topic}], orderConf=[{conf}]"
        else:
            await admin.delete_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
            conf = None
            text = f"delete orderConf success. topic=[{topic}]"
        out.emit(text=text, data={"topic": topic, "method": args.method, "orderConf": conf})
