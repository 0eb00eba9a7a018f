"""exportMetadata, exportConfigs, exportMetrics (mqadmin's export/ commands): a JSON file
each (metadata.json, configs.json, metrics.json) in -f's folder, in mqadmin's layout, so
what reads mqadmin's exports reads these."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rmq.admin.admin import MQAdmin
from rmq.admin.base import BROKER_ADDR, CLUSTER, AdminError, Command, OnBrokers, Opt, Output, UsageError, register
from rmq.common.clock import now_ms
from rmq.common.mixall import MASTER_ID, is_dlq_topic, is_retry_topic, is_sys_topic

_FILE_PATH = Opt(
    "f",
    "filePath",
    "export the file to this folder | default /tmp/rocketmq/export",
    default="/tmp/rocketmq/export",
    metavar="DIR",
)
#: the broker config keys exportConfigs writes (ExportConfigsCommand.needBrokerProprties)
CONFIG_KEYS = (
    "brokerClusterName",
    "brokerId",
    "brokerName",
    "brokerRole",
    "fileReservedTime",
    "filterServerNums",
    "flushDiskType",
    "maxMessageSize",
    "messageDelayLevel",
    "msgTraceTopicName",
    "slaveReadEnable",
    "traceOn",
    "traceTopicEnable",
    "useTLS",
    "autoCreateTopicEnable",
    "autoCreateSubscriptionGroup",
)
#: subscription groups every broker has (MixAll / the broker's built-in groups)
_SYSTEM_GROUPS = frozenset(
    {
        "TOOLS_CONSUMER",
        "FILTERSRV_CONSUMER",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PULL",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
        "CID_RMQ_SYS_TRANS",
    }
)


def _write(out: Output, folder: str, name: str, doc: dict[str, Any]) -> None:
    path = Path(folder) / name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as e:
        raise AdminError(f"cannot write {path}: {e.strerror or e}") from None
    out.emit(text=f"export {path} success", data={"file": str(path), **doc})


async def _masters(admin: MQAdmin, cluster: str) -> dict[str, str]:
    """brokerName -> master address of the cluster's groups that have a master."""
    return {
        bd.broker_name: bd.broker_addrs[MASTER_ID]
        for bd in await admin.fetch_cluster_brokers(cluster)
        if MASTER_ID in bd.broker_addrs
    }


@register
class ExportMetadata(OnBrokers):
    name = "exportMetadata"
    help = "export metadata"
    description = (
        "The topics and subscription groups of a broker, or of every master of a cluster "
        "merged, to <filePath>/metadata.json (-t: topics only, to topic.json; -g: groups "
        "only, to subscriptionGroup.json). System topics and groups are left out; %RETRY% and "
        "%DLQ% topics too unless -s."
    )
    options = (
        BROKER_ADDR.but(help="choose a broker to export"),
        CLUSTER.but(help="choose a cluster to export"),
        _FILE_PATH,
        Opt("t", "topic", "only export topic metadata", arg=False),
        Opt("g", "subscriptionGroup", "only export subscriptionGroup metadata", arg=False),
        Opt("s", "specialTopic", "need retryTopic and dlqTopic", arg=False),
    )

    def validate(self, args: argparse.Namespace) -> None:
        super().validate(args)
        if args.topic and args.subscriptionGroup:
            raise UsageError("-t and -g exclude each other")

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        addrs = await self.targets(admin, args)
        topics: dict[str, Any] = {}
        groups: dict[str, Any] = {}
        for addr in addrs:
            for name, tc in (await admin.all_topic_config(addr)).items():
                special = is_retry_topic(name) or is_dlq_topic(name)
                if is_sys_topic(name) or (special and not args.specialTopic):
                    continue
                obj = tc.to_obj()
                old = topics.get(name)
                if old is not None:  # the same topic on several masters: the queues add up
                    obj["readQueueNums"] += old["readQueueNums"]
                    obj["writeQueueNums"] += old["writeQueueNums"]
                topics[name] = obj
            for name, cfg in (await admin.subscription_groups(addr)).items():
                if name not in _SYSTEM_GROUPS:
                    groups[name] = cfg
        doc: dict[str, Any] = {"exportTime": now_ms()}
        if args.topic:
            _write(out, args.filePath, "topic.json", doc | {"topicConfigTable": dict(sorted(topics.items()))})
        elif args.subscriptionGroup:
            _write(
                out,
                args.filePath,
                "subscriptionGroup.json",
                doc | {"subscriptionGroupTable": dict(sorted(groups.items()))},
            )
        else:
            doc |= {
                "topicConfigTable": dict(sorted(topics.items())),
                "subscriptionGroupTable": dict(sorted(groups.items())),
            }
            _write(out, args.filePath, "metadata.json", doc)


@register
class ExportConfigs(Command):
    name = "exportConfigs"
    help = "export configs"
    description = "The cluster's size and each master's main config keys, to <filePath>/configs.json."
    options = (CLUSTER.but(required=True, help="choose a cluster to export"), _FILE_PATH)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        brokers = await admin.fetch_cluster_brokers(args.clusterName.strip())
        configs: dict[str, dict[str, str]] = {}
        masters = slaves = 0
        for bd in brokers:
            masters += MASTER_ID in bd.broker_addrs
            slaves += sum(1 for i in bd.broker_addrs if i != MASTER_ID)
            if MASTER_ID in bd.broker_addrs:
                props = await admin.get_broker_config(bd.broker_addrs[MASTER_ID])
                configs[bd.broker_name] = {k: props[k] for k in CONFIG_KEYS if k in props}
        scale = {"namesrvSize": len(admin.namesrv_addrs), "masterBrokerSize": masters, "slaveBrokerSize": slaves}
        _write(out, args.filePath, "configs.json", {"clusterScale": scale, "brokerConfigs": configs})


def _first_figure(text: str | None) -> float:
    """The 10-second figure of a rate key (``putTps``: three space-separated figures)."""
    try:
        return float((text or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0


def _int(text: str | None) -> int:
    try:
        return int(text or "0")
    except ValueError:
        return 0


@register
class ExportMetrics(Command):
    name = "exportMetrics"
    help = "export metrics"
    description = (
        "Per master of the cluster: version, disk ratios, topic and group counts, TPS and "
        "today's message counts (from its runtime info), and the cluster's totals, to "
        "<filePath>/metrics.json."
    )
    options = (CLUSTER.but(required=True, help="choose a cluster to export"), _FILE_PATH)

    async def run(self, admin: MQAdmin, args: argparse.Namespace, out: Output) -> None:
        report: dict[str, Any] = {}
        total_tps = {
            "totalNormalInTps": 0.0,
            "totalNormalOutTps": 0.0,
            "totalTransInTps": 0.0,
            "totalScheduleInTps": 0.0,
        }
        total_day = {"normalOneDayInNum": 0, "normalOneDayOutNum": 0, "transOneDayInNum": 0, "scheduleOneDayInNum": 0}
        for name, addr in sorted((await _masters(admin, args.clusterName.strip())).items()):
            kv = await admin.fetch_broker_runtime_stats(addr)
            topics = await admin.all_topic_config(addr)
            groups = await admin.subscription_groups(addr)
            tps = {
                "normalInTps": _first_figure(kv.get("putTps")),
                "normalOutTps": _first_figure(kv.get("getTransferedTps")),
                "transInTps": 0.0,
                "scheduleInTps": 0.0,
            }
            day = {
                "normalOneDayInNum": _int(kv.get("msgPutTotalTodayNow")) - _int(kv.get("msgPutTotalTodayMorning")),
                "normalOneDayOutNum": _int(kv.get("msgGetTotalTodayNow")) - _int(kv.get("msgGetTotalTodayMorning")),
                "transOneDayInNum": 0,
                "scheduleOneDayInNum": 0,
            }
            for k, v in tps.items():
                total_tps["total" + k[0].upper() + k[1:]] += v
            for k, n in day.items():
                total_day[k] += n
            report[name] = {
                "runtimeVersion": {"rocketmqVersion": kv.get("brokerVersionDesc", ""), "clientInfo": []},
                "runtimeQuota": {
                    "diskRatio": {
                        "commitLogDiskRatio": kv.get("commitLogDiskRatio", ""),
                        "consumeQueueDiskRatio": kv.get("consumeQueueDiskRatio", ""),
                    },
                    "topicSize": len(topics),
                    "groupSize": len(groups),
                    "tps": tps,
                    "oneDayNum": day,
                },
                "runtimeEnv": {},
            }
        doc = {"evaluateReport": report, "totalData": {"totalTps": total_tps, "totalOneDayNum": total_day}}
        _write(out, args.filePath, "metrics.json", doc)
