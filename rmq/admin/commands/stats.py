"""brokerConsumeStats, producer, consumerStatus, statsAll (mqadmin's broker/, producer/,
consumer/ and stats/ views of what brokers and online clients report)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from rmq.admin.admin import MQAdmin, route_brokers
from rmq.admin.base import (
    BROKER_ADDR,
    GROUP,
    TOPIC,
    AdminError,
    Command,
    Opt,
    Output,
    describe_error,
    java_bool,
    register,
)
from rmq.admin.commands.consumer import date_text
from rmq.admin.output import Col, Table, mq_version_desc
from rmq.common.mixall import MASTER_ID, is_dlq_topic, is_retry_topic
from rmq.protocol.bodies import MessageQueue
from rmq.protocol.running_info import ConsumerRunningInfo


@register
class BrokerConsumeStats(Command):
    name = "brokerConsumeStats"
    help = "Fetch broker consume stats data"
    description = "Every subscription group of a broker, per topic and queue: offsets and the backlog."
    options = (
        BROKER_ADDR.but(required=True),
        Opt("l", "level", "print only queues whose diff is at least this (default 0)", type=int, default=0),
        Opt("o", "order", "ordered topics only (true|false)", type=java_bool, default=False, metavar="BOOL"),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        stats = await admin.broker_consume_stats(args.brokerAddr.strip(), args.order)
        table = Table(
            Col("#Topic", 64),
            Col("#Group", 64),
            Col("#Broker Name", 32),
            Col("#QID", 4),
            Col("#Broker Offset", 20),
            Col("#Consumer Offset", 20),
            Col("#Diff", 20),
            Col("#LastTime"),
        )
        rows = []
        for group, per_topic in stats.groups:
            for cs in per_topic:
                for mq, ow in cs.offset_table:
                    if ow.diff < args.level:
                        continue
                    last = date_text(ow.last_timestamp)
                    table.add(
                        mq.topic,
                        group,
                        mq.broker_name,
                        mq.queue_id,
                        ow.broker_offset,
                        ow.consumer_offset,
                        ow.diff,
                        last,
                    )
                    rows.append(
                        {
                            "topic": mq.topic,
                            "group": group,
                            "brokerName": mq.broker_name,
                            "queueId": mq.queue_id,
                            "brokerOffset": ow.broker_offset,
                            "consumerOffset": ow.consumer_offset,
                            "diff": ow.diff,
                            "lastTimestamp": ow.last_timestamp,
                        }
                    )
        out.emit(
            text=f"{table.render()}\n\nDiff Total: {stats.total_diff}",
            data={"brokerAddr": stats.broker_addr, "queues": rows, "totalDiff": stats.total_diff},
        )


@register
class Producer(Command):
    name = "producer"
    help = "Query producer's instances, connection, status, etc."
    options = (BROKER_ADDR.but(long="broker", required=True, help="broker address"),)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        table = await admin.all_producer_info(args.broker.strip())
        lines: list[str] = []
        doc: dict[str, list[dict[str, Any]]] = {}
        for group in sorted(table.data):
            infos = sorted(table.data[group], key=lambda p: p.client_id)
            lines.append(f"producer group ({group}) instances are:")
            lines += [
                f"  clientId={p.client_id}, remoteIP={p.remote_ip}, language={p.language}, "
                f"version={mq_version_desc(p.version)}, lastUpdateTimestamp={p.last_update_timestamp}"
                for p in infos
            ]
            doc[group] = [p.to_obj() for p in infos]
        out.emit(text="\n".join(lines) or "no producer online", data={"producers": doc})


def running_info_text(info: ConsumerRunningInfo) -> str:
    """ConsumerRunningInfo.formatString's sections."""
    lines = ["#Consumer Properties#"]
    lines += [f"{k:<40}: {v}" for k, v in sorted(info.properties.items())]
    lines += ["", "#Consumer Subscription#"]
    for i, sd in enumerate(info.subscription_set, 1):
        cf = "true" if sd.class_filter_mode else "false"
        lines.append(f"{i:03d} Topic: {sd.topic:<40} ClassFilter: {cf:<8} SubExpression: {sd.sub_string}")
    lines += ["", "#Consumer Offset#", f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  #Consumer Offset"]
    for mq in sorted(info.mq_table):
        lines.append(f"{mq.topic:<64}  {mq.broker_name:<32}  {mq.queue_id:<4}  {info.mq_table[mq].commit_offset}")
    lines += ["", "#Consumer MQ Detail#"]
    for mq in sorted(info.mq_table):
        lines.append(f"{mq.topic:<64}  {mq.broker_name:<32}  {mq.queue_id:<4}  {info.mq_table[mq].to_obj()}")
    lines += ["", "#Consumer RT&TPS#"]
    for topic in sorted(info.status_table):
        st = info.status_table[topic]
        lines.append(
            f"{topic:<64}  {st.pull_rt:14.2f}  {st.pull_tps:14.2f}  {st.consume_rt:14.2f}  "
            f"{st.consume_ok_tps:14.2f}  {st.consume_failed_tps:14.2f}  {st.consume_failed_msgs:14d}"
        )
    if info.jstack is not None:
        lines += ["", "#Consumer jstack#", info.jstack]
    return "\n".join(lines)


def _running_info_doc(info: ConsumerRunningInfo) -> dict[str, Any]:
    return {
        "properties": dict(sorted(info.properties.items())),
        "subscriptions": [{"topic": s.topic, "subExpression": s.sub_string} for s in info.subscription_set],
        "queues": [
            {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, **info.mq_table[mq].to_obj()}
            for mq in sorted(info.mq_table)
        ],
        "status": {t: dataclasses.asdict(s) for t, s in sorted(info.status_table.items())},
        "jstack": info.jstack,
    }


@register
class ConsumerStatus(Command):
    name = "consumerStatus"
    help = "Query consumer's internal data structure"
    description = (
        "Ask each online client of a group, through its broker (GET_CONSUMER_RUNNING_INFO), "
        "for its running info: with -i that client's properties, subscription, queues and "
        "rates; without, every client, whether their subscriptions agree and whether "
        "each queue is held by exactly one of them."
    )
    options = (
        GROUP.but(required=True),
        Opt("i", "clientId", "the consumer's client id", metavar="CLIENT_ID"),
        Opt("s", "jstack", "with -i: the client's task dump too", arg=False),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        group = args.consumerGroup.strip()
        if args.clientId:
            client = args.clientId.strip()
            info = await self._info(admin, group, client, args.jstack)
            out.emit(
                text=running_info_text(info),
                data={"consumerGroup": group, "clientId": client, **_running_info_doc(info)},
            )
            return
        clients = sorted(c.client_id for c in (await admin.examine_consumer_connection_info(group)).connections)
        infos: dict[str, ConsumerRunningInfo] = {}
        lines = []
        for i, client in enumerate(clients, 1):
            try:
                infos[client] = await self._info(admin, group, client, False)
            except Exception as e:
                out.error(f"client {client}: {describe_error(e)}")
                continue
            version = infos[client].properties.get("PROP_CLIENT_VERSION", "")
            lines.append(f"{i:03d}  {client:<40} {version}")
        subs = {tuple(sorted((s.topic, s.sub_string) for s in info.subscription_set)) for info in infos.values()}
        same = len(subs) <= 1
        held: dict[MessageQueue, list[str]] = {}
        for client, info in infos.items():
            for mq in info.mq_table:
                held.setdefault(mq, []).append(client)
        twice = sorted(mq for mq, cs in held.items() if len(cs) > 1)
        lines.append(
            "Same subscription in the same group of consumer"
            if same
            else "WARN: Different subscription in the same group of consumer!!!"
        )
        lines.append("Rebalance OK" if not twice else f"Rebalance: {len(twice)} queue(s) held by more than one client")
        out.emit(
            text="\n".join(lines),
            data={
                "consumerGroup": group,
                "clients": [
                    {
                        "clientId": c,
                        "version": infos[c].properties.get("PROP_CLIENT_VERSION"),
                        "queues": [mq.to_obj() for mq in sorted(infos[c].mq_table)],
                    }
                    for c in clients
                    if c in infos
                ],
                "sameSubscription": same,
                "rebalanceOk": not twice,
            },
        )

    @staticmethod
    async def _info(admin: MQAdmin, group: str, client: str, jstack: bool) -> ConsumerRunningInfo:
        try:
            return await admin.get_consumer_running_info(group, client, jstack)
        except Exception as e:
            raise AdminError(f"the consumer <{group}> <{client}> did not answer: {describe_error(e)}") from None


TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"  # BrokerStatsManager's names, as mqadmin asks for them
GROUP_GET_NUMS = "GROUP_GET_NUMS"


async def _stats_at_masters(admin: MQAdmin, masters: list[str], name: str, key: str) -> tuple[float, int]:
    """(minute TPS, 24-hour count) of one stats item summed over the masters; a broker
    that has no such item (nothing counted yet) or does not answer adds nothing, as in
    StatsAllSubCommand."""
    tps, total = 0.0, 0
    for addr in masters:
        try:
            data = await admin.view_broker_stats_data(addr, name, key)
        except Exception:
            continue
        tps += data.stats_minute.tps
        total += data.compute_24hour_sum()
    return tps, total


@register
class StatsAll(Command):
    name = "statsAll"
    help = "Topic and Consumer tps stats"
    description = (
        "Per topic and each group consuming it: the backlog (accumulation), the put and the "
        "group's get TPS over the last minute and their counts over the last 24 hours, from "
        "the masters' stats items (VIEW_BROKER_STATS_DATA), as mqadmin statsAll."
    )
    options = (
        Opt("a", "activeTopic", "print active topic only (something put or got in the last 24 hours)", arg=False),
        TOPIC.but(help="print select topic only"),
    )

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        if args.topic:
            topics = [args.topic.strip()]
        else:
            topics = sorted(
                t for t in await admin.fetch_all_topic_list() if not is_retry_topic(t) and not is_dlq_topic(t)
            )
        lines = [
            f"{'#Topic':<64}  {'#Consumer Group':<64} {'#Accumulation':>12} {'#InTPS':>11} {'#OutTPS':>11} "
            f"{'#InMsg24Hour':>14} {'#OutMsg24Hour':>14}"
        ]
        rows = []
        for topic in topics:
            try:
                route = await admin.examine_topic_route_info(topic)
                groups = await admin.query_topic_consume_by_who(topic, route)
            except Exception as e:
                out.warn(f"topic {topic}: {describe_error(e)}")
                continue
            masters = [bd.broker_addrs[MASTER_ID] for bd in route.broker_datas if MASTER_ID in bd.broker_addrs]
            in_tps, in_24h = await _stats_at_masters(admin, masters, TOPIC_PUT_NUMS, topic)
            if not groups:
                if not args.activeTopic or in_24h > 0:
                    lines.append(
                        f"{topic:<64}  {'':<64} {0:>12d} {in_tps:>11.2f} {'':>11} {in_24h:>14d} {'NO_CONSUMER':>14}"
                    )
                    rows.append(
                        {"topic": topic, "consumerGroup": None, "inTps": round(in_tps, 2), "inMsg24Hour": in_24h}
                    )
                continue
            for group in groups:
                out_tps, out_24h = await _stats_at_masters(admin, masters, GROUP_GET_NUMS, f"{topic}@{group}")
                try:
                    # the topic's brokers: a group never online has no retry route
                    diff = max(
                        0, (await admin.examine_consume_stats(group, topic, route_brokers(route))).compute_total_diff()
                    )
                except Exception:
                    diff = 0  # mqadmin shows such a group with no backlog
                if args.activeTopic and in_24h <= 0 and out_24h <= 0:
                    continue
                lines.append(
                    f"{topic:<64}  {group:<64} {diff:>12d} {in_tps:>11.2f} {out_tps:>11.2f} {in_24h:>14d} {out_24h:>14d}"
                )
                rows.append(
                    {
                        "topic": topic,
                        "consumerGroup": group,
                        "accumulation": diff,
                        "inTps": round(in_tps, 2),
                        "outTps": round(out_tps, 2),
                        "inMsg24Hour": in_24h,
                        "outMsg24Hour": out_24h,
                    }
                )
        out.emit(text="\n".join(lines), data={"stats": rows})
